"""The executor writes into a memory plan's buffers (teachflow.memory.arena, .writable):
results equal to the unplanned executor's, outputs never planned, no allocation per call."""

from __future__ import annotations

import threading
import tracemalloc

import numpy as np
import pytest
import test_devices
from memory_planner import UNPLANNED, one_slot_each, with_plan

import teachflow as tfl
from teachflow.graph import Graph, subgraphs
from teachflow.kernels import native
from teachflow.memory import Buffer, MemoryPlan, plannable, plannable_values, writes_out
from teachflow.ops import OPS

rng = np.random.default_rng(0)


def arr(*shape, dtype=np.float32):
    return tfl.tensor(rng.standard_normal(shape).astype(dtype))


def mlp(x, w, b):
    h = tfl.relu(x @ w + b)
    h = tfl.tanh(h @ w.T) * 0.5 + h
    return (h * h).sum(axis=1)


def views(x, w, b):
    h = (x @ w).reshape(w.shape[0], -1).T  # a view of an intermediate, read later
    return (h @ x.T).sum() + b.sum()


def returned_view(x, w, b):
    return (x @ w).T  # an output that is a view of an intermediate: never planned


def several(x, w, b):
    a = tfl.exp(x * 0.1) + b
    c = tfl.tanh(a) * a  # a fused kernel with a result needed outside as well
    return (c @ w).mean(axis=0), a.max()


def indexed(x, w, b):
    y = x @ w
    return y[1:3] * 2.0 + tfl.where(y > 0, y, 0.0)[0:2]


def reductions(x, w, b):
    y = x @ w
    return y.max(axis=0) + y.min(axis=0) + y.mean(axis=0) + y.sum(axis=0)


def in_place(x, w, b):
    y = x @ w
    y += b  # an in-place update of an intermediate
    y *= 2.0
    return tfl.relu(y) @ w


def branches(x, w, b):
    h = x @ w
    return tfl.cond(h.sum() > 0, lambda h: tfl.relu(h) @ w, lambda h: h * 3.0, h) + h


def looped(x, w, b):
    h = tfl.tanh(x @ w)
    return tfl.fori_loop(0, 3, lambda i, c: tfl.tanh(c @ w) + h, h) * (h + 1.0)


def gradient(x, w, b):
    return tfl.grad(lambda w, b: (tfl.tanh(x @ w + b) ** 2).sum(), argnums=(0, 1))(w, b)


PROGRAMS = [mlp, views, returned_view, several, indexed, reductions, in_place, branches,
            looped, gradient]


def args(n=6):
    return arr(5, n), arr(n, n), arr(n)


def as_list(r):
    return [np.asarray(t.numpy()) for t in (r if isinstance(r, tuple | list) else (r,))]


@pytest.mark.parametrize("planner", [None, one_slot_each], ids=["plan_memory", "one_slot_each"])
@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_planned_results_equal_unplanned_ones_call_after_call(program, planner) -> None:
    plain = tfl.function(program, passes=UNPLANNED)
    planned = tfl.function(program, passes=with_plan(planner))
    for _ in range(3):  # the fast path runs from the second call on
        a = args()
        want, got = as_list(plain(*a)), as_list(planned(*a))
        for g, w in zip(got, want, strict=True):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-6)
    first = as_list(planned(*args()))
    again = [x.copy() for x in first]
    planned(*args())  # the next call must not write over what the last one returned
    for f, a in zip(first, again, strict=True):
        np.testing.assert_array_equal(f, a)


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_the_pass_plans_exactly_the_values_the_executor_may_write_into(program) -> None:
    graph = tfl.compile(program, *args()).graph
    plan = graph.memory_plan  # (None where there is nothing to plan)
    planned = {b.value for b in plan.buffers} if plan is not None else set()
    assert planned == {v.id for v in plannable_values(graph)}


def test_the_source_shows_each_planned_value_written_into_its_slot() -> None:
    c = tfl.compile(mlp, *args(), passes=with_plan())
    src = c.source
    assert "= arena()" in src and "out=slot" in src, src
    plan = c.graph.memory_plan
    for b in plan.buffers:
        assert f"slot{b.slot}_v{b.value}" in src


