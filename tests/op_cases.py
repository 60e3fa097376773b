"""The table of differentiable ops under test, shared by the forward and the gradient tests.

Each `OpCase` draws one example with hypothesis: float64 input arrays (the operands that
gradients flow to), the teachflow computation, and the NumPy computation it must agree with. Axis
arguments, index expressions, Python scalars and integer masks are drawn too and captured by the
two functions, so the same case serves both `test_ops_forward.py` and `test_gradients.py`.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Callable
from dataclasses import dataclass

import hypothesis.extra.numpy as hnp
import numpy as np
from helpers import (
    MAX_SIDE,
    away_from,
    axes,
    broadcastable_shapes,
    rng_from,
    shapes,
    values,
)
from hypothesis import strategies as st

import teachflow as tfl
import teachflow.nn.functional as F


@dataclass
class Example:
    inputs: list[np.ndarray]
    fn: Callable  # teachflow: tensors -> tensor
    ref: Callable  # NumPy: arrays -> array


@dataclass(frozen=True)
class OpCase:
    name: str
    draw: Callable[[st.DataObject], Example]

    def __str__(self) -> str:
        return self.name


def erf(x: np.ndarray) -> np.ndarray:
    """The error function of each element, as Python's maths library computes it."""
    x = np.asarray(x)
    return np.vectorize(math.erf, otypes=[np.float64])(x).astype(
        np.result_type(x.dtype, np.float16))  # (the float dtype NumPy's ufuncs give)


def sigmoid(x: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-x))


def softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    e = np.exp(x - x.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


def log_softmax(x: np.ndarray, axis: int = -1) -> np.ndarray:
    return np.log(softmax(x, axis))


# --- Case builders ------------------------------------------------------------------------------


def unary(name: str, fn: Callable, ref: Callable, domain: str = "any") -> OpCase:
    def draw(data: st.DataObject) -> Example:
        shape = data.draw(shapes(), label="shape")
        return Example([values(rng_from(data), shape, domain)], fn, ref)

    return OpCase(name, draw)


def binary(name: str, fn: Callable, ref: Callable, domains: tuple[str, str]) -> OpCase:
    """Two tensor operands whose shapes broadcast together."""
    def draw(data: st.DataObject) -> Example:
        shape_x, shape_y = data.draw(broadcastable_shapes(2), label="shapes")
        rng = rng_from(data)
        return Example([values(rng, shape_x, domains[0]), values(rng, shape_y, domains[1])],
                       fn, ref)

    return OpCase(name, draw)


def with_scalar(name: str, expression: Callable, domain: str = "any",
                avoid: float | None = None, ref: Callable | None = None) -> OpCase:
    """A Python scalar on one side: the same `expression` runs on a Tensor and on an ndarray
    (unless a NumPy `ref` is given); inputs keep away from the kink at `avoid`."""
    def draw(data: st.DataObject) -> Example:
        x = values(rng_from(data), data.draw(shapes(), label="shape"), domain)
        return Example([x if avoid is None else away_from(x, avoid)], expression,
                       expression if ref is None else ref)

    return OpCase(name, draw)


def same_expression(name: str, draw_shape_and_expression: Callable, domain: str = "any",
                    min_dims: int = 0) -> OpCase:
    """One operand; `draw_shape_and_expression(data, shape)` draws an expression (an index, an
    axis...) that runs unchanged on a Tensor and on an ndarray."""
    def draw(data: st.DataObject) -> Example:
        shape = data.draw(shapes(min_dims=min_dims), label="shape")
        expression = draw_shape_and_expression(data, shape)
        return Example([values(rng_from(data), shape, domain)], expression, expression)

    return OpCase(name, draw)


# --- Elementwise --------------------------------------------------------------------------------

#: (name, teachflow function, NumPy function, input domain)
UNARY_FUNCTIONS = [
    ("neg", operator.neg, operator.neg, "any"),
    ("exp", lambda x: x.exp(), np.exp, "any"),
    ("log", lambda x: x.log(), np.log, "positive"),
    ("sqrt", lambda x: x.sqrt(), np.sqrt, "positive"),
    ("tanh", lambda x: x.tanh(), np.tanh, "any"),
    ("relu", lambda x: x.relu(), lambda x: np.maximum(x, 0), "nonzero"),
    ("sigmoid", lambda x: x.sigmoid(), sigmoid, "any"),
    ("softplus", lambda x: x.softplus(), lambda x: np.log1p(np.exp(x)), "any"),
    ("abs", lambda x: x.abs(), np.abs, "nonzero"),
    ("abs-builtin", abs, np.abs, "nonzero"),
    ("mul-by-comparison", lambda x: x * (x > 0.0), lambda x: x * (x > 0.0), "nonzero"),
    ("sin", lambda x: x.sin(), np.sin, "any"),
    ("cos", tfl.cos, np.cos, "any"),
    ("erf", lambda x: x.erf(), lambda x: erf(x), "any"),
    ("log2", lambda x: x.log2(), np.log2, "positive"),
    ("rsqrt", tfl.rsqrt, lambda x: 1 / np.sqrt(x), "positive"),
    ("gelu", F.gelu, lambda x: 0.5 * x * (1 + erf(x / math.sqrt(2))), "any"),
    ("gelu-tanh", lambda x: F.gelu(x, approximate="tanh"),
     lambda x: 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3))), "any"),
    ("silu", F.silu, lambda x: x * sigmoid(x), "any"),
    ("elu", lambda x: F.elu(x, alpha=1.5),
     lambda x: np.where(x > 0, x, 1.5 * np.expm1(np.minimum(x, 0))), "nonzero"),
    ("leaky_relu", lambda x: F.leaky_relu(x, 0.2), lambda x: np.where(x > 0, x, 0.2 * x),
     "nonzero"),
    ("softplus-beta", lambda x: F.softplus(x, beta=3.0),
     lambda x: np.log1p(np.exp(3.0 * x)) / 3.0, "any"),
]
UNARY_CASES = [unary(*row) for row in UNARY_FUNCTIONS]

