"""Staged execution computes what eager execution computes: a differential test over the op table.

Every case of `op_cases.py` runs twice, eagerly and staged, and the two must agree (float64,
shapes drawn by hypothesis as in the rest of the suite). Staged means each way a graph is made:

- ``tfl.function(f)``: traced once per signature, run by its generated executor;
- ``tfl.trace(f, *xs)``: the raw graph, run node by node through eager dispatch;
- ``with tfl.Graph():`` and placeholders, run by ``tfl.Session`` (define-and-run by hand).

Gradients are checked three ways, because staging and autodiff meet in three places:

- ``tfl.function(tfl.grad(f))``: the gradient rules are *traced*, giving one joint
  forward-and-backward graph;
- ``tfl.grad(tfl.function(f))``: differentiating *around* a staged function;
- ``tfl.value_and_grad`` called inside a ``tfl.function`` body.

And the graphs themselves must be well formed (`Graph.verify`), name the user's lines (a backward
node names the line whose op it differentiates, noted ``grad of ...``), and be reused: the same
shapes never retrace, a new shape does.
"""

from __future__ import annotations

import os

import numpy as np
import pytest
from helpers import cotangent_for, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from op_cases import BINARY_CASES, DIFFERENTIABLE_CASES, SCALAR_CASES, UNARY_CASES, OpCase

import teachflow as tfl
from teachflow.execution.executor import interpret

#: Both modes call the same kernels; passes may still reorder float work, hence a tolerance.
SAME = {"rtol": 1e-12, "atol": 1e-12}

EXAMPLES = settings(max_examples=examples(15), deadline=None)

#: Cases whose result *shape* depends on the input values (``x[x > 0]``). A trace knows shapes
#: and dtypes only, so these cannot be staged: staging them must raise a TraceError.
VALUE_DEPENDENT_SHAPES = {"t[t>0]"}

#: Cases whose function is a builtin or teachflow function named like a kernel (``operator.add``
#: is named ``add``). The generated executor is named after the function, so see
#: `test_the_tables_own_function_stages`.
NAMED_LIKE_A_KERNEL = {"neg", "abs-builtin", "add", "sub", "mul", "pow", "maximum", "minimum",
                       "matmul-operator", "matmul-function"}

STAGEABLE_CASES = [c for c in DIFFERENTIABLE_CASES if c.name not in VALUE_DEPENDENT_SHAPES]
UNSTAGEABLE_CASES = [c for c in DIFFERENTIABLE_CASES if c.name in VALUE_DEPENDENT_SHAPES]
ELEMENTWISE_CASES = UNARY_CASES + BINARY_CASES + SCALAR_CASES

TEACHFLOW_DIR = os.path.dirname(os.path.abspath(tfl.__file__)) + os.sep



# --- Helpers ------------------------------------------------------------------------------------


def tensors(arrays: list[np.ndarray]) -> list[tfl.Tensor]:
    return [tfl.tensor(a) for a in arrays]


def flipped(arrays: list[np.ndarray]) -> list[np.ndarray]:
    """The same values in other places: same shapes, and still inside each op's domain."""
    return [np.array(np.flip(a), dtype=a.dtype) for a in arrays]


def assert_same(got: tfl.Tensor, want: tfl.Tensor) -> None:
    assert isinstance(got, tfl.Tensor), f"staged result is a {type(got).__name__}"
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want.numpy(), **SAME)


def assert_all_same(got: tuple, want: tuple) -> None:
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert_same(g, w)


def weighted_loss(fn, out_shape: tuple):
    """``L(*xs) = sum(fn(*xs) * c)``, a scalar whose gradient carries fn's. Written here, so that
    its nodes, and the backward nodes of its ops, name this file."""
    c = cotangent_for(out_shape)

    def loss(*xs):
        return (fn(*xs) * c).sum()

    return loss


def assert_sources_are_user_lines(graph: tfl.Graph) -> None:
    """Every node names a line of user code, never one inside teachflow."""
    for node in graph.nodes:
        assert node.source is not None, f"{node} has no source line"
        assert not os.path.abspath(node.source.filename).startswith(TEACHFLOW_DIR), \
            f"{node} names teachflow's own line {node.source}"


class Drawn:
    """One example of a case: its inputs as tensors, its function, and the weighted loss."""

    def __init__(self, case: OpCase, data: st.DataObject) -> None:
        example = case.draw(data)
        self.fn = example.fn
        self.arrays = example.inputs
        self.xs = tensors(example.inputs)
        self.others = tensors(flipped(example.inputs))
        self.argnums = tuple(range(len(self.xs)))
        self.loss = weighted_loss(self.fn, self.fn(*self.xs).shape)


