"""The rewrite: ``if``, ``while`` and ``for i in range(...)`` statements become calls.

Each statement is taken apart into functions and one call of a helper of
`teachflow.script.statements`, which decides at run time whether it becomes a graph node::

    if x.sum() > 1:                   def if_true_1(y):
        y = x * 2                         y = x * 2
    else:                     ->          return (y,)
        y = -x                        def if_false_1(y): ...
                                      (y,) = __tfl__.if_stmt(x.sum() > 1, if_true_1,
                                                             if_false_1, (y,), ('y',), 3)

The variables passed in and out are those the statement assigns *and* that are read after it
(for a loop: also those its condition reads, or its body reads before assigning them, which
come from the step before): a graph node's results are exactly what the rest of the program
uses. A variable that has a value before the statement enters as a parameter; one that does
not starts as `Undefined`.

A statement that leaves early (``return``, ``break``, ``continue``), a loop with an ``else``,
stays Python; only its test is wrapped, so that a tensor there explains which construct the
graph cannot express and how to rewrite it. So does every ``for`` that is not over ``range``.
Each new node keeps the line of the statement it came from: errors, the graph's text form and
the stepper point at the user's code.
"""

from __future__ import annotations

import ast
import itertools
from collections.abc import Iterable

#: The name under which converted code reaches `teachflow.script.statements`.
HELPER = "__tfl__"

_SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)
_LOOPS = (ast.For, ast.AsyncFor, ast.While)


def assigned(nodes: Iterable[ast.AST]) -> list[str]:
    """The names the statements assign (in order; ``x[i] = v`` and ``x += v`` assign `x`), not
    looking into nested functions, classes or comprehensions (their names are their own)."""
    found: dict[str, None] = {}
    for node in nodes:
        for child in _walk(node):
            if isinstance(child, ast.Name) and isinstance(child.ctx, ast.Store | ast.Del):
                found[child.id] = None
            elif (isinstance(child, ast.Subscript) and isinstance(child.ctx, ast.Store)
                  and isinstance(child.value, ast.Name)):
                found[child.value.id] = None
            elif isinstance(child, _SCOPES[:3]):
                found[child.name] = None
    return list(found)


def reads(nodes: Iterable[ast.AST]) -> set[str]:
    """The names the code reads, nested functions included (a closure reads them too)."""
    return {n.id for node in nodes for n in ast.walk(node)
            if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}


def exposed(body: list[ast.stmt]) -> set[str]:
    """The names the body reads before it assigns them: in a loop, from the step before."""
    out: set[str] = set()
    done: set[str] = set()
    for stmt in body:
        out |= reads([stmt]) - done
        done |= set(assigned([stmt]))
    return out


def escape(nodes: Iterable[ast.AST]) -> ast.stmt | None:
    """The first statement that would leave these early: a ``return``, or a ``break`` or
    ``continue`` of a loop around them (not of a loop among them)."""
    for node in nodes:
        for child in _walk(node, into_loops=False):
            if isinstance(child, ast.Return | ast.Break | ast.Continue):
                return child
    return None


def _walk(node: ast.AST, into_loops: bool = True) -> Iterable[ast.AST]:
    """ast.walk, not entering nested scopes (their bodies), nor nested loops unless asked."""
    yield node
    for child in ast.iter_child_nodes(node):
        if isinstance(child, (*_SCOPES, ast.comprehension)):
            if isinstance(child, _SCOPES[:3]):
                yield child  # (its name is assigned here; its body is its own)
            continue
        if not into_loops and isinstance(child, _LOOPS):
            yield from (n for n in _walk_loop_header(child))
            continue
        yield from _walk(child, into_loops)


def _walk_loop_header(loop: ast.AST) -> Iterable[ast.AST]:
    """A nested loop's own statements, whose break/continue are its own: only returns count."""
    for n in ast.walk(loop):
        if isinstance(n, ast.Return):
            yield n


