"""No pass raises the peak of a training step: the figures of each stage of the compiled step of
an MLP (Linear + ReLU layers, SGD), as `bench/checkpoint.py` measures them, smaller.

`constant_fold` comes nearest: a value it folds becomes a constant, held for the whole call
instead of from the step that made it to its last reader. The backward pass's seed (``ones / n``
over the batch) would be such a constant, as large as the batch; it folds to one number
broadcast, so the peak grows by a few bytes at most (the numbers it folds)."""

from __future__ import annotations

import teachflow as tfl
from teachflow.graph import Node
from teachflow.memory.liveness import value_bytes
from teachflow.passes.constant_fold import SMALL_ARRAY
from teachflow.passes.grouping import group_nodes


def mlp_step(width: int = 32, depth: int = 6, batch: int = 64):
    """The compiled training step and its argument."""
    tfl.manual_seed(0)
    layers = [tfl.nn.Sequential(tfl.nn.Linear(width, width), tfl.nn.ReLU())
              for _ in range(depth)]
    opt = tfl.optim.SGD([p for layer in layers for p in layer.parameters()], lr=1e-3)

    def step(x):
        opt.zero_grad()
        h = x
        for layer in layers:
            h = layer(h)
        loss = (h * h).mean()
        loss.backward()
        opt.step()
        return loss
    x = tfl.randn(batch, width)
    return tfl.compile(step, x), x


def folded_bytes(snapshot) -> int:
    """The bytes of the constants a stage added."""
    return sum(value_bytes(c)[0] for c in snapshot.graph.constants) - sum(
        value_bytes(c)[0] for c in snapshot.previous.constants)


def test_no_pass_of_the_default_pipeline_raises_the_peak_of_a_training_step() -> None:
    compiled, _ = mlp_step()
    peaks = {s.pass_name: s.stats["peak_bytes"] for s in compiled.snapshots}
    trace = peaks["trace"]
    before = trace
    for snapshot in compiled.snapshots[1:]:
        peak = peaks[snapshot.pass_name]
        if snapshot.pass_name == "constant_fold":
            assert 0 <= folded_bytes(snapshot) <= 4 * SMALL_ARRAY, "the seed was folded whole"
            assert peak <= before + folded_bytes(snapshot), peaks
        else:
            assert peak <= max(before, trace), (snapshot.pass_name, peaks)
        before = peak
    assert peaks["fuse"] <= trace, peaks
    assert peaks["plan_memory"] <= trace, peaks


def test_backward_takes_a_weights_gradient_with_its_layers() -> None:
    """Backward walks the tape in the reverse of the order it was recorded in: the gradient of
    a weight's ``w.T`` (in ``x @ w.T``) is taken right after the product's, not after the
    whole backward pass, as a depth-first order had it (simplify's ``transpose(a @ b) ->
    b.T @ a.T`` then moved each layer's product there, holding every layer's input and
    cotangent to the end)."""
    compiled, _ = mlp_step()
    graph = compiled.snapshots[0].graph
    at = {n: i for i, n in enumerate(graph.nodes)}
    gradients = [n for n in graph.nodes if n.op.name == "transpose"
                 and n.inputs[0].producer is not None and n.inputs[0].producer.op.name == "matmul"]
    assert len(gradients) == 6
    assert all(at[n] == at[n.inputs[0].producer] + 1 for n in gradients)


def relu_mask(node: Node, users: dict) -> bool:
    """``h > 0`` of a layer's ``h = relu(...)`` that the next layer reads."""
    h = node.inputs[0]
    return (node.op.name == "gt" and h.producer.op.name == "relu"
            and any(u.op.name == "matmul" for u in users[h]))


def test_a_relu_mask_of_backward_stays_out_of_the_forward_kernel_that_makes_its_operand() -> None:
    compiled, _ = mlp_step()
    before = next(s for s in compiled.snapshots if s.pass_name == "fuse").previous
    groups, users = group_nodes(before), before.users()
    masks = [n for n in before.nodes if relu_mask(n, users)]
    assert len(masks) == 5
    for group in groups:
        members = set(group.nodes)
        for mask in masks:
            assert not (mask in members and mask.inputs[0].producer in members)
    stops = [why for group in groups for why, reader, _ in group.stops
             if reader is not None and relu_mask(reader, users)]
    assert "read before" in stops
    fuse = next(s for s in compiled.snapshots if s.pass_name == "fuse")
    assert any("gt: a node outside read the group's values before it" in c.sentence
               and "its result would be one of the kernel's results" in c.sentence
               for c in fuse.changes)


def test_a_node_after_a_reader_still_joins_when_its_work_ends_in_the_kernel() -> None:
    """Rule 3 keeps out only a node whose result would be held: ``h * x`` comes after the
    ``matmul`` that reads ``h``, but it, the ``exp`` and ``sub`` end in the kernel's sum."""
    def two_results(x, w):
        h = (x * 2.0 + 1.0).tanh()
        return h @ w, ((h * x).exp() - h).sum(axis=1) * 0.5

    graph = tfl.trace(two_results, tfl.randn(6, 4), tfl.randn(4, 4))
    (group,) = group_nodes(graph)
    assert [n.op.name for n in group.nodes] == ["mul", "add", "tanh", "mul", "exp", "sub", "sum"]
    assert [v.producer.op.name for v in group.outputs] == ["tanh", "sum"]


def test_a_node_that_frees_a_value_of_the_group_joins_it() -> None:
    """``b = tanh(a)`` comes after the ``matmul`` that reads ``h``, and its result is held (the
    graph returns it), but it is the one reader of ``a``: joined, ``a`` is never written."""
    def freeing(x, w):
        h = x.tanh()
        a = h * 2.0
        return h @ w, a.tanh()

    graph = tfl.trace(freeing, tfl.randn(6, 4), tfl.randn(4, 4))
    (group,) = group_nodes(graph)
    assert [v.producer.op.name for v in group.outputs] == ["tanh", "tanh"]
