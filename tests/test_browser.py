"""The pass stepper in a real browser: Debian's Chromium driven by Playwright.

(a) The static page `Compilation.to_html` writes: step by click and by key, check which nodes
    carry which change mark, open a node's details, read the narration.
(b) JupyterLab 4 and Notebook 7 for real: start each on a loopback port with a notebook that
    uses ``%%compile``, run it, find the widget, step it. Screenshots go to ``test-artifacts/``.

These tests need Chromium (``apt-get install chromium``; `.ci/run` installs it) and skip with a
plain message where it is missing. Playwright never downloads a browser here: it is pointed at
``/usr/bin/chromium``.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

import teachflow as tfl

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
ARTIFACTS = Path(__file__).parent.parent / "test-artifacts"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]

pytestmark = pytest.mark.skipif(
    CHROMIUM is None,
    reason="browser tests skipped: Chromium not found (install Debian's chromium package)")


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
    def f(x, w):
        return ((x @ w).tanh() + (x @ w).tanh()) * 1.0 + tfl.full((), 2.0) * 3.0

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

    # Step by click: simplify rewrote f(x) + f(x) into 2*f(x).
    page.click(".tf-next")
    assert stage_of(page) == 1
    simplify = compilation.snapshots[1]
    doubled = next(c for c in simplify.changes if c.rule == "f(x) + f(x) -> 2*f(x)")
    assert status_of(page, doubled.result[0]) == "replaced"
    assert "2*f(x)" in page.locator(".tf-narration").inner_text()

    # Step by key, forwards and back.
    page.focus(".tf-stepper")
    page.keyboard.press("ArrowRight")
    page.keyboard.press("j")
    assert stage_of(page) == 3  # cse
    merged = compilation.snapshots[3].changes[0]
    assert status_of(page, merged.result[0]) == "merged"
    assert page.locator(f'[data-node-id="{merged.nodes[0]}"][data-status="removed"]').count()
    page.keyboard.press("k")
    assert stage_of(page) == 2

    # The last stage: one fused kernel; its details show the generated source.
    page.click(".tf-stages li:last-child" if page.locator(".tf-stages li").count()
               else ".tf-next")
    while stage_of(page) < len(compilation.snapshots) - 1:
        page.click(".tf-next")
    fused = next(n for n in compilation.graph.nodes if n.op.name.startswith("fused"))
    assert status_of(page, fused.id) == "fused"
    page.locator(f'.tf-nodes [data-node-id="{fused.id}"]').first.click()
    details = page.locator(".tf-details").inner_text()
    assert fused.op.name in details and "def fused_k1" in details
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
    go_to(page, len(compilation.snapshots) - 1)  # fuse: the code column narrows
    lines = page.locator(".tf-ir-text .tf-line")
    marked = {mark: [lines.nth(i).inner_text()[2:] for i in range(lines.count())
                     if lines.nth(i).get_attribute("data-diff") == mark]
              for mark in ("same", "add", "del")}
    before = str(compilation.snapshots[-2].graph).split("\n")
    after = str(compilation.snapshots[-1].graph).split("\n")
    fused = {i for c in compilation.snapshots[-1].changes for i in c.nodes}
    removed = [line for line in before
               if re.match(r"\s+%(\d+) =", line) and int(re.match(r"\s+%(\d+)", line)[1]) in fused]
    assert len(removed) == 3
    assert set(marked["del"]) == {*removed, "  return %10"}
    assert {line.split("#")[0].strip() for line in marked["add"]} == {
        line.split("#")[0].strip() for line in after if "fused_k1" in line or "return" in line}
    matmul = next(line for line in after if "matmul" in line)  # kept, shown as printed now
    assert matmul in marked["same"]
    assert "+2 −4 lines" in page.locator(".tf-ir-summary").inner_text()
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
    last = compilation.snapshots[-1].changes[0].nodes[-1]
    gone = page.locator(f'.tf-nodes-removed [data-node-id="{last}"]')
    assert gone.get_attribute("data-status") == "removed"
    assert page.locator(f'.tf-tie[data-from="{last}"]').count() == 1
    ARTIFACTS.mkdir(exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / "static-page-removed-beside.png"))
    go_to(page, 2)
    page.screenshot(path=str(ARTIFACTS / "static-page-constant-fold.png"))
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
    assert not page.errors, page.errors


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


# --- JupyterLab -----------------------------------------------------------------------------


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


@pytest.fixture(scope="module", params=["lab", "notebook"], ids=["JupyterLab 4", "Notebook 7"])
def jupyter(request, tmp_path_factory):
    """A Jupyter server on a loopback port, serving a notebook that uses %%compile."""
    app = request.param
    pytest.importorskip("jupyterlab" if app == "lab" else "notebook",
                        reason=f"jupyter {app} is not installed")
    root = tmp_path_factory.mktemp(app)
    _notebook_dir(root)
    port, token = _free_port(), "teachflow-test"
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", app, "--no-browser", f"--port={port}",
         "--ServerApp.ip=127.0.0.1", f"--IdentityProvider.token={token}", "--allow-root",
         f"--ServerApp.root_dir={root}", "--expose-app-in-browser"],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    for _ in range(120):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1):
                break
        except OSError:
            time.sleep(0.5)
    path = "lab/tree" if app == "lab" else "notebooks"
    yield app, f"http://127.0.0.1:{port}/{path}/stepper.ipynb?token={token}"
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
    page.click(".jp-OutputArea .tf-next")
    page.wait_for_selector(".jp-OutputArea .tf-stepper[data-current-stage='1']")
    narration = page.locator(".jp-OutputArea .tf-narration").inner_text()
    assert "2*f(x)" in narration
    page.screenshot(path=str(ARTIFACTS / f"{app}-simplify.png"))
    # In a notebook the keys belong to the stepper only while the focus is in it: elsewhere
    # j and k are the notebook's own (select the next or previous cell).
    page.evaluate("document.body.dispatchEvent(new KeyboardEvent('keydown', "
                  "{key: 'j', bubbles: true}))")
    assert page.locator(".jp-OutputArea .tf-stepper").get_attribute("data-current-stage") == "1"
    page.focus(".jp-OutputArea .tf-stepper")
    page.keyboard.press("j")
    page.wait_for_selector(".jp-OutputArea .tf-stepper[data-current-stage='2']")
    # Jupyter's own bundles may log their own hiccups (Notebook 7 reports a settings schema
    # error when a command arrives early); only errors from elsewhere are the stepper's.
    errors = [e for e in page.errors
              if "favicon" not in e and "/static/notebook/" not in e and "/static/lab/" not in e]
    assert not errors, json.dumps(errors)
