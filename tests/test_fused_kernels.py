"""Fused kernels compute what their nodes compute one by one.

A group is cut from a traced graph the way the fusion pass cuts one: consecutive elementwise
nodes, maybe a final reduction, and as inputs the values the nodes read from outside. Then:

- the generated NumPy kernel equals running the nodes' eager kernels: exactly for elementwise
  work (same ufuncs, same dtypes, Python literals still weak), closely for float sums and means
  (blocks add up in another order); for every fusable op, over hypothesis shapes with
  broadcasting, mixed dtypes and literals, for random chains, and for arrays of several blocks;
  on edge values (NaN, infinities, casts out of range, overflowing sums, no elements) with
  NumPy's warnings too;
- it really works block by block: scratch allocated once, before the loop, every ufunc writing
  into it with ``out=``, broadcast operands read whole, peak memory a few blocks, ``out`` filled
  in place;
- the CUDA kernel reads as the CuPy call it is, builds against a stand-in CuPy, and compiles as
  CUDA C with ``nvcc -c``: NVIDIA's compiler runs without a GPU, and the test extra installs it
  from PyPI (`nvcc`), so these tests run on every machine the suite runs on (x86-64 Linux).
"""

from __future__ import annotations

import ast
import inspect
import math
import re
import shutil
import subprocess
import sys
import textwrap
import tracemalloc
import types
import warnings
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from helpers import broadcastable_shapes, examples, rng_from
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import teachflow as tfl
from teachflow.core import backends
from teachflow.core.dispatch import bind
from teachflow.graph import Graph, Value, format_node
from teachflow.kernels import numpy_renderer
from teachflow.kernels.cuda_fused import (
    CudaKernelCode,
    c_type,
    cuda_code,
    cuda_kernel,
    cuda_source,
)
from teachflow.kernels.group import FusedGroup
from teachflow.kernels.numpy_renderer import BLOCK_ELEMENTS, numpy_source
from teachflow.kernels.numpy_runtime import numpy_kernel
from teachflow.ops import OPS

#: Every fusable op, with how many operands it takes: from the declarations, so that an op is
#: tested here as soon as it is declared.
ARITY = {name: len(op.arg_names) for name, op in OPS.items() if op.fusion is not None}
DTYPES = ["float32", "float64", "float16", "int32", "int64", "uint8", "bool"]
LITERALS = st.sampled_from([0, 1, 2, -3, 0.5, -1.5, True, False, math.inf, math.nan])
REDUCTIONS = ["sum", "mean", "max"]
#: Block sizes for small arrays: the real one (one block), or a few elements (several blocks).
BLOCKS = st.sampled_from([BLOCK_ELEMENTS, 1, 2, 3, 5, 8])

EXAMPLES = settings(max_examples=examples(25), deadline=None,
                    suppress_health_check=[HealthCheck.filter_too_much, HealthCheck.too_slow])


# --- Groups, eager reference, comparison ----------------------------------------------------


def group_of(graph: Graph, name: str = "fused_k0") -> FusedGroup:
    """The traced chain as one group, as the fusion pass would cut it: the elementwise nodes the
    result depends on, and a final reduction if the graph ends in one. Inputs are the values
    read from outside, in order of first use."""
    nodes = graph.live([graph.nodes[-1].output])[0]
    reduction = nodes.pop() if nodes[-1].op.fusion is None else None
    made = {id(n.output) for n in nodes}
    inputs: list[Value] = []
    for node in [*nodes, *([reduction] if reduction else [])]:
        for o in node.inputs:
            if isinstance(o, Value) and id(o) not in made and all(o is not v for v in inputs):
                inputs.append(o)
    output = (reduction or nodes[-1]).output
    return FusedGroup(name, tuple(nodes), reduction, tuple(inputs), (output,), (True,))


def multi_output_group(fn, *arrays: np.ndarray) -> tuple[FusedGroup, list[np.ndarray]]:
    """The traced elementwise graph of `fn` as one group whose outputs are the graph's (each
    returned), and the arrays in its input order."""
    graph = tfl.trace(fn, *[tfl.tensor(a) for a in arrays])
    nodes = tuple(graph.live(list(graph.outputs))[0])
    made = {n.output for n in nodes}
    inputs = tuple(dict.fromkeys(o for n in nodes for o in n.inputs
                                 if isinstance(o, Value) and o not in made))
    group = FusedGroup("fused_k0", nodes, None, inputs, tuple(graph.outputs),
                       (True,) * len(graph.outputs))
    by_input = dict(zip(graph.inputs, arrays, strict=True))
    return group, [by_input[v] for v in inputs]


def reduction_group(fn, *arrays: np.ndarray) -> tuple[FusedGroup, list[np.ndarray]]:
    """Like `multi_output_group`, for `fn` whose last result is a reduction of its elementwise
    values: a group that writes its other results and ends in that reduction."""
    graph = tfl.trace(fn, *[tfl.tensor(a) for a in arrays])
    *nodes, reduction = graph.live(list(graph.outputs))[0]
    made = {n.output for n in (*nodes, reduction)}
    inputs = tuple(dict.fromkeys(o for n in (*nodes, reduction) for o in n.inputs
                                 if isinstance(o, Value) and o not in made))
    group = FusedGroup("fused_k0", tuple(nodes), reduction, inputs, tuple(graph.outputs),
                       (True,) * len(graph.outputs))
    by_input = dict(zip(graph.inputs, arrays, strict=True))
    return group, [by_input[v] for v in inputs]


