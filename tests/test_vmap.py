"""Batching, ``tfl.vmap``: every op's batching rule against a Python loop over the examples;
in_axes and out_axes; nesting; control flow; per-example gradients as one batched graph; what
the stepper says made each node; errors."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from op_cases import DIFFERENTIABLE_CASES, OpCase

import teachflow as tfl
from teachflow.core.dispatch import bind
from teachflow.ops.op import OPS, Op
from teachflow.viz.stepper_data import compilation_data

RNG = np.random.default_rng(1)
TRACEABLE_CASES = [c for c in DIFFERENTIABLE_CASES if c.name != "t[t>0]"]  # (see test_jvp)


def test_every_op_declares_a_batching_rule() -> None:
    missing = sorted(name for name, op in OPS.items() if op.batch is None)
    assert missing == [], f"ops with no batching rule (declare `batch=` in their declaration): " \
                          f"{missing}"


def stacked(inputs: list, axis: int = 0) -> list:
    """Three examples of each input (scaled copies, which stay in the op's domain), stacked."""
    return [np.stack([a * s for s in (1.0, 1.1, 0.9)], axis=axis) for a in inputs]


def looped(fn, batch: list, axis: int = 0) -> np.ndarray:
    return np.stack([fn(*[tfl.tensor(np.take(b, k, axis=axis)) for b in batch]).numpy()
                     for k in range(batch[0].shape[axis])])


@pytest.mark.parametrize("case", TRACEABLE_CASES, ids=str)
@settings(max_examples=examples(8), deadline=None)
@given(data=st.data())
def test_vmap_matches_a_loop_over_the_examples(case: OpCase, data: st.DataObject) -> None:
    example = case.draw(data)
    inputs = [np.asarray(a, dtype=np.float64) for a in example.inputs]
    axis = data.draw(st.integers(0, min(np.ndim(a) for a in inputs)), label="batch axis")
    batch = stacked(inputs, axis)
    got = tfl.vmap(example.fn, in_axes=axis)(*[tfl.tensor(b) for b in batch])
    np.testing.assert_allclose(got.numpy(), looped(example.fn, batch, axis), rtol=1e-12,
                               atol=1e-12, equal_nan=True)
    # One input the same for every example (in_axes None), the others batched.
    if len(inputs) > 1:
        axes = [None] + [axis] * (len(inputs) - 1)
        mixed = [inputs[0], *batch[1:]]
        got = tfl.vmap(example.fn, in_axes=tuple(axes))(*[tfl.tensor(b) for b in mixed])
        want = np.stack([example.fn(tfl.tensor(inputs[0]), *[tfl.tensor(np.take(b, k, axis))
                                                            for b in batch[1:]]).numpy()
                         for k in range(3)])
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12, atol=1e-12, equal_nan=True)


@pytest.mark.parametrize("case", TRACEABLE_CASES, ids=str)
@settings(max_examples=examples(3), deadline=None)
@given(data=st.data())
def test_vmap_of_grad_matches_a_loop(case: OpCase, data: st.DataObject) -> None:
    """The ops of backward passes (scatters, sums back to a shape, broadcasts) batch too."""
    example = case.draw(data)
    inputs = [np.asarray(a, dtype=np.float64) for a in example.inputs]
    c = RNG.normal(size=example.fn(*[tfl.tensor(a) for a in inputs]).shape)

    def weighted(*xs):
        return (example.fn(*xs) * tfl.tensor(c)).sum()
    batch = stacked(inputs)
    got = tfl.vmap(tfl.grad(weighted))(*[tfl.tensor(b) for b in batch])
    np.testing.assert_allclose(got.numpy(), looped(tfl.grad(weighted), batch), rtol=1e-12,
                               atol=1e-12, equal_nan=True)


def test_index_arrays_that_differ_between_examples() -> None:
    """``logp[y]`` with a label per example: the examples are numbered into the index."""
    logits, labels = RNG.normal(size=(5, 4)), RNG.integers(0, 4, size=5)

    def picked(z, y):
        return -tfl.log_softmax(z, axis=-1)[y]
    got = tfl.vmap(picked)(tfl.tensor(logits), tfl.tensor(labels))
    shifted = logits - logits.max(1, keepdims=True)
    logp = shifted - np.log(np.exp(shifted).sum(1, keepdims=True))
    np.testing.assert_allclose(got.numpy(), -logp[np.arange(5), labels], rtol=1e-13)
    grads = tfl.function(tfl.vmap(tfl.grad(picked)))(tfl.tensor(logits), tfl.tensor(labels))
    np.testing.assert_allclose(grads.numpy(), np.exp(logp) - np.eye(4)[labels], rtol=1e-12,
                               atol=1e-15)


