"""The compiler's passes, one small graph at a time.

Every simplify rule fires where its identity holds, and stays put where broadcasting, promotion or
floating point (``inf*0`` is nan) would make it false. Constant folding, CSE and DCE each do their
one job and no more: weights and random draws are never folded, random draws never merged. Passes
are pure (the graph they are given is left as it was), keep node ids and lineage, and leave
snapshots whose figures move the way the lessons say. A learner's own pass plugs in, and a wrong
one is caught by verification, which names the pass and the first node whose value differs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import networkx as nx
import numpy as np
import pytest

import teachflow as tfl
from teachflow.compiler import PassVerificationError
from teachflow.core.spec import TensorSpec
from teachflow.execution.executor import interpret
from teachflow.graph import Graph, Value, format_node
from teachflow.ops import OPS
from teachflow.ops.op import Op
from teachflow.passes import DEFAULT_PIPELINE, PASSES, Change, as_pass, diff_changes, rewrite
from teachflow.passes.constant_fold import MAX_ELEMENTS, SMALL_ARRAY, constant_fold
from teachflow.passes.simplify import RULES

X = np.array([[0.5, -1.0, 2.0], [1.5, -0.25, 3.0]])
Y = np.array([[-0.5, 2.0, 1.0], [0.75, 1.25, -2.0]])
XI = np.array([[1, -2, 3], [4, 0, -6]])
SQUARE = np.arange(9.0).reshape(3, 3)
STATUSES = {"added", "replaced", "merged", "fused", "placed", "moved", "new_slot", "reused",
            "in_place", "bucketed", "kept"}
EVERY_PASS = ["inline", "simplify", "constant_fold", "cse", "dce", "bucket_all_reduce", "place",
              "partition", "fuse", "plan_memory"]


def t(data: Any) -> tfl.Tensor:
    """A tensor that keeps the NumPy array's dtype (float64 stays float64)."""
    return tfl.tensor(np.asarray(data))


def ops(graph: Graph) -> list[str]:
    return [n.op.name for n in graph.nodes]


def run(graph: Graph, *args: tfl.Tensor) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        return [r.numpy() for r in interpret(graph, list(args))]


def eager(f: Callable, *args: tfl.Tensor) -> list[np.ndarray]:
    with np.errstate(all="ignore"):
        out = f(*args)
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=0)


def fingerprint(graph: Graph) -> tuple:
    """Everything a pass could disturb: the text, and the very objects and their wiring."""
    return (str(graph), [id(v) for v in graph.values()], [id(v) for v in graph.outputs],
            [(n.id, n.op, n.inputs, n.lineage, id(n.output)) for n in graph.nodes])


def by_hand(op: str, spec: TensorSpec, **params: Any) -> Graph:
    """``x -> op(x)`` built directly: tracing itself never records a reshape to the same shape,
    a cast to the same dtype or an identity, so their rules are checked on graphs made by hand."""
    g = Graph(f"{op}_by_hand")
    x = g.add_input(spec, name="x")
    node = g.add_node(OPS[op], (x,), params, OPS[op].abstract_eval(spec, **params), None)
    g.outputs = [node.output]
    return g


def node_ids(graph: Graph) -> set[int]:
    return {n.id for n in graph.nodes}


# --- Simplify: every rule fires where it holds ----------------------------------------------------


@dataclass
class Case:
    """A graph built for one rule, what `simplify` should leave, and arguments to run it on."""

    rule: str
    make: Callable[[], Graph]
    args: tuple
    ops_after: list[str] | None = None
    returns: str | None = None
    note: str = ""

    def __str__(self) -> str:
        return f"{self.rule} [{self.note}]" if self.note else self.rule


def traced(f: Callable, *args: tfl.Tensor) -> Callable[[], Graph]:
    return lambda: tfl.trace(f, *args)


F64 = TensorSpec((2, 3), np.float64)
PRODUCT_T = "transpose(a @ b) -> b.T @ a.T (the product made in the layout it is read in)"
BROADCAST_READ = "op(x, broadcast_to(y)) -> op(x, y) (an elementwise op broadcasts by itself)"

FIRES = [
    Case("x*1 -> x", traced(lambda x: x * 1, t(X)), (t(X),), [], "return %x"),
    Case("x*1 -> x", traced(lambda x: 1.0 * x, t(X)), (t(X),), [], "return %x",
         "1.0 on the left: mul is commutative"),
    Case("x+0 -> x (integer x only)", traced(lambda x: x + 0, t(XI)), (t(XI),), [], "return %x"),
    Case("x-0 -> x", traced(lambda x: x - 0.0, t(X)), (t(X),), [], "return %x"),
    Case("x/1 -> x", traced(lambda x: x / 1, t(X)), (t(X),), [], "return %x"),
    Case("x**1 -> x", traced(lambda x: x ** 1, t(X)), (t(X),), [], "return %x"),
    Case("-(-x) -> x", traced(lambda x: -(-x), t(X)), (t(X),), ["neg"], "return %x",  # noqa: B002
         "the inner neg is left for dce"),
    Case("x*0 -> 0 (integer x only)", traced(lambda x: x * 0, t(XI)), (t(XI),), ["full"]),
    Case("x-x -> 0 (integer x only)", traced(lambda x: x - x, t(XI)), (t(XI),), ["full"]),
    Case("f(x) + f(x) -> 2*f(x)", traced(lambda x: x.exp() + x.exp(), t(X)), (t(X),),
         ["exp", "exp", "mul"]),
    Case("reshape(reshape(x)) -> reshape(x)", traced(lambda x: x.reshape(3, 2).reshape(6), t(X)),
         (t(X),), ["reshape", "reshape"]),
    Case("reshape(x) to its own shape -> x", lambda: by_hand("reshape", F64, shape=(2, 3)),
         (t(X),), [], "return %x"),
    Case("transpose(transpose(x)) -> transpose(x)",
         traced(lambda x: x.transpose(1, 2, 0).transpose(1, 2, 0), t(np.ones((2, 3, 4)))),
         (t(np.arange(24.0).reshape(2, 3, 4)),), ["transpose", "transpose"],
         note="two rotations compose into one"),
    Case("transpose(transpose(x)) -> transpose(x)",
         traced(lambda x: x.T.T, t(X)), (t(X),), ["transpose"], "return %x",
         note="a swap twice cancels"),
    Case("transpose(x) keeping every axis -> x", traced(lambda x: x.transpose((0, 1)), t(X)),
         (t(X),), [], "return %x"),
    Case(PRODUCT_T, traced(lambda a, b: (a @ b).T, t(X), t(X.T)), (t(X), t(2 * X.T)),
         ["matmul", "transpose", "transpose", "matmul"], note="the old product is left for dce"),
    Case(PRODUCT_T, traced(lambda x, b: (x.T @ b).T, t(X), t(X)), (t(X), t(X)),
         ["transpose", "matmul", "transpose", "matmul"],
         note="a weight's gradient: b.T @ x, reading x itself"),
    Case("broadcast_to(x) to its own shape -> x",
         lambda: by_hand("broadcast_to", F64, shape=(2, 3)), (t(X),), [], "return %x"),
    Case(BROADCAST_READ, traced(lambda x, y: x * tfl.broadcast_to(y, (2, 3)), t(X), t(X[0])),
         (t(X), t(X[1])), ["broadcast_to", "mul"],
         note="mul broadcasts y itself; the broadcast is left for dce"),
    Case(BROADCAST_READ, traced(lambda x, y: tfl.broadcast_to(y, (2, 3)) - x, t(X), t(X[:, :1])),
         (t(X), t(X[:, 1:2])), ["broadcast_to", "sub"],
         note="on the left of an op that does not commute"),
    Case(BROADCAST_READ,
         traced(lambda x: tfl.grad(lambda x: (x.sum(axis=1, keepdims=True) * x).sum())(x), t(X)),
         (t(X),), ["sum", "mul", "sum", "full", "reshape", "broadcast_to", "mul", "sum", "mul",
                   "broadcast_to", "add"],
         note="gradients of sums: two of three reads drop the broadcast (mul(%6, %1) needs it)"),
    Case("astype(x) to its own dtype -> x",
         lambda: by_hand("astype", F64, dtype=np.dtype(np.float64)), (t(X),), [], "return %x"),
    Case("identity(x) -> x", lambda: by_hand("identity", F64), (t(X),), [], "return %x"),
    Case("stop_gradient(x) -> x (gradients are already in the graph)",
         traced(lambda x: x.detach(), t(X)), (t(X),), [], "return %x"),
]