#: Reductions a group with other results ends in: (reduction, axis, keepdims).
REDUCTION_ENDS = [("sum", None, False), ("mean", 1, True), ("max", 0, False),
                  ("sum", (0, 1), True), ("mean", 0, True)]


def _with_a_reduction(reduction: str, axis: Any, keepdims: bool):
    def fn(x, y):
        h = (x * 2.0 + y).tanh()
        return h, h * y, getattr(h * y - 1.0, reduction)(axis=axis, keepdims=keepdims)
    return fn


@pytest.mark.parametrize("shape", [(6, 5), (300, 500)])  # one block, and several
@pytest.mark.parametrize(("reduction", "axis", "keepdims"), REDUCTION_ENDS)
def test_a_kernel_ending_in_a_reduction_also_writes_its_other_results(shape, reduction, axis,
                                                                      keepdims) -> None:
    fn = _with_a_reduction(reduction, axis, keepdims)
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=shape).astype(np.float32), rng.normal(size=shape).astype(np.float32)
    group, inputs = reduction_group(fn, x, y)
    assert len(group.outputs) == 3 and group.reduction is not None
    kernel = numpy_kernel(group, np)
    want = fn(tfl.tensor(x), tfl.tensor(y))
    for out in (None, tuple(np.empty(s.shape, s.dtype) for s in group.specs)):
        got = kernel(*inputs, out=out)
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w.numpy(), rtol=1e-5, atol=1e-5)
    if shape[0] == 300:
        assert "in_blocks(" in numpy_source(group)


def traced_group(fn, *arrays: np.ndarray) -> tuple[FusedGroup, list[np.ndarray]]:
    """Trace `fn` on tensors holding `arrays`; the group and the arrays in its input order."""
    graph = tfl.trace(fn, *[tfl.tensor(a) for a in arrays])
    group = group_of(graph)
    by_input = {id(v): a for v, a in zip(graph.inputs, arrays, strict=True)}
    return group, [by_input[id(v)] for v in group.inputs]


def run_eagerly(group: FusedGroup, arrays: list[np.ndarray]) -> np.ndarray:
    """Each node's eager kernel, one after another: what fusion must reproduce."""
    env = {id(v): a for v, a in zip(group.inputs, arrays, strict=True)}
    for node in [*group.nodes, *([group.reduction] if group.reduction else [])]:
        args = [env[id(o)] if isinstance(o, Value) else o for o in node.inputs]
        env[id(node.output)] = node.op.kernel(np)(*args, **node.params)
    return np.asarray(env[id(group.output)])


def assert_matches_eager(group: FusedGroup, arrays: list[np.ndarray],
                         block_elements: int = BLOCK_ELEMENTS) -> None:
    """The kernel's result (allocated, and written into a given `out`) equals the eager one.

    A small `block_elements` makes even small arrays run in several blocks.
    """
    with mock.patch.object(numpy_renderer, "BLOCK_ELEMENTS", block_elements):
        kernel = numpy_kernel(group, np)
    with np.errstate(all="ignore"):
        try:
            want = run_eagerly(group, arrays)
        except (ValueError, ArithmeticError) as exc:  # e.g. an integer to a negative power
            with pytest.raises(type(exc)):
                kernel(*arrays)
            return
        got = kernel(*arrays)
        out = np.empty(group.spec.shape, group.spec.dtype)
        filled = kernel(*arrays, out=out)
    assert filled is out, "the kernel must write into the given out"
    for result in (got, filled):
        assert result.shape == want.shape == group.spec.shape
        assert result.dtype == want.dtype == group.spec.dtype
        if group.reduction is not None and group.reduction.op.name != "max" \
                and want.dtype.kind == "f":
            rtol = {2: 1e-2, 4: 1e-5}.get(want.dtype.itemsize, 1e-12)
            np.testing.assert_allclose(result, want, rtol=rtol, atol=rtol)
        else:
            np.testing.assert_array_equal(result, want, strict=True)


def random_array(rng: np.random.Generator, shape: tuple, dtype: str) -> np.ndarray:
    """Values with the awkward cases included: zeros, negatives, and for floats nan and ±inf."""
    dtype = np.dtype(dtype)
    if dtype == np.bool_:
        return rng.random(shape) < 0.5
    if dtype.kind == "u":
        return rng.integers(0, 10, shape).astype(dtype)
    if dtype.kind == "i":
        return rng.integers(-5, 6, shape).astype(dtype)
    special = rng.choice([0.0, math.nan, math.inf, -math.inf], shape)
    values = np.where(rng.random(shape) < 0.1, special, rng.uniform(-3, 3, shape))
    return np.asarray(values).astype(dtype)


# --- Edge values: NumPy's results and NumPy's warnings --------------------------------------

#: Floats no integer type holds (NaN, infinities, out of every range), and ones some do.
UNHELD = np.array([math.nan, math.inf, -math.inf, 1e30, -1e30, 3e9, -3e9, 2**63, -2**63,
                   2**64, 70000.5, -129.5, 255.9, -0.9, 2.5, 0.0])
#: Finite float32 values whose partial sums overflow.
OVERFLOWING = np.array([3e38, 3e38, -3e38, 1.0])


def _spread(values: np.ndarray, shape: tuple, dtype: str) -> np.ndarray:
    with np.errstate(all="ignore"):
        return np.resize(values, shape).astype(dtype)


def _ends_in(reduction: str, axis: Any) -> Any:
    return lambda x: getattr(x * 2.0, reduction)(axis=axis)


