"""The pass stepper in a real browser: Debian's Chromium driven by Playwright.

(a) The static page `Compilation.to_html` writes: step by click and by key, check which nodes
    carry which change mark, open a node's details, read the narration.
(b) JupyterLab 4 and Notebook 7 for real: start each on a loopback port with a notebook that
    uses ``%%compile``, run it, find the widget, step it; and JupyterLab as ``make lab`` starts
    it. Screenshots go to ``test-artifacts/``.

Every Jupyter server here runs in a home of its own, with private config, data, runtime,
workspace and settings directories: a learner's ``~/.jupyter`` (a workspace saved by ``make lab``
with the lessons open, their settings) cannot change what the tests see, and the tests leave
nothing in it. To prove it, that home is planted with such a workspace and settings first.

These tests need Chromium: ``make test`` installs Debian's ``chromium`` where it can (as root, or
with sudo that asks for no password); elsewhere they skip, saying why. Playwright never
downloads a browser here: it is pointed at ``/usr/bin/chromium``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from stepper_cases import CASES, chain

import teachflow as tfl
from teachflow.viz import side_by_side_html
from teachflow.viz.expand import expand
from teachflow.viz.stepper_data import compilation_data

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ROOT = Path(__file__).parent.parent
ARTIFACTS = ROOT / "test-artifacts"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]



def stage_named(compilation, pass_name: str) -> int:
    """The index of the stage a pass made (the trace is stage 0)."""
    return [s.pass_name for s in compilation.snapshots].index(pass_name)

def why_no_chromium() -> str:
    """Why Chromium is missing: the reasons `make chromium` gives when it cannot install it."""
    if shutil.which("apt-get") is None:
        why = "this is not Debian (no apt-get), so `make test` cannot install it"
    elif not _can_be_root():
        why = ("installing it needs root, and sudo asks for a password (or is missing), so "
               "`make test` could not; run `sudo apt-get install chromium`")
    else:
        why = "`apt-get install chromium` did not install it (see the output of `make test`)"
    return f"browser tests skipped: Chromium is not installed: {why}"


def _can_be_root() -> bool:
    if os.geteuid() == 0:
        return True
    sudo = shutil.which("sudo")
    return sudo is not None and subprocess.run([sudo, "-n", "true"], capture_output=True,
                                               check=False).returncode == 0


pytestmark = pytest.mark.skipif(CHROMIUM is None,
                                reason=why_no_chromium() if CHROMIUM is None else "")


@pytest.fixture(scope="module")
def browser():
    sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed")
    with sync_api.sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser):
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    errors: list[str] = []
    page.on("console", lambda m: errors.append(f"{m.text} at {m.location.get('url')}")
            if m.type == "error" else None)
    page.on("pageerror", lambda e: errors.append(f"{e} at {e.stack}"))
    page.errors = errors
    yield page
    page.close()


def example():
    def f(x, w):  # a source line may hold what HTML reads specially: <!-- <script> </script>
        return ((x @ w).tanh() + (x @ w).tanh()) * 1.0 + tfl.full((), 2.0) * 3.0  # <!-- <script>

    return tfl.compile(f, tfl.randn(4, 3), tfl.randn(3, 2))


def stage_of(page) -> int:
    return int(page.locator(".tf-stepper").get_attribute("data-current-stage"))


def status_of(page, node_id: int) -> str:
    return page.locator(f'.tf-nodes [data-node-id="{node_id}"]').first.get_attribute("data-status")


def test_the_static_page_steps_marks_changes_and_explains_them(page, tmp_path) -> None:
    compilation = example()
    path = tmp_path / "stepper.html"
    compilation.to_html(path)
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage]")
    assert stage_of(page) == 0

    # Step by click: inline has no call to inline here; simplify rewrote f(x) + f(x) into
    # 2*f(x).
    stages = [s.pass_name for s in compilation.snapshots]
    page.click(".tf-next")
    page.click(".tf-next")
    assert stage_of(page) == stages.index("simplify")
    simplify = compilation.snapshots[stages.index("simplify")]
    doubled = next(c for c in simplify.changes if c.rule == "f(x) + f(x) -> 2*f(x)")
    assert status_of(page, doubled.result[0]) == "replaced"
    assert "2*f(x)" in page.locator(".tf-narration").inner_text()

    # Step by key, forwards and back.
    page.focus(".tf-stepper")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("j")
    assert stage_of(page) == stages.index("cse")
    merged = compilation.snapshots[stages.index("cse")].changes[0]
    assert status_of(page, merged.result[0]) == "merged"
    assert page.locator(f'[data-node-id="{merged.nodes[0]}"][data-status="removed"]').count()
    page.keyboard.press("k")
    assert stage_of(page) == stages.index("constant_fold")

    # The fuse stage: one fused kernel; its details say what it is, and its sources show
    # under the graph.
    fuse = stage_named(compilation, "fuse")
    while stage_of(page) < fuse:
        page.click(".tf-next")
    fused = next(n for n in compilation.graph.nodes if n.op.name.startswith("fused"))
    assert status_of(page, fused.id) == "fused"
    page.locator(f'.tf-nodes [data-node-id="{fused.id}"]').first.click()
    details = page.locator(".tf-details").inner_text()
    assert fused.op.name in details and "On the CPU" in details
    page.wait_for_selector(".tf-kernel-sources .tf-sources")
    assert "def fused_k1" in page.locator(".tf-kernel-sources").inner_text()
    assert not page.errors, page.errors
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-fused.png"))


def open_page(page, compilation, path) -> None:
    compilation.to_html(path)
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage]")


def go_to(page, stage: int) -> None:
    page.click(f'.tf-stages button[data-stage="{stage}"]')
    assert stage_of(page) == stage


def numbers_before(word: str, text: str) -> list[int]:
    return [int(n.replace(",", "")) for n in re.findall(rf"([\d,]+) {word}", text)]


def test_every_count_of_nodes_counts_the_same_things(page, tmp_path) -> None:
    compilation = example()
    open_page(page, compilation, tmp_path / "stepper.html")
    for i, snap in enumerate(compilation.snapshots):
        go_to(page, i)
        nodes = len(snap.graph.nodes)  # ops: the inputs and constants are not counted
        figure = page.locator('.tf-figure[data-stat="nodes"] .tf-figure-value').inner_text()
        assert figure.split()[0] == str(nodes)
        narration = page.locator(".tf-narration").inner_text()
        if snap.changes or i == 0:  # (a pass that changed nothing says so, and no count)
            assert numbers_before("nodes", narration)[-1] == nodes
    go_to(page, 0)
    traced = len(compilation.snapshots[0].graph.nodes)
    listed = page.locator('.tf-stages li[data-stage="0"]').inner_text()
    card = page.locator(".tf-rule").inner_text()
    assert numbers_before("nodes", listed) == [traced]
    assert numbers_before("nodes", card) == [traced]
    assert "2 inputs" in card  # drawn, and said apart from the nodes
    assert "ops only" in page.locator(".tf-legend").inner_text()  # the UI says what it counts
    assert not page.errors, page.errors


def test_the_ir_diff_marks_changed_code_not_realigned_comments(page, tmp_path) -> None:
    compilation = example()
    open_page(page, compilation, tmp_path / "stepper.html")
    fuse = stage_named(compilation, "fuse")
    go_to(page, fuse)  # the code column narrows
    lines = page.locator(".tf-ir-text .tf-line")
    marked = {mark: [lines.nth(i).inner_text()[2:] for i in range(lines.count())
                     if lines.nth(i).get_attribute("data-diff") == mark]
              for mark in ("same", "add", "del")}
    before = str(compilation.snapshots[fuse - 1].graph).split("\n")
    after = str(compilation.snapshots[fuse].graph).split("\n")
    fused = {i for c in compilation.snapshots[fuse].changes for i in c.nodes}
    removed = [line for line in before
               if re.match(r"\s+%(\d+) =", line) and int(re.match(r"\s+%(\d+)", line)[1]) in fused]
    assert len(removed) == 3
    assert set(marked["del"]) == {*removed, "  return %10"}
    at = next(i for i, line in enumerate(after) if "= fused_k1" in line)
    end = next(i for i in range(at + 1, len(after)) if after[i].endswith(" }"))
    added = [*after[at:end + 1], *(line for line in after if "return" in line)]  # node + body
    assert {line.split("#")[0].strip() for line in marked["add"]} == {
        line.split("#")[0].strip() for line in added}
    matmul = next(line for line in after if "matmul" in line)  # kept, shown as printed now
    assert matmul in marked["same"]
    # + the fused node, its 3 body lines and the return; − the 3 fused nodes and the return
    assert f"+{len(added)} −4 lines" in page.locator(".tf-ir-summary").inner_text()
    assert len(added) == 5
    assert not page.errors, page.errors


_CLASHES = """() => {
  const rects = (selector) => [...document.querySelectorAll(selector)].map((e) => {
    const r = e.getBoundingClientRect();
    return { id: e.closest("[data-node-id]").dataset.nodeId, l: r.left, r: r.right, t: r.top,
             b: r.bottom };
  });
  const clashes = (list) => {
    const out = [];
    list.forEach((a, i) => list.slice(i + 1).forEach((b) => {
      if (a.l < b.r - 0.5 && b.l < a.r - 0.5 && a.t < b.b - 0.5 && b.t < a.b - 0.5) {
        out.push([a.id, b.id]);
      }
    }));
    return out;
  };
  return { boxes: clashes(rects(".tf-graph .tf-node > rect.tf-box")),
           badges: clashes(rects(".tf-graph .tf-node .tf-badge rect")) };
}"""


def test_removed_nodes_stand_beside_what_replaced_them(page, tmp_path) -> None:
    compilation = example()
    open_page(page, compilation, tmp_path / "stepper.html")
    for i, snap in enumerate(compilation.snapshots):
        go_to(page, i)
        assert page.evaluate(_CLASHES) == {"boxes": [], "badges": []}, snap.pass_name
    # fuse: the kernel stands where its last op (%10 add) stood; that op moved aside, tied to it
    fuse = stage_named(compilation, "fuse")
    go_to(page, fuse)
    last = compilation.snapshots[fuse].changes[0].nodes[-1]
    gone = page.locator(f'.tf-nodes-removed [data-node-id="{last}"]')
    assert gone.get_attribute("data-status") == "removed"
    assert page.locator(f'.tf-tie[data-from="{last}"]').count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-removed-beside.png"))
    go_to(page, 2)
    page.screenshot(path=str(ARTIFACTS / "static-page-constant-fold.png"))
    assert not page.errors, page.errors


def training_step():
    """A staged SGD step: its graph computes new values of w and w.grad, written back."""
    w = tfl.tensor([[0.5], [-0.5], [1.0]], requires_grad=True)

    def step(x, y):
        w.grad = None
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        with tfl.no_grad():
            w.__isub__(0.1 * w.grad)
        return loss

    return tfl.compile(step, tfl.randn(8, 3), tfl.randn(8, 1))


def test_the_stepper_shows_what_a_step_writes_back(page, tmp_path) -> None:
    open_page(page, training_step(), tmp_path / "step.html")
    card = page.locator(".tf-rule").inner_text()
    assert "This function updates w, w.grad" in card
    for stage in range(int(page.locator(".tf-stages button").count())):
        go_to(page, stage)
        writes = page.locator(".tf-nodes .tf-writes text")
        assert sorted(writes.all_text_contents()) == ["→ w", "→ w.grad"], stage
    pill = page.locator(".tf-nodes .tf-writes text", has_text=re.compile(r"^→ w$"))
    pill.evaluate("e => e.closest('.tf-node').dispatchEvent(new MouseEvent('click', "
                  "{bubbles: true}))")
    details = page.locator(".tf-details").inner_text()
    assert "after each call, w takes this value" in details
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-updates.png"))
    assert not page.errors, page.errors


def test_keys_step_the_static_page_without_a_click_first(page, tmp_path) -> None:
    open_page(page, example(), tmp_path / "stepper.html")
    assert page.evaluate("document.activeElement === document.body")
    page.keyboard.press("ArrowRight")
    assert stage_of(page) == 1
    page.keyboard.press("j")
    assert stage_of(page) == 2
    page.keyboard.press("k")
    page.keyboard.press("ArrowLeft")
    assert stage_of(page) == 0
    page.click("h1")  # focus anywhere else on the page: the keys still step
    page.keyboard.press("j")
    assert stage_of(page) == 1
    page.keyboard.press("j")  # (to simplify: a stage that hiding the unchanged ones keeps)
    page.click(".tf-hide-unchanged")  # after a click on the checkbox, and on the slider
    page.click(".tf-hide-unchanged")
    page.keyboard.press("j")
    assert stage_of(page) == 3
    page.focus(".tf-slider")
    page.keyboard.press("k")
    assert stage_of(page) == 2
    page.keyboard.press("ArrowRight")  # the slider's own key: one step, not two (nor none)
    assert stage_of(page) == 3
    assert not page.errors, page.errors


def test_the_joined_stepper_module_hides_no_name_of_the_page(page) -> None:
    """The front-end's modules are joined into one module (`stepper_module`), and the static
    page's stand-in for anywidget's model runs in that module too: a top-level function named
    like a global of the page (`history`, `scrollTo`) would hide it from the stand-in."""
    from teachflow.viz.assets import stepper_module

    names = re.findall(r"^(?:function|const|let|class) (\w+)", stepper_module(), re.M)
    assert "render" in names
    page.goto("about:blank")
    assert page.evaluate("(names) => names.filter((name) => name in window)", names) == []


def test_a_big_compilation_opens_and_steps_without_freezing(page, tmp_path) -> None:
    def long(x):
        for i in range(150):
            x = (x * 1.001 + 0.5).tanh() - float(i % 3)
        return x

    compilation = tfl.compile(long, tfl.ones(4, 4), verify=False)
    path = tmp_path / "big.html"
    compilation.to_html(path)
    start = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage]")
    # The unrolled loop body is one source line repeated 150 times: drawn as a collapsed block.
    block = page.locator(".tf-graph .tf-block").first
    assert page.locator(".tf-graph .tf-block").count() >= 1
    size = int(block.get_attribute("data-block-size"))
    source = block.get_attribute("data-block-source")
    assert size >= 150 and source.startswith("test_browser.py:")
    assert "×150" in block.text_content()
    drawn = page.locator(".tf-graph .tf-nodes [data-node-id]").count()
    assert drawn < 20, drawn  # the members are folded away, not drawn one by one
    note = page.locator(".tf-view-note").inner_text()  # counts nodes as everywhere else
    assert f"of {len(compilation.snapshots[0].graph.nodes):,} nodes" in note, note
    ir = page.locator(".tf-ir-text")  # its first 400 lines, then all of them on a click
    assert ir.text_content().endswith("more lines (show all)\n")
    page.click(".tf-ir-text .tf-ir-skip")
    assert ir.text_content() == str(compilation.snapshots[0].graph)
    page.click(".tf-next")
    assert stage_of(page) == 1
    opened = time.perf_counter() - start
    render_ms = float(page.locator(".tf-stepper").get_attribute("data-render-ms"))
    print(f"{len(compilation.snapshots[0].graph)}-node page: interactive after {opened:.2f} s, "
          f"last redraw {render_ms:.0f} ms")

    # Back on the first stage, clicking the block shows its members, one box each.
    page.click('.tf-stages button[data-stage="0"]')
    assert stage_of(page) == 0
    page.locator(".tf-graph .tf-block").first.click()
    assert page.locator(".tf-graph .tf-block").count() == 0
    members = page.locator(".tf-graph .tf-nodes [data-node-id]")
    assert members.count() > 100
    assert "tanh" in page.locator(".tf-graph").text_content()
    # "expand all" draws every node; toggling it back collapses the block again.
    page.click(".tf-expand")
    assert members.count() == len(compilation.snapshots[0].nx)  # the input too
    page.click(".tf-expand")
    assert page.locator(".tf-graph .tf-block").count() >= 1
    assert not page.errors, page.errors


def test_chromium_rebuilds_each_stage_as_python_does(page) -> None:
    """The front-end's data.js, run by Chromium itself: each stage it puts together from the
    data is the full stage `teachflow.viz.expand` makes (which the stepper's tests check
    against the compilation)."""
    module = re.sub(r"^export ", "", (ROOT / "widgets" / "stepper" / "data.js").read_text(
        encoding="utf-8"), flags=re.M)
    page.set_content(f'<script type="module">{module}\n'
                     "window.stepperData = { loadSources, stageAt };</script>")
    page.wait_for_function("window.stepperData")
    for case, compile_case in sorted(CASES.items()):
        compilation = compile_case()
        data = compilation_data(compilation, compilation.example_inputs)
        rebuilt = page.evaluate("""async (data) => {
            const { loadSources, stageAt } = window.stepperData;
            const st = { data, full: new Map(), kernels: new Map() };
            await loadSources(st);
            return data.stages.map((_, i) => stageAt(st, i));
        }""", data)
        assert rebuilt == json.loads(json.dumps(expand(data))), case
    assert not page.errors, page.errors


def test_a_page_of_an_older_format_says_to_run_the_cell_again(page, tmp_path) -> None:
    """A notebook saved by an older teachflow keeps its widget's data in that one's format."""
    from teachflow.viz.html import page_html

    path = tmp_path / "older.html"
    path.write_text(page_html({"name": "f", "stages": [{"pass": "trace", "nodes": []}]}),
                    encoding="utf-8")
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-narration:has-text('older teachflow')")
    assert not page.errors, page.errors


def test_a_fused_kernel_shows_its_results_and_its_three_sources_side_by_side(page,
                                                                             tmp_path) -> None:
    compilation = CASES["two results"]()
    compilation(*compilation.example_inputs)  # (it has run: which CPU kernel ran is known)
    open_page(page, compilation, tmp_path / "kernel.html")
    go_to(page, len(compilation.snapshots) - 1)
    (kernel,) = [n for n in compilation.graph.nodes if n.op.name.startswith("fused")]
    box = page.locator(f'.tf-nodes [data-node-id="{kernel.id}"]')
    assert "2 results" in box.text_content()  # two edges leave it, one per result
    box.click()
    details = page.locator(".tf-details").text_content()
    readers = {n.inputs[0].id: n for n in compilation.graph.nodes if n is not kernel}
    for value in kernel.outputs:  # each result, the op whose value it is, and who reads it
        reader = readers[value.id]
        assert f"{value} {value.spec} (the value of its " in details
        assert f"%{reader.id} {reader.op.name}" in details
    assert f"On the CPU: {kernel.op.ran}" in details
    page.wait_for_selector(".tf-kernel-sources .tf-sources")
    columns = page.locator(".tf-kernel-sources .tf-source").all()
    assert [c.get_attribute("data-lang") for c in columns] == ["numpy", "c", "cuda"]
    boxes = [c.bounding_box() for c in columns]  # side by side: one row, left to right
    assert len({round(b["y"]) for b in boxes}) == 1
    assert boxes[0]["x"] < boxes[1]["x"] < boxes[2]["x"]
    for column, name in zip(columns, ("numpy_source", "c_source", "cuda_source"), strict=True):
        try:
            source = getattr(kernel.op, name)
        except Exception:  # (a generator not there yet: the column says so)
            assert "Not generated" in column.text_content()
            continue
        assert column.locator(".tf-code").text_content() == source
    ran = "c" if kernel.op.ran.startswith("C") else "numpy"
    marked = page.locator('.tf-source[data-ran="true"]')
    assert marked.get_attribute("data-lang") == ran and "ran on the CPU" in marked.text_content()
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-kernel-sources.png"), full_page=True)
    assert not page.errors, page.errors


def test_a_big_kernel_shows_the_start_of_each_source_then_all_of_it(page, tmp_path) -> None:
    compilation = tfl.compile(chain, tfl.randn(8, 8), 200)  # 800 ops in one kernel
    open_page(page, compilation, tmp_path / "chain.html")
    go_to(page, len(compilation.snapshots) - 1)
    (kernel,) = compilation.graph.nodes
    page.locator(f'.tf-nodes [data-node-id="{kernel.id}"]').click()
    numpy = page.locator('.tf-source[data-lang="numpy"]')
    numpy.locator(".tf-code").wait_for()
    shown = numpy.locator(".tf-code").text_content()
    assert kernel.op.numpy_source.startswith(shown) and shown.count("\n") == 299
    numpy.locator(".tf-source-all").click()
    assert numpy.locator(".tf-code").text_content() == kernel.op.numpy_source
    assert "800 ops in one kernel" in page.locator(".tf-details").text_content()
    ARTIFACTS.mkdir(exist_ok=True)
    page.locator(".tf-kernel-sources").screenshot(
        path=str(ARTIFACTS / "static-page-big-kernel.png"))
    assert not page.errors, page.errors


def halve(x):
    return x * 0.5


def halve_thrice(x):
    """Traced, a loop of three halvings unrolls into three nodes."""
    for _ in range(3):
        x = halve(x)
    return x


@tfl.script
def halve_while_big(x):
    """Scripted, the loop stays one node that owns its body."""
    while x.sum() > 1:
        x = halve(x)
    return x


def test_a_loop_is_a_box_that_opens_to_show_its_body(page, tmp_path) -> None:
    def f_dynamic(x):
        return tfl.while_loop(lambda x: x.sum() > 1, halve, x)

    compilation = tfl.compile(f_dynamic, tfl.tensor([4.0, 4.0]))
    open_page(page, compilation, tmp_path / "loop.html")
    (loop,) = compilation.snapshots[0].graph.nodes
    (mul,) = loop.params["body_fn"].nodes
    box = page.locator(f'.tf-cf-toggle[data-box="{loop.id}"]')
    body_node = page.locator(f'.tf-graph .tf-node[data-node-id="{mul.id}"]')
    assert box.get_attribute("aria-expanded") == "false"
    assert "cond_fn · body_fn" in box.text_content() and body_node.count() == 0
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-while-closed.png"))

    box.click()  # opens: the body's nodes are drawn inside the box, one panel per graph
    assert box.get_attribute("aria-expanded") == "true"
    assert body_node.count() == 1 and "mul" in body_node.text_content()
    titles = page.locator(".tf-cf-panel-title").all_text_contents()
    assert titles == ["cond_fn: <lambda>", "body_fn: halve"]
    assert f"Opened %{loop.id} = while" in page.locator(".tf-narration").inner_text()
    body_node.click()  # a node inside: its details, with its value in the loop's first step
    details = page.locator(".tf-details").inner_text()
    assert "first step" in details.lower() and "[2., 2.]" in details
    assert "body_fn (halve)" in details
    page.screenshot(path=str(ARTIFACTS / "static-page-while-open.png"))

    # Keys: Enter on the focused box closes it and opens it again; the focus stays on it.
    box.focus()
    page.keyboard.press("Enter")
    assert box.get_attribute("aria-expanded") == "false" and body_node.count() == 0
    assert page.evaluate("document.activeElement.dataset.box") == str(loop.id)
    page.keyboard.press(" ")
    assert box.get_attribute("aria-expanded") == "true" and body_node.count() == 1
    page.keyboard.press("j")  # the stepping keys still step
    assert stage_of(page) == 1
    assert not page.errors, page.errors


def test_a_call_is_a_box_that_opens_to_show_its_callee(page, tmp_path) -> None:
    halved = tfl.function(halve)

    def twice(x):
        return halved(x) + halved(x * 3.0)

    passes = ["simplify", "constant_fold", "cse", "dce", "fuse"]  # (no inline: calls stay)
    compilation = tfl.compile(twice, tfl.tensor([4.0, 4.0]), passes=passes)
    open_page(page, compilation, tmp_path / "call.html")
    call = compilation.snapshots[0].graph.nodes[0]
    (mul,) = call.params["callee"].nodes
    box = page.locator(f'.tf-cf-toggle[data-box="{call.id}"]')
    inner_node = page.locator(f'.tf-graph .tf-node[data-node-id="{mul.id}"]')
    assert box.get_attribute("aria-expanded") == "false"
    assert "callee" in box.text_content() and inner_node.count() == 0
    box.click()  # opens: the callee's nodes drawn inside the box
    assert box.get_attribute("aria-expanded") == "true"
    assert inner_node.count() == 1 and "mul" in inner_node.text_content()
    assert page.locator(".tf-cf-panel-title").all_text_contents() == ["callee: halve"]
    assert f"Opened %{call.id} = call" in page.locator(".tf-narration").inner_text()
    inner_node.click()  # its value, from the first call
    details = page.locator(".tf-details").inner_text()
    assert "first call" in details.lower() and "[2., 2.]" in details
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-call-open.png"))
    assert not page.errors, page.errors


def test_unrolled_and_scripted_side_by_side_step_on_their_own(page, tmp_path) -> None:
    x = tfl.tensor([4.0, 4.0])
    path = side_by_side_html({"f_static: traced, unrolled": tfl.compile(halve_thrice, x),
                              "f_dynamic: scripted": tfl.compile(halve_while_big, x)},
                             tmp_path / "pair.html")
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage]")
    static, dynamic = page.locator(".tf-stepper").all()
    assert static.locator(".tf-graph .tf-node").count() == 3 + 1  # three muls and the input
    assert dynamic.locator(".tf-cf-toggle").count() == 1  # one loop node, closed
    # Each fits its half of the page: its columns stack (one grid column), nothing overflows.
    for stepper in (static, dynamic):
        columns = stepper.locator(".tf-body").evaluate(
            "el => getComputedStyle(el).gridTemplateColumns.split(' ').length")
        assert columns == 1
        assert stepper.evaluate("el => el.scrollWidth <= el.clientWidth + 1")
    static.locator(".tf-next").click()
    assert static.get_attribute("data-current-stage") == "1"
    assert dynamic.get_attribute("data-current-stage") == "0"  # the other did not move
    dynamic.focus()
    page.keyboard.press("j")  # keys step the stepper that has the focus, only
    assert dynamic.get_attribute("data-current-stage") == "1"
    assert static.get_attribute("data-current-stage") == "1"
    dynamic.locator(".tf-cf-toggle").click()
    assert dynamic.locator(".tf-graph .tf-node", has_text="mul").count() == 1  # the body
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-side-by-side.png"), full_page=True)
    assert not page.errors, page.errors


def test_a_change_inside_a_branch_is_counted_on_its_box_and_shown_in_it(page, tmp_path) -> None:
    def f(x, p):  # CSE merges the two x * 2 inside the true branch
        return tfl.cond(p.sum() > 0, lambda x: x * 2 + x * 2, lambda x: x - 1.0, x)

    compilation = tfl.compile(f, tfl.tensor([4.0, 4.0]), tfl.tensor([1.0]))
    open_page(page, compilation, tmp_path / "cond.html")
    cse = [s.pass_name for s in compilation.snapshots].index("cse")
    (merge,) = compilation.snapshots[cse].changes
    go_to(page, cse)
    box = page.locator(".tf-cf-toggle")
    assert box.get_attribute("data-changes-inside") == "1"
    assert "1 change inside" in box.text_content()
    assert "tf-match-after" in box.get_attribute("class")  # the change is in there
    assert "true_fn" in page.locator(".tf-rule").inner_text()  # ... and the card says where
    page.click(".tf-change-next")  # selecting the change opens its box, to show it there
    assert box.get_attribute("aria-expanded") == "true"
    assert status_of(page, merge.result[0]) == "merged"
    assert page.locator(f'.tf-graph [data-node-id="{merge.nodes[0]}"]'
                        f'[data-status="removed"]').count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-cond-cse.png"))
    assert not page.errors, page.errors


# --- JupyterLab and Notebook 7 ------------------------------------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _notebook_dir(root: Path) -> None:
    nbformat = pytest.importorskip("nbformat")
    cells = [
        nbformat.v4.new_code_cell("%load_ext teachflow\nimport teachflow as tfl\n"
                                  "x, w = tfl.randn(4, 3), tfl.randn(3, 2)"),
        nbformat.v4.new_code_cell("%%compile\nh = ((x @ w).tanh() + (x @ w).tanh()) * 1.0\n"
                                  "h.sum()"),
    ]
    notebook = nbformat.v4.new_notebook(cells=cells, metadata={
        "kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    nbformat.write(notebook, root / "stepper.ipynb")


#: Where Jupyter keeps what a user's runs leave behind, each moved into the test's own folder;
#: also teachflow's cache of compiled C kernels (else ~/.cache/teachflow/kernels).
PRIVATE_DIRS = {"JUPYTER_CONFIG_DIR": "config", "JUPYTER_DATA_DIR": "data",
                "JUPYTER_RUNTIME_DIR": "runtime", "JUPYTERLAB_WORKSPACES_DIR": "workspaces",
                "JUPYTERLAB_SETTINGS_DIR": "settings", "IPYTHONDIR": "ipython",
                "npm_config_cache": "npm",  # (JupyterLab asks npm for its prefix: npm logs)
                "TEACHFLOW_CACHE": "kernels"}


def private_jupyter_env(base: Path, home: Path) -> dict[str, str]:
    """The environment of a test's Jupyter server: `home` as its home, and private Jupyter and
    IPython directories under `base`, so that what the user's (here: `home`'s) ~/.jupyter holds
    is not read, and nothing is written there."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("JUPYTER", "IPYTHON"))}  # (also JUPYTER_PATH and the like)
    env["HOME"] = str(home)
    for variable, folder in PRIVATE_DIRS.items():
        (base / folder).mkdir(parents=True, exist_ok=True)
        env[variable] = str(base / folder)
    return env


