"""pytest's trick, in small: rewrite each ``assert`` so that a failure keeps its values.

When ``assert got == expected`` fails, Python raises a bare ``AssertionError``: ``got`` and
``expected`` were computed and thrown away. pytest rewrites every assert of a test module
before it compiles it, so that each operand is kept in a variable first; teachflow does the same
to a test cell. The assert::

    assert my_softmax(x).shape == (3,)

is compiled as::

    _tf_1 = my_softmax(x).shape
    _tf_2 = (3,)
    if not _tf_1 == _tf_2:
        raise __teachflow_assert__('==', 4, 'my_softmax(x).shape == (3,)',
                                   ('my_softmax(x).shape', '(3,)'), (_tf_1, _tf_2), None)

Each operand is computed once, in Python's order, exactly as before; only a failure does more,
turning the kept values into an `AssertionFailure` that `teachflow.grading.explain` puts into
words. A comparison keeps both sides, a call (``np.allclose(a, b)``) its arguments and its
result, anything else its value. When the left side is a literal (``assert (3,) ==
y.shape``), the right is taken as the value got.
"""

from __future__ import annotations

import ast
from typing import Any

from teachflow.grading.explain import explain, is_literal

HELPER = "__teachflow_assert__"  # the name the rewritten code calls; put into its namespace
_OPS = {ast.Eq: "==", ast.NotEq: "!=", ast.Lt: "<", ast.LtE: "<=", ast.Gt: ">", ast.GtE: ">=",
        ast.In: "in", ast.NotIn: "not in", ast.Is: "is", ast.IsNot: "is not"}


class AssertionFailure(AssertionError):
    """A failed ``assert`` of a test, with its line and the values it compared, in words."""

    def __init__(self, lineno: int, statement: str, details: list[str]) -> None:
        super().__init__("\n".join([statement, *details]))
        self.lineno, self.statement, self.details = lineno, statement, details


def assertion_failed(kind: str, lineno: int, text: str, labels: tuple[str, ...],
                     values: tuple[Any, ...], message: Any) -> AssertionFailure:
    """The exception a rewritten assert raises (the helper the rewritten code calls)."""
    if kind == "==" and is_literal(labels[0]) and not is_literal(labels[1]):
        labels, values = labels[::-1], values[::-1]  # `assert 3 == f(x)`: f(x) is what we got
    details = explain(kind, labels, values)
    if message is not None:
        details.insert(0, f"message: {message}")
    return AssertionFailure(lineno, f"assert {text}", details)


class _Rewriter(ast.NodeTransformer):
    def __init__(self, source: str) -> None:
        self.source, self.count = source, 0

    def _keep(self, node: ast.expr, into: list[ast.stmt]) -> ast.Name:
        """Compute `node` into a new variable (a statement appended to `into`)."""
        self.count += 1
        name = f"_tf_{self.count}"
        into.append(ast.Assign([ast.Name(name, ast.Store())], node))
        return ast.Name(name, ast.Load())

    def _text(self, node: ast.AST) -> str:
        return ast.get_source_segment(self.source, node) or ast.unparse(node)

    def visit_Assert(self, node: ast.Assert) -> list[ast.stmt]:
        test, kept = node.test, []
        if isinstance(test, ast.Compare) and len(test.ops) == 1:
            operands = [test.left, test.comparators[0]]
            kind, values = _OPS[type(test.ops[0])], [self._keep(n, kept) for n in operands]
            failed: ast.expr = ast.UnaryOp(ast.Not(), ast.Compare(values[0], test.ops,
                                                                  [values[1]]))
        elif (isinstance(test, ast.Call) and not any(isinstance(a, ast.Starred) for a in test.args)
              and all(k.arg for k in test.keywords)):
            kind, operands = "call", [*test.args, test]
            function = self._keep(test.func, kept)
            values = [self._keep(arg, kept) for arg in test.args]
            values.append(self._keep(ast.Call(function, list(values), test.keywords), kept))
            failed = ast.UnaryOp(ast.Not(), values[-1])
        elif isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
            kind, operands, values = "not", [test.operand], [self._keep(test.operand, kept)]
            failed = values[0]
        else:
            kind, operands, values = "truth", [test], [self._keep(test, kept)]
            failed = ast.UnaryOp(ast.Not(), values[0])
        labels = ast.Tuple([ast.Constant(self._text(n)) for n in operands], ast.Load())
        error = ast.Call(ast.Name(HELPER, ast.Load()),
                         [ast.Constant(kind), ast.Constant(node.lineno),
                          ast.Constant(self._text(test)), labels,
                          ast.Tuple([ast.Name(v.id, ast.Load()) for v in values], ast.Load()),
                          node.msg or ast.Constant(None)], [])
        statements = [*kept, ast.If(failed, [ast.Raise(error)], [])]
        for statement in statements:
            ast.copy_location(statement, node)
        return statements


def rewrite_asserts(tree: ast.Module, source: str) -> ast.Module:
    """`tree` (parsed from `source`) with every ``assert`` rewritten to keep its values."""
    tree = _Rewriter(source).visit(tree)
    return ast.fix_missing_locations(tree)