# --- Forward values -----------------------------------------------------------------------------


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_function_matches_eager(case: OpCase, data: st.DataObject) -> None:
    d = Drawn(case, data)

    def computation(*xs):  # a name no kernel has (see test_the_tables_own_function_stages)
        return d.fn(*xs)

    staged = tfl.function(computation)
    assert_same(staged(*d.xs), d.fn(*d.xs))
    concrete = staged.get_concrete_function(*d.xs)
    concrete.graph.verify()
    assert_sources_are_user_lines(concrete.graph)
    assert concrete.source.startswith("def computation(")
    # Same shapes, other values: the cached graph runs on the new values; Python does not run.
    assert_same(staged(*d.others), d.fn(*d.others))
    assert staged.trace_count == 1
    assert staged.retrace_reasons == []
    assert staged.concrete_functions == [concrete]


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_raw_trace_run_node_by_node_matches_eager(case: OpCase, data: st.DataObject) -> None:
    d = Drawn(case, data)
    graph = tfl.trace(d.fn, *d.xs)
    graph.verify()
    assert_sources_are_user_lines(graph)
    assert len(graph.inputs) == len(d.xs)
    assert len(graph.outputs) == 1
    [got] = interpret(graph, d.xs)
    assert_same(got, d.fn(*d.xs))
    [again] = interpret(graph, d.others)
    assert_same(again, d.fn(*d.others))


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_graph_built_by_hand_matches_eager(case: OpCase, data: st.DataObject) -> None:
    d = Drawn(case, data)
    with tfl.Graph() as graph:
        placeholders = [tfl.placeholder(a.shape, dtype="float64") for a in d.arrays]
        out = d.fn(*placeholders)
    graph.verify()
    want = d.fn(*d.xs)
    got = tfl.Session(graph).run(out, feed=dict(zip(placeholders, d.arrays, strict=True)))
    assert isinstance(got, np.ndarray)
    assert got.shape == want.shape
    assert got.dtype == want.dtype
    np.testing.assert_allclose(got, want.numpy(), **SAME)