class StatementRewriter:
    """Rewrites one function's statements (see the module docstring)."""

    def __init__(self) -> None:
        self._count = itertools.count(1)

    def function(self, fn: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = fn.args
        params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]}
        params |= {a.arg for a in (args.vararg, args.kwarg) if a is not None}
        fn.body = self.block(fn.body, params, set())

    def block(self, stmts: list[ast.stmt], defined: set[str], after: set[str]) -> list[ast.stmt]:
        """The statements rewritten; `defined` have a value before them, `after` are read
        after them."""
        defined = set(defined)
        out: list[ast.stmt] = []
        for k, stmt in enumerate(stmts):
            later = reads(stmts[k + 1:]) | after
            out += self.statement(stmt, defined, later)
            defined |= set(assigned([stmt]))
        return out

    def statement(self, stmt: ast.stmt, defined: set[str], after: set[str]) -> list[ast.stmt]:
        if isinstance(stmt, ast.If):
            return self._if(stmt, defined, after)
        if isinstance(stmt, ast.While):
            return self._while(stmt, defined, after)
        if isinstance(stmt, ast.For):
            return self._for(stmt, defined, after)
        if isinstance(stmt, ast.FunctionDef | ast.AsyncFunctionDef):
            self.function(stmt)  # a nested function: its own statements, its own names
            return [stmt]
        for field in ("body", "orelse", "finalbody"):  # with, try: their blocks
            inner = getattr(stmt, field, None)
            if isinstance(inner, list) and inner and isinstance(inner[0], ast.stmt):
                setattr(stmt, field, self.block(inner, defined, after))
        for handler in getattr(stmt, "handlers", []):
            handler.body = self.block(handler.body, defined, after)
        return [stmt]

    # --- if -----------------------------------------------------------------------------------

    def _if(self, stmt: ast.If, defined: set[str], after: set[str]) -> list[ast.stmt]:
        leaves = escape([*stmt.body, *stmt.orelse])
        if leaves is not None:
            stmt.test = _python_bool(stmt.test, leaves, stmt, _IF_HINT)
            stmt.body = self.block(stmt.body, defined, after)
            stmt.orelse = self.block(stmt.orelse, defined, after)
            return [stmt]
        changed = assigned([*stmt.body, *stmt.orelse])
        ins = [n for n in changed if n in after and n in defined]
        outs = ins + [n for n in changed if n in after and n not in defined]
        n = next(self._count)
        branches = [self._function(f"if_{which}_{n}", ins, outs, body, stmt)
                    for which, body in (("true", stmt.body), ("false", stmt.orelse))]
        call = _helper("if_stmt", _condition(stmt.test),
                       ast.Name(branches[0].name, ast.Load()),
                       ast.Name(branches[1].name, ast.Load()), _names_tuple(ins), _strings(outs),
                       ast.Constant(stmt.lineno))
        return [*branches, _assign(outs, call, stmt)]

    def _function(self, name: str, params: list[str], outs: list[str], body: list[ast.stmt],
                  at: ast.stmt, index: str | None = None) -> ast.FunctionDef:
        """``def name([index,] *params): <outs not in params start Undefined>; body;
        return (*outs,)``."""
        start = [ast.Assign([ast.Name(o, ast.Store())],
                            _helper("undefined", ast.Constant(o), ast.Constant(at.lineno)))
                 for o in outs if o not in params]
        names = ([index] if index else []) + params
        inner = self.block(body, set(names) | set(outs), set(outs)) if body else []
        done = ast.Return(ast.Tuple([ast.Name(o, ast.Load()) for o in outs], ast.Load()))
        return _located(_def(name, names, [*start, *inner, done]), at)

    # --- loops --------------------------------------------------------------------------------

    def _carried(self, stmt: ast.While | ast.For, test: list[ast.AST], after: set[str],
                 index: str | None = None) -> list[str]:
        """The loop variables: assigned in the body, and read after the loop, by its test, or
        by its body before it assigns them (from the step before)."""
        needed = after | reads(test) | exposed(stmt.body)
        return [n for n in assigned(stmt.body) if n in needed and n != index]

    def _while(self, stmt: ast.While, defined: set[str], after: set[str]) -> list[ast.stmt]:
        leaves = escape(stmt.body)
        if leaves is not None or stmt.orelse:
            stmt.test = _python_bool(stmt.test, leaves or stmt, stmt, _LOOP_HINT)
            stmt.body = self.block(stmt.body, defined, after | reads([stmt]))
            stmt.orelse = self.block(stmt.orelse, defined, after)
            return [stmt]
        carry = self._carried(stmt, [stmt.test], after)
        n = next(self._count)
        test = _located(_def(f"while_test_{n}", carry, [ast.Return(_condition(stmt.test))]),
                        stmt)
        body = self._function(f"while_body_{n}", carry, carry, stmt.body, stmt)
        call = _helper("while_stmt", ast.Name(test.name, ast.Load()),
                       ast.Name(body.name, ast.Load()),
                       _state(carry, defined, stmt), _strings(carry), ast.Constant(stmt.lineno))
        return [test, body, _assign(carry, call, stmt)]

    def _for(self, stmt: ast.For, defined: set[str], after: set[str]) -> list[ast.stmt]:
        bounds = _range_bounds(stmt)
        leaves = escape(stmt.body)
        if bounds is None or leaves is not None or stmt.orelse:
            if bounds is not None:  # over range(...), but it leaves early: Python's for
                stmt.iter = _helper("python_range", ast.Tuple(bounds, ast.Load()),
                                    ast.Constant(_construct(leaves or stmt)),
                                    ast.Constant(stmt.lineno), ast.Constant(_LOOP_HINT))
            stmt.body = self.block(stmt.body, defined | set(assigned([stmt.target])),
                                   after | reads([stmt]))
            stmt.orelse = self.block(stmt.orelse, defined, after)
            return [stmt]
        index = stmt.target.id
        carry = self._carried(stmt, [], after, index)
        n = next(self._count)
        body = self._function(f"for_body_{n}", carry, carry, stmt.body, stmt, index=index)
        call = _helper("for_stmt", ast.Tuple(bounds, ast.Load()),
                       ast.Name(body.name, ast.Load()),
                       _state(carry, defined, stmt), _strings(carry), ast.Constant(stmt.lineno))
        return [body, _assign(carry, call, stmt)]