def test_matmul_batched_every_way() -> None:
    for a_shape, b_shape in [((3,), (3,)), ((3,), (3, 4)), ((2, 3), (3,)), ((2, 3), (3, 4)),
                             ((5, 2, 3), (3, 4)), ((3,), (5, 3, 4))]:
        a, b = RNG.normal(size=(6, *a_shape)), RNG.normal(size=(6, *b_shape))
        for axes in [(0, 0), (0, None), (None, 0)]:
            args = [x if ax is not None else x[0] for x, ax in zip((a, b), axes, strict=True)]
            got = tfl.vmap(tfl.matmul, in_axes=axes)(*[tfl.tensor(x) for x in args])
            want = np.stack([(a[k] if axes[0] is not None else a[0]) @
                             (b[k] if axes[1] is not None else b[0]) for k in range(6)])
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-13, err_msg=str(axes))


def test_in_axes_trees_and_out_axes() -> None:
    w, xs = RNG.normal(size=(3, 2)), RNG.normal(size=(2, 5, 3))  # examples along axis 1

    def f(params, x):
        return {"y": x @ params["w"], "n": params["w"].sum()}
    out = tfl.vmap(f, in_axes=({"w": None}, 1))({"w": tfl.tensor(w)}, tfl.tensor(xs))
    np.testing.assert_allclose(out["y"].numpy(), np.stack([xs[:, k] @ w for k in range(5)]))
    np.testing.assert_allclose(out["n"].numpy(), np.full(5, w.sum()))  # broadcast to the batch
    moved = tfl.vmap(lambda x: x * 2, out_axes=1)(tfl.tensor(xs))
    np.testing.assert_allclose(moved.numpy(), np.moveaxis(xs * 2, 0, 1))
    same = tfl.vmap(lambda x, w: w.sum(), in_axes=(0, None), out_axes=None)(
        tfl.tensor(xs), tfl.tensor(w))
    assert same.shape == ()


def test_nested_vmap_is_an_outer_product() -> None:
    a, b = RNG.normal(size=(4, 3)), RNG.normal(size=(5, 3))
    dot = tfl.vmap(tfl.vmap(lambda x, y: (x * y).sum(), in_axes=(None, 0)), in_axes=(0, None))
    np.testing.assert_allclose(dot(tfl.tensor(a), tfl.tensor(b)).numpy(), a @ b.T, atol=1e-14)
    staged = tfl.function(dot)
    np.testing.assert_allclose(staged(tfl.tensor(a), tfl.tensor(b)).numpy(), a @ b.T,
                               atol=1e-14)


def branchy(x):
    y = tfl.cond(x.sum() > 0, lambda a: a.tanh() * 2, lambda a: a * a, x)
    return tfl.fori_loop(0, 3, lambda i, c: c * 0.5 + y.exp() * i, x).sum() * y.sum()


@pytest.mark.parametrize("staged", [False, True])
def test_vmap_through_cond_and_fori_loop(staged: bool) -> None:
    xs = RNG.normal(size=(6, 3))  # predicates differ between examples: both branches, where
    mapped = tfl.vmap(branchy)
    got = (tfl.function(mapped) if staged else mapped)(tfl.tensor(xs))
    np.testing.assert_allclose(got.numpy(), looped(branchy, [xs]), rtol=1e-13)
    same = tfl.vmap(lambda x, p: tfl.cond(p.sum() > 0, lambda a: a * 2, lambda a: -a, x),
                    in_axes=(0, None))  # one predicate for all: one cond of batched branches
    np.testing.assert_allclose(same(tfl.tensor(xs), tfl.tensor([1.0])).numpy(), xs * 2)


def test_vmap_of_a_call_of_a_staged_function() -> None:
    inner = tfl.function(lambda a: (a * a).tanh())
    xs = RNG.normal(size=(4, 3))
    compiled = tfl.compile(tfl.vmap(lambda x: inner(x).sum()), tfl.tensor(xs))
    assert [n.op.name for n in compiled.snapshots[0].graph.nodes].count("call") == 1
    np.testing.assert_allclose(compiled(tfl.tensor(xs)).numpy(), np.tanh(xs * xs).sum(1))


def loss(w, x, y):
    return -(tfl.log_softmax(x @ w, axis=-1) * y).sum()


