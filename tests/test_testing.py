"""tfl.testing.gradcheck: right gradients pass, a wrong rule is caught and explained."""

from __future__ import annotations

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.dispatch import bind
from teachflow.ops.op import Op
from teachflow.testing import GradcheckError, gradcheck

RNG = np.random.default_rng(3)


@pytest.mark.parametrize("fn, shapes", [
    (lambda x: x.tanh(), [(3, 4)]),
    (lambda a, b: a @ b, [(2, 3), (3, 4)]),
    (lambda x, b: (x * b).exp().sum(axis=1), [(3, 4), (4,)]),  # b broadcasts: its gradient sums
    (lambda x: tfl.softmax(x, axis=-1), [(2, 5)]),
    (lambda x: x[1:, ::2] ** 2, [(3, 4)]),
    (lambda x: x.sum(), [()]),
])
def test_right_gradients_pass(fn, shapes) -> None:
    assert gradcheck(fn, *[RNG.normal(size=s) for s in shapes]) is True


def _op_with_rule(rule) -> Op:
    """``x * x`` as an op of its own with the gradient `rule` (not added to the vocabulary)."""
    return Op("square", lambda xp: lambda x: x * x, lambda x: x, grads=(rule,), primitive=False)


def test_a_wrong_gradient_rule_is_caught_and_explained() -> None:
    wrong = _op_with_rule(lambda g, x: g * x)  # forgot the 2 of d(x^2)/dx = 2x
    x = np.array([[1.0, -2.0], [0.5, 3.0]])
    with pytest.raises(GradcheckError) as caught:
        gradcheck(lambda t: bind(wrong, t), x)
    message = str(caught.value)
    assert "gradient of input 0 at index (1, 1)" in message  # the largest error: x = 3
    assert "by autodiff but" in message and "by finite differences" in message
    assert "4 of 4 element(s) disagree" in message
    right = _op_with_rule(lambda g, x: 2 * g * x)
    assert gradcheck(lambda t: bind(right, t), x)


def test_which_input_is_wrong_is_named() -> None:
    wrong = _op_with_rule(lambda g, x: g * x)
    with pytest.raises(GradcheckError, match="gradient of input 1 at index"):
        gradcheck(lambda a, b: a * 2.0 + bind(wrong, b), RNG.normal(size=3), RNG.normal(size=3))


def test_a_gradient_of_the_wrong_shape_is_named() -> None:
    shapeless = Op("total", lambda xp: lambda x: x.sum(), lambda x: type(x)((), x.dtype),
                   grads=(lambda g: g,), primitive=False)  # forgot to broadcast back to x
    with pytest.raises(GradcheckError, match=r"has shape \(\), but the input has shape \(3,\)"):
        gradcheck(lambda t: bind(shapeless, t), RNG.normal(size=3))


@pytest.mark.parametrize("args, match", [
    (("not a function", np.ones(2)), "takes a function first"),
    ((lambda x: x,), "at least one input"),
    ((lambda x: x, np.array([True, False])), "input 0 is bool: only numbers have gradients"),
    ((lambda x: x, np.ones(20_001)), "20001 elements"),
    ((lambda x: 3.0, np.ones(2)), "returned float, not a tensor"),
])
def test_bad_use_is_refused_in_words(args, match) -> None:
    with pytest.raises(tfl.TeachflowError, match=match):
        gradcheck(*args)