BINARY_CASES = [
    binary("add", operator.add, operator.add, ("any", "any")),
    binary("sub", operator.sub, operator.sub, ("any", "any")),
    binary("mul", operator.mul, operator.mul, ("any", "any")),
    binary("div", operator.truediv, operator.truediv, ("any", "nonzero")),
    binary("pow", operator.pow, operator.pow, ("positive", "any")),
    binary("maximum", tfl.maximum, np.maximum, ("grid_low", "grid_high")),
    binary("minimum", tfl.minimum, np.minimum, ("grid_high", "grid_low")),
]

SCALAR_CASES = [
    with_scalar("float+x", lambda x: 2.0 + x),
    with_scalar("x+int", lambda x: x + 3),
    with_scalar("float-x", lambda x: 2.0 - x),
    with_scalar("x-int", lambda x: x - 2),
    with_scalar("int*x", lambda x: 3 * x),
    with_scalar("x*float", lambda x: x * -1.5),
    with_scalar("float/x", lambda x: 2.0 / x, "nonzero"),
    with_scalar("x/int", lambda x: x / 4),
    with_scalar("x**int", lambda x: x**3),
    with_scalar("x**0.5", lambda x: x**0.5, "positive"),
    with_scalar("x**negative-int", lambda x: x**-1, "nonzero"),
    with_scalar("x**float", lambda x: x**2.5, "positive"),
    with_scalar("int**x", lambda x: 2**x),
    with_scalar("float**x", lambda x: 0.5**x),
    with_scalar("maximum(x,float)", lambda x: tfl.maximum(x, 0.5), avoid=0.5,
                ref=lambda x: np.maximum(x, 0.5)),
    with_scalar("minimum(float,x)", lambda x: tfl.minimum(-0.5, x), avoid=-0.5,
                ref=lambda x: np.minimum(-0.5, x)),
]


def _where(data: st.DataObject) -> Example:
    shape_c, shape_a, shape_b = data.draw(broadcastable_shapes(3), label="shapes")
    rng = rng_from(data)
    cond = rng.random(shape_c) < 0.5
    return Example([values(rng, shape_a), values(rng, shape_b)],
                   lambda a, b: tfl.where(cond, a, b), lambda a, b: np.where(cond, a, b))


def _where_scalar(data: st.DataObject) -> Example:
    shape_c, shape_a = data.draw(broadcastable_shapes(2), label="shapes")
    rng = rng_from(data)
    cond = rng.random(shape_c) < 0.5
    return Example([values(rng, shape_a)],
                   lambda a: tfl.where(cond, 0.0, a), lambda a: np.where(cond, 0.0, a))


def _where_comparison(data: st.DataObject) -> Example:
    """The condition is a bool tensor computed from an operand (``where(a > 0, a, b)``)."""
    shape_a, shape_b = data.draw(broadcastable_shapes(2), label="shapes")
    rng = rng_from(data)
    return Example([values(rng, shape_a, "nonzero"), values(rng, shape_b)],
                   lambda a, b: tfl.where(a > 0, a, b), lambda a, b: np.where(a > 0, a, b))


WHERE_CASES = [OpCase("where", _where), OpCase("where-scalar", _where_scalar),
               OpCase("where(a>0,a,b)", _where_comparison)]

# --- Clipping -----------------------------------------------------------------------------------


def _clip_scalars(fn: Callable, ref: Callable, bounds: tuple) -> Callable:
    """One operand, kept away from the (Python scalar) bounds, where clip has its kinks."""
    def draw(data: st.DataObject) -> Example:
        x = values(rng_from(data), data.draw(shapes(), label="shape"))
        for bound in bounds:
            x = away_from(x, bound)
        return Example([x], fn, ref)

    return draw


def _grid(rng: np.random.Generator, shape: tuple, offset: float) -> np.ndarray:
    """Values near 0.3 k + offset: with offsets 0.05, 0.15 and 0.25, operands never come within
    0.06 of each other, so no element sits on a kink of clip (nor has min == max)."""
    size = int(np.prod(shape))
    v = rng.integers(-7, 7, size) * 0.3 + offset + rng.uniform(-0.02, 0.02, size)
    return np.asarray(v, dtype=np.float64).reshape(shape)


def _clip_tensors(data: st.DataObject) -> Example:
    """Tensor bounds that broadcast with x; sometimes min > max, where max wins (NumPy, PyTorch)."""
    shape_x, shape_lo, shape_hi = data.draw(broadcastable_shapes(3), label="shapes")
    rng = rng_from(data)
    inputs = [_grid(rng, shape_x, 0.05), _grid(rng, shape_lo, 0.15), _grid(rng, shape_hi, 0.25)]
    return Example(inputs, lambda x, lo, hi: x.clip(lo, hi), np.clip)


CLIP_CASES = [
    OpCase("clip(lo,hi)", _clip_scalars(lambda x: x.clip(-0.5, 0.8),
                                        lambda x: np.clip(x, -0.5, 0.8), (-0.5, 0.8))),
    OpCase("clip(min=)", _clip_scalars(lambda x: tfl.clip(x, min=0.3),
                                       lambda x: np.clip(x, 0.3, None), (0.3,))),
    OpCase("clip(max=)", _clip_scalars(lambda x: x.clip(max=-0.2),
                                       lambda x: np.clip(x, None, -0.2), (-0.2,))),
    OpCase("clip(x,lo,hi)-tensors", _clip_tensors),
]

# --- NumPy's ufuncs applied to tensors ----------------------------------------------------------


