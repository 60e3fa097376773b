"""In-place updates (``p -= lr * p.grad``), assignment, and values that must not leak or drift."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

import teachflow as tfl


def test_parameter_update_under_no_grad_changes_the_same_tensor() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    same = w
    (w * w).sum().backward()
    with tfl.no_grad():
        w -= 0.1 * w.grad
    assert w is same and w.requires_grad and w.is_leaf
    np.testing.assert_allclose(w.numpy(), [0.8, 1.6])
    assert w.dtype == np.float32


def test_a_training_loop_with_in_place_updates_converges() -> None:
    tfl.manual_seed(0)
    x = tfl.randn(32, 3)
    true_w = tfl.tensor([[1.0], [-2.0], [0.5]])
    y = x @ true_w
    w = tfl.zeros(3, 1, requires_grad=True)
    for _ in range(200):
        w.grad = None
        ((x @ w - y) ** 2).mean().backward()
        with tfl.no_grad():
            w -= 0.1 * w.grad
    np.testing.assert_allclose(w.numpy(), true_w.numpy(), atol=1e-3)


def test_in_place_update_of_a_leaf_that_requires_grad_is_refused_outside_no_grad() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    with pytest.raises(tfl.TeachflowError, match="no_grad"):
        w -= 1.0


def test_in_place_update_never_corrupts_a_pending_backward() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()  # saves w's values for the gradient 2w
    with tfl.no_grad():
        w -= 5.0
    y.backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])  # the values at forward time


def test_in_place_accumulation_of_tracked_values_stays_on_the_tape() -> None:
    x = tfl.tensor([1.0, 2.0], requires_grad=True)
    acc = tfl.zeros(2)
    for _ in range(3):
        acc += x * x
    acc.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 3 * 2 * np.array([1.0, 2.0]))


def test_in_place_update_cannot_change_the_shape() -> None:
    a = tfl.zeros(3)
    with pytest.raises(tfl.ShapeError):
        a += tfl.ones(2, 3)


def test_setitem_outside_autodiff() -> None:
    a = tfl.zeros(2, 3)
    a[0, 1:] = 7.0
    a[1] = tfl.tensor([1.0, 2.0, 3.0])
    np.testing.assert_array_equal(a.numpy(), [[0, 7, 7], [1, 2, 3]])
    with pytest.raises(tfl.TeachflowError):
        tfl.ones(2, requires_grad=True)[0] = 1.0


def test_numpy_view_is_read_only_so_the_tape_cannot_be_corrupted() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    y = (w * w).sum()
    with pytest.raises(ValueError):
        w.numpy()[:] = 10.0
    y.backward()
    np.testing.assert_allclose(w.grad.numpy(), [2.0, 4.0])
    editable = w.numpy().copy()
    editable[0] = 3.0
    assert w.numpy()[0] == 1.0


def test_list_operands_follow_tensor_rules_not_float64() -> None:
    t = tfl.ones(3)
    assert (t + [1.0, 2.0, 3.0]).dtype == np.float32
    assert (t + np.ones(3)).dtype == np.float64  # a NumPy array keeps its dtype


def test_none_operand_explains_grad_is_none_before_backward() -> None:
    w = tfl.ones(2, requires_grad=True)
    with pytest.raises(tfl.DTypeError, match="backward"):
        w - w.grad


def test_a_cast_to_integers_cuts_the_tape() -> None:
    v = tfl.tensor([0.3, 0.6], requires_grad=True)
    assert not v.astype("int64").requires_grad
    assert not v.astype("int32").sum().requires_grad


def test_second_derivative_of_a_power_with_zero_exponent_is_finite() -> None:
    x, y = tfl.tensor([0.0, 2.0]), tfl.tensor([0.0, 2.0])
    d = tfl.grad(lambda a: (a**y).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no inf or nan is computed on the way, not even masked
        np.testing.assert_array_equal(tfl.grad(lambda a: d(a).sum())(x).numpy(), [0.0, 2.0])


def test_integer_to_a_negative_power_is_a_dtype_error() -> None:
    with pytest.raises(tfl.DTypeError, match="negative integer powers"):
        tfl.tensor([1, 2]) ** -1
