"""The C kernel computes what NumPy computes, or says why it leaves a group to NumPy.

Groups are cut from traced graphs as in `test_fused_kernels.py`. Where the system has a C
compiler, the compiled kernel's results equal the NumPy kernel's and the eager ones: exactly for
integers, bools and IEEE arithmetic (``+ - * /``, sqrt, comparisons, casts), within a few ulp
where a maths function (libm's or libmvec's, as NumPy's own) is called, and closely for float
sums (added up in another order). That holds for every fusable op and dtype, with broadcasting,
weak Python literals, NaN and infinities, integer overflow, several results, reductions over
every kind of axis, strided inputs and ``out`` arrays. On edge values (NaN, infinities, floats
cast to integer types that cannot hold them, sums that overflow, no elements) the results,
warnings and errors are NumPy's, as ``np.errstate`` asks. Groups C cannot match (float16, an
integer power of a negative exponent, a maths function without a vector version, kept axes on
both sides of a reduced one) are declined with the reason. The driver is tested too: flags
probed, a library built once and then found in the cache, a damaged one rebuilt, concurrent
builds, no compiler at all. Without a compiler, only the tests of that path run.
"""

from __future__ import annotations

import dataclasses
import math
import os
import subprocess
import sys
import textwrap
import time
import tracemalloc
import warnings
from concurrent.futures import ThreadPoolExecutor
from typing import Any
from unittest import mock

import numpy as np
import pytest
from helpers import broadcastable_shapes, examples, rng_from
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from test_fused_kernels import (
    ARITY,
    DTYPES,
    EDGE_VALUES,
    LITERALS,
    REDUCTION_ENDS,
    REDUCTIONS,
    _with_a_reduction,
    assert_gives_eagers_results_and_warnings,
    group_of,
    multi_output_group,
    random_array,
    reduction_group,
    traced_group,
)

import teachflow as tfl
from teachflow.core.dispatch import bind
from teachflow.graph import Value, format_node
from teachflow.kernels import c_runtime, native
from teachflow.kernels.c_renderer import c_source
from teachflow.kernels.c_runtime import c_kernel
from teachflow.kernels.group import FusedGroup
from teachflow.kernels.numpy_runtime import numpy_kernel
from teachflow.ops import OPS

COMPILER = native.compiler()
needs_cc = pytest.mark.skipif(isinstance(COMPILER, str), reason=f"{COMPILER}: C kernels are "
                              "not built here, the NumPy kernel runs (tested below)")

#: Ops whose C calls a maths function of libm or libmvec: equal to NumPy's within a few ulp.
ROUNDED = {"exp", "log", "tanh", "pow", "sigmoid", "softplus", "sin", "cos", "erf", "log2"}
#: How close results that went through a maths function are, by float size.
TOLERANCE = {2: 1e-2, 4: 1e-5, 8: 1e-12}

EXAMPLES = settings(max_examples=examples(6), deadline=None,
                    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow,
                                           HealthCheck.function_scoped_fixture])


@pytest.fixture(autouse=True, scope="module")
def kernel_cache(tmp_path_factory):
    """Every kernel of this module is built in a cache of its own, so the run starts clean."""
    with pytest.MonkeyPatch.context() as patch:
        folder = tmp_path_factory.mktemp("kernels")
        patch.setenv("TEACHFLOW_CACHE", str(folder))
        yield folder


# --- Comparing with NumPy ---------------------------------------------------------------------


def eager_results(group: FusedGroup, arrays: list[np.ndarray]) -> list[np.ndarray]:
    env = dict(zip(group.inputs, arrays, strict=True))
    for node in group.members:
        args = [env[o] if isinstance(o, Value) else o for o in node.inputs]
        env[node.output] = np.asarray(node.op.kernel(np)(*args, **node.params))
    return [env[v] for v in group.outputs]


def assert_close(got: np.ndarray, want: np.ndarray, group: FusedGroup) -> None:
    """Equal, exactly or, after a maths function or a float sum, within a few ulp."""
    assert got.shape == want.shape and got.dtype == want.dtype, (got, want)
    names = {n.op.name for n in group.members}
    sums = group.reduction is not None and group.reduction.op.name != "max"
    if want.dtype.kind == "f" and (names & ROUNDED or sums):
        tolerance = TOLERANCE[want.dtype.itemsize]
        np.testing.assert_allclose(got, want, rtol=tolerance, atol=tolerance)
    else:
        np.testing.assert_array_equal(got, want, strict=True)


def assert_c_matches(group: FusedGroup, arrays: list[np.ndarray]) -> str:
    """The C kernel's results (new, and into given ``out`` arrays) equal the eager ones and the
    NumPy kernel's; or the group is declined. Returns the sentence saying which ran."""
    kernel, ran = c_kernel(group)
    if kernel is None:
        assert ran.startswith("NumPy: ") and c_source(group).startswith(f"// {group.name}:")
        return ran
    assert ran.startswith("C, compiled by ")
    with np.errstate(all="ignore"):
        want = eager_results(group, arrays)
        numpy = numpy_kernel(group, np)(*arrays)
        got = kernel(*arrays)
        outs = tuple(np.empty(s.shape, s.dtype) for s in group.specs)
        given = outs if len(outs) > 1 else outs[0]
        assert kernel(*arrays, out=given) is given, "out must be filled and returned"
    if len(group.outputs) == 1:
        numpy, got = (numpy,), (got,)
    for w, n, g, f in zip(want, numpy, got, outs, strict=True):
        assert_close(g, w, group)
        assert_close(f, w, group)
        assert_close(g, np.asarray(n), group)
    return ran


