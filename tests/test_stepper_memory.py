"""The memory a stage holds, as its figures and the stepper's data say it
(teachflow.figures, teachflow.viz.memory): the same figures as `teachflow.memory.liveness`."""

from __future__ import annotations

import json

import pytest
from stepper_cases import CASES

import teachflow as tfl
from teachflow.memory import Buffer, MemoryPlan, live_ranges, peak_bytes, timeline
from teachflow.memory.liveness import default_schedule
from teachflow.viz import watch
from teachflow.viz.expand import expand_stage
from teachflow.viz.memory import HELD, memory_data
from teachflow.viz.stepper_data import compilation_data

F32 = 4


def chain(x):
    a = x.exp()  # step 0
    b = a * 2.0  # step 1: a's last read
    return (b + a.sum()).sum()


def compiled_chain() -> tfl.Compilation:
    return tfl.compile(chain, tfl.randn(100))


def test_every_stage_says_its_peak_as_liveness_counts_it() -> None:
    compilation = compiled_chain()
    for snap in compilation.snapshots:
        assert snap.stats["peak_bytes"] == peak_bytes(snap.graph), snap.pass_name
    traced, fused = compilation.snapshots[0].stats, compilation.snapshots[-1].stats
    assert fused["peak_bytes"] < traced["peak_bytes"], "fusion keeps a and b in registers"


def test_the_peak_counts_arguments_throughout_and_outputs_to_the_end() -> None:
    snap = tfl.compile(lambda x: (x.exp() * 2.0, x.sum()), tfl.randn(10), passes=[]).snapshots[0]
    # step 0: x and exp; step 1: x, exp and the product (an output); step 2: x, the product
    # (held to the end) and the sum
    assert timeline(snap.graph) == [20 * F32, 30 * F32, 21 * F32]
    assert snap.stats["peak_bytes"] == 30 * F32


def test_a_stage_timeline_is_liveness_step_for_step_and_marks_its_peak() -> None:
    for snap in compiled_chain().snapshots:
        mem = memory_data(snap.graph)
        schedule = default_schedule(snap.graph)
        assert mem["steps"] == [node.id for node in schedule]
        assert mem["live"] == timeline(snap.graph)
        assert mem["live"][mem["peak_step"]] == snap.stats["peak_bytes"]
        assert mem["live"].index(max(mem["live"])) == mem["peak_step"], "the first step at it"
        assert [row[:5] for row in mem["values"]] == [
            [r.value.id, r.size, r.first_use, r.last_use, HELD.index(r.held)]
            for r in live_ranges(snap.graph)]  # (then each value's slot, where there is a plan)
        plan = snap.graph.memory_plan
        assert mem["arena"] == (None if plan is None else plan.arena_bytes)


def test_the_peak_is_marked_at_the_step_that_holds_the_most() -> None:
    def f(x):
        a = x.exp()           # step 0: x, a
        b = a * 2.0           # step 1: x, a, b  <- the peak
        return (b.sum() * 3)  # steps 2, 3: a is gone

    snap = tfl.compile(f, tfl.randn(50), passes=[]).snapshots[0]
    mem = memory_data(snap.graph)
    assert mem["peak_step"] == 1
    assert mem["live"][1] == 150 * F32


def test_a_memory_plan_names_each_planned_value_slot_and_its_arena() -> None:
    graph = tfl.compile(chain, tfl.randn(100), passes=[]).graph
    exp, mul = graph.nodes[0].output, graph.nodes[1].output
    graph.memory_plan = MemoryPlan(  # (as plan_memory hangs one on the graph it returns)
        buffers=(Buffer(exp.id, 400, 0, 2, slot=0), Buffer(mul.id, 400, 1, 2, slot=1)),
        slot_sizes=(400, 400))
    mem = memory_data(graph)
    slots = {v[0]: v[5] for v in mem["values"]}
    assert slots[exp.id] == 0 and slots[mul.id] == 1
    assert slots[graph.inputs[0].id] is None, "an argument is its owner's, in no slot"
    assert mem["arena"] == 800


def test_every_stage_of_the_stepper_data_carries_its_memory_as_plain_json() -> None:
    for make in CASES.values():
        compilation = make()
        data = compilation_data(compilation, compilation.example_inputs)
        for i, snap in enumerate(compilation.snapshots):
            memory = expand_stage(data, i)["memory"]
            assert memory == memory_data(snap.graph)
            assert snap.stats["peak_bytes"] == max(memory["live"])
        assert json.loads(json.dumps(data)) == data


def test_a_stage_that_holds_what_the_stage_before_held_says_so_in_a_few_bytes() -> None:
    compilation = compiled_chain()
    stages = compilation_data(compilation)["stages"]
    passes = [s.pass_name for s in compilation.snapshots]
    place = passes.index("place")  # (a one-device graph: nothing to place)
    k = stages[place]["memory"]["as_stage"]
    assert k < place and stages[k]["memory"] == memory_data(compilation.snapshots[place].graph)
    assert "as_stage" not in stages[0]["memory"] and "as_stage" not in stages[-1]["memory"]


def test_a_watched_trace_has_no_memory_to_show() -> None:
    data = watch.trace_steps(chain, tfl.randn(4)).data()
    assert all(stage["memory"] is None for stage in data["stages"])
    assert all("peak_bytes" not in stage["stats"] for stage in data["stages"])


@pytest.mark.parametrize("nodes", [3, 200])
def test_the_memory_data_grows_with_the_graph_not_beyond(nodes: int) -> None:
    def f(x):
        for _ in range(nodes - 1):
            x = x * 1.5
        return x.sum()

    graph = tfl.compile(f, tfl.randn(8), passes=[]).graph
    mem = memory_data(graph)
    assert len(mem["steps"]) == nodes and len(mem["live"]) == nodes
    assert len(json.dumps(mem)) < 60 * nodes + 200
