"""tfl.checkpoint: activations computed again in backward instead of kept, eagerly and staged,
with the plain values and gradients; the recomputation as nodes of its own in a staged graph,
which CSE leaves apart, and a lower peak."""

from __future__ import annotations

import numpy as np
import pytest

import teachflow as tfl
from teachflow.autodiff.tape import RESULT
from teachflow.memory import peak_bytes
from teachflow.passes.cse import cse
from teachflow.transforms.checkpoint import CHECKPOINT


def close(a, b) -> None:
    np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=1e-5, atol=1e-6)


def mlp(width: int = 6, depth: int = 2, p: float = 0.0) -> tfl.nn.Module:
    """Nested modules: a Sequential of blocks, each a Sequential of its own."""
    blocks = [tfl.nn.Sequential(tfl.nn.Linear(width, width), tfl.nn.Tanh(), tfl.nn.Dropout(p))
              for _ in range(depth)]
    return tfl.nn.Sequential(*blocks)


def region(x, w, scale, mode):
    """Several inputs (one not requiring grad), arguments that are not tensors, and a tuple
    out, one of them not float."""
    h = (x @ w).tanh() * scale
    if mode == "square":
        h = h * h
    return h.exp(), (h.sum(axis=1), h.argmax(axis=1))


def gradients(loss_fn, tensors):
    for t in tensors:
        t.grad = None
    loss = loss_fn()
    loss.backward()
    return float(loss.item()), [t.grad.numpy().copy() for t in tensors]


def region_loss(call):
    a, (b, idx) = call(region)
    assert idx.dtype.kind == "i" and not idx.requires_grad
    return a.sum() + (b * b).sum()


@pytest.fixture
def inputs():
    x = tfl.randn(4, 3, requires_grad=True)
    w = tfl.randn(3, 5, requires_grad=True)
    return x, w


def test_eager_values_and_gradients_are_the_plain_ones(inputs) -> None:
    x, w = inputs
    plain = gradients(lambda: region_loss(lambda f: f(x, w, 0.5, "square")), [x, w])
    both = [gradients(lambda: region_loss(lambda f: tfl.checkpoint(f)(x, w, 0.5, "square")),
                      [x, w]),
            gradients(lambda: region_loss(lambda f: tfl.checkpoint(f, x, w, 0.5, "square")),
                      [x, w])]
    for loss, grads in both:
        assert loss == pytest.approx(plain[0], rel=1e-6)
        for got, want in zip(grads, plain[1], strict=True):
            close(got, want)


def test_an_input_that_needs_no_gradient_gets_none(inputs) -> None:
    _, w = inputs
    data = tfl.randn(4, 3)
    out = tfl.checkpoint(lambda d, w: (d @ w).relu().sum())(data, w)
    out.backward()
    assert data.grad is None
    close(w.grad, data.numpy().T @ ((data.numpy() @ w.numpy()) > 0).astype(np.float32))


def test_the_tape_holds_one_node_for_the_region_keeping_only_its_inputs() -> None:
    model = mlp(depth=3)
    x = tfl.randn(5, 6)
    out = tfl.checkpoint(model)(x)
    assert out._node.op is RESULT
    node = out._node.parents[0]
    assert node.op is CHECKPOINT
    # x (no gradient) and the six weights and biases it read from outside: nothing inside
    params = list(model.parameters())
    assert len(node.parents) == 1 + len(params)
    assert node.parents[0] is None
    assert set(node.parents[1:]) == {p._node for p in params}


def test_modules_and_dropout_get_the_plain_gradients_eagerly_and_staged() -> None:
    model = mlp(depth=3, p=0.5)
    x = tfl.randn(5, 6, requires_grad=True)
    tensors = [x, *model.parameters()]

    def loss(checkpointed):
        def f(x):
            y = tfl.checkpoint(model)(x) if checkpointed else model(x)
            return (y * y).sum()
        return f

    results = []
    for checkpointed in (False, True):
        tfl.manual_seed(3)
        results.append(gradients(lambda c=checkpointed: loss(c)(x), tensors))
        for staged in (tfl.function(loss(checkpointed)),):
            tfl.manual_seed(3)
            results.append(gradients(lambda s=staged: s(x), tensors))
    want_loss, want = results[0]
    for got_loss, got in results[1:]:
        assert got_loss == pytest.approx(want_loss, rel=1e-5)
        for g, w in zip(got, want, strict=True):
            close(g, w)


def test_a_second_draw_after_the_region_does_not_repeat_its_mask() -> None:
    tfl.manual_seed(0)
    x = tfl.ones(1000, requires_grad=True)
    y = tfl.checkpoint(lambda x: tfl.nn.functional.dropout(x, 0.5))(x)
    after = tfl.rand(1000).numpy()
    y.sum().backward()
    close(x.grad, y.numpy())  # the mask drawn again is the forward's
    tfl.manual_seed(0)
    tfl.rand(1000)
    close(tfl.rand(1000), after)  # and backward left the generator where it was