#: Programs on edge values, with the arrays they run on and how their group is cut.
EDGE_VALUES = {
    **{f"{source} to {to} and back": (
        lambda x, to=to, source=source: (x * 1.5).astype(to).astype(source) * 2,
        [_spread(UNHELD, (40, 8), source)], multi_output_group)
       for source in ("float32", "float64")
       for to in ("int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64")},
    "a cast summed": (lambda x: (x * 1.5).astype("int32").sum(axis=1),
                      [_spread(UNHELD, (40, 8), "float64")], reduction_group),
    # (Not NaN and both infinities together: whether inf meets -inf before a NaN, which NumPy
    # warns of, depends on the order of the additions, which no two sums share.)
    **{f"{reduction} over {axis} of {name}": (
        _ends_in(reduction, axis), [_spread(values, (300, 7), "float32")], reduction_group)
       for reduction in ("sum", "mean", "max") for axis in (None, 0, 1)
       for name, values in [("NaN", UNHELD[[0, 3, 4, 14]]), ("inf", UNHELD[[1, 14, 15]]),
                            ("inf and -inf", UNHELD[[1, 2, 14]])]},
    # (Blocks of rows each sum to one infinity, which meet when the blocks' parts combine.)
    **{f"{reduction} over {axis} of inf rows, then -inf rows": (
        _ends_in(reduction, axis), [np.where(np.arange(288)[:, None] < 144, np.inf,
                                             -np.inf) * np.ones((1, 7))], reduction_group)
       for reduction in ("sum", "mean") for axis in (None, 0)},
    **{f"a float32 {reduction} whose partial sums overflow": (
        lambda x, r=reduction: getattr(x * 1.0, r)(axis=1),
        [_spread(OVERFLOWING, (5, 64), "float32")], reduction_group)
       for reduction in ("sum", "mean")},
    **{f"{reduction} of {shape} over {axis}": (
        _ends_in(reduction, axis), [np.ones(shape, np.float32)], reduction_group)
       for reduction in ("sum", "mean") for shape in ((0,), (3, 0), (0, 4))
       for axis in (None, 0, -1)},
}


def run_warned(kernel: Any, arrays: list[np.ndarray]) -> tuple[Any, set[str]]:
    """`kernel`'s results, or the message of the FloatingPointError it raised, and the warnings
    it gave."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            results = kernel(*arrays)
        except FloatingPointError as err:
            results = str(err)
    return results, {f"{w.category.__name__}: {w.message}" for w in caught}


def assert_gives_eagers_results_and_warnings(kernel: Any, group: FusedGroup,
                                             arrays: list[np.ndarray], errors: str) -> None:
    """Under ``np.errstate(all=errors)``, `kernel` gives what the group's nodes give run
    eagerly one by one: the same results (closely for float sums), warnings, or error."""
    with np.errstate(all=errors):
        want, warned = run_warned(lambda *a: _eager_results(group, a), arrays)
        got, said = run_warned(kernel, arrays)
    assert said == warned
    if isinstance(want, str):
        assert got == want
        return
    sums = group.reduction is not None and group.reduction.op.name != "max"
    for g, w in zip(got if isinstance(got, tuple) else (got,), want, strict=True):
        assert (g.shape, g.dtype) == (w.shape, w.dtype)
        if sums and w.dtype.kind == "f":
            tolerance = {2: 1e-2, 4: 1e-5}.get(w.dtype.itemsize, 1e-12)
            np.testing.assert_allclose(g, w, rtol=tolerance, atol=tolerance)
        else:
            np.testing.assert_array_equal(g, w, strict=True)


def _eager_results(group: FusedGroup, arrays: tuple) -> list[np.ndarray]:
    env = dict(zip(group.inputs, arrays, strict=True))
    for node in group.members:
        args = [env[o] if isinstance(o, Value) else o for o in node.inputs]
        env[node.output] = np.asarray(node.op.kernel(np)(*args, **node.params))
    return [env[v] for v in group.outputs]


@pytest.mark.parametrize("block", [BLOCK_ELEMENTS, 64])  # one block, and several
@pytest.mark.parametrize("errors", ["warn", "ignore", "raise"])
@pytest.mark.parametrize("case", sorted(EDGE_VALUES))
def test_edge_values_give_numpys_results_and_warnings(case: str, errors: str,
                                                      block: int) -> None:
    """NaN, infinities, floats cast to an integer type that cannot hold them, sums that
    overflow, arrays with no elements: the kernel gives eager NumPy's results and warnings (its
    own "Mean of empty slice"; partial results combined as a reduction, "... in reduce"), or
    its FloatingPointError, as ``np.errstate`` asks."""
    fn, arrays, cut = EDGE_VALUES[case]
    group, inputs = cut(fn, *arrays)
    with mock.patch.object(numpy_renderer, "BLOCK_ELEMENTS", block):
        kernel = numpy_kernel(group, np)
    assert_gives_eagers_results_and_warnings(kernel, group, inputs, errors)


# --- Every op, random chains ----------------------------------------------------------------


def test_every_fusable_op_has_a_kernel_that_writes_into_a_buffer() -> None:
    """A fused NumPy kernel runs each op's own kernel with ``out=`` (a view needs none)."""
    assert {"add", "where", "clip", "astype", "sigmoid"} <= set(ARITY)
    for name in ARITY:
        op, kernel = OPS[name], OPS[name].kernel(np)
        assert op.view or isinstance(kernel, np.ufunc) or \
            "out" in inspect.signature(kernel).parameters, name


