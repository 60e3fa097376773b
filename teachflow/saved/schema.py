"""What each op may be given: the schema a saved graph is written by and checked against.

An op's declaration says what it takes (`teachflow.ops.op`): its kernel and its shape rule take
the operands by position and the parameters by keyword (``sum``'s ``axis`` and ``keepdims``).
`arguments_of` reads both from the declaration, so a new op is saved and loaded without touching
this file, as long as its parameters are of a kind listed here. A NumPy ufunc kernel counts for
its operands only: its keywords (``out=``, ``where=``) are NumPy's own, not the op's, and a file
that passed ``tanh`` a second operand (NumPy's ``out``) would have it write into that array.

What a parameter may *be* is its `Kind`, by name: ``axis`` is null, an int or a list of ints;
``dtype`` one of the dtype names; ``true_fn`` a graph. A kind writes a value as JSON and reads
it back, checking it on the way in; a kind whose values refer to the operands (an axis, a
permutation of the axes, a shape) also checks them against the operands' specs (`check_params`),
so that a refusal names the parameter and the operand: ``params.axis: axis 5 is out of range
for f32[2,3], which has 2 axes``. The rest (an index that fits, a reshape that keeps the size) is
the op's own shape rule's to say, when the loader checks the graph.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import Any

import numpy as np

from teachflow.core.collectives import REDUCTIONS
from teachflow.graph import Graph
from teachflow.ops.op import Op
from teachflow.ops.shape import Hole, reshape, stack
from teachflow.saved.format import (
    DEVICES,
    DTYPES,
    INT64,
    MAX_NDIM,
    boolean,
    dtype,
    fields,
    integer,
    items,
    refuse,
    shown,
    text,
)


class CannotWrite(Exception):
    """A parameter value the format has no way to write (`tfl.save` says which)."""


@dataclass(frozen=True)
class Kind:
    """What one parameter may be: `write` (value, writer) gives its JSON; `read` (JSON, reader,
    where) gives the value back, or refuses. The writer and reader hold the arrays and graphs
    (``writer.array(a)``, ``reader.graph(data, where)``). `check` (value, the operands' specs,
    op) says what is wrong with a value read for these operands, or None."""

    write: Callable[[Any, Any], Any]
    read: Callable[[Any, Any, str], Any]
    check: Callable[[Any, list, Op], str | None] | None = None


def _write_int(value: Any, out: Any = None) -> int:
    if isinstance(value, bool | np.bool_) or not isinstance(value, int | np.integer) or \
            not INT64[0] <= int(value) <= INT64[1]:
        raise CannotWrite(f"{value!r:.60} is not an int64")
    return int(value)


def _write_ints(value: Any, out: Any) -> list[int]:
    return [_write_int(v) for v in value]


def _read_ints(data: Any, into: Any, where: str) -> tuple[int, ...]:
    return tuple(integer(v, f"{where}[{k}]") for k, v in enumerate(items(data, where, MAX_NDIM)))


def write_scalar(value: Any, out: Any = None) -> Any:
    """bool and int as JSON has them; a float tagged, so that 2.0 stays a float in every
    language, and spelled out where it is not finite (JSON has no inf)."""
    if isinstance(value, bool | np.bool_):
        return bool(value)
    if isinstance(value, float | np.floating):
        number = float(value)
        return {"float": number if math.isfinite(number) else str(number)}
    return _write_int(value)


def read_scalar(data: Any, into: Any, where: str) -> bool | int | float:
    if isinstance(data, bool):
        return data
    if isinstance(data, dict) and "float" in data:
        number = fields(data, where, ("float",))["float"]
        if isinstance(number, str) and number in ("inf", "-inf", "nan"):
            return float(number)
        if type(number) is float:
            return number
        if type(number) is int:  # (another language may write 2.0 as 2)
            return float(integer(number, where))
        raise refuse(where, f"a float must be a number or \"inf\", \"-inf\", \"nan\", not "
                            f"{shown(number)}")
    if type(data) is not int:
        raise refuse(where, f"must be a number (an integer, true or false, or "
                            f"{{\"float\": ...}}), not {shown(data)}")
    return integer(data, where)


def _write_index_item(item: Any, out: Any) -> Any:
    if item is None:
        return None
    if item is Ellipsis:
        return "..."
    if isinstance(item, slice):
        return {"slice": [None if p is None else _write_int(p)
                          for p in (item.start, item.stop, item.step)]}
    if isinstance(item, Hole):
        return {"hole": _write_int(item.i)}
    if isinstance(item, np.ndarray):
        if item.dtype.kind not in "biu":
            raise CannotWrite(f"an index array of {item.dtype}")
        return out.array(item)
    return _write_int(item)


def _read_index_item(data: Any, into: Any, where: str) -> Any:
    if data is None:
        return None
    if data == "...":
        return Ellipsis
    if isinstance(data, dict) and "slice" in data:
        parts = items(fields(data, where, ("slice",))["slice"], f"{where}.slice")
        if len(parts) != 3:
            raise refuse(where, "a slice is [start, stop, step]")
        return slice(*(None if p is None else integer(p, f"{where}.slice") for p in parts))
    if isinstance(data, dict) and "hole" in data:
        return Hole(integer(fields(data, where, ("hole",))["hole"], where, 0, MAX_NDIM))
    if isinstance(data, dict):
        return into.array(data, where, kinds="biu")
    return integer(data, where)


def _read_axis(data: Any, into: Any, where: str) -> Any:
    if data is None:
        return None
    if type(data) is int:
        return integer(data, where)
    return _read_ints(data, into, where)


def _read_optional_scalar(data: Any, into: Any, where: str) -> Any:
    return None if data is None else read_scalar(data, into, where)


def _write_axis(value: Any, out: Any) -> Any:
    if value is None:
        return None
    return _write_ints(value, out) if isinstance(value, tuple | list) else _write_int(value)


def _write_bool(value: Any, out: Any) -> bool:
    if not isinstance(value, bool | np.bool_):
        raise CannotWrite(f"{value!r:.60} is not a bool")
    return bool(value)


def _write_graph(value: Any, out: Any) -> dict:
    if not isinstance(value, Graph):
        raise CannotWrite(f"{type(value).__name__} is not a graph")
    return out.graph(value)


def _write_callee(value: Any, out: Any) -> str:
    if not isinstance(value, Graph):
        raise CannotWrite(f"{type(value).__name__} is not a graph")
    return out.callee(value)


def _write_dtype(value: Any, out: Any) -> str:
    try:
        name = np.dtype(value).name
    except TypeError:
        raise CannotWrite(f"{value!r:.60} is not a dtype") from None
    if name not in DTYPES:
        raise CannotWrite(f"dtype {name} is not one the format has")
    return name


def _write_device(value: Any, out: Any) -> str:
    if value not in DEVICES:
        raise CannotWrite(f"device {value!r:.40} is not one the format has")
    return value


def _check_axis(value: Any, operands: list, op: Op) -> str | None:
    """An axis (or sorted axes) of the first operand, counted from 0 as tracing leaves them;
    stack's names an axis of its result, which has one more."""
    if value is None or not operands:
        return None
    axes = list(value) if isinstance(value, tuple) else [value]
    first = operands[0]
    ndim = first.ndim + (op is stack)
    negative = next((a for a in axes if a < 0), None)
    if negative is not None:
        return (f"axis {negative} counts from the end; a saved graph counts axes from 0, as "
                "tracing leaves them")
    if axes != sorted(set(axes)):
        return f"axes {axes} are not in increasing order, each once, as tracing leaves them"
    if axes and axes[-1] >= ndim:
        having = f"stacking {first} gives {ndim} axes" if op is stack else \
            f"{first} has {ndim} axes"
        return f"axis {axes[-1]} is out of range: {having} (0 to {ndim - 1})"
    return None


