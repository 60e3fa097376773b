"""Binding-time analysis: what a trace depends on, and how two calls are told apart.

`tfl.function` splits every call's arguments by *binding time*. A tensor is **dynamic**: a trace
knows only its shape, dtype and device, and its values arrive at every call. Anything else (a
Python number, a string, a model object) is **static**: its value is baked into the trace. A call's
*key* is what it fixes: per flat argument ``("tensor", shape, dtype, device)`` or ``("static",
type, value)``. Calls with equal keys share one concrete function; a new key means a new trace,
and `retrace_reason` says in a sentence what changed.

Static values are compared as *program text* (`_Exact`): ``0.0`` and ``-0.0`` are two programs,
though Python says they are equal; an object (a model) is the same static argument only when it is
the same object (`_Same`).
"""

from __future__ import annotations

import dataclasses
import enum
import inspect
import weakref
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.core.errors import TeachflowError
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import TreeDef, tree_flatten
from teachflow.tensor.tensor import Tensor


@dataclass(frozen=True)
class Signature:
    """What a trace depends on, with names, so two signatures can be compared in words."""

    arguments: tuple[tuple[str, str], ...]  # per top-level argument: name, structure
    names: tuple[str, ...]  # per flat leaf
    keys: tuple  # per flat leaf: ("tensor", shape, dtype, device) or ("static", type, value)

    def __str__(self) -> str:
        return ", ".join(_describe_leaf(n, k) for n, k in zip(self.names, self.keys,
                                                               strict=True))


def fit_input_signature(specs: list[TensorSpec], keys: tuple, tensors: list[Tensor],
                        names: list[str], function: str) -> tuple:
    """With an input_signature, every tensor argument must fit its spec; the keys become the
    specs' (so every fitting call shares one trace). `names` name every flat argument."""
    names = [n for n, k in zip(names, keys, strict=True) if k[0] == "tensor"]
    if len(tensors) != len(specs):
        raise TeachflowError(f"{function} was given an input_signature of {len(specs)} spec(s) "
                             f"but called with {len(tensors)} tensor(s)", op="function",
                             hint="pass one tensor per TensorSpec")
    fitted = iter(zip(specs, tensors, names, strict=True))
    new_keys = []
    for key in keys:
        if key[0] != "tensor":
            new_keys.append(key)
            continue
        spec, t, name = next(fitted)
        if not _fits(t.spec, spec):
            raise TeachflowError(
                f"argument {name}: {t.spec} on {t.device} does not fit the input_signature's "
                f"{spec}", op="function", operands=(f"{name}: {t.dtype.name}{list(t.shape)}",),
                hint="a None dimension accepts any size; the others, the dtype and the number "
                     "of dimensions must match")
        new_keys.append(("tensor", spec.shape, spec.dtype, t._backend.name))
    return tuple(new_keys)



def same_parameters(a: inspect.Signature, b: inspect.Signature) -> bool:
    """The same names, kinds and defaults (the very objects: a tensor default is compared by
    identity, not by ``==``)."""
    pa, pb = list(a.parameters.values()), list(b.parameters.values())
    return len(pa) == len(pb) and all(
        x.name == y.name and x.kind == y.kind and x.default is y.default
        for x, y in zip(pa, pb, strict=True))


def canonical_call(signature: inspect.Signature | None, args: tuple, kwargs: dict,
                   name: str = "function") -> tuple[tuple, dict, frozenset[str]]:
    """One form for one call: ``f(x, 3)``, ``f(x, n=3)`` and, if 3 is the default, ``f(x)``
    all become ``(x, 3)``, so they share a trace. Also the parameters that took their default
    only for that (none with a tensor in it): a trace calls the function without them, as it
    was called (a wrapper, a ufunc, may not take them all)."""
    if signature is None:
        return args, _sorted(kwargs), frozenset()
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TeachflowError(f"{name}(): {exc}", op="function") from None
    given = set(bound.arguments)
    bound.apply_defaults()
    left_out, keep_positional = set(), False
    for param in reversed(signature.parameters.values()):  # (a positional-only one kept keeps
        positional = param.kind is inspect.Parameter.POSITIONAL_ONLY  # those before it)
        if param.name in given or _holds_tensor(param.default) or (positional and
                                                                   keep_positional):
            keep_positional = keep_positional or positional
        elif param.name in bound.arguments:
            left_out.add(param.name)
    return bound.args, _sorted(bound.kwargs), frozenset(left_out)


def _holds_tensor(value: Any) -> bool:
    return any(isinstance(leaf, Tensor | np.ndarray) for leaf in tree_flatten(value)[0])