def expected_decline(ran: str, group: FusedGroup) -> None:
    """A declined group is one of the kinds C leaves to NumPy."""
    dtypes = {v.dtype.name for v in (*group.inputs, *(n.output for n in group.members))}
    assert ("float16" in dtypes and "float16" in ran) or "exponent may be negative" in ran, ran


# --- Every op, every dtype ----------------------------------------------------------------------


@needs_cc
@pytest.mark.parametrize("name", sorted(ARITY))
@EXAMPLES
@given(data=st.data())
def test_every_fusable_op_matches_numpy(name: str, data: st.DataObject) -> None:
    """The op in a chain or at its end, on arrays of every dtype that broadcast, and on
    literals (weak, as NumPy takes them), with NaN and infinities among the floats."""
    arity = ARITY[name]
    kinds = ["array"] + [data.draw(st.sampled_from(["array", "literal"]), label=f"operand {i}")
                         for i in range(1, arity)]
    if name == "where":
        kinds = data.draw(st.permutations(kinds), label="operand order")
    shapes = data.draw(broadcastable_shapes(kinds.count("array")), label="shapes")
    dtypes = [data.draw(st.sampled_from(DTYPES), label="dtype") for _ in shapes]
    literals = [data.draw(LITERALS, label="literal") for k in kinds if k == "literal"]
    params = {"dtype": np.dtype(data.draw(st.sampled_from(DTYPES), label="astype to"))} \
        if name == "astype" else {}
    before, after = data.draw(st.booleans(), label="node before"), data.draw(st.booleans())
    rng = rng_from(data)
    arrays = [random_array(rng, s, d) for s, d in zip(shapes, dtypes, strict=True)]

    def f(*tensors: Any) -> Any:
        given_arrays, given_literals = iter(tensors), iter(literals)
        operands = [next(given_arrays) if k == "array" else next(given_literals) for k in kinds]
        if before:
            first = kinds.index("array")
            operands[first] = operands[first] + operands[first]
        result = bind(OPS[name], *operands, **params)
        return result + result if after else result

    try:
        group, inputs = traced_group(f, *arrays)
    except (tfl.TeachflowError, OverflowError):
        assume(False)
    ran = assert_c_matches(group, inputs)
    if ran.startswith("NumPy"):
        expected_decline(ran, group)


@needs_cc
@settings(max_examples=examples(40), deadline=None)
@given(data=st.data())
def test_random_chains_and_reductions_match_numpy(data: st.DataObject) -> None:
    """Chains of 1 to 8 random ops over up to 3 inputs, maybe ending in a sum, mean or max
    over random axes: C equals NumPy, or declines (an axis kept between reduced ones too)."""
    shapes = data.draw(broadcastable_shapes(data.draw(st.integers(1, 3))), label="shapes")
    dtypes = [data.draw(st.sampled_from(DTYPES), label="dtype") for _ in shapes]
    step = st.tuples(st.sampled_from(sorted(ARITY)), st.lists(st.integers(-1, 20), min_size=3,
                                                              max_size=3), LITERALS)
    steps = data.draw(st.lists(step, min_size=1, max_size=8), label="steps")
    reduction = data.draw(st.sampled_from([None, *REDUCTIONS]), label="reduction")
    keepdims = data.draw(st.booleans(), label="keepdims")
    axis_seed = data.draw(st.integers(0, 2**8), label="axes")
    rng = rng_from(data)
    arrays = [random_array(rng, s, d) for s, d in zip(shapes, dtypes, strict=True)]

    def f(*tensors: Any) -> Any:
        pool, last_made = list(tensors), False
        for name, picks, literal in steps:
            operands = [literal if p < 0 and i else pool[p % len(pool)]
                        for i, p in enumerate(picks[:ARITY[name]])]
            params = {"dtype": np.dtype(DTYPES[picks[0] % len(DTYPES)])} \
                if name == "astype" else {}
            try:
                pool.append(bind(OPS[name], *operands, **params))
                last_made = True
            except (tfl.TeachflowError, OverflowError):
                last_made = False
        result = pool[-1]
        if reduction is None or not last_made:
            return result
        axis = None if axis_seed % 4 == 0 else \
            tuple(a for a in range(result.ndim) if axis_seed >> (a + 2) & 1)
        return getattr(tfl, reduction)(result, axis=axis, keepdims=keepdims)

    try:
        graph = tfl.trace(f, *[tfl.tensor(a) for a in arrays])
    except (tfl.TeachflowError, ValueError):  # e.g. the max of no elements
        assume(False)
    assume(any(n.op.fusion is not None for n in graph.nodes))
    group = group_of(graph)
    by_input = dict(zip(graph.inputs, arrays, strict=True))
    ran = assert_c_matches(group, [by_input[v] for v in group.inputs])
    if ran.startswith("NumPy") and "leading or trailing" not in ran:
        expected_decline(ran, group)


# --- Edge cases of NumPy's arithmetic -----------------------------------------------------------

