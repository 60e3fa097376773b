"""Gradients of every differentiable op against central finite differences in float64.

`helpers.check_gradients` compares ``tfl.grad``, ``backward()`` and finite differences of
``sum(op(inputs) * c)`` for a fixed random cotangent ``c``, and checks that float32 inputs get
float32 gradients. Inputs stay away from kinks, ties and domain edges (see `helpers.values`).
"""

from __future__ import annotations

import operator

import numpy as np
import pytest
from helpers import check_gradients, cotangent_for, examples, weighted_sum
from hypothesis import given, settings
from hypothesis import strategies as st
from op_cases import BINARY_CASES, DIFFERENTIABLE_CASES, MATMUL_CASES, WHERE_CASES, OpCase

import teachflow as tfl
from teachflow.core import backends
from teachflow.core.backends import Backend


@pytest.mark.parametrize("case", DIFFERENTIABLE_CASES, ids=str)
@settings(max_examples=examples(25), deadline=None)
@given(data=st.data())
def test_gradient_matches_finite_differences(case: OpCase, data: st.DataObject) -> None:
    example = case.draw(data)
    check_gradients(example.fn, example.inputs)


# --- Gradient dtypes ----------------------------------------------------------------------------

MULTI_INPUT_CASES = BINARY_CASES + WHERE_CASES[:1] + WHERE_CASES[2:] + MATMUL_CASES[:1]


@pytest.mark.parametrize("case", MULTI_INPUT_CASES, ids=str)
@pytest.mark.parametrize("first_dtype", ["float32", "float64"])
@settings(max_examples=examples(15), deadline=None)
@given(data=st.data())
def test_mixed_precision_gradient_has_each_inputs_dtype(case: OpCase, first_dtype: str,
                                                         data: st.DataObject) -> None:
    """float32 op float64 computes in float64, but each input's gradient keeps its own dtype."""
    example = case.draw(data)
    other_dtype = "float64" if first_dtype == "float32" else "float32"
    dtypes = [first_dtype, other_dtype]
    out_shape = example.fn(*[tfl.tensor(a) for a in example.inputs]).shape
    loss = weighted_sum(example.fn, cotangent_for(out_shape))
    exact = tfl.grad(loss, argnums=(0, 1))(*[tfl.tensor(a) for a in example.inputs])
    leaves = [tfl.tensor(a.astype(d), requires_grad=True)
              for a, d in zip(example.inputs, dtypes, strict=True)]
    out = example.fn(*leaves)
    assert out.dtype == np.float64
    loss(*leaves).backward()
    for leaf, want, dtype in zip(leaves, exact, dtypes, strict=True):
        assert leaf.grad.dtype == np.dtype(dtype)
        assert leaf.grad.shape == leaf.shape
        np.testing.assert_allclose(leaf.grad.numpy(), want.numpy(), rtol=1e-3, atol=1e-4)


@pytest.mark.parametrize("scalar", [2, 2.5, -1.5], ids=repr)
@pytest.mark.parametrize("symbol", ["+", "-", "*", "/", "**"])
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_gradient_with_python_scalar_keeps_dtype(symbol: str, scalar: float,
                                                 dtype: str) -> None:
    op = {"+": operator.add, "-": operator.sub, "*": operator.mul, "/": operator.truediv,
          "**": operator.pow}[symbol]
    # A negative base to a real power has no real value, let alone a derivative.
    sides = [False] if symbol == "**" and scalar < 0 else [False, True]
    for on_left in sides:
        x = tfl.tensor(np.array([0.5, 1.0, 1.5], dtype=dtype), requires_grad=True)
        out = op(scalar, x) if on_left else op(x, scalar)
        assert out.dtype == np.dtype(dtype)
        out.sum().backward()
        assert x.grad.dtype == np.dtype(dtype)
        assert np.all(np.isfinite(x.grad.numpy()))


def test_astype_gradient_is_cast_back_to_the_input_dtype() -> None:
    c = np.array([0.25, -1.5, 3.0])
    x64 = tfl.tensor(np.array([1.0, 2.0, 3.0]), requires_grad=True)
    (x64.astype("float32") * tfl.tensor(c.astype(np.float32))).sum().backward()
    assert x64.grad.dtype == np.float64
    np.testing.assert_array_equal(x64.grad.numpy(), c)

    x32 = tfl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (x32.astype("float64") * tfl.tensor(c)).sum().backward()
    assert x32.grad.dtype == np.float32
    np.testing.assert_array_equal(x32.grad.numpy(), c.astype(np.float32))


def test_gradient_through_a_float32_cast_matches_the_float64_chain_rule() -> None:
    a = np.linspace(-1.0, 2.0, 7)
    g = tfl.grad(lambda x: (x.astype("float32").tanh() * 3.0).sum())(tfl.tensor(a))
    assert g.dtype == np.float64
    np.testing.assert_allclose(g.numpy(), 3.0 * (1 - np.tanh(a) ** 2), rtol=1e-6)


# --- Indexing: gradients go where values were read ----------------------------------------------


def test_repeated_indices_add_up() -> None:
    x = tfl.tensor([10.0, 20.0, 30.0, 40.0], requires_grad=True)
    x[[0, 2, 0, -4, 3]].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 0.0, 1.0, 1.0])


def test_repeated_row_indices_add_up_in_2d() -> None:
    x = tfl.tensor(np.zeros((3, 2)), requires_grad=True)
    weights = tfl.tensor(np.array([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]))
    (x[np.array([2, 0, 2])] * weights).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [[3.0, 4.0], [0.0, 0.0], [6.0, 8.0]])


