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

The function is compiled from the cell's own syntax tree, so its line numbers are the cell's:
an error in the cell points to the cell's line, as it would without the magic.
"""

from __future__ import annotations

import ast
import shlex
from typing import Any

from teachflow.errors import TeachflowError
from teachflow.tensor import Tensor

_LAST = "__teachflow_last_expression__"


def load_ipython_extension(ipython: Any) -> None:
    """``%load_ext teachflow``: register ``%%compile``."""
    ipython.register_magic_function(compile_magic, magic_kind="cell", magic_name="compile")


def compile_magic(line: str, cell: str) -> Any:
    """%%compile [--passes a,b,...] [--device cpu|gpu] [--html PATH] [--no-show] [--name NAME]"""
    from IPython import get_ipython
    from IPython.display import display

    import teachflow as tfl

    shell = get_ipython()
    options = _parse(line)
    namespace = shell.user_ns
    filename = shell.compile.cache(cell, shell.execution_count, raw_code=cell)
    tree = ast.parse(cell, filename=filename)
    inputs = _tensor_inputs(tree, namespace)
    fn = _cell_function(tree, inputs, namespace, filename)
    args = [namespace[name] for name in inputs]
    if options["device"]:
        args = [a.to(options["device"]) for a in args]
    compilation = tfl.compile(fn, *args, passes=options["passes"])
    outputs = compilation(*args)
    last = outputs.pop(_LAST, None)
    namespace.update({k: v for k, v in outputs.items() if k in _assigned(tree)})
    namespace["result"] = last
    namespace[options["name"]] = compilation
    if options["html"]:
        compilation.to_html(options["html"])
    if options["show"]:
        display(compilation)
    return last


def _parse(line: str) -> dict:
    words = shlex.split(line)
    options: dict[str, Any] = {"passes": "default", "device": None, "html": None, "show": True,
                               "name": "compiled"}
    flags = {"--passes": "passes", "--device": "device", "--html": "html", "--name": "name"}
    i = 0
    while i < len(words):
        word = words[i]
        if word == "--no-show":
            options["show"] = False
        elif word in flags and i + 1 < len(words):
            options[flags[word]] = words[i + 1]
            i += 1
        else:
            raise TeachflowError(f"%%compile does not understand {word!r}", op="%%compile",
                                 hint="options: --passes a,b,c  --device cpu|gpu  --html PATH  "
                                      "--no-show  --name NAME")
        i += 1
    if options["passes"] != "default":
        options["passes"] = [p for p in options["passes"].split(",") if p] or None
    return options


def _tensor_inputs(tree: ast.Module, namespace: dict) -> list[str]:
    """The names the cell reads that hold tensors in the notebook: the staged inputs."""
    read = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and node.id not in read:
            read.append(node.id)
    return [name for name in read if isinstance(namespace.get(name), Tensor)]


def _at_line(node: ast.AST, line: int, end: int | None = None) -> ast.AST:
    """Give a node made here (and its new children) a place in the cell."""
    for child in ast.walk(node):
        if "lineno" in child._attributes and not hasattr(child, "lineno"):
            child.lineno, child.end_lineno = line, end or line
            child.col_offset, child.end_col_offset = 0, 0
    return node


def _assigned(tree: ast.Module) -> set[str]:
    """The names the cell assigns (they go back into the notebook afterwards)."""
    return {node.id for node in ast.walk(tree)
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store)}


def _cell_function(tree: ast.Module, inputs: list[str], namespace: dict, filename: str) -> Any:
    """``def cell(<inputs>): <the cell>; return <its variables and last expression>``, built
    from the cell's own syntax tree so that every line keeps its number."""
    body = list(tree.body)
    if body and isinstance(body[-1], ast.Expr):  # the value a notebook would display
        last = body.pop()
        body.append(ast.Assign(targets=[ast.Name(_LAST, ast.Store())], value=last.value,
                               lineno=last.lineno, col_offset=last.col_offset))
    # return dict(locals()): every variable of the cell, as the function's results
    everything = ast.Call(ast.Name("dict", ast.Load()),
                          [ast.Call(ast.Name("locals", ast.Load()), [], [])], [])
    end = max((getattr(n, "end_lineno", 1) or 1 for n in ast.walk(tree)), default=1)
    body.append(_at_line(ast.Return(everything), end))
    arguments = ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in inputs], kwonlyargs=[],
                              kw_defaults=[], defaults=[])
    function = ast.FunctionDef(name="cell", args=arguments, body=body, decorator_list=[],
                               returns=None)
    module = ast.Module(body=[_at_line(function, 1, end)], type_ignores=[])
    ast.fix_missing_locations(module)
    scope: dict[str, Any] = {}
    exec(compile(module, filename, "exec"), namespace, scope)  # the learner's own cell
    return scope["cell"]
