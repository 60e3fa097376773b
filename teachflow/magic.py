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

The function is compiled from the cell's own syntax tree, numbered as the notebook shows the cell
(the ``%%compile`` line is line 1) and registered under the cell's number, so an error in the
cell, or in the magic's options, points to ``cell In[N], line L`` as it would without the magic.
"""

from __future__ import annotations

import ast
import builtins
import keyword
import os
import shlex
from dataclasses import dataclass
from typing import Any

from teachflow.errors import SourceLocation, TeachflowError
from teachflow.tensor import Tensor

_LAST = "__teachflow_last_expression__"
_VALUES = "__teachflow_notebook_values__"
_OPTIONS_HINT = ("options: --passes a,b,c|none  --device cpu|gpu  --html PATH  --no-show  "
                 "--name NAME")


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
    try:
        tree = ast.parse("\n" * (where.body_line - 1) + cell, filename=where.filename)
    except SyntaxError as err:  # as the notebook says it of a cell without the magic
        raise TeachflowError(f"the cell is not valid Python: {err.msg}", op="%%compile",
                             location=SourceLocation(where.filename, err.lineno or 1),
                             hint="fix the line shown; %%compile runs ordinary Python") from None
    _check_cell(tree, where)
    reads = CellReads.of(tree)
    inputs = [name for name in reads.before_bound if name not in reads.maybe_own
              and isinstance(namespace.get(name), Tensor)]
    options = _options(line, where.magic_line, taken={*reads.bound, *reads.before_bound},
                       namespace=namespace)
    values = {name: namespace[name] for name in reads.before_bound
              if name in reads.bound and name not in inputs and name in namespace}
    fn = _cell_function(tree, inputs, values, reads.bound, namespace, where)
    args = [namespace[name] for name in inputs]
    if options["device"]:
        args = [a.to(options["device"]) for a in args]
    compilation = tfl.compile(fn, *args, passes=options["passes"])
    outputs = compilation(*args)
    last = outputs.pop(_LAST, None)
    namespace.update(outputs)
    namespace["result"] = last
    namespace[options["name"]] = compilation
    if options["html"]:
        compilation.to_html(options["html"])
    if options["show"]:
        display(compilation)
    return last


# --- Where the cell is --------------------------------------------------------------------------


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


# --- The options --------------------------------------------------------------------------------


def _options(line: str, where: SourceLocation, taken: set[str] = frozenset(),
             namespace: dict | None = None) -> dict:
    """The magic's options, checked before anything is compiled: a wrong one is an error that
    points at the ``%%compile`` line. ``--name`` must not overwrite a name the cell reads or
    binds (`taken`), nor anything of the notebook's (`namespace`) but a compilation."""
    from teachflow.backends import get_backend
    from teachflow.passes import resolve

    def refuse(message: str, hint: str = _OPTIONS_HINT) -> TeachflowError:
        return TeachflowError(message, op="%%compile", hint=hint, location=where)

    try:
        words = shlex.split(line)
    except ValueError as err:  # an unclosed quote
        raise refuse(f"cannot read the options {line!r}: {err}") from None
    options: dict[str, Any] = {"passes": "default", "device": None, "html": None, "show": True,
                               "name": "compiled"}
    flags = {"--passes": "passes", "--device": "device", "--html": "html", "--name": "name",
             "--no-show": "show"}
    seen: set[str] = set()
    i = 0
    while i < len(words):
        word = words[i]
        if word not in flags:
            raise refuse(f"unknown option {word!r}")
        if word in seen:
            raise refuse(f"{word} is given twice")
        seen.add(word)
        if word == "--no-show":
            options["show"] = False
        else:
            if i + 1 == len(words) or words[i + 1].startswith("--"):
                raise refuse(f"{word} needs a value")
            options[flags[word]] = words[i + 1]
            i += 1
        i += 1
    name = options["name"]
    if not name.isidentifier() or keyword.iskeyword(name):
        raise refuse(f"--name {name!r} is not a Python name the notebook can use")
    from teachflow.compiler import Compilation

    held = (namespace or {}).get(name)
    if "--name" in seen and (name in taken or name == "result" or name in vars(builtins) or (
            held is not None and not isinstance(held, Compilation))):
        raise refuse(f"--name {name!r} would overwrite "
                     + ("a name the cell uses" if name in taken else "the cell's result"
                        if name == "result" else f"the notebook's {name}"
                        if held is not None else f"Python's own {name}"),
                     hint="pick another name for the compilation, e.g. --name compiled_step")
    if options["passes"] != "default":
        names = options["passes"].split(",")
        if not all(names):
            raise refuse(f"--passes {options['passes']!r} names an empty pass",
                         hint="list passes with commas (--passes simplify,cse), or write "
                              "--passes none for the graph as traced")
        options["passes"] = None if names == ["none"] else names
    if options["html"]:
        folder = os.path.dirname(os.path.abspath(options["html"]))
        if not os.path.isdir(folder):
            raise refuse(f"--html {options['html']!r}: there is no folder {folder}",
                         hint="write the page into a folder that exists")
        if os.path.isdir(options["html"]):
            raise refuse(f"--html {options['html']!r} is a folder, not a page",
                         hint="name the page to write, e.g. --html stepper.html")
    try:
        resolve(options["passes"])
        if options["device"]:
            get_backend(options["device"])
    except TeachflowError as err:  # the same error, at the %%compile line
        raise type(err)(err.message, op="%%compile", operands=err.operands, hint=err.hint,
                        location=where) from None
    return options