def _ndarray_on_the_left(data: st.DataObject) -> Example:
    shape_c, shape_x = data.draw(broadcastable_shapes(2), label="shapes")
    rng = rng_from(data)
    c = values(rng, shape_c)
    return Example([values(rng, shape_x)], lambda x: c * x - c, lambda x: c * x - c)


#: ``np.tanh(t)`` runs teachflow's tanh: the same expression on a Tensor and on an ndarray.
NUMPY_UFUNC_CASES = [
    unary("np.tanh(x)", lambda x: np.tanh(x), np.tanh),
    unary("np.exp(x)", lambda x: np.exp(x), np.exp),
    unary("np.sqrt(x)", lambda x: np.sqrt(x), np.sqrt, "positive"),
    unary("np.sin(x)", lambda x: np.sin(x), np.sin),
    with_scalar("np.add(x,1)", lambda x: np.add(x, 1)),
    with_scalar("np.power(x,2)", lambda x: np.power(x, 2)),
    binary("np.maximum(x,y)", lambda x, y: np.maximum(x, y), np.maximum,
           ("grid_low", "grid_high")),
    OpCase("ndarray*x-ndarray", _ndarray_on_the_left),
]

# --- Matrix multiplication ----------------------------------------------------------------------


def _matmul(fn: Callable) -> Callable[[st.DataObject], Example]:
    """Vectors (1-D on either side) and batched operands whose batch axes broadcast."""
    def draw(data: st.DataObject) -> Example:
        n, k, m = data.draw(st.tuples(*[st.integers(1, 4)] * 3), label="n, k, m")
        batch_a, batch_b = data.draw(broadcastable_shapes(2, max_dims=2), label="batches")
        a_is_vector, b_is_vector = data.draw(st.tuples(st.booleans(), st.booleans()),
                                             label="vectors")
        shape_a = (k,) if a_is_vector else batch_a + (n, k)
        shape_b = (k,) if b_is_vector else batch_b + (k, m)
        rng = rng_from(data)
        return Example([values(rng, shape_a), values(rng, shape_b)], fn, np.matmul)

    return draw


MATMUL_CASES = [OpCase("matmul-operator", _matmul(operator.matmul)),
                OpCase("matmul-function", _matmul(tfl.matmul))]

# --- Indexing -----------------------------------------------------------------------------------


def _int_index(data: st.DataObject, shape: tuple) -> Callable:
    i = data.draw(st.integers(-shape[0], shape[0] - 1), label="i")
    return lambda x: x[i]


def _basic_index(data: st.DataObject, shape: tuple) -> Callable:
    index = data.draw(hnp.basic_indices(shape, allow_newaxis=True, allow_ellipsis=True),
                      label="index")
    return lambda x: x[index]


def _columns_1_to_3(data: st.DataObject, shape: tuple) -> Callable:
    return lambda x: x[:, 1:3]


def _negative_index(data: st.DataObject, shape: tuple) -> Callable:
    return lambda x: x[-1, ..., -2:]


def _newaxis(data: st.DataObject, shape: tuple) -> Callable:
    return lambda x: x[None, :, np.newaxis]


def _repeated_indices(data: st.DataObject, size: int) -> np.ndarray:
    """An integer index array with at least one index twice (gradients there must add up)."""
    picks = data.draw(st.lists(st.integers(-size, size - 1), min_size=1, max_size=5),
                      label="indices")
    return np.array(picks + [picks[0]])


def _int_array_axis0(data: st.DataObject, shape: tuple) -> Callable:
    index = _repeated_indices(data, shape[0])
    return lambda x: x[index]


def _int_array_axis1(data: st.DataObject, shape: tuple) -> Callable:
    index = _repeated_indices(data, shape[1])
    return lambda x: x[:, index]


def _int_arrays_every_axis(data: st.DataObject, shape: tuple) -> Callable:
    index = data.draw(hnp.integer_array_indices(shape, result_shape=shapes(0, 2)),
                      label="index")
    return lambda x: x[index]


def _int_list(data: st.DataObject, shape: tuple) -> Callable:
    index = _repeated_indices(data, shape[0]).tolist()
    return lambda x: x[index]


def _bool_mask(data: st.DataObject, shape: tuple) -> Callable:
    mask = data.draw(hnp.arrays(np.bool_, shape), label="mask")
    return lambda x: x[mask]


def _bool_mask_axis0(data: st.DataObject, shape: tuple) -> Callable:
    mask = data.draw(hnp.arrays(np.bool_, shape[:1]), label="mask")
    return lambda x: x[mask]


def _tensor_index(data: st.DataObject) -> Example:
    """An index given as a teachflow int tensor."""
    shape = data.draw(shapes(min_dims=1), label="shape")
    index = _repeated_indices(data, shape[0])
    return Example([values(rng_from(data), shape)],
                   lambda x: x[tfl.tensor(index)], lambda x: x[index])


INDEX_CASES = [
    same_expression("t[i]", _int_index, min_dims=1),
    same_expression("t[basic-index]", _basic_index),
    same_expression("t[:,1:3]", _columns_1_to_3, min_dims=2),
    same_expression("t[-1,...,-2:]", _negative_index, min_dims=2),
    same_expression("t[None,:,newaxis]", _newaxis, min_dims=1),
    same_expression("t[int-array]", _int_array_axis0, min_dims=1),
    same_expression("t[:,int-array]", _int_array_axis1, min_dims=2),
    same_expression("t[int-arrays]", _int_arrays_every_axis, min_dims=1),
    same_expression("t[int-list]", _int_list, min_dims=1),
    OpCase("t[int-tensor]", _tensor_index),
    same_expression("t[bool-mask]", _bool_mask, min_dims=1),
    same_expression("t[bool-mask-axis0]", _bool_mask_axis0, min_dims=1),
    same_expression("t[t>0]", lambda data, shape: lambda x: x[x > 0], "nonzero"),
]

