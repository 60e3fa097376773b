"""Shared test helpers: hypothesis strategies for shapes and axes, input values kept away from the
points where an op is not differentiable, and a finite-difference gradient checker.

The gradient checker is the idea of the autodiff lesson turned into a test: for a function
``f(inputs) -> tensor`` and a fixed random cotangent ``c``, the scalar ``L = sum(f(inputs) * c)``
has a gradient that autodiff computes in one backward pass, and that central differences
``(L(x + eps) - L(x - eps)) / 2 eps`` estimate one input element at a time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis.extra.numpy as hnp
import numpy as np
from hypothesis import strategies as st

import teachflow as tfl

MAX_SIDE = 4

#: `make explore` sets TEACHFLOW_EXPLORE to a number: the property tests then draw new examples
#: on each run (tests/conftest.py), that many times as many as `make test` draws.
EXPLORE = int(os.environ.get("TEACHFLOW_EXPLORE") or 0)


def examples(n: int) -> int:
    """A property test's number of examples: `n` in `make test`, more in `make explore`."""
    return n * max(EXPLORE, 1)


# --- Shapes and axes ----------------------------------------------------------------------------


def shapes(min_dims: int = 0, max_dims: int = 3, min_side: int = 1) -> st.SearchStrategy:
    """Small shapes: 0-d up to `max_dims`, every side 1..4 (size-1 sides included)."""
    return hnp.array_shapes(min_dims=min_dims, max_dims=max_dims, min_side=min_side,
                            max_side=MAX_SIDE)


def broadcastable_shapes(count: int, min_dims: int = 0,
                         max_dims: int = 3) -> st.SearchStrategy:
    """`count` shapes that broadcast together under NumPy's rules (scalars and size-1 sides)."""
    return hnp.mutually_broadcastable_shapes(
        num_shapes=count, min_dims=min_dims, max_dims=max_dims, min_side=1, max_side=MAX_SIDE,
    ).map(lambda result: result.input_shapes)


def axes(ndim: int) -> st.SearchStrategy:
    """A reduction's `axis` argument: None, one axis (maybe negative), or a tuple of them."""
    one_axis = st.integers(-ndim, ndim - 1) if ndim else st.nothing()
    if ndim:
        several = st.lists(st.integers(0, ndim - 1), unique=True, max_size=ndim)
    else:
        several = st.just([])
    signed = several.flatmap(lambda chosen: st.tuples(*[
        st.sampled_from([a, a - ndim]) for a in chosen]))
    return st.one_of(st.none(), one_axis, signed)


# --- Input values -------------------------------------------------------------------------------

#: Where an op has a kink, a pole or a domain boundary, inputs keep this far from it.
MARGIN = 0.1


def values(rng: np.random.Generator, shape: tuple, domain: str = "any") -> np.ndarray:
    """Float64 values of `shape` drawn from a `domain` chosen to suit the op under test.

    - ``any``: uniform in (-2, 2);
    - ``nonzero``: |x| in (0.25, 2), for abs, relu, division and comparisons with 0;
    - ``positive``: (0.5, 2), for log, sqrt and the base of a power;
    - ``distinct``: all values at least 1/size apart, so a max has a unique winner;
    - ``grid_low`` / ``grid_high``: values near 0.2 k + 0.05 or 0.2 k + 0.15: an operand from
      each grid is never within 0.06 of the other, so maximum/minimum never tie.
    """
    size = int(np.prod(shape))
    if domain == "any":
        v = rng.uniform(-2, 2, size)
    elif domain == "nonzero":
        v = rng.uniform(0.25, 2, size) * rng.choice([-1.0, 1.0], size)
    elif domain == "positive":
        v = rng.uniform(0.5, 2, size)
    elif domain == "distinct":
        v = (rng.permutation(size) + rng.uniform(0, 0.5, size)) * (4 / size) - 2
    elif domain in ("grid_low", "grid_high"):
        offset = 0.05 if domain == "grid_low" else 0.15
        v = rng.integers(-10, 10, size) * 0.2 + offset + rng.uniform(-0.02, 0.02, size)
    else:
        raise ValueError(f"unknown domain {domain!r}")
    return np.asarray(v, dtype=np.float64).reshape(shape)


