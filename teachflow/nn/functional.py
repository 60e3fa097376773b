"""``tfl.nn.functional``: the layers' computations as plain functions (PyTorch's ``F``).

Everything here is composed of teachflow's primitive ops, so it runs eagerly, traces into a
graph, and differentiates, with no rule of its own. Two are worth reading:

- `cross_entropy` is ``-log_softmax(logits)[target]`` averaged over the batch. Picking each
  row's target column is a product with a *one-hot* matrix (a comparison of the targets with
  ``0..C-1``), elementwise work that traces and fuses like any other, and whose gradient is
  ``softmax - one_hot``: the famous simple gradient comes out of the chain rule by itself.
- `dropout` draws a random mask where the graph runs (a random op, which no pass may fold or
  merge: two draws are two different masks) and scales what it keeps by ``1 / (1 - p)``, so
  that the expected value is unchanged and evaluation needs no scaling.
"""

from __future__ import annotations

from typing import Any

from teachflow.errors import DTypeError, ShapeError, TeachflowError, name_scope
from teachflow.factories import arange, rand
from teachflow.graph import Value
from teachflow.library import log_softmax, relu, sigmoid, softmax, tanh
from teachflow.tensor import Tensor, as_tensor

_REDUCTIONS = ("mean", "sum", "none")


def linear(x: Any, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """``x @ weight.T + bias``, with `weight` of shape (out_features, in_features)."""
    x = as_tensor(x)
    if x.shape[-1:] != weight.shape[1:]:
        raise ShapeError(f"the input has {x.shape[-1] if x.ndim else 'no'} features (shape "
                         f"{x.shape}) but the layer takes {weight.shape[1]} (its weight is "
                         f"{weight.shape})", op="linear",
                         hint="the last axis of the input must be the layer's in_features")
    y = x @ weight.T
    return y if bias is None else y + bias


def dropout(x: Any, p: float = 0.5, training: bool = True) -> Tensor:
    """Zero each element with probability `p` and scale the rest by ``1 / (1 - p)`` while
    `training`; the input itself otherwise."""
    x = as_tensor(x)
    p = check_probability(p, "dropout")
    if not training or p == 0.0:
        return x
    if p == 1.0:
        return x * 0.0
    if None in x.shape:
        raise ShapeError(f"dropout needs the whole shape to draw its mask, and this input's is "
                         f"{x.shape}", op="dropout",
                         hint="trace with a fixed batch size (no None in the input_signature)")
    keep = rand(*x.shape, dtype=x.dtype, device=x.device) >= p
    return x * (keep.astype(x.dtype) * (1.0 / (1.0 - p)))


def cross_entropy(logits: Any, target: Any, reduction: str = "mean") -> Tensor:
    """The cross-entropy loss of `logits` (N, C) for integer class labels `target` (N,): the
    mean (or sum, or each) of ``-log_softmax(logits)[i, target[i]]``."""
    logits, target = as_tensor(logits), as_tensor(target)
    _check_reduction(reduction, "cross_entropy")
    if logits.ndim != 2 or target.ndim != 1 or target.shape[0] != logits.shape[0]:
        raise ShapeError(f"takes logits of shape (N, C) and targets of shape (N,), not "
                         f"{logits.shape} and {target.shape}", op="cross_entropy",
                         hint="one row of class scores per example, one class index each")
    if logits.dtype.kind != "f" or target.dtype.kind not in "iu":
        raise DTypeError(f"takes float logits and integer targets, not {logits.dtype} and "
                         f"{target.dtype}", op="cross_entropy",
                         hint="targets are class indices: target.astype('int64')")
    classes = logits.shape[1]
    if not isinstance(target._data, Value):  # (traced: the labels exist only when it runs)
        labels = target.numpy()
        bad = labels[(labels < 0) | (labels >= classes)]
        if bad.size:
            raise TeachflowError(f"target holds class {int(bad[0])}, outside 0..{classes - 1} "
                                 f"for logits with {classes} classes", op="cross_entropy",
                                 hint="the last layer needs one output per class")
    with name_scope("cross_entropy"):  # (its nodes: one box in the stepper)
        one_hot = target.reshape(-1, 1) == arange(classes, device=target.device).reshape(1, -1)
        picked = (log_softmax(logits, axis=1) * one_hot.astype(logits.dtype)).sum(axis=1)
        return _reduce(-picked, reduction)


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    """The mean (or sum, or each) of ``(input - target) ** 2``; the shapes must be equal."""
    input, target = as_tensor(input), as_tensor(target)
    _check_reduction(reduction, "mse_loss")
    if input.shape != target.shape:
        raise ShapeError(f"the input has shape {input.shape} and the target {target.shape}: "
                         "they must be equal (broadcasting them would average the wrong "
                         "pairs)", op="mse_loss",
                         hint="reshape one of them, e.g. target.reshape(-1, 1) for a (N, 1) "
                              "output")
    with name_scope("mse_loss"):
        diff = input - target
        return _reduce(diff * diff, reduction)


def check_probability(p: Any, op: str) -> float:
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise TeachflowError(f"the drop probability must be a number in [0, 1], not {p!r}",
                             op=op, hint="p=0.5 drops half of the values")
    return float(p)


def _check_reduction(reduction: Any, op: str) -> None:
    if reduction not in _REDUCTIONS:
        raise TeachflowError(f"reduction must be one of {', '.join(_REDUCTIONS)}, not "
                             f"{reduction!r}", op=op, hint="reduction='mean' (the default)")


def _reduce(x: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return x.mean()
    return x.sum() if reduction == "sum" else x


__all__ = ["cross_entropy", "dropout", "linear", "log_softmax", "mse_loss", "relu", "sigmoid",
           "softmax", "tanh"]
