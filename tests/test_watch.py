"""Watching a trace and a backward pass in the stepper, step by step (`teachflow.viz.watch`):
what each step adds, the values it shows, and that watching changes nothing."""

from __future__ import annotations

import numpy as np
import pytest

import teachflow as tfl
from teachflow.viz.expand import expand
from teachflow.viz.watch import backward_steps, trace_steps


def layer(x, w, b):
    return (x @ w + b).tanh()


def test_a_watched_trace_adds_one_node_per_step_as_the_builder_records_it() -> None:
    x, w, b = tfl.randn(4, 3), tfl.randn(3, 2), tfl.zeros(2)
    steps = trace_steps(layer, x, w, b)
    whole = tfl.trace(layer, x, w, b)
    assert [s.pass_name for s in steps.snapshots] == ["arguments", "matmul", "add", "tanh"]
    assert [len(s.graph.inputs) for s in steps.snapshots] == [3] * 4  # the arguments at once
    for k, step in enumerate(steps.snapshots):
        assert [n.op.name for n in step.graph.nodes] == [n.op.name for n in whole.nodes[:k]]
        assert [c.kind for c in step.changes] == ["added"] * (k > 0)
    last = steps.snapshots[-1]
    assert "return (x @ w + b).tanh()" in last.changes[0].sentence  # the user's own line
    assert last.graph.outputs and not steps.snapshots[-2].graph.outputs  # returned at the end
    stages = expand(steps.data())
    # Each node appears where it stays: the layout of the whole trace, from the first step.
    places = {n["id"]: (n["x"], n["y"]) for n in stages[-1]["nodes"]}
    for stage in stages:
        assert all(places[n["id"]] == (n["x"], n["y"]) for n in stage["nodes"])
    # Each node's value on the example arguments, as eager execution computes it.
    (tanh,) = [n for n in stages[-1]["nodes"] if n["op"] == "tanh"]
    assert tanh["value"]["max"] == pytest.approx(float(layer(x, w, b).numpy().max()), rel=1e-5)


def test_a_watched_backward_pass_adds_each_gradient_as_it_is_computed() -> None:
    x = tfl.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = tfl.tensor([[0.1, -0.2], [0.3, 0.05]], requires_grad=True)
    h = x @ w
    loss = h.tanh().sum()
    steps = backward_steps(loss)
    assert w.grad is None  # watching writes no .grad
    names = [s.pass_name for s in steps.snapshots]
    assert names == ["tape", "%loss.grad", "%2.grad", "%h.grad", "%w.grad"]  # last op first
    tape = steps.snapshots[0].graph
    assert [str(v) for v in tape.inputs] == ["%w"]  # x needs no gradient: not on the tape
    assert str(tape).splitlines()[1].startswith("  %h = matmul ·, %w")
    stages = expand(steps.data())
    value = {n["label"]: n["value"] for n in stages[-1]["nodes"]}
    t = np.tanh(x.numpy() @ w.numpy())
    assert value["%h.grad = ∂tanh"]["max"] == pytest.approx(float((1 - t**2).max()), rel=1e-5)
    # The last step's gradient is what backward() then adds into w.grad (the tape was kept).
    loss.backward()
    shown = value["%w.grad = ∂matmul"]
    assert (shown["min"], shown["max"]) == pytest.approx((float(w.grad.numpy().min()),
                                                          float(w.grad.numpy().max())))
    assert np.allclose(w.grad.numpy(), x.numpy().T @ (1 - t**2))
    grad_node = next(n for n in steps.graph.nodes if str(n.output) == "%h.grad")
    assert [str(o) for o in grad_node.inputs] == ["%2.grad", "%2"]  # tanh's rule reads its out


def test_a_value_read_twice_gets_its_gradients_added_up() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    y = w * 3.0
    loss = (y * y + y).sum()
    steps = backward_steps(loss)
    (y_grad,) = [n for n in steps.graph.nodes if str(n.output) == "%y.grad"]
    assert y_grad.op.name == "∂mul+∂add"  # y is read by a mul and an add
    value = {n["id"]: n["value"] for n in expand(steps.data())[-1]["nodes"]}
    assert value[y_grad.id]["preview"] == "[7., 13.]"  # d/dy (y² + y) = 2y + 1 at y = 3, 6


def test_watching_a_backward_pass_says_what_is_wrong() -> None:
    with pytest.raises(tfl.AutodiffError, match="on no tape"):
        backward_steps(tfl.ones(3).sum())
    w = tfl.ones(3, requires_grad=True)
    with pytest.raises(tfl.AutodiffError, match="scalar"):
        backward_steps(w * 2)
    loss = (w * 2).sum()
    loss.backward()
    with pytest.raises(tfl.AutodiffError, match="tape was freed"):
        backward_steps(loss)


def test_tfl_viz_shows_both_in_the_notebook() -> None:
    pytest.importorskip("anywidget")
    w = tfl.ones(2, requires_grad=True)
    stepper = tfl.viz.show_backward((w * w).sum())
    assert stepper.data["stages"][0]["pass"] == "tape"
    assert "tape" in stepper.data["words"]["first"]
    traced = tfl.viz.show_trace(layer, tfl.randn(4, 3), tfl.randn(3, 2), tfl.zeros(2))
    assert len(traced.data["stages"]) == 4 and w.grad is None
