"""`tfl.data` (issue 11): `DataLoader`'s batches, and scikit-learn's digits as `load_digits` gives
them."""

from __future__ import annotations

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.errors import ShapeError, TeachflowError

DataLoader = tfl.data.DataLoader


def data(n: int = 10):
    x = np.arange(n * 3, dtype=np.float32).reshape(n, 3)
    y = np.arange(n, dtype=np.int64) * 10
    return x, y


def rows(loader) -> list[np.ndarray]:
    """Each batch's example numbers (read from y, which is 10 × the row)."""
    return [yb.numpy() // 10 for _, yb in loader]


def test_batches_in_order_without_shuffle() -> None:
    x, y = data(10)
    loader = DataLoader(x, y, batch_size=4)
    batches = list(loader)
    assert len(loader) == 3 and len(batches) == 3
    assert [xb.shape for xb, _ in batches] == [(4, 3), (4, 3), (2, 3)]
    assert [r.tolist() for r in rows(loader)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]
    for xb, yb in batches:
        assert isinstance(xb, tfl.Tensor) and isinstance(yb, tfl.Tensor)
        assert xb.dtype == np.float32 and yb.dtype == np.int64
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy() // 10])  # pairs stay together
    assert [r.tolist() for r in rows(loader)] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9]]


@pytest.mark.parametrize("n, batch_size, drop_last, sizes", [
    (10, 4, True, [4, 4]), (12, 4, True, [4, 4, 4]), (12, 4, False, [4, 4, 4]),
    (3, 5, False, [3]), (3, 5, True, []), (7, 1, False, [1] * 7),
])
def test_len_and_drop_last(n, batch_size, drop_last, sizes) -> None:
    loader = DataLoader(*data(n), batch_size=batch_size, drop_last=drop_last)
    assert len(loader) == len(sizes)
    assert [len(r) for r in rows(loader)] == sizes


def test_shuffle_gives_a_new_permutation_each_epoch_reproducible_with_manual_seed() -> None:
    x, y = data(50)
    loader = DataLoader(x, y, batch_size=8, shuffle=True)
    tfl.manual_seed(123)
    epochs = [np.concatenate(rows(loader)) for _ in range(3)]
    for order in epochs:
        assert sorted(order.tolist()) == list(range(50))  # every example once
    assert not np.array_equal(epochs[0], np.arange(50))
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[1], epochs[2])
    for xb, yb in loader:
        np.testing.assert_array_equal(xb.numpy(), x[yb.numpy() // 10])
    tfl.manual_seed(123)
    again = [np.concatenate(rows(loader)) for _ in range(3)]
    for a, b in zip(epochs, again, strict=True):
        np.testing.assert_array_equal(a, b)


def test_shuffle_with_drop_last_leaves_out_different_examples() -> None:
    loader = DataLoader(*data(10), batch_size=4, shuffle=True, drop_last=True)
    tfl.manual_seed(0)
    seen = [np.concatenate(rows(loader)) for _ in range(20)]
    assert all(len(s) == 8 and len(set(s.tolist())) == 8 for s in seen)
    assert len({tuple(sorted(s.tolist())) for s in seen}) > 1


def test_one_array_or_three_and_tensors_too() -> None:
    (only,) = next(iter(DataLoader(np.arange(5.0), batch_size=2)))
    np.testing.assert_array_equal(only.numpy(), [0.0, 1.0])
    x, y = data(4)
    xb, yb, zb = next(iter(DataLoader(tfl.tensor(x), tfl.tensor(y), y * 2, batch_size=3)))
    assert xb.shape == (3, 3) and yb.shape == (3,) and zb.numpy().tolist() == [0, 20, 40]


def test_dataloader_refuses_bad_arguments() -> None:
    cases = [
        (lambda: DataLoader(), TeachflowError, "at least one array"),
        (lambda: DataLoader(np.zeros((3, 2)), np.zeros(4)), ShapeError, "(3, 2), (4,)"),
        (lambda: DataLoader(np.float32(1.0)), ShapeError, "same number of examples"),
        (lambda: DataLoader(*data(4), batch_size=0), TeachflowError, "batch_size"),
        (lambda: DataLoader(*data(4), batch_size=2.0), TeachflowError, "batch_size"),
        (lambda: DataLoader(*data(4), batch_size=True), TeachflowError, "batch_size"),
    ]
    for make, cls, words in cases:
        with pytest.raises(cls) as info:
            make()
        err = info.value
        assert err.op == "DataLoader" and words in str(err) and err.hint, str(err)


# --- The digits ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def digits():
    pytest.importorskip("sklearn")
    return tfl.data.load_digits()


def test_load_digits_shapes_dtypes_and_ranges(digits) -> None:
    x_train, y_train, x_test, y_test = digits
    assert x_train.shape[0] + x_test.shape[0] == 1797  # scikit-learn's 1,797 images
    assert x_test.shape == (round(1797 * 0.25), 64) and x_train.shape[1:] == (64,)
    assert y_train.shape == (x_train.shape[0],) and y_test.shape == (x_test.shape[0],)
    assert x_train.dtype == np.float32 and y_train.dtype == np.int64
    for x in (x_train, x_test):
        assert x.numpy().min() == 0.0 and x.numpy().max() == 1.0
    for y in (y_train, y_test):
        assert set(y.numpy().tolist()) == set(range(10))  # every class on both sides


def test_load_digits_splits_the_whole_set_at_random(digits) -> None:
    from sklearn.datasets import load_digits as sklearn_digits

    x_train, y_train, x_test, y_test = digits
    original = sklearn_digits()
    full = np.concatenate([x_train.numpy(), x_test.numpy()]) * 16
    labels = np.concatenate([y_train.numpy(), y_test.numpy()])
    # The same images with the same labels, each once, in another order.
    ours = sorted(zip(labels.tolist(), map(tuple, full.round().astype(int).tolist()), strict=True))
    theirs = sorted(zip(original.target.tolist(),
                        map(tuple, original.data.astype(int).tolist()), strict=True))
    assert ours == theirs
    assert not np.array_equal(labels, original.target)  # shuffled before splitting
    again = tfl.data.load_digits()
    np.testing.assert_array_equal(again[3].numpy(), y_test.numpy())  # the same seed, same split
    other = tfl.data.load_digits(test_fraction=0.5, seed=1)
    assert other[2].shape == (round(1797 * 0.5), 64)
    assert not np.array_equal(other[3].numpy()[:100], y_test.numpy()[:100])


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.5, 2])
def test_load_digits_refuses_a_bad_test_fraction(fraction) -> None:
    pytest.importorskip("sklearn")
    with pytest.raises(TeachflowError) as info:
        tfl.data.load_digits(test_fraction=fraction)
    assert info.value.op == "load_digits" and "test_fraction" in str(info.value)
    assert info.value.hint