@pytest.mark.parametrize("case", ELEMENTWISE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_a_new_shape_retraces_and_the_old_one_is_kept(case: OpCase, data: st.DataObject) -> None:
    d = Drawn(case, data)
    # A leading axis of 2 on every operand (after padding them to one rank) broadcasts as before.
    rank = max(a.ndim for a in d.arrays)
    padded = [a.reshape((1,) * (rank - a.ndim) + a.shape) for a in d.arrays]
    bigger = tensors([np.stack([a, np.flip(a)]) for a in padded])

    def computation(*xs):
        return d.fn(*xs)

    staged = tfl.function(computation)
    assert_same(staged(*d.xs), d.fn(*d.xs))
    assert staged.trace_count == 1
    assert_same(staged(*bigger), d.fn(*bigger))
    assert staged.trace_count == 2
    [reason] = staged.retrace_reasons
    assert "shape" in reason, reason
    assert_same(staged(*d.others), d.fn(*d.others))  # the first trace is still cached
    assert_same(staged(*bigger), d.fn(*bigger))
    assert staged.trace_count == 2


# --- Gradients ----------------------------------------------------------------------------------


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_function_of_grad_matches_eager_grad(case: OpCase, data: st.DataObject) -> None:
    """``tfl.function(tfl.grad(f))``: one graph holding the forward pass and the traced rules."""
    d = Drawn(case, data)
    eager = tfl.grad(d.loss, d.argnums)
    staged = tfl.function(tfl.grad(d.loss, d.argnums))
    assert_all_same(staged(*d.xs), eager(*d.xs))
    assert_all_same(staged(*d.others), eager(*d.others))
    assert staged.trace_count == 1
    concrete = staged.get_concrete_function(*d.xs)
    concrete.graph.verify()
    assert len(concrete.graph.outputs) == len(d.xs)


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_backward_nodes_name_the_line_they_differentiate(case: OpCase,
                                                         data: st.DataObject) -> None:
    d = Drawn(case, data)
    forward = tfl.trace(d.loss, *d.xs)
    total = forward.nodes[-1]  # the `.sum()` of `weighted_loss`, on a line of this file
    assert total.op.name == "sum"
    assert total.source.filename == __file__
    assert total.source.note == ""

    joint = tfl.trace(tfl.grad(d.loss, d.argnums), *d.xs)
    joint.verify()
    assert_sources_are_user_lines(joint)
    notes_on_that_line = {n.source.note for n in joint.nodes
                          if (n.source.filename, n.source.lineno)
                          == (__file__, total.source.lineno)}
    assert {"", "grad of sum", "grad of mul"} <= notes_on_that_line
    # The forward nodes come first, unchanged; the backward nodes follow them.
    assert [n.op.name for n in joint.nodes[:len(forward.nodes)]] == \
        [n.op.name for n in forward.nodes]
    # A backward node on that line says so: none passes for a node of the forward pass.
    assert all(n.source.note for n in joint.nodes[len(forward.nodes):]
               if (n.source.filename, n.source.lineno) == (__file__, total.source.lineno))


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_grad_of_function_matches_eager_grad(case: OpCase, data: st.DataObject) -> None:
    """``tfl.grad(tfl.function(f))``: differentiating around a staged function."""
    d = Drawn(case, data)
    eager = tfl.grad(d.loss, d.argnums)
    staged_loss = tfl.function(d.loss)
    around = tfl.grad(staged_loss, d.argnums)
    assert_all_same(around(*d.xs), eager(*d.xs))
    assert_all_same(around(*d.others), eager(*d.others))
    assert_same(staged_loss(*d.xs), d.loss(*d.xs))  # called plainly: the same concrete function
    assert staged_loss.trace_count == 1
    staged_loss.get_concrete_function(*d.xs).graph.verify()


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@EXAMPLES
@given(data=st.data())
def test_value_and_grad_inside_function_matches_eager(case: OpCase,
                                                      data: st.DataObject) -> None:
    d = Drawn(case, data)

    @tfl.function
    def step(*xs):
        return tfl.value_and_grad(d.loss, d.argnums)(*xs)

    for xs in (d.xs, d.others):
        value, grads = step(*xs)
        want_value, want_grads = tfl.value_and_grad(d.loss, d.argnums)(*xs)
        assert_same(value, want_value)
        assert_all_same(grads, want_grads)
    assert step.trace_count == 1
    step.get_concrete_function(*d.xs).graph.verify()


# --- What cannot be staged, and a known engine bug ----------------------------------------------


@pytest.mark.parametrize("case", UNSTAGEABLE_CASES, ids=str)
@settings(max_examples=examples(5), deadline=None)
@given(data=st.data())
def test_value_dependent_shapes_raise_a_trace_error(case: OpCase, data: st.DataObject) -> None:
    """Eagerly fine; staged, the result's shape is unknown, and the error names the op's line."""
    d = Drawn(case, data)
    tfl.grad(d.loss, d.argnums)(*d.xs)
    attempts = {
        "tfl.function": lambda: tfl.function(d.fn)(*d.xs),
        "tfl.trace": lambda: tfl.trace(d.fn, *d.xs),
        "tfl.function(tfl.grad)": lambda: tfl.function(tfl.grad(d.loss, d.argnums))(*d.xs),
        "tfl.grad(tfl.function)": lambda: tfl.grad(tfl.function(d.loss), d.argnums)(*d.xs),
    }
    for how, attempt in attempts.items():
        with pytest.raises(tfl.TraceError) as caught:
            attempt()
        assert "op_cases.py" in str(caught.value), how


def test_the_special_case_lists_name_cases_of_the_table() -> None:
    names = {c.name for c in DIFFERENTIABLE_CASES}
    assert VALUE_DEPENDENT_SHAPES.issubset(names)
    assert NAMED_LIKE_A_KERNEL.issubset(names)


@pytest.mark.parametrize("case", STAGEABLE_CASES, ids=str)
@settings(max_examples=examples(3), deadline=None, report_multiple_bugs=False)
@given(data=st.data())
def test_the_tables_own_function_stages(case: OpCase, data: st.DataObject) -> None:
    """The case's function staged as it is, whatever its ``__name__``."""
    d = Drawn(case, data)
    assert_same(tfl.function(d.fn)(*d.xs), d.fn(*d.xs))


def test_a_staged_function_may_be_named_like_an_op() -> None:
    @tfl.function
    def tanh(x):
        return x.tanh()

    a = np.array([0.5, -1.0, 2.0])
    np.testing.assert_allclose(tanh(tfl.tensor(a)).numpy(), np.tanh(a), **SAME)
