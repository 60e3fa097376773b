"""The smooth and leaky activations (`teachflow/nn/activations.py`): values against their
formulas written out here, gradients against finite differences and second derivatives against
the formulas, their modules, and one fused kernel each when staged.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from helpers import check_gradients

import teachflow as tfl
import teachflow.nn.functional as F

X = np.array([-30.0, -3.0, -1.0, -0.3, 0.2, 0.7, 1.5, 4.0, 30.0])
ERF = np.vectorize(math.erf)
SIGMOID = lambda x: 1 / (1 + np.exp(-x))
#: Each activation, as teachflow computes it and as its formula reads.
FORMULAS = {
    "gelu": (F.gelu, lambda x: 0.5 * x * (1 + ERF(x / math.sqrt(2)))),
    "gelu-tanh": (lambda x: F.gelu(x, approximate="tanh"),
                  lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi)
                                                   * (x + 0.044715 * x ** 3)))),
    "silu": (F.silu, lambda x: x * SIGMOID(x)),
    "elu": (lambda x: F.elu(x, 0.7), lambda x: np.where(x > 0, x, 0.7 * np.expm1(x))),
    "leaky_relu": (lambda x: F.leaky_relu(x, 0.1), lambda x: np.where(x > 0, x, 0.1 * x)),
    "softplus": (lambda x: F.softplus(x, beta=2.0, threshold=5.0),
                 lambda x: np.where(2 * x > 5, x, np.log1p(np.exp(2 * x)) / 2)),
}


@pytest.mark.parametrize("name", sorted(FORMULAS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_are_the_formulas(name: str, dtype: str) -> None:
    fn, formula = FORMULAS[name]
    with np.errstate(over="raise"):  # (no e^x overflows, in the branch not taken either)
        got = fn(tfl.tensor(X.astype(dtype)))
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_allclose(got.numpy(), formula(X), rtol=1e-6 if dtype == "float32" else
                               1e-14, atol=1e-7 if dtype == "float32" else 1e-15)


def test_softplus_follows_pytorchs_threshold_and_tfl_softplus_is_exact() -> None:
    x = tfl.tensor([10.0, 20.5, 40.0], dtype="float64")
    assert F.softplus(x).tolist()[1:] == [20.5, 40.0]  # beta x > 20: x itself
    np.testing.assert_allclose(tfl.softplus(x).numpy(), np.logaddexp(0, x.numpy()), rtol=1e-15)
    assert tfl.softplus(x).numpy()[1] != 20.5  # (log1p(e^-20.5) is 1.2e-9, not nothing)


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_gradients_match_finite_differences(name: str) -> None:
    x = np.array([[-2.1, -0.6, 0.35], [0.9, 1.8, 3.2]])  # away from the kinks at 0 (and 2.5)
    check_gradients(FORMULAS[name][0], [x])


#: Second derivatives, written out, of the smooth ones.
SECOND = {
    "gelu": lambda x: (2 - x * x) * np.exp(-x * x / 2) / math.sqrt(2 * math.pi),
    "silu": lambda x: SIGMOID(x) * (1 - SIGMOID(x)) * (2 + x * (1 - 2 * SIGMOID(x))),
    "elu": lambda x: np.where(x > 0, 0.0, 0.7 * np.exp(x)),
}


@pytest.mark.parametrize("name", sorted(SECOND))
def test_second_derivatives_are_the_formulas(name: str) -> None:
    fn = FORMULAS[name][0]
    x0 = np.array([-2.0, -0.5, 0.4, 1.7])
    d2 = tfl.grad(lambda x: tfl.grad(lambda u: fn(u).sum())(x).sum())(tfl.tensor(x0))
    np.testing.assert_allclose(d2.numpy(), SECOND[name](x0), rtol=1e-12, atol=1e-14)


def test_elu_has_no_nan_gradient_where_e_to_the_x_overflows() -> None:
    g = tfl.grad(lambda x: F.elu(x).sum())(tfl.tensor([1000.0, -1000.0], dtype="float32"))
    assert g.tolist() == [1.0, 0.0]


@pytest.mark.parametrize("name", sorted(FORMULAS))
def test_each_is_one_fused_kernel_equal_to_eager(name: str) -> None:
    fn = FORMULAS[name][0]
    x = tfl.tensor(np.linspace(-6, 6, 1000, dtype=np.float32))
    compiled = tfl.compile(fn, x)
    [fused] = compiled.graph.nodes
    assert fused.op.group.nodes, str(compiled.graph)  # (a fused node: its group's ops)
    # Within float32's rounding of the maths functions (a tanh 1 ulp apart, times x, where
    # 1 + tanh is tiny, is an absolute 1e-7).
    np.testing.assert_allclose(compiled(x).numpy(), fn(x).numpy(), rtol=1e-6, atol=1e-6)
    staged = tfl.function(fn)
    np.testing.assert_allclose(staged(x).numpy(), fn(x).numpy(), rtol=1e-6, atol=1e-6)


def test_the_modules_call_the_functions_and_print_as_pytorchs() -> None:
    x = tfl.tensor(X)
    model = tfl.nn.Sequential(tfl.nn.LeakyReLU(0.1), tfl.nn.GELU(approximate="tanh"),
                              tfl.nn.SiLU(), tfl.nn.ELU(alpha=0.7),
                              tfl.nn.Softplus(beta=2.0, threshold=5.0))
    want = F.softplus(F.elu(F.silu(F.gelu(F.leaky_relu(x, 0.1), approximate="tanh")), 0.7),
                      beta=2.0, threshold=5.0)
    np.testing.assert_array_equal(model(x).numpy(), want.numpy())
    text = repr(model)
    for part in ("LeakyReLU(negative_slope=0.1)", "GELU(approximate='tanh')", "SiLU()",
                 "ELU(alpha=0.7)", "Softplus(beta=2.0, threshold=5.0)"):
        assert part in text
    assert list(model.parameters()) == []


def test_bad_arguments_name_the_activation_and_the_line() -> None:
    x = tfl.tensor([1.0])
    for call, words in [(lambda: F.gelu(x, approximate="fast"), "approximate is 'none'"),
                        (lambda: F.leaky_relu(x, "0.1"), "negative_slope must be a number"),
                        (lambda: F.elu(x, alpha=None), "alpha must be a number"),
                        (lambda: F.softplus(x, beta=-1.0), "beta must be a number > 0"),
                        (lambda: tfl.nn.GELU("exact"), "approximate is 'none'")]:
        with pytest.raises(tfl.TeachflowError, match=words) as caught:
            call()
        assert "test_activations.py" in str(caught.value.location)
