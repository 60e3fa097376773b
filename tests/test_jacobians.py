"""``tfl.jacfwd``, ``tfl.jacrev``, ``tfl.hessian``, against hand-written Jacobians and finite
differences; and the composition matrix of the transformations, eagerly and staged."""

from __future__ import annotations

import numpy as np
import pytest

import teachflow as tfl

RNG = np.random.default_rng(2)
A = RNG.normal(size=(4, 3))


def squash(x):
    return tfl.tensor(A) @ x.tanh()


def squash_jacobian(x: np.ndarray) -> np.ndarray:
    return A * (1 - np.tanh(x) ** 2)  # A · diag(1 - tanh²)


def finite_jacobian(f, x: np.ndarray, h: float = 1e-6) -> np.ndarray:
    columns = []
    for k in range(x.size):
        e = np.zeros(x.size)
        e[k] = h
        e = e.reshape(x.shape)
        columns.append((f(tfl.tensor(x + e)).numpy() - f(tfl.tensor(x - e)).numpy()) / (2 * h))
    out_shape = np.shape(columns[0])
    return np.stack(columns, axis=-1).reshape(*out_shape, *x.shape)


@pytest.mark.parametrize("jacobian", [tfl.jacfwd, tfl.jacrev], ids=["jacfwd", "jacrev"])
@pytest.mark.parametrize("staged", [False, True])
def test_jacobian_by_hand(jacobian, staged: bool) -> None:
    x = RNG.normal(size=3)
    fn = jacobian(squash)
    got = (tfl.function(fn) if staged else fn)(tfl.tensor(x))
    np.testing.assert_allclose(got.numpy(), squash_jacobian(x), rtol=1e-13, atol=1e-15)


def test_jacobians_of_matrices_are_laid_out_output_then_input() -> None:
    x = RNG.normal(size=(2, 3))

    def f(x):
        return (x @ x.T).exp()
    forward, reverse = tfl.jacfwd(f)(tfl.tensor(x)), tfl.jacrev(f)(tfl.tensor(x))
    assert forward.shape == reverse.shape == (2, 2, 2, 3)
    np.testing.assert_allclose(forward.numpy(), reverse.numpy(), rtol=1e-12)
    np.testing.assert_allclose(forward.numpy(), finite_jacobian(f, x), rtol=1e-6, atol=1e-8)


def test_argnums_picks_the_arguments() -> None:
    x, y = RNG.normal(size=3), RNG.normal(size=3)
    dx, dy = tfl.jacrev(lambda x, y: x * y.exp(), argnums=(0, 1))(tfl.tensor(x), tfl.tensor(y))
    np.testing.assert_allclose(dx.numpy(), np.diag(np.exp(y)))
    np.testing.assert_allclose(dy.numpy(), np.diag(x * np.exp(y)))


def cubic(x):
    return (x ** 3).sum() + (x[0] * x[1])


@pytest.mark.parametrize("staged", [False, True])
def test_hessian_by_hand_and_by_finite_differences(staged: bool) -> None:
    x = RNG.normal(size=3)
    fn = tfl.hessian(cubic)
    got = (tfl.function(fn) if staged else fn)(tfl.tensor(x)).numpy()
    want = np.diag(6 * x)
    want[0, 1] = want[1, 0] = 1.0
    np.testing.assert_allclose(got, want, rtol=1e-13, atol=1e-15)
    np.testing.assert_allclose(got, finite_jacobian(tfl.grad(cubic), x), rtol=1e-6, atol=1e-8)


def looped(x):
    """A fori_loop and a cond: their gradients, tangents and batches all meet in a Hessian."""
    y = tfl.cond(x.sum() > 0, lambda a: a.tanh(), lambda a: a * a, x)
    return tfl.fori_loop(0, 3, lambda i, c: c * y + 0.1 * i, x).sum()


def test_hessian_through_control_flow() -> None:
    x = np.array([0.3, 0.5, -0.1])
    got = tfl.hessian(looped)(tfl.tensor(x)).numpy()
    np.testing.assert_allclose(got, finite_jacobian(tfl.grad(looped), x), rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(tfl.function(tfl.hessian(looped))(tfl.tensor(x)).numpy(), got,
                               rtol=1e-13)


# --- The composition matrix -------------------------------------------------------------------


def loss(w, x):
    return (x @ w).tanh().sum() ** 2


W, XS = RNG.normal(size=(3, 2)), RNG.normal(size=(5, 3))


def per_example_loop(f) -> np.ndarray:
    return np.stack([f(tfl.tensor(W), tfl.tensor(XS[k])).numpy() for k in range(len(XS))])


COMPOSITIONS = {
    # name: (the composition, what it must equal, computed without it)
    "vmap(grad)": (lambda w, xs: tfl.vmap(tfl.grad(loss), in_axes=(None, 0))(w, xs),
                   lambda: per_example_loop(tfl.grad(loss))),
    "grad(vmap)": (lambda w, xs: tfl.grad(lambda w: tfl.vmap(loss, in_axes=(None, 0))(w, xs)
                                          .sum())(w),
                   lambda: per_example_loop(tfl.grad(loss)).sum(0)),
    "jvp(grad)": (lambda w, xs: tfl.jvp(lambda w: tfl.grad(loss)(w, xs[0]), (w,),
                                        (tfl.ones_like(w),))[1],
                  lambda: finite_jacobian(lambda w: tfl.grad(loss)(w, tfl.tensor(XS[0])), W)
                  .sum(axis=(2, 3))),
    "vmap(vmap)": (lambda w, xs: tfl.vmap(tfl.vmap(lambda w, x: loss(w, x), in_axes=(None, 0)),
                                          in_axes=(None, 0))(w, tfl.stack([xs, 2 * xs])),
                   lambda: np.stack([per_example_loop(loss), np.stack(
                       [loss(tfl.tensor(W), tfl.tensor(2 * XS[k])).numpy()
                        for k in range(len(XS))])])),
    "jacfwd=jacrev": (lambda w, xs: tfl.jacfwd(loss)(w, xs[0]) - tfl.jacrev(loss)(w, xs[0]),
                      lambda: np.zeros_like(W)),
}


@pytest.mark.parametrize("name", list(COMPOSITIONS))
@pytest.mark.parametrize("staged", [False, True])
def test_transformations_compose(name: str, staged: bool) -> None:
    fn, want = COMPOSITIONS[name]
    got = (tfl.function(fn) if staged else fn)(tfl.tensor(W), tfl.tensor(XS))
    np.testing.assert_allclose(got.numpy(), want(), rtol=1e-6, atol=1e-9)