INT32 = np.array([0, 1, -1, 7, -7, 2**31 - 1, -2**31, 46341, -46341], np.int32)
UINT8 = np.array([0, 1, 2, 127, 128, 200, 255, 16, 3], np.uint8)
SPECIAL = np.array([0.0, -0.0, 1.5, -1.5, math.nan, math.inf, -math.inf, 1e10, -1e10, 300.7,
                    -129.5, 2.5, 3e9, 0.5], np.float32)


EDGES = {
    "int32 overflow wraps": (lambda x, y: (x * y + x) - y * 3, [INT32, INT32[::-1].copy()]),
    "abs and neg of the most negative int": (lambda x: abs(x) + (-x), [INT32]),
    "int division by zero is float": (lambda x, y: x / y, [INT32, np.roll(INT32, 1)]),
    "integer powers wrap": (lambda x: x ** 3 + x ** 0 + x ** 31, [INT32]),
    "uint8 wraps both ways": (lambda x, y: (x - y) * x + (-x), [UINT8, UINT8[::-1].copy()]),
    "uint8 to a power": (lambda x, y: x ** y, [UINT8, UINT8[::-1].copy()]),
    "int32 and uint8 compute in int32": (lambda x, y: (x * y) > (x - y), [INT32, UINT8]),
    "bool + and * are or and and": (lambda a, b: (a + b) * b + a, [INT32 > 0, UINT8 > 100]),
    "floats to ints, out of range too": (
        lambda x: (x.astype("int32"), x.astype("int64"), x.astype("uint8"), x.astype("bool")),
        [SPECIAL]),
    "NaN propagates through max, min, clip, relu and sign": (
        lambda x, y: (tfl.maximum(x, y), tfl.minimum(y, x), x.clip(-1, 1), tfl.relu(x),
                      bind(OPS["sign"], x)), [SPECIAL, SPECIAL[::-1].copy()]),
    "weak literals take the array's type": (
        lambda i, u: (i + (2**31 - 1), u + 255, i * 2.5, u * 1.5, u < -3, u <= 300,
                      i == 2**40), [INT32, UINT8]),
    "a float literal rounds to float32": (lambda x: (x * 0.1 + 1e30, x > 0.1, x == 1e39),
                                          [SPECIAL]),
}


@needs_cc
@pytest.mark.parametrize("case", sorted(EDGES))
def test_edge_cases_match_numpy(case: str) -> None:
    fn, arrays = EDGES[case]
    group, inputs = multi_output_group(fn, *arrays)
    assert assert_c_matches(group, inputs).startswith("C, compiled by")


@needs_cc
@needs_cc
@pytest.mark.parametrize("shape", [(6, 5), (300, 500)])  # one core, and both (the loop split)
@pytest.mark.parametrize(("reduction", "axis", "keepdims"), REDUCTION_ENDS)
def test_a_c_kernel_ending_in_a_reduction_also_writes_its_other_results(shape, reduction, axis,
                                                                        keepdims) -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=shape).astype(np.float32), rng.normal(size=shape).astype(np.float32)
    group, inputs = reduction_group(_with_a_reduction(reduction, axis, keepdims), x, y)
    assert assert_c_matches(group, inputs).startswith("C, compiled by")


@needs_cc
def test_a_power_of_a_literal_half_is_numpys_square_root() -> None:
    """NumPy computes ``x ** 0.5`` as a square root: of -inf that is nan (C's pow gives inf,
    and raises nothing that would send the call back to NumPy)."""
    for dtype in ("float32", "float64"):
        x = np.array([-np.inf, 4.0, 0.0, np.inf], dtype)
        group, inputs = traced_group(lambda x: x ** 0.5 * 2.0, x)
        kernel, ran = c_kernel(group)
        assert ran.startswith("C, compiled by") and "sqrt" in c_source(group)
        with np.errstate(invalid="ignore"), warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            np.testing.assert_array_equal(kernel(*inputs), x ** 0.5 * 2.0)


def test_numpys_warnings_come_from_the_numpy_kernel_run_again() -> None:
    """The C kernel reports the CPU's floating-point flags; where NumPy would warn (or raise, as
    np.errstate says), the NumPy kernel runs again and does. Where NumPy keeps quiet, or the
    data raise nothing, the C result stands."""
    x = np.array([-1.0, 0.0, 2.0, 4.0], np.float32)
    group, _ = traced_group(lambda x: (x.log() * 2 + 1) / x, x)
    kernel, _ = c_kernel(group)
    with np.errstate(all="ignore"):
        want = eager_results(group, [x])[0]
    with pytest.warns(RuntimeWarning) as caught:
        np.testing.assert_array_equal(kernel(x), want)
    assert {str(w.message).split(" encountered")[0] for w in caught} >= {
        "invalid value", "divide by zero"}
    with np.errstate(divide="ignore", invalid="raise"), pytest.raises(FloatingPointError):
        kernel(x)
    fine = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    with mock.patch.object(c_runtime, "numpy_kernel", side_effect=AssertionError("NumPy ran")):
        with np.errstate(all="ignore"):
            np.testing.assert_array_equal(kernel(x), want)
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert_close(kernel(fine), eager_results(group, [fine])[0], group)