@pytest.mark.parametrize("case", FIRES, ids=str)
def test_a_simplify_rule_fires_where_its_identity_holds(case: Case) -> None:
    before = case.make()
    after, changes = PASSES["simplify"](before)
    fired = [c for c in changes if c.rule == case.rule]
    assert fired, f"{case.rule} did not fire on\n{before}"
    for change in fired:
        assert change.kind == "replaced"
        assert change.sentence.startswith(case.rule)
        (replaced,) = change.nodes
        assert replaced in node_ids(before) and replaced not in node_ids(after)
        present = node_ids(after) | {v.id for v in after.inputs}
        assert set(change.result) <= present
    assert ops(after) == case.ops_after
    if case.returns is not None:
        assert case.returns in str(after)
    after.verify()
    assert_same(run(after, *case.args), run(before, *case.args))


def test_every_simplify_rule_has_a_case_where_it_fires() -> None:
    assert {c.rule for c in FIRES} == {r.name for r in RULES}


def test_x_times_1_reads_the_operand_directly_and_keeps_the_rest() -> None:
    graph = tfl.trace(lambda x: (x * 1).tanh(), t(X))
    after, _ = PASSES["simplify"](graph)
    (tanh,) = after.nodes
    assert tanh.op.name == "tanh" and tanh.inputs[0] is after.inputs[0]
    assert tanh.id == graph.nodes[1].id


def test_composed_transposes_are_one_transpose_with_the_composed_axes() -> None:
    x = np.arange(24.0).reshape(2, 3, 4)
    graph = tfl.trace(lambda x: x.transpose(1, 2, 0).transpose(1, 2, 0), t(x))
    after, _ = PASSES["dce"](PASSES["simplify"](graph)[0])
    (node,) = after.nodes
    assert node.params["axes"] == (2, 0, 1) and node.inputs[0] is after.inputs[0]
    np.testing.assert_array_equal(run(after, t(x))[0], x.transpose(1, 2, 0).transpose(1, 2, 0))


# --- Simplify: and stays put where it does not ----------------------------------------------------

NOT_FIRES = [
    Case("x*1 -> x", traced(lambda x: x * 1.0, t(XI)), (t(XI),),
         note="1.0 promotes int64 to float64"),
    Case("x*1 -> x", traced(lambda x: x * 1, t(X > 0)), (t(X > 0),),
         note="1 promotes bool to int64"),
    Case("x*1 -> x", traced(lambda x: x * np.ones((2, 3)), t(X[0])), (t(X[0]),),
         note="an array of ones broadcasts x"),
    Case("x+0 -> x (integer x only)", traced(lambda x: x + 0.0, t(XI)), (t(XI),),
         note="0.0 promotes int64"),
    Case("x+0 -> x (integer x only)", traced(lambda x: x + 0, t(X)), (t(X),),
         note="for floats -0.0 + 0 is +0.0"),
    Case("x-0 -> x", traced(lambda x: x - 0.0, t(XI)), (t(XI),), note="0.0 promotes int64"),
    Case("x-0 -> x", traced(lambda x: x - (-0.0), t(X)), (t(np.array([-0.0, 1.0])),),
         note="-0.0 - -0.0 is +0.0"),
    Case("x/1 -> x", traced(lambda x: x / 1, t(XI)), (t(XI),),
         note="true division of int64 gives float64"),
    Case("x**1 -> x", traced(lambda x: x ** 1.0, t(XI)), (t(XI),), note="1.0 promotes int64"),
    Case("-(-x) -> x", traced(lambda x: -((-x).exp()), t(X)), (t(X),),
         note="near miss: the negations are not adjacent"),
    Case("x*0 -> 0 (integer x only)",
         traced(lambda x: x * 0, t(X)), (t(np.array([1.0, np.inf, np.nan])),),
         note="float x: inf*0 and nan*0 are nan"),
    Case("x-x -> 0 (integer x only)",
         traced(lambda x: x - x, t(X)), (t(np.array([1.0, np.inf, -np.inf])),),
         note="float x: inf-inf is nan"),
    Case("f(x) + f(x) -> 2*f(x)", traced(lambda x, y: x.exp() + y.exp(), t(X), t(Y)),
         (t(X), t(Y)), note="different operands"),
    Case("f(x) + f(x) -> 2*f(x)", traced(lambda x: x.exp() + x.tanh(), t(X)), (t(X),),
         note="different functions"),
    Case("f(x) + f(x) -> 2*f(x)",
         traced(lambda x: x.sum(axis=0) + x.sum(axis=1, keepdims=True), t(SQUARE)),
         (t(SQUARE),), note="different parameters"),
    Case("f(x) + f(x) -> 2*f(x)", traced(lambda x: x + tfl.randn(2, 3) + tfl.randn(2, 3), t(X)),
         (), note="two random draws are two different values"),
    Case("reshape(reshape(x)) -> reshape(x)",
         traced(lambda x: x.T.reshape(6), t(X)), (t(X),),
         note="near miss: a reshape of a transpose"),
    Case("reshape(x) to its own shape -> x", lambda: by_hand("reshape", F64, shape=(3, 2)),
         (t(X),), note="a new shape"),
    Case("transpose(transpose(x)) -> transpose(x)",
         traced(lambda x: x.T.reshape(2, 3).T, t(X)), (t(X),),
         note="near miss: a reshape between the transposes"),
    Case("transpose(x) keeping every axis -> x", traced(lambda x: x.T, t(SQUARE)),
         (t(SQUARE),), note="a square matrix keeps its shape but not its layout"),
    Case("broadcast_to(x) to its own shape -> x",
         traced(lambda x: tfl.broadcast_to(x, (2, 3)), t(X[0])), (t(X[0]),),
         note="a real broadcast"),
    Case(BROADCAST_READ, traced(lambda x, y: tfl.broadcast_to(y, (4, 2, 3)) + x, t(X), t(X)),
         (t(X), t(X)), note="the broadcast makes the result bigger than the op alone would"),
    Case(BROADCAST_READ, traced(lambda y: tfl.broadcast_to(y, (2, 3)).exp(), t(X[0])),
         (t(X[0]),), note="near miss: exp has one operand, and nothing to broadcast it against"),
    Case(PRODUCT_T, traced(lambda a, b: (lambda p: p.T + p.sum())(a @ b), t(X), t(X.T)),
         (t(X), t(X.T)), note="the product is read untransposed too: one product, not two"),
    Case(PRODUCT_T, traced(lambda a, b: (a @ b).transpose(0, 2, 1), t(np.ones((4, 2, 3))),
                           t(np.ones((4, 3, 2)))), (), note="a batch of products (3-D)"),
    Case("astype(x) to its own dtype -> x", traced(lambda x: x.astype(np.float32), t(X)),
         (t(X),), note="a real cast"),
    Case("identity(x) -> x", traced(lambda x: x.abs(), t(X)), (t(X),),
         note="near miss: an elementwise op that is not the identity"),
    Case("stop_gradient(x) -> x (gradients are already in the graph)",
         traced(lambda x: x.relu(), t(X)), (t(X),), note="near miss: relu is not an identity"),
]


@pytest.mark.parametrize("case", NOT_FIRES, ids=str)
def test_a_simplify_rule_stays_put_where_its_identity_would_be_false(case: Case) -> None:
    before = case.make()
    after, changes = PASSES["simplify"](before)
    assert [c for c in changes if c.rule == case.rule] == []
    assert ops(after) == ops(before) and str(after) == str(before)
    if case.args:
        assert_same(run(after, *case.args), run(before, *case.args))


