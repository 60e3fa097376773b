"""Pooling: the largest value, or the mean, of each window of an image.

`max_pool2d` and `avg_pool2d` read the same windows as a convolution and reduce each over its
taps, channel by channel: tap by tap, each tap a strided view of the padded images (`_taps`),
the largest kept (or the sum made) by an elementwise op over the whole batch, which for the few
taps of a pooling window is several times faster than a reduction over a window view. Max
pooling pads with -inf, so that padding never wins; average pooling pads with zeros and divides
by the window's whole area, padding included (PyTorch's default, ``count_include_pad=True``, and
ONNX's ``AveragePool`` with ``count_include_pad=1``).

Their gradients are ops of their own, each linear in the cotangent:

- `avg_pool2d_grad(g)` spreads each window's cotangent evenly over its taps and adds the
  windows up (*col2im*, `windows.add_windows`); its own gradient is `avg_pool2d` again.
- `max_pool2d_grad(g, x)` sends each window's cotangent to the tap that held its maximum (the
  first, where several tie: PyTorch's rule), found again from `x`. The map from the cotangent
  is linear, with `x` only choosing the taps: its gradient for `g` is `max_pool2d_select(gg,
  x)`, which reads `gg` at those same taps, and that op's gradient is `max_pool2d_grad` again.
  `max_pool2d_select` is also max pooling's forward mode: the tangent moves as the winners do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.ops import tangents
from teachflow.ops.op import Op, RuleError, TensorSpec
from teachflow.ops.views import batched, reshape
from teachflow.ops.windows import add_windows, check_image, out_hw, padded, tap

_ONE = (1, 1)


def _taps(xp: Any, x: Any, kernel_size: tuple, stride: tuple, padding: tuple,
          fill: Any) -> list:
    """What each tap of the window reads at every position: KH·KW strided views (N, C, OH, OW)
    of `x` padded with `fill`. A window of a few taps is reduced fastest tap by tap, each step
    an elementwise op over the whole batch."""
    hw = out_hw(x.shape[2:], kernel_size, padding, stride, _ONE)
    whole = padded(xp, x, padding, fill)
    return [whole[tap(i, j, stride, _ONE, hw)] for i in range(kernel_size[0])
            for j in range(kernel_size[1])]


def _winners(xp: Any, x: Any, kernel_size: tuple, stride: tuple, padding: tuple) -> Any:
    """For each window of `x`, which tap (i·KW + j) holds its maximum, the first of ties (a
    later tap wins only if it is larger)."""
    taps = _taps(xp, x, kernel_size, stride, padding, -np.inf)
    best, winners = taps[0].copy(), xp.zeros(taps[0].shape, dtype=np.int64)
    for k, values in enumerate(taps[1:], start=1):
        winners[values > best] = k
        xp.maximum(best, values, out=best)
    return winners


def _max_pool_kernel(xp: Any):
    def max_pool2d(x: Any, *, kernel_size: tuple, stride: tuple, padding: tuple) -> Any:
        taps = _taps(xp, x, kernel_size, stride, padding, -np.inf)
        out = taps[0].copy()
        for values in taps[1:]:
            xp.maximum(out, values, out=out)
        return out

    return max_pool2d


def _max_pool_grad_kernel(xp: Any):
    def max_pool2d_grad(g: Any, x: Any, *, kernel_size: tuple, stride: tuple,
                        padding: tuple) -> Any:
        winners, (kh, kw) = _winners(xp, x, kernel_size, stride, padding), kernel_size
        top, bottom, left, right = padding
        h, w = x.shape[2:]
        out = xp.zeros((*x.shape[:2], h + top + bottom, w + left + right), dtype=g.dtype)
        for i in range(kh):
            for j in range(kw):
                out[tap(i, j, stride, _ONE, g.shape[2:])] += g * (winners == i * kw + j)
        return out[:, :, top:top + h, left:left + w]

    return max_pool2d_grad


def _select_kernel(xp: Any):
    def max_pool2d_select(y: Any, x: Any, *, kernel_size: tuple, stride: tuple,
                          padding: tuple) -> Any:
        winners = _winners(xp, x, kernel_size, stride, padding)
        out = xp.zeros(winners.shape, dtype=y.dtype)
        for k, values in enumerate(_taps(xp, y, kernel_size, stride, padding, 0)):
            out[winners == k] = values[winners == k]
        return out

    return max_pool2d_select


def _avg_pool_kernel(xp: Any):
    def avg_pool2d(x: Any, *, kernel_size: tuple, stride: tuple, padding: tuple) -> Any:
        taps = _taps(xp, x, kernel_size, stride, padding, 0)
        out = taps[0].copy()
        for values in taps[1:]:
            out += values
        out /= len(taps)
        return out

    return avg_pool2d


def _avg_pool_grad_kernel(xp: Any):
    def avg_pool2d_grad(g: Any, *, shape: tuple, kernel_size: tuple, stride: tuple,
                        padding: tuple) -> Any:
        (kh, kw), (n, c, oh, ow) = kernel_size, g.shape
        share = xp.broadcast_to((g / (kh * kw))[:, :, None, None], (n, c, kh, kw, oh, ow))
        return add_windows(xp, share, shape, padding, stride, _ONE)

    return avg_pool2d_grad


# --- Shape rules ---------------------------------------------------------------------------------


def _check_params(kernel_size: tuple, stride: tuple, padding: tuple) -> None:
    for name, value in (("kernel_size", kernel_size), ("stride", stride)):
        if len(value) != 2 or min(value) < 1:
            raise RuleError(f"{name} must be two ints >= 1, not {value}")
    if len(padding) != 4 or min(padding) < 0:
        raise RuleError(f"padding must be four ints >= 0 (top, bottom, left, right), not "
                        f"{padding}")
    half = (kernel_size[0] // 2,) * 2 + (kernel_size[1] // 2,) * 2
    if any(p > h for p, h in zip(padding, half, strict=True)):
        raise RuleError(f"padding {padding} is more than half the {kernel_size} window: a "
                        "window could hold nothing but padding",
                        hint="as PyTorch: padding at most kernel_size // 2")


def _pool_rule(x: TensorSpec, *, kernel_size: tuple, stride: tuple,
               padding: tuple) -> TensorSpec:
    _check_params(kernel_size, stride, padding)
    check_image("the input", x)
    oh, ow = out_hw(x.shape[2:], kernel_size, padding, stride, _ONE)
    return TensorSpec((*x.shape[:2], oh, ow), x.dtype)


def _same_images(what: str, a: TensorSpec, b: TensorSpec) -> None:
    check_image(what, a)
    if a.shape[1:] != b.shape[1:] or (None not in (a.shape[0], b.shape[0]) and \
            a.shape[0] != b.shape[0]):
        raise RuleError(f"{what} has shape {a.shape}, and must have {b.shape}")


def _max_grad_rule(g: TensorSpec, x: TensorSpec, *, kernel_size: tuple, stride: tuple,
                   padding: tuple) -> TensorSpec:
    _same_images("the cotangent", g, _pool_rule(x, kernel_size=kernel_size, stride=stride,
                                                padding=padding))
    return TensorSpec(x.shape, g.dtype)


def _select_rule(y: TensorSpec, x: TensorSpec, *, kernel_size: tuple, stride: tuple,
                 padding: tuple) -> TensorSpec:
    _same_images("y", y, x)
    out = _pool_rule(x, kernel_size=kernel_size, stride=stride, padding=padding)
    return TensorSpec(out.shape, y.dtype)


def _avg_grad_rule(g: TensorSpec, *, shape: tuple, kernel_size: tuple, stride: tuple,
                   padding: tuple) -> TensorSpec:
    if len(shape) != 2 or min(shape) < 1:
        raise RuleError(f"shape must be the image's two sizes (H, W), not {shape}")
    check_image("the cotangent", g)
    x = TensorSpec((*g.shape[:2], *shape), g.dtype)
    _same_images("the cotangent", g, _pool_rule(x, kernel_size=kernel_size, stride=stride,
                                                padding=padding))
    return x


def _window_flops(out: TensorSpec, x: TensorSpec, *rest: Any) -> int:
    """About one per value read: windows that do not overlap (the usual) read each once."""
    return max(out.size, x.size, 0)


# --- Gradients and batching ----------------------------------------------------------------------


def _max_dx(g: Any, x: Any, *, kernel_size: tuple, stride: tuple, padding: tuple) -> Any:
    return bind(max_pool2d_grad, g, x, kernel_size=kernel_size, stride=stride,
                padding=padding)


def _select_dy(g: Any, x: Any, *, kernel_size: tuple, stride: tuple, padding: tuple) -> Any:
    return bind(max_pool2d_grad, g, x, kernel_size=kernel_size, stride=stride,
                padding=padding)


def _max_grad_dg(gg: Any, x: Any, *, kernel_size: tuple, stride: tuple,
                 padding: tuple) -> Any:
    return bind(max_pool2d_select, gg, x, kernel_size=kernel_size, stride=stride,
                padding=padding)


def _max_jvp(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> Any:
    """The tangent at each window's winning tap."""
    return None if tangents[0] is None else bind(max_pool2d_select, tangents[0], primals[0],
                                                 **params)