# --- Data sets (issue 26, §2) -------------------------------------------------------------------


def test_a_tensor_dataset_is_its_tensors_cut_along_the_first_axis() -> None:
    x, y = data(5)
    ds = tfl.data.TensorDataset(x, tfl.tensor(y))
    assert len(ds) == 5
    xi, yi = ds[3]
    np.testing.assert_array_equal(xi.numpy(), x[3])
    assert yi.item() == 30
    with pytest.raises(ShapeError) as info:
        tfl.data.TensorDataset(np.zeros((3, 2)), np.zeros(4))
    assert info.value.op == "TensorDataset"


def test_a_loader_of_a_tensor_dataset_gives_the_batches_of_its_arrays() -> None:
    x, y = data(10)
    for shuffle in (False, True):
        tfl.manual_seed(4)
        from_arrays = list(DataLoader(x, y, batch_size=4, shuffle=shuffle))
        tfl.manual_seed(4)
        from_dataset = list(DataLoader(tfl.data.TensorDataset(x, y), batch_size=4,
                                       shuffle=shuffle))
        assert len(from_dataset) == 3
        for a, b in zip(from_arrays, from_dataset, strict=True):
            for ta, tb in zip(a, b, strict=True):
                np.testing.assert_array_equal(ta.numpy(), tb.numpy())


class Squares(tfl.data.Dataset):
    """Example i: (a vector [i, i²] as a tensor, the label i % 3 as a Python int)."""

    def __len__(self) -> int:
        return 7

    def __getitem__(self, i: int):
        return tfl.tensor([float(i), float(i * i)]), i % 3


def test_a_loader_of_a_dataset_stacks_its_examples_as_pytorchs_collate() -> None:
    loader = DataLoader(Squares(), 3, drop_last=True)  # (PyTorch's batch_size by position)
    batches = list(loader)
    assert len(loader) == len(batches) == 2
    xb, yb = batches[1]
    np.testing.assert_array_equal(xb.numpy(), [[3.0, 9.0], [4.0, 16.0], [5.0, 25.0]])
    assert xb.dtype == np.float32 and yb.dtype == np.int64
    assert yb.numpy().tolist() == [0, 1, 2]
    tfl.manual_seed(0)
    seen = sorted(int(v) for _, yb in DataLoader(Squares(), 2, True) for v in yb.numpy())
    assert seen == sorted(i % 3 for i in range(7))


def test_a_loader_of_a_dataset_refuses_more_positional_arguments() -> None:
    with pytest.raises(tfl.ArgumentError) as info:
        DataLoader(Squares(), 2, True, False)
    assert info.value.op == "DataLoader" and "batch_size" in info.value.hint
