"""``tfl.nn.functional``: the layers' computations as plain functions (PyTorch's ``F``).

Everything here is composed of teachflow's primitive ops, so it runs eagerly, traces into a
graph, and differentiates, with no rule of its own. The losses (`cross_entropy`, `nll_loss`,
the binary ones, `one_hot`) are written in `teachflow.nn.losses` and the smooth activations
(`gelu`, `silu`, `elu`, `leaky_relu`, `softplus`) in `teachflow.nn.activations`, each beside its
module; they are found here too, as PyTorch's ``F`` has them. Worth reading here:

- `dropout` draws a random mask where the graph runs (a random op, which no pass may fold or
  merge: two draws are two different masks) and scales what it keeps by ``1 / (1 - p)``, so
  that the expected value is unchanged and evaluation needs no scaling.
- `conv2d` is *im2col* and one matrix product, as cuDNN's first algorithm and Caffe did: each
  place of the kernel over the image reads a strided slice of the (padded) input, the slices
  stacked are the columns, and the kernel flattened is the matrix that multiplies them. Slices,
  a stack, reshapes and a matmul: its gradient is theirs, eagerly and staged.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

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
from teachflow.tensor.factories import arange, rand, zeros
from teachflow.tensor.functions import (
    concatenate,
    log_softmax,
    relu,
    sigmoid,
    softmax,
    stack,
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
    mix). Output size per axis: ``(H + 2 pad - dilation (K - 1) - 1) // stride + 1``."""
    x, weight = as_tensor(input), as_tensor(weight)
    if x.ndim == 3:  # one image, no batch axis
        return conv2d(x.unsqueeze(0), weight, bias, stride, padding, dilation, groups)[0]
    _check_conv(x, weight, bias, groups)
    out_channels, group_channels, kh, kw = weight.shape
    (sh, sw), (dh, dw) = conv_pair(stride, "stride"), conv_pair(dilation, "dilation")
    (top, bottom), (left, right) = _padding(padding, (kh, kw), (dh, dw), (sh, sw))
    x = _zero_padded(x, top, bottom, left, right)
    oh, ow = ((size - d * (k - 1) - 1) // s + 1
              for size, d, k, s in zip(x.shape[2:], (dh, dw), (kh, kw), (sh, sw), strict=True))
    if oh <= 0 or ow <= 0:
        raise ShapeError(f"a {kh}x{kw} kernel (dilation {(dh, dw)}) does not fit the padded "
                         f"input of {x.shape[2]}x{x.shape[3]}", op="conv2d",
                         hint="pad the input (padding=...), or use a smaller kernel")
    # im2col: one strided slice per tap of the kernel, each (N, C, OH, OW), stacked.
    taps = [x[:, :, i * dh:i * dh + sh * (oh - 1) + 1:sh, j * dw:j * dw + sw * (ow - 1) + 1:sw]
            for i in range(kh) for j in range(kw)]
    columns = stack(taps, axis=2).reshape(-1, groups, group_channels * kh * kw, oh * ow)
    kernels = weight.reshape(groups, out_channels // groups, group_channels * kh * kw)
    out = (kernels @ columns).reshape(-1, out_channels, oh, ow)  # (N, G, O/G, OH*OW) first
    return out if bias is None else out + bias.reshape(1, out_channels, 1, 1)


def _check_conv(x: Tensor, weight: Tensor, bias: Tensor | None, groups: Any) -> None:
    if x.ndim != 4 or weight.ndim != 4:
        raise ShapeError(f"takes an input (N, C, H, W) and a weight (O, C / groups, KH, KW), not "
                         f"{x.shape} and {weight.shape}", op="conv2d",
                         hint="a batch of images: add the batch axis with x.unsqueeze(0)")
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


def _zero_padded(x: Tensor, top: int, bottom: int, left: int, right: int) -> Tensor:
    """`x` with zeros added around its last two axes (two concatenations)."""
    if not top + bottom + left + right:
        return x
    if None in x.shape:
        raise ShapeError(f"padding needs the whole shape, and this input's is {x.shape}",
                         op="conv2d", hint="trace with a fixed batch size (no None)")
    n, c, h, w = x.shape

    def band(*shape: int) -> list[Tensor]:
        return [zeros(*shape, dtype=x.dtype, device=x.device)] if 0 not in shape else []
    x = concatenate([*band(n, c, top, w), x, *band(n, c, bottom, w)], axis=2)
    return concatenate([*band(n, c, h + top + bottom, left), x,
                        *band(n, c, h + top + bottom, right)], axis=3)


def check_probability(p: Any, op: str) -> float:
    if isinstance(p, bool) or not isinstance(p, int | float) or not 0.0 <= p <= 1.0:
        raise TeachflowError(f"the drop probability must be a number in [0, 1], not {p!r}",
                             op=op, hint="p=0.5 drops half of the values")
    return float(p)


__all__ = ["conv2d", "cross_entropy", "dropout", "embedding", "layer_norm", "linear",
           "log_softmax", "mse_loss", "relu", "sigmoid", "softmax", "tanh"]
__all__ += ["binary_cross_entropy", "binary_cross_entropy_with_logits", "elu", "gelu",
            "leaky_relu", "nll_loss", "one_hot", "silu", "softplus"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