def test_grad_and_grad_of_grad_go_through_a_region() -> None:
    def f(x):
        return tfl.checkpoint(lambda x: (x * x * x).sum())(x)

    x = tfl.tensor([1.0, 2.0, -3.0])
    close(tfl.grad(f)(x), 3 * x.numpy() ** 2)
    close(tfl.grad(lambda x: tfl.grad(f)(x).sum())(x), 6 * x.numpy())


def test_a_staged_function_holding_a_region_differentiated_from_outside() -> None:
    model = mlp()
    x = tfl.randn(5, 6, requires_grad=True)
    staged = tfl.function(lambda x: tfl.checkpoint(model)(x).sum())
    staged(x)  # (traced first, not differentiated)
    _, want = gradients(lambda: model(x).sum(), [x, *model.parameters()])
    _, got = gradients(lambda: staged(x), [x, *model.parameters()])
    for g, w in zip(got, want, strict=True):
        close(g, w)


def training_step(model, checkpointed):
    opt = tfl.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        h = x
        for block in model:
            h = tfl.checkpoint(block)(h) if checkpointed else block(h)
        loss = (h * h).mean()
        loss.backward()
        opt.step()
        return loss
    return step


def recomputed(graph):
    """The nodes of `graph` (and those a fused kernel stands for) computed again."""
    found = []
    for node in graph.nodes:
        group = getattr(node.op, "group", None)
        members = [*group.nodes, *([group.reduction] if group.reduction else [])] \
            if group else [node]
        found += [m for m in members if m.source is not None and m.source.recomputed]
    return found


def test_the_backward_graph_holds_the_recomputation_through_the_default_pipeline() -> None:
    model = mlp(depth=2)
    x = tfl.randn(5, 6)
    compiled = tfl.compile(training_step(model, True), x)
    traced = recomputed(compiled.snapshots[0].graph)
    # each block again: transpose, matmul, add, tanh (dropout with p=0 applies nothing)
    assert sorted(n.op.name for n in traced) == sorted(["transpose", "matmul", "add",
                                                        "tanh"] * 2)
    assert recomputed(compiled.graph)  # the last stage still computes them again
    assert not recomputed(tfl.compile(training_step(model, False), x).graph)
    assert "recomputed" in [c.kind for c in compiled.snapshots[0].changes]


def test_cse_leaves_a_recomputed_node_apart_from_the_forward_node_it_repeats() -> None:
    model = mlp(depth=1)
    graph = tfl.compile(training_step(model, True), tfl.randn(5, 6), passes=[]).graph
    again = recomputed(graph)
    twins = [n for n in graph.nodes if n not in again and n.op is again[0].op
             and n.inputs == again[0].inputs and n.params == again[0].params]
    assert twins  # the same op on the same operands: CSE would merge them, were they not marked
    merged, changes = cse(graph)
    assert len(recomputed(merged)) == len(again)
    assert not any(set(c.nodes) & {n.id for n in again} for c in changes)


def paired(model: tfl.nn.Module) -> tfl.nn.Module:
    """The blocks two by two: a region of one block would keep its input, which is what the
    block before keeps for its own gradient (``tanh``'s rule reads its output): nothing saved."""
    blocks = list(model)
    return tfl.nn.Sequential(*[tfl.nn.Sequential(*blocks[i:i + 2])
                               for i in range(0, len(blocks), 2)])


def test_the_peak_of_the_compiled_training_step_drops() -> None:
    model = paired(mlp(width=8, depth=12))
    x = tfl.randn(512, 8)  # (activations, not weights, fill the memory)
    plain = tfl.compile(training_step(model, False), x)
    checkpointed = tfl.compile(training_step(model, True), x)
    assert peak_bytes(checkpointed.graph) < 0.8 * peak_bytes(plain.graph)
    assert checkpointed.snapshots[-1].stats["flops"] > plain.snapshots[-1].stats["flops"]


def test_a_region_returning_no_tensor_is_an_error_at_the_users_line() -> None:
    x = tfl.randn(3, requires_grad=True)
    with pytest.raises(tfl.AutodiffError, match="no tensor") as info:
        tfl.checkpoint(lambda x: None)(x)
    assert info.value.op == "checkpoint"
    assert info.value.location.filename == __file__
    with pytest.raises(tfl.TeachflowError, match="takes a function"):
        tfl.checkpoint(x)


def test_a_staged_function_called_inside_a_region_is_refused() -> None:
    inner = tfl.function(lambda x: x.tanh())
    x = tfl.randn(3, requires_grad=True)
    with pytest.raises(tfl.AutodiffError, match="staged function"):
        tfl.checkpoint(lambda x: inner(x))(x)


def test_under_no_grad_the_region_just_runs() -> None:
    x = tfl.randn(3, requires_grad=True)
    with tfl.no_grad():
        y = tfl.checkpoint(lambda x: x.exp())(x)
    assert not y.requires_grad
    close(y, np.exp(x.numpy()))
