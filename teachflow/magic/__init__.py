"""The ``%%compile`` cell magic: stage a notebook cell, run it, and show the pass stepper.

    %load_ext teachflow

    %%compile
    h = (x @ w).relu()
    loss = (h * h).mean()
    loss

The cell is ordinary Python. The magic turns it into a function whose arguments are the tensors
the cell reads from the notebook (``x`` and ``w`` above: they are the *dynamic* inputs; anything
else it reads, such as functions and numbers, stays as it is), compiles that function with the
pass pipeline, runs it, and shows the stepper. Afterwards the notebook has the cell's variables
(``h``, ``loss``), ``result`` (the cell's last expression) and ``compiled`` (the `Compilation`,
callable again on new inputs of the same signature).

Which tensors are inputs is decided by reading the cell in the order Python runs it
(`CellReads`): a name the cell reads *before* it assigns it comes from the notebook, a name it
has already assigned is its own. So ``h`` and ``loss`` above are never inputs, even after a
first run has left tensors of those names in the notebook, and running a cell twice gives the
same graph.

The chapters, in the order the magic uses them: `cell` (where the cell is, and the function it
becomes), `reads` (what the cell reads, in the order Python runs it) and `options` (what the
``%%compile`` line asks for).
"""

from __future__ import annotations

from typing import Any

from teachflow.magic.cell import LAST, NotebookCell, cell_function
from teachflow.magic.options import read_options
from teachflow.magic.reads import CellReads
from teachflow.tensor.tensor import Tensor

__all__ = ["CellReads", "compile_magic", "load_ipython_extension"]


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext teachflow``: register ``%%compile``."""
    ipython.register_magic_function(compile_magic, magic_kind="cell", magic_name="compile")


def compile_magic(line: str, cell: str) -> Any:
    """%%compile [--passes a,b,...|none] [--device cpu|gpu] [--html PATH] [--no-show]
    [--name NAME]"""
    from IPython import get_ipython
    from IPython.display import display

    import teachflow as tfl

    shell = get_ipython()
    where = NotebookCell.register(shell, line, cell)
    namespace = shell.user_ns
    tree = where.parse(cell)
    reads = CellReads.of(tree)
    inputs = [name for name in reads.before_bound if name not in reads.maybe_own
              and isinstance(namespace.get(name), Tensor)]
    options = read_options(line, where.magic_line, taken={*reads.bound, *reads.before_bound},
                           namespace=namespace)
    values = {name: namespace[name] for name in reads.before_bound
              if name in reads.bound and name not in inputs and name in namespace}
    fn = cell_function(tree, inputs, values, reads.bound, namespace, where,
                       script=options["script"])
    args = [namespace[name] for name in inputs]
    if options["device"]:
        args = [a.to(options["device"]) for a in args]
    compilation = tfl.compile(fn, *args, passes=options["passes"])
    outputs = compilation(*args)
    last = outputs.pop(LAST, None)
    namespace.update(outputs)
    namespace["result"] = last
    namespace[options["name"]] = compilation
    if options["html"]:
        compilation.to_html(options["html"])
    if options["show"]:
        display(compilation)
    return last