_IF_HINT = ("compute the result in both branches into one variable and return it after the if "
            "(y = ...; return y), or choose with tfl.where(cond, a, b)")
_LOOP_HINT = ("turn the early exit into the loop's condition: a flag in the carry (while "
              "not done and ...), and no else clause")


def _construct(node: ast.AST) -> str:
    word = type(node).__name__.lower()
    return f"a {word} statement (line {node.lineno})" if word in (
        "return", "break", "continue") else f"an else clause after the loop (line {node.lineno})"


def _python_bool(test: ast.expr, leaves: ast.AST, at: ast.stmt, hint: str) -> ast.expr:
    return _located(_helper("python_bool", test, ast.Constant(_construct(leaves)),
                            ast.Constant(at.lineno), ast.Constant(hint)), test)


def _range_bounds(stmt: ast.For) -> list[ast.expr] | None:
    """The arguments of ``for <name> in range(...)``, or None for any other ``for``."""
    it = stmt.iter
    if (isinstance(stmt.target, ast.Name) and isinstance(it, ast.Call)
            and isinstance(it.func, ast.Name) and it.func.id == "range" and not it.keywords
            and 1 <= len(it.args) <= 3 and not any(isinstance(a, ast.Starred) for a in it.args)):
        return list(it.args)
    return None


def _condition(test: ast.expr) -> ast.expr:
    """``a and b``, ``a or b``, ``not a`` in a condition, as tensors can take them."""
    if isinstance(test, ast.BoolOp):
        word = "and_" if isinstance(test.op, ast.And) else "or_"
        result = _condition(test.values[0])
        for value in test.values[1:]:
            later = ast.Lambda(ast.arguments(posonlyargs=[], args=[], vararg=None, kwonlyargs=[],
                                             kw_defaults=[], kwarg=None, defaults=[]),
                               _condition(value))
            result = _located(_helper(word, result, later), test)
        return result
    if isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not):
        return _located(_helper("not_", _condition(test.operand)), test)
    return test


def _def(name: str, params: list[str], body: list[ast.stmt]) -> ast.FunctionDef:
    """``def name(*params): body``."""
    fn = ast.FunctionDef(name=name, args=ast.arguments(
        posonlyargs=[], args=[ast.arg(p) for p in params], vararg=None, kwonlyargs=[],
        kw_defaults=[], kwarg=None, defaults=[]), body=body, decorator_list=[], returns=None)
    if "type_params" in ast.FunctionDef._fields:  # (Python 3.12+)
        fn.type_params = []
    return fn


def _helper(name: str, *args: ast.expr) -> ast.Call:
    return ast.Call(ast.Attribute(ast.Name(HELPER, ast.Load()), name, ast.Load()), list(args),
                    [])


def _names_tuple(names: list[str]) -> ast.Tuple:
    return ast.Tuple([ast.Name(n, ast.Load()) for n in names], ast.Load())


def _strings(names: list[str]) -> ast.Tuple:
    return ast.Tuple([ast.Constant(n) for n in names], ast.Load())


def _state(carry: list[str], defined: set[str], at: ast.stmt) -> ast.Tuple:
    """The loop variables' values before the loop (`Undefined` for one that has none)."""
    return ast.Tuple([ast.Name(c, ast.Load()) if c in defined else
                      _helper("undefined", ast.Constant(c), ast.Constant(at.lineno))
                      for c in carry], ast.Load())


def _assign(names: list[str], call: ast.Call, at: ast.stmt) -> ast.stmt:
    if not names:
        return _located(ast.Expr(call), at)
    target = ast.Tuple([ast.Name(n, ast.Store()) for n in names], ast.Store())
    return _located(ast.Assign([target], call), at)


def _located(node: ast.AST, at: ast.AST) -> ast.AST:
    """`node` (and every new node inside it) on the first line of `at`, where the user wrote
    the statement (on that line only: a call spread over lines runs as its last line)."""
    for child in ast.walk(node):
        if "lineno" in child._attributes and not hasattr(child, "lineno"):
            child.lineno = child.end_lineno = at.lineno
            child.col_offset = child.end_col_offset = at.col_offset
    return node
