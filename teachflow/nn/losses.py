"""The classification losses, each a function (in ``tfl.nn.functional``) beside its module:
`nll_loss`, `cross_entropy`, `binary_cross_entropy`, `binary_cross_entropy_with_logits`; and
`one_hot`, the targets as rows of 0s and 1s.

All are composed of teachflow's ops: they trace, fuse and differentiate with no rule of their
own. Three ideas carry them:

- *Picking by a product.* ``-log p[i, target[i]]`` is the sum over a row of ``log p`` times a
  one-hot row (a comparison of the targets with ``0..C-1``): elementwise work that fuses, and
  whose gradient through `cross_entropy` is ``softmax - one_hot``, out of the chain rule by
  itself. A class `weight` multiplies the one-hot row; an `ignore_index` zeroes it.
- *Label smoothing* mixes the target with the uniform distribution: ``(1 - ε) one_hot + ε/C``,
  so the loss is ``(1 - ε)`` times the loss of the label plus ``ε`` times the mean of
  ``-log p`` over the classes; probability targets are mixed the same way.
- *Stable logits.* ``binary_cross_entropy_with_logits`` is ``softplus(x) - t x``, which never
  forms ``sigmoid(x)`` nor its log: ``softplus`` is an op that does not overflow. The loss of
  probabilities, ``binary_cross_entropy``, clamps each log at -100, as PyTorch does, so a
  probability of exactly 0 or 1 costs 100 and not infinity.

``reduction=`` is ``"mean"`` (over the examples counted: with weights, divided by the sum of
the targets' weights, as PyTorch), ``"sum"`` or ``"none"`` (one loss per example).
"""

from __future__ import annotations

from typing import Any

from teachflow.core import dispatch
from teachflow.core.errors import (
    DTypeError,
    IndexingError,
    ShapeError,
    TeachflowError,
    TraceError,
    name_scope,
)
from teachflow.graph import Value
from teachflow.nn.module import Module
from teachflow.tensor.factories import arange
from teachflow.tensor.functions import log_softmax, maximum, softplus
from teachflow.tensor.tensor import Tensor, as_tensor

_REDUCTIONS = ("mean", "sum", "none")
_TINY = 1e-45


def check_reduction(reduction: Any, op: str) -> None:
    if reduction not in _REDUCTIONS:
        raise TeachflowError(f"reduction must be one of {', '.join(_REDUCTIONS)}, not "
                             f"{reduction!r}", op=op, hint="reduction='mean' (the default)")


def reduced(x: Tensor, reduction: str) -> Tensor:
    if reduction == "mean":
        return x.mean()
    return x.sum() if reduction == "sum" else x


def _labels(target: Tensor) -> Any:
    """The values of integer targets now, as a NumPy array; None while tracing (they exist
    only when the graph runs, an argument's or a captured tensor's alike)."""
    target = dispatch.current_interpreter().operand(target)
    return None if isinstance(target._data, Value) else target.numpy()


def one_hot(tensor: Any, num_classes: int = -1) -> Tensor:
    """Each integer of `tensor` as a row of `num_classes` int64 zeros with a 1 at its place:
    the result's shape is the input's plus ``(num_classes,)``. With -1, one more than the
    largest value (which must be known now: not while tracing)."""
    t = as_tensor(tensor)
    if t.dtype.kind not in "iu":
        raise DTypeError(f"takes integer class indices, not {t.dtype}", op="one_hot",
                         hint="t.astype('int64')")
    if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < -1:
        raise TeachflowError(f"num_classes is an int >= 1 (or -1: found from the values), not "
                             f"{num_classes!r}", op="one_hot", hint="one_hot(y, num_classes=10)")
    labels = _labels(t)
    if num_classes == -1:
        if labels is None:
            raise TraceError("one_hot with num_classes=-1 finds the number of classes from the "
                             "values, and a traced tensor has none yet", op="one_hot",
                             hint="give it: one_hot(y, num_classes=10)")
        num_classes = int(labels.max()) + 1 if labels.size else 0
    if labels is not None:
        bad = labels[(labels < 0) | (labels >= num_classes)]
        if bad.size:
            raise IndexingError(f"class {int(bad[0])} is outside 0..{num_classes - 1} "
                                f"(num_classes={num_classes})", op="one_hot",
                                hint="num_classes must exceed every class index")
    rows = t.unsqueeze(-1) == arange(num_classes, device=t.device)
    return rows.astype("int64")