@needs_cc
@pytest.mark.parametrize("shape", [(0,), (3, 0), (0, 4)])
@pytest.mark.parametrize("reduction", [None, "sum", "mean"])
def test_arrays_with_no_elements(shape: tuple, reduction: str | None) -> None:
    """Nothing to compute, but a reduction's result is where it starts; the mean of no
    elements (NaN, and NumPy's "Mean of empty slice") is NumPy's own."""
    def f(x):
        y = x * 2 + 1
        return y if reduction is None else getattr(tfl, reduction)(y, axis=len(shape) - 1)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # NumPy's mean of an empty slice
        group, inputs = traced_group(f, np.ones(shape, np.float32))
        ran = assert_c_matches(group, inputs)
    if reduction == "mean" and shape[-1] == 0:
        assert "Mean of empty slice" in ran, ran
    else:
        assert ran.startswith("C"), ran


# --- Edge values: NumPy's results and NumPy's warnings --------------------------------------


@needs_cc
@pytest.mark.parametrize("errors", ["warn", "ignore", "raise"])
@pytest.mark.parametrize("case", sorted(EDGE_VALUES))
def test_edge_values_give_numpys_results_and_warnings(case: str, errors: str) -> None:
    """NaN, infinities, floats cast to an integer type that cannot hold them, float32 sums
    whose partial sums overflow, arrays with no elements: where C's result may not be NumPy's,
    the kernel says so and its NumPy kernel runs again, so that the results, warnings and
    FloatingPointErrors are eager NumPy's, whatever ``np.errstate`` says."""
    fn, arrays, cut = EDGE_VALUES[case]
    group, inputs = cut(fn, *arrays)
    kernel, ran = c_kernel(group)
    assert kernel is not None or "Mean of empty slice" in ran, ran
    assert_gives_eagers_results_and_warnings(kernel or numpy_kernel(group, np), group, inputs,
                                             errors)


# --- What C declines ----------------------------------------------------------------------------


def assert_declined(group: FusedGroup, why: str) -> None:
    """C leaves `group` to NumPy, saying `why` in its source, and, where there is a compiler
    (else that is the reason), in the sentence saying which kernel runs."""
    kernel, ran = c_kernel(group)
    assert kernel is None and ran.startswith("NumPy: ")
    if not isinstance(COMPILER, str):
        assert why in ran, ran
    source = c_source(group)
    assert source.startswith(f"// {group.name}: no C kernel") and why in source, source


def test_float16_is_left_to_numpy() -> None:
    assert_declined(traced_group(lambda x: x * 2 + 1, np.ones(4, np.float16))[0], "float16")


def test_an_integer_power_that_may_be_negative_is_left_to_numpy() -> None:
    """NumPy raises for a negative integer exponent; C cannot, so it declines unless the
    exponent cannot be negative (a literal >= 0, unsigned, bool)."""
    x = np.arange(-3, 3, dtype=np.int32)
    declined = [traced_group(lambda x, y: x ** y, x, x)[0],
                traced_group(lambda x: x ** -1, x)[0]]
    for group in declined:
        assert_declined(group, "exponent may be negative")
    with pytest.raises(ValueError):
        numpy_kernel(declined[0], np)(x, x)
    if not isinstance(COMPILER, str):
        group, inputs = traced_group(lambda x, y: x ** y, x, np.arange(6, dtype=np.uint8))
        assert assert_c_matches(group, inputs).startswith("C")


@needs_cc
def test_a_maths_function_without_a_vector_version_is_left_to_numpy() -> None:
    """A loop calling tanhf per element is far slower than NumPy's SIMD tanh: declined."""
    group, _ = traced_group(lambda x: (x * 2).tanh(), np.ones(8, np.float32))
    with mock.patch.object(native, "vector_function", return_value="scalar"):
        assert_declined(group, "tanhf has no vector version")


def test_shapes_known_only_at_run_time_are_left_to_numpy() -> None:
    with tfl.Graph() as graph:
        x = tfl.placeholder((None, 3), dtype="float32", name="x")
        (x * 2 - 1).sigmoid()
    assert_declined(group_of(graph), "run time")


def test_a_reduced_axis_between_kept_ones_is_left_to_numpy() -> None:
    group, _ = traced_group(lambda x: (x * 2).sum(axis=1), np.ones((3, 4, 5), np.float32))
    assert_declined(group, "leading or trailing")


# --- Layouts, out, several results, big arrays --------------------------------------------------


@needs_cc
def test_strided_inputs_get_a_kernel_of_their_own_not_a_copy() -> None:
    """A transposed, reversed or broadcast view is read through its strides, by a kernel built
    for them, not copied; an unaligned one is copied first. Each gives NumPy's result."""
    rng = np.random.default_rng(1)
    base = rng.normal(size=(300, 200)).astype(np.float32)
    group, _ = traced_group(lambda x, y: (x * 2 + y).tanh() - x, base, base)
    kernel, _ = c_kernel(group)
    unaligned = np.frombuffer(b"\0" + base.tobytes(), np.float32, count=base.size,
                              offset=1).reshape(base.shape)
    views = {"transposed": base.T.copy().T, "reversed": base[::-1], "broadcast":
             np.broadcast_to(base[0], base.shape), "unaligned": unaligned}
    with mock.patch.object(c_runtime, "_variant", wraps=c_runtime._variant) as variant:
        for name, view in views.items():
            want = eager_results(group, [view, base])[0]
            out = np.empty_like(want)
            for _ in range(2):
                tracemalloc.start()
                try:
                    assert kernel(view, base, out=out) is out
                    peak = tracemalloc.get_traced_memory()[1]
                finally:
                    tracemalloc.stop()
                assert_close(out, want, group)
                assert (peak >= base.nbytes) == (name == "unaligned"), (name, peak)
    assert variant.call_count == 3  # one kernel per layout, built on its first call


