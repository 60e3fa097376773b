"""Forward values of every op against NumPy, and NumPy's broadcasting and dtype promotion rules.

Shapes, axes, indices and Python scalars come from hypothesis (see `op_cases.py`); each example
runs in float64 and in float32, and must give NumPy's values, shape and dtype.
"""

from __future__ import annotations

import operator

import numpy as np
import pytest
from helpers import broadcastable_shapes, examples, rng_from, shapes, values
from hypothesis import given, settings
from hypothesis import strategies as st
from op_cases import DIFFERENTIABLE_CASES, UNARY_FUNCTIONS, OpCase

import teachflow as tfl

TOLERANCES = {np.float64: {"rtol": 1e-10, "atol": 1e-12},
              np.float32: {"rtol": 1e-5, "atol": 1e-6}}


@pytest.mark.parametrize("case", DIFFERENTIABLE_CASES, ids=str)
@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_forward_matches_numpy(case: OpCase, data: st.DataObject) -> None:
    example = case.draw(data)
    for dtype in (np.float64, np.float32):
        arrays = [a.astype(dtype) for a in example.inputs]
        got = example.fn(*[tfl.tensor(a) for a in arrays])
        want = np.asarray(example.ref(*arrays))
        assert isinstance(got, tfl.Tensor)
        assert got.shape == want.shape
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want, **TOLERANCES[dtype])


# --- Every method is also a function ------------------------------------------------------------

FUNCTION_FORMS = {
    "exp": {}, "log": {}, "sqrt": {}, "tanh": {}, "relu": {}, "sigmoid": {}, "abs": {},
    "sum": {"axis": -1, "keepdims": True}, "mean": {"axis": (0, 2)}, "max": {"axis": 1},
    "min": {"axis": (0, 1)}, "argmax": {"axis": -1}, "argmin": {"keepdims": True},
    "var": {"axis": 2, "correction": 0}, "clip": {"min": 0.8, "max": 1.5},
    "softmax": {"axis": 1}, "log_softmax": {}, "unsqueeze": {"dim": -1}, "squeeze": {},
    "flatten": {"start_dim": 1}, "clone": {}, "swapaxes": {"axis1": 0, "axis2": 2},
}


@pytest.mark.parametrize("name", list(FUNCTION_FORMS))
def test_function_form_equals_method(name: str) -> None:
    x = tfl.tensor(values(np.random.default_rng(0), (2, 3, 4), "positive"))
    kwargs = FUNCTION_FORMS[name]
    via_function = getattr(tfl, name)(x, **kwargs)
    via_method = getattr(x, name)(**kwargs)
    assert via_function.shape == via_method.shape
    np.testing.assert_array_equal(via_function.numpy(), via_method.numpy())


def test_functions_accept_numpy_arrays_and_lists() -> None:
    a = np.linspace(0.5, 2.0, 6).reshape(2, 3)
    np.testing.assert_allclose(tfl.exp(a).numpy(), np.exp(a))
    np.testing.assert_allclose(tfl.maximum(a, [1.0, 1.0, 1.0]).numpy(), np.maximum(a, 1.0))
    np.testing.assert_allclose(tfl.matmul(a, a.T).numpy(), a @ a.T)


def test_ndarray_on_the_left_of_an_operator_gives_a_tensor() -> None:
    a = np.linspace(-1.0, 1.0, 6).reshape(2, 3)
    t = tfl.tensor(a)
    for result, want in [(a + t, a + a), (a - t, 0 * a), (a * t, a * a), (a @ t.T, a @ a.T)]:
        assert isinstance(result, tfl.Tensor)
        np.testing.assert_allclose(result.numpy(), want)


def test_empty_list_index_gives_an_empty_result() -> None:
    x = np.arange(6.0).reshape(3, 2)
    got = tfl.tensor(x)[[]]
    assert got.shape == x[[]].shape == (0, 2)


def test_detach_keeps_values_and_drops_the_tape() -> None:
    x = tfl.tensor([1.0, -2.0, 3.0], requires_grad=True)
    y = (x * 2).detach()
    assert not y.requires_grad
    assert y.dtype == x.dtype
    np.testing.assert_array_equal(y.numpy(), [2.0, -4.0, 6.0])


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "bool"])
def test_astype_matches_numpy(dtype: str) -> None:
    a = np.array([[-1.7, 0.0, 2.5], [3.2, -0.4, 1.0]])
    got = tfl.tensor(a).astype(dtype)
    assert got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got.numpy(), a.astype(dtype))