# --- Reductions ---------------------------------------------------------------------------------


def _reduction(name: str, domain: str) -> OpCase:
    def draw_expression(data: st.DataObject, shape: tuple) -> Callable:
        axis = data.draw(axes(len(shape)), label="axis")
        keepdims = data.draw(st.booleans(), label="keepdims")
        return lambda x: getattr(x, name)(axis=axis, keepdims=keepdims)

    return same_expression(name, draw_expression, domain)


def _var(data: st.DataObject, shape: tuple) -> Callable:
    """PyTorch's unbiased default (when more than one value is reduced) or NumPy's correction 0;
    the function or the method."""
    axis = data.draw(axes(len(shape)), label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    reduced = [shape[a] for a in (range(len(shape)) if axis is None
                                  else np.atleast_1d(axis))]
    correction = data.draw(st.sampled_from([0, 1] if np.prod(reduced) > 1 else [0]),
                           label="correction")

    def var(x):
        if isinstance(x, np.ndarray):
            return np.var(x, axis=axis, keepdims=keepdims, ddof=correction)
        if correction == 1 and data.draw(st.booleans(), label="default correction"):
            return tfl.var(x, axis=axis, keepdims=keepdims)
        return x.var(axis=axis, keepdims=keepdims, correction=correction)

    return var


REDUCTION_CASES = [_reduction("sum", "any"), _reduction("mean", "any"),
                   _reduction("max", "distinct"), _reduction("min", "distinct"),
                   same_expression("var", _var)]

# --- Shape ops ----------------------------------------------------------------------------------


def _reshape(data: st.DataObject) -> Example:
    """Shuffle the sides, merge neighbours, add 1s, maybe let one side be -1."""
    shape = data.draw(shapes(), label="shape")
    sides = data.draw(st.permutations(shape), label="sides") if shape else []
    merged: list[int] = []
    for side in sides:
        if merged and data.draw(st.booleans(), label="merge"):
            merged[-1] *= side
        else:
            merged.append(side)
    for _ in range(data.draw(st.integers(0, 2), label="ones")):
        merged.insert(data.draw(st.integers(0, len(merged)), label="where"), 1)
    target = list(merged)
    if target and data.draw(st.booleans(), label="infer"):
        target[data.draw(st.integers(0, len(target) - 1), label="which")] = -1
    target = tuple(target)
    form = data.draw(st.sampled_from(["varargs", "tuple", "function"]), label="form")
    if form == "varargs":
        fn = lambda x: x.reshape(*target)
    elif form == "tuple":
        fn = lambda x: x.reshape(target)
    else:
        fn = lambda x: tfl.reshape(x, target)
    return Example([values(rng_from(data), shape)], fn, lambda x: x.reshape(target))


def _transpose(data: st.DataObject) -> Example:
    shape = data.draw(shapes(), label="shape")
    ndim = len(shape)
    order = data.draw(st.permutations(range(ndim)), label="axes")
    perm = tuple(data.draw(st.sampled_from([a, a - ndim]), label="sign") for a in order)
    form = data.draw(st.sampled_from(["varargs", "tuple", "function", "reverse", ".T"]),
                     label="form")
    ref = lambda x: np.transpose(x, perm)
    identity_pair = ndim == 2 and [a % 2 for a in perm] == [0, 1]  # PyTorch's swap habit:
    if form == "varargs" and not identity_pair:  # explained, not run (test_pytorch_habits)
        fn = lambda x: x.transpose(*perm)
    elif form in ("tuple", "varargs"):
        fn = lambda x: x.transpose(perm)
    elif form == "function":
        fn = lambda x: tfl.transpose(x, perm)
    elif form == "reverse":
        fn, ref = (lambda x: x.transpose()), np.transpose
    else:
        fn = ref = lambda x: x.T
    return Example([values(rng_from(data), shape)], fn, ref)


def _broadcast_to(data: st.DataObject) -> Example:
    shape, other = data.draw(broadcastable_shapes(2), label="shapes")
    lead = data.draw(shapes(max_dims=1), label="lead")
    target = lead + np.broadcast_shapes(shape, other)
    return Example([values(rng_from(data), shape)],
                   lambda x: tfl.broadcast_to(x, target), lambda x: np.broadcast_to(x, target))


def _concatenate(data: st.DataObject, join: Callable = tfl.concatenate) -> Example:
    shape = data.draw(shapes(min_dims=1), label="shape")
    axis = data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")
    sizes = data.draw(st.lists(st.integers(1, 4), min_size=1, max_size=3), label="sizes")
    rng = rng_from(data)
    inputs = [values(rng, shape[:axis % len(shape)] + (s,) + shape[axis % len(shape) + 1:])
              for s in sizes]
    return Example(inputs, lambda *xs: join(list(xs), axis=axis),
                   lambda *xs: np.concatenate(xs, axis=axis))


def _stack(data: st.DataObject) -> Example:
    shape = data.draw(shapes(), label="shape")
    axis = data.draw(st.integers(-len(shape) - 1, len(shape)), label="axis")
    count = data.draw(st.integers(1, 3), label="count")
    rng = rng_from(data)
    return Example([values(rng, shape) for _ in range(count)],
                   lambda *xs: tfl.stack(xs, axis=axis), lambda *xs: np.stack(xs, axis=axis))


def _softmax(tfl_fn: Callable, np_fn: Callable) -> Callable[[st.DataObject], Example]:
    def draw(data: st.DataObject) -> Example:
        shape = data.draw(shapes(min_dims=1), label="shape")
        axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1), label="axis")
        x = values(rng_from(data), shape)
        if axis is None:  # the default, the last axis
            return Example([x], tfl_fn, np_fn)
        return Example([x], lambda t: tfl_fn(t, axis=axis), lambda a: np_fn(a, axis=axis))

    return draw


