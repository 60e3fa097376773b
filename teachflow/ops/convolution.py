"""The 2-d convolution, one op, and the two ops its gradients are.

``conv2d(x, w)`` slides each of the O kernels of `w` (O, C / groups, KH, KW) over the images
`x` (N, C, H, W). Its kernel is *im2col* and one matrix product, as Caffe's and cuDNN's first
algorithm: the windows of the padded images (`windows.windows`, a view) copied out as columns
(G, C/G·KH·KW, N·OH·OW), one per output position of every image, multiplied by the kernels
flattened (G, O/G, C/G·KH·KW): one large product per group rather than one small one per
image, which BLAS runs several times faster. One op
rather than the slices, stack and matmul it could be composed of: the stepper shows one node,
ONNX gets one ``Conv``, and its gradient is two kernels instead of KH·KW scatters.

Convolution is linear in `x` and in `w`, so its gradients are two more linear maps, each an op:

- `conv2d_input_grad(g, w)`: the transposed convolution. The kernels' transpose times the
  cotangent gives columns, and *col2im* (`windows.add_windows`) adds each back where it was
  read. (This op is ``conv_transpose2d``, the "deconvolution" of upsampling networks.)
- `conv2d_weight_grad(x, g)`: the cotangent times the columns' transpose, summed over the batch.

The three are closed under differentiation, so every order of derivative is one of them
(PyTorch's ``convolution_backward`` does the same): ``conv2d_input_grad(g, w)`` is the adjoint
of ``x -> conv2d(x, w)``, so its own gradient for `g` is ``conv2d(gg, w)``, and for `w`,
``conv2d_weight_grad(gg, g)``; likewise for the weight gradient. Each is linear in each operand
alone, so forward mode is the product rule (`tangents.bilinear`).

`vmap` runs a batch of convolutions as one with more groups: the examples' channels side by
side (N, B·C, H, W), their kernels stacked (B·O, ...), ``groups`` B times as many, so no example
sees another's channels (JAX batches its convolution the same way).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError
from teachflow.ops import tangents
from teachflow.ops.op import Op, RuleError, TensorSpec
from teachflow.ops.views import batched, reshape, to_front, transpose
from teachflow.ops.windows import add_windows, check_image, out_hw, padded, windows


def _columns(xp: Any, x: Any, kernel: tuple, groups: int, stride: tuple, padding: tuple,
             dilation: tuple) -> tuple[Any, tuple]:
    """im2col: the columns (G, C/G·KH·KW, N·OH·OW) of `x`, one per output position of every
    image, so that each group is one matrix product; and (OH, OW)."""
    n, c, h, w = x.shape
    hw = out_hw((h, w), kernel, padding, stride, dilation)
    view = windows(xp, padded(xp, x, padding), kernel, stride, dilation, hw)
    view = view.reshape(n, groups, c // groups, *kernel, *hw).transpose(1, 2, 3, 4, 0, 5, 6)
    return view.reshape(groups, c // groups * kernel[0] * kernel[1], -1), hw  # (the copy)


def _per_group(xp: Any, g: Any, groups: int) -> Any:
    """The cotangent (N, O, OH, OW) as (G, O/G, N·OH·OW), the columns' layout."""
    n, o = g.shape[:2]
    return xp.ascontiguousarray(g.reshape(n, groups, o // groups, -1).transpose(1, 2, 0, 3)
                                ).reshape(groups, o // groups, -1)


def _conv2d_kernel(xp: Any):
    def conv2d(x: Any, w: Any, *, stride: tuple, padding: tuple, dilation: tuple,
               groups: int) -> Any:
        (o, cg, kh, kw), n = w.shape, x.shape[0]
        cols, (oh, ow) = _columns(xp, x, (kh, kw), groups, stride, padding, dilation)
        out = w.reshape(groups, o // groups, cg * kh * kw) @ cols  # (G, O/G, N·OH·OW)
        out = out.reshape(o, n, oh, ow).transpose(1, 0, 2, 3)
        return xp.ascontiguousarray(out)

    return conv2d


def _input_grad_kernel(xp: Any):
    def conv2d_input_grad(g: Any, w: Any, *, shape: tuple, stride: tuple, padding: tuple,
                          dilation: tuple, groups: int) -> Any:
        n, o, oh, ow = g.shape
        _, cg, kh, kw = w.shape
        kernels = w.reshape(groups, o // groups, cg * kh * kw)
        cols = xp.swapaxes(kernels, 1, 2) @ _per_group(xp, g, groups)  # (G, K, N·OH·OW)
        cols = cols.reshape(groups * cg, kh, kw, n, oh, ow).transpose(3, 0, 1, 2, 4, 5)
        return add_windows(xp, cols, shape, padding, stride, dilation)

    return conv2d_input_grad


def _weight_grad_kernel(xp: Any):
    def conv2d_weight_grad(x: Any, g: Any, *, shape: tuple, stride: tuple, padding: tuple,
                           dilation: tuple, groups: int) -> Any:
        o = g.shape[1]
        cols, _ = _columns(xp, x, shape, groups, stride, padding, dilation)
        dw = _per_group(xp, g, groups) @ xp.swapaxes(cols, 1, 2)  # (G, O/G, K)
        return dw.reshape(o, x.shape[1] // groups, *shape)

    return conv2d_weight_grad


# --- Shape rules ---------------------------------------------------------------------------------


def _check_params(stride: tuple, padding: tuple, dilation: tuple, groups: int) -> None:
    """What a graph (or a saved file) might give the op directly; `F.conv2d` checks first."""
    for name, value in (("stride", stride), ("dilation", dilation)):
        if len(value) != 2 or min(value) < 1:
            raise RuleError(f"{name} must be two ints >= 1, not {value}")
    if len(padding) != 4 or min(padding) < 0:
        raise RuleError(f"padding must be four ints >= 0 (top, bottom, left, right), not "
                        f"{padding}")
    if groups < 1:
        raise RuleError(f"groups must be an int >= 1, not {groups}")


def _check_kernels(x: TensorSpec, w: TensorSpec, groups: int) -> None:
    check_image("the input", x)
    if w.ndim != 4:
        raise RuleError(f"the weight must be (O, C / groups, KH, KW), not of shape {w.shape}")
    if np.dtype(w.dtype).kind != "f":
        raise RuleError(f"the weight is {w.dtype}; convolution computes in floating point",
                        hint="cast first, e.g. w.astype('float32')", kind=DTypeError)
    if x.shape[1] % groups or w.shape[0] % groups:
        raise RuleError(f"groups={groups} must divide the input's {x.shape[1]} channels and "
                        f"the {w.shape[0]} output channels",
                        hint="groups=1: every output channel sees every input one")
    if w.shape[1] * groups != x.shape[1]:
        raise RuleError(f"the input has {x.shape[1]} channels and the weight {w.shape} takes "
                        f"{w.shape[1]} per group ({groups} group(s))",
                        hint="the weight's second axis is in_channels / groups")


def _conv2d_rule(x: TensorSpec, w: TensorSpec, *, stride: tuple, padding: tuple,
                 dilation: tuple, groups: int) -> TensorSpec:
    _check_params(stride, padding, dilation, groups)
    _check_kernels(x, w, groups)
    oh, ow = out_hw(x.shape[2:], w.shape[2:], padding, stride, dilation)
    return TensorSpec((x.shape[0], w.shape[0], oh, ow), np.result_type(x.dtype, w.dtype))


def _input_grad_rule(g: TensorSpec, w: TensorSpec, *, shape: tuple, stride: tuple,
                     padding: tuple, dilation: tuple, groups: int) -> TensorSpec:
    _check_params(stride, padding, dilation, groups)
    x = TensorSpec((g.shape[0], w.shape[1] * groups, *shape), g.dtype) if w.ndim == 4 else g
    _check_kernels(x, w, groups)
    _check_output(g, (g.shape[0], w.shape[0]), shape, w.shape[2:], stride, padding, dilation)
    return TensorSpec(x.shape, np.result_type(g.dtype, w.dtype))


def _weight_grad_rule(x: TensorSpec, g: TensorSpec, *, shape: tuple, stride: tuple,
                      padding: tuple, dilation: tuple, groups: int) -> TensorSpec:
    _check_params(stride, padding, dilation, groups)
    check_image("the input", x)
    check_image("the cotangent", g)
    if x.shape[1] % groups or g.shape[1] % groups:
        raise RuleError(f"groups={groups} must divide the input's {x.shape[1]} channels and "
                        f"the cotangent's {g.shape[1]}")
    _check_output(g, (x.shape[0], g.shape[1]), x.shape[2:], shape, stride, padding, dilation)
    return TensorSpec((g.shape[1], x.shape[1] // groups, *shape),
                      np.result_type(x.dtype, g.dtype))


def _check_output(g: TensorSpec, nc: tuple, size: tuple, kernel: tuple, stride: tuple,
                  padding: tuple, dilation: tuple) -> None:
    """The cotangent `g` has the shape the convolution's result had."""
    if len(size) != 2 or min(size) < 1:
        raise RuleError(f"shape must be the image's two sizes (H, W), not {size}")
    check_image("the cotangent", g)
    want = (*nc, *out_hw(size, kernel, padding, stride, dilation))
    if g.shape[1:] != want[1:] or (None not in (g.shape[0], want[0]) and g.shape[0] != want[0]):
        raise RuleError(f"the cotangent has shape {g.shape}, and the convolution made {want}")


def _products(conv_out: TensorSpec, weights: TensorSpec) -> int:
    """2 flops per product: each element of a convolution's result sums C/G·KH·KW of them, and
    its gradients compute the same products, summed another way."""
    per_output = max(weights.size, 0) // max(weights.shape[0] or 1, 1)
    return 2 * max(conv_out.size, 0) * per_output


# --- Gradients (each reads what it needs by name, see `op.Op.grads`) ----------------------------


def _conv_dx(g: Any, x_spec: Any, w: Any, *, stride: tuple, padding: tuple, dilation: tuple,
             groups: int) -> Any:
    return bind(conv2d_input_grad, g, w, shape=tuple(x_spec.shape[2:]), stride=stride,
                padding=padding, dilation=dilation, groups=groups)


def _conv_dw(g: Any, x: Any, w_spec: Any, *, stride: tuple, padding: tuple, dilation: tuple,
             groups: int) -> Any:
    return bind(conv2d_weight_grad, x, g, shape=tuple(w_spec.shape[2:]), stride=stride,
                padding=padding, dilation=dilation, groups=groups)


def _input_grad_dg(gg: Any, w: Any, *, stride: tuple, padding: tuple, dilation: tuple,
                   groups: int) -> Any:
    return bind(conv2d, gg, w, stride=stride, padding=padding, dilation=dilation,
                groups=groups)


def _input_grad_dw(gg: Any, g: Any, w_spec: Any, *, stride: tuple, padding: tuple,
                   dilation: tuple, groups: int) -> Any:
    return bind(conv2d_weight_grad, gg, g, shape=tuple(w_spec.shape[2:]), stride=stride,
                padding=padding, dilation=dilation, groups=groups)


def _weight_grad_dx(gw: Any, x_spec: Any, g: Any, *, stride: tuple, padding: tuple,
                    dilation: tuple, groups: int) -> Any:
    return bind(conv2d_input_grad, g, gw, shape=tuple(x_spec.shape[2:]), stride=stride,
                padding=padding, dilation=dilation, groups=groups)


def _weight_grad_dg(gw: Any, x: Any, *, stride: tuple, padding: tuple, dilation: tuple,
                    groups: int) -> Any:
    return bind(conv2d, x, gw, stride=stride, padding=padding, dilation=dilation,
                groups=groups)


# --- Batching ------------------------------------------------------------------------------------


def _batch(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """A batch of convolutions as one with B times the groups (see the module docstring).

    Operands whose first axis is the images' N (the input, a cotangent) get the examples'
    channels side by side, (N, B·C, H, W); a weight gets the examples' kernels stacked,
    (B·O, ...). An operand that is the same for every example is broadcast first. Where only
    the images are batched and the result is images, the examples simply join the batch."""
    weight_out = op is conv2d_weight_grad  # its operands are both images (x and g)
    images = (True, weight_out)
    if not weight_out and dims[1] is None:  # one kernel for all: the examples join the batch
        x = to_front(args[0], dims[0])
        out = bind(op, bind(reshape, x, shape=(size * x.shape[1], *x.shape[2:])), args[1],
                   **params)
        return bind(reshape, out, shape=(size, x.shape[1], *out.shape[1:])), 0
    moved = []
    for x, d, is_images in zip(args, dims, images, strict=True):
        x = batched(x, d, size)  # (B, ...)
        if is_images:
            x = bind(transpose, x, axes=(1, 0, 2, 3, 4))
            moved.append(bind(reshape, x, shape=(x.shape[0], size * x.shape[2], *x.shape[3:])))
        else:
            moved.append(bind(reshape, x, shape=(size * x.shape[1], *x.shape[2:])))
    out = bind(op, *moved, **{**params, "groups": size * params["groups"]})
    if weight_out:
        return bind(reshape, out, shape=(size, out.shape[0] // size, *out.shape[1:])), 0
    return bind(reshape, out, shape=(out.shape[0], size, out.shape[1] // size,
                                     *out.shape[2:])), 1


conv2d = Op("conv2d", _conv2d_kernel, _conv2d_rule, grads=(_conv_dx, _conv_dw),
            flops=lambda out, x, w: _products(out, w), arg_names=("x", "w"),
            jvp=tangents.bilinear, batch=_batch)
conv2d_input_grad = Op("conv2d_input_grad", _input_grad_kernel, _input_grad_rule,
                       grads=(_input_grad_dg, _input_grad_dw),
                       flops=lambda out, g, w: _products(g, w), arg_names=("g", "w"),
                       jvp=tangents.bilinear, batch=_batch)
conv2d_weight_grad = Op("conv2d_weight_grad", _weight_grad_kernel, _weight_grad_rule,
                        grads=(_weight_grad_dx, _weight_grad_dg),
                        flops=lambda out, x, g: _products(g, out), arg_names=("x", "g"),
                        jvp=tangents.bilinear, batch=_batch)
