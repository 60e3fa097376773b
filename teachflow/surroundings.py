"""The Python objects around traced code: where it finds tensors, and where it could leave one.

Tracing runs the user's Python once. Two things about the objects around that code matter:

- **Names.** A captured tensor is best shown by the name the code reaches it by (``w``,
  ``self.w``, ``model.layer.w``, ``opt.state[0]``), and when that name lasts (a global, a closure
  variable, an attribute, a dict entry), the trace assumes it keeps naming the same tensor. The
  `Path` to it is followed again at every call, link by link from its root, so rebinding any link
  (``model = Model()`` in a notebook cell run again, ``model.w = new_w``) retraces (see
  `staging.Guard`).
- **Leaks.** A Python assignment inside the traced code (``self.w = ...``, ``d["m"] = ...``,
  ``Counter.total = ...``, a global or nonlocal) runs once, while tracing. If it stores a tensor
  of the trace, that place would keep a symbolic tensor with no values: it is found, put back, and
  reported.

Both need the same thing: the places (dict entries, list items, attributes, the contents of sets)
reachable from some roots, a few levels deep. `walk` visits them breadth first, so the first place
a tensor is found at is its shortest name, and it stops after a budget of places, so a notebook
with thousands of globals costs a few milliseconds, not seconds. Libraries (NumPy, teachflow, the
standard library) are not looked into: they hold no state of the learner's.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import types
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.errors import is_library_file

#: How deep `walk` goes below its roots, and how many places it visits at most.
DEPTH = 8
BUDGET = 5_000

# Values never looked into: they hold no user state (or too much to look at).
_OPAQUE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, str, bytes, int,
           float, complex, bool, np.ndarray, np.generic, type(None))


def _opaque(value: Any, skip: tuple) -> bool:
    """Not looked into: plain values, functions, and the modules of libraries, their classes
    and the objects of their classes (a random generator, a test library's state), but for
    containers and teachflow's own objects (a model, an optimizer), which hold the user's
    tensors."""
    if isinstance(value, _OPAQUE + skip):
        return True
    if isinstance(value, types.ModuleType):
        return not _is_users(value.__name__)
    if isinstance(value, _CONTAINERS):
        return False
    module = value.__module__ if isinstance(value, type) else type(value).__module__
    return not (_is_users(module) or module.split(".")[0] == "teachflow")


_CONTAINERS = (dict, list, tuple, collections.deque, set, frozenset, types.CellType)


def _is_users(module_name: str) -> bool:
    """Is the module of this name the learner's code (a notebook, a script, their package),
    rather than the standard library's or an installed library's?"""
    if module_name == "__main__":
        return True
    if module_name.split(".")[0] in sys.stdlib_module_names:
        return False
    file = getattr(sys.modules.get(module_name), "__file__", None)
    return not (isinstance(file, str) and (is_library_file(file) or any(
        f"{os.sep}{d}{os.sep}" in file for d in ("site-packages", "dist-packages"))))


@dataclass(frozen=True, eq=False)
class Path:
    """How code reaches a value from a root that lasts: ``model.encoder.w`` is the module's
    globals, then ``"model"``, ``.encoder``, ``.w``. Only the root is held; every link is looked
    up again when asked, so a rebinding anywhere along the way is seen."""

    root: Any
    steps: tuple[tuple[str, Any], ...]  # ("item", key) or ("attr", name)
    name: str

    def resolve(self) -> Any:
        value = self.root
        for kind, key in self.steps:
            value = _get(value, kind, key)
        return value

    def holds(self, value: Any) -> bool:
        """Does following the path now lead to `value` (the very object)?"""
        try:
            return self.resolve() is value
        except Exception:  # a link is gone
            return False


@dataclass(frozen=True, eq=False)
class Place:
    """A place that holds a value: an entry of a dict, list or deque (``kind="item"``), an
    attribute of an object, a class, a module or a closure cell (``kind="attr"``), or a member of
    a set (``kind="member"``); `name` is how code writes it (``model.w``, ``P['w']``). `parent`
    is the place holding the container, up to a root that lasts (None: the container itself is
    the root)."""

    container: Any
    key: Any
    kind: str
    name: str
    parent: Place | None = None

    def get(self) -> Any:
        return _get(self.container, self.kind, self.key)

    def holds(self, value: Any) -> bool:
        """Does this place hold `value` now (the very object)?"""
        try:
            return self.get() is value
        except Exception:  # the entry or attribute is gone
            return False

    def path(self) -> Path:
        """From the root, through every container on the way, to this place."""
        steps, place, root = [], self, self.container
        while place is not None:
            steps.append((place.kind, place.key))
            root, place = place.container, place.parent
        return Path(root, tuple(reversed(steps)), self.name)


def _get(container: Any, kind: str, key: Any) -> Any:
    if kind == "item":
        return container[key]
    if kind == "member":
        if key not in container:
            raise KeyError(key)
        return key
    return object.__getattribute__(container, key)


def walk(roots: list[tuple[str, Any, Place | None]], skip: tuple = ()) -> Iterator[
        tuple[Place, Any]]:
    """Every place reachable from `roots`, breadth first, at most `DEPTH` levels below them and
    `BUDGET` places in all, with its value. A root is ``(name, container, place)``: `place` is
    where the container is held when that lasts (a global), or None; a root named "" is a
    namespace (globals, locals), whose entries are named by their keys alone (``w``). Values of
    the types in `skip` are not looked into."""
    seen: set[int] = set()
    level = list(roots)
    budget = BUDGET
    for _ in range(DEPTH + 1):
        below = []
        for name, container, held_at in level:
            if id(container) in seen or _opaque(container, skip):
                continue
            seen.add(id(container))
            for place in _places(name, container, held_at):
                budget -= 1
                if budget < 0:
                    return
                try:
                    value = place.get()
                except Exception:
                    continue
                yield place, value
                below.append((place.name, value, place))
        level = below


def _places(name: str, container: Any, parent: Place | None = None) -> list[Place]:
    """The places directly inside `container` (named "": a namespace)."""
    if isinstance(container, dict):
        return [Place(container, k, "item", f"{name}[{k!r}]" if name else str(k), parent)
                for k in list(container)]
    if isinstance(container, list | tuple | collections.deque):
        return [Place(container, i, "item", f"{name}[{i}]", parent)
                for i in range(len(container))]
    if isinstance(container, set | frozenset):
        return [Place(container, v, "member", f"an element of {name}", parent)
                for v in list(container)]
    places = [Place(container, attr, "attr", f"{name}.{attr}", parent)
              for attr in _attributes(container)]
    if not isinstance(container, type | types.ModuleType | types.CellType):
        # Its class too (``type(self).count = ...``), if it is the user's: see `_opaque`.
        places.append(Place(container, "__class__", "attr", f"type({name})", parent))
    return places


def _attributes(obj: Any) -> list[str]:
    """The names of an object's own attributes: its ``__dict__`` (a class's own, a module's
    globals) and its ``__slots__`` (read without calling a ``__getattr__`` the object may
    define)."""
    names: list[str] = []
    with contextlib.suppress(Exception):  # (no __dict__, or an odd one)
        names += [n for n in object.__getattribute__(obj, "__dict__")
                  if not (isinstance(obj, type | types.ModuleType) and n.startswith("__"))]
    if isinstance(obj, types.CellType):
        return ["cell_contents"]
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
    before: dict  # key or attribute (or, for a set, member) -> its value then

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
        if isinstance(container, list | collections.deque):
            kept = [self.before[i] for i in sorted(self.before)]
            container.clear()
            container.extend(kept)
        elif isinstance(container, set):
            container.discard(key)
        elif isinstance(container, dict):
            if key in self.before:
                container[key] = self.before[key]
            else:
                del container[key]
        else:
            # A class's attributes are set through type's own __setattr__, an object's through
            # object's (no __setattr__ of the user's runs).
            setter = type if isinstance(container, type) else object
            if key in self.before:
                setter.__setattr__(container, key, self.before[key])
            else:
                setter.__delattr__(container, key)


def snapshots(roots: list[tuple[str, Any]], skip: tuple = ()) -> list[Snapshot]:
    """The mutable containers reachable from `roots` (dicts, lists, deques, sets, objects,
    classes and modules of the user's), each with its contents now."""
    taken: list[Snapshot] = []
    seen: set[int] = set()

    def take(name: str, container: Any) -> None:
        if id(container) in seen or _opaque(container, skip + (tuple, frozenset)):
            return
        seen.add(id(container))
        before = {}
        for place in _places(name, container):
            try:
                before[place.key] = place.get()
            except Exception:
                continue
        taken.append(Snapshot(name, container, before))

    for name, root in roots:
        take(name, root)
    for place, value in walk([(name, root, None) for name, root in roots], skip):
        take(place.name, value)
    return taken


def global_names(code: types.CodeType, namespace: dict, depth: int = DEPTH) -> set[str]:
    """The global names `code` uses (its own, those of the functions defined inside it, and,
    `depth` calls down, those of the module's functions it calls): the part of a module a
    traced function can reach. Walking only these keeps a trace cheap in a big module."""
    names: set[str] = set()
    seen: set[types.CodeType] = set()
    level = [code]
    for _ in range(depth + 1):
        below = []
        for c in level:
            codes = [c]
            while codes:  # the code and the functions (and lambdas) defined inside it
                c = codes.pop()
                if c in seen:
                    continue
                seen.add(c)
                names.update(c.co_names)
                codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
                # (a plain function's attributes: no user __getattr__)
                below += [v.__code__ for v in map(namespace.get, c.co_names)
                          if isinstance(v, types.FunctionType) and v.__globals__ is namespace]
        level = below
    return names


def holding(value: Any, wanted: Any) -> bool:
    """Does `value`, or something inside it (within `DEPTH` levels and `BUDGET` places),
    satisfy `wanted`?"""
    if wanted(value):
        return True
    return any(wanted(v) for _, v in walk([("", value, None)]))