@needs_cc
def test_out_is_written_in_place_or_through_a_copy() -> None:
    rng = np.random.default_rng(2)
    x, y = rng.normal(size=(50, 40)), rng.normal(size=40)
    group, inputs = traced_group(lambda x, y: (x * y + 1).exp(), x, y)
    kernel, _ = c_kernel(group)
    want = eager_results(group, inputs)[0]
    column = np.zeros((40, 50)).T  # not row-major
    assert kernel(*inputs, out=column) is column
    np.testing.assert_allclose(column, want, rtol=1e-12)
    overlapping = x.copy()  # out is an input: the result is still NumPy's
    assert kernel(overlapping, y, out=overlapping) is overlapping
    np.testing.assert_allclose(overlapping, want, rtol=1e-12)


@needs_cc
def test_only_arrays_handed_over_as_they_are_take_the_quick_call() -> None:
    """A call whose inputs are aligned, writable, row-major arrays of the kernel's dtypes takes
    the quick way; any other input (read-only, unaligned, strided, another dtype, a list) goes
    the careful way. Both give NumPy's result."""
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=(40, 30)), rng.normal(size=30)
    group, (a, b) = traced_group(lambda x, y: (x * y + 1).exp(), x, y)
    kernel, _ = c_kernel(group)
    read_only = a.copy()
    read_only.setflags(write=False)
    unaligned = np.frombuffer(bytearray(a.nbytes + 1), a.dtype, count=a.size,
                              offset=1).reshape(a.shape)
    unaligned[...] = a
    column = np.sort(a.T.copy(), axis=0).T  # a size-1 row would have any stride: use others
    column[...] = a
    inputs = {"row-major": a, "read-only": read_only, "unaligned": unaligned,
              "column-major": column, "float32": a.astype(np.float32), "a list": a.tolist()}
    careful = mock.patch.object(c_runtime.CarefulCall, "__call__", autospec=True,
                                side_effect=c_runtime.CarefulCall.__call__)
    for name, array in inputs.items():
        with careful as called:
            got = kernel(array, b) if a is x else kernel(b, array)
        assert called.called == (name != "row-major"), name
        same = np.asarray(array, a.dtype)  # (float32 values, read as the kernel's float64)
        assert_close(got, eager_results(group, [same, b] if a is x else [b, same])[0], group)


@needs_cc
def test_a_returned_result_is_reused_only_once_nobody_holds_it() -> None:
    x, y = np.arange(12.0).reshape(3, 4), np.ones(4)
    group, (a, b) = traced_group(lambda x, y: (x + y) * 2, x, y)
    assert group.returned == (True,)
    kernel, _ = c_kernel(group)
    first = kernel(a, b)
    held = first.copy()
    second = kernel(a * 2 if a is x else a, b * 2 if b is y else b)  # first is held
    assert not np.shares_memory(first, second)
    np.testing.assert_array_equal(first, held)
    address = first.ctypes.data
    del first
    third = kernel(a, b)  # the caller dropped first: its memory comes back
    assert third.ctypes.data == address
    np.testing.assert_array_equal(third, held)


SIZES = {  # (function, shape, which kernel runs): by `c_runtime.small_group`
    "2 ops, 640 elements": (lambda x, y: x * y + 1, (64, 10), "NumPy: a small group (2 ops "
                            "on 640 elements)"),
    "2 ops, 65,536 elements": (lambda x, y: x * y + 1, (256, 256), "C"),
    "4 ops, 512 elements": (lambda x, y: ((x * y + 1) * y - 2), (512,), "NumPy: a small group"),
    "6 ops, 16 elements": (lambda x, y: ((x * y + 1) * y - 2) * x + y, (16,), "C"),
    "a reduction, 640 elements": (lambda x, y: (x * y).sum(axis=1), (64, 10), "C"),
}


@needs_cc
@pytest.mark.parametrize("case", sorted(SIZES))
def test_small_groups_run_in_numpy_and_say_why(case: str) -> None:
    """A group too small to pay for a call into C runs its NumPy kernel, without building C;
    its C source is still there to read."""
    fn, shape, ran = SIZES[case]
    rng = np.random.default_rng(5)
    x, y = (tfl.tensor(rng.normal(size=shape).astype(np.float32)) for _ in range(2))
    with mock.patch.object(native, "build", wraps=native.build) as build:
        compiled = tfl.compile(fn, x, y)
        got = compiled(x, y)
    np.testing.assert_allclose(got.numpy(), fn(x, y).numpy(), rtol=1e-6)
    ((name, kernel),) = compiled.kernels.items()
    assert kernel["ran"].startswith(ran)
    assert build.called != ran.startswith("NumPy")
    assert kernel["c"].startswith(f"// {name}: ")  # the C, to read either way


