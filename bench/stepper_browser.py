"""The pass stepper in Chromium: how soon does a big page draw, and how fast does a step redraw?

For `compile_time.program` at about 500, 5,000 and 10,000 nodes, and the 5,000-node chain of
issue 13 (one fused kernel): write the self-contained page, open it in Debian's Chromium
(through Playwright), and time until the first stage is drawn (the best of three openings);
then step through every stage, reading the stepper's own redraw time (``data-render-ms``) for
each. Goals, side by side with what was measured: a 10,000-node compilation drawn within 2 s;
a step of a 500-node compilation within 100 ms. Needs ``/usr/bin/chromium`` and ``pip install
playwright``.

Run: ``python bench/stepper_browser.py``.
"""

from __future__ import annotations

import shutil
import statistics
import tempfile
import time
from pathlib import Path

import teachflow as tfl

from compile_time import program

ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync"]
OPEN_GOAL_S, STEP_GOAL_MS = 2.0, 100.0


def chain(y):  # (as in stepper.py)
    for _ in range(1250):
        y = (y * 1.5 + y).tanh() - y
    return y


def first_draw(browser, path: Path) -> float:
    """Seconds from asking for the page until its first stage is drawn."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    start = time.perf_counter()
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage='0']", timeout=120_000)
    seconds = time.perf_counter() - start
    page.close()
    return seconds


def redraws(browser, path: Path, stages: int) -> list[float]:
    """The stepper's own redraw time (ms) for each step through the stages."""
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    page.goto(path.as_uri())
    page.wait_for_selector(".tf-stepper[data-current-stage='0']", timeout=120_000)
    times = []
    for stage in range(1, stages):
        page.click(".tf-next")
        page.wait_for_selector(f".tf-stepper[data-current-stage='{stage}']")
        times.append(float(page.locator(".tf-stepper").get_attribute("data-render-ms")))
    page.close()
    return times


def main() -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Chromium not found: install Debian's chromium package to run this benchmark.")
        return
    from playwright.sync_api import sync_playwright

    cases = {f"program({blocks})": (program(blocks), 2) for blocks in (40, 375, 750)}
    cases["chain (issue 13)"] = (chain, 1)
    folder = Path(tempfile.mkdtemp())
    print(f"the stepper's page in Chromium (goals: 10,000 nodes drawn <= {OPEN_GOAL_S:.0f} s, "
          f"a step of 500 nodes <= {STEP_GOAL_MS:.0f} ms)")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
        for name, (f, arity) in cases.items():
            compilation = tfl.compile(f, *(tfl.randn(16, 16) for _ in range(arity)),
                                      verify=False)
            path = folder / "stepper.html"
            compilation.to_html(path)
            drawn = min(first_draw(browser, path) for _ in range(3))
            steps = redraws(browser, path, len(compilation.snapshots))
            nodes = len(compilation.snapshots[0].graph)
            goals = []
            if nodes >= 10_000:
                goals.append(f"open {'met' if drawn <= OPEN_GOAL_S else 'MISSED'}")
            if nodes <= 1_000:
                step = statistics.median(steps)
                goals.append(f"step {'met' if step <= STEP_GOAL_MS else 'MISSED'}")
            print(f"  {name:17s} {nodes:6,d} nodes, page {path.stat().st_size / 1e6:4.1f} MB: "
                  f"first stage drawn in {drawn:4.2f} s; a step redraws in "
                  f"{statistics.median(steps):4.0f} ms median, {max(steps):4.0f} ms worst"
                  + (f" ({', '.join(goals)})" if goals else ""))
        browser.close()


if __name__ == "__main__":
    main()
