"""Places around traced code, and the paths that lead to them.

A `Place` is somewhere a value is held: an entry of a dict or list, an attribute, a closure cell,
a member of a set. A `Path` leads to a place from a root that lasts (a module's globals, a
closure cell), link by link, and is followed again whenever asked, so a rebinding anywhere along
the way is seen. `walk` finds the places below some roots, breadth first and within a budget;
libraries are not looked into (`opaque`), as they hold no state of the learner's.
"""

from __future__ import annotations

import collections
import contextlib
import os
import sys
import types
import weakref
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.core.errors import is_library_file

#: How deep `walk` goes below its roots, and how many places it visits at most.
DEPTH = 8
BUDGET = 5_000

# Values never looked into: they hold no user state (or too much to look at).
_OPAQUE = (types.FunctionType, types.BuiltinFunctionType, types.MethodType, str, bytes, int,
           float, complex, bool, np.ndarray, np.generic, type(None))

#: Containers, always looked into (whoever's they are).
CONTAINERS = (dict, list, tuple, collections.deque, set, frozenset, types.CellType,
              types.SimpleNamespace)


def opaque(value: Any, skip: tuple) -> bool:
    """Not looked into: plain values, functions, and the modules of libraries, their classes
    and the objects of their classes (a random generator, a test library's state, teachflow's
    own staged functions and graphs), but for containers, and for the classes of teachflow
    that hold the user's state (a model, an optimizer: they say so with ``_user_state``)."""
    if isinstance(value, _OPAQUE + skip):
        return True
    if isinstance(value, types.ModuleType):
        return not is_users(value.__name__)
    if isinstance(value, CONTAINERS):
        return False
    cls = value if isinstance(value, type) else type(value)
    return not (is_users(cls.__module__) or getattr(cls, "_user_state", False))


def is_users(module_name: str) -> bool:
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
    globals, then ``"model"``, ``.encoder``, ``.w``. Only the root is held (weakly where it can
    be: an object the user may drop); every link is looked up again when asked, so a rebinding
    anywhere along the way is seen."""

    root: Any  # a callable that gives the root (a weak reference, or a holder)
    steps: tuple[tuple[str, Any], ...]  # ("item", key) or ("attr", name)
    name: str

    def resolve(self) -> Any:
        value = self.root()
        if value is None:
            raise LookupError("the root is gone")
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
    a set (``kind="member"``). `base` names the container (a string, or the place holding it;
    "" for a namespace, whose entries are named by their keys alone), and `name` is how code
    writes this place (``model.w``, ``P['w']``), made only when asked (a walk makes thousands
    of places and names few). `parent` is the place holding the container, up to a root that
    lasts (None: the container itself is the root)."""

    container: Any
    key: Any
    kind: str
    base: str | Place
    parent: Place | None = None

    @property
    def name(self) -> str:
        base = self.base if isinstance(self.base, str) else self.base.name
        if self.kind == "member":
            return f"an element of {base}"
        if self.kind == "attr":
            if isinstance(self.container, types.CellType):
                return base  # a closure variable, by its name
            return f"type({base})" if self.key == "__class__" else f"{base}.{self.key}"
        if not isinstance(self.container, dict):
            return f"{base}[{self.key}]"
        return f"{base}[{_key_text(self.key)}]" if base else str(self.key)

    def get(self) -> Any:
        return _get(self.container, self.kind, self.key)

    def holds(self, value: Any) -> bool:
        """Does this place hold `value` now (the very object)?"""
        try:
            return self.get() is value
        except Exception:  # the entry or attribute is gone
            return False

    def path(self, weak: bool = True) -> Path:
        """From the root, through every container on the way, to this place; the root held
        weakly (`weak`) where it can be."""
        steps, place, root = [], self, self.container
        while place is not None:
            steps.append((place.kind, place.key))
            root, place = place.container, place.parent
        try:
            held = weakref.ref(root) if weak else None
        except TypeError:  # a dict (a module's globals), a cell: held as they are
            held = None
        return Path(held or (lambda: root), tuple(reversed(steps)), self.name)


def _key_text(key: Any) -> str:
    """A dict key as a name shows it: a plain value as Python writes it, anything else (a
    tensor keying optimizer state) by its type, on one line, without calling its __repr__."""
    if isinstance(key, str | bytes | bool | int | float | type(None)) or (
            isinstance(key, tuple) and all(isinstance(k, str | int) for k in key)):
        text = repr(key)
        return text if len(text) <= 40 and "\n" not in text else f"<{type(key).__name__}>"
    return f"<{type(key).__name__}>"


def _get(container: Any, kind: str, key: Any) -> Any:
    if kind == "item":
        return container[key]
    if kind == "member":
        if key not in container:
            raise KeyError(key)
        return key
    return object.__getattribute__(container, key)


def walk(roots: list[tuple[str | Place, Any, Place | None]], skip: tuple = ()) -> Iterator[
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
            if id(container) in seen or opaque(container, skip):
                continue
            seen.add(id(container))
            for place in places_in(name, container, held_at):
                budget -= 1
                if budget < 0:
                    return
                try:
                    value = place.get()
                except Exception:
                    continue
                yield place, value
                below.append((place, value, place))
        level = below


def places_in(name: str | Place, container: Any, parent: Place | None = None) -> list[Place]:
    """The places directly inside `container` (named "": a namespace)."""
    if isinstance(container, dict):
        return [Place(container, k, "item", name, parent) for k in list(container)]
    if isinstance(container, list | tuple | collections.deque):
        return [Place(container, i, "item", name, parent) for i in range(len(container))]
    if isinstance(container, set | frozenset):
        return [Place(container, v, "member", name, parent) for v in list(container)]
    places = [Place(container, attr, "attr", name, parent) for attr in _attributes(container)]
    if not isinstance(container, type | types.ModuleType | types.CellType):
        # Its class too (``type(self).count = ...``), if it is the user's: see `opaque`.
        places.append(Place(container, "__class__", "attr", name, parent))
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


def holding(value: Any, wanted: Any) -> bool:
    """Does `value`, or something inside it (within `DEPTH` levels and `BUDGET` places),
    satisfy `wanted`?"""
    if wanted(value):
        return True
    return any(wanted(v) for _, v in walk([("", value, None)]))