def test_every_simplify_rule_has_a_case_where_it_must_not_fire() -> None:
    assert {c.rule for c in NOT_FIRES} == {r.name for r in RULES}


def test_float_x_times_0_keeps_the_nan_of_inf_times_0() -> None:
    x = t(np.array([2.0, np.inf, np.nan]))
    compiled = tfl.compile(lambda x: x * 0, x)
    with np.errstate(invalid="ignore"):
        np.testing.assert_array_equal(compiled(x).numpy(), [0.0, np.nan, np.nan])


def test_x_plus_0_keeps_the_sign_of_zero() -> None:
    x = t(np.array([-0.0, 2.0]))
    f = lambda x: 1.0 / (x + 0)
    compiled = tfl.compile(f, x, passes=["simplify"])
    with np.errstate(divide="ignore"):
        assert_same([compiled(x).numpy()], eager(f, x))


@pytest.mark.parametrize("f", [lambda x: (x - x) + 1, lambda x: x * 0 + 1],
                         ids=["x-x", "x*0"])
def test_integer_zeros_of_a_size_known_only_when_the_graph_runs_are_left_to_the_graph(f) -> None:
    xi = t(np.array([[1, 2, 3]]))
    staged = tfl.function(f, input_signature=[tfl.TensorSpec((None, 3), "int64")])
    np.testing.assert_array_equal(staged(xi).numpy(), [[1, 1, 1]])
    np.testing.assert_array_equal(staged(t(np.ones((2, 3), np.int64))).numpy(), np.ones((2, 3)))


def test_verification_allows_the_rounding_of_a_reordered_sum() -> None:
    """A fused reduction adds block by block: the last bits differ from NumPy's order (most for
    float16, and for a sum of big numbers whose result is small). That is not a wrong pass."""
    x16 = t(np.ones((300, 1000), np.float16))
    compiled = tfl.compile(lambda x: tfl.tanh(x * 0.5).sum(axis=0), x16, verify=True)
    np.testing.assert_allclose(compiled(x16).numpy(), 300 * np.tanh(np.float16(0.5)), rtol=1e-2)
    x32 = t(np.ones((4000, 1000), np.float32))
    compiled = tfl.compile(lambda x: (x + 100.0).mean(axis=0) - 100.0, x32, verify=True)
    np.testing.assert_allclose(compiled(x32).numpy(), 1.0, rtol=1e-3)


def test_f_x_plus_f_x_becomes_2_f_x_end_to_end() -> None:
    def f(x):
        return x.tanh().exp() + x.tanh().exp()

    x = t(X)
    compiled = tfl.compile(f, x)
    names = [s.pass_name for s in compiled.snapshots]
    simplify = compiled.snapshots[names.index("simplify")]
    (change,) = [c for c in simplify.changes if c.rule == "f(x) + f(x) -> 2*f(x)"]
    (mul,) = [n for n in simplify.graph.nodes if n.id in change.result]
    assert mul.op.name == "mul" and mul.inputs[1] == 2
    assert "= mul %" in str(simplify.graph) and ", 2 : f64[2,3]" in str(simplify.graph)
    dce = compiled.snapshots[names.index("dce")]
    assert ops(dce.graph) == ["tanh", "exp", "mul"]  # cse merged the tanh, dce dropped an exp
    assert dce.stats["flops"] < compiled.snapshots[0].stats["flops"]
    np.testing.assert_allclose(compiled(x).numpy(), 2 * np.exp(np.tanh(X)), rtol=1e-12)
    y = t(Y)
    np.testing.assert_allclose(compiled(y).numpy(), f(y).numpy(), rtol=1e-12)


# --- Constant folding -----------------------------------------------------------------------------


def _constant_subgraph(x):
    return x + ((tfl.ones(2, 3) * 2.0 + 1.0) * np.full((2, 3), 0.5)).exp()


def test_a_constant_subgraph_becomes_one_constant() -> None:
    x = t(X)
    graph = tfl.trace(_constant_subgraph, x)
    assert ops(graph) == ["full", "mul", "add", "mul", "exp", "add"]
    after, changes = PASSES["constant_fold"](graph)
    assert ops(after) == ["add"]
    assert [c.kind for c in changes] == ["replaced"] * 5
    assert {c.rule for c in changes} == {"constant operands"}
    assert [c.nodes[0] for c in changes] == [n.id for n in graph.nodes[:5]]
    (add,) = after.nodes
    folded = add.inputs[1]
    assert folded.kind == "const" and folded.id == changes[-1].result[0]
    np.testing.assert_allclose(folded.data, np.exp((np.ones((2, 3)) * 2 + 1) * 0.5), rtol=1e-6)
    assert_same(run(after, x), eager(_constant_subgraph, x))
    assert_same(run(after, t(Y)), eager(_constant_subgraph, t(Y)))


def test_a_built_in_pass_that_changed_nothing_leaves_the_graph_before_as_its_stage() -> None:
    """No copy per stage that changed nothing: the snapshot is the graph before (the same
    object), with the same figures. One that changed what is not a node (dce dropping the
    constants nothing reads, which is no `Change`) has a stage of its own."""
    compiled = tfl.compile(lambda x: (x * 2.0).tanh() - x, t(X))
    snaps = compiled.snapshots
    fused = [s.pass_name for s in snaps].index("fuse")
    assert [s.pass_name for s in snaps[1:] if s.changes] == ["fuse"]
    for k in range(1, fused):
        assert snaps[k].graph is snaps[k - 1].graph and snaps[k].stats == snaps[k - 1].stats
    assert snaps[fused].graph is not snaps[fused - 1].graph
    assert_same([compiled(t(Y)).numpy()], eager(lambda x: (x * 2.0).tanh() - x, t(Y)))

    folded = tfl.compile(_constant_subgraph, t(X), passes=["constant_fold", "dce"]).snapshots
    assert not folded[2].changes and folded[2].graph is not folded[1].graph
    assert len(folded[2].graph.constants) < len(folded[1].graph.constants)


def test_a_learners_pass_always_has_a_stage_of_its_own() -> None:
    def renames_in_place(graph):  # (changes a node, keeps its id, reports nothing)
        graph.nodes[0].params = {**graph.nodes[0].params}
        return graph

    snaps = tfl.compile(lambda x: x * 2.0, t(X), passes=[renames_in_place]).snapshots
    assert snaps[1].graph is not snaps[0].graph


def test_a_folded_chain_leaves_no_unused_constants() -> None:
    compiled = tfl.compile(_constant_subgraph, t(X), passes=["constant_fold", "dce"])
    graph = compiled.graph
    used = {id(o) for n in graph.nodes for o in n.inputs} | {id(v) for v in graph.outputs}
    assert all(id(c) in used for c in graph.constants), str(graph)
    assert len(graph.constants) == 1


def test_results_over_the_size_cap_are_not_folded() -> None:
    side = int(np.sqrt(MAX_ELEMENTS)) * 2  # four times the cap

    def f(x):
        return x + tfl.ones(side, side, dtype="float64").sum()

    x = t(X)
    graph = tfl.trace(f, x)
    after, changes = PASSES["constant_fold"](graph)
    assert changes == [] and ops(after) == ["full", "sum", "add"]
    assert after.constants == []
    assert_same(run(after, x), eager(f, x))


def test_the_size_cap_is_inclusive_and_a_parameter() -> None:
    graph = tfl.trace(lambda x: x + tfl.ones(MAX_ELEMENTS).sum(), t(X))
    assert ops(PASSES["constant_fold"](graph)[0]) == ["add"]  # exactly the cap: folded
    graph = tfl.trace(lambda x: x + (tfl.ones(4).sum() + tfl.ones(5).sum()), t(X))
    after, changes = constant_fold(graph, max_elements=4)
    assert ops(after) == ["full", "sum", "add", "add"]  # four ones are folded, five are not
    assert [c.nodes for c in changes] == [(graph.nodes[0].id,), (graph.nodes[1].id,)]