def _sorted(kwargs: dict) -> dict:
    return dict(sorted(kwargs.items()))


class _Exact:
    """A static value as a signature key: equal only to a value that is the same program text.
    In Python ``0.0 == -0.0``, ``1 == True``, ``{1: "a"} == {True: "a"}`` and ``nan != nan``,
    but ``1 / (x * -0.0)`` is not ``1 / (x * 0.0)``, ``x[True]`` is not ``x[1]``, and ``x * nan``
    is one program however often it is called. So the key compares types and, for numbers,
    their text, all the way into tuples, sets and dataclasses."""

    __slots__ = ("_value", "key")

    def __init__(self, value: Any) -> None:
        self.key = _exact_key(value)
        # An object compared by identity is held weakly (as `_Same` holds it): a model passed
        # once is not kept alive by the trace made for it.
        self._value = self.key[1] if isinstance(self.key[1], _Same) else _held(value)

    @property
    def value(self) -> Any:
        return self._value.value if isinstance(self._value, _Same) else self._value()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Exact) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return repr(self.value)


def _exact_key(value: Any) -> Any:
    if isinstance(value, float | complex | np.inexact):
        return type(value), repr(value)
    if isinstance(value, slice):  # (not hashable before Python 3.12)
        return slice, tuple(_exact_key(v) for v in (value.start, value.stop, value.step))
    if isinstance(value, tuple | list | frozenset | set):
        keys = [_exact_key(v) for v in value]
        return type(value), (frozenset(keys) if isinstance(value, frozenset | set)
                             else tuple(keys))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value), tuple(_exact_key(getattr(value, f.name))
                                  for f in dataclasses.fields(value))
    if isinstance(value, _VALUES):
        return type(value), value
    # Any other object is the same static argument only if it is the same object: one that says
    # it equals another (by a name, a config) may still hold other tensors and compute otherwise.
    return type(value), _Same(value)


#: Values whose equality is what they compute with.
_VALUES = (str, bytes, int, np.integer, np.bool_, np.dtype, type, enum.Enum, slice, range,
           type(None), type(Ellipsis), TensorSpec)


def _by_identity(value: Any) -> bool:
    """Is this static argument the same only when it is the same object?"""
    key = _exact_key(value)[1]
    return isinstance(key, _Same) or (key is value and not isinstance(value, _VALUES))


class _Same:
    """Equal only to itself (a static argument compared by identity), which it holds weakly
    where it can: once the object is gone, nothing can be the same object again."""

    __slots__ = ("_id", "_ref")

    def __init__(self, value: Any) -> None:
        self._id = id(value)
        self._ref = _held(value)

    @property
    def value(self) -> Any:
        return self._ref()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Same) or other._id != self._id:
            return False
        mine = self._ref()
        return mine is not None and mine is other._ref()

    def __hash__(self) -> int:
        return self._id


def _held(value: Any) -> Any:
    """A callable that gives `value`: a weak reference where one can be made."""
    if isinstance(value, _VALUES + (float, complex, np.inexact, tuple, list, set, frozenset)):
        return lambda: value
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def exact_tree(treedef: TreeDef | None) -> Any:
    """A treedef whose dict keys compare exactly (a dict keyed by 1 is not one keyed by True)."""
    if treedef is None:
        return None
    keys = treedef.keys
    if issubclass(treedef.kind, dict):
        keys = tuple(_Exact(k) for k in keys)
    return treedef.kind, keys, tuple(exact_tree(c) for c in treedef.children)


def leaf_keys(leaves: list) -> tuple[tuple, list[Tensor]]:
    """Per flat argument, what the trace depends on; and the tensors, whose values it does not."""
    keys, tensors = [], []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            keys.append(("tensor", leaf.shape, leaf.dtype, leaf._backend.name))
            tensors.append(leaf)
        else:  # (any value: what compares by value is keyed by it, anything else by identity)
            keys.append(("static", type(leaf), _Exact(leaf)))
    return tuple(keys), tensors


def check_input_signature(specs: Any) -> list[TensorSpec] | None:
    if specs is None:
        return None
    if not isinstance(specs, list | tuple) or not all(isinstance(s, TensorSpec) for s in specs):
        raise TeachflowError("input_signature must be a list of tfl.TensorSpec, one per tensor "
                             f"argument, not {specs!r}", op="function",
                             hint='e.g. input_signature=[tfl.TensorSpec((None, 3), "float32")]')
    return list(specs)