def _unsqueeze(data: st.DataObject, shape: tuple) -> Callable:
    dim = data.draw(st.integers(-len(shape) - 1, len(shape)), label="dim")
    return lambda x: np.expand_dims(x, dim) if isinstance(x, np.ndarray) else x.unsqueeze(dim)


def _squeeze(data: st.DataObject, shape: tuple) -> Callable:
    """All size-1 axes, or the chosen ones: a chosen axis whose size is not 1 stays (PyTorch)."""
    dim = data.draw(axes(len(shape)), label="dim")
    chosen = range(len(shape)) if dim is None else [a % len(shape) for a in np.atleast_1d(dim)]
    ones = tuple(a for a in chosen if shape[a] == 1)
    return lambda x: np.squeeze(x, ones) if isinstance(x, np.ndarray) else tfl.squeeze(x, dim)


def _flatten(data: st.DataObject, shape: tuple) -> Callable:
    ndim = len(shape)
    start = data.draw(st.integers(-ndim, ndim - 1), label="start_dim")
    end = data.draw(st.integers(start % ndim - ndim, -1), label="end_dim")
    merged = shape[:start % ndim] + (-1,) + shape[end % ndim + 1:]
    return lambda x: x.reshape(merged) if isinstance(x, np.ndarray) else x.flatten(start, end)


def _permute(data: st.DataObject, shape: tuple) -> Callable:
    perm = tuple(data.draw(st.permutations(range(len(shape))), label="dims"))
    return lambda x: np.transpose(x, perm) if isinstance(x, np.ndarray) else x.permute(*perm)


def _swapaxes(data: st.DataObject, shape: tuple) -> Callable:
    a, b = data.draw(st.tuples(*[st.integers(-len(shape), len(shape) - 1)] * 2), label="axes")
    return lambda x: np.swapaxes(x, a, b) if isinstance(x, np.ndarray) else x.swapaxes(a, b)


SHAPE_CASES = [
    OpCase("reshape", _reshape),
    OpCase("transpose", _transpose),
    OpCase("broadcast_to", _broadcast_to),
    OpCase("concatenate", _concatenate),
    OpCase("cat", lambda data: _concatenate(data, tfl.cat)),
    OpCase("stack", _stack),
    same_expression("unsqueeze", _unsqueeze),
    same_expression("squeeze", _squeeze),
    same_expression("flatten", _flatten, min_dims=1),
    unary("flatten()", lambda x: x.flatten(), lambda x: x.reshape(-1)),
    same_expression("view", lambda data, shape: lambda x: x.reshape(-1) if isinstance(
        x, np.ndarray) else x.view(-1)),
    same_expression("permute", _permute),
    same_expression("swapaxes", _swapaxes, min_dims=1),
    unary("clone", lambda x: x.clone(), np.copy),
]

def _zero_d(fn: Callable, ref: Callable) -> Callable[[st.DataObject], Example]:
    return lambda data: Example([values(rng_from(data), ())], fn, ref)


COMPOSED_CASES = [
    OpCase("softmax", _softmax(tfl.softmax, softmax)),
    OpCase("log_softmax", _softmax(tfl.log_softmax, log_softmax)),
    OpCase("softmax-method", _softmax(lambda t, axis=-1: t.softmax(axis), softmax)),
    OpCase("log_softmax-method", _softmax(lambda t, axis=-1: t.log_softmax(axis), log_softmax)),
    # PyTorch: a 0-d tensor's softmax is 1, its log_softmax 0, and the gradient is 0.
    OpCase("softmax-0d", _zero_d(tfl.softmax, np.ones_like)),
    OpCase("log_softmax-0d", _zero_d(lambda t: t.log_softmax(axis=0), np.zeros_like)),
    unary("astype-float64", lambda x: x.astype("float64"), lambda x: x.astype("float64")),
]

# --- Reductions, scans, movement, einsum and attention of issue 33 -----------------------------
# Each NumPy side is the formula written out (or NumPy's function of the same meaning).


def _one_axis(data: st.DataObject, shape: tuple) -> int:
    return data.draw(st.integers(-len(shape), len(shape) - 1), label="axis")


def _logsumexp(data: st.DataObject, shape: tuple) -> Callable:
    axis, keepdims = data.draw(axes(len(shape)), label="axis"), data.draw(st.booleans())
    return lambda x: np.log(np.sum(np.exp(x), axis=axis, keepdims=keepdims)) if isinstance(
        x, np.ndarray) else x.logsumexp(axis, keepdims=keepdims)


def _running(name: str) -> Callable:
    def draw(data: st.DataObject, shape: tuple) -> Callable:
        axis = _one_axis(data, shape)
        return lambda x: getattr(np, name)(x, axis=axis) if isinstance(x, np.ndarray) else \
            getattr(tfl, name)(x, dim=axis)
    return draw


def _sorted(data: st.DataObject, shape: tuple) -> Callable:
    axis, descending = _one_axis(data, shape), data.draw(st.booleans(), label="descending")

    def sort(x):
        if isinstance(x, np.ndarray):
            ascending = np.sort(x, axis=axis)
            return np.flip(ascending, axis) if descending else ascending
        return x.sort(axis, descending=descending)[0]
    return sort


def _topk(data: st.DataObject, shape: tuple) -> Callable:
    axis = _one_axis(data, shape)
    k = data.draw(st.integers(0, shape[axis]), label="k")
    largest = data.draw(st.booleans(), label="largest")

    def topk(x):
        if isinstance(x, np.ndarray):
            order = np.sort(x, axis=axis)
            order = np.flip(order, axis) if largest else order
            return np.take(order, np.arange(k), axis=axis)
        return tfl.topk(x, k, dim=axis, largest=largest).values
    return topk