def test_one_value_repeated_is_folded_to_a_broadcast_of_that_value() -> None:
    """``ones(256, 32) * 0.5`` folds to 0.5 broadcast: a view that holds one number, not an array
    of 32 KiB held for the whole call (the backward pass's seed of a mean over a batch is such
    a value). Up to `SMALL_ARRAY` elements it is folded as an array, as before."""
    x = tfl.randn(256, 32)
    f = lambda x: x + (tfl.ones(256, 32) * 0.5).exp()
    graph = tfl.trace(f, x)
    after, changes = constant_fold(graph)
    assert ops(after) == ["broadcast_to", "add"]
    (view, _) = after.nodes
    small = view.inputs[0]
    assert small.kind == "const" and small.shape == () and view.params["shape"] == (256, 32)
    np.testing.assert_allclose(small.data, np.exp(0.5), rtol=1e-6)
    assert max(c.data.size for c in after.constants if c in after.live()[1]) == 1
    assert [c.kind for c in changes] == ["replaced"] * 3
    assert "one value" in changes[-1].sentence and "repeated" in changes[-1].sentence
    assert_same(run(after, x), eager(f, x))
    few = tfl.trace(lambda x: x + tfl.ones(SMALL_ARRAY) * 0.5, tfl.randn(SMALL_ARRAY))
    assert ops(constant_fold(few)[0]) == ["add"]  # small: an array, as plain to read


def test_a_broadcast_of_many_values_is_left_to_run() -> None:
    """A vector broadcast to a matrix outgrows its operand: folded, it would be an array that
    running the node makes as a view. The vector itself is folded."""
    x = tfl.randn(128, 16)
    f = lambda x: x * tfl.broadcast_to(tfl.arange(16.0), (128, 16))
    after, _ = constant_fold(tfl.trace(f, x))
    assert ops(after) == ["broadcast_to", "mul"]
    assert after.nodes[0].inputs[0].kind == "const" and after.nodes[0].inputs[0].shape == (16,)
    assert_same(run(after, x), eager(f, x))


def test_captured_weights_are_never_folded() -> None:
    weight = tfl.tensor(np.eye(3))

    def f(x):
        return x @ (weight * 2.0)

    x = t(X)
    compiled = tfl.compile(f, x, passes=["constant_fold"])
    assert compiled.snapshots[-1].changes == []
    assert ops(compiled.graph) == ["mul", "matmul"]
    assert [v.kind for v in compiled.graph.captures] == ["capture"]
    np.testing.assert_allclose(compiled(x).numpy(), X * 2)
    with tfl.no_grad():
        weight += 1.0  # the weights change between calls: the graph reads them by reference
    np.testing.assert_allclose(compiled(x).numpy(), X @ ((np.eye(3) + 1) * 2), rtol=1e-12)


def test_random_ops_are_never_folded() -> None:
    graph = tfl.trace(lambda x: x + tfl.randn(2, 3, dtype="float64") * 2.0, t(X))
    after, changes = PASSES["constant_fold"](graph)
    assert changes == [] and ops(after) == ["normal", "mul", "add"]


# --- CSE ------------------------------------------------------------------------------------------


def test_a_constant_the_kernel_refuses_is_left_to_the_run_which_says_why() -> None:
    """NumPy makes no bool range longer than 2, though the shape rule has its length: folding
    it at compile time must not raise NumPy's bare TypeError."""
    def f(x: tfl.Tensor) -> tfl.Tensor:
        return x + tfl.arange(3, dtype="bool")

    compiled = tfl.compile(f, t(np.ones(3)))
    assert "arange" in ops(compiled.snapshots[-1].graph) or "arange" in compiled.source
    with pytest.raises(tfl.DTypeError, match="arange"):
        compiled(t(np.ones(3)))


def test_cse_merges_a_duplicate_pure_computation() -> None:
    def f(x, y):
        return (x * y).tanh() - (x * y).tanh()

    graph = tfl.trace(f, t(X), t(Y))
    assert ops(graph) == ["mul", "tanh", "mul", "tanh", "sub"]
    after, changes = PASSES["cse"](graph)
    assert ops(after) == ["mul", "tanh", "sub"]
    first, second = graph.nodes[:2], graph.nodes[2:4]
    assert [(c.kind, c.nodes, c.result, c.rule) for c in changes] == [
        ("merged", (second[0].id,), (first[0].id,), "same op on the same operands"),
        ("merged", (second[1].id,), (first[1].id,), "same op on the same operands"),
    ]
    sub = after.nodes[-1]
    assert sub.inputs[0] is sub.inputs[1]
    assert_same(run(after, t(X), t(Y)), [np.zeros((2, 3))])


def test_cse_merges_commutative_operands_in_either_order() -> None:
    graph = tfl.trace(lambda x, y: (x * y, y * x, x + y, y + x), t(X), t(Y))
    after, changes = PASSES["cse"](graph)
    assert ops(after) == ["mul", "add"] and len(changes) == 2
    assert after.outputs[0] is after.outputs[1] and after.outputs[2] is after.outputs[3]


def test_cse_keeps_operand_order_for_ops_that_are_not_commutative() -> None:
    graph = tfl.trace(lambda x, y: (x - y, y - x, x / y, y / x), t(X), t(Y))
    after, changes = PASSES["cse"](graph)
    assert changes == [] and ops(after) == ["sub", "sub", "div", "div"]


@pytest.mark.parametrize("op", [tfl.maximum, tfl.minimum])
def test_cse_swaps_max_and_min_operands_only_where_the_result_is_bit_for_bit_the_same(op) -> None:
    # NumPy's maximum of two equal values returns the first: maximum(-0.0, 0.0) is -0.0 but
    # maximum(0.0, -0.0) is 0.0, and 1 / that tells them apart. Integers have one zero.
    def f(x, y):
        return 1.0 / op(x, y), 1.0 / op(y, x)

    x, y = t(np.array([-0.0, 0.0, 1.0])), t(np.array([0.0, -0.0, 2.0]))
    after, changes = PASSES["cse"](tfl.trace(f, x, y))
    assert changes == [] and ops(after).count(op.__name__) == 2
    with np.errstate(divide="ignore"):
        got = [r.numpy() for r in tfl.compile(f, x, y)(x, y)]
        assert_same(got, eager(f, x, y))
        assert not np.array_equal(got[0], got[1])  # the two orders really differ
    i, j = t(np.array([3, -1])), t(np.array([2, 5]))
    after, changes = PASSES["cse"](tfl.trace(lambda a, b: (op(a, b), op(b, a)), i, j))
    assert [c.kind for c in changes] == ["merged"] and after.outputs[0] is after.outputs[1]


@pytest.mark.parametrize("f", [
    lambda x: (x.sum(axis=0), x.sum(axis=1)),
    lambda x: (x.sum(axis=0), x.sum(axis=0, keepdims=True)),
    lambda x: (x.transpose(1, 0), x.reshape(3, 3)),
    lambda x: (x * 2, x * 3),
    lambda x: (x * 2, x * 2.0),  # for int64 x: an int64 result and a float64 result
], ids=["axis", "keepdims", "different ops", "different literals", "typed literals"])
def test_cse_does_not_merge_different_parameters_or_literals(f: Callable) -> None:
    x = t(np.arange(9).reshape(3, 3))
    graph = tfl.trace(f, x)
    after, changes = PASSES["cse"](graph)
    assert changes == [] and ops(after) == ops(graph)
    assert_same(run(after, x), eager(f, x))


def test_cse_tells_0_from_minus_0() -> None:
    def f(x):
        return 1.0 / (x * 0.0), 1.0 / (x * -0.0)

    x = t(np.array([1.0, -2.0]))
    compiled = tfl.compile(f, x, passes=["cse"])
    with np.errstate(divide="ignore"):
        assert_same([r.numpy() for r in compiled(x)], eager(f, x))


def test_cse_tells_index_true_from_index_1() -> None:
    def f(x):
        return x[1], x[True]

    x = t(X)
    compiled = tfl.compile(f, x, passes=["cse"])
    assert [r.shape for r in compiled(x)] == [(3,), (1, 2, 3)]