def test_no_op_is_named_outside_its_declaration() -> None:
    """What the compiler, its passes and the kernels know of an op, they read from its
    declaration (the simplify pass's rules name ops by their declarations, ew.mul): no string in
    their source is an op's name."""
    root = Path(tfl.__file__).parent
    files = [*(root / "kernels").glob("*.py"), root / "compiler.py",
             *(root / "passes").glob("*.py")]
    named = {f"{path.relative_to(root)}:{node.lineno}: {node.value!r}"
             for path in files for node in ast.walk(ast.parse(path.read_text()))
             if isinstance(node, ast.Constant) and node.value in OPS}
    assert not named


@pytest.mark.parametrize("name", sorted(ARITY))
@EXAMPLES
@given(data=st.data())
def test_every_fusable_op_matches_eager(name: str, data: st.DataObject) -> None:
    """The op inside a chain (reading a value made in the group, its result read by a later
    node) or at its end, on arrays of mixed dtypes that broadcast, and on Python literals."""
    arity = ARITY[name]
    kinds = ["array"] + [data.draw(st.sampled_from(["array", "literal"]), label=f"operand {i}")
                         for i in range(1, arity)]
    if name == "where":  # the condition may be the literal, or an array of any dtype
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
        if before:  # x + x keeps every dtype (for bool it is `or`)
            first = kinds.index("array")
            operands[first] = operands[first] + operands[first]
        result = bind(OPS[name], *operands, **params)
        return result + result if after else result

    try:
        group, inputs = traced_group(f, *arrays)
    except (tfl.TeachflowError, OverflowError):  # no such op for these dtypes: nothing to fuse
        assume(False)
    assert_matches_eager(group, inputs, data.draw(BLOCKS, label="block elements"))


@settings(max_examples=examples(100), deadline=None)
@given(data=st.data())
def test_random_chains_match_eager(data: st.DataObject) -> None:
    """Chains of 1 to 8 random ops over up to 3 inputs, each op reading inputs, earlier results or
    literals, maybe ending in a reduction over random axes."""
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
            # -1 picks the literal (never for the first operand, so a tensor is always read)
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

    graph = tfl.trace(f, *[tfl.tensor(a) for a in arrays])
    assume(any(n.op.fusion is not None for n in graph.nodes))
    group = group_of(graph)
    by_input = {id(v): a for v, a in zip(graph.inputs, arrays, strict=True)}
    assert_matches_eager(group, [by_input[id(v)] for v in group.inputs],
                         data.draw(BLOCKS, label="block elements"))


# --- Big arrays: several blocks -------------------------------------------------------------


def _rows_chain(x: Any, row: Any, col: Any, scale: Any) -> Any:
    """Every kind of operand a block meets: the blocked input, a row broadcast down the blocks,
    a column (blocked too), a 0-d scalar, literals; and ops needing more than one call."""
    a = (x * 2 + row).tanh() * scale
    b = tfl.where(a > 0.1, a, col).sigmoid()
    return (tfl.relu(b - 0.5) + x.astype("float32")) ** 2


BIG = {
    "1d": lambda rng: [rng.normal(size=300_000), rng.normal(size=()), rng.normal(size=()),
                       np.float32(0.5) * np.ones((), np.float32)],
    "3x200000": lambda rng: [rng.normal(size=(3, 200_000)).astype(np.float32),
                             rng.normal(size=200_000), rng.normal(size=(3, 1)),
                             np.ones((), np.float32)],
    "600x500": lambda rng: [rng.integers(-3, 4, (600, 500)).astype(np.int32),
                            rng.normal(size=(1, 500)).astype(np.float32),
                            rng.normal(size=(600, 1)), np.full((), 0.5)],
}


#: No reduction; or a reduction over everything, the blocked axis, or the last axis.
BIG_REDUCTIONS = [(None, None, False)] + [
    (r, axis, keepdims) for r in REDUCTIONS for axis in (None, "first", "last")
    for keepdims in (False, True)]