def test_outputs_and_what_they_see_through_views_are_never_planned() -> None:
    c = tfl.compile(returned_view, *args(), passes=with_plan())
    g = c.graph
    matmul = next(n for n in g.nodes if n.op.name == "matmul")
    assert matmul.output not in plannable_values(g)
    assert "out=" not in c.source


def test_a_value_read_by_a_node_that_may_keep_its_memory_is_not_planned() -> None:
    c = tfl.compile(indexed, *args(), passes=["dce", lambda g: g])
    g = c.graph
    y = next(n for n in g.nodes if n.op.name == "matmul").output
    assert any(n.op.name == "getitem" and y in n.inputs for n in g.nodes)
    assert y not in plannable_values(g)


def test_a_value_passed_into_a_cond_is_not_planned() -> None:
    c = tfl.compile(branches, *args(), passes=["dce"])
    g = c.graph
    h = next(n for n in g.nodes if n.op.name == "matmul").output
    assert h not in plannable_values(g)
    assert not any(plannable(n) for n in g.nodes if subgraphs(n))


def test_which_kernels_write_out_is_read_from_the_ops_declarations() -> None:
    for name in ("matmul", "add", "relu", "sum", "mean", "max", "where", "astype"):
        assert writes_out(OPS[name]), name
    for name in ("reshape", "transpose", "getitem", "stop_gradient", "concatenate", "cond"):
        assert not writes_out(OPS[name]), name


def test_a_multi_result_fused_kernel_writes_every_result_into_its_slot() -> None:
    c = tfl.compile(lambda x, w: ((tfl.exp(x) * 2.0 + 1.0) @ w, tfl.exp(x) * 2.0 @ w),
                    arr(64, 64), arr(64, 64), passes=with_plan())
    plain = tfl.compile(lambda x, w: ((tfl.exp(x) * 2.0 + 1.0) @ w, tfl.exp(x) * 2.0 @ w),
                        arr(64, 64), arr(64, 64), passes=UNPLANNED)
    x, w = arr(64, 64), arr(64, 64)
    for got, want in zip(c(x, w), plain(x, w), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-5)
    assert any(len(n.outputs) > 1 for n in c.graph.nodes)
    assert "out=(slot" in c.source, c.source


def chain(x):
    y = tfl.tanh(x * 1.5 + 0.25) * tfl.exp(-x) + x * x - 1.0
    return (y @ y).sum(axis=0) + 1.0


@pytest.mark.skipif(isinstance(native.compiler(), str), reason="no C compiler here")
def test_a_c_fused_kernel_writes_straight_into_its_planned_buffer() -> None:
    x = arr(128, 128)
    c = tfl.compile(chain, x, passes=with_plan())
    plain = tfl.compile(chain, x, passes=UNPLANNED)
    np.testing.assert_allclose(c(x).numpy(), plain(x).numpy(), rtol=1e-5)
    fused = next(n for n in c.graph.nodes if n.op.name.startswith("fused"))
    assert fused.output in plannable_values(c.graph)
    assert c.kernels[fused.op.name]["ran"].startswith("C"), c.kernels[fused.op.name]["ran"]
    run = fused.op.kernel(np)
    out = np.empty(fused.output.shape, fused.output.dtype)
    assert run(x.numpy(), out=out) is out
    np.testing.assert_allclose(out, run(x.numpy()), rtol=1e-6)
    overlapping = x.numpy().copy()  # an out that is an input's memory: written the careful way
    want = run(overlapping)
    np.testing.assert_allclose(run(overlapping, out=overlapping), want, rtol=1e-6)


def training_step(n=256, layers=4):
    start = np.random.default_rng(1)  # (the same weights for every step made)
    ws = [tfl.tensor(start.standard_normal((n, n)).astype(np.float32) * 0.05,
                     requires_grad=True) for _ in range(layers)]

    def loss(ws, x):
        for w in ws:
            x = tfl.relu(x @ w)
        return (x * x).mean()

    def step(x):
        grads = tfl.grad(loss)(ws, x)
        with tfl.no_grad():
            for w, g in zip(ws, grads, strict=True):
                w -= 0.01 * g
        return loss(ws, x)

    return step


