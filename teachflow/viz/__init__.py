"""Seeing what the compiler does: graph layout, the pass stepper widget, static pages.

The chapters, in reading order:

- `layout`: where each node is drawn, the same place in every stage;
- `devices`: which device runs each node, told by the fill of its box;
- `values`: every value on the example inputs, as a summary of a few numbers;
- `expand`: the stepper's data as full stages, as the browser puts them together;
- `entries`: what the stepper's data reads off one node or one graph (text lines, a kernel's
  sources, values);
- `memory`: each stage's memory under its graph: the bytes held at each step, the peak, each
  value's range and slot;
- `stepper_data`: a compilation as the stepper's data: each node once, each stage as what it
  has (its docstring says the format);
- `assets`, `stepper`: the front-end's files, and the notebook widget;
- `html`: the stepper as one self-contained page;
- `svg`: a static picture of one stage;
- `groups`: a model's modules, each drawn as a box of the nodes it made;
- `watch`: a trace and a backward pass, watched step by step in the stepper.

``side_by_side({"title": compilation, ...})`` shows several steppers in one row in a notebook;
``side_by_side_html`` writes them on one page. ``show_trace(f, *args)`` steps through `f`'s
trace as each op is recorded, and ``show_backward(loss)`` through the backward pass over the
tape of `loss`, as each gradient is computed."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from teachflow.core.errors import TeachflowError


def side_by_side(compilations: Mapping[str, Any]) -> Any:
    """Steppers for ``title: compilation`` pairs in one row (`teachflow.viz.stepper`)."""
    from teachflow.viz.stepper import side_by_side as row  # (imports the widget libraries)

    return row(_checked(compilations, "side_by_side"))


def side_by_side_html(compilations: Mapping[str, Any], path: Any) -> Any:
    """One self-contained page with a stepper per ``title: compilation`` (`teachflow.viz.html`)."""
    from teachflow.viz.html import side_by_side_html as page

    return page(_checked(compilations, "side_by_side_html"), path)


def show_trace(f: Any, *args: Any) -> Any:
    """A stepper that watches `f` traced on `args`: one step per op recorded, as the graph
    builder records it (`teachflow.viz.watch.trace_steps`)."""
    from teachflow.viz.watch import trace_steps

    return trace_steps(f, *args).show()


def show_backward(loss: Any) -> Any:
    """A stepper that watches the backward pass over the tape of `loss`: one step per node it
    reaches, with the gradient computed there (`teachflow.viz.watch.backward_steps`). Nothing
    is written into any ``.grad``, and the tape is kept for ``loss.backward()``."""
    from teachflow.viz.watch import backward_steps

    return backward_steps(loss).show()


def _checked(compilations: Any, op: str) -> dict[str, Any]:
    example = f'{op}({{"unrolled": tfl.compile(f_static, x), "scripted": ' \
              'tfl.compile(tfl.script(f_dynamic), x)})'
    if not isinstance(compilations, Mapping) or not compilations:
        raise TeachflowError(f"{op} takes a dict of title: compilation, not "
                             f"{type(compilations).__name__} {compilations!r:.60}", op=op,
                             hint=example)
    for title, compilation in compilations.items():
        if not hasattr(compilation, "snapshots"):  # (what tfl.compile returns; viz reads first)
            raise TeachflowError(
                f"{title!r} is {type(compilation).__name__} {compilation!r:.60}, not a compilation",
                op=op, hint=f"make one with tfl.compile(f, *example_args): {example}")
    return {str(title): compilation for title, compilation in compilations.items()}


__all__ = ["show_backward", "show_trace", "side_by_side", "side_by_side_html"]
