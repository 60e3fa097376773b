"""The stepper as the lessons show it, in Chromium (driven as `test_browser.py` drives it):
every node inside the graph's box and every label inside its node, side-by-side steppers that
fit a screen, a model's modules as boxes that open on a click, and the steppers that watch a
trace and a backward pass. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import pytest
import test_browser
from stepper_cases import CASES
from test_browser import (
    ARTIFACTS,
    CHROMIUM,
    go_to,
    halve_thrice,
    halve_while_big,
    open_page,
    why_no_chromium,
)

import teachflow as tfl

browser, page = test_browser.browser, test_browser.page  # (the fixtures, shared)

pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason=why_no_chromium() if CHROMIUM is None else "")

#: For each stepper on the page: the nodes drawn outside its picture, the nodes outside the part
#: of the graph's box on screen (its scrolled view), and the labels wider than their node's box.
MEASURE = """() => {
  const out = { outside: [], hidden: [], labels: [] };
  const beyond = (r, o) => r.left < o.left - 0.5 || r.right > o.right + 0.5 ||
    r.top < o.top - 0.5 || r.bottom > o.bottom + 0.5;
  for (const wrap of document.querySelectorAll(".tf-graph-wrap")) {
    const svg = wrap.querySelector("svg");
    const w = wrap.getBoundingClientRect();
    const left = w.left + wrap.clientLeft;
    const top = w.top + wrap.clientTop;
    const view = { left, top, right: left + wrap.clientWidth, bottom: top + wrap.clientHeight };
    for (const node of svg.querySelectorAll(".tf-node")) {
      const id = node.dataset.nodeId ?? node.dataset.block;
      const r = node.getBoundingClientRect();
      if (beyond(r, svg.getBoundingClientRect())) out.outside.push(id);
      if (beyond(r, view)) out.hidden.push(id);
      const box = node.querySelector(":scope > rect.tf-box:not(.tf-cf-back):not(.tf-block-back)");
      const b = box.getBoundingClientRect();
      for (const label of node.querySelectorAll(":scope > text.tf-label")) {
        const t = label.getBBox();  // (in the node's own units: against the box's)
        const own = box.getBBox();
        if (t.x < own.x - 0.5 || t.x + t.width > own.x + own.width + 0.5) {
          out.labels.push([id, label.textContent, b.width]);
        }
      }
    }
  }
  return out;
}"""


def tall_chain(x, w):  # nine layers: taller than the graph's box at full size
    h = ((x @ w).tanh() + (x @ w).tanh()) * 1.0
    return (h * h).mean()


def three_results(x, y):  # one kernel writes three values that matmuls read
    a = (x * y).tanh()
    b = a * 2.0
    c = b + 1.0
    return a @ y, b @ y, c @ y


def test_every_node_is_in_the_graph_box_and_every_label_in_its_node(page, tmp_path) -> None:
    cases = {"tall chain": lambda: tfl.compile(tall_chain, tfl.randn(64, 32), tfl.randn(32, 16)),
             "three results": lambda: tfl.compile(three_results, tfl.randn(4, 4),
                                                  tfl.randn(4, 4)),
             **CASES}
    for name, make in cases.items():
        compilation = make()
        open_page(page, compilation, tmp_path / "case.html")
        for stage in range(len(compilation.snapshots)):
            go_to(page, stage)
            found = page.evaluate(MEASURE)
            assert found == {"outside": [], "hidden": [], "labels": []}, (name, stage)
        if name == "three results":  # the kernel's label keeps its op's name
            kernel = next(n for n in compilation.graph.nodes if n.op.name.startswith("fused"))
            label = page.locator(f'.tf-nodes [data-node-id="{kernel.id}"] .tf-label')
            assert label.text_content().endswith(f"= {kernel.op.name}")
            title = page.locator(f'.tf-nodes [data-node-id="{kernel.id}"] > title')
            assert title.text_content().startswith(f"{kernel.outputs[0]}, {kernel.outputs[1]}")
            ARTIFACTS.mkdir(exist_ok=True)
            page.screenshot(path=str(ARTIFACTS / "fit-three-results.png"))
    assert not page.errors, page.errors


def test_steppers_side_by_side_each_fit_a_screen_with_narration_over_graph(browser,
                                                                           tmp_path) -> None:
    from teachflow.viz import side_by_side_html

    x = tfl.tensor([4.0, 4.0])
    path = side_by_side_html({"traced, unrolled": tfl.compile(halve_thrice, x),
                              "scripted": tfl.compile(halve_while_big, x)},
                             tmp_path / "pair.html")
    page = browser.new_page(viewport={"width": 1280, "height": 800})  # a laptop's screen
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage]")
    for stepper in page.locator(".tf-stepper").all():
        box = stepper.bounding_box()
        assert box["height"] <= 700, box
        narration = stepper.locator(".tf-narration").bounding_box()
        graph = stepper.locator(".tf-graph-wrap").bounding_box()
        assert 0 <= narration["y"] < graph["y"] and graph["y"] + graph["height"] <= 800
        stepper.evaluate("el => { el.scrollTop = el.scrollHeight; }")  # down to the text IR
        stepper.locator(".tf-next").click()  # the toolbar and the narration stay in sight
        assert stepper.locator(".tf-narration").bounding_box()["y"] >= box["y"]
        assert "inline" in stepper.locator(".tf-narration").inner_text()  # (the first pass)
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "side-by-side-1280x800.png"))
    page.close()


def test_a_models_modules_are_boxes_that_open_on_a_click(page, tmp_path) -> None:
    from stepper_cases import modules_step

    compilation = modules_step()
    open_page(page, compilation, tmp_path / "modules.html")
    traced = compilation.snapshots[0].graph
    (first, *_) = [n for n in traced.nodes if n.source.scope == "Sequential/0:Linear"]
    model = page.locator('.tf-cf-toggle[data-group="Sequential"]')
    linear = page.locator('.tf-cf-toggle[data-group="Sequential/0:Linear"]')
    inner = page.locator(f'.tf-graph .tf-node[data-node-id="{first.id}"]')
    # Closed: a few boxes, the whole of them in view; nothing inside them drawn.
    assert model.get_attribute("aria-expanded") == "false" and "nodes" in model.text_content()
    assert linear.count() == 0 and inner.count() == 0
    drawn = page.locator(".tf-graph .tf-node").count()
    assert drawn < len(traced.nodes) / 2, drawn
    assert page.evaluate(MEASURE) == {"outside": [], "hidden": [], "labels": []}
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "modules-closed.png"))
    model.click()  # the model opens on its layers, each a box in turn
    assert model.get_attribute("aria-expanded") == "true"
    assert linear.get_attribute("aria-expanded") == "false" and inner.count() == 0
    assert "Opened Sequential" in page.locator(".tf-narration").inner_text()
    linear.click()
    assert inner.count() == 1 and first.op.name in inner.text_content()
    assert "Sequential/0:Linear" in page.locator(".tf-details").inner_text()
    page.screenshot(path=str(ARTIFACTS / "modules-open.png"))
    inner.click()  # a node inside: its details name its module
    assert "module" in page.locator(".tf-details").inner_text()
    linear.locator(".tf-cf-head").click()  # and closes again (a click on its header)
    assert inner.count() == 0
    # Selecting a change inside a closed box opens the boxes it happened in.
    simplify = [s.pass_name for s in compilation.snapshots].index("simplify")
    go_to(page, simplify)
    page.click(".tf-change-next")
    page.click(".tf-change-prev")
    change = compilation.snapshots[simplify].changes[0]
    assert page.locator(f'.tf-graph [data-node-id="{change.result[0]}"]').count() == 1
    assert not page.errors, page.errors


def test_a_backward_pass_steps_node_by_node_each_gradient_with_its_value(page,
                                                                        tmp_path) -> None:
    from teachflow.viz.watch import backward_steps, trace_steps

    x = tfl.tensor([[1.0, 2.0], [3.0, 4.0]])
    w = tfl.tensor([[0.1, -0.2], [0.3, 0.05]], requires_grad=True)
    h = x @ w
    loss = h.tanh().sum()
    steps = backward_steps(loss)
    page.goto(steps.to_html(tmp_path / "backward.html").as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage]")
    assert "the tape %loss was recorded on, 3 ops" in page.locator(".tf-narration").inner_text()
    assert page.locator(".tf-graph .tf-node").count() == 4  # w, and the three ops
    for k, step in enumerate(steps.snapshots[1:], start=1):
        page.click(".tf-next")
        (change,) = step.changes
        (made,) = change.result
        drawn = page.locator(f'.tf-nodes [data-node-id="{made}"]')
        assert drawn.get_attribute("data-status") == "added"  # the gradient just computed
        assert f"Step {k + 1} of 5" in page.locator(".tf-narration").inner_text()
    drawn.click()  # the last: w's gradient, with its value
    details = page.locator(".tf-details").inner_text()
    loss.backward()  # (the tape was kept)
    assert "%w.grad = ∂matmul %h.grad, ·" in details
    assert f"{w.grad.numpy().max():.4f}"[:5] in details
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "watch-backward.png"))
    # A trace, watched: each step draws the node the builder just recorded.
    steps = trace_steps(lambda x, w: (x @ w).tanh(), tfl.randn(4, 3), tfl.randn(3, 2))
    page.goto(steps.to_html(tmp_path / "trace.html").as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage]")
    assert page.locator(".tf-graph .tf-nodes .tf-node").count() == 2  # the arguments
    page.click(".tf-next")
    assert page.locator('.tf-nodes [data-status="added"] .tf-label').text_content() == "%2 = matmul"
    page.click(".tf-next")
    assert "tanh" in page.locator(".tf-narration").inner_text()
    page.screenshot(path=str(ARTIFACTS / "watch-trace.png"))
    assert not page.errors, page.errors


def two_branches(x, y):
    with tfl.device("cpu:1"):
        a = (x @ x).tanh()
    return a.to("cpu") + (y @ y).tanh()


def test_nodes_are_filled_by_their_device_with_a_legend(page, tmp_path) -> None:
    tfl.set_logical_devices("cpu", 2)
    try:
        compilation = tfl.compile(two_branches, tfl.randn(4, 4), tfl.randn(4, 4))
        open_page(page, compilation, tmp_path / "devices.html")
    finally:
        tfl.set_logical_devices("cpu", 1)
    legend = page.locator(".tf-legend-device")
    assert legend.all_inner_texts() == ["cpu", "cpu:1"]
    go_to(page, len(compilation.snapshots) - 1)
    filled = page.locator('.tf-nodes .tf-node[data-device="cpu:1"] > rect.tf-box')
    assert filled.count() >= 2  # the copy there, and the product with its tanh
    assert "187, 204, 238" in filled.first.evaluate("r => getComputedStyle(r).fill")  # #bbccee
    assert page.locator(".tf-nodes .tf-badge.tf-transfer").count() == 2  # each copy's ends
    assert "bytes transferred" in page.locator(".tf-figures").inner_text()
    page.screenshot(path=str(ARTIFACTS / "stepper_devices.png"))
    assert page.errors == []


@tfl.function
def _layer(x):
    return (x @ x).tanh()


def calls_on_two_devices(x):
    with tfl.device("cpu:1"):
        a = _layer(x)
    return a.to("cpu") + _layer(x * 2.0)


def test_a_closed_call_is_filled_by_its_device_too(page, tmp_path) -> None:
    """A node that owns a graph (here a call, drawn closed) wears its device's fill, as a plain
    node does: the call on cpu:1 is filled, the one on the CPU is not."""
    tfl.set_logical_devices("cpu", 2)
    try:
        compilation = tfl.compile(calls_on_two_devices, tfl.randn(4, 4),
                                  passes=["place", "partition"])
        open_page(page, compilation, tmp_path / "calls.html")
    finally:
        tfl.set_logical_devices("cpu", 1)
    go_to(page, len(compilation.snapshots) - 1)
    box = '.tf-nodes .tf-cf-toggle[data-device="{}"] > rect.tf-box:not(.tf-cf-back)'
    fills = {d: page.locator(box.format(d)).evaluate("r => getComputedStyle(r).fill")
             for d in ("cpu", "cpu:1")}
    assert "187, 204, 238" in fills["cpu:1"] and "187, 204, 238" not in fills["cpu"], fills
    assert page.errors == []
