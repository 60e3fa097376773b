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
import weakref
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
    and the objects of their classes (a random generator, a test library's state, teachflow's
    own staged functions and graphs), but for containers, and for the classes of teachflow
    that hold the user's state (a model, an optimizer: they say so with ``_user_state``)."""
    if isinstance(value, _OPAQUE + skip):
        return True
    if isinstance(value, types.ModuleType):
        return not _is_users(value.__name__)
    if isinstance(value, _CONTAINERS):
        return False
    cls = value if isinstance(value, type) else type(value)
    return not (_is_users(cls.__module__) or getattr(cls, "_user_state", False))


_CONTAINERS = (dict, list, tuple, collections.deque, set, frozenset, types.CellType,
               types.SimpleNamespace)


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
                below.append((place, value, place))
        level = below


def _places(name: str | Place, container: Any, parent: Place | None = None) -> list[Place]:
    """The places directly inside `container` (named "": a namespace)."""
    if isinstance(container, dict):
        return [Place(container, k, "item", name, parent) for k in list(container)]
    if isinstance(container, list | tuple | collections.deque):
        return [Place(container, i, "item", name, parent) for i in range(len(container))]
    if isinstance(container, set | frozenset):
        return [Place(container, v, "member", name, parent) for v in list(container)]
    places = [Place(container, attr, "attr", name, parent) for attr in _attributes(container)]
    if not isinstance(container, type | types.ModuleType | types.CellType):
        # Its class too (``type(self).count = ...``), if it is the user's: see `_opaque`.
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


# --- Containers, as they were before a trace -----------------------------------------------------


@dataclass(eq=False)
class Snapshot:
    """A mutable container's contents before the trace, so that what the trace left in it can
    be found and put back."""

    name: str | Place
    container: Any
    before: dict  # key or attribute (or, for a set, member) -> its value then

    def changed(self) -> Iterator[tuple[Any, str, Any]]:
        """``(key, name, value)`` for each entry whose value is not what it was, `GONE` for
        one that is not there any more."""
        now = set()
        for place in _places(self.name, self.container):
            try:
                value = place.get()
            except Exception:
                continue
            now.add(place.key)
            if place.key not in self.before or self.before[place.key] is not value:
                yield place.key, place.name, value
        for key in self.before:
            if key not in now:
                kind = "member" if isinstance(self.container, set | frozenset) else "attr" \
                    if not isinstance(self.container, dict | list | collections.deque) \
                    else "item"
                yield key, Place(self.container, key, kind, self.name).name, GONE

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

    def replace(self, key: Any, value: Any) -> None:
        """Make the entry (a dict's, a list's) or attribute `key` hold `value` instead."""
        if isinstance(self.container, dict | list | collections.deque):
            self.container[key] = value
        else:
            setter = type if isinstance(self.container, type) else object
            setter.__setattr__(self.container, key, value)


#: The value of an entry that a change took away (``d.pop(k)``, ``del obj.attr``).
GONE = object()


def snapshots(roots: list[tuple[str, Any]], skip: tuple = ()) -> list[Snapshot]:
    """The mutable containers reachable from `roots` (dicts, lists, deques, sets, objects,
    classes and modules of the user's), each with its contents now."""
    taken: list[Snapshot] = []
    seen: set[int] = set()

    def take(name: str | Place, container: Any) -> None:
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
        take(place, value)
    return taken


def global_names(code: types.CodeType, namespace: dict, depth: int = DEPTH) -> set[str]:
    """The global names of `namespace` that `code` uses, itself or through the functions it
    calls (see `reach`)."""
    found = reach(types.FunctionType(code, namespace), (), depth)
    return next((names for ns, names in found.globals if ns is namespace), set())


@dataclass
class Reach:
    """What a function's code can reach: for each module's namespace, the global names used
    there (by the function, the functions it calls, the methods of the user's classes and
    objects it meets, a few calls deep); and the closure cells of every function reached."""

    globals: list[tuple[dict, set[str]]]
    cells: dict[str, types.CellType]