@needs_cc
def test_several_results_come_from_one_loop() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=(30, 20)).astype(np.float32), rng.normal(size=20)

    def two(x, y):
        a = x * 2 + 1
        return a.tanh(), (a * y).sqrt(), a > 0

    group, inputs = multi_output_group(two, x, y)
    group = dataclasses.replace(group, returned=(True, False, True))
    assert len(group.outputs) == 3
    source = c_source(group)
    # (a bool array is read and written as the bytes it is: the loop stays vectorised)
    for param in ("float *restrict out0,", "double *restrict out1,",
                  "unsigned char *restrict out2)"):
        assert param in source
    assert source.count("out0[") == source.count("out1[") == source.count("out2[") == 1
    assert assert_c_matches(group, inputs).startswith("C")
    kernel, _ = c_kernel(group)
    with np.errstate(invalid="ignore"):  # the square root of negatives
        first = kernel(*inputs)
    assert isinstance(first, tuple) and len(first) == 3


BIG = {  # (function, arrays): each loop big enough to be shared between the cores
    "flat": (lambda x, y: ((x * y + 1) * 0.5 - x).relu().sqrt(),
             [np.linspace(-3, 3, 400_000, dtype=np.float32), np.float32(2) *
              np.ones(400_000, np.float32)]),
    "rows and columns": (lambda x, r, c: (x * r + c).tanh(),
                         [np.ones((3, 200_000)), np.linspace(0, 1, 200_000, dtype=np.float32),
                          np.arange(3.0).reshape(3, 1)]),
}


#: No reduction, or one over everything, the first axis or the last.
BIG_REDUCTIONS = [(None, None), *((r, a) for r in REDUCTIONS for a in (None, "first", "last"))]


@needs_cc
@pytest.mark.parametrize(("reduction", "axis"), BIG_REDUCTIONS)
@pytest.mark.parametrize("case", sorted(BIG))
def test_big_loops_are_shared_between_the_cores(case: str, reduction: str | None,
                                                 axis: str | None) -> None:
    """Blocks shared between the cores, each block's part of a reduction of everything
    combined in order: NumPy's results still."""
    fn, arrays = BIG[case]
    ndim = max(a.ndim for a in arrays)
    axes = {None: None, "first": (0,), "last": (ndim - 1,)}[axis]

    def f(*xs):
        y = fn(*xs)
        return y if reduction is None else getattr(tfl, reduction)(y, axis=axes)

    group, inputs = traced_group(f, *arrays)
    source = c_source(group)
    assert "#pragma omp parallel for" in source, source
    assert assert_c_matches(group, inputs).startswith("C")


# --- Readable source ----------------------------------------------------------------------------


def test_the_source_names_every_node_and_its_operands() -> None:
    group, _ = traced_group(lambda x, y: (x * 2 + y).tanh().sum(axis=1),
                            np.ones((4, 3), np.float32), np.ones(3, np.int32))
    source = c_source(group)
    assert source.startswith(f"// {group.name}: 3 elementwise op(s) and a sum")
    for i, v in enumerate(group.inputs):
        assert f"//   in{i} = {v} : {v.spec}" in source
    for node in group.members:
        assert f"//   {format_node(node)}" in source  # in the header, with its spec
        assert f"// {format_node(node).rsplit(' : ', 1)[0]}" in source  # beside its line
    assert f"//   out0 = {group.output}" in source
    assert "int fused_k0(const float *restrict in0, const int *restrict in1, " \
           "double *restrict out0)" in source
    assert "(double)in1[i1]" in source  # float32 + int32 computes in float64, as NumPy does
    assert "(in0[i0 * 3 + i1] * 2.0f)" in source  # a weak literal takes float32


# --- The compiler driver ------------------------------------------------------------------------


@needs_cc
def test_the_flags_are_the_ones_the_compiler_was_found_to_take() -> None:
    assert COMPILER.flags[:len(native.BASE_FLAGS)] == native.BASE_FLAGS
    assert "-ffast-math" not in COMPILER.flags and "-ffp-contract=off" in COMPILER.flags
    assert (COMPILER.threads > 1) <= ("-fopenmp" in COMPILER.flags)
    assert COMPILER.describe().startswith("cc -O3")


def _wrapper(tmp_path, refused: str) -> str:
    """A compiler that is cc, except that it fails whenever it is given `refused`."""
    script = tmp_path / f"cc-without{refused}"
    script.write_text(textwrap.dedent(f"""\
        #!/bin/sh
        for a in "$@"; do [ "$a" = "{refused}" ] && {{ echo "error: no {refused}" >&2; exit 1; }}
        done
        exec {COMPILER.command if not isinstance(COMPILER, str) else 'cc'} "$@"
        """))
    script.chmod(0o755)
    return str(script)


@needs_cc
def test_a_compiler_without_openmp_or_libmvec_still_gives_numpy_results(tmp_path,
                                                                        monkeypatch) -> None:
    x = np.linspace(-2, 2, 300_000, dtype=np.float32)
    chain, transcendental = (lambda x: (x * x + 1).sqrt() * 0.5), (lambda x: (x * 2).tanh())
    monkeypatch.setenv("TEACHFLOW_CC", _wrapper(tmp_path, "-fopenmp"))
    found = native.compiler()
    assert "-fopenmp" not in found.flags and found.threads == 1
    for fn in (chain, transcendental):
        group, inputs = traced_group(fn, x)
        ran = assert_c_matches(group, inputs)
        assert ran.startswith("C") and "threads" not in ran
    monkeypatch.setenv("TEACHFLOW_CC", _wrapper(tmp_path, "-lmvec"))
    group, inputs = traced_group(transcendental, x)
    assert "tanhf has no vector version" in assert_c_matches(group, inputs)
    group, inputs = traced_group(chain, x)
    assert assert_c_matches(group, inputs).startswith("C")