@pytest.mark.parametrize(("reduction", "axis", "keepdims"), BIG_REDUCTIONS)
@pytest.mark.parametrize("case", sorted(BIG))
def test_big_arrays_run_in_several_blocks(case: str, reduction: str | None, axis: Any,
                                          keepdims: bool) -> None:
    arrays = BIG[case](np.random.default_rng(0))
    ndim = arrays[0].ndim
    axes = {None: None, "first": (0,), "last": (ndim - 1,)}[axis]

    def f(x: Any, row: Any, col: Any, scale: Any) -> Any:
        y = _rows_chain(x, row, col, scale)
        return y if reduction is None else getattr(tfl, reduction)(y, axis=axes, keepdims=keepdims)

    group, inputs = traced_group(f, *arrays)
    source = numpy_source(group)
    # The runtime runs `block` on each block: one after another, or shared out between threads
    # when no block depends on another.
    blocks = re.search(r"in_blocks\(block, rows=(\d+), per_block=(\d+)", source)
    assert blocks, source
    rows, per_block = map(int, blocks.groups())
    assert -(-rows // per_block) > 1
    assert per_block == 1 or per_block * math.prod(arrays[0].shape[1:]) <= BLOCK_ELEMENTS
    assert_matches_eager(group, inputs)


def test_a_row_broadcast_down_the_blocks_is_computed_once() -> None:
    """A node reading only operands without the blocked rows is the same for every block."""
    rng = np.random.default_rng(1)
    group, inputs = traced_group(lambda x, b: x * (b * 2).exp(), rng.normal(size=(4, 100_000)),
                                 rng.normal(size=100_000))
    row = [v.shape for v in group.inputs].index((100_000,))
    before_blocks, block = numpy_source(group).split("def block")
    assert f"np.multiply(in{row}, 2)" in before_blocks and "np.exp(" in before_blocks
    parameters = block[:block.index(")")]
    assert f"in{row}" not in parameters and "np.exp(" not in block  # read whole, computed once
    assert_matches_eager(group, inputs)


# --- Blocks really reuse scratch ------------------------------------------------------------


def _chain(x: Any, y: Any) -> Any:
    return ((x * 2 + y).tanh() * y - 1.5).sigmoid() * x


def test_scratch_is_allocated_once_and_every_op_writes_into_it() -> None:
    rng = np.random.default_rng(2)
    group, _ = traced_group(_chain, rng.normal(size=300_000), rng.normal(size=300_000))
    source = numpy_source(group)
    block, run = source.split("def block")[1].split("in_blocks(")
    # Scratch is the runtime's, allocated once per thread: a block allocates nothing.
    calls = re.findall(r"= ([\w.]+)\((.*)\)", block)
    assert len(calls) == len(group.nodes)
    for function, args in calls:
        assert "out=" in args, f"{function}({args}) allocates"
    assert "np.empty(" not in block
    assert calls[-1][1].endswith("out=out")  # the last op writes the output's rows directly
    assert "parallel=False" not in run  # independent blocks: shared out between threads
    # Buffers are recycled: six ops need far fewer than six buffers.
    assert run.count("np.float64)") <= 3


def test_peak_memory_is_a_few_blocks_not_whole_intermediates() -> None:
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=1_000_000), rng.normal(size=1_000_000)
    group, inputs = traced_group(_chain, x, y)
    kernel, out = numpy_kernel(group, np), np.empty_like(x)
    tracemalloc.start()
    try:
        kernel(*inputs, out=out)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < x.nbytes / 2, f"peak {peak} bytes for arrays of {x.nbytes}"


def test_out_is_filled_in_place_even_as_a_view() -> None:
    rng = np.random.default_rng(4)
    x, y = rng.normal(size=300_000), rng.normal(size=300_000)
    group, inputs = traced_group(_chain, x, y)
    storage = np.zeros((2, 300_000))
    result = numpy_kernel(group, np)(*inputs, out=storage[1])
    assert result is not None and np.shares_memory(result, storage)
    np.testing.assert_array_equal(storage[1], run_eagerly(group, inputs))
    assert not storage[0].any()


def test_a_small_result_is_one_block() -> None:
    group, inputs = traced_group(_chain, np.ones(10), np.ones(()))
    source = numpy_source(group)
    assert "def block" not in source and "one block" in source
    assert_matches_eager(group, inputs)


def test_shapes_known_only_at_run_time() -> None:
    """A placeholder's ``None`` dimension: the eager kernels in sequence, one block."""
    with tfl.Graph() as graph:
        x = tfl.placeholder((None, 3), dtype="float32", name="x")
        (x * 2 - 1).sigmoid().mean(axis=1)
    group = group_of(graph)
    source = numpy_source(group)
    assert "run time" in source
    arrays = [np.random.default_rng(5).normal(size=(7, 3)).astype(np.float32)]
    kernel = numpy_kernel(group, np)
    want = np.asarray(run_eagerly(group, arrays))
    np.testing.assert_allclose(kernel(*arrays), want, rtol=1e-6)
    out = np.empty(7, np.float32)
    assert kernel(*arrays, out=out) is out
    np.testing.assert_allclose(out, want, rtol=1e-6)


# --- Readable source ------------------------------------------------------------------------


def test_the_source_names_every_node_and_reads_as_python() -> None:
    group, _ = traced_group(lambda x, y: (x * 2 + y).tanh().sum(axis=1),
                            np.ones((4, 3), np.float32), np.ones(3, np.int32))
    source = numpy_source(group)
    assert source.startswith(f"def {group.name}(in0, in1, out=None):")
    for node in [*group.nodes, group.reduction]:
        assert format_node(node) in source  # in the docstring, with its spec
        assert f"# {format_node(node).rsplit(' : ', 1)[0]}" in source  # beside its line
    kernel = numpy_kernel(group, np)
    assert kernel.__name__ == group.name
    assert list(inspect.signature(kernel).parameters) == ["in0", "in1", "out"]


# --- CUDA -----------------------------------------------------------------------------------


def _cuda_groups() -> dict[str, FusedGroup]:
    x32, i32 = np.ones((4, 3), np.float32), np.ones(3, np.int32)
    return {
        "elementwise": traced_group(lambda x, y: (lambda s: tfl.where(s > 0.5, s, 1).tanh())(
            x * 2 + y), x32, i32)[0],
        "reduction": traced_group(lambda x, y: (x * 2 + y).tanh().mean(axis=1), x32, i32)[0],
        "several results": multi_output_group(lambda x, y: ((x * y).tanh(), x * y + 1), x32,
                                              i32)[0],
    }


