"""Ops that make values: constants, random numbers, and copies to another device.

These ops have no tensor inputs (or, for `to_device`, one whose device they change), so each takes
a `device` parameter and runs there. Random ops are marked `random=True`: they draw new numbers on
every call, so a compiler pass may neither merge two of them nor fold one into a constant.
"""

from __future__ import annotations

from teachflow.backends import get_backend
from teachflow.dispatch import bind
from teachflow.ops.op import Op, TensorSpec
from teachflow.random import generator


def _creation_rule(*, shape: tuple, dtype, device: str, **_) -> TensorSpec:
    return TensorSpec(shape, dtype, device)


full = Op("full", lambda xp: lambda *, shape, fill_value, dtype, device:
          xp.full(shape, fill_value, dtype=dtype),
          _creation_rule, placed=True, arg_names=())
normal = Op("normal", lambda xp: lambda *, shape, dtype, device:
            generator(xp).standard_normal(shape, dtype=dtype),
            _creation_rule, placed=True, random=True, arg_names=())
uniform = Op("uniform", lambda xp: lambda *, shape, dtype, device:
             generator(xp).random(shape, dtype=dtype),
             _creation_rule, placed=True, random=True, arg_names=())
to_device = Op("to_device", lambda xp: lambda x, *, device: get_backend(device).asarray(x),
               lambda x, *, device: TensorSpec(x.shape, x.dtype, device),
               grads=(lambda g, x_spec: bind(to_device, g, device=x_spec.device),),
               placed=True)