def _flip(data: st.DataObject, shape: tuple) -> Callable:
    dims = tuple(data.draw(st.lists(st.integers(0, len(shape) - 1), unique=True), label="dims"))
    return lambda x: np.flip(x, dims) if isinstance(x, np.ndarray) else x.flip(dims)


def _roll(data: st.DataObject, shape: tuple) -> Callable:
    shift = data.draw(st.integers(-5, 5), label="shift")
    axis = data.draw(st.none() | st.integers(-len(shape), len(shape) - 1), label="axis")
    return lambda x: np.roll(x, shift, axis) if isinstance(x, np.ndarray) else \
        x.roll(shift, axis)


def _repeat(data: st.DataObject, shape: tuple) -> Callable:
    reps = tuple(data.draw(st.lists(st.integers(1, 3), min_size=len(shape),
                                    max_size=len(shape) + 1), label="repeats"))
    return lambda x: np.tile(x, reps) if isinstance(x, np.ndarray) else x.repeat(*reps)


def _split(data: st.DataObject, shape: tuple) -> Callable:
    """The pieces joined back in reverse order: each piece's gradient goes to its own place."""
    axis = data.draw(st.integers(0, len(shape) - 1), label="axis")
    size = data.draw(st.integers(1, 4), label="split_size")
    chunks = data.draw(st.booleans(), label="chunk")

    def split(x):
        if isinstance(x, np.ndarray):
            n = x.shape[axis]
            step = -(-n // size) if chunks else size
            pieces = [np.take(x, np.arange(s, min(s + step, n)), axis=axis)
                      for s in range(0, n, step)]
            return np.concatenate(pieces[::-1], axis=axis)
        pieces = x.chunk(size, axis) if chunks else tfl.split(x, size, dim=axis)
        return tfl.cat(list(pieces[::-1]), axis)
    return split


def _triangle(data: st.DataObject, shape: tuple) -> Callable:
    name = data.draw(st.sampled_from(["tril", "triu"]), label="triangle")
    k = data.draw(st.integers(-3, 3), label="diagonal")
    return lambda x: getattr(np, name)(x, k) if isinstance(x, np.ndarray) else \
        getattr(x, name)(diagonal=k)


def _diagonal(data: st.DataObject, shape: tuple) -> Callable:
    a, b = data.draw(st.permutations(range(len(shape))), label="dims")[:2]
    offset = data.draw(st.integers(-3, 3), label="offset")
    return lambda x: np.diagonal(x, offset, a, b) if isinstance(x, np.ndarray) else \
        tfl.diagonal(x, offset, a, b)


def _pad(data: st.DataObject, shape: tuple) -> Callable:
    mode = data.draw(st.sampled_from(["constant", "replicate", "reflect", "circular"]),
                     label="mode")
    widths = [tuple(data.draw(st.integers(-1 if mode == "constant" and side > 1 else 0,
                                          {"reflect": side - 1, "circular": side}.get(mode, 3)),
                              label="width") for _ in range(2)) for side in shape[::-1]]
    numpy_mode = {"replicate": "edge", "circular": "wrap"}.get(mode, mode)

    def pad(x):
        if not isinstance(x, np.ndarray):
            return tfl.nn.functional.pad(x, [w for pair in widths for w in pair], mode=mode,
                                         value=0.5)
        for k, (before, after) in enumerate(widths):
            axis = x.ndim - 1 - k
            x = np.take(x, np.arange(max(-before, 0), x.shape[axis] - max(-after, 0)), axis)
            pair = [(0, 0)] * x.ndim
            pair[axis] = (max(before, 0), max(after, 0))
            extra = {"constant_values": 0.5} if mode == "constant" else {}
            x = np.pad(x, pair, mode=numpy_mode, **extra)
        return x
    return pad


def _einsum(data: st.DataObject) -> Example:
    equation, shapes_ = data.draw(st.sampled_from([
        ("ij,jk->ik", [(2, 3), (3, 4)]), ("bij,bjk->bik", [(2, 2, 3), (2, 3, 2)]),
        ("i,j->ij", [(3,), (2,)]), ("ii->i", [(3, 3)]), ("ii", [(3, 3)]),
        ("bij->jb", [(2, 3, 4)]), ("ij,ij->", [(2, 3), (2, 3)]),
        ("ij,jk,kl->li", [(2, 3), (3, 2), (2, 2)]), ("bhqd,bhkd->bhqk", [(1, 2, 3, 2)] * 2)]),
        label="equation")
    rng = rng_from(data)
    return Example([values(rng, s) for s in shapes_],
                   lambda *xs: tfl.einsum(equation, *xs), lambda *xs: np.einsum(equation, *xs))


def _attention(data: st.DataObject) -> Example:
    """softmax(q k^T / sqrt(E) (masked)) v, written out."""
    batch, length, source, e, ev = data.draw(st.tuples(
        st.integers(1, 2), st.integers(1, 4), st.integers(1, 4), st.integers(1, 3),
        st.integers(1, 3)), label="sizes")
    causal = data.draw(st.booleans(), label="is_causal")
    rng = rng_from(data)

    def ref(q, k, v):
        scores = q @ np.swapaxes(k, -1, -2) / e ** 0.5  # (a Python float: weak, as NumPy's rules)
        if causal:
            scores = np.where(np.tril(np.ones((length, source), bool)), scores, -np.inf)
        return softmax(scores) @ v

    return Example([values(rng, (batch, length, e)), values(rng, (batch, source, e)),
                    values(rng, (batch, source, ev))],
                   lambda q, k, v: tfl.nn.functional.scaled_dot_product_attention(
                       q, k, v, is_causal=causal), ref)


SCAN_AND_MOVEMENT_CASES = [
    _reduction("prod", "any"),
    same_expression("logsumexp", _logsumexp),
    same_expression("cumsum", _running("cumsum"), min_dims=1),
    same_expression("cumprod", _running("cumprod"), min_dims=1),
    same_expression("sort", _sorted, "distinct", min_dims=1),
    same_expression("topk", _topk, "distinct", min_dims=1),
    same_expression("flip", _flip, min_dims=1),
    same_expression("roll", _roll, min_dims=1),
    same_expression("repeat", _repeat),
    same_expression("split-chunk", _split, min_dims=1),
    same_expression("tril-triu", _triangle, min_dims=2),
    same_expression("diagonal", _diagonal, min_dims=2),
    same_expression("pad", _pad),
    OpCase("einsum", _einsum),
    OpCase("scaled_dot_product_attention", _attention),
]


# --- Convolution and pooling --------------------------------------------------------------------


def conv2d_reference(x: np.ndarray, w: np.ndarray, stride: tuple, padding: tuple,
                     dilation: tuple, groups: int) -> np.ndarray:
    """The definition, a loop over output positions: each is the sum of a window of the padded
    input (its taps `dilation` apart) times the kernel, over the kernel's group of channels."""
    (sh, sw), (ph, pw), (dh, dw) = stride, padding, dilation
    o, cg, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)))
    oh = (xp.shape[2] - dh * (kh - 1) - 1) // sh + 1
    ow = (xp.shape[3] - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((x.shape[0], o, oh, ow), dtype=x.dtype)
    for k in range(o):
        c = k // (o // groups) * cg
        for i in range(oh):
            for j in range(ow):
                window = xp[:, c:c + cg, i * sh:i * sh + dh * (kh - 1) + 1:dh,
                            j * sw:j * sw + dw * (kw - 1) + 1:dw]
                out[:, k, i, j] = (window * w[k]).sum(axis=(1, 2, 3))
    return out


def pool_reference(x: np.ndarray, kernel: tuple, stride: tuple, padding: tuple,
                   reduce: Callable, fill: float) -> np.ndarray:
    """Each window of the input padded with `fill`, reduced (np.max, or np.mean)."""
    (kh, kw), (sh, sw), (ph, pw) = kernel, stride, padding
    xp = np.pad(x, ((0, 0), (0, 0), (ph, ph), (pw, pw)), constant_values=fill)
    oh, ow = (xp.shape[2] - kh) // sh + 1, (xp.shape[3] - kw) // sw + 1
    return np.array([[[[reduce(xp[n, c, i * sh:i * sh + kh, j * sw:j * sw + kw])
                        for j in range(ow)] for i in range(oh)] for c in range(x.shape[1])]
                     for n in range(x.shape[0])])


def _conv2d(data: st.DataObject) -> Example:
    """Any stride, padding, dilation and grouping that fits a small image."""
    groups = data.draw(st.sampled_from([1, 2]), label="groups")
    n, c, o = (data.draw(st.integers(1, 2), label=k) for k in ("n", "c/groups", "o/groups"))
    kh, kw, sh, sw, ph, pw, dh, dw = (data.draw(st.integers(1, 2), label=k) for k in
                                      ("kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw"))
    ph, pw = ph - 1, pw - 1
    h, w = (data.draw(st.integers(dh * (kh - 1) + 1, 5), label="h"),
            data.draw(st.integers(dw * (kw - 1) + 1, 5), label="w"))
    rng, bias = rng_from(data), data.draw(st.booleans(), label="bias")
    inputs = [values(rng, (n, c * groups, h, w)), values(rng, (o * groups, c, kh, kw)),
              values(rng, (o * groups,))]
    keywords = {"stride": (sh, sw), "padding": (ph, pw), "dilation": (dh, dw),
                "groups": groups}

    def fn(x, weight, b):
        return tfl.nn.functional.conv2d(x, weight, b if bias else None, **keywords)

    def ref(x, weight, b):
        out = conv2d_reference(x, weight, keywords["stride"], keywords["padding"],
                               keywords["dilation"], groups)
        return out + b[:, None, None] * bias

    return Example(inputs, fn, ref)


def _pool(name: str, reduce: Callable, fill: float) -> Callable[[st.DataObject], Example]:
    def draw(data: st.DataObject) -> Example:
        kh, kw = (data.draw(st.integers(1, 3), label=k) for k in ("kh", "kw"))
        sh, sw = (data.draw(st.integers(1, 3), label=k) for k in ("sh", "sw"))
        ph, pw = data.draw(st.integers(0, kh // 2), label="ph"), \
            data.draw(st.integers(0, kw // 2), label="pw")
        h, w = (data.draw(st.integers(k, 5), label=a) for k, a in ((kh, "h"), (kw, "w")))
        x = values(rng_from(data), (data.draw(st.integers(1, 2), label="n"), 2, h, w))
        pool = getattr(tfl.nn.functional, name)
        return Example([x], lambda x: pool(x, (kh, kw), (sh, sw), (ph, pw)),
                       lambda x: pool_reference(x, (kh, kw), (sh, sw), (ph, pw), reduce, fill))

    return draw


WINDOW_CASES = [OpCase("conv2d", _conv2d),
                OpCase("max_pool2d", _pool("max_pool2d", np.max, -np.inf)),
                OpCase("avg_pool2d", _pool("avg_pool2d", np.mean, 0.0))]

# --- Picking along an axis, and the losses -------------------------------------------------------


def _gather(data: st.DataObject) -> Example:
    """An index as long as x or shorter along the other axes (PyTorch allows it), any length
    along `dim`, with repeated positions (their gradients add up)."""
    shape = data.draw(shapes(min_dims=1), label="shape")
    dim = data.draw(st.integers(-len(shape), len(shape) - 1), label="dim")
    axis = dim % len(shape)
    sides = tuple(data.draw(st.integers(1, MAX_SIDE if k == axis else n), label="side")
                  for k, n in enumerate(shape))
    rng = rng_from(data)
    index = rng.integers(0, shape[axis], sides)

    def ref(x: np.ndarray) -> np.ndarray:  # out[i][j] = x[i][index[i][j]] for dim 1
        out = np.empty(sides, x.dtype)
        for where in np.ndindex(*sides):
            out[where] = x[where[:axis] + (index[where],) + where[axis + 1:]]
        return out

    return Example([values(rng, shape)], lambda x: x.gather(dim, tfl.tensor(index)), ref)


def _labels(data: st.DataObject) -> tuple[np.random.Generator, np.ndarray, np.ndarray]:
    n, c = data.draw(st.integers(1, 4), label="N"), data.draw(st.integers(2, 4), label="C")
    rng = rng_from(data)
    return rng, values(rng, (n, c)), rng.integers(0, c, n)


def _cross_entropy(data: st.DataObject) -> Example:
    """Class labels (some ignored), class weights, label smoothing: PyTorch's formula."""
    rng, z, y = _labels(data)
    n, c = z.shape
    eps = data.draw(st.sampled_from([0.0, 0.1]), label="label_smoothing")
    w = data.draw(st.sampled_from([None, rng.uniform(0.5, 2, c)]), label="weight")
    y[0] = data.draw(st.sampled_from([y[0], -100]), label="ignored") if n > 1 else y[0]
    reduction = data.draw(st.sampled_from(["mean", "sum", "none"]), label="reduction")

    def ref(z: np.ndarray) -> np.ndarray:
        logp = log_softmax(z, axis=1)
        weights = np.ones(c, z.dtype) if w is None else w
        kept = y != -100
        picked = np.where(kept, -weights[np.where(kept, y, 0)] * logp[np.arange(n),
                                                                    np.where(kept, y, 0)], 0)
        loss = (1 - eps) * picked + eps * np.where(kept, -(logp * weights).sum(axis=1) / c, 0)
        if reduction == "none":
            return loss
        total = loss.sum()
        return total / weights[y[kept]].sum() if reduction == "mean" else total

    return Example([z], lambda z: F.cross_entropy(z, tfl.tensor(y), reduction,
                                                  weight=None if w is None else tfl.tensor(w),
                                                  label_smoothing=eps), ref)


def _cross_entropy_probabilities(data: st.DataObject) -> Example:
    rng, z, _ = _labels(data)
    p = softmax(values(rng, z.shape), axis=1)
    return Example([z], lambda z: F.cross_entropy(z, tfl.tensor(p), label_smoothing=0.2),
                   lambda z: -((0.8 * p + 0.2 / z.shape[1]) * log_softmax(z, axis=1)).sum(1)
                   .mean())


def _nll_loss(data: st.DataObject) -> Example:
    rng, z, y = _labels(data)
    w = rng.uniform(0.5, 2, z.shape[1])
    return Example([z], lambda x: F.nll_loss(x, tfl.tensor(y), tfl.tensor(w)),
                   lambda x: -(w[y] * x[np.arange(len(y)), y]).sum() / w[y].sum())


def _binary(data: st.DataObject, logits: bool) -> Example:
    shape = data.draw(shapes(min_dims=1), label="shape")
    rng = rng_from(data)
    t = rng.random(shape)
    if logits:  # max(x, 0) - x t + log(1 + e^-|x|), the stable form, written out
        return Example([values(rng, shape)],
                       lambda x: F.binary_cross_entropy_with_logits(x, tfl.tensor(t)),
                       lambda x: (np.maximum(x, 0) - x * t + np.log1p(np.exp(-abs(x)))).mean())
    return Example([values(rng, shape)],
                   lambda x: F.binary_cross_entropy(x.sigmoid(), tfl.tensor(t), reduction="sum"),
                   lambda x: -(t * np.log(sigmoid(x)) + (1 - t) * np.log(1 - sigmoid(x))).sum())


def _pos_weight(data: st.DataObject) -> Example:
    shape = data.draw(shapes(min_dims=1), label="shape")
    rng = rng_from(data)
    t, pw = rng.random(shape), rng.uniform(0.5, 3, shape[-1:])
    return Example([values(rng, shape)],
                   lambda x: F.binary_cross_entropy_with_logits(
                       x, tfl.tensor(t), pos_weight=tfl.tensor(pw), reduction="none"),
                   lambda x: -(pw * t * np.log(sigmoid(x)) + (1 - t) * np.log(1 - sigmoid(x))))


LOSS_AND_GATHER_CASES = [
    OpCase("gather", _gather),
    OpCase("cross_entropy", _cross_entropy),
    OpCase("cross_entropy-probabilities", _cross_entropy_probabilities),
    OpCase("nll_loss", _nll_loss),
    OpCase("binary_cross_entropy", lambda data: _binary(data, logits=False)),
    OpCase("binary_cross_entropy_with_logits", lambda data: _binary(data, logits=True)),
    OpCase("binary_cross_entropy_with_logits-pos_weight", _pos_weight),
]

#: Every differentiable op of the public API, each with a readable pytest id.
DIFFERENTIABLE_CASES = (UNARY_CASES + BINARY_CASES + SCALAR_CASES + WHERE_CASES + CLIP_CASES
                        + NUMPY_UFUNC_CASES + MATMUL_CASES + INDEX_CASES + REDUCTION_CASES
                        + SHAPE_CASES + COMPOSED_CASES + SCAN_AND_MOVEMENT_CASES
                        + WINDOW_CASES + LOSS_AND_GATHER_CASES)
