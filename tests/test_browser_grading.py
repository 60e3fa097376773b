"""A learner checks an exercise in JupyterLab, as they would: run the notebook, then a cell
with ``tfl.grading.check()``, and read the report under it (Chromium, driven by Playwright)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_browser import (
    ARGS,
    ARTIFACTS,
    CHROMIUM,
    private_jupyter_env,
    start_jupyter,
    why_no_chromium,
)

from teachflow.grading import assign

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.skipif(CHROMIUM is None, reason=why_no_chromium() if CHROMIUM is None
                                else "")

SILU = "def silu_grad(g, x):\n    s = tfl.sigmoid(x)\n    return g * s * (1 + x * (1 - s))"


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """JupyterLab serving exercise 1 as a learner has it: silu answered, hypot a stub, and a
    cell that checks the notebook."""
    root = tmp_path_factory.mktemp("exercise")
    release = assign(ROOT / "exercises" / "01_gradient_rule.ipynb", root / "build",
                     verify=False).release
    notebook = json.loads(release.read_text())
    for cell in notebook["cells"]:
        if cell["metadata"].get("nbgrader", {}).get("grade_id") == "silu_grad":
            cell["source"] = SILU
    notebook["cells"].append({"cell_type": "code", "metadata": {}, "outputs": [],
                              "execution_count": None, "source": "tfl.grading.check()"})
    (root / "exercise.ipynb").write_text(json.dumps(notebook))
    env = private_jupyter_env(tmp_path_factory.mktemp("jupyter"), tmp_path_factory.mktemp("home"))
    server, url = start_jupyter(["lab", f"--ServerApp.root_dir={root}"], env)
    yield url.replace("/?", "/lab/tree/exercise.ipynb?")
    server.terminate()
    server.wait(timeout=30)


def test_a_learner_checks_an_exercise_in_jupyterlab(lab) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        page = browser.new_page(viewport={"width": 1280, "height": 900})
        page.set_default_timeout(120_000)
        page.goto(lab)
        page.wait_for_function("window.jupyterapp && window.jupyterapp.shell.currentWidget && "
                               "window.jupyterapp.shell.currentWidget.sessionContext && "
                               "window.jupyterapp.shell.currentWidget.sessionContext"
                               ".kernelDisplayStatus === 'idle'")
        idle = ("window.jupyterapp.shell.currentWidget.sessionContext.kernelDisplayStatus "
                "=== 'idle'")
        # Run all (which stops at the stub hypot's first call, as it would for the learner),
        # then the last cell, the check
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-all-cells')")
        page.locator(".jp-OutputArea-output", has_text="NotImplementedError").first.wait_for()
        page.wait_for_function(idle)
        page.evaluate("(() => { const notebook = window.jupyterapp.shell.currentWidget.content;"
                      " notebook.activeCellIndex = notebook.widgets.length - 1; })()")
        page.evaluate("window.jupyterapp.commands.execute('notebook:run-cell')")
        report = page.locator(".jp-OutputArea-output", has_text="Checking exercise.ipynb")
        report.wait_for()
        page.wait_for_function(idle)
        report.scroll_into_view_if_needed()
        ARTIFACTS.mkdir(exist_ok=True)
        page.screenshot(path=str(ARTIFACTS / "check-in-jupyterlab.png"))
        text = report.inner_text()
        browser.close()
    assert "PASSED        test_silu_grad (3 points): 2 tests" in text
    assert "NOT DONE YET  test_hypot_grads (3 points)" in text
    assert "hypot_grad_x still raises NotImplementedError" in text
    assert "In[" not in text  # cells named by their place in the notebook
    assert text.count("Checking exercise.ipynb") == 1  # shown once