def test_cuda_source_is_the_cupy_call_with_typed_locals() -> None:
    groups = _cuda_groups()
    text = cuda_source(groups["elementwise"])
    assert "cupy.ElementwiseKernel(" in text
    assert 'in_params="float32 in0, int32 in1"' in text
    assert 'out_params="float64 result"' in text
    assert "const float v" in text and "(in0 * 2.0f)" in text  # a weak literal takes float32
    assert "(double)" in text  # float32 + int32 is computed in float64, as NumPy does
    assert re.search(r"result = v\d+;", text)
    for node in groups["elementwise"].nodes:
        assert f"// {format_node(node).rsplit(' : ', 1)[0]}" in text

    text = cuda_source(groups["reduction"])
    for part in ("cupy.ReductionKernel(", "map_expr=", "reduce_expr=", "post_map_expr=",
                 "identity=", 'reduce_type="double"', "__device__ double fused_k0_map(",
                 "axis=(1,)"):
        assert part in text, part


def test_cuda_source_with_several_results_writes_each() -> None:
    group, _ = multi_output_group(lambda x: ((x * 2).tanh(), x * 2 + 1.5), np.ones((4, 3),
                                                                                np.float32))
    text = cuda_source(group)
    assert 'out_params="float32 result0, float32 result1"' in text
    assert re.search(r"result0 = v\d+;", text) and re.search(r"result1 = v\d+;", text)
    assert "which returns (result0, result1), or fused_k0(in0, *out)" in text


class StubCupy(types.ModuleType):
    """Records how kernels are built and called, standing in for CuPy where there is none."""

    def __init__(self) -> None:
        super().__init__("cupy")
        self.built: list[tuple[str, dict]] = []
        self.calls: list[tuple[tuple, dict]] = []

        def kernel_class(kind: str):
            def build(**arguments: str):
                self.built.append((kind, arguments))
                return lambda *args, **kwargs: self.calls.append((args, kwargs)) or "result"
            return build

        self.ElementwiseKernel = kernel_class("ElementwiseKernel")
        self.ReductionKernel = kernel_class("ReductionKernel")


@pytest.mark.parametrize("kind", ["elementwise", "reduction", "several results"])
def test_cuda_source_runs_as_python_and_builds_what_cuda_kernel_builds(kind: str) -> None:
    group = _cuda_groups()[kind]
    from_text, from_kernel = StubCupy(), StubCupy()
    exec(cuda_source(group), {"cupy": from_text})
    run = cuda_kernel(group, from_kernel)
    (text_kind, text_args), = from_text.built
    (kernel_kind, kernel_args), = from_kernel.built
    assert text_kind == kernel_kind == cuda_code(group).kind
    assert {k: textwrap.dedent(v).strip() for k, v in text_args.items()} == \
        {k: v.strip() for k, v in kernel_args.items()}

    assert run.__name__ == group.name
    assert run("a", "b") == "result"
    run("a", "b", out="o")
    if kind == "elementwise":
        assert from_kernel.calls == [(("a", "b"), {}), (("a", "b", "o"), {})]
    elif kind == "several results":
        run("a", "b", out=("o0", "o1"))
        assert from_kernel.calls == [(("a", "b"), {}), (("a", "b", "o"), {}),
                                     (("a", "b", "o0", "o1"), {})]
    else:
        assert from_kernel.calls == [(("a", "b"), {"axis": (1,), "keepdims": False, "out": None}),
                                     (("a", "b"), {"axis": (1,), "keepdims": False, "out": "o"})]


def test_a_cuda_reduction_with_other_results_is_two_kernels_one_after_the_other() -> None:
    """CuPy's reduction writes only its result: an elementwise kernel writes the group's other
    results first, and the source shows both, as built."""
    x = np.ones((4, 3), "float32")
    group, _ = reduction_group(_with_a_reduction("sum", 1, False), x, x)
    from_text, from_kernel = StubCupy(), StubCupy()
    exec(cuda_source(group), {"cupy": from_text})
    run = cuda_kernel(group, from_kernel)
    kinds = ["ElementwiseKernel", "ReductionKernel"]
    assert [k for k, _ in from_text.built] == [k for k, _ in from_kernel.built] == kinds
    values, reduction = (arguments for _, arguments in from_kernel.built)
    assert values["out_params"] == "float32 result0, float32 result1"
    assert reduction["out_params"] == "float32 result"
    assert run("a", "b") == ("result", "result")  # (the stub returns "result" for each call)
    assert run("a", "b", out=("o0", "o1", "o2")) == ("o0", "o1", "o2")
    assert from_kernel.calls == [
        (("a", "b"), {}), (("a", "b"), {"axis": (1,), "keepdims": False}),
        (("a", "b", "o0", "o1"), {}), (("a", "b"), {"axis": (1,), "keepdims": False,
                                                    "out": "o2"})]


def test_cuda_module_imports_without_cupy() -> None:
    code = ("import sys; sys.modules['cupy'] = None; "
            "import teachflow.kernels.cuda_fused as m; print(m.cuda_source.__name__)")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr


#: The dtypes of the arrays each op is applied to in the nvcc test.
NVCC_DTYPES = ["float32", "float64", "int32", "int64", "bool"]


