"""The pass stepper in Chromium: how fast does a step redraw, and a big page become usable?

For a ~500-node and a ~5,000-node compilation: write the self-contained page, open it in
Debian's Chromium (through Playwright), time until the first stage is drawn and a first step has
been taken, then step through every stage and read the stepper's own redraw time
(``data-render-ms``) for each. Needs ``/usr/bin/chromium`` and ``pip install playwright``.

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


def main() -> None:
    chromium = shutil.which("chromium")
    if chromium is None:
        print("Chromium not found: install Debian's chromium package to run this benchmark.")
        return
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp())
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
        for blocks in (40, 375):
            compilation = tfl.compile(program(blocks), tfl.randn(16, 16), tfl.randn(16, 16),
                                      verify=False)
            path = folder / f"stepper-{blocks}.html"
            compilation.to_html(path)
            page = browser.new_page(viewport={"width": 1400, "height": 1000})
            start = time.perf_counter()
            page.goto(path.as_uri())
            page.wait_for_selector(".tf-stepper[data-current-stage='0']")
            page.click(".tf-next")
            page.wait_for_selector(".tf-stepper[data-current-stage='1']")
            interactive = time.perf_counter() - start
            redraws = []
            for stage in range(2, len(compilation.snapshots)):
                page.click(".tf-next")
                page.wait_for_selector(f".tf-stepper[data-current-stage='{stage}']")
                redraws.append(float(page.locator(".tf-stepper").get_attribute(
                    "data-render-ms")))
            nodes = len(compilation.snapshots[0].graph)
            print(f"{nodes:5d}-node compilation: page interactive (drawn and stepped once) in "
                  f"{interactive:.2f} s; a step redraws in {statistics.median(redraws):.0f} ms "
                  f"median, {max(redraws):.0f} ms worst")
            page.close()
        browser.close()
    print("goals: a step of a 500-node compilation under 100 ms; a 5,000-node compilation "
          "interactive in under 3 s")


if __name__ == "__main__":
    main()