def _check_weight(weight: Any, classes: int, op: str) -> Tensor | None:
    if weight is None:
        return None
    weight = as_tensor(weight)
    if weight.shape != (classes,):
        raise ShapeError(f"weight has shape {weight.shape}, and there are {classes} classes",
                         op=op, hint="one weight per class: shape (C,)")
    return weight


def _check_smoothing(label_smoothing: Any) -> float:
    if isinstance(label_smoothing, bool) or not isinstance(label_smoothing, int | float) or \
            not 0.0 <= label_smoothing <= 1.0:
        raise TeachflowError(f"label_smoothing is a number in [0, 1], not {label_smoothing!r}",
                             op="cross_entropy", hint="label_smoothing=0.1")
    return float(label_smoothing)


def _check_pair(scores: Tensor, target: Tensor, op: str, what: str) -> None:
    if scores.ndim != 2 or target.ndim != 1 or target.shape[0] != scores.shape[0]:
        raise ShapeError(f"takes {what} of shape (N, C) and targets of shape (N,), not "
                         f"{scores.shape} and {target.shape}", op=op,
                         hint="one row of class scores per example, one class index each (or, "
                              "for cross_entropy, probability targets of the logits' shape)")
    if scores.dtype.kind != "f" or target.dtype.kind not in "iu":
        raise DTypeError(f"takes float {what} and integer targets, not {scores.dtype} and "
                         f"{target.dtype}", op=op,
                         hint="targets are class indices: target.astype('int64')")


def _label_loss(logp: Tensor, target: Tensor, weight: Tensor | None, ignore_index: int,
                reduction: str, smoothing: float, op: str) -> Tensor:
    """The loss of log-probabilities `logp` (N, C) for class labels `target` (N,)."""
    classes = logp.shape[1]
    labels = _labels(target)
    ignored = None  # how many targets are ignore_index (unknown while tracing)
    if labels is not None:
        ignored = int((labels == ignore_index).sum())
        bad = labels[((labels < 0) | (labels >= classes)) & (labels != ignore_index)]
        if bad.size:
            raise TeachflowError(f"target holds class {int(bad[0])}, outside 0..{classes - 1} "
                                 f"for inputs of {classes} classes", op=op,
                                 hint="the last layer needs one output per class")
    target = dispatch.current_interpreter().operand(target)
    one_hot = target.reshape(-1, 1) == arange(classes, device=target.device).reshape(1, -1)
    kept = None if ignored == 0 else (target != ignore_index)  # (None: every example counts)
    if kept is not None and 0 <= ignore_index < classes:  # (a class itself can be ignored)
        one_hot = one_hot & kept.reshape(-1, 1)
    picks = one_hot.astype(logp.dtype)
    if weight is not None:
        picks = picks * weight.reshape(1, -1)
    loss = -(logp * picks).sum(axis=1)
    if smoothing:
        spread = logp if weight is None else logp * weight.reshape(1, -1)
        uniform = -spread.sum(axis=1) / classes
        if kept is not None:
            uniform = uniform * kept.astype(logp.dtype)
        loss = (1 - smoothing) * loss + smoothing * uniform
    if reduction != "mean":
        return reduced(loss, reduction)
    if weight is not None:  # divided by the weights of the targets counted
        return loss.sum() / picks.sum()
    if ignored == 0:
        return loss.mean()
    # The mean over the targets kept, counted now or (traced) when the graph runs; divided
    # before the sum, so that the division fuses into the kernel that sums.
    count = target.shape[0] - ignored if ignored is not None else \
        kept.astype(logp.dtype).sum()
    return (loss / count).sum()


