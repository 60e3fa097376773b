"""Windows over images: what convolution and pooling share.

Both slide a small window (the kernel, KH x KW) over each image of a batch (N, C, H, W), after
padding it, one step (`stride`) at a time, its taps `dilation` apart. Three helpers do all the
work on arrays, written once against the array module `xp` (NumPy or CuPy):

- `windows` is *im2col* without a copy: a strided view (N, C, KH, KW, OH, OW) of the padded
  image, whose ``[:, :, i, j]`` is what tap (i, j) of the kernel reads at every output position.
  Reshaped (which copies) it is the matrix of columns a convolution multiplies.
- `add_windows` is its adjoint, *col2im*: each tap's values added back where that tap read
  them, in a padded image, the padding cut off after. Windows overlap when the stride is smaller
  than the kernel, so one pixel gets the sum of every window that read it: a loop over the KH x
  KW taps, each a strided slice of the whole batch.
- `out_size` is the output's size along one axis: ``(H + pads - dilation (K - 1) - 1) // stride
  + 1``.

The parameters of these ops are normalised by the functions that call them
(`teachflow.nn.functional`): `stride`, `dilation`, `kernel_size` pairs, and `padding` four sizes
(top, bottom, left, right), so that an odd ``"same"`` padding can put its extra row after.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.errors import DTypeError
from teachflow.ops.op import RuleError


def out_size(size: int, pad: int, kernel: int, stride: int, dilation: int) -> int:
    """How many window positions fit along an axis of `size` padded by `pad` in all."""
    return (size + pad - dilation * (kernel - 1) - 1) // stride + 1


def padded(xp: Any, x: Any, padding: tuple, value: Any = 0) -> Any:
    """`x` with `value` added around its last two axes, (top, bottom, left, right) of it."""
    top, bottom, left, right = padding
    if not top + bottom + left + right:
        return x
    n, c, h, w = x.shape
    out = xp.full((n, c, h + top + bottom, w + left + right), value, dtype=x.dtype)
    out[:, :, top:top + h, left:left + w] = x
    return out


def windows(xp: Any, x: Any, kernel: tuple, stride: tuple, dilation: tuple,
            out_hw: tuple) -> Any:
    """The view (N, C, KH, KW, OH, OW) of the (padded) `x`: tap (i, j) at each position."""
    (kh, kw), (sh, sw), (dh, dw), (oh, ow) = kernel, stride, dilation, out_hw
    n, c = x.shape[:2]
    s = x.strides
    return xp.lib.stride_tricks.as_strided(
        x, (n, c, kh, kw, oh, ow), (s[0], s[1], dh * s[2], dw * s[3], sh * s[2], sw * s[3]))


def tap(i: int, j: int, stride: tuple, dilation: tuple, out_hw: tuple) -> tuple:
    """The slice of a padded image that tap (i, j) of the kernel reads, as an index."""
    (sh, sw), (dh, dw), (oh, ow) = stride, dilation, out_hw
    return (slice(None), slice(None), slice(i * dh, i * dh + sh * (oh - 1) + 1, sh),
            slice(j * dw, j * dw + sw * (ow - 1) + 1, sw))


def add_windows(xp: Any, cols: Any, size: tuple, padding: tuple, stride: tuple,
                dilation: tuple) -> Any:
    """col2im: `cols` (N, C, KH, KW, OH, OW) added where each tap read, into images of `size`
    (H, W) padded by `padding`, the padding then cut off: the adjoint of `windows`."""
    n, c, kh, kw, oh, ow = cols.shape
    top, bottom, left, right = padding
    out = xp.zeros((n, c, size[0] + top + bottom, size[1] + left + right), dtype=cols.dtype)
    for i in range(kh):
        for j in range(kw):
            out[tap(i, j, stride, dilation, (oh, ow))] += cols[:, :, i, j]
    return out[:, :, top:top + size[0], left:left + size[1]]


def check_image(what: str, spec: Any) -> None:
    """`spec` is a batch of images (N, C, H, W) of floating-point numbers."""
    if spec.ndim != 4:
        raise RuleError(f"{what} must be a batch of images (N, C, H, W), not of shape "
                        f"{spec.shape}", hint="one image: add the batch axis, x.unsqueeze(0)")
    if np.dtype(spec.dtype).kind != "f":
        raise RuleError(f"{what} is {spec.dtype}; convolution and pooling compute in floating "
                        "point", hint="cast first, e.g. x.astype('float32')",
                        kind=DTypeError)
    if None in spec.shape[1:]:
        raise RuleError(f"{what}'s channels and size must be known when tracing, not "
                        f"{spec.shape}", hint="trace with a fixed image size (only N may be None)")


def out_hw(size: tuple, kernel: tuple, padding: tuple, stride: tuple,
           dilation: tuple) -> tuple[int, int]:
    """The output's (OH, OW), refused where the kernel does not fit even once."""
    top, bottom, left, right = padding
    hw = (out_size(size[0], top + bottom, kernel[0], stride[0], dilation[0]),
          out_size(size[1], left + right, kernel[1], stride[1], dilation[1]))
    if min(hw) <= 0:
        raise RuleError(f"a {kernel[0]}x{kernel[1]} window (dilation {dilation}) does not fit "
                        f"the padded input of {size[0] + top + bottom}x"
                        f"{size[1] + left + right}",
                        hint="pad the input (padding=...), or use a smaller kernel")
    return hw