def test_cse_never_merges_random_draws() -> None:
    def f(x):
        return x + tfl.randn(2, 3, dtype="float64"), x + tfl.randn(2, 3, dtype="float64")

    graph = tfl.trace(f, t(X))
    after, changes = PASSES["cse"](graph)
    assert changes == [] and ops(after).count("normal") == 2


def test_a_staged_function_draws_anew_every_time() -> None:
    """The purity lesson: two draws are two values, in one call and from call to call."""

    @tfl.function
    def noisy(x):
        return x + tfl.randn(2, 3, dtype="float64"), x + tfl.randn(2, 3, dtype="float64")

    x = tfl.zeros(2, 3, dtype="float64")
    a1, b1 = (r.numpy() for r in noisy(x))
    a2, b2 = (r.numpy() for r in noisy(x))
    assert noisy.trace_count == 1
    assert ops(noisy.get_concrete_function(x).graph).count("normal") == 2
    assert not np.allclose(a1, b1) and not np.allclose(a2, b2)
    assert not np.allclose(a1, a2) and not np.allclose(b1, b2)


# --- DCE ------------------------------------------------------------------------------------------


def test_dce_removes_unused_nodes_and_keeps_the_outputs() -> None:
    def f(x, y):
        (x * y).exp()  # unused
        kept = x.tanh()
        return kept, kept + y

    graph = tfl.trace(f, t(X), t(Y))
    assert ops(graph) == ["mul", "exp", "tanh", "add"]
    after, changes = PASSES["dce"](graph)
    assert ops(after) == ["tanh", "add"]
    assert [(c.kind, c.nodes, c.result, c.rule) for c in changes] == [
        ("removed", (graph.nodes[0].id,), (), "unused"),
        ("removed", (graph.nodes[1].id,), (), "unused"),
    ]
    assert [v.id for v in after.outputs] == [v.id for v in graph.outputs]
    assert_same(run(after, t(X), t(Y)), run(graph, t(X), t(Y)))


def test_dce_keeps_an_output_that_nothing_else_uses_and_one_that_is_an_input() -> None:
    graph = tfl.trace(lambda x: (x, x.exp(), x.exp().sum()), t(X))
    after, changes = PASSES["dce"](graph)
    assert changes == [] and ops(after) == ops(graph)


# --- Purity, ids and lineage ----------------------------------------------------------------------


@tfl.function
def _halved(y):
    return y * 0.5


def _busy(x, y):
    """Something for every pass to do (with a second CPU device: `two_cpus`)."""
    a = (x * 1).tanh() + (x * 1).tanh()
    b = (tfl.ones(2, 3, dtype="float64") * 3.0).exp()
    (y * y).sum()  # unused
    with tfl.device("cpu:1"):
        c = (y * 0.5).exp()
    return (a * y + b + c.to("cpu") + _halved(y)).sum(axis=1)


@pytest.fixture(autouse=True)
def two_cpus() -> Any:
    """The CPU as two logical devices, cpu and cpu:1, for `_busy` (one again afterwards)."""
    tfl.set_logical_devices("cpu", 2)
    yield
    tfl.set_logical_devices("cpu", 1)


def _one_device(x, y):
    """`_busy` on one device (`plan_memory` leaves a graph on several as it is)."""
    a = (x * 1).tanh() + (x * 1).tanh()
    return (a * y + (y * 0.5).exp() + _halved(y)).sum(axis=1)


#: Passes with nothing to do in `_busy`, tested on programs of their own: all-reduces need a job
#: (tests/test_collectives.py).
ELSEWHERE = ("bucket_all_reduce",)


@pytest.mark.parametrize("name", [p for p in PASSES if p not in ELSEWHERE])
def test_a_pass_leaves_the_graph_it_is_given_unchanged(name: str) -> None:
    program = _one_device if name == "plan_memory" else _busy
    graph = tfl.trace(program, t(X), t(Y))
    before = fingerprint(graph)
    after, changes = PASSES[name](graph)
    assert changes, f"{name} found nothing to do: the test would prove nothing"
    assert after is not graph
    assert fingerprint(graph) == before
    assert_same(run(after, t(X), t(Y)), eager(program, t(X), t(Y)))


def test_a_learner_pass_that_edits_in_place_still_leaves_the_input_unchanged() -> None:
    def drop_every_node(graph):
        graph.nodes.clear()
        graph.outputs = list(graph.inputs)
        return graph

    graph = tfl.trace(lambda x: x.exp(), t(X))
    before = fingerprint(graph)
    compiled = tfl.compile(lambda x: x.exp(), t(X), passes=[drop_every_node], verify=False)
    assert compiled.graph.nodes == [] and ops(compiled.snapshots[0].graph) == ["exp"]
    as_pass(drop_every_node)(graph)
    assert fingerprint(graph) == before


def test_node_ids_are_deterministic() -> None:
    first = tfl.compile(_busy, t(X), t(Y))
    second = tfl.compile(_busy, t(X), t(Y))
    assert [str(s.graph) for s in first.snapshots] == [str(s.graph) for s in second.snapshots]
    assert [s.changes for s in first.snapshots] == [s.changes for s in second.snapshots]
    assert str(tfl.trace(_busy, t(X), t(Y))) == str(first.snapshots[0].graph)


def test_node_ids_survive_every_pass() -> None:
    compiled = tfl.compile(_busy, t(X), t(Y), passes=EVERY_PASS)
    for before, after in zip(compiled.snapshots, compiled.snapshots[1:], strict=False):
        old = {n.id: n for n in before.graph.nodes}
        old_values = {v.id for v in before.graph.values()}
        made = {i for c in after.changes for i in c.result}
        for node in after.graph.nodes:
            if node.id in old:  # a kept id is still the same op with the same parameters
                assert node.op is old[node.id].op
                assert node.params == old[node.id].params
            else:  # a new node has a fresh id, and a change says where it came from
                assert node.id not in old_values and node.id in made, after.pass_name
                assert node.id > max(old_values)


def test_a_replaced_node_lists_the_originals_it_stands_for() -> None:
    compiled = tfl.compile(lambda x: x.exp() + x.exp(), t(X), passes=["simplify"])
    (change,) = compiled.snapshots[-1].changes
    (mul,) = [n for n in compiled.graph.nodes if n.op.name == "mul"]
    assert mul.lineage == change.nodes == (compiled.snapshots[0].graph.nodes[-1].id,)


def test_a_node_an_identity_rewrite_falls_back_to_stands_for_the_removed_node_too() -> None:
    """``h * 1.0 -> h``: h's node is now also what the mul was, and a kernel that absorbs it
    lists the mul among the traced nodes it stands for."""
    compiled = tfl.compile(lambda x: (x.exp() + 1.0) * 1.0, t(X))
    traced = {n.op.name: n.id for n in compiled.snapshots[0].graph.nodes}
    (kernel,) = compiled.graph.nodes
    assert kernel.lineage == tuple(sorted(traced.values()))


def test_a_fused_node_lists_every_node_it_absorbed() -> None:
    def f(x, y):
        return ((x * y + 1.0).tanh() - y).sum(axis=0)

    compiled = tfl.compile(f, t(X), t(Y), passes=["fuse"])
    trace = compiled.snapshots[0].graph
    (change,) = compiled.snapshots[-1].changes
    (fused,) = compiled.graph.nodes
    assert change.kind == "fused" and change.result == (fused.id,)
    assert change.nodes == tuple(n.id for n in trace.nodes)
    assert fused.lineage == change.nodes
    assert fused.source == trace.nodes[-1].source


def test_lineage_reaches_back_to_the_trace_through_the_whole_pipeline() -> None:
    compiled = tfl.compile(_busy, t(X), t(Y), passes=EVERY_PASS)
    traced_ids = {n.id for n in compiled.snapshots[0].graph.nodes}
    fused = [n for n in compiled.graph.nodes if hasattr(n.op, "group")]
    assert fused
    for snapshot in compiled.snapshots:
        for node in snapshot.graph.nodes:
            assert node.lineage and set(node.lineage) <= traced_ids
    for node in fused:  # every member's own lineage is in the fused node's
        for member in node.op.group.nodes:
            assert set(member.lineage) <= set(node.lineage)


