"""What a notebook cell reads from the notebook, found by walking it in the order Python runs it.

`CellReads` is an `ast.NodeVisitor` whose visits follow evaluation order rather than the order of
the syntax tree's fields: the right side of an assignment before its target, a loop's iterable
before its body, a comprehension's first iterable in the cell and the rest in its own scope, a
function's defaults and decorators now and its body later.
"""

from __future__ import annotations

import ast
from typing import Any


class CellReads(ast.NodeVisitor):
    """The names a cell reads before it binds them, in the order Python evaluates the cell.

    The cell becomes the body of a function, so a name it binds anywhere is that function's
    local, and a value it reads before binding it has to be handed in from the notebook::

        h = h + 1              reads h: the right side runs before the assignment
        h = x * 2; y = h + 1   reads x only: h is the cell's own by the time it is read
        h += x                 reads h, then x
        for k in ks: s = s + k reads ks, then s (k is bound by the loop)
        [x * k for k in ks]    reads ks, then x (k belongs to the comprehension)

    A function or lambda defined in the cell runs later: what it reads from outside counts as
    read where it is defined, unless the cell binds that name (it then reads the cell's own).

    In a loop, a read in a branch (of an ``if``, ``x if c else y``, ``a or b``, an ``except``)
    may come only after an earlier turn of the loop bound the name::

        for k in range(3):
            h = (x @ w) if k == 0 else (h @ w)

    Such a name, bound by the cell and read before that only in branches of loops, is in
    ``maybe_own``: it is the cell's own if the branch reads it only after the binding (then
    the first run, with no ``h`` in the notebook, and a second run, with one, give the same
    graph), and the notebook's if the branch runs first (the magic hands it in as a value,
    which the graph reads only if the trace does).

    After `of`: ``before_bound`` lists those names in order of their first read, ``bound``
    holds every name the cell binds (the variables it hands back to the notebook), and
    ``maybe_own`` those of both that are read before bound only in branches of loops.
    """

    def __init__(self) -> None:
        self.before_bound: list[str] = []
        self.bound: set[str] = set()
        self.maybe_own: set[str] = set()
        self._branches = 0  # how many branches (which may not run) we are inside
        self._loops = 0  # ... and loops
        self._in_branches: set[str] = set()  # read before bound only in branches of loops
        self._comprehensions: list[set[str]] = []  # the variables of the ones we are inside
        self._only_in_functions: set[str] = set()  # read so far only by nested functions

    @classmethod
    def of(cls, tree: ast.AST) -> CellReads:
        reads = cls()
        reads.visit(tree)
        # A nested function reading a name the cell binds (even later) reads the cell's own.
        reads.before_bound = [name for name in reads.before_bound
                              if not (name in reads._only_in_functions and name in reads.bound)]
        reads.maybe_own = reads._in_branches & reads.bound
        return reads

    def read(self, name: str) -> None:
        if any(name in scope for scope in self._comprehensions):
            return
        self._only_in_functions.discard(name)
        if name in self.bound:
            return
        maybe = self._branches and self._loops
        if name not in self.before_bound:
            self.before_bound.append(name)
            if maybe:
                self._in_branches.add(name)
        elif not maybe:
            self._in_branches.discard(name)  # read for certain too

    def bind(self, name: str) -> None:
        if self._comprehensions:
            self._comprehensions[-1].add(name)
        else:
            self.bound.add(name)

    # Names: a load reads, a store binds; `del h` needs h bound, so it reads.
    def visit_Name(self, node: ast.Name) -> None:
        if isinstance(node.ctx, ast.Store):
            self.bind(node.id)
        else:
            self.read(node.id)

    # Assignments evaluate their right side first.
    def visit_Assign(self, node: ast.Assign) -> None:
        self.visit(node.value)
        for target in node.targets:
            self.visit(target)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        if isinstance(node.target, ast.Name):  # h += x reads h, then x, then binds h
            self.read(node.target.id)
            self.visit(node.value)
            self.bind(node.target.id)
        else:  # h[i] += x, h.a += x: reads h (and i)
            self.visit(node.target)
            self.visit(node.value)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:  # (a local's annotation is never evaluated)
            self.visit(node.value)
            self.visit(node.target)

    def visit_NamedExpr(self, node: ast.NamedExpr) -> None:
        self.visit(node.value)
        self.bound.add(node.target.id)  # even inside a comprehension, := binds in the cell

    # Loops: a turn may read what an earlier turn bound (see `maybe_own`).
    def _loop(self, node: ast.For | ast.AsyncFor | ast.While, *turn: ast.AST) -> None:
        self._loops += 1
        for part in [*turn, *node.body]:
            self.visit(part)
        self._loops -= 1
        for statement in node.orelse:
            self.visit(statement)

    def visit_For(self, node: ast.For | ast.AsyncFor) -> None:
        self.visit(node.iter)
        self._loop(node, node.target)

    visit_AsyncFor = visit_For

    def visit_While(self, node: ast.While) -> None:
        self._loop(node, node.test)

    def visit_withitem(self, node: ast.withitem) -> None:
        self.visit(node.context_expr)
        if node.optional_vars is not None:
            self.visit(node.optional_vars)

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.type is not None:
            self.visit(node.type)
        if node.name:
            self.bind(node.name)
        for statement in node.body:
            self.visit(statement)

    def visit_Import(self, node: ast.Import | ast.ImportFrom) -> None:
        for alias in node.names:
            if alias.name != "*":
                self.bind(alias.asname or alias.name.split(".")[0])

    visit_ImportFrom = visit_Import

    def visit_MatchAs(self, node: ast.MatchAs) -> None:
        if node.pattern is not None:
            self.visit(node.pattern)
        if node.name:
            self.bind(node.name)

    def visit_MatchStar(self, node: ast.MatchStar) -> None:
        if node.name:
            self.bind(node.name)

    def visit_MatchMapping(self, node: ast.MatchMapping) -> None:
        self.generic_visit(node)
        if node.rest:
            self.bind(node.rest)

    # Branches: what may not run.
    def _branch(self, *parts: Any) -> None:
        self._branches += 1
        for part in parts:
            for item in part if isinstance(part, list) else [part]:
                self.visit(item)
        self._branches -= 1

    def visit_If(self, node: ast.If) -> None:
        self.visit(node.test)
        self._branch(node.body, node.orelse)

    def visit_IfExp(self, node: ast.IfExp) -> None:
        self.visit(node.test)
        self._branch(node.body, node.orelse)

    def visit_BoolOp(self, node: ast.BoolOp) -> None:
        self.visit(node.values[0])
        self._branch(node.values[1:])

    def visit_Try(self, node: ast.Try) -> None:
        for statement in node.body:
            self.visit(statement)
        self._branch(node.handlers, node.orelse)
        for statement in node.finalbody:
            self.visit(statement)

    def visit_Match(self, node: ast.Match) -> None:
        self.visit(node.subject)
        self._branch(node.cases)

    # Expressions whose fields are not in evaluation order.

    def visit_Dict(self, node: ast.Dict) -> None:
        for key, value in zip(node.keys, node.values, strict=True):
            if key is not None:  # None: a **mapping
                self.visit(key)
            self.visit(value)

    # Comprehensions: the first iterable is evaluated in the cell, the rest in their own scope.
    def _comprehension(self, generators: list[ast.comprehension], *results: ast.expr) -> None:
        self.visit(generators[0].iter)
        self._comprehensions.append(set())
        for k, generator in enumerate(generators):
            if k:
                self.visit(generator.iter)
            self.visit(generator.target)
            for condition in generator.ifs:
                self.visit(condition)
        for result in results:
            self.visit(result)
        self._comprehensions.pop()

    def visit_ListComp(self, node: ast.ListComp | ast.SetComp | ast.GeneratorExp) -> None:
        self._comprehension(node.generators, node.elt)

    visit_SetComp = visit_GeneratorExp = visit_ListComp

    def visit_DictComp(self, node: ast.DictComp) -> None:
        self._comprehension(node.generators, node.key, node.value)

    # Functions, lambdas and classes: defaults and decorators now, the body later.
    def _defaults(self, arguments: ast.arguments) -> None:
        for default in [*arguments.defaults, *arguments.kw_defaults]:
            if default is not None:
                self.visit(default)

    def _reads_later(self, node: ast.AST, own: set[str]) -> None:
        """What a nested function (or class body) reads from outside, when it runs."""
        inner = [n for n in ast.walk(node) if isinstance(n, ast.Name)]
        own = own | {n.id for n in inner if isinstance(n.ctx, ast.Store)}
        for name in dict.fromkeys(n.id for n in inner if isinstance(n.ctx, ast.Load)):
            if name not in own and name not in self.before_bound and name not in self.bound:
                self.read(name)
                self._only_in_functions.add(name)

    @staticmethod
    def _parameters(arguments: ast.arguments) -> set[str]:
        every = [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs,
                 *filter(None, [arguments.vararg, arguments.kwarg])]
        return {a.arg for a in every}

    def visit_Lambda(self, node: ast.Lambda) -> None:
        self._defaults(node.args)
        self._reads_later(node.body, self._parameters(node.args))

    def visit_FunctionDef(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        for decorator in node.decorator_list:
            self.visit(decorator)
        self._defaults(node.args)
        for statement in node.body:
            self._reads_later(statement, self._parameters(node.args))
        self.bind(node.name)

    visit_AsyncFunctionDef = visit_FunctionDef

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        for part in [*node.decorator_list, *node.bases, *node.keywords]:
            self.visit(part)
        for statement in node.body:
            self._reads_later(statement, set())
        self.bind(node.name)