# --- Comparisons --------------------------------------------------------------------------------

COMPARISONS = {"<": operator.lt, "<=": operator.le, ">": operator.gt, ">=": operator.ge,
               "==": operator.eq, "!=": operator.ne}


@pytest.mark.parametrize("symbol", list(COMPARISONS))
@settings(max_examples=examples(30), deadline=None)
@given(data=st.data())
def test_comparison_matches_numpy(symbol: str, data: st.DataObject) -> None:
    compare = COMPARISONS[symbol]
    shape_a, shape_b = data.draw(broadcastable_shapes(2), label="shapes")
    rng = rng_from(data)
    # Small integers as floats, so that equal values (where < and <= differ) are common.
    a = rng.integers(-2, 3, shape_a).astype(np.float64)
    b = rng.integers(-2, 3, shape_b).astype(data.draw(st.sampled_from(["float32", "int64"])))
    x = tfl.tensor(a, requires_grad=True)
    other = data.draw(st.sampled_from(["tensor", "scalar-right", "scalar-left", "ndarray-left"]),
                      label="other operand")
    if other == "tensor":
        got, want = compare(x, tfl.tensor(b)), compare(a, b)
    elif other == "scalar-right":
        got, want = compare(x, 1.0), compare(a, 1.0)
    elif other == "scalar-left":
        got, want = compare(1, x), compare(1, a)
    else:
        got, want = compare(b, x), compare(b, a)
    assert isinstance(got, tfl.Tensor)
    assert got.dtype == np.bool_
    assert got.shape == np.shape(want)
    np.testing.assert_array_equal(got.numpy(), want)
    assert not got.requires_grad


# --- dtypes: creation ---------------------------------------------------------------------------


@pytest.mark.parametrize("data", [1.5, [1.0, 2.0], [[1.0], [2.5]], [1, 2.5]], ids=repr)
def test_tensor_of_python_floats_is_float32(data: object) -> None:
    t = tfl.tensor(data)
    assert t.dtype == np.float32
    np.testing.assert_array_equal(t.numpy(), np.asarray(data, dtype=np.float32))


@pytest.mark.parametrize("data, dtype", [(3, np.int64), ([1, 2], np.int64),
                                         (True, np.bool_), ([True, False], np.bool_)], ids=repr)
def test_tensor_of_python_ints_and_bools_follows_numpy(data: object, dtype: type) -> None:
    assert tfl.tensor(data).dtype == dtype


@pytest.mark.parametrize("dtype", ["float16", "float32", "float64", "int32", "int64", "bool"])
def test_tensor_of_numpy_array_keeps_its_dtype(dtype: str) -> None:
    a = np.arange(6).reshape(2, 3).astype(dtype)
    t = tfl.tensor(a)
    assert t.dtype == np.dtype(dtype)
    assert t.shape == (2, 3)
    np.testing.assert_array_equal(np.asarray(t), a)


def test_tensor_dtype_argument_wins() -> None:
    assert tfl.tensor([1.0, 2.0], dtype="float64").dtype == np.float64
    assert tfl.tensor(np.ones(2), dtype=np.float32).dtype == np.float32
    assert tfl.tensor([1, 2], dtype="float32").dtype == np.float32


# --- dtypes: promotion --------------------------------------------------------------------------

DTYPES = ["int32", "int64", "float32", "float64"]
BINARY_OPS = {"+": (operator.add, operator.add), "-": (operator.sub, operator.sub),
              "*": (operator.mul, operator.mul), "/": (operator.truediv, operator.truediv),
              "**": (operator.pow, operator.pow), "maximum": (tfl.maximum, np.maximum),
              "minimum": (tfl.minimum, np.minimum)}


@pytest.mark.parametrize("symbol", list(BINARY_OPS))
@settings(max_examples=examples(30), deadline=None)
@given(dtype=st.sampled_from(DTYPES),
       other=st.sampled_from(DTYPES + [2, 0.5]),
       tensor_on_left=st.booleans())
