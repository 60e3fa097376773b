"""``tfl.data``: a small real data set, and the batches a training loop walks through.

`load_digits` gives scikit-learn's bundled handwritten digits: 1,797 images of 8×8 pixels,
classes 0 to 9, shipped inside scikit-learn, so it needs no download (``pip install
'teachflow[data]'``). A *data set* is PyTorch's idea: anything with a length whose ``ds[i]`` is
one example; `TensorDataset` is tensors cut along their first axis, and a `Dataset` subclass
says how to get example i. `DataLoader` cuts a data set (or arrays, into a `TensorDataset`) into
batches, as PyTorch's does: optionally shuffled anew at each pass (an *epoch*), optionally
dropping a last batch that would be smaller (a staged training step traced for batches of 64
would otherwise trace again for the last one).
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

import numpy as np

from teachflow.core.errors import ArgumentError, ShapeError, TeachflowError
from teachflow.core.random import generator
from teachflow.tensor.tensor import Tensor, as_tensor


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


class Dataset:
    """A data set as PyTorch's ``torch.utils.data.Dataset``: subclass it, and define
    ``__getitem__(i)`` (example i: a tensor, an array, a number, or a tuple of them) and
    ``__len__``. `DataLoader` stacks the examples of a batch."""

    def __getitem__(self, index: int) -> Any:
        raise TeachflowError(f"{type(self).__name__} has no __getitem__", op="Dataset",
                             hint="define __getitem__(self, i) returning example i")

    def __len__(self) -> int:
        raise TeachflowError(f"{type(self).__name__} has no __len__", op="Dataset",
                             hint="define __len__(self) returning the number of examples")


class TensorDataset(Dataset):
    """Tensors (or arrays) whose first axis is the example: ``ds[i]`` is ``(x[i], y[i])``."""

    def __init__(self, *tensors: Any) -> None:
        self.tensors = tuple(_examples(tensors, "TensorDataset"))

    def __getitem__(self, index: Any) -> tuple[Tensor, ...]:
        return tuple(t[index] for t in self.tensors)

    def __len__(self) -> int:
        return self.tensors[0].shape[0]


def _examples(arrays: tuple, op: str) -> list[Tensor]:
    """`arrays` as tensors, checked to hold the same number of examples (first axis)."""
    if not arrays:
        raise TeachflowError(f"{op} needs at least one array", op=op,
                             hint=f"{op}(x, y, ...)")
    tensors = [as_tensor(a) for a in arrays]
    lengths = {t.shape[0] if t.ndim else None for t in tensors}
    if len(lengths) != 1 or None in lengths:
        raise ShapeError("the arrays must have the same number of examples (first axis), "
                         f"not shapes {', '.join(str(t.shape) for t in tensors)}",
                         op=op, hint="one label per example: x[i] goes with y[i]")
    return tensors


def _is_dataset(data: Any) -> bool:
    """A `Dataset`, or any object with a length and examples by index that is not itself an
    array of numbers (a tensor, a NumPy array, a list)."""
    return isinstance(data, Dataset) or (
        hasattr(data, "__getitem__") and hasattr(data, "__len__")
        and not isinstance(data, Tensor | np.ndarray | list | tuple | str | bytes | dict))


class DataLoader:
    """Batches of a data set, as PyTorch's; or of arrays whose first axis is the example::

        for xb, yb in tfl.data.DataLoader(tfl.data.TensorDataset(x, y), batch_size=64):
        for xb, yb in tfl.data.DataLoader(x, y, batch_size=64, shuffle=True):

    `shuffle` draws a new order at each pass, from teachflow's generator (so
    ``tfl.manual_seed`` makes it repeatable); `drop_last` leaves out a last, smaller batch.
    A data set may also take PyTorch's `batch_size` and `shuffle` by position
    (``DataLoader(ds, 64, True)``)."""

    def __init__(self, *data: Any, batch_size: int = 1, shuffle: bool = False,
                 drop_last: bool = False) -> None:
        if data and _is_dataset(data[0]):
            self.dataset, (batch_size, shuffle) = data[0], _by_position(
                data[1:], batch_size=batch_size, shuffle=shuffle)
        else:
            self.dataset = TensorDataset(*_examples(data, "DataLoader"))
        if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size <= 0:
            raise TeachflowError(f"batch_size must be a positive int, not {batch_size!r}",
                                 op="DataLoader", hint="DataLoader(x, y, batch_size=64)")
        self.batch_size, self.shuffle, self.drop_last = batch_size, shuffle, drop_last
        self.n = len(self.dataset)
        # A TensorDataset's batches are sliced at once from its arrays (copied here once, from
        # the device to NumPy), not read one example at a time.
        self._arrays = ([(t.numpy(), t.device) for t in self.dataset.tensors]
                        if type(self.dataset) is TensorDataset else None)

    def __len__(self) -> int:
        """The number of batches in one pass."""
        whole = self.n // self.batch_size
        return whole if self.drop_last else math.ceil(self.n / self.batch_size)

    def __iter__(self) -> Iterator[Any]:
        order = generator(np).permutation(self.n) if self.shuffle else np.arange(self.n)
        for k in range(len(self)):
            rows = order[k * self.batch_size:(k + 1) * self.batch_size]
            yield self._batch(rows)

    def _batch(self, rows: np.ndarray) -> Any:
        """The examples at `rows`: sliced at once from a `TensorDataset`'s arrays (on each
        tensor's device), else read one by one and stacked (PyTorch's default *collate*)."""
        if self._arrays is not None:
            return tuple(Tensor(a[rows], device=device) for a, device in self._arrays)
        return _stacked([self.dataset[int(i)] for i in rows])


def _by_position(rest: tuple, **named: Any) -> tuple:
    """PyTorch's `batch_size` and `shuffle` after the data set, given by position."""
    if len(rest) > len(named):
        raise ArgumentError(f"DataLoader takes a data set, then at most {', '.join(named)} by "
                            f"position; got {len(rest)} more arguments", op="DataLoader",
                            hint="DataLoader(dataset, batch_size=64, shuffle=True)")
    return tuple(rest) + tuple(named.values())[len(rest):]


def _stacked(examples: list) -> Any:
    """A batch of examples, each a tuple of fields (or one value): each field stacked."""
    if isinstance(examples[0], tuple | list):
        return tuple(_stacked(list(field)) for field in zip(*examples, strict=True))
    if isinstance(examples[0], Tensor):
        return Tensor(np.stack([e.numpy() for e in examples]), device=examples[0].device)
    return as_tensor(np.stack([np.asarray(e) for e in examples]))


__all__ = ["DataLoader", "Dataset", "TensorDataset", "load_digits"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