def away_from(v: np.ndarray, point: float, margin: float = MARGIN) -> np.ndarray:
    """`v` with every value closer than `margin` to `point` pushed out to ``point ± 2 margin``."""
    near = np.abs(v - point) < margin
    return np.where(near, point + np.where(v >= point, 2 * margin, -2 * margin), v)


def rng_from(data: st.DataObject) -> np.random.Generator:
    """A NumPy generator whose seed hypothesis chooses (so a failure replays exactly)."""
    return np.random.default_rng(data.draw(st.integers(0, 2**32 - 1), label="seed"))


# --- Gradient checking --------------------------------------------------------------------------


def cotangent_for(shape: tuple) -> np.ndarray:
    """A fixed random cotangent: every output element gets a different, known weight."""
    return np.random.default_rng(1234).uniform(-1.5, 1.5, shape)


def weighted_sum(fn: Callable[..., Any], cotangent: np.ndarray) -> Callable[..., Any]:
    """``L(*inputs) = sum(fn(*inputs) * cotangent)``, a scalar whose gradient tests fn's."""
    def loss(*tensors: Any) -> Any:
        out = fn(*tensors)
        return (out * tfl.tensor(cotangent.astype(out.dtype), device=out.device)).sum()

    return loss


def check_gradients(fn: Callable[..., Any], inputs: Sequence[np.ndarray], *, eps: float = 1e-6,
                    rtol: float = 1e-5, atol: float = 1e-6) -> None:
    """Assert that autodiff's gradients of `fn` match central differences (in float64).

    Checks, for ``L = sum(fn(*inputs) * c)``:

    1. ``tfl.testing.gradcheck``: autodiff against finite differences; the gradients' shapes and
       dtype (float64);
    2. ``L.backward()`` into leaf tensors gives the same gradients as ``tfl.grad``;
    3. the same computation in float32 gives float32 gradients close to the float64 ones.
    """
    inputs = [np.asarray(a, dtype=np.float64) for a in inputs]
    tfl.testing.gradcheck(fn, *inputs, eps=eps, rtol=rtol, atol=atol)
    argnums = tuple(range(len(inputs)))
    with tfl.no_grad():
        out_shape = fn(*[tfl.tensor(a) for a in inputs]).shape
    loss = weighted_sum(fn, cotangent_for(out_shape))
    analytic = tfl.grad(loss, argnums=argnums)(*[tfl.tensor(a) for a in inputs])
    for i, (x, got) in enumerate(zip(inputs, analytic, strict=True)):
        assert got.shape == x.shape, f"input {i}: gradient shape {got.shape} != {x.shape}"
        assert got.dtype == np.float64, f"input {i}: gradient dtype {got.dtype}"

    leaves = [tfl.tensor(a, requires_grad=True) for a in inputs]
    loss(*leaves).backward()
    for i, (leaf, want) in enumerate(zip(leaves, analytic, strict=True)):
        got = np.zeros_like(inputs[i]) if leaf.grad is None else leaf.grad.numpy()
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-12, atol=1e-12,
                                   err_msg=f"backward() vs tfl.grad, input {i}")

    singles = [tfl.tensor(a.astype(np.float32), requires_grad=True) for a in inputs]
    loss(*singles).backward()
    for i, (leaf, want) in enumerate(zip(singles, analytic, strict=True)):
        if leaf.grad is None:
            np.testing.assert_array_equal(want.numpy(), 0)
            continue
        assert leaf.grad.dtype == np.float32, f"input {i}: float32 input got a " \
                                              f"{leaf.grad.dtype} gradient"
        assert leaf.grad.shape == inputs[i].shape
        scale = max(1.0, float(np.max(np.abs(want.numpy()), initial=0.0)))
        np.testing.assert_allclose(leaf.grad.numpy(), want.numpy(), rtol=1e-3,
                                   atol=1e-4 * scale, err_msg=f"float32 gradient, input {i}")