def traced_peak(fn) -> tuple[int, object]:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        base = tracemalloc.get_traced_memory()[0]
        result = fn()
        return tracemalloc.get_traced_memory()[1] - base, result
    finally:
        tracemalloc.stop()


def test_a_planned_call_allocates_nothing_but_its_outputs_once_warm() -> None:
    def f(x, w):
        h = tfl.relu(x @ w)
        h = tfl.relu(h @ w) + h
        return (h @ w).sum(axis=0)

    x, w = arr(256, 256), arr(256, 256)
    planned = tfl.function(f, passes=with_plan())
    plain = tfl.function(f, passes=UNPLANNED)
    for _ in range(3):
        planned(x, w), plain(x, w)
    peak, out = traced_peak(lambda: planned(x, w))
    plain_peak, _ = traced_peak(lambda: plain(x, w))
    assert peak < out.numpy().nbytes + 16_384, (peak, out.numpy().nbytes)
    assert plain_peak > 256 * 256 * 4, "unplanned, each intermediate is a new array"


def test_one_executor_called_from_threads_at_once_gives_each_its_own_arena() -> None:
    x, w, b = args(64)
    planned = tfl.compile(mlp, x, w, b, passes=with_plan())
    inputs = [args(64) for _ in range(8)]
    want = [mlp(*a).numpy() for a in inputs]
    got: dict[int, np.ndarray] = {}
    start = threading.Barrier(len(inputs))

    def work(k):
        start.wait()
        for _ in range(20):
            got[k] = planned(*inputs[k]).numpy()
            np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)

    threads = [threading.Thread(target=work, args=(k,)) for k in range(len(inputs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    for k in range(len(inputs)):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-4, atol=1e-5)


def test_a_slot_too_small_for_its_value_is_refused() -> None:
    def small(g: Graph) -> MemoryPlan:
        plan = one_slot_each(g)
        b = plan.buffers[0]
        return MemoryPlan((Buffer(b.value, 4, b.first_use, b.last_use, 0),), (4,))

    with pytest.raises(ValueError, match="cannot hold"):
        tfl.compile(mlp, *args(), passes=with_plan(small))


def test_a_training_step_planned_equals_plain() -> None:
    x = arr(32, 64)
    plain_step, planned_step = training_step(64, 3), training_step(64, 3)
    plain = tfl.function(plain_step, passes=UNPLANNED)
    planned = tfl.function(planned_step, passes=with_plan())
    assert "out=slot" in tfl.compile(training_step(64, 3), x, passes=with_plan()).source
    for _ in range(4):
        with tfl.no_grad():  # (on the tape, a staged call runs op by op, planned or not)
            np.testing.assert_allclose(planned(x).numpy(), plain(x).numpy(), rtol=1e-4)


gpu = test_devices.gpu  # a fixture: "gpu", simulated by NumPy, and (marked) CuPy's


def test_on_a_gpu_the_arena_is_that_devices_memory(gpu) -> None:
    x, w, b = (t.to("gpu") for t in args(64))
    planned = tfl.function(mlp, passes=with_plan())
    assert "out=slot" in tfl.compile(mlp, x, w, b, passes=with_plan()).source
    for _ in range(3):
        got = planned(x, w, b)
    assert got.device == "gpu"
    np.testing.assert_allclose(got.numpy(), mlp(x, w, b).numpy(), rtol=1e-4, atol=1e-5)


def test_a_graph_on_two_devices_runs_its_pieces_unplanned_and_equal() -> None:
    def two(x, w, b):
        with tfl.device("cpu:1"):
            a = tfl.relu(x @ w)
        return a.to("cpu") @ w + mlp(x, w, b).sum()

    tfl.set_logical_devices("cpu", 2)
    try:
        a = args(16)
        c = tfl.compile(two, *a, passes=with_plan())
        assert "out=slot" not in c.source  # (the pieces of each device: not planned yet)
        np.testing.assert_allclose(c(*a).numpy(), two(*a).numpy(), rtol=1e-5, atol=1e-6)
    finally:
        tfl.set_logical_devices("cpu", 1)