# --- Snapshots and statistics ---------------------------------------------------------------------


def test_the_default_pipeline_is_the_documented_one() -> None:
    compiled = tfl.compile(_busy, t(X), t(Y))
    assert [s.pass_name for s in compiled.snapshots] == ["trace", *DEFAULT_PIPELINE]
    assert DEFAULT_PIPELINE[-7:] == ("cse", "dce", "bucket_all_reduce", "place", "partition",
                                     "fuse", "plan_memory")
    assert any(hasattr(n.op, "group") for n in compiled.graph.nodes)


def test_snapshots_are_the_trace_then_one_per_pass_in_order() -> None:
    default = tfl.compile(_busy, t(X), t(Y))
    assert [s.pass_name for s in default.snapshots] == ["trace", *DEFAULT_PIPELINE]
    assert list(DEFAULT_PIPELINE) == EVERY_PASS
    order = ["dce", "cse", "simplify", "cse", "fuse"]
    chosen = tfl.compile(_busy, t(X), t(Y), passes=order)
    assert [s.pass_name for s in chosen.snapshots] == ["trace", *order]
    assert [s.pass_name for s in tfl.compile(_busy, t(X), t(Y), passes=[]).snapshots] == ["trace"]
    assert [s.pass_name for s in tfl.compile(_busy, t(X), t(Y), passes="cse").snapshots] == \
        ["trace", "cse"]
    for earlier, later in zip(chosen.snapshots, chosen.snapshots[1:], strict=False):
        assert later.previous is earlier.graph
    assert chosen.graph is chosen.snapshots[-1].graph


def test_a_snapshot_networkx_view_marks_what_the_pass_did() -> None:
    compiled = tfl.compile(_busy, t(X), t(Y), passes=EVERY_PASS)
    seen = set()
    for snapshot in compiled.snapshots:
        g = snapshot.nx
        assert isinstance(g, nx.DiGraph) and nx.is_directed_acyclic_graph(g)
        assert set(g.nodes) == {v.id for v in snapshot.graph.values()}
        for _, data in g.nodes(data=True):
            assert {"op", "shape", "dtype", "source", "lineage", "status"} <= set(data)
            assert data["status"] in STATUSES
            seen.add(data["status"])
        for change in snapshot.changes:
            for i in change.result:
                assert g.nodes[i]["status"] == change.kind
        removed = {i for c in snapshot.changes for i in c.nodes} - set(g.nodes)
        assert g.graph["removed"] == sorted(removed)
        assert g.graph["pass_name"] == snapshot.pass_name
    assert {"replaced", "merged", "fused", "kept"} <= seen
    by_name = {s.pass_name: s for s in compiled.snapshots}
    assert all(d["status"] == "kept" for _, d in by_name["trace"].nx.nodes(data=True))
    assert by_name["dce"].nx.graph["removed"]  # the unused sum of y*y


def test_a_snapshot_node_carries_its_op_shape_dtype_and_source() -> None:
    compiled = tfl.compile(lambda x: (x * 2.0).sum(axis=1), t(X), passes=[])
    g = compiled.snapshots[0].nx
    mul, total = compiled.graph.nodes
    assert g.nodes[mul.id]["op"] == "mul" and g.nodes[mul.id]["shape"] == (2, 3)
    assert g.nodes[total.id]["dtype"] == "float64" and g.nodes[total.id]["shape"] == (2,)
    assert "test_passes.py:" in g.nodes[mul.id]["source"]
    assert g.nodes[mul.id]["lineage"] == (mul.id,)
    assert list(g.predecessors(total.id)) == [mul.id]


def test_changes_say_what_happened_in_words() -> None:
    compiled = tfl.compile(_busy, t(X), t(Y), passes=EVERY_PASS[:-1])
    planned = tfl.compile(_one_device, t(X), t(Y), passes=["plan_memory"])  # (one device)
    for snapshot in [*compiled.snapshots[1:], planned.snapshots[-1]]:
        assert snapshot.changes or snapshot.pass_name in ELSEWHERE, snapshot.pass_name
        for change in snapshot.changes:
            assert isinstance(change, Change)
            assert change.kind in STATUSES - {"kept"} | {"removed"}
            assert isinstance(change.rule, str) and change.rule
            assert isinstance(change.sentence, str) and len(change.sentence) > 20
            assert all(f"%{i}" in change.sentence for i in change.nodes)
    with pytest.raises(ValueError, match="kind"):
        Change("deleted", (1,), (), "r", "s")


def test_statistics_move_the_way_each_pass_promises() -> None:
    compiled = tfl.compile(_busy, t(X), t(Y), passes=EVERY_PASS)
    stats = {s.pass_name: s.stats for s in compiled.snapshots}
    for figures in stats.values():
        assert {"nodes", "kernels", "bytes_moved", "flops"} <= set(figures)
        assert all(isinstance(v, int) and v >= 0 for v in figures.values())
    assert stats["simplify"]["nodes"] <= stats["trace"]["nodes"]
    assert stats["constant_fold"]["flops"] < stats["simplify"]["flops"]
    assert stats["cse"]["nodes"] < stats["constant_fold"]["nodes"]
    assert stats["dce"]["nodes"] < stats["cse"]["nodes"]
    assert stats["dce"]["flops"] < stats["cse"]["flops"]
    assert stats["fuse"]["kernels"] < stats["dce"]["kernels"]
    assert stats["fuse"]["bytes_moved"] < stats["dce"]["bytes_moved"]
    assert stats["fuse"]["flops"] == stats["dce"]["flops"]  # same work, fewer trips to memory


def test_statistics_count_views_as_free_and_a_matmul_as_2mnk() -> None:
    compiled = tfl.compile(lambda a, b: (a @ b).T, t(np.ones((2, 3))), t(np.ones((3, 4))),
                           passes=[])
    assert compiled.snapshots[0].stats == {
        "nodes": 2, "kernels": 1, "flops": 2 * 2 * 3 * 4,
        "bytes_moved": (2 * 3 + 3 * 4 + 2 * 4) * 8, "bytes_transferred": 0,
        # both arguments and the product; the returned transpose is the product's own memory
        "peak_bytes": (2 * 3 + 3 * 4 + 2 * 4) * 8,
    }


# --- Fusion ---------------------------------------------------------------------------------------


def test_fusion_turns_an_elementwise_chain_and_its_reduction_into_one_kernel() -> None:
    def f(x, y):
        return (x * y + 1.0).tanh().sum()

    x, y = t(X), t(Y)
    compiled = tfl.compile(f, x, y, passes=["fuse"])
    (fused,) = compiled.graph.nodes
    assert [n.id for n in fused.inputs] == [v.id for v in compiled.graph.inputs]
    (change,) = compiled.snapshots[-1].changes
    assert change.kind == "fused" and change.rule == "elementwise ops -> one kernel"
    before, after = compiled.snapshots[0].stats, compiled.snapshots[1].stats
    assert (before["kernels"], after["kernels"]) == (4, 1)
    assert after["bytes_moved"] < before["bytes_moved"]
    np.testing.assert_allclose(compiled(x, y).numpy(), f(x, y).numpy(), rtol=1e-12)
    kernels = compiled.kernels
    assert list(kernels) == [fused.op.name]
    assert f"def {fused.op.name}(" in kernels[fused.op.name]["numpy"]
    assert fused.op.name in kernels[fused.op.name]["cuda"]
    assert f"{fused.op.name}(" in compiled.source


def test_a_value_read_twice_is_computed_once_in_one_kernel() -> None:
    def f(x):
        shared = x.exp()
        return (shared + 1.0).tanh() * shared

    compiled = tfl.compile(f, t(X), passes=["fuse"])
    (fused,) = compiled.graph.nodes
    assert [n.op.name for n in fused.op.group.nodes] == ["exp", "add", "tanh", "mul"]
    assert "exp(" in fused.op.numpy_source and fused.op.numpy_source.count("np.exp(") == 1
    (change,) = compiled.snapshots[-1].changes
    assert "1 value(s) read more than once inside it are computed once" in change.sentence
    assert_same([compiled(t(X)).numpy()], [f(t(X)).numpy()])