def _fits(spec: TensorSpec, pattern: TensorSpec) -> bool:
    """Does a tensor of `spec` fit `pattern` (None in the pattern: any size)?"""
    return (spec.dtype == pattern.dtype and len(spec.shape) == len(pattern.shape)
            and all(p is None or p == d for d, p in zip(spec.shape, pattern.shape, strict=True)))


def varying_dimensions(signatures: list[Signature]) -> tuple[str, TensorSpec] | None:
    """A tensor argument whose rank and dtype stay while some sizes change across `signatures`:
    its name and a spec with None where sizes changed."""
    if len(signatures) < 2 or len({s.names for s in signatures}) != 1:
        return None
    for i, name in enumerate(signatures[0].names):
        keys = [s.keys[i] for s in signatures]
        if any(k[0] != "tensor" for k in keys) or len({(len(k[1]), k[2]) for k in keys}) != 1:
            continue
        shapes = [k[1] for k in keys]
        if len(set(shapes)) > 1:
            merged = tuple(d[0] if len(set(d)) == 1 else None for d in zip(*shapes, strict=True))
            return name, TensorSpec(merged, keys[0][2])
    return None


def varying_static(signatures: list[Signature]) -> tuple[str, list] | None:
    """A static argument whose value changes across `signatures`: its name and values."""
    if len(signatures) < 2 or len({s.names for s in signatures}) != 1:
        return None
    for i, name in enumerate(signatures[0].names):
        keys = [s.keys[i] for s in signatures]
        if all(k[0] == "static" for k in keys) and len(set(keys)) > 1:
            return name, [k[2].value for k in keys]
    return None


def structure_difference(traced: TreeDef | None, given: TreeDef | None) -> str | None:
    """Where two argument structures first differ, when it is a dict's key order (which the
    function sees: ``for k in d``)."""
    if traced is None or given is None or traced.kind is not given.kind:
        return None
    if issubclass(traced.kind, dict) and traced.keys != given.keys and \
            set(traced.keys) == set(given.keys):
        return (f"a dict's keys come in another order ({', '.join(map(repr, given.keys))}) than "
                f"when traced ({', '.join(map(repr, traced.keys))}), and the function sees that "
                "order")
    for a, b in zip(traced.children, given.children, strict=False):
        found = structure_difference(a, b)
        if found:
            return found
    return None


def structure(value: Any) -> str:
    """How an argument is built, for containers (leaves are compared by their keys)."""
    if isinstance(value, dict):
        return f"a dict with keys {', '.join(map(str, value))}"
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    return "one value"


def _describe_leaf(name: str, key: tuple) -> str:
    if key[0] == "tensor":
        spec = TensorSpec(key[1], key[2], key[3])
        return f"{name}: {spec}" + (f" on {key[3]}" if key[3] != "cpu" else "")
    return f"{name}={key[2]!r}"


def retrace_reason(old: Signature, new: Signature) -> str:
    """One plain sentence: which argument changed, and how."""
    if old.arguments != new.arguments:
        before, after = dict(old.arguments), dict(new.arguments)
        changes = [f"argument {n}: {before[n]} -> {after[n]}"
                   for n in after if n in before and before[n] != after[n]]
        changes += [f"argument {n} is new" for n in after if n not in before]
        changes += [f"argument {n} is gone" for n in before if n not in after]
        if changes:
            return "; ".join(changes)
    if old.names != new.names:
        return f"the arguments changed from ({', '.join(old.names)}) to ({', '.join(new.names)})"
    changes = []
    for name, a, b in zip(new.names, old.keys, new.keys, strict=True):
        if a == b:
            continue
        if a[0] == b[0] == "tensor":
            parts = [f"{label} {a[i] if i == 1 else str(a[i])} -> {b[i] if i == 1 else str(b[i])}"
                     for label, i in (("shape", 1), ("dtype", 2), ("device", 3)) if a[i] != b[i]]
            changes.append(f"argument {name}: {', '.join(parts)}")
        elif a[0] == b[0] == "static" and _by_identity(a[2].value) and _by_identity(b[2].value):
            changes.append(f"argument {name}: another {type(b[2].value).__name__} object (an "
                           "object is compared by identity: the same object, or a new trace)")
        elif a[0] == b[0] == "static":
            changes.append(f"argument {name}: Python value {a[2]!r} -> {b[2]!r}")
        else:
            changes.append(f"argument {name}: {_kind(a)} -> {_kind(b)}")
    return "; ".join(changes) or "a new signature"


def _kind(key: tuple) -> str:
    return "a tensor" if key[0] == "tensor" else f"Python value {key[2]!r}"
