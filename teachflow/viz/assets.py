"""Where the front-end lives: the top-level ``widgets/`` folder of ES modules and CSS.

A wheel ships that folder inside the package as ``teachflow/widgets``; an editable install (a
checkout) has it only at the repository root, next to the package. Either way the widgets read
their files from here, so nothing is ever fetched from a CDN.

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

(This module imports no widget library: the static page needs none.)
"""

from __future__ import annotations

import re
from collections import Counter
from importlib.resources import files
from pathlib import Path
from typing import Any


def widgets_folder() -> Any:
    """The folder holding the front-end files (a `Traversable`, or a `Path` in a checkout)."""
    installed = files("teachflow") / "widgets"
    if installed.is_dir():
        return installed
    return Path(__file__).resolve().parents[2] / "widgets"


def widget_file(name: str) -> str:
    """The text of one front-end file, such as ``"stepper.css"``."""
    return (widgets_folder() / name).read_text(encoding="utf-8")


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
