"""Seeing what the compiler does: graph layout, the pass stepper widget, static pages.

``side_by_side({"title": compilation, ...})`` shows several steppers in one row in a notebook;
``side_by_side_html`` writes them on one page."""

from __future__ import annotations

from typing import Any


def side_by_side(compilations: Any) -> Any:
    """Steppers for ``title: compilation`` pairs in one row (`teachflow.viz.stepper`)."""
    from teachflow.viz.stepper import side_by_side as widgets  # (imports the widget libraries)

    return widgets(compilations)


def side_by_side_html(compilations: Any, path: Any) -> Any:
    """One self-contained page with a stepper per ``title: compilation`` (`teachflow.viz.html`)."""
    from teachflow.viz.html import side_by_side_html as page

    return page(compilations, path)


__all__ = ["side_by_side", "side_by_side_html"]
