"""A compilation as one self-contained web page: the pass stepper outside a live kernel.

`to_html` writes a single HTML file holding the stepper's own front-end (the modules of
``widgets/stepper/`` joined into one by `teachflow.viz.assets.stepper_module`, and
``stepper.css``, inline), the compilation's data (JSON, inline) and a few lines standing in
for anywidget's model (``get``, ``set``, ``on``, ``off``, ``save_changes``). The page needs no
server, no kernel and no network: open it, mail it, put it on a course website. ``#stage=3`` in
its address opens it on the fourth stage. The page holds just this one stepper, so its keys
(←/→, j/k) work as soon as the page opens, without a click into the stepper first.

`side_by_side_html` writes several compilations on one page, each in a stepper of its own,
side by side (the same program captured two ways, say): each has its own model, and its keys
work once it has the focus, as in a notebook.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from html import escape
from pathlib import Path
from typing import Any

from teachflow.viz.assets import stepper_module, widget_file
from teachflow.viz.stepper_data import compilation_data

# The stand-in for anywidget's model, run after the stepper's module in the same module, so it
# can call the module's `render` directly: one model per stepper on the page. Only a page of one
# stepper keeps its stage in the address (#stage=3).
_MODEL = """
function teachflowModel(id, alone) {
  const state = {
    data: JSON.parse(document.getElementById(`${id}-data`).textContent),
    stage: alone ? Number((location.hash.match(/stage=(\\d+)/) || [0, 0])[1]) : 0,
  };
  const handlers = new Map();
  return {
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
      if (alone) history.replaceState(null, "", `#stage=${state.stage}`);
    },
  };
}
const ids = [...document.querySelectorAll(".teachflow-panel")].map((panel) => panel.id);
window.teachflowModels = ids.map((id) => {
  const model = teachflowModel(id, ids.length === 1);
  render({ model, el: document.getElementById(id) });
  return model;
});
window.teachflowModel = window.teachflowModels[0];
"""

_PAGE_STYLE = """
body { margin: 16px; background: #fff; }
h1 { font: 600 16px system-ui, sans-serif; margin: 0 0 8px; }
h2 { font: 600 14px system-ui, sans-serif; margin: 0 0 6px; }
.teachflow-side-by-side { display: flex; gap: 12px; align-items: flex-start; }
.teachflow-side-by-side > section { flex: 1 1 0; min-width: 0; }
"""


def _json(data: dict) -> str:
    # Inside a <script> element, "</" would end it and "<!--" with "<script" changes how the
    # browser reads it: every "<" is written as the JSON escape "\\u003c" (the same string).
    return json.dumps(data, separators=(",", ":"), ensure_ascii=False).replace("<", "\\u003c")


def page_html(data: dict) -> str:
    """The page for `data` (as made by `compilation_data`)."""
    name = escape(data.get("name", ""))
    # Its keys work page-wide: the page holds nothing else.
    body = ['<div id="teachflow-stepper" class="teachflow-panel" data-keys="page"></div>',
            f'<script type="application/json" id="teachflow-stepper-data">{_json(data)}</script>']
    return _page(f"teachflow: {name}", f"teachflow pass stepper: {name}", body)


def side_by_side_page_html(panels: Mapping[str, dict]) -> str:
    """One page with a stepper for each ``title: data`` of `panels`, side by side."""
    body = ['<div class="teachflow-side-by-side tf-side-by-side">']
    for k, (title, data) in enumerate(panels.items()):
        body += [f"<section><h2>{escape(title)}</h2>",
                 f'<div id="teachflow-stepper-{k}" class="teachflow-panel"></div>',
                 f'<script type="application/json" id="teachflow-stepper-{k}-data">'
                 f"{_json(data)}</script>", "</section>"]
    body.append("</div>")
    titles = " | ".join(panels)
    return _page(f"teachflow: {escape(titles)}", "teachflow pass steppers, side by side", body)


def _page(title: str, heading: str, body: list[str]) -> str:
    return "\n".join([
        "<!doctype html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        f"<title>{title}</title>",
        f"<style>{_PAGE_STYLE}\n{widget_file('stepper.css')}</style>",
        "</head>",
        "<body>",
        f"<h1>{heading}</h1>",
        *body,
        f'<script type="module">\n{stepper_module()}\n{_MODEL}</script>',
        "</body>",
        "</html>",
    ])


def to_html(compilation: Any, path: str | Path, example_inputs: list | None = None) -> Path:
    """Write the stepper for `compilation` to `path` as one self-contained HTML file."""
    path = Path(path)
    path.write_text(page_html(compilation_data(compilation, example_inputs)), encoding="utf-8")
    return path


def side_by_side_html(compilations: Mapping[str, Any], path: str | Path) -> Path:
    """Write one self-contained page with a stepper for each ``title: compilation``, side by
    side (each with the values of its own example inputs)."""
    path = Path(path)
    panels = {title: compilation_data(c, c.example_inputs) for title, c in compilations.items()}
    path.write_text(side_by_side_page_html(panels), encoding="utf-8")
    return path
