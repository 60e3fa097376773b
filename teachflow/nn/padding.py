"""``F.pad``: a tensor with values added around it (or cropped), as PyTorch pads.

Padding is movement, made of ops that exist: a constant is two blocks of `full` concatenated on
either side; the other modes read the input at an index array, each position of the padded axis
saying which input element it copies (``replicate``: the edge; ``reflect``: mirrored, without
repeating the edge; ``circular``: wrapped around). Reading one element several times is what
makes indexing's gradient *add up* (a scatter-add), so the edge's gradient collects what each of
its copies received.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from teachflow.core.errors import ShapeError
from teachflow.core.spec import is_int
from teachflow.tensor.arrange import concatenate
from teachflow.tensor.factories import full
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["pad"]

_PAD_MODES = ("constant", "reflect", "replicate", "circular")


def pad(input: Any, pad: Sequence[int], mode: str = "constant", value: float | None = None
        ) -> Tensor:
    """`input` padded as PyTorch's ``F.pad``: `pad` gives (before, after) counts for the last
    axis, then the one before it, ...; a negative count crops. ``"constant"`` adds `value` (0)
    with a concatenation; ``"replicate"``, ``"reflect"`` and ``"circular"`` read the input at an
    index array (the edge repeated; mirrored without the edge; wrapped around), so their
    gradient adds up what each element gave."""
    x = as_tensor(input)
    if mode not in _PAD_MODES or not isinstance(pad, Sequence) or len(pad) % 2 or \
            len(pad) > 2 * x.ndim or not all(is_int(p) for p in pad):
        raise ShapeError(f"pad takes an even number (at most {2 * x.ndim}) of ints and a mode "
                         f"among {', '.join(_PAD_MODES)}; got pad={pad!r}, mode={mode!r} for "
                         f"shape {x.shape}", op="pad",
                         hint="e.g. F.pad(x, (1, 1, 2, 0)): the last axis by 1 on each side, "
                              "the one before by 2 before it")
    pad = [int(p) for p in pad]
    for k in range(len(pad) // 2):
        axis, (before, after) = x.ndim - 1 - k, pad[2 * k:2 * k + 2]
        n = x.shape[axis]
        if n is None:
            raise ShapeError(f"pad needs the size of axis {axis}, and the input's shape is "
                             f"{x.shape}", op="pad", hint="trace with known sizes (no None)")
        keep = (slice(None),) * axis
        if before < 0 or after < 0:
            x = x[keep + (slice(max(-before, 0), n - max(-after, 0)),)]
            n, before, after = x.shape[axis], max(before, 0), max(after, 0)
        if not before and not after:
            continue
        if mode == "constant":
            edge = [full(x.shape[:axis] + (count,) + x.shape[axis + 1:],
                         0 if value is None else value, dtype=x.dtype, device=x.device)
                    for count in (before, after)]
            x = concatenate([edge[0], x, edge[1]], axis=axis)
            continue
        if n == 0 or (mode != "replicate" and max(before, after) > n - (mode == "reflect")):
            raise ShapeError(f"{mode} padding of {before} and {after} does not fit axis {axis} "
                             f"of size {n} (shape {x.shape})", op="pad",
                             hint="pad by less than the axis's size")
        index = np.arange(-before, n + after)
        if mode == "replicate":
            index = np.clip(index, 0, n - 1)
        elif mode == "circular":
            index = index % n
        else:
            index = np.abs(index)
            index = np.where(index >= n, 2 * (n - 1) - index, index)
        x = x[keep + (index,)]
    return x
