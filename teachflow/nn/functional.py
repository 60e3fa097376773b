"""``tfl.nn.functional``: the layers' computations as plain functions (PyTorch's ``F``).

Everything here is composed of teachflow's primitive ops, so it runs eagerly, traces into a
graph, and differentiates, with no rule of its own. The losses (`cross_entropy`, `nll_loss`,
the binary ones, `one_hot`) are written in `teachflow.nn.losses` and the smooth activations
(`gelu`, `silu`, `elu`, `leaky_relu`, `softplus`) in `teachflow.nn.activations`, each beside its
module; they are found here too, as PyTorch's ``F`` has them. Worth reading here:

- `dropout` draws a random mask where the graph runs (a random op, which no pass may fold or
  merge: two draws are two different masks) and scales what it keeps by ``1 / (1 - p)``, so
  that the expected value is unchanged and evaluation needs no scaling.
- `scaled_dot_product_attention` is two matrix products with a softmax between them, and the
  compiler shows what fusion makes of the scaling, the mask and the softmax in between.

Convolution and pooling are ops of their own (`teachflow.ops.convolution`, `teachflow.ops.pooling`:
im2col and a matmul, windows and their maxima), with their gradients as ops too: composed of
slices, a stack and a matmul, a convolution's gradient was KH·KW scatters. The functions here
check what a user passes and put it in the ops' terms (a padding of four sizes, pairs).
`batch_norm` is composed, and updates its running statistics in place.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.autodiff.tape import no_grad
from teachflow.core import dispatch
from teachflow.core.errors import DTypeError, IndexingError, ShapeError, TeachflowError, name_scope
from teachflow.graph import Value
from teachflow.nn.activations import elu, gelu, leaky_relu, silu, softplus
from teachflow.nn.losses import (
    binary_cross_entropy,
    binary_cross_entropy_with_logits,
    check_reduction,
    cross_entropy,
    nll_loss,
    one_hot,
    reduced,
)
from teachflow.nn.padding import pad
from teachflow.ops import convolution, pooling
from teachflow.tensor.factories import arange, rand
from teachflow.tensor.functions import (
    log_softmax,
    relu,
    sigmoid,
    softmax,
    tanh,
    where,
)
from teachflow.tensor.tensor import Tensor, as_tensor


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


def mse_loss(input: Any, target: Any, reduction: str = "mean") -> Tensor:
    """The mean (or sum, or each) of ``(input - target) ** 2``; the shapes must be equal."""
    input, target = as_tensor(input), as_tensor(target)
    check_reduction(reduction, "mse_loss")
    if input.shape != target.shape:
        raise ShapeError(f"the input has shape {input.shape} and the target {target.shape}: "
                         "they must be equal (broadcasting them would average the wrong "
                         "pairs)", op="mse_loss",
                         hint="reshape one of them, e.g. target.reshape(-1, 1) for a (N, 1) "
                              "output")
    with name_scope("mse_loss"):
        diff = input - target
        return reduced(diff * diff, reduction)


def layer_norm(input: Any, normalized_shape: int | Sequence[int], weight: Tensor | None = None,
               bias: Tensor | None = None, eps: float = 1e-5) -> Tensor:
    """Each example normalised over its last axes (those of `normalized_shape`): minus their
    mean, divided by ``sqrt(variance + eps)`` (the biased variance, as PyTorch's), then times
    `weight` plus `bias` where given."""
    x = as_tensor(input)
    shape = (normalized_shape,) if isinstance(normalized_shape, int) else tuple(normalized_shape)
    if not shape or x.shape[x.ndim - len(shape):] != shape or x.ndim < len(shape):
        raise ShapeError(f"normalizes the last axes of shape {shape}, and the input has shape "
                         f"{x.shape}", op="layer_norm",
                         hint="normalized_shape is the input's last axes, e.g. "
                              f"LayerNorm({x.shape[-1] if x.ndim else 'features'})")
    axes = tuple(range(x.ndim - len(shape), x.ndim))
    centred = x - x.mean(axis=axes, keepdims=True)
    y = centred / ((centred * centred).mean(axis=axes, keepdims=True) + eps).sqrt()
    y = y if weight is None else y * weight
    return y if bias is None else y + bias


def embedding(input: Any, weight: Tensor, padding_idx: int | None = None) -> Tensor:
    """Row ``input[...]`` of `weight` for each index of `input` (integers, any shape): the
    result has `input`'s shape plus the rows' length. The row `padding_idx` gets no gradient
    (as PyTorch's: a padding token's vector stays as it is)."""
    index = as_tensor(input)
    rows = weight.shape[0]
    if index.dtype.kind not in "iu":
        raise DTypeError(f"takes integer indices, not {index.dtype}", op="embedding",
                         hint="indices are row numbers: index.astype('int64')")
    if not isinstance(index._data, Value):  # (traced: the indices exist only when it runs)
        values = index.numpy()
        bad = values[(values < 0) | (values >= rows)]
        if bad.size:  # (NumPy would read index -1 as the last row)
            raise IndexingError(f"index {int(bad[0])} is outside 0..{rows - 1} for a table of "
                                f"{rows} rows", op="embedding",
                                hint="num_embeddings must exceed every index used")
    table = weight
    if padding_idx is not None:  # its row's values, detached: no gradient flows into it
        row = arange(rows, device=weight.device).reshape(rows, 1)
        table = where(row == padding_idx % rows, weight.detach(), weight)
    return table[index]


def conv2d(input: Any, weight: Tensor, bias: Tensor | None = None,
           stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] | str = 0,
           dilation: int | tuple[int, int] = 1, groups: int = 1) -> Tensor:
    """The 2-d convolution (a cross-correlation, as in every framework) of `input` (N, C, H, W)
    or (C, H, W) with `weight` (O, C / groups, KH, KW), plus `bias` (O,): PyTorch's ``conv2d``,
    with its `stride`, zero `padding` (an int, a pair, ``"valid"`` or ``"same"``), `dilation`
    (the kernel's taps spread apart) and `groups` (the channels split into groups that do not
    mix). Output size per axis: ``(H + 2 pad - dilation (K - 1) - 1) // stride + 1``.

    One op, ``conv2d`` (`teachflow.ops.convolution`: im2col and a matmul), and the bias added."""
    x, weight = as_tensor(input), as_tensor(weight)
    if x.ndim == 3:  # one image, no batch axis
        return conv2d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups)[0]
    _check_conv(x, weight, bias, groups)
    (sh, sw), (dh, dw) = conv_pair(stride, "stride"), conv_pair(dilation, "dilation")
    (top, bottom), (left, right) = _padding(padding, weight.shape[2:], (dh, dw), (sh, sw))
    out = dispatch.bind(convolution.conv2d, x, weight, stride=(sh, sw),
                        padding=(top, bottom, left, right), dilation=(dh, dw), groups=groups)
    return out if bias is None else out + bias.reshape(1, weight.shape[0], 1, 1)


def max_pool2d(input: Any, kernel_size: int | tuple[int, int],
               stride: int | tuple[int, int] | None = None,
               padding: int | tuple[int, int] = 0) -> Tensor:
    """The largest value of each `kernel_size` window of each channel, the windows `stride`
    apart (by default: `kernel_size`, side by side), the images padded by `padding` (at most
    half the window) with -inf: PyTorch's ``max_pool2d``. One op, ``max_pool2d``
    (`teachflow.ops.pooling`); the gradient goes to each window's largest value."""
    return _pool(pooling.max_pool2d, input, kernel_size, stride, padding)


def avg_pool2d(input: Any, kernel_size: int | tuple[int, int],
               stride: int | tuple[int, int] | None = None,
               padding: int | tuple[int, int] = 0) -> Tensor:
    """The mean of each `kernel_size` window of each channel (see `max_pool2d`), padded with
    zeros that count in the mean (PyTorch's default, ``count_include_pad=True``)."""
    return _pool(pooling.avg_pool2d, input, kernel_size, stride, padding)


def _pool(op: Any, input: Any, kernel_size: Any, stride: Any, padding: Any) -> Tensor:
    x = as_tensor(input)
    if x.ndim == 3:  # one image, no batch axis
        return _pool(op, x.unsqueeze(0), kernel_size, stride, padding)[0]
    _check_images(x, op.name)
    kernel = conv_pair(kernel_size, "kernel_size", op=op.name)
    stride = kernel if stride is None else conv_pair(stride, "stride", op=op.name)
    ph, pw = conv_pair(padding, "padding", least=0, op=op.name)
    if ph > kernel[0] // 2 or pw > kernel[1] // 2:
        raise ShapeError(f"padding {(ph, pw)} is more than half the {kernel} window: a window "
                         "could hold nothing but padding", op=op.name,
                         hint="as PyTorch: padding at most kernel_size // 2")
    return dispatch.bind(op, x, kernel_size=kernel, stride=stride, padding=(ph, ph, pw, pw))


def batch_norm(input: Any, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None,
               training: bool = False, momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Normalise each channel (axis 1) of `input` (N, C) or (N, C, H, W) to mean 0 and
    variance 1, then scale by `weight` and shift by `bias` (each (C,)): PyTorch's
    ``batch_norm``. While `training` (or with no running statistics) by the batch's own
    statistics, and the running ones, if given, move `momentum` of the way toward them
    (assigned in place: staged, a write-back), the variance unbiased as PyTorch keeps it;
    otherwise by the running statistics. Composed of reductions and elementwise ops: it fuses."""
    x = as_tensor(input)
    if x.ndim not in (2, 3, 4):
        raise ShapeError(f"takes (N, C), (N, C, L) or (N, C, H, W), not shape {x.shape}",
                         op="batch_norm", hint="the channels are axis 1")
    axes = (0, *range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    if training or running_mean is None:
        mean, var = x.mean(axis=axes), x.var(axis=axes, correction=0)
        if running_mean is not None:
            count = x.size // x.shape[1]
            if count < 2:
                raise ShapeError(f"one value per channel (input {x.shape}): its variance is "
                                 "not defined", op="batch_norm",
                                 hint="train with more than one value per channel")
            with no_grad():
                running_mean[...] = running_mean * (1 - momentum) + mean * momentum
                unbiased = var * (count / (count - 1))
                running_var[...] = running_var * (1 - momentum) + unbiased * momentum
    else:
        mean, var = running_mean, running_var
    y = (x - mean.reshape(shape)) / (var.reshape(shape) + eps).sqrt()
    if weight is not None:
        y = y * weight.reshape(shape)
    return y if bias is None else y + bias.reshape(shape)


def _check_images(x: Tensor, op: str) -> None:
    """Convolution and pooling take a batch of images of floating-point numbers (the shape
    rules say so too, but eagerly only the kernel runs)."""
    if x.ndim != 4:
        raise ShapeError(f"takes images (N, C, H, W) or one image (C, H, W), not shape "
                         f"{x.shape}", op=op,
                         hint="a batch of images: add the batch axis with x.unsqueeze(0)")
    if x.dtype.kind != "f":
        raise DTypeError(f"computes in floating point, and the input is {x.dtype}", op=op,
                         hint="cast first, e.g. x.astype('float32')")


def _check_conv(x: Tensor, weight: Tensor, bias: Tensor | None, groups: Any) -> None:
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"takes an input (N, C, H, W) and a weight (O, C / groups, KH, KW), not "
                         f"{x.shape} and {weight.shape}", op="conv2d",
                         hint="a batch of images: add the batch axis with x.unsqueeze(0)")
    for t in (x, weight):
        _check_images(t, "conv2d")
    if isinstance(groups, bool) or not isinstance(groups, int) or groups <= 0 \
            or x.shape[1] % groups or weight.shape[0] % groups:
        raise ShapeError(f"groups={groups!r} must be a positive int that divides the input's "
                         f"{x.shape[1]} channels and the {weight.shape[0]} output channels",
                         op="conv2d", hint="groups=1: every output channel sees every input one")
    if weight.shape[1] * groups != x.shape[1]:
        raise ShapeError(f"the input has {x.shape[1]} channels and the weight {weight.shape} "
                         f"takes {weight.shape[1]} per group ({groups} group(s))", op="conv2d",
                         hint="the weight's second axis is in_channels / groups")
    if bias is not None and bias.shape != weight.shape[:1]:
        raise ShapeError(f"the bias has shape {bias.shape}, and the weight {weight.shape} makes "
                         f"{weight.shape[0]} output channels", op="conv2d",
                         hint="one bias per output channel: shape (out_channels,)")


def conv_pair(value: Any, name: str, least: int = 1, op: str = "conv2d") -> tuple[int, int]:
    """A size, stride or padding of a convolution, per spatial axis: ``3`` -> (3, 3); ``(2, 1)``
    stays; anything else is refused."""
    pair = (value, value) if isinstance(value, int | np.integer) else value
    if not isinstance(pair, tuple | list) or len(pair) != 2 or any(
            isinstance(v, bool) or not isinstance(v, int | np.integer) or v < least
            for v in pair):
        raise DTypeError(f"{name} is an int >= {least} or a pair of them, not {value!r}",
                         op=op, hint=f"e.g. {name}=1 or {name}=(2, 1)")
    return int(pair[0]), int(pair[1])


def _padding(padding: Any, kernel: tuple, dilation: tuple, stride: tuple) -> tuple:
    """The zeros added (before, after) each spatial axis. ``"same"`` keeps the size (stride 1
    only, as PyTorch); where the kernel's reach is odd, the extra zero goes after."""
    if padding == "valid":
        return (0, 0), (0, 0)
    if padding == "same":
        if stride != (1, 1):
            raise ShapeError(f"padding='same' keeps the size only with stride 1, not {stride}",
                             op="conv2d", hint="give the padding as a number")
        reach = [d * (k - 1) for d, k in zip(dilation, kernel, strict=True)]
        return tuple((r // 2, r - r // 2) for r in reach)
    return tuple((p, p) for p in conv_pair(padding, "padding", least=0))


def scaled_dot_product_attention(query: Any, key: Any, value: Any, attn_mask: Any = None,
                                 dropout_p: float = 0.0, is_causal: bool = False,
                                 scale: float | None = None) -> Tensor:
    """Attention, as PyTorch's: ``softmax(q @ k^T * scale + mask) @ v``, with `scale`
    ``1 / sqrt(E)`` by default (E: the last axis of q and k). A boolean `attn_mask` (or
    ``is_causal``, a lower triangle) keeps the scores where it is True and sets the others to
    -inf; a float one is added. Written from teachflow's ops, no kernel of its own: two matmuls
    and, between them, elementwise work and softmax's reductions, which the compiler fuses."""
    q, k, v = (as_tensor(t) for t in (query, key, value))
    if min(q.ndim, k.ndim, v.ndim) < 2 or q.shape[-1] != k.shape[-1] or \
            k.shape[-2] != v.shape[-2]:
        raise ShapeError(f"attention takes query (..., L, E), key (..., S, E) and value "
                         f"(..., S, Ev); got {q.shape}, {k.shape} and {v.shape}",
                         op="scaled_dot_product_attention",
                         hint="query and key share their last axis, key and value their "
                              "second-to-last")
    if is_causal and attn_mask is not None:
        raise ShapeError("give attn_mask or is_causal, not both",
                         op="scaled_dot_product_attention")
    scale = 1.0 / float(np.sqrt(q.shape[-1])) if scale is None else float(scale)
    scores = (q @ k.swapaxes(-2, -1)) * scale
    if is_causal:
        attn_mask = np.tril(np.ones((q.shape[-2], k.shape[-2]), dtype=bool))
    if attn_mask is not None:
        mask = attn_mask if isinstance(attn_mask, Tensor | np.ndarray) else as_tensor(attn_mask)
        scores = where(mask, scores, -np.inf) if mask.dtype == np.bool_ else scores + mask
    weights = softmax(scores, -1)
    if dropout_p:
        weights = dropout(weights, dropout_p)
    return weights @ v


def check_probability(p: Any, op: str) -> float:
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise TeachflowError(f"the drop probability must be a number in [0, 1], not {p!r}",
                             op=op, hint="p=0.5 drops half of the values")
    return float(p)


__all__ = ["avg_pool2d", "batch_norm", "binary_cross_entropy",
           "binary_cross_entropy_with_logits", "conv2d", "cross_entropy", "dropout", "elu",
           "embedding", "gelu", "layer_norm", "leaky_relu", "linear", "log_softmax", "max_pool2d",
           "mse_loss", "nll_loss", "one_hot", "pad", "relu", "scaled_dot_product_attention",
           "sigmoid", "silu", "softmax", "softplus", "tanh"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