def _standalone(code: CudaKernelCode, group: FusedGroup, index: int) -> str:
    """A translation unit's worth of CUDA for one kernel, roughly as CuPy would write it: one
    thread per element for an elementwise kernel; a sequential loop for a reduction (the C of
    map, reduce and post-map is what is being checked, not CuPy's indexing)."""
    params = [p.split() for p in code.arguments["in_params"].split(", ")]
    outs = [p.split() for p in code.arguments["out_params"].split(", ")]
    pointers = ", ".join([*(f"const {c_type(d)}* _raw_{n}" for d, n in params),
                          *(f"{c_type(d)}* _raw_{n}" for d, n in outs)])
    loads = "\n".join(f"    const {c_type(d)} {n} = _raw_{n}[_i];" for d, n in params)
    head = f'extern "C" __global__ void k{index}_{group.name}({pointers}, long long _n)'
    if code.kind == "ElementwiseKernel":
        stores = "\n".join(f"    {c_type(d)}& {n} = _raw_{n}[_i];" for d, n in outs)
        return f"""{head} {{
    long long _i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
    if (_i >= _n) return;
{loads}
{stores}
{textwrap.indent(code.arguments["operation"], "    ")}
}}
"""
    (out_dtype, out_name), = outs
    arguments, own = code.arguments, f"k{index}_map"  # map functions of their own names
    preamble = arguments["preamble"].replace(f"{group.name}_map", own)
    map_expr = arguments["map_expr"].replace(f"{group.name}_map", own)
    return f"""{preamble}
{head} {{
    typedef {arguments["reduce_type"]} _type_reduce;
    Indexer _in_ind{{_n}}, _out_ind{{1}};
    _type_reduce a = _type_reduce({arguments["identity"]});
    for (long long _i = 0; _i < _n; ++_i) {{
    {loads}
        _type_reduce b = static_cast<_type_reduce>({map_expr});
        a = ({arguments["reduce_expr"]});
    }}
    {c_type(out_dtype)}& {out_name} = _raw_{out_name}[0];
    {arguments["post_map_expr"]};
}}
"""


#: How each op is applied in the nvcc test: to arrays of two dtypes, and to literals.
NVCC_OPERANDS = {
    1: [lambda x, y: (x,)],
    2: [lambda x, y: (x, 2), lambda x, y: (x, x), lambda x, y: (x, y), lambda x, y: (2.5, x)],
    3: [lambda x, y: (x > 0, y, 2), lambda x, y: (x, y, x)],
}


def _nvcc_groups(include: Any) -> list[FusedGroup]:
    groups = []
    for name in sorted(ARITY):
        params = {"dtype": np.dtype("int32")} if name == "astype" else {}
        for dtype in NVCC_DTYPES:
            if not include(name, dtype):
                continue
            for operands in NVCC_OPERANDS[ARITY[name]]:
                try:
                    group = traced_group(
                        lambda x, y, op=OPS[name], o=operands, p=params: bind(op, *o(x, y), **p),
                        np.ones(3, dtype), np.ones(3, "float32"))[0]
                except (tfl.TeachflowError, OverflowError):  # not an op for these dtypes
                    continue
                # float16 is CuPy's own C++ class, which a bare nvcc does not have
                if all(n.spec.dtype != np.float16 for n in group.nodes):
                    groups.append(group)
    return groups


def _compile(sources: list[str], tmp_path) -> subprocess.CompletedProcess:
    unit = tmp_path / "fused.cu"
    unit.write_text("#include <math_constants.h>\n"
                    "struct Indexer { long long n; "
                    "__device__ long long size() const { return n; } };\n" + "\n".join(sources))
    return subprocess.run([str(nvcc()), "-c", str(unit), "-o", str(tmp_path / "fused.o")],
                          capture_output=True, text=True, check=False)


def nvcc() -> Path | None:
    """NVIDIA's CUDA compiler: the one on PATH, else the one the test extra installs from PyPI
    (``nvidia-cuda-nvcc``, in ``site-packages/nvidia/cu13/bin``). None where there is none."""
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    try:
        import nvidia  # (a namespace package: the CUDA wheels' common folder)
    except ImportError:
        return None
    return next((Path(d, "cu13", "bin", "nvcc") for d in nvidia.__path__
                 if Path(d, "cu13", "bin", "nvcc").exists()), None)


def _why_no_nvcc() -> str | None:
    if nvcc() is None:
        return "nvcc is not installed (pip install -e '.[nvcc]' installs it from PyPI)"
    if not any(shutil.which(c) for c in ("g++", "c++")):
        return "nvcc needs a host C++ compiler, and there is none (apt-get install g++)"
    return None


def _relu_of_wide_types(name: str, dtype: str) -> bool:
    """relu of these dtypes computes in float, double or long long, where a bare max(x, 0) would
    be an ambiguous overload in CUDA."""
    return name == "relu" and dtype in ("float32", "float64", "int64", "bool")


needs_nvcc = pytest.mark.skipif(_why_no_nvcc() is not None, reason=str(_why_no_nvcc()))


