"""The pass stepper widget: a compilation, stage by stage, inside the notebook.

The Python side is small on purpose. `PassStepper` is an anywidget whose front-end is the ES
modules of ``widgets/stepper/`` (with ``widgets/stepper.css``); it syncs two traits: ``data``, the
whole compilation as plain data (`teachflow.viz.stepper_data.compilation_data`: each node once, each
stage as the nodes it has), sent once, and ``stage``, the stage on show. Stepping happens in
the browser, so it needs no round trip to the kernel (which may be busy, or gone, once the
stepper is drawn). A notebook saved with its widget state shows it again when reopened; one
saved without shows that the widget's model is not found, and the cell must run again
(`Compilation.to_html` keeps a page that needs no kernel at all). ``compilation.show()`` makes
one; displaying a compilation shows one too. `side_by_side` puts several in one row (the same
program captured two ways, say): each stepper fits its own width, stacking its columns when it
is narrow.

The front-end's modules are joined into one (`teachflow.viz.assets.bundle`): anywidget loads
one module, from a string, as the static page of `teachflow.viz.html` does.
"""

from __future__ import annotations

from collections.abc import Mapping
from html import escape
from typing import Any

import anywidget
import traitlets

from teachflow.viz.assets import stepper_module, widget_file
from teachflow.viz.stepper_data import compilation_data


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
    row = ipywidgets.HBox(columns, layout=ipywidgets.Layout(width="100%", grid_gap="12px",
                                                            align_items="flex-start"))
    row.add_class("tf-side-by-side")  # (each stepper then fits a screen: see stepper.css)
    return row
