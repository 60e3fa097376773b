"""A compilation as one self-contained web page: the pass stepper outside a live kernel.

`to_html` writes a single HTML file holding the stepper's own front-end (the modules of
``widgets/stepper/`` joined into one by `teachflow.viz.stepper.stepper_module`, and
``stepper.css``, inline), the compilation's data (JSON, inline) and a few lines standing in
for anywidget's model (``get``, ``set``, ``on``, ``off``, ``save_changes``). The page needs no
server, no kernel and no network: open it, mail it, put it on a course website. ``#stage=3`` in
its address opens it on the fourth stage. The page holds just this one stepper, so its keys
(←/→, j/k) work as soon as the page opens, without a click into the stepper first.
"""

from __future__ import annotations

import json
from html import escape
from pathlib import Path
from typing import Any

from teachflow.viz.assets import widget_file
from teachflow.viz.data import compilation_data
from teachflow.viz.stepper import stepper_module

# The stand-in for anywidget's model, run after the stepper's module in the same module, so it
# can call the module's `render` directly.
_MODEL = """
const state = {
  data: JSON.parse(document.getElementById("teachflow-data").textContent),
  stage: Number((location.hash.match(/stage=(\\d+)/) || [0, 0])[1]),
};
const handlers = new Map();
const model = {
  get: (name) => state[name],
  set(name, value) {
    if (state[name] === value) return;
    state[name] = value;
    for (const handler of handlers.get(`change:${name}`) ?? []) handler();
  },
  on(event, handler) {
    if (!handlers.has(event)) handlers.set(event, new Set());
    handlers.get(event).add(handler);
  },
  off(event, handler) {
    handlers.get(event)?.delete(handler);
  },
  save_changes() {
    history.replaceState(null, "", `#stage=${state.stage}`);
  },
};
window.teachflowModel = model;
render({ model, el: document.getElementById("teachflow-stepper") });
"""

_PAGE_STYLE = """
body { margin: 16px; background: #fff; }
h1 { font: 600 16px system-ui, sans-serif; margin: 0 0 8px; }
"""


def page_html(data: dict) -> str:
    """The page for `data` (as made by `compilation_data`)."""
    name = escape(data.get("name", ""))
    # Inside a <script> element, "</" would end it and "<!--" with "<script" changes how the
    # browser reads it: every "<" is written as the JSON escape "\\u003c" (the same string).
    payload = json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")
    return "\n".join([
        "<!doctype html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>teachflow: {name}</title>",
        f"<style>{_PAGE_STYLE}\n{widget_file('stepper.css')}</style>",
        "</head>",
        "<body>",
        f"<h1>teachflow pass stepper: {name}</h1>",
        '<div id="teachflow-stepper" data-keys="page"></div>',  # its keys work page-wide
        f'<script type="application/json" id="teachflow-data">{payload}</script>',
        f'<script type="module">\n{stepper_module()}\n{_MODEL}</script>',
        "</body>",
        "</html>",
    ])


def to_html(compilation: Any, path: str | Path, example_inputs: list | None = None) -> Path:
    """Write the stepper for `compilation` to `path` as one self-contained HTML file."""
    path = Path(path)
    path.write_text(page_html(compilation_data(compilation, example_inputs)), encoding="utf-8")
    return path