def _check_permutation(value: Any, operands: list, op: Op) -> str | None:
    ndim = operands[0].ndim
    if sorted(value) != list(range(ndim)):
        return (f"axes {list(value)} are not a permutation of the {ndim} axes of {operands[0]} "
                f"(0 to {ndim - 1}, each once)")
    return None


def _check_shape(value: Any, operands: list, op: Op) -> str | None:
    """Sizes: 0 or more, or (for a reshape) one -1 that it fills in."""
    fills = op is reshape and list(value).count(-1) == 1
    if any(d < 0 for d in value if not (fills and d == -1)):
        return (f"shape {list(value)} has a size that is not one (sizes are 0 or more"
                + (", or one -1 that the reshape fills in)" if op is reshape else ")"))
    return None


def _check_step(value: Any, operands: list, op: Op) -> str | None:
    return "a step of 0 never gets from start to stop" if value == 0 else None


INT = Kind(_write_int, lambda data, into, where: integer(data, where))
SIZE = Kind(_write_int, lambda data, into, where: integer(data, where, 0))
AXES = Kind(_write_ints, _read_ints, _check_permutation)
SHAPE = Kind(_write_ints, _read_ints, _check_shape)
AXIS = Kind(_write_axis, _read_axis, _check_axis)
BOOL = Kind(_write_bool, lambda data, into, where: boolean(data, where))
SCALAR = Kind(write_scalar, read_scalar)
STEP = Kind(write_scalar, read_scalar, _check_step)
OPTIONAL_SCALAR = Kind(lambda v, out: None if v is None else write_scalar(v),
                       _read_optional_scalar)
DTYPE = Kind(_write_dtype, lambda data, into, where: dtype(data, where))
DEVICE = Kind(_write_device, lambda data, into, where: text(data, where, DEVICES))
INDEX = Kind(lambda v, out: [_write_index_item(i, out) for i in v],
             lambda data, into, where: tuple(_read_index_item(d, into, f"{where}[{k}]")
                                             for k, d in enumerate(items(data, where, 64))))
