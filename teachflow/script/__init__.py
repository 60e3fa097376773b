"""``@tfl.script``: the third way to capture a graph, from the function's source.

A graph can be built by hand (``with tfl.Graph():``, TensorFlow 1), traced (``tfl.function``,
``torch.jit.trace``: run the code once and record what it did), or *scripted* (TorchScript,
AutoGraph): read the code itself. Tracing sees only the path one run took, so a loop comes out
unrolled and ``while x.sum() > 1:`` cannot be traced at all. Scripting sees the statements: it
rewrites each ``if``, ``while`` and ``for i in range(...)`` whose condition or bound turns out
to be a tensor into `tfl.cond`, `tfl.while_loop` or `tfl.fori_loop`, so the loop stays a loop
in the graph::

    @tfl.script
    def f_dynamic(x):
        while x.sum() > 1:      # one `while` node, whose body calls g
            x = g(x)
        return x

Only statements that depend on a tensor change (AutoGraph's rule): Python control flow on
Python values stays Python, and unrolls when traced as before. The chapters:

- `rewrite`: the statements rewritten into functions and helper calls;
- `statements`: the helpers, which decide at run time between a graph node and Python;
- `convert`: reading the source and compiling the rewritten function in the user's world.

The tests hold a catalogue of what is supported and what is not (with the rewrite that works);
``docs/script.md`` prints it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from teachflow.script.convert import convert
from teachflow.staged.function import Function


def script(fn: Callable | None = None, **options: Any) -> Any:
    """``@tfl.script``: a `tfl.function` of `fn` with its ``if``/``while``/``for`` on tensors
    rewritten into graph control flow. It takes `tfl.function`'s options (``passes``,
    ``backend``, ...); its ``.code`` is the rewritten Python, to read."""
    def stage(f: Callable) -> Function:
        python = f.python_function if isinstance(f, Function) else f
        converted, code = convert(python)
        staged = Function(converted, **options)
        staged.code = code
        return staged

    return stage if fn is None else stage(fn)


__all__ = ["convert", "script"]