@needs_nvcc
def test_generated_cuda_compiles_with_nvcc(tmp_path) -> None:
    """Every op over several dtypes, with a literal and mixed operand types, and every reduction:
    the generated C is valid CUDA (nvcc -c), with typed operands resolving every overload."""
    groups = _nvcc_groups(lambda name, dtype: not _relu_of_wide_types(name, dtype))
    for dtype in NVCC_DTYPES:
        x = np.ones((4, 3), dtype)
        for reduction in REDUCTIONS:
            for axis in (None, 1):
                groups.append(traced_group(
                    lambda x, r=reduction, a=axis: getattr(tfl, r)(bind(OPS["identity"], x),
                                                                   axis=a), x)[0])
        groups.append(multi_output_group(lambda x: (x * 2 + 1, (x * 2 > 1) * x), x)[0])
    x = np.ones((4, 3), "float32")
    groups += [reduction_group(_with_a_reduction(*ends), x, x)[0] for ends in REDUCTION_ENDS]
    sources = []
    for i, g in enumerate(groups):
        code = cuda_code(g)
        sources.append(_standalone(code, g, i))
        if code.values is not None:  # (the elementwise kernel beside the reduction)
            sources.append(_standalone(code.values, g, i + 10_000))
    done = _compile(sources, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


@needs_nvcc
def test_relu_of_floats_compiles_with_nvcc(tmp_path) -> None:
    groups = _nvcc_groups(_relu_of_wide_types)
    assert groups
    done = _compile([_standalone(cuda_code(g), g, i) for i, g in enumerate(groups)], tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]


@pytest.mark.gpu
def test_cuda_kernel_equals_numpy_kernel_on_a_gpu() -> None:
    reason = backends.gpu_unavailable_reason()
    if reason is not None:
        pytest.skip(f"no usable GPU: {reason}")
    import cupy

    rng = np.random.default_rng(6)
    x, y = rng.normal(size=(300, 200)), rng.normal(size=200).astype(np.float32)
    for fn in (lambda x, y: ((x * 2 + y).tanh() * y - 1.5).sigmoid(),
               lambda x, y: ((x * 2 + y).tanh() - y).sum(axis=1),
               lambda x, y: (x * y).exp().mean(),
               lambda x, y: tfl.where(x > y, x, y).max(axis=0, keepdims=True)):
        group, inputs = traced_group(fn, x, y)
        want = numpy_kernel(group, np)(*inputs)
        got = cuda_kernel(group, cupy)(*[cupy.asarray(a) for a in inputs])
        assert got.dtype == want.dtype and got.shape == want.shape
        np.testing.assert_allclose(cupy.asnumpy(got), want, rtol=1e-6, atol=1e-9)
    x32 = x.astype(np.float32)
    for ends in REDUCTION_ENDS:  # two kernels: the values needed outside, then the reduction
        group, inputs = reduction_group(_with_a_reduction(*ends), x32, x32)
        want = numpy_kernel(group, np)(*inputs)
        got = cuda_kernel(group, cupy)(*[cupy.asarray(a) for a in inputs])
        for g, w in zip(got, want, strict=True):
            assert g.dtype == w.dtype and g.shape == w.shape
            np.testing.assert_allclose(cupy.asnumpy(g), w, rtol=1e-5, atol=1e-5)


def test_a_result_nobody_holds_is_reused_and_one_still_held_is_not() -> None:
    """Fresh large arrays cost page faults: a dropped result's memory is reused next call."""
    rng = np.random.default_rng(7)
    group, inputs = traced_group(_chain, rng.normal(size=1000), rng.normal(size=1000))
    kernel = numpy_kernel(group, np)
    first = kernel(*inputs)
    kept = first.copy()
    second = kernel(*inputs)  # `first` is still held here: a new array
    assert second is not first
    np.testing.assert_array_equal(first, kept)  # the held result was not overwritten
    address = second.__array_interface__["data"][0]
    del second
    third = kernel(*inputs)  # nobody holds the previous result: its memory comes back
    assert third.__array_interface__["data"][0] == address
    view = third[:10]
    fourth = kernel(*inputs)  # a view keeps `third` alive: not reused
    assert fourth is not third and np.shares_memory(view, third)


def test_a_loop_that_holds_its_last_result_takes_turns_between_two_arrays() -> None:
    """``y = kernel(x)`` holds the last result while the next is made (and a staged training
    step holds the old weights until the new ones are written back): two arrays take turns."""
    rng = np.random.default_rng(8)
    group, inputs = traced_group(_chain, rng.normal(size=1000), rng.normal(size=1000))
    kernel = numpy_kernel(group, np)
    y = kernel(*inputs)
    addresses = []
    for _ in range(6):
        previous = y.copy()
        y_new = kernel(*inputs)
        assert not np.shares_memory(y_new, y)  # the result still held is never overwritten
        np.testing.assert_array_equal(y, previous)
        y = y_new
        addresses.append(y.__array_interface__["data"][0])
    assert len(set(addresses)) == 2 and addresses[0::2] == [addresses[0]] * 3


def test_a_compiled_function_holds_no_intermediate_between_calls() -> None:
    """Only a result the graph returns is kept for reuse, and the memory plan's arena (made once,
    so that a call allocates nothing else); no intermediate outlives the call otherwise."""
    def two_kernels(x):
        h = (x * 2.0 + 1.0).tanh()  # with its sum, a kernel of its own: intermediates
        return (h - h.sum(axis=1, keepdims=True)).exp() * 3.0

    x = tfl.rand(250_000, 4)  # 4 MB per array
    compiled = tfl.compile(two_kernels, x, verify=False)
    fused = [n.op.group for n in compiled.graph.nodes if hasattr(n.op, "group")]
    assert [g.returned for g in fused] == [(False, False), (True,)]
    assert "results.empty" not in compiled.kernels[fused[0].name]["numpy"]
    nbytes = x.numpy().nbytes
    tracemalloc.start()
    try:
        compiled(x)  # the result is dropped at once
        held, _ = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    arena = compiled.graph.memory_plan.arena_bytes
    assert arena >= nbytes  # the first kernel's results are planned: they live in the arena
    # the returned result's memory, kept for the next call, and the arena; no more
    assert held < 1.5 * nbytes + arena
    np.testing.assert_allclose(compiled(x).numpy(), two_kernels(x).numpy(), rtol=1e-5)