def plant_a_learners_home(home: Path) -> None:
    """What `make lab` leaves in a learner's home: a saved JupyterLab workspace with a lesson
    open (from a folder the tests' servers do not have), and a setting (the dark theme)."""
    workspaces = pytest.importorskip("jupyterlab_server.workspaces_handler")
    jupyter = home / ".jupyter"
    lesson = "notebook:lessons/01_tensors_and_the_tape.ipynb"
    workspace = {
        "data": {
            "layout-restorer:data": {
                "main": {"dock": {"type": "tab-area", "currentIndex": 0, "widgets": [lesson]},
                         "current": lesson},
                "left": {"collapsed": False, "visible": True, "current": "filebrowser",
                         "widgets": ["filebrowser"]},
                "right": {"collapsed": True, "visible": True, "widgets": []},
                "relativeSizes": [0.2, 0.8, 0]},
            lesson: {"data": {"path": lesson.split(":", 1)[1], "factory": "Notebook"}},
            "file-browser-filebrowser:cwd": {"path": "lessons"}},
        "metadata": {"id": "default"},
    }
    (jupyter / "lab" / "workspaces").mkdir(parents=True)
    workspaces.WorkspacesManager(jupyter / "lab" / "workspaces").save(
        "default", json.dumps(workspace))
    theme = jupyter / "lab" / "user-settings" / "@jupyterlab" / "apputils-extension"
    theme.mkdir(parents=True)
    (theme / "themes.jupyterlab-settings").write_text('{"theme": "JupyterLab Dark"}')