GRAPH = Kind(_write_graph, lambda data, into, where: into.graph(data, where))
#: A function called: its name among the file's ``functions``, each written once.
CALLEE = Kind(_write_callee, lambda data, into, where: into.callee(data, where))

#: Every parameter of teachflow's ops, by name. A test checks that each op's are here.
KINDS: dict[str, Kind] = {
    "axis": AXIS, "axes": AXES, "shape": SHAPE, "keepdims": BOOL, "history": BOOL,
    "dtype": DTYPE, "device": DEVICE, "src": DEVICE, "dst": DEVICE, "fill_value": SCALAR,
    "start": SCALAR, "stop": SCALAR, "step": STEP, "initial": OPTIONAL_SCALAR, "n": SIZE,
    "m": SIZE, "index": INDEX,
    "reduction": Kind(lambda v, out: v, lambda data, into, where: text(data, where, REDUCTIONS)),
    "bucket_mb": OPTIONAL_SCALAR,
    "true_fn": GRAPH, "false_fn": GRAPH, "cond_fn": GRAPH, "body_fn": GRAPH, "callee": CALLEE,
}


# --- What an op takes, read from its declaration -------------------------------------------------


@dataclass(frozen=True)
class OpArguments:
    """How many operands an op takes (`most` None: any number), its parameters and which of
    them it must be given."""

    least: int
    most: int | None
    params: frozenset[str]
    required: frozenset[str]


@cache
def arguments_of(op: Op) -> OpArguments:
    """What `op` takes: the operands and parameters its shape rule takes (which names them
    as a graph does), as far as its kernel takes them too."""
    operands, most, params, required = _takes(op.shape_rule, (inspect.Parameter.KEYWORD_ONLY,))
    kernel = op.kernel(np)
    if isinstance(kernel, np.ufunc):
        operands, most, params = [""] * kernel.nin, _fewer(most, kernel.nin), set()
    else:  # (NumPy's functions take their parameters by position or by keyword)
        k_operands, k_most, k_params, k_required = _takes(
            kernel, (inspect.Parameter.KEYWORD_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD))
        most = _fewer(most, k_most)
        params = k_params if params is None else params if k_params is None \
            else params & k_params
        k_operands = [name for name in k_operands if name not in (params or ())]
        operands = max(operands, k_operands, key=len)
        required |= k_required
    params = params or set()
    return OpArguments(len(operands), most, frozenset(params), frozenset(required & params))


def _takes(fn: Callable, keyword_kinds: tuple) -> tuple[list[str], int | None,
                                                        set[str] | None, set[str]]:
    """(the operands `fn` must be given, the most it takes or None for any number, the keyword
    names it takes or None for any, those without a default). A kernel's ``out`` is the fusion
    pass's buffer, never the graph's."""
    params = [p for p in inspect.signature(fn).parameters.values() if p.name != "out"]
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    least = [p.name for p in positional if p.default is p.empty]
    most = None if any(p.kind is p.VAR_POSITIONAL for p in params) else len(positional)
    keywords = None if any(p.kind is p.VAR_KEYWORD for p in params) else \
        {p.name for p in params if p.kind in keyword_kinds}
    required = {p.name for p in params if p.kind in keyword_kinds and p.default is p.empty}
    return least, most, keywords, required


def _fewer(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else min(a, b)


def write_params(op: Op, params: dict, out: Any) -> dict:
    """`params` of a node of `op` as JSON; CannotWrite names a parameter the format lacks."""
    written = {}
    for name, value in params.items():
        kind = KINDS.get(name)
        if kind is None or name not in arguments_of(op).params:
            raise CannotWrite(f"parameter {name!r} is not one the saved format knows for {op.name}")
        try:
            written[name] = kind.write(value, out)
        except CannotWrite as err:
            raise CannotWrite(f"parameter {name}: {err}") from None
    return written


def read_params(op: Op, data: Any, into: Any, where: str) -> dict:
    """A node's parameters, each read by its kind, exactly those `op` takes."""
    if not isinstance(data, dict):
        raise refuse(where, f"must be an object, not {shown(data)}")
    takes = arguments_of(op)
    unknown = [k for k in data if k not in takes.params or k not in KINDS]
    if unknown:
        raise refuse(where, f"{op.name} takes no parameter {shown(unknown[0])}",
                     hint=f"{op.name} takes {', '.join(sorted(takes.params)) or 'none'}")
    missing = sorted(takes.required - set(data))
    if missing:
        raise refuse(where, f"{op.name} needs the parameter {missing[0]!r}")
    return {name: KINDS[name].read(value, into, f"{where}.{name}") for name, value in data.items()}


def check_params(op: Op, params: dict, operands: list) -> tuple[str, str] | None:
    """The first parameter whose kind finds it wrong for operands of these specs, and what is
    wrong with it; None when each is right."""
    for name, value in params.items():
        check = KINDS[name].check
        problem = check(value, operands, op) if check is not None else None
        if problem is not None:
            return name, problem
    return None