def test_values_needed_outside_are_results_of_one_kernel() -> None:
    def f(x):
        middle = x.exp() * 2.0  # returned, and read on by the tanh: one kernel, two results
        return middle, middle.tanh() + x.abs()

    compiled = tfl.compile(f, t(X), passes=["fuse"])
    (fused,) = compiled.graph.nodes
    middle_id = compiled.snapshots[0].graph.outputs[0].id
    assert len(fused.outputs) == 2 and fused.op.group.outputs[0].id == middle_id
    assert compiled.graph.outputs == list(fused.outputs)
    (change,) = compiled.snapshots[-1].changes
    assert change.rule == "elementwise ops -> one kernel with 2 results"
    assert "writes 2 results" in change.sentence and "the graph returns" in change.sentence
    assert_same([r.numpy() for r in compiled(t(X))], eager(f, t(X)))


def test_fusion_never_puts_two_reductions_in_one_kernel() -> None:
    def f(x):
        return x.abs().sum(axis=0).sum()

    compiled = tfl.compile(f, t(X), passes=["fuse"])
    np.testing.assert_allclose(compiled(t(X)).numpy(), np.abs(X).sum(), rtol=1e-12)
    for node in compiled.graph.nodes:
        group = getattr(node.op, "group", None)
        assert group is None or all(n.op.elementwise for n in group.nodes)


def test_fused_kernels_keep_distinct_names_when_fuse_runs_twice() -> None:
    def f(x):
        tanh = x.tanh()
        tanh.abs()  # unused: until dce drops it, the tanh is not private to the add
        return (x * 2.0).exp(), tanh + 1.0

    x = t(X)
    compiled = tfl.compile(f, x, passes=["fuse", "dce", "fuse"])
    names = [n.op.name for n in compiled.graph.nodes if hasattr(n.op, "group")]
    assert len(names) == 2
    assert_same([r.numpy() for r in compiled(x)], eager(f, x))
    assert len(set(names)) == 2 and len(compiled.kernels) == 2


def test_fusion_leaves_single_ops_and_views_alone() -> None:
    compiled = tfl.compile(lambda x: (x @ x.T).exp(), t(X), passes=["fuse"])
    assert compiled.snapshots[-1].changes == []
    assert ops(compiled.graph) == ops(compiled.snapshots[0].graph)


# --- Compilation --------------------------------------------------------------------------------


def test_a_compilation_is_callable_and_equals_eager() -> None:
    compiled = tfl.compile(_busy, t(X), t(Y))
    assert_same([compiled(t(X), t(Y)).numpy()], eager(_busy, t(X), t(Y)))
    other = (t(Y), t(X))
    assert_same([compiled(*other).numpy()], eager(_busy, *other))


def test_a_compilation_source_is_readable_python() -> None:
    def layer(x, y):
        return (x * y).tanh().sum(axis=0)

    compiled = tfl.compile(layer, t(X), t(Y), passes=[])
    lines = compiled.source.splitlines()
    assert lines[0] == "def layer(x, y):"
    assert lines[-1].strip().startswith("return (")
    body = [line for line in lines[1:-1] if not line.startswith("    del ")]
    assert [line.split("=", 1)[1].split("(")[0].strip() for line in body] == \
        ["mul", "tanh", "sum"]
    assert all("# test_passes.py:" in line for line in body)
    compile(compiled.source, "<generated>", "exec")  # it is valid Python


def test_unknown_pass_names_are_explained() -> None:
    with pytest.raises(tfl.TeachflowError, match="unknown pass 'fold'") as info:
        tfl.compile(_busy, t(X), t(Y), passes=["simplify", "fold"])
    assert "constant_fold" in str(info.value)  # it lists the passes there are
    with pytest.raises(tfl.TeachflowError, match="is not a pass"):
        tfl.compile(_busy, t(X), t(Y), passes=[42])


# --- A learner's own pass -------------------------------------------------------------------------


def times_two_as_add(graph: Graph) -> Graph:
    """``x * 2 -> x + x``: a learner's pass, written with the rewrite helper."""
    def decide(node, rewriter):
        x, k = (*node.inputs, None)[:2]
        if node.op.name == "mul" and isinstance(x, Value) and not isinstance(k, Value) and k == 2:
            return rewriter.add(OPS["add"], (x, x))
        return None

    return rewrite(graph, lambda g: decide)


def _doubled(x):
    return (x * 2).exp()


def test_a_learner_function_pass_plugs_in_and_its_changes_are_inferred() -> None:
    x = t(X)
    compiled = tfl.compile(_doubled, x, passes=[times_two_as_add, "dce"])
    assert [s.pass_name for s in compiled.snapshots] == ["trace", "times_two_as_add", "dce"]
    trace, mine = compiled.snapshots[0], compiled.snapshots[1]
    assert ops(mine.graph) == ["add", "exp"]
    (change,) = mine.changes
    assert change.kind == "replaced" and change.rule == "times_two_as_add"
    assert change.nodes == (trace.graph.nodes[0].id,)
    assert change.result == (mine.graph.nodes[0].id,)
    assert mine.nx.nodes[mine.graph.nodes[0].id]["status"] == "replaced"
    assert mine.stats["nodes"] == trace.stats["nodes"]
    np.testing.assert_allclose(compiled(x).numpy(), np.exp(2 * X), rtol=1e-12)


def test_a_learner_pass_that_forgets_lineage_shows_as_added_and_removed() -> None:
    def rebuild_exp(graph: Graph) -> Graph:
        (mul, exp) = graph.nodes
        fresh = graph.new_node(OPS["exp"], exp.inputs, {}, exp.spec, exp.source, ())
        graph.nodes = [mul, fresh]
        graph.outputs = [fresh.output if v is exp.output else v for v in graph.outputs]
        return graph

    compiled = tfl.compile(_doubled, t(X), passes=[rebuild_exp])
    snapshot = compiled.snapshots[-1]
    old_exp, new_exp = compiled.snapshots[0].graph.nodes[1], compiled.graph.nodes[1]
    assert [(c.kind, c.nodes, c.result) for c in snapshot.changes] == [
        ("added", (), (new_exp.id,)), ("removed", (old_exp.id,), ())]
    assert snapshot.nx.nodes[new_exp.id]["status"] == "added"
    assert snapshot.nx.graph["removed"] == [old_exp.id]
    assert diff_changes(compiled.snapshots[0].graph, compiled.graph, "x") == [
        Change(c.kind, c.nodes, c.result, "x", c.sentence.replace("rebuild_exp", "x"))
        for c in snapshot.changes]


class DropDoubleNegation:
    """A learner's pass as a class: a name, and a ``run`` that returns the new graph."""

    name = "no double negation"

    def run(self, graph: Graph) -> Graph:
        def decide(node, _rewriter):
            inner = node.inputs[0].producer if node.inputs else None
            if node.op.name == "neg" and inner is not None and inner.op.name == "neg":
                return inner.inputs[0]
            return None

        return rewrite(graph, lambda g: decide)


def test_a_learner_pass_class_plugs_in_under_its_name() -> None:
    def f(x):
        return (-(-x)).exp()  # noqa: B002

    compiled = tfl.compile(f, t(X), passes=[DropDoubleNegation(), "dce"])
    assert [s.pass_name for s in compiled.snapshots] == ["trace", "no double negation", "dce"]
    mine = compiled.snapshots[1]
    assert [(c.kind, c.rule) for c in mine.changes] == [("removed", "no double negation")]
    assert ops(compiled.graph) == ["exp"]
    np.testing.assert_allclose(compiled(t(X)).numpy(), np.exp(X), rtol=1e-12)


def test_a_learner_pass_may_report_its_own_changes() -> None:
    class Renamed:
        name = "says what it did"

        def run(self, graph: Graph) -> tuple[Graph, list[Change]]:
            return graph, [Change("removed", (), (), "nothing", "nothing happened, on purpose")]

    compiled = tfl.compile(_doubled, t(X), passes=[Renamed()])
    assert compiled.snapshots[-1].changes[0].sentence == "nothing happened, on purpose"