def files_under(folder: Path) -> dict[str, tuple[int, int]]:
    return {str(p.relative_to(folder)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in folder.rglob("*")}


@pytest.fixture(scope="module")
def learners_home(tmp_path_factory):
    """A home as a learner's looks after `make lab`; the tests must leave it as it was."""
    home = tmp_path_factory.mktemp("home")
    plant_a_learners_home(home)
    planted = files_under(home)
    yield home
    assert files_under(home) == planted, "a test's Jupyter server wrote into the user's home"


def start_jupyter(args: list[str], env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """A Jupyter server (``jupyter lab`` or ``jupyter notebook`` and `args`) on a loopback port,
    with a token; returns it and its base URL."""
    port, token = _free_port(), "teachflow-test"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", *args, "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", "--allow-root",
         "--expose-app-in-browser"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT, env=env)
    for _ in range(120):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    return server, f"http://127.0.0.1:{port}/?token={token}"


@pytest.fixture(scope="module", params=["lab", "notebook"], ids=["JupyterLab 4", "Notebook 7"])
def jupyter(request, tmp_path_factory, learners_home):
    """A Jupyter server on a loopback port, serving a notebook that uses %%compile."""
    app = request.param
    pytest.importorskip("jupyterlab" if app == "lab" else "notebook",
                        reason=f"jupyter {app} is not installed")
    root = tmp_path_factory.mktemp(app)
    _notebook_dir(root)
    env = private_jupyter_env(tmp_path_factory.mktemp(f"{app}-jupyter"), learners_home)
    server, url = start_jupyter([app, f"--ServerApp.root_dir={root}"], env)
    path = "lab/tree" if app == "lab" else "notebooks"
    yield app, url.replace("/?", f"/{path}/stepper.ipynb?")
    server.terminate()
    server.wait(timeout=30)


def test_the_stepper_works_in_jupyter(page, jupyter) -> None:
    from playwright.sync_api import TimeoutError  # Playwright's own, for the retry below

    app, url = jupyter
    page.set_default_timeout(90_000)
    page.goto(url)
    page.wait_for_function("window.jupyterapp && window.jupyterapp.commands")
    page.wait_for_selector(".jp-Notebook .jp-Cell")
    page.wait_for_function(  # the kernel is up
        "window.jupyterapp.shell.currentWidget && "
        "window.jupyterapp.shell.currentWidget.sessionContext && "
        "window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus === 'idle'")
    # Nothing of the learner's home came in: not their theme, not their saved workspace.
    page.wait_for_function("document.body.dataset.jpThemeLight !== undefined")
    assert page.evaluate("document.body.dataset.jpThemeLight") == "true"
    if app == "lab":
        assert page.evaluate("window.jupyterapp.shell.currentWidget.context.path") == \
            "stepper.ipynb"
        assert page.locator(".lm-TabBar-tab", has_text="01_tensors").count() == 0
    stepper = None
    for _ in range(3):  # a command sent while the notebook is still settling can be dropped
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        try:
            stepper = page.wait_for_selector(".jp-OutputArea .tf-stepper[data-current-stage]",
                                             timeout=30_000)
            break
        except TimeoutError:  # Playwright's: try once more
            continue
    assert stepper is not None, "the stepper never appeared in the notebook's output"
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"{app}-trace.png"))
    assert stepper.get_attribute("data-current-stage") == "0"
    page.click(".jp-OutputArea .tf-next")  # inline (nothing to inline), then simplify
    page.wait_for_selector(".jp-OutputArea .tf-stepper[data-current-stage='1']")
    page.click(".jp-OutputArea .tf-next")
    page.wait_for_selector(".jp-OutputArea .tf-stepper[data-current-stage='2']")
    narration = page.locator(".jp-OutputArea .tf-narration").inner_text()
    assert "2*f(x)" in narration
    page.screenshot(path=str(ARTIFACTS / f"{app}-simplify.png"))
    # In a notebook the keys belong to the stepper only while the focus is in it: elsewhere
    # j and k are the notebook's own (select the next or previous cell).
    page.evaluate("document.body.dispatchEvent(new KeyboardEvent('keydown', "
                  "{key: 'j', bubbles: true}))")
    assert page.locator(".jp-OutputArea .tf-stepper").get_attribute("data-current-stage") == "2"
    page.focus(".jp-OutputArea .tf-stepper")
    page.keyboard.press("j")
    page.wait_for_selector(".jp-OutputArea .tf-stepper[data-current-stage='3']")
    # Jupyter's own bundles may log their own hiccups (Notebook 7 reports a settings schema
    # error when a command arrives early); only errors from elsewhere are the stepper's.
    errors = [e for e in page.errors
              if "favicon" not in e and "/static/notebook/" not in e and "/static/lab/" not in e]
    assert not errors, json.dumps(errors)


