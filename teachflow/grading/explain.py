"""Values in plain words: what a failed assertion compared, and how the two sides differ.

``assert my_softmax(x).shape == (3,)`` fails with a bare ``AssertionError`` in plain Python:
the values are gone by the time anyone looks. `teachflow.grading.asserts` keeps them (pytest's
trick), and this module says what they were::

    got:      my_softmax(x).shape = (3, 1)
    expected: (3,)
    got 2 items where 1 was expected

`describe` shows one value (an array or tensor by its shape, dtype and a few of its numbers),
`difference` says where two values part (the first differing index, the largest difference
between two arrays, the keys a dict lacks), and `explain` puts them together for each kind of
assertion: a comparison, a call (``np.allclose(a, b)``), a value that should be true.
"""

from __future__ import annotations

import ast
import reprlib
from typing import Any

import numpy as np

WIDTH = 300  # characters of one value shown, at most

_reprs = reprlib.Repr()
_reprs.maxstring, _reprs.maxother, _reprs.maxlist, _reprs.maxtuple = 120, 120, 12, 12


def _array(value: Any) -> np.ndarray | None:
    """`value` as a NumPy array, if it is an array-like with a shape (a tensor, an array)."""
    if getattr(value, "shape", None) is None or getattr(value, "dtype", None) is None:
        return None
    try:
        return np.asarray(value.numpy() if hasattr(value, "numpy") else value)
    except Exception:
        return None


def describe(value: Any) -> str:
    """One value, short: ``Tensor of shape (2, 3), float32: [[...]]``, ``(3, 1)``, ``'abc'``."""
    array = _array(value)
    if array is not None:
        if array.ndim == 0:
            return f"{array.item()!r} ({array.dtype})"
        numbers = " ".join(np.array2string(array, threshold=24, edgeitems=3, precision=4,
                                           separator=", ").split())
        text = f"{type(value).__name__} of shape {array.shape}, {array.dtype}: {numbers}"
    else:
        try:
            text = _reprs.repr(value)
        except Exception as error:  # a learner's object whose repr fails
            text = f"<{type(value).__name__} whose repr raised {type(error).__name__}>"
    return text if len(text) <= WIDTH else text[:WIDTH - 3] + "..."


def _is_number(value: Any) -> bool:
    return isinstance(value, int | float | np.number) and not isinstance(value, bool | np.bool_)


def difference(got: Any, expected: Any) -> list[str]:
    """Where `got` and `expected` part, in a line or two (none when nothing useful is known)."""
    try:
        return _difference(got, expected)
    except Exception:  # a learner's object that breaks comparison or len(): say nothing more
        return []


def _difference(got: Any, expected: Any) -> list[str]:
    a, b = _array(got), _array(expected)
    if a is not None or b is not None:
        return _array_difference(got if a is None else a, expected if b is None else b)
    if _is_number(got) and _is_number(expected):
        return [f"off by {got - expected:.6g}"]
    if type(got) is not type(expected) and type(got) in _PLAIN and type(expected) in _PLAIN:
        return [f"got a {type(got).__name__} where a {type(expected).__name__} was expected"]
    if isinstance(got, str) and isinstance(expected, str):
        at = next((i for i, (x, y) in enumerate(zip(got, expected, strict=False)) if x != y),
                  min(len(got), len(expected)))
        return [f"the texts differ from character {at}"]
    if isinstance(got, list | tuple) and isinstance(expected, list | tuple):
        lines = []
        if len(got) != len(expected):
            lines.append(f"got {len(got)} item{'s' * (len(got) != 1)} where {len(expected)} "
                         f"{'was' if len(expected) == 1 else 'were'} expected")
        at = next((i for i, (x, y) in enumerate(zip(got, expected, strict=False))
                   if not _same(x, y)), None)
        if at is not None:
            lines.append(f"first difference at index {at}: {describe(got[at])} where "
                         f"{describe(expected[at])} was expected")
        return lines
    if isinstance(got, dict) and isinstance(expected, dict):
        missing = [k for k in expected if k not in got]
        extra = [k for k in got if k not in expected]
        wrong = [k for k in expected if k in got and not _same(got[k], expected[k])]
        return [f"{what}: {', '.join(map(repr, keys[:5]))}" for what, keys in
                (("missing keys", missing), ("unexpected keys", extra),
                 ("keys with other values", wrong)) if keys]
    return []


_PLAIN = (int, float, str, list, tuple, dict, set, bool, type(None))


def _same(x: Any, y: Any) -> bool:
    try:
        return bool(x == y)
    except Exception:
        return False


def _array_difference(got: Any, expected: Any) -> list[str]:
    a, b = np.asarray(got), np.asarray(expected)
    if a.shape != b.shape:
        return [f"the shapes differ: {a.shape} where {b.shape} was expected"]
    if a.size == 0 or not (np.issubdtype(a.dtype, np.number) and np.issubdtype(b.dtype, np.number)):
        return []
    gap = np.abs(a.astype(np.float64) - b.astype(np.float64))
    if not np.isfinite(gap).all():
        where = np.unravel_index(np.argmax(~np.isfinite(gap)), gap.shape)
        return [f"not finite at index {tuple(map(int, where))}: {a[where]!r} vs {b[where]!r}"]
    where = np.unravel_index(np.argmax(gap), gap.shape)
    wrong = int(np.count_nonzero(gap > 1e-8 + 1e-5 * np.abs(b)))
    return [f"{wrong} of {a.size} numbers differ; the largest difference is {gap[where]:.4g} "
            f"at index {tuple(map(int, where))} ({a[where]:.6g} where {b[where]:.6g} was "
            f"expected)"]


def _side(label: str, value: Any) -> str:
    """``label = value``, or only the value where the label says nothing more (a literal)."""
    shown = describe(value)
    if "".join(label.split()) == "".join(shown.split()) or is_literal(label):
        return shown
    return f"{label} = {shown}"


def is_literal(text: str) -> bool:
    try:
        ast.literal_eval(text)
        return True
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return False


def explain(kind: str, labels: tuple[str, ...], values: tuple[Any, ...]) -> list[str]:
    """The lines that explain one failed assertion.

    `kind` is the comparison's operator (``==``, ``<``, ``in``, ...), ``call`` (``assert
    f(a, b)``: `values` are the arguments, then what the call returned), ``not`` or ``truth``
    (any other expression); `labels` are the source text of each value."""
    if kind == "call":
        lines = [f"{labels[-1]} returned {describe(values[-1])}"]
        lines += [_side(label, value) for label, value in zip(labels[:-1], values[:-1],
                                                              strict=True)]
        if len(values) >= 3 and any(w in labels[-1].split("(")[0] for w in ("close", "equal")):
            lines += difference(values[0], values[1])
        return lines
    if kind == "truth":
        return [f"{labels[0]} is {describe(values[0])}"]
    left = _side(labels[0], values[0])
    if kind == "not":
        return [f"{left}, which should be false"]
    right = _side(labels[1], values[1])
    if kind == "==":
        return [f"got:      {left}", f"expected: {right}", *difference(*values)]
    if kind == "!=":
        return [f"{labels[0]} and {labels[1]} are both {describe(values[0])}: they should "
                f"differ"]
    if kind in ("in", "not in"):
        return [f"{left} {'is not' if kind == 'in' else 'is'} in {right}"]
    if kind in ("is", "is not"):
        return [f"{left}, which {'is not' if kind == 'is' else 'is'} {right}"]
    return [f"{left}, which is not {kind} {right}"]
