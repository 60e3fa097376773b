"""Where the front-end lives: the top-level ``widgets/`` folder of ES modules and CSS.

A wheel ships that folder inside the package as ``teachflow/widgets``; an editable install (a
checkout) has it only at the repository root, next to the package. Either way the widgets read
their files from here, so nothing is ever fetched from a CDN.
"""

from __future__ import annotations

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
