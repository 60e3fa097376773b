"""The memory timeline under the stepper's graph, in Chromium (driven as `test_browser.py`
drives it): it draws the stage's bytes per step, labels the peak with its figure, marks what
is live where the learner hovers (a step, a range, a node of the graph), and follows the stage
on show. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import itertools
import re

import pytest
import test_browser
from test_browser import ARTIFACTS, CHROMIUM, go_to, open_page, why_no_chromium

import teachflow as tfl
from teachflow.memory import Buffer, MemoryPlan, live_ranges
from teachflow.viz.memory import memory_data

browser, page = test_browser.browser, test_browser.page  # (the fixtures, shared)

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason=why_no_chromium() if CHROMIUM is None else "")


def three_nodes(x):
    return (x.exp() * 2.0).sum()


def deep(x, w):  # 200 nodes as traced: fifty layers of four
    h = x
    for _ in range(50):
        h = (h @ w).tanh() * 0.5 + h
    return h


def kib(n: int) -> str:
    return f"{n / 1024:.1f} KiB" if n >= 1024 else f"{n} B"


def peak_label(page) -> str:
    return page.locator(".tf-mem-peak-label").text_content()


def test_the_timeline_draws_every_step_and_labels_the_peak(page, tmp_path) -> None:
    compilation = tfl.compile(three_nodes, tfl.randn(300))
    open_page(page, compilation, tmp_path / "small.html")
    mem = memory_data(compilation.snapshots[0].graph)
    assert page.locator(".tf-memory").is_visible()
    assert page.locator(".tf-mem-bar").count() == len(mem["live"]) == 3
    peak = compilation.snapshots[0].stats["peak_bytes"]
    assert f"peak {kib(peak)} at step {mem['peak_step']}" in peak_label(page)
    assert page.locator(f'.tf-mem-bar.tf-mem-peak[data-step="{mem["peak_step"]}"]').count() == 1
    figure = page.locator('.tf-figure[data-stat="peak_bytes"]')
    assert figure.locator(".tf-figure-value").inner_text() == kib(peak)
    assert "held throughout" in figure.get_attribute("title")
    assert page.locator(".tf-mem-chart .tf-mem-range").count() == sum(
        1 for r in live_ranges(compilation.snapshots[0].graph) if r.size)
    page.locator(".tf-memory").screenshot(path=str(ARTIFACTS / "memory-small.png"))
    assert page.errors == []


def test_hovering_a_step_marks_the_values_live_there_and_their_nodes(page, tmp_path) -> None:
    compilation = tfl.compile(three_nodes, tfl.randn(300))
    open_page(page, compilation, tmp_path / "small.html")
    graph = compilation.snapshots[0].graph
    ranges = [r for r in live_ranges(graph) if r.size]
    page.hover('.tf-mem-bar[data-step="1"]')
    live = [r for r in ranges if r.first_use <= 1 <= r.last_use]
    assert page.locator(".tf-mem-range.tf-mem-on").count() == len(live) == 3
    words = page.locator(".tf-mem-info").inner_text()
    assert words.startswith("step 1, %2 = mul:") and "%x (argument" in words
    marked = page.locator(".tf-graph .tf-live").evaluate_all(
        "els => els.map((e) => Number(e.dataset.nodeId))")
    assert sorted(marked) == sorted(r.value.drawn_id for r in live)
    assert page.locator(".tf-graph .tf-live-step").get_attribute("data-node-id") == str(
        graph.nodes[1].id)

    # A range: its steps first..last, its size, how it is held.
    page.hover(".tf-mem-chart .tf-mem-range[data-held=\"intermediate\"] >> nth=0")
    assert re.fullmatch(r"%1: steps 0\.\.1, 1\.2 KiB, held as intermediate",
                        page.locator(".tf-mem-info").inner_text())

    # A node of the graph: the step that runs it.
    page.hover(f'.tf-graph .tf-node[data-node-id="{graph.nodes[2].id}"]')
    assert page.locator(".tf-mem-info").inner_text().startswith("step 2, %3 = sum:")
    page.mouse.move(1, 1)
    assert page.locator(".tf-mem-on, .tf-live").count() == 0
    assert page.errors == []


def test_stepping_to_another_stage_draws_its_timeline(page, tmp_path) -> None:
    compilation = tfl.compile(three_nodes, tfl.randn(300))
    open_page(page, compilation, tmp_path / "small.html")
    names = [s.pass_name for s in compilation.snapshots]
    go_to(page, names.index("fuse"))
    fused = compilation.snapshots[names.index("fuse")]
    assert page.locator(".tf-mem-bar").count() == len(fused.graph.nodes) == 1
    assert f"peak {kib(fused.stats['peak_bytes'])}" in peak_label(page)
    value = page.locator('.tf-figure[data-stat="peak_bytes"] .tf-figure-value').inner_text()
    assert value.startswith(kib(fused.stats["peak_bytes"])) and "(−" in value
    assert page.errors == []


def test_a_graph_of_200_nodes_reads_at_a_glance(page, tmp_path) -> None:
    compilation = tfl.compile(deep, tfl.randn(16, 32), tfl.randn(32, 32))
    assert len(compilation.snapshots[0].graph.nodes) == 200
    open_page(page, compilation, tmp_path / "deep.html")
    assert page.locator(".tf-mem-bar").count() == 200
    chart = page.locator(".tf-mem-chart").bounding_box()
    assert chart["height"] < 300, "the ranges' rows get thinner rather than tall"
    ticks = page.locator(".tf-mem-tick").evaluate_all(
        "els => els.map((e) => e.getBoundingClientRect()).map((r) => [r.left, r.right, r.top])")
    steps = sorted(t for t in ticks if abs(t[2] - ticks[-1][2]) < 1)  # the step numbers' row
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(steps)), "step numbers do not overlap"
    label = page.locator(".tf-mem-peak-label").bounding_box()
    assert label["x"] + label["width"] <= chart["x"] + chart["width"]
    page.hover('.tf-mem-bar[data-step="100"]')
    assert page.locator(".tf-mem-info").inner_text().startswith("step 100,")
    page.locator(".tf-memory").screenshot(path=str(ARTIFACTS / "memory-200-nodes.png"))
    go_to(page, len(compilation.snapshots) - 1)
    assert page.locator(".tf-mem-bar").count() == len(compilation.graph.nodes)
    assert page.errors == []


def test_a_stage_with_a_memory_plan_colours_each_range_by_its_slot(page, tmp_path) -> None:
    compilation = tfl.compile(three_nodes, tfl.randn(300), passes=[])
    graph = compilation.graph
    exp, mul = graph.nodes[0].output, graph.nodes[1].output
    graph.memory_plan = MemoryPlan(  # (as plan_memory hangs one on the graph it returns)
        buffers=(Buffer(exp.id, 1200, 0, 1, slot=0), Buffer(mul.id, 1200, 1, 2, slot=1)),
        slot_sizes=(1200, 1200))
    open_page(page, compilation, tmp_path / "planned.html")
    fills = page.locator('.tf-mem-chart .tf-mem-range[data-held="intermediate"]').evaluate_all(
        "els => els.map((e) => getComputedStyle(e).fill)")
    assert len(set(fills)) == 2, "two slots, two colours"
    assert "slots hold 2.3 KiB" in page.locator(".tf-mem-summary").inner_text()
    assert "slot of the memory plan" in page.locator(".tf-mem-legend").inner_text()
    page.hover('.tf-mem-chart .tf-mem-range[data-held="intermediate"] >> nth=1')
    assert page.locator(".tf-mem-info").inner_text().endswith(", slot 1")
    page.locator(".tf-memory").screenshot(path=str(ARTIFACTS / "memory-planned.png"))
    assert page.errors == []