def test_binary_op_promotes_dtypes_like_numpy(symbol: str, dtype: str, other: object,
                                              tensor_on_left: bool) -> None:
    """Tensor with tensor follows NumPy's promotion; a Python scalar is *weak* (NEP 50): it
    adopts the tensor's dtype when the kinds allow (float32 * 2.0 stays float32)."""
    op, np_op = BINARY_OPS[symbol]
    a = np.array([[1, 2, 3], [3, 2, 1]], dtype=dtype)
    b = np.array([1, 2, 3], dtype=other) if isinstance(other, str) else other
    tb = tfl.tensor(b) if isinstance(other, str) else other
    got = op(tfl.tensor(a), tb) if tensor_on_left else op(tb, tfl.tensor(a))
    want = np_op(a, b) if tensor_on_left else np_op(b, a)
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_float32_with_python_float_stays_float32() -> None:
    x = tfl.tensor([1.0, 2.0])
    for result in [x + 1.5, 1.5 + x, x - 0.5, 2.0 - x, x * 3.0, x / 2.0, 2.0 / x, x**2.0,
                   2.0**x, x**3, tfl.maximum(x, 1.5), tfl.where(x > 1.0, x, 0.0)]:
        assert result.dtype == np.float32


def test_float32_with_float64_is_float64() -> None:
    x32 = tfl.tensor([1.0, 2.0])
    x64 = tfl.tensor(np.array([3.0, 4.0]))
    for result in [x32 + x64, x64 * x32, x32 / x64, x32**x64, tfl.maximum(x32, x64),
                   tfl.where(x32 > 1.0, x32, x64), x32 @ x64,
                   tfl.concatenate([x32, x64]), tfl.stack([x64, x32])]:
        assert result.dtype == np.float64


def test_int_tensors_follow_numpy() -> None:
    i32 = tfl.tensor(np.array([1, 2, 3], dtype=np.int32))
    i64 = tfl.tensor([4, 5, 6])
    assert (i32 + i32).dtype == np.int32
    assert (i32 * 2).dtype == np.int32
    assert (i32 + i64).dtype == np.int64
    assert (i32 / i32).dtype == np.float64
    assert (i64 + 0.5).dtype == np.float64
    assert (i32 + tfl.tensor([1.0, 2.0, 3.0])).dtype == np.float64
    np.testing.assert_array_equal((i32 * 2).numpy(), [2, 4, 6])


@pytest.mark.parametrize("dtype_a", DTYPES)
@pytest.mark.parametrize("dtype_b", DTYPES)
def test_matmul_promotes_dtypes_like_numpy(dtype_a: str, dtype_b: str) -> None:
    a = np.arange(6).reshape(2, 3).astype(dtype_a)
    b = np.arange(3).astype(dtype_b)
    got = tfl.tensor(a) @ tfl.tensor(b)
    assert got.dtype == np.matmul(a, b).dtype
    np.testing.assert_allclose(got.numpy(), np.matmul(a, b))


@pytest.mark.parametrize(("name", "fn", "ref"), [row[:3] for row in UNARY_FUNCTIONS],
                         ids=[row[0] for row in UNARY_FUNCTIONS])
@pytest.mark.parametrize("dtype", ["int32", "int64"])
def test_unary_op_of_int_tensor_follows_numpy(name: str, fn, ref, dtype: str) -> None:
    a = np.array([[1, 2], [3, 1]], dtype=dtype)
    got, want = fn(tfl.tensor(a)), np.asarray(ref(a))
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("name", ["sum", "mean", "max"])
@pytest.mark.parametrize("dtype", ["bool", *DTYPES])
@pytest.mark.parametrize("axis", [None, 0, -1, (0, 1)], ids=repr)
def test_reduction_dtype_follows_numpy(name: str, dtype: str, axis: object) -> None:
    a = (np.arange(6).reshape(2, 3) % 4).astype(dtype)
    got = getattr(tfl.tensor(a), name)(axis=axis)
    want = getattr(np, name)(a, axis=axis)
    assert got.dtype == want.dtype
    assert got.shape == want.shape
    np.testing.assert_allclose(got.numpy(), want)


def test_shapes_strategy_covers_scalars_and_size_one_sides() -> None:
    """The forward and gradient tests rely on these shapes reaching the edge cases."""
    seen = set()

    @settings(max_examples=200, database=None)
    @given(shape=shapes())
    def collect(shape: tuple) -> None:
        seen.add(shape)

    collect()
    assert () in seen
    assert any(1 in s for s in seen)
    assert any(len(s) == 3 for s in seen)
