"""What a function's code can reach: the globals it uses and its closure cells.

Only the names the code uses are taken from a namespace (a notebook may hold thousands of
globals), and the search goes on into the functions the code calls, the function a staged
function wraps and the methods of the user's classes and objects it meets, a few calls deep.
What it finds are the roots from which tracing names captured tensors and looks for leaks.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from typing import Any

from teachflow.tracing.python_state.places import CONTAINERS, DEPTH, is_users, opaque


@dataclass
class Reach:
    """What a function's code can reach: for each module's namespace, the global names used
    there (by the function, the functions it calls, the methods of the user's classes and
    objects it meets, a few calls deep); and the closure cells of every function reached."""

    globals: list[tuple[dict, dict[str, None]]]  # (the names in the order the code uses them)
    cells: dict[str, types.CellType]


#: How many functions `reach` reads at most.
CODE_BUDGET = 500


def reach(fn: types.FunctionType, owners: Any = (), depth: int = DEPTH) -> Reach:
    """The globals and closure cells that `fn` (and the objects in `owners`, a method's
    instance) can reach through the code it runs: a traced function's world. Only the names
    the code uses are taken from a namespace (a notebook may hold thousands)."""
    namespaces: dict[int, tuple[dict, dict[str, None]]] = {}
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
            entry = namespaces.setdefault(id(namespace), (namespace, {}))
            used = [n for n in names if n in namespace]
            entry[1].update(dict.fromkeys(used))
            for name, cell in zip(function.__code__.co_freevars, function.__closure__ or (),
                                  strict=True):
                cells.setdefault(name, cell)
                below += _functions_in(_contents(cell), names)
            for name in used:
                below += _functions_in(namespace[name], names)
        level = below
    return Reach(list(namespaces.values()), cells)


def _names_used(code: types.CodeType) -> dict[str, None]:
    """The names (globals and attributes) `code` and the functions defined in it use, in a
    fixed order (a set's would change from run to run, and with it which name a tensor reached
    two ways is given in the graph)."""
    names: dict[str, None] = {}
    codes = [code]
    while codes:
        c = codes.pop()
        names.update(dict.fromkeys(c.co_names))
        codes += [k for k in c.co_consts if isinstance(k, types.CodeType)]
    return names


def _functions_in(value: Any, names: dict[str, None]) -> list[types.FunctionType]:
    """The user's functions a value leads the code to: itself, the function a staged function
    or a method wraps, the methods of a user class or of its objects, the functions of a user
    module that the code names."""
    try:
        if isinstance(value, types.FunctionType):
            return [value] if is_users(value.__module__ or "") else []
        if isinstance(value, types.MethodType):
            return _functions_in(value.__func__, names)
        if isinstance(value, types.ModuleType):
            if not is_users(value.__name__):
                return []
            attributes = object.__getattribute__(value, "__dict__")
            return [f for n in names if isinstance(f := attributes.get(n), types.FunctionType)]
        wrapped = _own(value, "python_function")  # a tfl.function
        if wrapped is not None:
            return _functions_in(_own(wrapped, "__wrapped__") or wrapped, names)
        if isinstance(value, type):
            return _methods(value)
        if not opaque(value, ()) and not isinstance(value, CONTAINERS):
            return _methods(type(value))
    except Exception:  # an odd object: it leads nowhere
        pass
    return []


def _methods(cls: type) -> list[types.FunctionType]:
    """The functions defined in a user class and its user base classes."""
    found = []
    for klass in cls.__mro__:
        if not is_users(klass.__module__):  # (teachflow's Module holds user state: not its code)
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
