"""PyTorch's ``gather`` (the op `take_along_axis`, `teachflow/ops/along_axis.py`) and
``F.one_hot``: indexing by data, along one axis.

``out[i][j] = x[i][index[i][j]]`` for ``dim=1``: the tests write that loop out, and compare.
The gradient puts each cotangent back where its value was read, adding where a position was read
twice; it is checked against finite differences, to second order, under ``vmap`` and ``jvp``,
staged, saved and loaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check_gradients

import teachflow as tfl
import teachflow.nn.functional as F

X = np.arange(12.0).reshape(3, 4) / 4 - 1
INDEX = np.array([[3, 3, 0], [1, 0, 2], [2, 2, 2]])  # repeated positions: gradients add up


def gathered(x: np.ndarray, dim: int, index: np.ndarray) -> np.ndarray:
    """PyTorch's definition, one element at a time."""
    out = np.empty(index.shape, x.dtype)
    for where in np.ndindex(*index.shape):
        read = list(where)
        read[dim] = index[where]
        out[where] = x[tuple(read)]
    return out


@pytest.mark.parametrize("dim", [0, 1, -1, -2])
def test_values_are_pytorchs_definition(dim: int) -> None:
    index = INDEX % X.shape[dim]
    want = gathered(X, dim % 2, index)
    for got in (tfl.tensor(X).gather(dim, tfl.tensor(index)), tfl.gather(X, dim, index)):
        np.testing.assert_array_equal(got.numpy(), want)
    x3 = np.arange(24).reshape(2, 3, 4)  # an index shorter than x along the other axes
    short = np.array([[[1], [0]]])
    np.testing.assert_array_equal(tfl.tensor(x3).gather(1, short).numpy(),
                                  gathered(x3, 1, short))


def test_gradients_match_finite_differences_to_second_order() -> None:
    index = tfl.tensor(INDEX)
    check_gradients(lambda x: x.gather(1, index), [X])
    check_gradients(lambda x: x.gather(0, index[:, :2] % 3) ** 3, [X])
    # The gradient, differentiated again (the op's gradient is an op with a gradient rule).
    tfl.testing.gradcheck(lambda x: tfl.grad(lambda u: (u.gather(1, index) ** 3).sum())(x), X)


def test_the_gradient_adds_where_a_position_was_read_twice() -> None:
    g = tfl.grad(lambda x: x.gather(1, tfl.tensor(INDEX)).sum())(tfl.tensor(X))
    counts = np.zeros_like(X)
    np.add.at(counts, (np.arange(3)[:, None], INDEX), 1)
    np.testing.assert_array_equal(g.numpy(), counts)


def test_staged_vmapped_and_forward_mode_agree_with_eager() -> None:
    x, index = tfl.tensor(X), tfl.tensor(INDEX)
    f = lambda x, i: (x.gather(1, i) * 2).sum(axis=0)
    np.testing.assert_array_equal(tfl.function(f)(x, index).numpy(), f(x, index).numpy())
    xs = tfl.tensor(np.stack([X, 2 * X]))
    batched = tfl.vmap(f, in_axes=(0, None))(xs, index)
    np.testing.assert_array_equal(batched.numpy(), np.stack([f(tfl.tensor(a), index).numpy()
                                                             for a in (X, 2 * X)]))
    per_example = tfl.vmap(lambda i: tfl.grad(lambda x: f(x, i).sum())(x))(
        tfl.tensor(np.stack([INDEX, INDEX[::-1]])))
    assert per_example.shape == (2, 3, 4)
    _, tangent = tfl.jvp(lambda x: f(x, index), (x,), (tfl.tensor(np.ones_like(X)),))
    np.testing.assert_array_equal(tangent.numpy(), [6.0, 6.0, 6.0])


def test_saved_and_loaded_it_gives_the_same_values_and_gradients(tmp_path) -> None:
    staged = tfl.function(lambda x, i: tfl.grad(lambda x: (x.gather(1, i) ** 2).sum())(x))
    x, index = tfl.tensor(X), tfl.tensor(INDEX)
    want = staged(x, index)
    loaded = tfl.load(tfl.save(staged, tmp_path / "gather"))
    np.testing.assert_array_equal(loaded(x, index).numpy(), want.numpy())


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda x: x.gather(2, INDEX), tfl.ShapeError, "dim 2 of a tensor of shape"),
    (lambda x: x.gather(1, INDEX[0]), tfl.ShapeError, "index of shape"),
    (lambda x: x.gather(1.0, INDEX), tfl.DTypeError, "dim is the axis"),
    (lambda x: x.gather(1, INDEX * 1.0), tfl.DTypeError, "must hold integers"),
    (lambda x: x.gather(1, INDEX + 2), tfl.IndexingError, r"index 5 is outside 0\.\.3"),
    (lambda x: x.gather(1, -INDEX), tfl.IndexingError, "index -3 is outside"),
    (lambda x: x.gather(1, np.zeros((4, 1), int)), tfl.ShapeError, "longer than the input"),
])
def test_bad_indices_name_the_op_the_shapes_and_the_line(call, error, words: str) -> None:
    with pytest.raises(error, match=words) as caught:
        call(tfl.tensor(X))
    assert caught.value.op in ("gather", "take_along_axis")
    assert "test_gather_one_hot.py" in str(caught.value.location)


def test_one_hot_is_rows_of_the_identity() -> None:
    y = np.array([[2, 0], [1, 2]])
    got = F.one_hot(tfl.tensor(y))
    assert got.dtype == np.int64 and got.shape == (2, 2, 3)
    np.testing.assert_array_equal(got.numpy(), np.eye(3, dtype=np.int64)[y])
    np.testing.assert_array_equal(F.one_hot(tfl.tensor([1]), num_classes=4).numpy(),
                                  [[0, 1, 0, 0]])
    staged = tfl.function(lambda y: F.one_hot(y, 5))
    np.testing.assert_array_equal(staged(tfl.tensor(y)).numpy(), np.eye(5, dtype=np.int64)[y])


def test_one_hot_refuses_what_it_cannot_make() -> None:
    with pytest.raises(tfl.IndexingError, match=r"class 3 is outside 0\.\.2") as caught:
        F.one_hot(tfl.tensor([0, 3]), num_classes=3)
    assert "test_gather_one_hot.py" in str(caught.value.location)
    with pytest.raises(tfl.DTypeError, match="integer class indices"):
        F.one_hot(tfl.tensor([0.0, 1.0]))
    with pytest.raises(tfl.TeachflowError, match="num_classes is an int"):
        F.one_hot(tfl.tensor([0]), num_classes=2.5)
    with pytest.raises(tfl.TraceError, match="give it"):
        tfl.function(lambda y: F.one_hot(y))(tfl.tensor([0, 1]))