def nll_loss(input: Any, target: Any, weight: Any = None, *, ignore_index: int = -100,
             reduction: str = "mean") -> Tensor:
    """The negative log-likelihood of log-probabilities `input` (N, C) (a `log_softmax`'s) for
    class labels `target` (N,): the mean (or sum, or each) of ``-weight[t] input[i, t]``,
    ``t = target[i]``. A target equal to `ignore_index` adds nothing and is not counted."""
    logp, target = as_tensor(input), as_tensor(target)
    check_reduction(reduction, "nll_loss")
    _check_pair(logp, target, "nll_loss", "log-probabilities")
    weight = _check_weight(weight, logp.shape[1], "nll_loss")
    with name_scope("nll_loss"):  # (its nodes: one box in the stepper)
        return _label_loss(logp, target, weight, ignore_index, reduction, 0.0, "nll_loss")


def cross_entropy(logits: Any, target: Any, reduction: str = "mean",
                  ignore_index: int = -100, *, weight: Any = None,
                  label_smoothing: float = 0.0) -> Tensor:
    """The cross-entropy loss of `logits` (N, C): for integer class labels `target` (N,), the
    mean (or sum, or each) of ``-log_softmax(logits)[i, target[i]]`` (`nll_loss` of the
    log-softmax, with its `weight` and `ignore_index`); for probability targets (N, C), float,
    ``-sum(target * log_softmax(logits))`` per example. `label_smoothing` ε mixes the target
    with the uniform distribution: ``(1 - ε) target + ε / C``."""
    logits, target = as_tensor(logits), as_tensor(target)
    check_reduction(reduction, "cross_entropy")
    smoothing = _check_smoothing(label_smoothing)
    if target.dtype.kind == "f" and target.shape == logits.shape:
        return _probability_loss(logits, target, weight, reduction, smoothing)
    _check_pair(logits, target, "cross_entropy", "logits")
    weight = _check_weight(weight, logits.shape[1], "cross_entropy")
    with name_scope("cross_entropy"):
        return _label_loss(log_softmax(logits, axis=1), target, weight, ignore_index,
                           reduction, smoothing, "cross_entropy")


def _probability_loss(logits: Tensor, target: Tensor, weight: Any, reduction: str,
                      smoothing: float) -> Tensor:
    if logits.ndim != 2 or target.shape != logits.shape or logits.dtype.kind != "f":
        raise ShapeError(f"takes float logits (N, C) and probability targets of the same "
                         f"shape, not {logits.dtype}{list(logits.shape)} and "
                         f"{target.dtype}{list(target.shape)}", op="cross_entropy",
                         hint="class labels are integers (N,); probabilities are floats (N, C)")
    classes = logits.shape[1]
    weight = _check_weight(weight, classes, "cross_entropy")
    with name_scope("cross_entropy"):
        if smoothing:
            target = (1 - smoothing) * target + smoothing / classes
        if weight is not None:
            target = target * weight.reshape(1, -1)
        return reduced(-(log_softmax(logits, axis=1) * target).sum(axis=1), reduction)


def _check_same_shape(input: Tensor, target: Tensor, op: str) -> None:
    if input.shape != target.shape:
        raise ShapeError(f"the input has shape {input.shape} and the target {target.shape}: "
                         "they must be equal", op=op,
                         hint="reshape one of them, e.g. target.reshape(-1, 1) for a (N, 1) "
                              "output")
    if input.dtype.kind != "f" or target.dtype.kind not in "fb":
        raise DTypeError(f"takes float inputs and float targets, not {input.dtype} and "
                         f"{target.dtype}", op=op, hint="target.astype(input.dtype)")