def _avg_dx(g: Any, x_spec: Any, *, kernel_size: tuple, stride: tuple, padding: tuple) -> Any:
    return bind(avg_pool2d_grad, g, shape=tuple(x_spec.shape[2:]), kernel_size=kernel_size,
                stride=stride, padding=padding)


def _avg_grad_dg(gg: Any, *, kernel_size: tuple, stride: tuple, padding: tuple) -> Any:
    return bind(avg_pool2d, gg, kernel_size=kernel_size, stride=stride, padding=padding)


def _batch(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Pooling treats every image alike: the examples join the images' batch axis (N), every
    operand batched (one that is the same for all broadcast), and are taken apart after."""
    moved = [batched(x, d, size) for x, d in zip(args, dims, strict=True)]
    n = moved[0].shape[1]
    out = bind(op, *(bind(reshape, x, shape=(size * n, *x.shape[2:])) for x in moved),
               **params)
    return bind(reshape, out, shape=(size, n, *out.shape[1:])), 0


max_pool2d = Op("max_pool2d", _max_pool_kernel, _pool_rule, grads=(_max_dx,),
                flops=_window_flops, jvp=_max_jvp, batch=_batch)
max_pool2d_grad = Op("max_pool2d_grad", _max_pool_grad_kernel, _max_grad_rule,
                     grads=(_max_grad_dg, None), flops=_window_flops, arg_names=("g", "x"),
                     jvp=tangents.linear, batch=_batch)
max_pool2d_select = Op("max_pool2d_select", _select_kernel, _select_rule,
                       grads=(_select_dy, None), flops=_window_flops, arg_names=("y", "x"),
                       jvp=tangents.linear, batch=_batch)
avg_pool2d = Op("avg_pool2d", _avg_pool_kernel, _pool_rule, grads=(_avg_dx,),
                flops=_window_flops, jvp=tangents.linear, batch=_batch)
avg_pool2d_grad = Op("avg_pool2d_grad", _avg_pool_grad_kernel, _avg_grad_rule,
                     grads=(_avg_grad_dg,), flops=_window_flops, arg_names=("g",),
                     jvp=tangents.linear, batch=_batch)