def test_private_jupyter_dirs_keep_the_users_home_out(tmp_path) -> None:
    home = tmp_path / "home"
    plant_a_learners_home(home)
    env = private_jupyter_env(tmp_path / "jupyter", home)
    found = subprocess.run([sys.executable, "-m", "jupyter", "--paths", "--json"], env=env,
                           capture_output=True, text=True, check=True)
    paths = json.loads(found.stdout)
    assert env["JUPYTER_CONFIG_DIR"] in paths["config"]
    assert env["JUPYTER_DATA_DIR"] in paths["data"]
    assert paths["runtime"] == [env["JUPYTER_RUNTIME_DIR"]]
    every = [p for kind in paths.values() for p in kind]
    assert not [p for p in every if p.startswith(str(home))], every
    pytest.importorskip("jupyterlab")
    lab = subprocess.run([sys.executable, "-m", "jupyter", "lab", "path"], env=env,
                         capture_output=True, text=True, check=True).stdout
    assert f"User Settings directory: {env['JUPYTERLAB_SETTINGS_DIR']}" in lab
    assert f"Workspaces directory: {env['JUPYTERLAB_WORKSPACES_DIR']}" in lab


def test_make_lab_serves_the_repository_and_opens_on_the_lessons(page, tmp_path,
                                                                 learners_home) -> None:
    """`make lab`'s own command line: lesson 3 asks the learner to open
    teachflow/passes/cse.py, so the server's root is the repository, not lessons/; nothing
    pops up to ask about Jupyter's news."""
    if shutil.which("make") is None:
        pytest.skip("make is not installed")
    pytest.importorskip("jupyterlab")
    planned = subprocess.run(["make", "-n", "lab"], cwd=ROOT, capture_output=True, text=True,
                             check=True).stdout
    command = shlex.split(next(line for line in planned.splitlines() if "jupyter lab" in line))
    args = command[command.index("lab"):]
    env = private_jupyter_env(tmp_path / "jupyter", learners_home)
    server, url = start_jupyter(args, env)
    try:
        page.set_default_timeout(90_000)
        page.goto(url)
        page.wait_for_url(re.compile(r"/lab/tree/lessons"), timeout=30_000)
        listing = page.locator(".jp-DirListing-content")
        listing.locator(".jp-DirListing-item", has_text="03_passes_purity_and_fusion").wait_for()
        page.wait_for_function("document.body.dataset.jpThemeLight !== undefined")
        assert page.evaluate("document.body.dataset.jpThemeLight") == "true"  # not the home's
        assert "lessons" in page.locator(".jp-FileBrowser-crumbs").inner_text()
        # No pop-up asks about Jupyter's news or updates (lab-settings/overrides.json).
        notification = page.evaluate(
            "window.jupyterapp.serviceManager.settings"
            ".fetch('@jupyterlab/apputils-extension:notification')"
            ".then(plugin => plugin.schema.properties)")
        assert notification["fetchNews"]["default"] == "false"
        assert notification["checkForUpdates"]["default"] is False
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "make-lab.png"))
        assert not [t for t in page.locator(".Toastify__toast").all_inner_texts() if "news" in t]
        base, token = url.split("/?")
        for path in ("teachflow/passes/cse.py", "lessons/03_passes_purity_and_fusion.ipynb"):
            response = page.request.get(f"{base}/api/contents/{path}?content=0&{token}")
            assert response.status == 200, path
    finally:
        server.terminate()
        server.wait(timeout=30)
