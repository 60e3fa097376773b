"""Reading a code cell without running it: its Python, the names it defines and uses, its tests.

A notebook cell is Python with IPython's extras (``%load_ext teachflow``, ``%%compile``,
``!ls``). IPython turns those into plain Python (``get_ipython().run_line_magic(...)``) before
running a cell, and `python_source` does the same, so a cell parses as the kernel would see it.

From the parsed cell, grading reads three things, all without running anything:

- the names a cell *defines* at its top level (``def my_softmax``, ``x = ...``, ``import numpy
  as np``): which cell a test depends on;
- the names a cell *uses*: what a test cell needs from the notebook;
- the test functions of a test cell: ``def test_...():`` at the top level, as pytest collects
  them.

A cell that does not parse still defines something: `defined_names` then reads its lines that
start at the margin (``def f(``, ``class C``, ``x =``), so a syntax error in one solution cell
can be pinned on the tests that need its names, and only on them.
"""

from __future__ import annotations

import ast
import builtins
import re
import symtable

TEST_PREFIX = "test"  # pytest's default for test functions (its `python_functions` setting)


def python_source(source: str) -> str:
    """The cell as Python: IPython's syntax (magics, ``!shell``) rewritten as IPython does, and
    `source` unchanged when it is plain Python already, or does not parse either way (or
    IPython is not installed)."""
    try:
        ast.parse(source)
        return source
    except SyntaxError:
        pass
    try:
        from IPython.core.inputtransformer2 import TransformerManager
    except ImportError:
        return source
    try:
        python = TransformerManager().transform_cell(source)
        ast.parse(python)
    except SyntaxError:  # not IPython's syntax either: Python's own error is the one to show
        return source
    return python


def parse(source: str, filename: str = "<cell>") -> ast.Module:
    """The cell's syntax tree (IPython's syntax included); raises SyntaxError as Python would."""
    return ast.parse(python_source(source), filename)


def needs_ipython(source: str) -> bool:
    """Does the cell use IPython itself (a magic, ``!shell``, ``display``, ``get_ipython``)?"""
    python = python_source(source)
    if python != source:
        return True
    try:
        return bool({"display", "get_ipython"} & used_names(python))
    except SyntaxError:
        return False


_AT_MARGIN = re.compile(r"^(?:async\s+def|def|class)\s+(\w+)|^(\w+)\s*(?::[^=]*)?=(?!=)", re.M)


def defined_names(source: str) -> set[str]:
    """The names the cell binds at its top level (functions, classes, variables, imports).

    A cell that does not parse is read line by line: ``def f``, ``class C`` and ``x =`` at the
    left margin."""
    try:
        tree = parse(source)
    except SyntaxError:
        return {a or b for a, b in _AT_MARGIN.findall(source)}
    return _bound_at_top(tree.body)


def _bound_at_top(body: list[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for stmt in body:
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(stmt.name)
        elif isinstance(stmt, ast.Import | ast.ImportFrom):
            names.update((a.asname or a.name).split(".")[0] for a in stmt.names if a.name != "*")
        else:
            # Assignments, for/with targets, walrus: every name stored outside a nested scope.
            names.update(n.id for n in _walk_outside_scopes(stmt)
                         if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
            for block in ("body", "orelse", "finalbody", "handlers"):
                inner = getattr(stmt, block, [])
                names |= _bound_at_top([s for s in inner if isinstance(s, ast.stmt)])
                names |= {h.name for h in inner if isinstance(h, ast.ExceptHandler) and h.name}
    return names


def _walk_outside_scopes(node: ast.AST) -> list[ast.AST]:
    """`node` and what it contains, leaving out nested functions, classes and lambdas."""
    found, todo = [], [node]
    while todo:
        current = todo.pop()
        found.append(current)
        todo.extend(child for child in ast.iter_child_nodes(current)
                    if not isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef
                                      | ast.ClassDef | ast.Lambda | ast.stmt))
    return found


def used_names(source: str) -> set[str]:
    """The global names the cell's code reads (in functions too) that Python does not provide.

    Python's own compiler says which names are global: `symtable` gives each function's scope,
    so a test's local ``x`` is not mistaken for the notebook's ``x``."""
    found: set[str] = set()
    todo = [symtable.symtable(python_source(source), "<cell>", "exec")]
    while todo:
        table = todo.pop()
        todo.extend(table.get_children())
        top = table.get_type() == "module"  # (a StrEnum from Python 3.13)
        found.update(symbol.get_name() for symbol in table.get_symbols()
                     if symbol.is_referenced() and (top or symbol.is_global()))
    return {name for name in found if not hasattr(builtins, name)}


def test_functions(tree: ast.Module) -> list[str]:
    """The test functions pytest would collect from the cell: ``def test...`` at the top level."""
    return [stmt.name for stmt in tree.body
            if isinstance(stmt, ast.FunctionDef) and stmt.name.startswith(TEST_PREFIX)]
