"""Convolution and pooling in ONNX's words, with their gradients.

ONNX has most of them as one operator: ``conv2d`` is ``Conv``, ``max_pool2d`` and
``avg_pool2d`` are ``MaxPool`` and ``AveragePool`` (with ``count_include_pad=1``, as the
kernel divides by the whole window). ONNX writes a padding (begin, begin, end, end) where
teachflow's op holds (top, bottom, left, right).

The gradients take a little more, and show what the gradients *are*:

- ``conv2d_input_grad`` is the transposed convolution, ONNX's ``ConvTranspose``, whose weight
  has the layout of the convolution's own. Its output size is ambiguous when the stride is over
  1 (several input sizes give one output size), so ``output_padding`` adds the rows the strided
  windows never reached.
- ``conv2d_weight_grad`` is itself a convolution: of the images, channels and batch swapped,
  by the cotangent as the kernel, with stride and dilation swapped. Groups become the channel
  groups of that convolution, so one ``Conv`` does every group.
- ``avg_pool2d_grad`` is a transposed convolution by a constant kernel, ``1 / (KH·KW)``
  everywhere, one per channel (``group`` = C).
- ``max_pool2d_grad`` and ``max_pool2d_select`` ask ``MaxPool`` for its second result, where
  each window's maximum was (flat indices into the images), then scatter the cotangent there
  (``ScatterElements`` adding: windows may share a winner) or gather from there.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from teachflow.graph import Node

if TYPE_CHECKING:
    from teachflow.onnx_export.emitter import Emitter


def _pads(padding: tuple) -> list[int]:
    """teachflow's (top, bottom, left, right) as ONNX's (top, left, bottom, right)."""
    top, bottom, left, right = padding
    return [top, left, bottom, right]


def _output_padding(size: tuple, g_hw: tuple, kernel: tuple, padding: tuple, stride: tuple,
                    dilation: tuple) -> list[int]:
    """The rows and columns a transposed convolution must add to give back `size`: those no
    window reached (fewer than a stride)."""
    pads = ((padding[0] + padding[1]), (padding[2] + padding[3]))
    return [h + p - (s * (o - 1) + d * (k - 1) + 1)
            for h, p, o, k, s, d in zip(size, pads, g_hw, kernel, stride, dilation, strict=True)]


def _conv2d(e: Emitter, node: Node) -> str:
    (x, w), p, dtype = node.inputs, node.params, node.spec.dtype
    return e.add("Conv", [e.input(x, dtype), e.input(w, dtype)], kernel_shape=list(w.shape[2:]),
                 strides=list(p["stride"]), pads=_pads(p["padding"]),
                 dilations=list(p["dilation"]), group=p["groups"])


def _input_grad(e: Emitter, node: Node) -> str:
    (g, w), p, dtype = node.inputs, node.params, node.spec.dtype
    extra = _output_padding(p["shape"], g.shape[2:], w.shape[2:], p["padding"], p["stride"],
                            p["dilation"])
    return e.add("ConvTranspose", [e.input(g, dtype), e.input(w, dtype)],
                 kernel_shape=list(w.shape[2:]), strides=list(p["stride"]),
                 pads=_pads(p["padding"]), dilations=list(p["dilation"]), group=p["groups"],
                 output_padding=extra)


def _weight_grad(e: Emitter, node: Node) -> str:
    """``Conv`` of the images (C/G, G·N, H, W) by the cotangent (O, N, OH, OW) in G groups,
    stride and dilation swapped; the windows that fit beyond the kernel's size cut off."""
    (x, g), p, dtype = node.inputs, node.params, node.spec.dtype
    groups, (o, cg, kh, kw) = p["groups"], node.spec.shape
    h, w = x.shape[2:]
    oh, ow = g.shape[2:]
    images = e.add("Reshape", [e.input(x, dtype), e.ints([0, groups, cg, h, w])])
    images = e.add("Transpose", [images], perm=[2, 1, 0, 3, 4])
    images = e.add("Reshape", [images, e.ints([cg, -1, h, w])])
    kernels = e.add("Reshape", [e.input(g, dtype), e.ints([0, groups, o // groups, oh, ow])])
    kernels = e.add("Transpose", [kernels], perm=[1, 2, 0, 3, 4])
    kernels = e.add("Reshape", [kernels, e.ints([o, -1, oh, ow])])
    out = e.add("Conv", [images, kernels], kernel_shape=[oh, ow],
                strides=list(p["dilation"]), pads=_pads(p["padding"]),
                dilations=list(p["stride"]), group=groups)
    out = e.add("Slice", [out, e.ints([0, 0]), e.ints([kh, kw]), e.ints([2, 3])])
    return e.add("Transpose", [out], perm=[1, 0, 2, 3])


def _pool_attributes(p: dict) -> dict:
    return {"kernel_shape": list(p["kernel_size"]), "strides": list(p["stride"]),
            "pads": _pads(p["padding"])}


def _max_pool(e: Emitter, node: Node) -> str:
    return e.add("MaxPool", [e.input(node.inputs[0])], **_pool_attributes(node.params))


def _avg_pool(e: Emitter, node: Node) -> str:
    return e.add("AveragePool", [e.input(node.inputs[0])], count_include_pad=1,
                 **_pool_attributes(node.params))


def _avg_pool_grad(e: Emitter, node: Node) -> str:
    (g,), p, dtype = node.inputs, node.params, node.spec.dtype
    (kh, kw), channels = p["kernel_size"], g.shape[1]
    share = e.const(np.full((channels, 1, kh, kw), 1 / (kh * kw), dtype=dtype))
    extra = _output_padding(p["shape"], g.shape[2:], (kh, kw), p["padding"], p["stride"],
                            (1, 1))
    return e.add("ConvTranspose", [e.input(g, dtype), share], group=channels,
                 output_padding=extra, **_pool_attributes(p))


def _winners(e: Emitter, node: Node) -> str:
    """Where each window of x (the op's second operand) has its maximum: flat indices."""
    x = e.input(node.inputs[1])
    _, indices = e.add("MaxPool", [x], outputs=2, **_pool_attributes(node.params))
    return e.add("Reshape", [indices, e.ints([-1])])


def _max_pool_grad(e: Emitter, node: Node) -> str:
    g, x = node.inputs
    zeros = e.add("ConstantOfShape", [e.add("Shape", [e.input(x)])],
                  value=e.tensor(np.zeros(1, node.spec.dtype)))
    flat = e.add("Reshape", [zeros, e.ints([-1])])
    updates = e.add("Reshape", [e.input(g, node.spec.dtype), e.ints([-1])])
    summed = e.add("ScatterElements", [flat, _winners(e, node), updates], axis=0,
                   reduction="add")
    return e.add("Reshape", [summed, e.ints([-1, *x.shape[1:]])])


def _max_pool_select(e: Emitter, node: Node) -> str:
    y, _ = node.inputs
    flat = e.add("Reshape", [e.input(y), e.ints([-1])])
    picked = e.add("GatherElements", [flat, _winners(e, node)], axis=0)
    return e.add("Reshape", [picked, e.ints([-1, *node.spec.shape[1:]])])


#: Converters by op name (`teachflow.onnx_export.emitter.CONVERTERS` has every module's).
CONVERTERS = {
    "conv2d": _conv2d, "conv2d_input_grad": _input_grad, "conv2d_weight_grad": _weight_grad,
    "max_pool2d": _max_pool, "avg_pool2d": _avg_pool, "avg_pool2d_grad": _avg_pool_grad,
    "max_pool2d_grad": _max_pool_grad, "max_pool2d_select": _max_pool_select,
}
