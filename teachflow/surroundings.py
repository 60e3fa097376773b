"""The Python objects around traced code: where it finds tensors, and where it could leave one.

Tracing runs the user's Python once. Two things about the objects around that code matter:

- **Names.** A captured tensor is best shown by the name the code reaches it by (``w``,
  ``self.w``, ``model.layer.w``, ``opt.state[0]``), and when that name lasts (a global, an
  attribute, a dict entry), the trace assumes it keeps naming the same tensor: rebinding it
  between calls must retrace (see `staging.Guard`).
- **Leaks.** A Python assignment inside the traced code (``self.w = ...``, ``d["m"] = ...``, a
  global or nonlocal) runs once, while tracing. If it stores a tensor of the trace, that place
  would keep a symbolic tensor with no values: it is found, put back, and reported.

Both need the same thing: the places (dict entries, list items, attributes) reachable from some
roots, a few levels deep. `walk` visits them breadth first, so the first place a tensor is found
at is its shortest name, and it stops after a budget of places, so a notebook with thousands of
globals costs a few milliseconds, not seconds.
"""

from __future__ import annotations

import contextlib
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

#: How deep `walk` goes below its roots, and how many places it visits at most.
DEPTH = 3
BUDGET = 5_000

# Values never looked into: they hold no user state (or too much to look at).
_OPAQUE = (type, types.ModuleType, types.FunctionType, types.BuiltinFunctionType,
           types.MethodType, str, bytes, int, float, complex, bool, np.ndarray, np.generic)


@dataclass(frozen=True, eq=False)
class Place:
    """A place that holds a value: an entry of a dict or list (``kind="item"``), or an attribute
    of an object (``kind="attr"``); `name` is how code writes it (``model.w``, ``P['w']``)."""

    container: Any
    key: Any
    kind: str
    name: str

    def get(self) -> Any:
        if self.kind == "item":
            return self.container[self.key]
        return object.__getattribute__(self.container, self.key)

    def holds(self, value: Any) -> bool:
        """Does this place hold `value` now (the very object)?"""
        try:
            return self.get() is value
        except Exception:  # the entry or attribute is gone
            return False


def walk(roots: list[tuple[str, Any]], skip: tuple = ()) -> Iterator[tuple[Place, Any]]:
    """Every place reachable from `roots`, breadth first, at most `DEPTH` levels below them and
    `BUDGET` places in all, with its value. A root is ``(name, container)``; a root named ""
    is a namespace (globals, locals), whose entries are named by their keys alone (``w``).
    Values of the types in `skip` are not looked into."""
    seen: set[int] = set()
    level = list(roots)
    budget = BUDGET
    for _ in range(DEPTH + 1):
        below = []
        for name, container in level:
            if id(container) in seen or isinstance(container, _OPAQUE + skip):
                continue
            seen.add(id(container))
            for place in _places(name, container):
                budget -= 1
                if budget < 0:
                    return
                try:
                    value = place.get()
                except Exception:
                    continue
                yield place, value
                below.append((place.name, value))
        level = below


def _places(name: str, container: Any) -> list[Place]:
    """The places directly inside `container` (named "": a namespace)."""
    if isinstance(container, dict):
        return [Place(container, k, "item", f"{name}[{k!r}]" if name else str(k))
                for k in list(container)]
    if isinstance(container, list | tuple):
        return [Place(container, i, "item", f"{name}[{i}]") for i in range(len(container))]
    return [Place(container, attr, "attr", f"{name}.{attr}") for attr in _attributes(container)]


def _attributes(obj: Any) -> list[str]:
    """The names of an object's own attributes: its ``__dict__`` and its ``__slots__`` (read
    without calling a ``__getattr__`` the object may define)."""
    names: list[str] = []
    with contextlib.suppress(Exception):  # (no __dict__, or an odd one)
        names += list(object.__getattribute__(obj, "__dict__"))
    for klass in type(obj).__mro__:
        slots = klass.__dict__.get("__slots__", ())
        names += [s for s in ((slots,) if isinstance(slots, str) else slots)
                  if s not in ("__dict__", "__weakref__")]
    return names


# --- Containers, as they were before a trace -----------------------------------------------------


@dataclass(eq=False)
class Snapshot:
    """A mutable container's contents before the trace, so that what the trace left in it can
    be found and put back."""

    name: str
    container: Any
    before: dict  # key or attribute -> its value then

    def changed(self) -> Iterator[tuple[Any, str, Any]]:
        """``(key, name, value)`` for each entry whose value is not what it was."""
        for place in _places(self.name, self.container):
            try:
                value = place.get()
            except Exception:
                continue
            if place.key not in self.before or self.before[place.key] is not value:
                yield place.key, place.name, value

    def put_back(self, key: Any) -> None:
        container = self.container
        if isinstance(container, list):
            container[:] = [self.before[i] for i in sorted(self.before)]
        elif isinstance(container, dict):
            if key in self.before:
                container[key] = self.before[key]
            else:
                del container[key]
        elif key in self.before:
            object.__setattr__(container, key, self.before[key])
        else:
            object.__delattr__(container, key)


def snapshots(roots: list[tuple[str, Any]], skip: tuple = ()) -> list[Snapshot]:
    """The mutable containers reachable from `roots` (dicts, lists, objects with attributes),
    each with its contents now."""
    taken: list[Snapshot] = []
    seen: set[int] = set()

    def take(name: str, container: Any) -> None:
        if id(container) in seen or isinstance(container, _OPAQUE + skip + (tuple,)):
            return
        seen.add(id(container))
        places = _places(name, container)
        before = {}
        for place in places:
            try:
                before[place.key] = place.get()
            except Exception:
                continue
        taken.append(Snapshot(name, container, before))

    for name, root in roots:
        take(name, root)
    for place, value in walk(roots, skip):
        take(place.name, value)
    return taken


def global_names(code: types.CodeType, namespace: dict, depth: int = 2) -> set[str]:
    """The global names `code` uses (its own, those of the functions defined inside it, and,
    `depth` levels down, those of the module's functions it calls): the part of a module a
    traced function can reach. Walking only these keeps a trace cheap in a big module."""
    names: set[str] = set()
    codes = [code]
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    if depth > 0:
        for name in list(names):
            value = namespace.get(name)  # (a plain function's attributes: no user __getattr__)
            if isinstance(value, types.FunctionType) and value.__globals__ is namespace:
                names |= global_names(value.__code__, namespace, depth - 1)
    return names


def holding(value: Any, wanted: Any, depth: int = DEPTH) -> bool:
    """Does `value`, or something inside it (a few levels deep), satisfy `wanted`?"""
    if wanted(value):
        return True
    if depth == 0 or isinstance(value, _OPAQUE):
        return False
    try:
        inside = (list(value.values()) if isinstance(value, dict) else
                  list(value) if isinstance(value, list | tuple | set | frozenset) else
                  [object.__getattribute__(value, a) for a in _attributes(value)])
    except Exception:
        return False
    return any(holding(v, wanted, depth - 1) for v in inside[:1000])
