"""Checking a gradient against finite differences: ``tfl.testing.gradcheck``.

A gradient rule is a claim: "nudge this input by a little, and the output moves by the gradient
times that little". The claim can be checked without knowing any calculus, by nudging. For each
element ``x[j]`` of each input, the central difference

    (L(x[j] + eps) - L(x[j] - eps)) / (2 * eps)

estimates ``dL/dx[j]`` with an error that shrinks as ``eps**2``. `gradcheck` compares every
such estimate with what autodiff computes, for a scalar ``L = sum(f(*inputs) * c)`` where ``c``
is a fixed random weight per output element (so a gradient that is wrong for a single output
element cannot hide in a sum). It works in float64, where ``eps = 1e-6`` leaves about ten good
digits; float32 would leave about two.

As PyTorch's ``torch.autograd.gradcheck``, it returns True or raises; the error says in words
which input and which element disagree, and by how much, which is what a learner needs when an
exercise's test fails. Checking costs two calls of ``f`` per input element: keep inputs small.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from teachflow.autodiff.tape import no_grad
from teachflow.core.errors import TeachflowError
from teachflow.tensor.tensor import Tensor, as_tensor
from teachflow.transforms.gradients import grad

#: Inputs with more elements than this are refused: each element costs two calls of ``f``.
MAX_ELEMENTS = 10_000


class GradcheckError(TeachflowError):
    """Autodiff's gradient and the finite differences disagree."""


def gradcheck(fn: Callable[..., Any], *inputs: Any, eps: float = 1e-6, rtol: float = 1e-5,
              atol: float = 1e-6, seed: int = 0) -> bool:
    """True if autodiff's gradients of `fn` at `inputs` match central differences; otherwise a
    `GradcheckError` naming the input, the element and both values.

    `inputs` are tensors or anything `tfl.tensor` takes; they are converted to float64. `fn`
    returns a tensor (of any shape). An element passes when ``|autodiff - numeric| <= atol +
    rtol * |numeric|``, as in ``numpy.allclose``.
    """
    if not callable(fn):
        raise TeachflowError(f"gradcheck takes a function first, not {type(fn).__name__}",
                             op="gradcheck", hint="tfl.testing.gradcheck(f, x, y)")
    if not inputs:
        raise TeachflowError("gradcheck needs at least one input to differentiate",
                             op="gradcheck", hint="tfl.testing.gradcheck(f, x)")
    arrays = [_float64(x, i) for i, x in enumerate(inputs)]
    total = sum(a.size for a in arrays)
    if total > MAX_ELEMENTS:
        raise TeachflowError(f"the inputs have {total} elements; checking costs two calls of the "
                             f"function per element (at most {MAX_ELEMENTS})", op="gradcheck",
                             hint="check the gradient on small inputs: it is the same rule")
    with no_grad():
        out = fn(*[Tensor(a) for a in arrays])
    if not isinstance(out, Tensor):
        raise TeachflowError(f"the function returned {type(out).__name__}, not a tensor",
                             op="gradcheck", hint="return the tensor whose gradient to check")
    weights = Tensor(np.random.default_rng(seed).uniform(-1.5, 1.5, out.shape))

    def loss(*tensors: Any) -> Tensor:
        return (fn(*tensors) * weights).sum()

    def loss_at(values: list[np.ndarray]) -> float:
        with no_grad():
            return float(loss(*[Tensor(a) for a in values]).numpy())

    analytic = grad(loss, argnums=tuple(range(len(arrays))))(*[Tensor(a) for a in arrays])
    numeric = finite_differences(loss_at, arrays, eps)
    for i, (x, got, estimate) in enumerate(zip(arrays, analytic, numeric, strict=True)):
        if got.shape != x.shape:
            raise GradcheckError(f"the gradient of input {i} has shape {got.shape}, but the "
                                 f"input has shape {x.shape}", op="gradcheck",
                                 hint="a gradient has its input's shape: sum over the axes "
                                      "that were broadcast")
        _compare(got.numpy(), estimate, i, rtol, atol)
    return True


def _float64(x: Any, i: int) -> np.ndarray:
    array = as_tensor(x).numpy()
    if array.dtype.kind not in "fiu":
        raise TeachflowError(f"input {i} is {array.dtype}: only numbers have gradients",
                             op="gradcheck", hint="pass float tensors or arrays")
    return np.array(array, dtype=np.float64)


def finite_differences(loss: Callable[[list[np.ndarray]], float], arrays: Sequence[np.ndarray],
                       eps: float = 1e-6) -> list[np.ndarray]:
    """Central differences of the scalar ``loss(arrays)`` with respect to every element of every
    array: ``(L(x + eps) - L(x - eps)) / (2 eps)``, one element at a time."""
    values = [np.array(a, dtype=np.float64) for a in arrays]
    estimates = []
    for x in values:
        estimate = np.zeros_like(x)
        for j in range(x.size):
            original = x.flat[j]
            x.flat[j] = original + eps
            above = loss(values)
            x.flat[j] = original - eps
            below = loss(values)
            x.flat[j] = original
            estimate.flat[j] = (above - below) / (2 * eps)
        estimates.append(estimate)
    return estimates


def _compare(got: np.ndarray, numeric: np.ndarray, i: int, rtol: float, atol: float) -> None:
    error = np.abs(got - numeric)
    bad = ~(error <= atol + rtol * np.abs(numeric))  # (NaN counts as bad)
    if not bad.any():
        return
    worst = np.unravel_index(int(np.argmax(np.where(bad, np.nan_to_num(error, nan=np.inf), -1))),
                             got.shape)
    where = f" at index {tuple(int(k) for k in worst)}" if got.ndim else ""
    raise GradcheckError(
        f"the gradient of input {i}{where} is {got[worst]:.6g} by autodiff but "
        f"{numeric[worst]:.6g} by finite differences ({int(bad.sum())} of {bad.size} "
        f"element(s) disagree beyond atol={atol:g}, rtol={rtol:g})", op="gradcheck",
        hint="check the gradient rule of each op the function uses: its formula, and which "
             "operand it multiplies by")


__all__ = ["GradcheckError", "finite_differences", "gradcheck"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
