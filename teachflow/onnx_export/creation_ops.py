"""Making tensors in ONNX's words: ``full``, ``arange`` and ``eye``; moving one to a device
(``to_device``, ``copy``); and the random ones, which cannot be exported (`REFUSED` says why).

A tensor made from constants is made when the model runs, as teachflow's graph makes it:
``ConstantOfShape``, ``Range``, ``EyeLike``, in a dtype onnxruntime takes, cast to the one asked
for. Random numbers are another matter: ONNX's random operators draw from the runtime's own
generator, so no seed makes them teachflow's numbers.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teachflow.graph import Node
from teachflow.onnx_export.onnxruntime_types import carrier

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Convert, Emitter

INT64 = np.dtype(np.int64)

_RANDOM = ("ONNX's {} draws from onnxruntime's own generator, so the model could never compute "
           "the numbers teachflow computes, whatever the seed; put a module in eval() mode (no "
           "dropout), or pass the random numbers in as an argument")

#: The ops that cannot be exported, and why.
REFUSED: dict[str, str] = {"normal": _RANDOM.format("RandomNormal"),
                           "uniform": _RANDOM.format("RandomUniform"),
                           "all_reduce": "an all-reduce exchanges data with other processes, and "
                                         "an ONNX model runs in one (export the model's forward "
                                         "pass, without the training step's collectives)"}


def _full(e: Emitter, node: Node) -> str:
    p = node.params
    value = e.tensor(np.full(1, p["fill_value"], dtype=p["dtype"]))
    return e.add("ConstantOfShape", [e.ints(p["shape"])], value=value)


def _arange(e: Emitter, node: Node) -> str:
    """``Range`` in int64 or float64, where NumPy counts the values (so the length is NumPy's),
    then cast to the dtype asked for."""
    p, dtype = node.params, node.spec.dtype
    limits = (p["start"], p["stop"], p["step"])
    inner = INT64 if all(isinstance(v, int) for v in limits) else np.dtype(np.float64)
    out = e.add("Range", [e.input(v, inner) for v in limits])
    return out if inner == dtype else e.cast(out, dtype)


def _eye(e: Emitter, node: Node) -> str:
    p, dtype = node.params, node.spec.dtype
    inner = carrier("EyeLike", dtype)
    zeros = e.add("ConstantOfShape", [e.ints([p["n"], p["m"]])],
                  value=e.tensor(np.zeros(1, dtype=inner)))
    out = e.add("EyeLike", [zeros])
    return out if inner == dtype else e.cast(out, dtype)


def _to_device(e: Emitter, node: Node) -> str:
    """ONNX has no devices: the runtime decides where the model runs."""
    return e.add("Identity", [e.input(node.inputs[0])])


#: Converters by op name (`teachflow.onnx_export.emitter.CONVERTERS` has every module's).
CONVERTERS: dict[str, Convert] = {"full": _full, "arange": _arange, "eye": _eye,
                                  "to_device": _to_device, "copy": _to_device}
