"""Live ranges and the peak of a schedule (teachflow.memory.liveness), worked out by hand."""

from __future__ import annotations

import teachflow as tfl
from teachflow.memory import live_ranges, peak_bytes, timeline

F32 = 4


def unoptimized(fn, *args):
    return tfl.compile(fn, *args, passes=[]).graph


def test_an_intermediate_lives_from_its_step_to_its_last_read_and_an_output_to_the_end() -> None:
    def f(x):
        a = x.exp()        # step 0
        b = a * 2          # step 1: a's last read
        return b.sum(), b  # step 2; b is returned, so held to the end

    graph = unoptimized(f, tfl.ones(10, 10))
    held = {str(r.value): (r.first_use, r.last_use, r.held, r.size) for r in live_ranges(graph)}
    assert held["%x"] == (0, 2, "argument", 100 * F32)
    assert held["%1"] == (0, 1, "intermediate", 100 * F32)
    assert held["%2"] == (1, 2, "output", 100 * F32)
    assert held["%3"] == (2, 2, "output", F32)
    # step 0: x and a; step 1: x, a and b; step 2: x, b and the sum
    assert timeline(graph) == [200 * F32, 300 * F32, 201 * F32]
    assert peak_bytes(graph) == 300 * F32


def test_a_view_owns_no_bytes_and_keeps_what_it_sees_alive() -> None:
    def f(x):
        a = x.exp()              # step 0
        v = a.reshape(-1)        # step 1: a view of a
        return (v * 3).sum()     # steps 2, 3: v read at step 2

    graph = unoptimized(f, tfl.ones(4, 8))
    held = {str(r.value): r for r in live_ranges(graph)}
    assert held["%2"].held == "view" and held["%2"].size == 0
    assert held["%1"].last_use == 2, "a's memory is read through the view at step 2"
    assert timeline(graph) == [64 * F32, 64 * F32, 96 * F32, 65 * F32]


def test_an_unknown_size_counts_nothing_and_says_so() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), dtype="float32", name="x")
        y = (x * 2).sum()
    g.outputs = [y.value if hasattr(y, "value") else y]
    ranges = live_ranges(g)
    assert [r.size_known for r in ranges if r.held == "argument"] == [False]
    assert all(r.size == 0 for r in ranges if not r.size_known)


def test_a_node_that_owns_graphs_holds_its_busiest_graphs_peak_while_it_runs() -> None:
    def f(x):
        return tfl.cond(x.sum() > 0, lambda x: (x.exp() * 2).sum(), lambda x: x.sum(), x)

    graph = unoptimized(f, tfl.ones(8, 8))
    cond_step = next(i for i, n in enumerate(graph.live()[0]) if n.op.name == "cond")
    # inside the exp branch: exp (64 floats) and the product (64) live together
    assert timeline(graph)[cond_step] - timeline(graph)[cond_step - 1] >= 128 * F32 - F32


def test_a_returned_view_counts_once_and_keeps_what_it_sees_to_the_end() -> None:
    def f(a, b):
        return (a @ b).T

    graph = unoptimized(f, tfl.ones(4, 4), tfl.ones(4, 4))
    held = {str(r.value): r for r in live_ranges(graph)}
    assert held["%3"].held == "view" and held["%3"].size == 0
    assert held["%2"].last_use == len(graph.nodes) - 1
    assert peak_bytes(graph) == 3 * 16 * F32, "a, b and the product: the view adds nothing"


def test_a_graph_of_no_nodes_holds_what_it_is_given() -> None:
    graph = tfl.compile(lambda x: x * 0, tfl.tensor([2, 3, 4])).graph  # folded to zeros
    assert graph.nodes == []
    given = [*graph.inputs, *graph.constants]
    assert timeline(graph) == [sum(v.spec.size * v.dtype.itemsize for v in given)]