# --- What the cell reads ------------------------------------------------------------------------


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


# --- The cell as a function ---------------------------------------------------------------------


def _cell_function(tree: ast.Module, inputs: list[str], values: dict[str, Any], bound: set[str],
                   namespace: dict, where: NotebookCell) -> Any:
    """The cell as a function, built from the cell's own syntax tree so that every line keeps
    its number (the lines made here stand on the ``%%compile`` line, the return on the last)::

        def cell(<inputs>):
            n = <the notebook's n>      # other values the cell reads before it assigns them
            <the cell, its last expression assigned to a name>
            return {<the names the cell binds, and the last expression>}
    """
    at = where.body_line - 1
    body = [_placed(f"{name} = {_VALUES}[{name!r}]", at) for name in values]
    body.extend(tree.body)
    returned = set(bound)
    if tree.body and isinstance(tree.body[-1], ast.Expr):  # the value a notebook would display
        last = body.pop()
        target = ast.copy_location(ast.Name(_LAST, ast.Store()), last)
        body.append(ast.copy_location(ast.Assign(targets=[target], value=last.value), last))
        returned.add(_LAST)
    end = max((getattr(n, "end_lineno", None) or at for n in ast.walk(tree)), default=at)
    # The first iterable of a comprehension is evaluated in the enclosing function, so this
    # `locals()` is the cell's: the variables it bound (a name left unbound is left out).
    body.append(_placed(
        f"return {{k: v for k, v in locals().items() if k in {sorted(returned)!r}}}", end))
    maker = _placed(f"def make({_VALUES}):\n    def cell({', '.join(inputs)}):\n        pass\n"
                    "    return cell", at)
    maker.body[0].body = body
    module = ast.Module(body=[maker], type_ignores=[])
    scope: dict[str, Any] = {}
    exec(compile(module, where.filename, "exec"), namespace, scope)  # the learner's own cell
    return scope["make"](values)


def _placed(source: str, line: int) -> ast.stmt:
    """A statement written here, placed on `line` of the cell."""
    statement = ast.parse(source).body[0]
    for node in ast.walk(statement):
        if "lineno" in node._attributes:
            node.lineno = node.end_lineno = line
            node.col_offset = node.end_col_offset = 0
    return statement