def binary_cross_entropy(input: Any, target: Any, weight: Any = None, *,
                         reduction: str = "mean") -> Tensor:
    """``-(t log p + (1 - t) log(1 - p))`` of probabilities `input` (a sigmoid's) and targets
    in [0, 1], each log at least -100 (as PyTorch's); times `weight` where given."""
    p, t = as_tensor(input), as_tensor(target)
    check_reduction(reduction, "binary_cross_entropy")
    _check_same_shape(p, t, "binary_cross_entropy")
    values = _labels(p)
    if values is not None and ((values < 0) | (values > 1)).any():
        raise TeachflowError("the input holds values outside [0, 1]: it takes probabilities",
                             op="binary_cross_entropy",
                             hint="for scores (logits), binary_cross_entropy_with_logits, which "
                                  "is stable too")
    with name_scope("binary_cross_entropy"):
        loss = -(t * _clamped_log(p) + (1 - t) * _clamped_log(1 - p))
        return reduced(loss if weight is None else loss * weight, reduction)


def _clamped_log(p: Tensor) -> Tensor:
    """max(log p, -100), as PyTorch's; p is first kept from 0 (by 1e-45, below e^-100 and the
    least float32), so that no log of 0 is computed, nor a NaN in the gradient there."""
    return maximum(p.clip(min=_TINY).log(), -100.0)


def binary_cross_entropy_with_logits(input: Any, target: Any, weight: Any = None, *,
                                     reduction: str = "mean", pos_weight: Any = None) -> Tensor:
    """`binary_cross_entropy` of ``sigmoid(input)``, computed from the logits without overflow:
    ``softplus(x) - t x``; `pos_weight` weighs the positive term (one per class, broadcast
    along the last axis): ``(1 - t) x + (1 + (pos_weight - 1) t) softplus(-x)``."""
    x, t = as_tensor(input), as_tensor(target)
    check_reduction(reduction, "binary_cross_entropy_with_logits")
    _check_same_shape(x, t, "binary_cross_entropy_with_logits")
    with name_scope("binary_cross_entropy_with_logits"):
        if pos_weight is None:
            loss = softplus(x) - x * t
        else:
            loss = (1 - t) * x + (1 + (pos_weight - 1) * t) * softplus(-x)
        return reduced(loss if weight is None else loss * weight, reduction)


# --- Their modules ------------------------------------------------------------------------------


class NLLLoss(Module):
    """``loss(log_probabilities, target)`` is `nll_loss`, with its options."""

    def __init__(self, weight: Any = None, *, ignore_index: int = -100,
                 reduction: str = "mean") -> None:
        super().__init__()
        check_reduction(reduction, "NLLLoss")
        self.weight, self.ignore_index, self.reduction = weight, ignore_index, reduction

    def forward(self, input: Any, target: Any) -> Any:
        return nll_loss(input, target, self.weight, ignore_index=self.ignore_index,
                        reduction=self.reduction)


class BCELoss(Module):
    """``loss(probabilities, target)`` is `binary_cross_entropy`."""

    def __init__(self, weight: Any = None, *, reduction: str = "mean") -> None:
        super().__init__()
        check_reduction(reduction, "BCELoss")
        self.weight, self.reduction = weight, reduction

    def forward(self, input: Any, target: Any) -> Any:
        return binary_cross_entropy(input, target, self.weight, reduction=self.reduction)


class BCEWithLogitsLoss(Module):
    """``loss(logits, target)`` is `binary_cross_entropy_with_logits`."""

    def __init__(self, weight: Any = None, *, reduction: str = "mean",
                 pos_weight: Any = None) -> None:
        super().__init__()
        check_reduction(reduction, "BCEWithLogitsLoss")
        self.weight, self.reduction, self.pos_weight = weight, reduction, pos_weight

    def forward(self, input: Any, target: Any) -> Any:
        return binary_cross_entropy_with_logits(input, target, self.weight,
                                                reduction=self.reduction,
                                                pos_weight=self.pos_weight)