def test_a_learner_pass_must_return_a_graph() -> None:
    with pytest.raises(tfl.TeachflowError, match="returned NoneType, not a Graph"):
        tfl.compile(_doubled, t(X), passes=[lambda graph: None])


def test_one_pass_on_its_own_and_a_pass_class_are_taken_as_written() -> None:
    """``passes=my_pass`` is a pipeline of one; a class is run as one instance of it."""
    one = tfl.compile(_doubled, t(X), passes=times_two_as_add)
    assert [s.pass_name for s in one.snapshots] == ["trace", "times_two_as_add"]
    assert ops(one.graph) == ["add", "exp"]
    by_class = tfl.compile(lambda x: (-(-x)).exp(), t(X),  # noqa: B002
                           passes=[DropDoubleNegation, "dce"])
    assert [s.pass_name for s in by_class.snapshots] == ["trace", "no double negation", "dce"]
    np.testing.assert_allclose(by_class(t(X)).numpy(), np.exp(X), rtol=1e-12)


@pytest.mark.parametrize("verify", [True, False])
def test_a_pass_that_breaks_the_graph_is_explained_before_anything_runs_it(verify: bool) -> None:
    """A pass that drops a node still in use (a buggy DCE) or returns junk for its changes gets
    a TeachflowError naming the pass, whether or not verification runs."""
    def drop_first(graph: Graph) -> Graph:
        graph.nodes = graph.nodes[1:]
        return graph

    with pytest.raises(tfl.TeachflowError, match="pass drop_first returned a graph that is not "
                                                 "well formed") as info:
        tfl.compile(_doubled, t(X), passes=[drop_first], verify=verify)
    assert "defined before use" in info.value.hint

    def says_junk(graph: Graph) -> tuple[Graph, list]:
        return graph, ["removed a node"]

    with pytest.raises(tfl.TeachflowError, match="changes that are not a list of Change"):
        tfl.compile(_doubled, t(X), passes=[says_junk], verify=verify)


def every_mul_is_an_add(graph: Graph) -> Graph:
    """A WRONG pass: it changes what the program computes."""
    for node in graph.nodes:
        if node.op.name == "mul":
            node.op = OPS["add"]
    return graph


def test_a_wrong_learner_pass_is_caught_naming_the_pass_and_the_first_bad_node() -> None:
    def f(x):
        return (x.exp() * 3.0).tanh() * 2.0

    with pytest.raises(PassVerificationError) as info:
        tfl.compile(f, t(X), passes=["simplify", every_mul_is_an_add, "dce"])
    message = str(info.value)
    assert "pass every_mul_is_an_add changed the result" in message
    first_mul = tfl.trace(f, t(X)).nodes[1]
    assert f"the first node whose value differs is %{first_mul.id} = add %1, 3.0" in message
    assert "test_passes.py" in message  # it points at the user's line
    assert isinstance(info.value, tfl.TeachflowError)


def test_without_verification_the_wrong_pass_gives_a_wrong_answer() -> None:
    compiled = tfl.compile(_doubled, t(X), passes=[every_mul_is_an_add], verify=False)
    assert not np.allclose(compiled(t(X)).numpy(), np.exp(2 * X))


def test_a_wrong_pass_is_caught_even_when_it_only_changes_an_output() -> None:
    def swap(graph: Graph) -> Graph:
        graph.outputs = graph.outputs[::-1]
        return graph

    with pytest.raises(PassVerificationError, match="pass swap changed the result"):
        tfl.compile(lambda x: (x.exp(), x.tanh()), t(X), passes=[swap])


def test_format_node_is_what_a_change_sentence_quotes() -> None:
    graph = tfl.trace(lambda x: x * 1, t(X))
    (change,) = PASSES["simplify"](graph)[1]
    assert format_node(graph.nodes[0]) in change.sentence


def test_a_wrong_pass_that_leaves_dead_nodes_is_still_named() -> None:
    """Lesson 3's exercise: exp(log(x)) -> x, written as the lesson's own pass is, leaves the
    log node unused; verification runs only what the outputs need, and names the pass."""
    def exp_log(graph: Graph) -> Graph:
        def decide(node, _rewriter):
            inner = node.inputs[0].producer if node.op.name == "exp" else None
            if inner is not None and inner.op.name == "log":
                return inner.inputs[0]
            return None

        return rewrite(graph, lambda g: decide)

    with np.errstate(invalid="ignore"), pytest.raises(PassVerificationError,
                                                     match="pass exp_log changed the result"):
        tfl.compile(lambda x: x.log().exp() * 2, t(np.array([-1.0, 2.0, 3.0])),
                    passes=[exp_log, "dce"], verify=True)


# --- One rewrite helper, and graphs inside nodes --------------------------------------------------

#: An op whose node owns a graph (as `cond` and `while_loop` will): its `body` parameter.
_CALL = Op("call", lambda xp: None, lambda x, body: body.outputs[0].spec, primitive=False)


def _owning(body: Graph) -> Graph:
    """A graph with one node that owns `body` and applies it to the graph's input."""
    outer = Graph("outer")
    x = outer.add_input(body.inputs[0].spec, "x")
    node = outer.add_node(_CALL, (x,), {"body": body}, body.outputs[0].spec, None)
    outer.outputs = [node.output]
    return outer


@pytest.mark.parametrize(("name", "body", "before", "after"), [
    ("simplify", lambda x: (x * 1.0).exp(), ["mul", "exp"], ["exp"]),
    ("constant_fold", lambda x: x + tfl.ones(3) * 2.0, ["full", "mul", "add"], ["add"]),
    ("cse", lambda x: x.exp() + x.exp(), ["exp", "exp", "add"], ["exp", "add"]),
    ("fuse", lambda x: (x * 2.0 + 1.0).tanh(), ["mul", "add", "tanh"], ["fused_k1"]),
])
def test_every_pass_applies_inside_a_graph_a_node_owns(name, body, before, after) -> None:
    """Through the rewrite helper, a pass reaches the graphs that nodes own without knowing
    they exist; the graph it was given is left unchanged (passes are pure)."""
    inner = tfl.trace(body, tfl.ones(3))
    outer = _owning(inner)
    assert ops(inner) == before
    result, changes = PASSES[name](outer)
    (node,) = result.nodes
    assert ops(node.params["body"]) == after
    assert changes and ops(inner) == before and outer.nodes[0].params["body"] is inner


def test_dce_inside_a_graph_a_node_owns_keeps_what_its_outputs_need() -> None:
    def body(x):
        unused = x.sqrt() * 3.0  # noqa: F841 (dead inside the body)
        return x.exp()

    result, changes = PASSES["dce"](_owning(tfl.trace(body, tfl.ones(3))))
    assert ops(result.nodes[0].params["body"]) == ["exp"]
    assert sorted(c.kind for c in changes) == ["removed", "removed"]


def test_a_decision_may_keep_replace_drop_or_add_nodes_in_place() -> None:
    graph = tfl.trace(lambda x: ((x * 2.0).exp() - 1.0).sqrt(), tfl.ones(3))

    def decide(node, rewriter):
        if node.op.name == "mul":  # x * 2 -> x + x, in the mul's place
            return rewriter.add(OPS["add"], (node.inputs[0], node.inputs[0]))
        if node.op.name == "sub":  # e - 1 -> log(e): a new node, read by the sqrt after it
            return rewriter.add(OPS["log"], (node.inputs[0],))
        return None

    result = rewrite(graph, lambda g: decide)
    assert ops(result) == ["add", "exp", "log", "sqrt"]
    assert ops(graph) == ["mul", "exp", "sub", "sqrt"]  # the given graph is unchanged
    result.verify()
    np.testing.assert_allclose(interpret(result, [tfl.ones(3)])[0].numpy(),
                               np.sqrt(np.log(np.exp(2.0)) * np.ones(3)), rtol=1e-6)
