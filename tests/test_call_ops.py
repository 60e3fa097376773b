"""Graph functions call graph functions: a call of a ``tfl.function`` from traced code is one
``call`` node owning the callee's graph (`teachflow.execution.control.call`).

These tests check:

1. the trace records one node per call, op ``call``, whose ``callee`` is the callee's graph for
   that signature (one graph for two calls, the callee's own concrete function reused), and the
   text form prints ``call @inner(...)`` and the callee once;
2. every pass, with and without ``inline`` first, computes what eager computes; ``inline``
   says what it inlined; without it, the executor calls the callee's generated function;
3. gradients (``tfl.grad``, ``.backward()``, second order) are the same with and without
   ``inline`` and equal central differences; the backward graph calls the callee's backward
   graph, traced once however often the callee is called;
4. retracing: a new signature retraces the caller and traces the callee anew, what the callee
   assumed retraces the caller, and a callee that updates state still works (its ops join the
   trace);
5. a function that calls itself, directly or through others, is a ``TraceError`` naming the
   cycle;
6. a saved graph keeps its calls, each function once, and loads with the same results;
7. the stepper shows a call as a closed box holding its callee, with values.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import teachflow as tfl
from teachflow.graph import Graph, subgraphs
from teachflow.passes import PASSES
from teachflow.testing import finite_differences
from teachflow.viz.expand import expand
from teachflow.viz.stepper_data import compilation_data

pytestmark = pytest.mark.usefixtures("each_route")

W = tfl.tensor(np.array([0.5, -1.0, 2.0]))
NO_INLINE = [name for name in PASSES if name != "inline"]


@tfl.function
def inner(x):
    return (x * W * 1.0).tanh() * x


def outer(x):
    return (inner(x) * inner(x * 2.0)).sum()


def eager_outer(x):
    def body(x):
        return (x * W * 1.0).tanh() * x
    return (body(x) * body(x * 2.0)).sum()


def f64(values) -> tfl.Tensor:
    return tfl.tensor(np.asarray(values, dtype=np.float64))


X = [0.3, -0.7, 0.9]


def calls(graph: Graph) -> list:
    return [n for n in graph.nodes if n.op.name == "call"]


# --- 1. The call node -----------------------------------------------------------------------------


def test_a_call_is_one_node_owning_the_callees_graph_for_its_signature() -> None:
    x = f64(X)
    graph = tfl.trace(outer, x)
    first, second = calls(graph)
    assert [n.op.name for n in graph.nodes].count("tanh") == 0  # (all inside the callee)
    callee = first.params["callee"]
    assert isinstance(callee, Graph) and second.params["callee"] is callee  # one graph
    assert subgraphs(first) == {"callee": callee}
    assert [n.op.name for n in callee.nodes] == ["mul", "mul", "tanh", "mul"]
    assert [v.name for v in callee.inputs] == ["x", "W"]  # the weight it reads comes in
    assert first.inputs == (graph.inputs[0], graph.captures[0])
    assert len(inner.concrete_functions) == 1  # the callee's own, traced once for both
    traces = inner.trace_count
    inner(f64([1.0, 2.0, 3.0]))  # called eagerly with that signature: the same one
    assert inner.trace_count == traces


def test_the_text_form_prints_each_call_and_the_callee_once() -> None:
    text = str(tfl.trace(outer, f64(X)))
    assert text.count("= call @inner(%x, %W) : f64[3]") == 1
    assert text.count("call @inner(") == 2
    assert text.count("graph @inner(%x: f64[3], %W: f64[3]) {") == 1
    assert text.count("tanh") == 1  # the callee's body, once
    assert text.index("graph @inner") > text.index("return")  # after the caller


def test_a_callee_inside_a_cond_and_inside_a_callee_prints_once() -> None:
    @tfl.function
    def middle(x):
        return inner(x) + tfl.cond(x.sum() > 0, lambda y: inner(y), lambda y: y, x)

    text = str(tfl.trace(lambda x: middle(x) * inner(x), f64(X)))
    assert text.count("graph @inner(") == 1 and text.count("graph @middle(") == 1
    assert text.count("call @inner(") == 3


# --- 2. Passes and the executor -------------------------------------------------------------------


@pytest.mark.parametrize("name", NO_INLINE)
def test_each_pass_with_and_without_inline_computes_what_eager_does(name: str) -> None:
    x = f64(X)
    want = eager_outer(x).numpy()
    kept = tfl.compile(outer, x, passes=[name])
    assert len(calls(kept.graph)) == 2  # without inline, calls stay calls
    inlined = tfl.compile(outer, x, passes=["inline", name])
    assert calls(inlined.graph) == []
    for compiled in (kept, inlined):
        np.testing.assert_allclose(compiled(x).numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(compiled(f64([2.0, 1.0, -1.0])).numpy(),
                                   eager_outer(f64([2.0, 1.0, -1.0])).numpy(), rtol=1e-12)


def test_a_pass_works_inside_the_callee_once_for_every_call() -> None:
    compiled = tfl.compile(outer, f64(X), passes=["simplify"])
    (change,) = compiled.snapshots[1].changes  # x*1 -> x, inside the one callee
    assert change.rule == "x*1 -> x"
    first, second = calls(compiled.graph)
    assert first.params["callee"] is second.params["callee"]
    assert [n.op.name for n in first.params["callee"].nodes] == ["mul", "tanh", "mul"]


def test_inline_is_the_first_pass_and_says_what_it_inlined() -> None:
    compiled = tfl.compile(outer, f64(X))
    assert [s.pass_name for s in compiled.snapshots][:3] == ["trace", "inline", "simplify"]
    stage = compiled.snapshots[1]
    assert [c.sentence.split(" in place of ")[0] for c in stage.changes] == \
        ["inlined @inner: 4 nodes"] * 2
    assert [c.nodes for c in stage.changes] == [(n.id,) for n in calls(compiled.snapshots[0]
                                                                        .graph)]
    assert calls(stage.graph) == [] and str(stage.graph).count("tanh") == 2
    tanh = next(n for n in stage.graph.nodes if n.op.name == "tanh")
    assert tanh.source.lineno == inner.python_function.__code__.co_firstlineno + 2  # its line


def test_without_inline_the_executor_calls_the_callees_generated_function() -> None:
    x = f64(X)
    compiled = tfl.compile(outer, x, passes=NO_INLINE)
    assert compiled.source.count("= inner(") == 2
    kernels = [n for n in calls(compiled.graph)[0].params["callee"].nodes]
    assert [hasattr(n.op, "group") for n in kernels] == [True]  # fused inside the callee
    np.testing.assert_allclose(compiled(x).numpy(), eager_outer(x).numpy(), rtol=1e-12)
    staged = tfl.function(outer, passes=NO_INLINE)
    np.testing.assert_allclose(staged(x).numpy(), eager_outer(x).numpy(), rtol=1e-12)


def test_two_calls_of_a_random_callee_are_not_merged() -> None:
    noisy = tfl.function(lambda x: x + tfl.randn(3))
    for passes in ("default", ["cse", "dce"]):
        compiled = tfl.compile(lambda x: noisy(x) - noisy(x), tfl.zeros(3), passes=passes)
        assert np.abs(compiled(tfl.zeros(3)).numpy()).max() > 0


def in_control_flow(x):
    y = tfl.cond(x.sum() > 0, lambda y: inner(y), lambda y: y * 2.0, x)
    z = tfl.fori_loop(0, 3, lambda i, c: inner(c) + c, y)
    return (z * inner(x)).sum()


def in_control_flow_eagerly(x):
    def body(x):
        return (x * W * 1.0).tanh() * x
    y = body(x) if float(x.sum()) > 0 else x * 2.0
    for _ in range(3):
        y = body(y) + y
    return (y * body(x)).sum()


@pytest.mark.parametrize("passes", ["default", NO_INLINE, []])
@pytest.mark.parametrize("x", [[0.3, -0.2, 0.5], [-0.3, -0.2, 0.1]])
def test_calls_inside_branches_and_loop_bodies_compute_and_differentiate(passes, x) -> None:
    x = f64(x)
    compiled = tfl.compile(in_control_flow, x, passes=passes)
    np.testing.assert_allclose(compiled(x).numpy(), in_control_flow_eagerly(x).numpy(),
                               rtol=1e-12)
    grad = tfl.function(tfl.grad(in_control_flow), passes=passes)
    np.testing.assert_allclose(grad(x).numpy(), tfl.grad(in_control_flow_eagerly)(x).numpy(),
                               rtol=1e-10, atol=1e-14)


# --- 3. Gradients ---------------------------------------------------------------------------------


def numeric(fn, x: np.ndarray) -> np.ndarray:
    return finite_differences(lambda a: float(fn(tfl.tensor(a[0])).numpy()), [x])[0]


@pytest.mark.parametrize("passes", ["default", NO_INLINE])
def test_gradients_through_calls_equal_finite_differences_to_second_order(passes) -> None:
    x = np.array(X)
    grad = tfl.function(tfl.grad(outer), passes=passes)
    np.testing.assert_allclose(grad(tfl.tensor(x)).numpy(), numeric(eager_outer, x),
                               rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(grad(tfl.tensor(x)).numpy(),
                               tfl.grad(eager_outer)(tfl.tensor(x)).numpy(), rtol=1e-12)
    second = tfl.function(tfl.grad(lambda x: tfl.grad(outer)(x).sum()), passes=passes)
    want = numeric(lambda x: tfl.grad(eager_outer)(x).sum(), x)
    np.testing.assert_allclose(second(tfl.tensor(x)).numpy(), want, rtol=1e-5, atol=1e-7)
    eager_second = tfl.grad(lambda x: tfl.grad(outer)(x).sum())(tfl.tensor(x))  # (eagerly)
    np.testing.assert_allclose(eager_second.numpy(), second(tfl.tensor(x)).numpy(), rtol=1e-10)


def test_the_gradient_of_a_call_is_a_call_of_the_callees_backward_graph_traced_once() -> None:
    graph = tfl.trace(tfl.grad(outer), f64(X))
    backward = [n for n in calls(graph) if n.params["callee"].name == "grad_inner"]
    assert len(backward) == 2 and backward[0].params["callee"] is backward[1].params["callee"]
    assert str(graph).count("graph @grad_inner(") == 1


@pytest.mark.parametrize("passes", ["default", NO_INLINE])
def test_backward_inside_a_staged_function_fills_grad_as_eagerly(passes) -> None:
    w = tfl.tensor(np.array([0.5, -1.0, 2.0]), requires_grad=True)

    @tfl.function
    def scaled(x):
        return (x * w).tanh()

    def loss(x):
        return (scaled(x) * scaled(x + 1.0)).sum()

    @tfl.function(passes=passes)
    def step(x):
        out = loss(x)
        out.backward()
        return out

    step(f64(X))
    staged = w.grad.numpy()
    w.grad = None
    with_python = (((f64(X) * w).tanh()) * ((f64(X) + 1.0) * w).tanh()).sum()
    with_python.backward()
    np.testing.assert_allclose(staged, w.grad.numpy(), rtol=1e-12)


# --- 4. Retracing ---------------------------------------------------------------------------------


def test_a_new_signature_retraces_the_caller_and_the_callee_keeps_its_cache() -> None:
    callee = tfl.function(lambda x: x.exp() - 1.0)
    caller = tfl.function(lambda x: callee(x) * 2.0)
    for n in (2, 3, 2, 3):
        x = tfl.ones(n)
        np.testing.assert_allclose(caller(x).numpy(), (np.exp(np.ones(n)) - 1) * 2, rtol=1e-6)
    assert (caller.trace_count, callee.trace_count) == (2, 2)
    assert "shape" in caller.retrace_reasons[0]


def test_what_the_callee_assumed_retraces_the_caller() -> None:
    holder = {"w": tfl.tensor([1.0, 2.0])}

    class Weights:
        w = holder["w"]

    callee = tfl.function(lambda x: x * Weights.w)
    caller = tfl.function(lambda x: callee(x) + 1.0)
    x = tfl.ones(2)
    assert caller(x).numpy().tolist() == [2.0, 3.0]
    Weights.w = tfl.tensor([10.0, 20.0])  # rebound, not updated: the callee's trace is stale
    assert caller(x).numpy().tolist() == [11.0, 21.0]
    assert caller.trace_count == 2 and "Weights.w" in caller.retrace_reasons[-1]


def test_a_callee_that_updates_state_has_its_ops_join_the_trace() -> None:
    class Counter:
        pass

    state = Counter()
    state.total = tfl.tensor([1.0, 2.0])

    @tfl.function
    def bump(x):
        state.total += x
        return state.total * 2.0

    caller = tfl.function(lambda x: bump(x) + 1.0)
    assert caller(tfl.ones(2)).numpy().tolist() == [5.0, 7.0]
    assert caller(tfl.ones(2)).numpy().tolist() == [7.0, 9.0]
    assert state.total.numpy().tolist() == [3.0, 4.0]
    assert calls(caller.concrete_functions[0].traced.graph) == []  # (a node writes nothing back)


# --- 5. Recursion ---------------------------------------------------------------------------------


@tfl.function
def countdown(x):
    return countdown(x - 1.0)


@tfl.function
def ping(x):
    return pong(x) * 2.0


@tfl.function
def pong(x):
    return ping(x) + 1.0


def test_a_function_that_calls_itself_is_a_trace_error_naming_the_cycle() -> None:
    with pytest.raises(tfl.TraceError, match="@countdown calls @countdown: a staged function "
                                             "that calls itself"):
        countdown(tfl.ones(2))
    with pytest.raises(tfl.TraceError, match="@ping calls @pong calls @ping"):
        ping(tfl.ones(2))
    with pytest.raises(tfl.TraceError, match="@pong calls @ping calls @pong"):
        tfl.compile(pong, tfl.ones(2))
    assert (ping.trace_count, pong.trace_count) == (0, 0)
    assert tfl.function(lambda x: x + 1.0)(tfl.ones(2)).numpy().tolist() == [2.0, 2.0]


# --- 6. Saved graphs ------------------------------------------------------------------------------


def test_a_saved_graph_keeps_its_calls_and_each_function_once(tmp_path: Path) -> None:
    x = f64(X)
    folder = tfl.save(tfl.compile(outer, x), tmp_path / "model")
    manifest = json.loads((folder / "saved.json").read_text())
    assert manifest["version"] == "1.1"
    assert [f["name"] for f in manifest["functions"]] == ["inner"]
    assert [n["params"] for n in manifest["graph"]["nodes"] if n["op"] == "call"] == \
        [{"callee": "inner"}] * 2
    loaded = tfl.load(folder)
    np.testing.assert_allclose(loaded(x).numpy(), eager_outer(x).numpy(), rtol=1e-12)
    first, second = calls(loaded.compilation.snapshots[0].graph)
    assert first.params["callee"] is second.params["callee"]
    def code(graph: Graph) -> list[str]:  # (a saved graph has no source lines)
        return [line.split("#")[0].rstrip() for line in str(graph).splitlines()]
    assert code(loaded.compilation.snapshots[0].graph) == code(tfl.trace(outer, x))
    plain = tfl.save(tfl.compile(eager_outer, x), tmp_path / "plain")
    assert json.loads((plain / "saved.json").read_text())["version"] == "1.0"


def test_a_saved_function_that_calls_itself_or_nothing_known_is_refused(tmp_path: Path) -> None:
    folder = tfl.save(tfl.compile(outer, f64(X)), tmp_path / "model")
    manifest = json.loads((folder / "saved.json").read_text())
    (function,) = manifest["functions"]
    first = function["nodes"][0]  # (mul %x, %W: two operands of the callee's input types)
    function["nodes"][0] = {**first, "op": "call", "params": {"callee": "inner"}}
    (folder / "saved.json").write_text(json.dumps(manifest))
    with pytest.raises(tfl.SavedGraphError, match="@inner calls @inner"):
        tfl.load(folder)
    function["nodes"][0] = {**first, "op": "call", "params": {"callee": "outer"}}
    (folder / "saved.json").write_text(json.dumps(manifest))
    with pytest.raises(tfl.SavedGraphError, match="names no function of the file: 'outer'"):
        tfl.load(folder)


# --- 7. The stepper -------------------------------------------------------------------------------


def test_the_stepper_shows_a_call_as_a_closed_box_holding_its_callee() -> None:
    x = f64(X)
    compilation = tfl.compile(outer, x, passes=NO_INLINE)
    stages = expand(compilation_data(compilation, compilation.example_inputs))
    for stage, snapshot in zip(stages, compilation.snapshots, strict=True):
        assert stage["text"] == str(snapshot.graph)
        boxes = [n for n in stage["nodes"] if n["op"] == "call"]
        assert len(boxes) == 2
        (part,) = boxes[0]["subgraphs"]
        assert (part["key"], part["name"]) == ("callee", "inner")
        assert "first call" in part["values_from"]
    trace = stages[0]
    box = next(n for n in trace["nodes"] if n["op"] == "call")
    (part,) = box["subgraphs"]
    tanh = next(n for n in part["nodes"] if n["op"] == "tanh")
    np.testing.assert_allclose(tanh["value"]["min"], np.tanh(np.array(X) * W.numpy()).min(),
                               rtol=1e-6)
    fuse = next(s for s in stages if s["pass"] == "fuse")
    assert next(n for n in fuse["nodes"] if n["op"] == "call")["changes_inside"] == 1
    inlined = expand(compilation_data(tfl.compile(outer, x), [x]))
    assert [c["sentence"].split(" in place")[0] for c in inlined[1]["changes"]] == \
        ["inlined @inner: 4 nodes"] * 2