def per_example_grads(batch: int):
    w = tfl.tensor(RNG.normal(size=(4, 3)))
    xs = tfl.tensor(RNG.normal(size=(batch, 4)))
    ys = tfl.tensor(np.eye(3)[RNG.integers(0, 3, size=batch)])
    return w, xs, ys


def test_per_example_gradients_are_one_batched_graph() -> None:
    counts = []
    for batch in (2, 16, 64):
        w, xs, ys = per_example_grads(batch)
        grads = tfl.vmap(tfl.grad(loss), in_axes=(None, 0, 0))
        compiled = tfl.compile(grads, w, xs, ys)
        nodes = compiled.snapshots[0].graph.nodes
        assert not {"call", "fori_loop", "while"} & {n.op.name for n in nodes}
        counts.append(len(nodes))
        want = np.stack([tfl.grad(loss)(w, xs[k], ys[k]).numpy() for k in range(batch)])
        np.testing.assert_allclose(compiled(w, xs, ys).numpy(), want, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(grads(w, xs, ys).numpy(), want, rtol=1e-12, atol=1e-14)
    assert counts[0] == counts[1] == counts[2], counts  # the graph does not grow with the batch


def test_the_per_example_outer_products_run_as_a_kernel_of_their_own() -> None:
    """matmul's rule makes each example's ``xᵀ g`` (one term) a broadcast product, which
    fusion gives a kernel (grouping.py's rule 6), not NumPy's broadcasting loop."""
    w, xs, ys = per_example_grads(64)
    compiled = tfl.compile(tfl.vmap(tfl.grad(loss), in_axes=(None, 0, 0)), w, xs, ys)
    kernels = [n for n in compiled.graph.nodes if hasattr(n.op, "group")]
    assert [(m.op.name, m.spec.shape) for n in kernels for m in n.op.group.members
            if len(n.op.group.members) == 1] == [("mul", (64, 4, 3))]
    want = np.stack([tfl.grad(loss)(w, xs[k], ys[k]).numpy() for k in range(64)])
    np.testing.assert_allclose(compiled(w, xs, ys).numpy(), want, rtol=1e-12, atol=1e-14)


def test_each_node_says_which_rule_made_it() -> None:
    w, xs, ys = per_example_grads(4)
    compiled = tfl.compile(tfl.vmap(tfl.grad(loss), in_axes=(None, 0, 0)), w, xs, ys)
    text = str(compiled.snapshots[0].graph)
    assert "batched by matmul's rule: moved the batch axis to the front" in text
    assert "grad of log_softmax; batched by" in text  # a gradient's node, batched
    rules = [e.get("rule", "") for e in compilation_data(compiled)["nodes"]]
    assert any(r.startswith("batched by matmul's rule") for r in rules)


def test_random_numbers_are_the_same_for_every_example() -> None:
    tfl.manual_seed(0)
    noisy = tfl.vmap(lambda x: x + tfl.randn(3))(tfl.zeros(5, 3))
    assert np.all(noisy.numpy() == noisy.numpy()[0])  # one draw, shared (as in JAX)


def test_errors_say_what_is_wrong() -> None:
    xs = tfl.tensor(RNG.normal(size=(4, 3)))
    with pytest.raises(tfl.ShapeError, match="disagree on the batch size"):
        tfl.vmap(lambda a, b: a + b)(xs, tfl.ones(5, 3))
    with pytest.raises(tfl.ShapeError, match="one entry per argument"):
        tfl.vmap(lambda a, b: a + b, in_axes=(0,))(xs, xs)
    with pytest.raises(tfl.ShapeError, match="not an axis"):
        tfl.vmap(lambda a: a, in_axes=2)(xs)
    with pytest.raises(tfl.ShapeError, match="out_axes=None"):
        tfl.vmap(lambda a: a, out_axes=None)(xs)
    with pytest.raises(tfl.TeachflowError, match=r"does not cover tfl\.while_loop"):
        tfl.vmap(lambda a: tfl.while_loop(lambda c: c.sum() < 9, lambda c: c + 1, a))(xs)
    no_rule = Op("vmap_test_no_rule", lambda xp: lambda x: x * 2, lambda x: x, primitive=False)
    with pytest.raises(tfl.TeachflowError, match="no batching rule for op vmap_test_no_rule") \
            as err:
        tfl.vmap(lambda a: bind(no_rule, a))(xs)
    assert "test_vmap.py" in str(err.value)  # the user's line