def test_bool_mask_gradient_is_the_mask() -> None:
    mask = np.array([[True, False, True], [False, False, True]])
    x = tfl.tensor(np.ones((2, 3)), requires_grad=True)
    x[mask].sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), mask.astype(np.float64))


# --- No gradient through detach and comparisons -------------------------------------------------


def test_detach_blocks_the_gradient() -> None:
    a = np.array([0.5, -2.0, 3.0])
    # d/dx sum(detach(x) * x) = detach(x): the detached factor counts as a constant.
    g = tfl.grad(lambda x: (x.detach() * x).sum())(tfl.tensor(a))
    np.testing.assert_array_equal(g.numpy(), a)
    with pytest.warns(tfl.GradientWarning, match="does not depend on the arguments"):
        only_detached = tfl.grad(lambda x: (x.detach() * 2.0).sum())(tfl.tensor(a))
    np.testing.assert_array_equal(only_detached.numpy(), np.zeros(3))

    x = tfl.tensor(a, requires_grad=True)
    y = x.detach()
    assert not y.requires_grad
    (x * y).sum().backward()
    assert y.grad is None
    np.testing.assert_array_equal(x.grad.numpy(), a)


COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
               "==": operator.eq, "!=": operator.ne}


@pytest.mark.parametrize("symbol", list(COMPARISONS))
def test_no_gradient_flows_through_a_comparison(symbol: str) -> None:
    compare = COMPARISONS[symbol]
    a = np.array([-1.0, 0.5, 2.0, 0.5])
    x = tfl.tensor(a, requires_grad=True)
    mask = compare(x, 0.5)
    assert not mask.requires_grad
    assert mask.grad_fn is None
    # d/dx sum(x * (x op 0.5)) is the mask itself: nothing flows back through the comparison.
    g = tfl.grad(lambda x: (x * compare(x, 0.5)).sum())(tfl.tensor(a))
    np.testing.assert_array_equal(g.numpy(), compare(a, 0.5).astype(np.float64))
    # A function of the comparison alone does not depend on x at all.
    with pytest.warns(tfl.GradientWarning):  # (zeros, said in words)
        g0 = tfl.grad(lambda x: (compare(x, 0.5) * 1.0).sum())(tfl.tensor(a))
    np.testing.assert_array_equal(g0.numpy(), np.zeros(4))
    with pytest.raises(tfl.TeachflowError):
        mask.sum().backward()


def test_where_sends_no_gradient_to_the_condition_operand() -> None:
    a = np.array([1.0, -2.0, 3.0])
    b = np.array([4.0, 5.0, -6.0])
    ga, gb = tfl.grad(lambda a, b: tfl.where(a > b, a, b).sum(), argnums=(0, 1))(
        tfl.tensor(a), tfl.tensor(b))
    np.testing.assert_array_equal(ga.numpy(), (a > b).astype(np.float64))
    np.testing.assert_array_equal(gb.numpy(), (a <= b).astype(np.float64))


# --- Broadcast operands -------------------------------------------------------------------------


def test_gradient_into_a_broadcast_operand_is_summed_to_its_shape() -> None:
    x = tfl.tensor(np.ones((2, 3)), requires_grad=True)
    row = tfl.tensor(np.ones((1, 3)), requires_grad=True)
    scalar = tfl.tensor(np.array(1.0), requires_grad=True)
    (x * row * scalar).sum().backward()
    assert row.grad.shape == (1, 3)
    assert scalar.grad.shape == ()
    np.testing.assert_array_equal(row.grad.numpy(), [[2.0, 2.0, 2.0]])
    np.testing.assert_array_equal(scalar.grad.numpy(), 6.0)


# --- Powers at the edges ------------------------------------------------------------------------


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning",
                            "ignore:invalid value:RuntimeWarning")
def test_gradient_of_x_to_the_zero_is_zero_at_zero() -> None:
    g = tfl.grad(lambda x: (x**0).sum())(tfl.tensor([0.0, 2.0]))
    np.testing.assert_array_equal(g.numpy(), [0.0, 0.0])
    zero = tfl.tensor([0.0, 1.0])  # a tensor exponent that is 0 somewhere: the same holds there
    g = tfl.grad(lambda x: (x**zero).sum())(tfl.tensor([0.0, 2.0]))
    np.testing.assert_array_equal(g.numpy(), [0.0, 1.0])


class SimulatedGPU(Backend):
    """A backend named "gpu" that computes with NumPy: device placement without a device."""

    def __init__(self) -> None:
        super().__init__("gpu", np)

    def to_numpy(self, array: np.ndarray) -> np.ndarray:
        return np.asarray(array)


@pytest.mark.parametrize("base", [2, 0.5], ids=repr)
def test_gradient_of_scalar_to_the_x_stays_on_the_tensors_device(base: float,
                                                                   monkeypatch) -> None:
    """``2 ** x``: the rule's log(2) must not become a CPU tensor next to a GPU cotangent."""
    gpu = SimulatedGPU()
    monkeypatch.setattr(backends, "_gpu_backend", lambda: gpu)
    a = np.array([0.5, -1.0, 2.0])
    g = tfl.grad(lambda x: (base**x).sum())(tfl.tensor(a, device="gpu"))
    assert g.device == "gpu"
    np.testing.assert_allclose(g.numpy(), np.log(base) * base**a, rtol=1e-12)
