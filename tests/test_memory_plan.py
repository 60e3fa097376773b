"""The memory plan (`teachflow.passes.plan_memory`): a schedule that never raises the peak, and
slots that no two live values share, checked on many random programs."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import numpy as np
import pytest

import teachflow as tfl
from teachflow.graph import Graph
from teachflow.memory import peak_bytes
from teachflow.memory.liveness import default_schedule
from teachflow.memory.slots import planned_ranges
from teachflow.passes import DEFAULT_PIPELINE

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))
from memory_order import branches, peaks
from memory_plan import planned_peak, training_step

WITHOUT_PLAN = [p for p in DEFAULT_PIPELINE if p != "plan_memory"]


def random_program(seed: int):
    """A random program on one (4, 4) argument: chains and branches of elementwise ops, matrix
    products, reductions, reshapes and an op with several results (a loop), reading earlier
    values at random; returns the last value and one more."""
    rng = random.Random(seed)
    steps = [rng.choice(["unary", "binary", "matmul", "reduce", "reshape", "loop"])
             for _ in range(rng.randint(3, 14))]
    picks = [(rng.random(), rng.random()) for _ in steps]

    def program(x):
        values = [x]
        for step, (a, b) in zip(steps, picks, strict=True):
            u = values[int(a * len(values))]
            v = values[int(b * len(values))]
            if step == "unary":
                made = (u * 0.5).tanh() if a < 0.5 else u.exp() * 0.1
            elif step == "binary":
                made = u + v if a < 0.5 else u * v
            elif step == "matmul":
                made = (u @ v) * 0.25
            elif step == "reduce":
                made = u.sum(axis=0, keepdims=True) + v
            elif step == "reshape":
                made = u.reshape(2, 8).T.reshape(4, 4) + 1.0
            else:
                made = tfl.fori_loop(0, 2, lambda i, c: c * 0.5, u)
            values.append(made)
        return values[-1], values[len(values) // 2].sum()

    return program


def compiled(seed: int, passes=DEFAULT_PIPELINE) -> tfl.Compilation:
    return tfl.compile(random_program(seed), tfl.tensor(np.linspace(-1, 1, 16).reshape(4, 4)),
                       passes=list(passes))


def assert_valid(graph: Graph) -> None:
    """No two buffers whose ranges overlap share a slot; every slot holds its buffers; in place
    only over an operand of the same shape and dtype that dies at that step, by an elementwise
    op that may write over its operands."""
    plan = graph.memory_plan
    schedule = default_schedule(graph)
    if plan is None:  # (nothing to plan: the stage repeats the one before)
        assert planned_ranges(graph, schedule) == []
        return
    values = {v.id: v for v in graph.values()}
    for b in plan.buffers:
        assert plan.slot_sizes[b.slot] >= b.size
        assert schedule[b.first_use] is values[b.value].producer
        for c in plan.buffers:
            if b is not c and b.slot == c.slot and b.in_place_of != c.value \
                    and c.in_place_of != b.value:
                assert b.last_use < c.first_use or c.last_use < b.first_use, (b, c)
        if b.in_place_of is not None:
            node, over = values[b.value].producer, values[b.in_place_of]
            operand = next(c for c in plan.buffers if c.value == b.in_place_of)
            assert node.op.elementwise and node.op.out_may_alias and over in node.inputs
            assert over.spec.shape == values[b.value].spec.shape
            assert over.spec.dtype == values[b.value].spec.dtype
            assert operand.last_use == b.first_use and operand.slot == b.slot


@pytest.mark.parametrize("seed", range(40))
def test_plans_of_random_programs_are_valid_and_compute_the_same(seed: int) -> None:
    with_plan = compiled(seed)
    without = compiled(seed, WITHOUT_PLAN)
    assert_valid(with_plan.graph)
    planned = with_plan.graph
    assert sorted(n.id for n in planned.nodes) == sorted(n.id for n in without.graph.nodes)
    planned.verify()  # every operand made before it is read: a topological order
    assert peak_bytes(planned) <= peak_bytes(without.graph)
    x = tfl.tensor(np.random.default_rng(seed).standard_normal((4, 4)))
    for got, want in zip(with_plan(x), without(x), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)


def test_an_elementwise_chain_runs_in_place_and_values_reuse_slots() -> None:
    def chain(x):
        return ((x.exp() * 2.0).tanh() + 1.0).sum()

    compiled_ = tfl.compile(chain, tfl.ones(8, 8), passes=["plan_memory"])
    sentences = [c.sentence for c in compiled_.snapshots[-1].changes]
    assert "%2 written in place of %1, which dies here (step 1)" in sentences
    assert "%3 written in place of %2, which dies here (step 2)" in sentences
    assert [b.slot for b in compiled_.graph.memory_plan.buffers] == [0, 0, 0, 0]
    assert compiled_.graph.memory_plan.arena_bytes == 8 * 8 * 4
    assert_valid(compiled_.graph)


def test_nothing_is_written_over_an_operand_another_operand_sees_through_a_view() -> None:
    def f(x):
        a = x.exp()
        return (a + a.T).sum()  # a dies here, but a.T reads it element by element elsewhere

    compiled_ = tfl.compile(f, tfl.ones(8, 8), passes=["plan_memory"])
    assert [b.in_place_of for b in compiled_.graph.memory_plan.buffers] == [None, None]
    assert_valid(compiled_.graph)
    x = tfl.tensor(np.random.default_rng(0).standard_normal((8, 8)).astype(np.float32))
    np.testing.assert_allclose(compiled_(x).numpy(), f(x).numpy(), rtol=1e-6)


def test_largest_first_keeps_a_training_steps_arena_within_a_tenth_of_its_peak() -> None:
    step, x = training_step(layers=12, width=64, batch=16)  # in the order made: 1.21x
    graph = tfl.compile(step, x).graph
    assert graph.memory_plan.arena_bytes <= 1.1 * planned_peak(graph)


def test_a_freed_slot_is_reused_and_the_change_says_by_whom() -> None:
    def f(x):
        a = x @ x             # step 0: slot 0
        b = a.sum() * x       # step 1: a's sum (slot 1), and a dies; step 2: b reuses slot 0
        return (b @ x).sum()  # step 3: the sum dies at step 2, so its slot 1 is reused, grown

    compiled_ = tfl.compile(f, tfl.ones(4, 4), passes=["plan_memory"])
    changes = compiled_.snapshots[-1].changes
    assert {c.kind for c in changes} >= {"new_slot", "reused"}
    sentences = [c.sentence for c in changes]
    assert "%3 reuses slot 0, freed by %1 at step 1" in sentences
    assert "%4 reuses slot 1, freed by %2 at step 2" in sentences
    assert compiled_.graph.memory_plan.slot_sizes == (64, 64)


def test_memory_plan_lists_each_buffer_as_api_md_says() -> None:
    def f(x):
        return (x @ x).tanh().sum(axis=0)

    compiled_ = tfl.compile(f, tfl.ones(4, 4), passes=["plan_memory"])
    assert compiled_.memory_plan == [
        {"value": "%1", "size": 64, "first_use": 0, "last_use": 1, "slot": 0},
        {"value": "%2", "size": 64, "first_use": 1, "last_use": 2, "slot": 0},
    ]
    assert tfl.compile(f, tfl.ones(4, 4), passes=["fuse"]).memory_plan == []


def test_a_pass_after_plan_memory_drops_the_plan_it_would_break() -> None:
    def f(x):
        return (x.exp() * 2.0).sum()

    compiled_ = tfl.compile(f, tfl.ones(4, 4), passes=["plan_memory", "fuse"])
    assert compiled_.snapshots[1].graph.memory_plan is not None
    assert compiled_.graph.memory_plan is None and compiled_.memory_plan == []
    assert compiled_.snapshots[1].graph.clone().memory_plan is compiled_.snapshots[1].graph \
        .memory_plan


def test_random_ops_keep_their_order_among_themselves() -> None:
    def f(x):
        a = tfl.rand(64, 64)   # big, reduced late
        b = tfl.rand(2)        # small, reduced at once: the rule would run it first
        return a.sum() + b.sum() + x.sum()

    graph = tfl.compile(f, tfl.ones(2), passes=["plan_memory"]).graph
    draws = [n.id for n in graph.nodes if n.op.random]
    assert draws == sorted(draws)


def test_sub_graphs_and_graphs_on_several_devices_are_left_unplanned() -> None:
    def f(x):
        return tfl.cond(x.sum() > 0, lambda x: (x.exp() * 2).sum(), lambda x: x.sum(), x)

    graph = tfl.compile(f, tfl.ones(8, 8)).graph
    cond = next(n for n in graph.nodes if n.op.name == "cond")
    assert all(sub.memory_plan is None for sub in cond.params.values() if isinstance(sub, Graph))
    planned = {b.value for b in graph.memory_plan.buffers}
    assert cond.output.id not in planned and not planned & {o.id for o in cond.inputs}

    tfl.set_logical_devices("cpu", 2)
    try:
        def two(x):
            with tfl.device("cpu:1"):
                y = (x * 2.0).exp()
            return (y.to("cpu") * 3.0).sum()

        compiled_ = tfl.compile(two, tfl.ones(4, 4))
        assert compiled_.graph.memory_plan is None and compiled_.snapshots[-1].changes == []
    finally:
        tfl.set_logical_devices("cpu", 1)


def test_the_schedule_of_independent_branches_halves_the_peak_or_better() -> None:
    naive, chosen = peaks(k=8, size=64)
    assert chosen <= 0.5 * naive
    program, args = branches(4, 32)
    moves = tfl.compile(program, *args).snapshots[-1].changes
    assert any(c.kind == "moved" and "frees" in c.sentence for c in moves)
