"""The notebook cell being compiled: where it is, and the function it becomes.

The function is compiled from the cell's own syntax tree, numbered as the notebook shows the cell
(the ``%%compile`` line is line 1) and registered with IPython under the cell's number, so that an
error in the cell, or in the magic's options, points to ``cell In[N], line L`` as it would
without the magic.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass
from typing import Any

from teachflow.core.errors import SourceLocation, TeachflowError
from teachflow.script import statements
from teachflow.script.rewrite import HELPER, StatementRewriter

#: The name the cell's last expression (the value a notebook would display) is returned under.
LAST = "__teachflow_last_expression__"
_VALUES = "__teachflow_notebook_values__"


@dataclass(frozen=True)
class NotebookCell:
    """The notebook cell being compiled, numbered as the notebook shows it.

    IPython counts a cell's number up *before* the cell runs, so while ``%%compile`` runs,
    ``shell.execution_count`` is already the next cell's number: the running cell's own number
    is the one IPython gave its `ExecutionResult` (``shell.displayhook.exec_result``).
    """

    number: int  # the N of In[N] beside the cell
    filename: str  # the name the cell's code is registered under with IPython
    body_line: int  # the cell's line where the magic's body starts (after %%compile)

    @property
    def magic_line(self) -> SourceLocation:
        """The ``%%compile`` line, for errors in the magic's options."""
        return SourceLocation(self.filename, self.body_line - 1, "%%compile")

    @classmethod
    def register(cls, shell: Any, line: str, body: str) -> NotebookCell:
        """Register the cell's text with IPython under its number, so that `SourceLocation`
        (and IPython's own tracebacks) print its lines as ``cell In[N], line L``."""
        running = getattr(shell.displayhook, "exec_result", None)  # set while a cell runs
        number = running.execution_count if running is not None else shell.execution_count
        text, body_line = _cell_text(running.info.raw_cell if running is not None else "",
                                     line, body)
        filename = shell.compile.cache(text, number, raw_code=text)
        return cls(number, filename, body_line)

    def parse(self, body: str) -> ast.Module:
        """The magic's body as Python, its lines numbered as the notebook shows them. What
        Python would refuse in the cell without the magic is refused at the same line: a
        syntax error, and ``return`` or ``yield`` outside a function."""
        try:
            tree = ast.parse("\n" * (self.body_line - 1) + body, filename=self.filename)
        except SyntaxError as err:
            raise TeachflowError(
                f"the cell is not valid Python: {err.msg}", op="%%compile",
                location=SourceLocation(self.filename, err.lineno or 1),
                hint="fix the line shown; %%compile runs ordinary Python") from None
        _check_cell(tree, self)
        return tree


def _cell_text(raw_cell: str, line: str, body: str) -> tuple[str, int]:
    """The cell as the notebook shows it, and the line its body starts on. That is the cell as
    typed when it is the one running this magic (IPython drops blank lines before ``%%``);
    otherwise (the magic called from code) the magic's line and body."""
    lines = raw_cell.splitlines(keepends=True)
    first = next((i for i, text in enumerate(lines) if text.strip()), None)
    if (first is not None and lines[first].startswith("%%")
            and "".join(lines[first + 1:]).rstrip() == body.rstrip()):
        return raw_cell, first + 2
    return f"%%compile {line}\n{body}", 2


def _check_cell(tree: ast.Module, where: NotebookCell) -> None:
    """A cell is a module's code: ``return`` and ``yield`` outside a function are errors, as
    Python says of a cell without the magic (the magic's function would take them)."""
    functions = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, functions):
            continue
        if isinstance(node, ast.Return | ast.Yield | ast.YieldFrom):
            what = "return" if isinstance(node, ast.Return) else "yield"
            raise TeachflowError(f"'{what}' outside a function: a cell is not a function body",
                                 op="%%compile", location=SourceLocation(where.filename,
                                                                         node.lineno),
                                 hint="end the cell with the expression to show (its value "
                                      "becomes `result`)")
        stack += ast.iter_child_nodes(node)


# --- The cell as a function ---------------------------------------------------------------------


def cell_function(tree: ast.Module, inputs: list[str], values: dict[str, Any], bound: set[str],
                  namespace: dict, where: NotebookCell, script: bool = False) -> Any:
    """The cell as a function, built from the cell's own syntax tree so that every line keeps
    its number (the lines made here stand on the ``%%compile`` line, the return on the last)::

        def cell(<inputs>):
            n = <the notebook's n>      # other values the cell reads before it assigns them
            <the cell, its last expression assigned to a name>
            return {<the names the cell binds, and the last expression>}

    With `script`, its ``if``/``while``/``for`` statements are rewritten as ``@tfl.script``
    rewrites a function's (`teachflow.script.rewrite`).
    """
    at = where.body_line - 1
    body = [_statement_at(f"{name} = {_VALUES}[{name!r}]", at) for name in values]
    body.extend(tree.body)
    returned = set(bound)
    if tree.body and isinstance(tree.body[-1], ast.Expr):  # the value a notebook would display
        last = body.pop()
        target = ast.copy_location(ast.Name(LAST, ast.Store()), last)
        body.append(ast.copy_location(ast.Assign(targets=[target], value=last.value), last))
        returned.add(LAST)
    end = max((getattr(n, "end_lineno", None) or at for n in ast.walk(tree)), default=at)
    # The first iterable of a comprehension is evaluated in the enclosing function, so this
    # `locals()` is the cell's: the variables it bound (a name left unbound is left out).
    body.append(_statement_at(
        f"return {{k: v for k, v in locals().items() if k in {sorted(returned)!r}}}", end))
    maker = _statement_at(f"def make({_VALUES}, {HELPER}):\n"
                          f"    def cell({', '.join(inputs)}):\n"
                          "        pass\n"
                          "    return cell", at)
    maker.body[0].body = body
    if script:
        StatementRewriter().function(maker.body[0])
    module = ast.Module(body=[maker], type_ignores=[])
    scope: dict[str, Any] = {}
    exec(compile(module, where.filename, "exec"), namespace, scope)  # the learner's own cell
    return scope["make"](values, statements)


def _statement_at(source: str, line: int) -> ast.stmt:
    """A statement written here, placed on `line` of the cell."""
    statement = ast.parse(source).body[0]
    for node in ast.walk(statement):
        if "lineno" in node._attributes:
            node.lineno = node.end_lineno = line
            node.col_offset = node.end_col_offset = 0
    return statement