@needs_cc
def test_a_second_build_comes_from_the_cache(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("TEACHFLOW_CACHE", str(tmp_path))
    source = "int teachflow_answer(void) { return 42; }\n"
    library, how = native.build(source, COMPILER)
    assert how == "compiled" and library.teachflow_answer() == 42
    with mock.patch.object(subprocess, "run", side_effect=AssertionError("compiled again")):
        library, how = native.build(source, COMPILER)
        assert how == "from the cache" and library.teachflow_answer() == 42
        group, inputs = traced_group(lambda x: x * 3 - 1, np.arange(5.0))
    assert c_kernel(group)[1].endswith(" (compiled)")
    with mock.patch.object(subprocess, "run", side_effect=AssertionError("compiled again")):
        kernel, ran = c_kernel(group)
    assert ran.endswith(" (from the cache)")
    np.testing.assert_array_equal(kernel(*inputs), inputs[0] * 3 - 1)


@needs_cc
@pytest.mark.parametrize("damage", ["garbage", "cut short", "one byte changed", "empty"])
def test_a_damaged_library_in_the_cache_is_built_again(tmp_path, monkeypatch,
                                                       damage: str) -> None:
    monkeypatch.setenv("TEACHFLOW_CACHE", str(tmp_path))
    source = f"int teachflow_answer(void) {{ return {len(damage)}; }}\n"
    assert native.build(source, COMPILER)[1] == "compiled"
    path, = tmp_path.glob("*.so")
    data = path.read_bytes()
    path.unlink()  # (the library is loaded: writing into its file would change it under us)
    path.write_bytes({"garbage": b"not a library" * 100, "cut short": data[:len(data) // 2],
                      "one byte changed": data[:100] + bytes([data[100] ^ 1]) + data[101:],
                      "empty": b""}[damage])
    library, how = native.build(source, COMPILER)
    assert how == "compiled" and library.teachflow_answer() == len(damage)
    assert path.read_bytes() == data


@needs_cc
def test_concurrent_builds_of_one_kernel_all_load_it(tmp_path) -> None:
    """Processes and threads building the same library at once: each writes its own file and
    renames it into place, so every one loads a whole library and no stray file is left."""
    source = "int teachflow_answer(void) { return 7; }\n"
    script = ("import os, sys; from teachflow.kernels import native;"
              f"lib, how = native.build({source!r}, native.compiler());"
              "print(lib.teachflow_answer(), how)")
    env = {**os.environ, "TEACHFLOW_CACHE": str(tmp_path)}
    processes = [subprocess.Popen([sys.executable, "-c", script], env=env,
                                  stdout=subprocess.PIPE, text=True) for _ in range(4)]
    with mock.patch.dict(os.environ, {"TEACHFLOW_CACHE": str(tmp_path)}), \
            ThreadPoolExecutor(4) as pool:
        threads = list(pool.map(lambda _: native.build(source, COMPILER), range(4)))
    outputs = [p.communicate(timeout=120)[0] for p in processes]
    assert all(p.returncode == 0 for p in processes)
    assert all(out.startswith("7 ") for out in outputs), outputs
    assert all(library.teachflow_answer() == 7 for library, _ in threads)
    assert [p.name for p in tmp_path.iterdir() if p.name.endswith(".tmp")] == []


def test_no_compiler_means_the_numpy_kernel_and_says_why(monkeypatch) -> None:
    group, _ = traced_group(lambda x: (x * 2).tanh(), np.ones(3, np.float32))
    monkeypatch.delenv("TEACHFLOW_CC", raising=False)
    monkeypatch.setenv("PATH", "")
    assert c_kernel(group) == (None, "NumPy: no C compiler (cc not found on PATH)")
    source = c_source(group)  # still written, for reading: plain C, nothing probed
    assert "int fused_k0(" in source and "tanhf(" in source and "simd(" not in source
    monkeypatch.setenv("TEACHFLOW_CC", "")
    assert c_kernel(group) == (None, "NumPy: C kernels are turned off (TEACHFLOW_CC is empty)")
    monkeypatch.setenv("TEACHFLOW_CC", "/nowhere/cc")
    kernel, ran = c_kernel(group)
    assert kernel is None and "TEACHFLOW_CC=/nowhere/cc not found" in ran


def test_importing_compiles_nothing(tmp_path) -> None:
    code = "import teachflow.kernels.c_runtime, teachflow.kernels.native"
    env = {**os.environ, "TEACHFLOW_CACHE": str(tmp_path / "cache")}
    subprocess.run([sys.executable, "-c", code], env=env, check=True)
    assert not (tmp_path / "cache").exists()


def test_an_unwritable_cache_falls_back_to_a_private_temporary_folder(tmp_path,
                                                                      monkeypatch) -> None:
    (tmp_path / "a file").write_text("")
    monkeypatch.setenv("TEACHFLOW_CACHE", str(tmp_path / "a file" / "kernels"))
    folder = native.cache_dir()
    assert folder.name == f"teachflow-kernels-{os.getuid()}"
    assert folder.stat().st_mode & 0o022 == 0


def test_the_cache_keeps_to_its_size_the_least_recently_used_going_first(tmp_path) -> None:
    """Past its limit, the cache loses its libraries used longest ago until it holds three
    quarters of the limit; what a build that died left half written goes too, once stale."""
    now = time.time()
    for k in range(10):  # lib0 is the oldest, lib9 the newest; 100 kB each
        path = tmp_path / f"lib{k}.so"
        path.write_bytes(b"x" * 100_000)
        os.utime(path, (now - 1000 + k, now - 1000 + k))
    old, young = tmp_path / "abc.1.tmp", tmp_path / "abc.2.tmp"
    for path, age in ((old, native.STALE_SECONDS + 60), (young, 10)):
        path.write_bytes(b"half")
        os.utime(path, (now - age, now - age))
    (tmp_path / "notes.txt").write_text("not the cache's")

    assert native.prune(tmp_path, 2_000_000) == 1  # within the limit: only the stale file goes
    assert not old.exists() and young.exists() and len(list(tmp_path.glob("*.so"))) == 10

    removed = native.prune(tmp_path, 500_000, keep=tmp_path / "lib0.so")
    left = sorted(p.name for p in tmp_path.glob("*.so"))
    assert left == ["lib0.so", "lib8.so", "lib9.so"] and removed == 7  # 300 kB <= 375 kB
    assert young.exists() and (tmp_path / "notes.txt").exists()


@pytest.mark.parametrize(("setting", "limit"), [(None, native.CACHE_MB * 2**20), ("2", 2 * 2**20),
                                                ("0.5", 2**19), ("lots", native.CACHE_MB * 2**20)])
def test_the_cache_limit_is_set_in_megabytes(monkeypatch, setting, limit) -> None:
    if setting is None:
        monkeypatch.delenv("TEACHFLOW_CACHE_MB", raising=False)
    else:
        monkeypatch.setenv("TEACHFLOW_CACHE_MB", setting)
    assert native.cache_limit() == limit


@needs_cc
def test_builds_keep_the_cache_within_its_limit_and_a_load_counts_as_a_use(tmp_path,
                                                                           monkeypatch) -> None:
    monkeypatch.setenv("TEACHFLOW_CACHE", str(tmp_path))
    monkeypatch.setattr(native, "PRUNE_EVERY", 1)
    sources = [f"int teachflow_answer(void) {{ return {k}; }}\n" for k in range(3)]
    for source in sources:
        assert native.build(source, COMPILER)[1] == "compiled"
    paths = sorted(tmp_path.glob("*.so"), key=lambda p: p.stat().st_mtime)
    assert len(paths) == 3
    size = paths[0].stat().st_size
    now = time.time()
    for age, path in zip((300, 200, 100), paths, strict=True):  # the first built is the oldest
        os.utime(path, (now - age, now - age))
    assert native.build(sources[0], COMPILER)[1] == "from the cache"  # used now: the newest
    # Room for almost three libraries: building a fourth removes the one used longest ago, the
    # second, and then the third, to get down to three quarters of the limit (2.2 libraries).
    monkeypatch.setenv("TEACHFLOW_CACHE_MB", str(2.9 * size / 2**20))
    library, how = native.build("int teachflow_answer(void) { return 3; }\n", COMPILER)
    assert how == "compiled" and library.teachflow_answer() == 3
    left = set(tmp_path.glob("*.so"))
    assert paths[0] in left and paths[1] not in left and paths[2] not in left and len(left) == 2
    assert native.build(sources[1], COMPILER)[1] == "compiled"  # gone: built again


@needs_cc
def test_the_fuse_pass_says_the_same_whether_a_kernel_was_compiled_or_cached(tmp_path,
                                                                            monkeypatch) -> None:
    """Which kernel runs is the program's; whether its library was in the cache is the
    machine's: compiling twice, on an empty cache and then a full one, says the same."""
    monkeypatch.setenv("TEACHFLOW_CACHE", str(tmp_path))

    def f(x):
        return ((x * 3.0 - 1.0).tanh() * x + 2.0).exp().sum()

    x = np.linspace(-1.0, 1.0, 1 << 16)
    first, second = (tfl.compile(f, x, verify=False, passes="fuse").snapshots[-1].changes
                     for _ in range(2))
    assert [c.sentence for c in first] == [c.sentence for c in second]
    assert "Built for cpu as C, compiled by" in first[0].sentence


@needs_cc
@pytest.mark.parametrize(("given", "expected"), [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_openmp_threads_sleep_after_a_kernel_unless_the_user_says_otherwise(given, expected):
    """Spinning OpenMP threads would steal the cores of the BLAS threads of the next matrix
    product: the first kernel loaded sets OpenMP's wait policy to passive, unless the user set
    one."""
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if given is not None:
        env["OMP_WAIT_POLICY"] = given
    code = ("import os, teachflow as tfl\n"
            "x = tfl.rand(100_000)\n"
            "f = tfl.compile(lambda x: (x * 2.0 + 1.0).tanh(), x)\n"
            "f(x)\n"
            "print(os.environ.get('OMP_WAIT_POLICY'))\n")
    ran = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=120, check=True)
    assert ran.stdout.strip() == expected
