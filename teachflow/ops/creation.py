"""Ops that make values: constants, ranges (`arange`, `linspace`), identity matrices, random
numbers (`normal`, `uniform`, `randint`), and copies to another device.

These ops have no tensor inputs (or, for `to_device` and `copy`, one whose device they change), so
each takes a parameter naming its device (`device`; `copy`'s `dst`) and runs there. A learner's
``x.to("cpu:1")`` is a `to_device`; the pass `partition` joins the pieces of a graph cut across
devices by `copy` nodes, which say where the value comes from too (`src`). Random ops are marked
`random=True`: they draw new numbers on every call, so a compiler pass may neither merge two of them
nor fold one into a constant.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from teachflow.core.backends import get_backend
from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError
from teachflow.core.random import generator
from teachflow.ops.op import Op, RuleError, TensorSpec, no_flops, no_tangent, unbatched

#: Made from nothing: no tangent, and the same for every example of a batch.
NOTHING_MOVES = {"jvp": no_tangent, "batch": unbatched}


def _moved_tangent(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """A copy to another device is linear: the tangent moves there too."""
    return None if tangents[0] is None else bind(op, tangents[0], **params)


def _moved_batch(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """A copy to another device keeps every axis where it is, the batch axis too."""
    return bind(op, *args, **params), dims[0]


MOVED = {"jvp": _moved_tangent, "batch": _moved_batch}


def _creation_rule(*, shape: tuple, dtype, device: str, **_) -> TensorSpec:
    return TensorSpec(shape, dtype, device)


full = Op("full", lambda xp: lambda *, shape, fill_value, dtype, device:
          xp.full(shape, fill_value, dtype=dtype),
          _creation_rule, device_param="device", flops=no_flops, arg_names=(),
          **NOTHING_MOVES)


def arange_length(start: float, stop: float, step: float) -> int:
    """How many values ``arange`` makes: NumPy's count, ceil((stop - start) / step), exact for
    integers."""
    if all(isinstance(v, int) for v in (start, stop, step)):
        return len(range(start, stop, step))
    return max(0, math.ceil((stop - start) / step))


arange = Op("arange", lambda xp: lambda *, start, stop, step, dtype, device:
            xp.arange(start, stop, step, dtype=dtype),
            lambda *, start, stop, step, dtype, device:
            TensorSpec((arange_length(start, stop, step),), dtype, device),
            device_param="device", arg_names=(), **NOTHING_MOVES)
eye = Op("eye", lambda xp: lambda *, n, m, dtype, device: xp.eye(n, m, dtype=dtype),
         lambda *, n, m, dtype, device: TensorSpec((n, m), dtype, device),
         device_param="device", arg_names=(), **NOTHING_MOVES)
normal = Op("normal", lambda xp: lambda *, shape, dtype, device:
            generator(xp).standard_normal(shape, dtype=dtype),
            _creation_rule, device_param="device", random=True, arg_names=(),
            **NOTHING_MOVES)
uniform = Op("uniform", lambda xp: lambda *, shape, dtype, device:
             generator(xp).random(shape, dtype=dtype),
             _creation_rule, device_param="device", random=True, arg_names=(),
            **NOTHING_MOVES)


def _linspace_rule(*, start: float, stop: float, num: int, dtype, device: str) -> TensorSpec:
    if num < 0:
        raise RuleError(f"linspace makes {num} values: the count must be 0 or more")
    return TensorSpec((num,), dtype, device)


def _randint_rule(*, low: int, high: int, shape: tuple, dtype, device: str) -> TensorSpec:
    if dtype.kind not in "iu":
        raise RuleError(f"randint draws integers; {dtype.name} was asked for", kind=DTypeError,
                        hint="use dtype='int64' (the default) or another integer dtype")
    if not low < high:
        raise RuleError(f"randint draws from low={low} up to high={high} (excluded): an empty "
                        "range", hint="high must be greater than low")
    limits = np.iinfo(dtype)
    if low < limits.min or high - 1 > limits.max:
        raise RuleError(f"{dtype.name} cannot hold the values from {low} to {high - 1}",
                        kind=DTypeError)
    return TensorSpec(shape, dtype, device)


# ``num`` values from `start` to `stop`, both included (NumPy's linspace: the last is `stop`).
linspace = Op("linspace", lambda xp: lambda *, start, stop, num, dtype, device:
              xp.linspace(start, stop, num, dtype=dtype),
              _linspace_rule, device_param="device", arg_names=(), **NOTHING_MOVES)
# Integers drawn uniformly from [low, high), by the same seeded generator as `normal`.
randint = Op("randint", lambda xp: lambda *, low, high, shape, dtype, device:
             generator(xp).integers(low, high, size=shape, dtype=dtype),
             _randint_rule, device_param="device", random=True, flops=no_flops, arg_names=(),
             **NOTHING_MOVES)
to_device = Op("to_device", lambda xp: lambda x, *, device: get_backend(device).copy(x),
               lambda x, *, device: TensorSpec(x.shape, x.dtype, device),
               grads=(lambda g, x_spec: bind(to_device, g, device=x_spec.device),),
               device_param="device", flops=no_flops, **MOVED)
copy = Op("copy", lambda xp: lambda x, *, src, dst: get_backend(dst).copy(x),
          lambda x, *, src, dst: TensorSpec(x.shape, x.dtype, dst),
          grads=(lambda g, x_spec: bind(copy, g, src=g.device, dst=x_spec.device),),
          device_param="dst", flops=no_flops, **MOVED)
