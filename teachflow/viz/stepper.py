"""The pass stepper widget: a compilation, stage by stage, inside the notebook.

The Python side is small on purpose. `PassStepper` is an anywidget whose front-end is the ES
modules of ``widgets/stepper/`` (with ``widgets/stepper.css``); it syncs two traits: ``data``, the
whole compilation as plain data (`teachflow.viz.data.compilation_data`: each node once, each
stage as the nodes it has), sent once, and ``stage``, the stage on show. Stepping happens in
the browser, so it needs no round trip to the kernel (which may be busy, or gone, once the
stepper is drawn). A notebook saved with its widget state shows it again when reopened; one
saved without shows that the widget's model is not found, and the cell must run again
(`Compilation.to_html` keeps a page that needs no kernel at all). ``compilation.show()`` makes
one; displaying a compilation shows one too. `side_by_side` puts several in one row (the same
program captured two ways, say): each stepper fits its own width, stacking its columns when it
is narrow.

The front-end is a few small ES modules (``widgets/stepper/``, one idea each), but anywidget
loads one module, from a string, so an ``import ... from "./draw.js"`` in it would have nothing
to resolve against; and the static page of `teachflow.viz.html` must be one file. So `bundle`
joins the modules into one, as a bundler would, in twenty lines: each module once, after the
modules it imports, without its ``import`` lines and with ``export`` dropped from its
declarations (the entry module keeps its own). (An import map of data: URLs would have to be in
the page before its first module loads, and a notebook's page has loaded many by then.) The
modules keep to what joining needs, and `bundle` checks it: imports of one form,
``import { a, b } from "./file.js";``, exports only before top-level declarations, and no
top-level name declared by two modules, as the joined module has one scope. (Nor is one named
like a global of the page, such as ``history``, which the static page's own lines would then
miss: a browser test checks that.)
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Mapping
from html import escape
from typing import Any

import anywidget
import traitlets

from teachflow.viz.assets import widget_file, widgets_folder
from teachflow.viz.data import compilation_data

#: ``import { a, b } from "./file.js";`` (over one line or several), and the file it names.
_IMPORT = re.compile(r'^import \{[^}]*\} from "\./([\w-]+\.js)";\n', re.M)
#: ``export`` before a top-level declaration, which leaves the declaration when dropped.
_EXPORT = re.compile(r"^export (?=(?:function|const|let|class) )", re.M)
#: A top-level declaration (a nested one is indented), and the name it declares.
_DECLARED = re.compile(r"^(?:export )?(?:function|const|let|class) (\w+)", re.M)


def bundle(folder: Any, entry: str) -> str:
    """The ES module `entry` of `folder` and every module it imports, joined into one module.

    Each module comes once, after the modules it imports (as a browser would run them), without
    its imports and, but for `entry`, without its exports. Raises `ValueError` for what the
    joined module could not keep: an import or export of another form, modules that import each
    other in a circle, or one top-level name declared twice.
    """
    texts: dict[str, str] = {}

    def visit(name: str, importers: tuple[str, ...]) -> None:
        if name in importers:
            raise ValueError(f"modules import each other in a circle: "
                             f"{' -> '.join((*importers, name))}")
        if name in texts:
            return
        text = (folder / name).read_text(encoding="utf-8")
        for imported in _IMPORT.findall(text):
            visit(imported, (*importers, name))
        texts[name] = text  # after what it imports

    visit(entry, ())
    parts = []
    for name, text in texts.items():
        text = _IMPORT.sub("", text)
        if name != entry:
            text = _EXPORT.sub("", text)
        odd = re.search(r"^import\b.*" if name == entry else r"^(?:import|export)\b.*", text, re.M)
        if odd:
            raise ValueError(f"{name}: bundle cannot join {odd.group()!r}")
        parts.append(f"// === {name} ===\n\n{text}")
    twice = [n for n, k in Counter(_DECLARED.findall("\n".join(texts.values()))).items() if k > 1]
    if twice:
        raise ValueError(f"declared in more than one module: {', '.join(twice)}")
    return "\n".join(parts)


def stepper_module() -> str:
    """The stepper's front-end as the one ES module anywidget and the static page load."""
    return bundle(widgets_folder() / "stepper", "widget.js")


class PassStepper(anywidget.AnyWidget):
    """Step through a compilation's passes: the graph, what changed and why, figures, IR."""

    _esm = stepper_module()
    _css = widget_file("stepper.css")

    data = traitlets.Dict().tag(sync=True)
    stage = traitlets.Int(0).tag(sync=True)

    @classmethod
    def for_compilation(cls, compilation: Any, example_inputs: list | None = None,
                        **kwargs: Any) -> PassStepper:
        """A stepper for `compilation`, with values computed on `example_inputs` if given."""
        return cls(data=compilation_data(compilation, example_inputs), **kwargs)

    @property
    def stage_name(self) -> str:
        """The pass whose result is on show ("trace" for the traced graph)."""
        return self.data["stages"][self.stage]["pass"] if self.data.get("stages") else ""

    def __repr__(self) -> str:
        count = len(self.data.get("stages", []))
        return (f"<PassStepper {self.data.get('name', '')}: stage {self.stage + 1} of {count}"
                f" ({self.stage_name})>")


def side_by_side(compilations: Mapping[str, Any]) -> Any:
    """Steppers for ``title: compilation`` pairs in one row, each under its title, each stepped
    on its own::

        side_by_side({"unrolled by tracing": tfl.compile(f_static, x),
                      "scripted": tfl.compile(tfl.script(f_dynamic), x)})
    """
    import ipywidgets

    columns = []
    for title, compilation in compilations.items():
        stepper = compilation.show()
        stepper.layout = ipywidgets.Layout(width="100%")
        columns.append(ipywidgets.VBox(
            [ipywidgets.HTML(f"<b>{escape(title)}</b>"), stepper],
            layout=ipywidgets.Layout(flex="1 1 0", min_width="0")))
    return ipywidgets.HBox(columns, layout=ipywidgets.Layout(width="100%", grid_gap="12px",
                                                             align_items="flex-start"))
