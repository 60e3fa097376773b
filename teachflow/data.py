"""``tfl.data``: a small real data set, and the batches a training loop walks through.

`load_digits` gives scikit-learn's bundled handwritten digits: 1,797 images of 8×8 pixels,
classes 0 to 9, shipped inside scikit-learn, so it needs no download (``pip install
'teachflow[data]'``). `DataLoader` cuts arrays into batches, as PyTorch's does for a
``TensorDataset``: optionally shuffled anew at each pass (an *epoch*), optionally dropping a last
batch that would be smaller (a staged training step traced for batches of 64 would otherwise
trace again for the last one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from teachflow.errors import ShapeError, TeachflowError
from teachflow.random import generator
from teachflow.tensor import Tensor, as_tensor


def load_digits(test_fraction: float = 0.25, seed: int = 0) -> tuple:
    """``(x_train, y_train, x_test, y_test)``: float32 pixels scaled to [0, 1] (one row of 64
    per image) and int64 labels, split at random (`seed`) with `test_fraction` held out."""
    try:
        from sklearn.datasets import load_digits as sklearn_digits
    except ImportError:
        raise TeachflowError("the digits data set comes with scikit-learn, which is not "
                             "installed", op="load_digits",
                             hint="pip install 'teachflow[data]' (or scikit-learn)") from None
    if not 0.0 < test_fraction < 1.0:
        raise TeachflowError(f"test_fraction must be between 0 and 1, not {test_fraction!r}",
                             op="load_digits", hint="test_fraction=0.25 holds out a quarter")
    digits = sklearn_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_test = round(len(x) * test_fraction)
    test, train = order[:n_test], order[n_test:]
    return (Tensor(x[train]), Tensor(y[train]), Tensor(x[test]), Tensor(y[test]))


class DataLoader:
    """Batches of ``(xb, yb)`` from arrays whose first axis is the example::

        for xb, yb in tfl.data.DataLoader(x, y, batch_size=64, shuffle=True):
            ...

    `shuffle` draws a new order at each pass, from teachflow's generator (so
    ``tfl.manual_seed`` makes it repeatable); `drop_last` leaves out a last, smaller batch."""

    def __init__(self, *arrays: Any, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False) -> None:
        if not arrays:
            raise TeachflowError("DataLoader needs at least one array", op="DataLoader",
                                 hint="DataLoader(x, y, batch_size=64)")
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise TeachflowError(f"batch_size must be a positive int, not {batch_size!r}",
                                 op="DataLoader", hint="DataLoader(x, y, batch_size=64)")
        tensors = [as_tensor(a) for a in arrays]
        lengths = {t.shape[0] if t.ndim else None for t in tensors}
        if len(lengths) != 1 or None in lengths:
            raise ShapeError("the arrays must have the same number of examples (first axis), "
                             f"not shapes {', '.join(str(t.shape) for t in tensors)}",
                             op="DataLoader", hint="one label per example: x[i] goes with y[i]")
        self.arrays = [t.numpy() for t in tensors]
        self.devices = [t.device for t in tensors]
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.n = lengths.pop()

    def __len__(self) -> int:
        """The number of batches in one pass."""
        whole = self.n // self.batch_size
        return whole if self.drop_last else math.ceil(self.n / self.batch_size)

    def __iter__(self) -> Iterator[tuple[Tensor, ...]]:
        order = generator(np).permutation(self.n) if self.shuffle else np.arange(self.n)
        for k in range(len(self)):
            rows = order[k * self.batch_size:(k + 1) * self.batch_size]
            yield tuple(Tensor(a[rows], device=d) for a, d in zip(self.arrays, self.devices,
                                                                  strict=True))