#: How many functions `reach` reads at most.
CODE_BUDGET = 500


def reach(fn: types.FunctionType, owners: Any = (), depth: int = DEPTH) -> Reach:
    """The globals and closure cells that `fn` (and the objects in `owners`, a method's
    instance) can reach through the code it runs: a traced function's world. Only the names
    the code uses are taken from a namespace (a notebook may hold thousands)."""
    namespaces: dict[int, tuple[dict, set[str]]] = {}
    cells: dict[str, types.CellType] = {}
    seen: set[types.CodeType] = set()
    level: list[types.FunctionType] = [fn, *(m for o in owners for m in _methods(type(o)))]
    budget = CODE_BUDGET
    for _ in range(depth + 1):
        below: list[types.FunctionType] = []
        for function in level:
            if function.__code__ in seen or budget <= 0:
                continue
            budget -= 1
            seen.add(function.__code__)
            namespace = function.__globals__
            names = _names_used(function.__code__)
            entry = namespaces.setdefault(id(namespace), (namespace, set()))
            used = {n for n in names if n in namespace}
            entry[1].update(used)
            for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (),
                                  strict=True):
                cells.setdefault(name, cell)
                below += _functions_in(_contents(cell), names)
            for name in used:
                below += _functions_in(namespace[name], names)
        level = below
    return Reach(list(namespaces.values()), cells)


def _names_used(code: types.CodeType) -> set[str]:
    """The names (globals and attributes) `code` and the functions defined in it use."""
    names: set[str] = set()
    codes = [code]
    while codes:
        c = codes.pop()
        names.update(c.co_names)
        codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return names


def _functions_in(value: Any, names: set[str]) -> list[types.FunctionType]:
    """The user's functions a value leads the code to: itself, the function a staged function
    or a method wraps, the methods of a user class or of its objects, the functions of a user
    module that the code names."""
    try:
        if isinstance(value, types.FunctionType):
            return [value] if _is_users(value.__module__ or "") else []
        if isinstance(value, types.MethodType):
            return _functions_in(value.__func__, names)
        if isinstance(value, types.ModuleType):
            if not _is_users(value.__name__):
                return []
            attributes = object.__getattribute__(value, "__dict__")
            return [f for n in names if isinstance(f := attributes.get(n), types.FunctionType)]
        wrapped = _own(value, "python_function")  # a tfl.function
        if wrapped is not None:
            return _functions_in(_own(wrapped, "__wrapped__") or wrapped, names)
        if isinstance(value, type):
            return _methods(value)
        if not _opaque(value, ()) and not isinstance(value, _CONTAINERS):
            return _methods(type(value))
    except Exception:  # an odd object: it leads nowhere
        pass
    return []


def _methods(cls: type) -> list[types.FunctionType]:
    """The functions defined in a user class and its user base classes."""
    found = []
    for klass in cls.__mro__:
        if _opaque(klass, ()):
            continue
        for value in vars(klass).values():
            value = value.__func__ if isinstance(value, staticmethod | classmethod) else value
            value = _own(value, "__wrapped__") or value  # a staged method: the function it stages
            if isinstance(value, types.FunctionType):
                found.append(value)
    return found


def _own(obj: Any, name: str) -> Any:
    """`obj`'s own attribute `name` (from its ``__dict__``), or None: no ``__getattr__`` runs."""
    try:
        return object.__getattribute__(obj, "__dict__").get(name)
    except Exception:
        return None


def _contents(cell: types.CellType) -> Any:
    try:
        return cell.cell_contents
    except ValueError:  # an empty cell (a name not yet bound)
        return None


def holding(value: Any, wanted: Any) -> bool:
    """Does `value`, or something inside it (within `DEPTH` levels and `BUDGET` places),
    satisfy `wanted`?"""
    if wanted(value):
        return True
    return any(wanted(v) for _, v in walk([("", value, None)]))
