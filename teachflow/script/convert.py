"""From a Python function to its converted twin: read the source, rewrite it, compile it.

The converted function is the user's function with its ``if``/``while``/``for`` statements
rewritten (`teachflow.script.rewrite`), compiled from the user's own file name and line numbers
(so a traceback, an error of teachflow and every graph node point at the line the user wrote),
and run in the user's own world: the same globals, the same closure cells (a nested function
keeps reading the variables of the function around it, as they change), the same defaults.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
import types
from collections.abc import Callable

from teachflow.core.errors import TraceError
from teachflow.script import statements
from teachflow.script.rewrite import HELPER, StatementRewriter
from teachflow.tracing.callables import callable_name

_FACTORY = "__tfl_make__"


def convert(fn: Callable) -> tuple[types.FunctionType, str]:
    """`fn` with its control flow on tensors rewritten, and the rewritten source (to read)."""
    if inspect.ismethod(fn):
        raise TraceError("tfl.script needs the function, not a bound method", op="script",
                         hint="decorate the method in its class: @tfl.script above def")
    if not isinstance(fn, types.FunctionType):
        raise TraceError(f"tfl.script reads a function's source, and {callable_name(fn)} is a "
                         f"{type(fn).__name__}, not a function defined with def", op="script",
                         hint="script the function itself, defined with def")
    if fn.__name__ == "<lambda>":
        raise TraceError("tfl.script cannot read a lambda's source on its own (it is part of a "
                         "line of other code)", op="script",
                         hint="define it with def: def f(x): ... and script that")
    tree, first = _parse(fn)
    definition = tree.body[0]
    if isinstance(definition, ast.AsyncFunctionDef):
        raise TraceError(f"{fn.__name__} is async: a graph cannot await", op="script",
                         hint="script a plain def")
    definition.decorator_list = []  # (applied already: that is how we got here)
    ast.increment_lineno(tree, first - 1)
    StatementRewriter().function(definition)
    if "__class__" in fn.__code__.co_freevars:  # super() needs the class's cell
        definition.body.insert(0, ast.copy_location(ast.Expr(ast.Name("__class__")),
                                                    definition.body[0]))
    readable = ast.unparse(definition)
    free = [HELPER, *fn.__code__.co_freevars]
    factory = ast.FunctionDef(
        name=_FACTORY, args=ast.arguments(posonlyargs=[], args=[ast.arg(n) for n in free],
                                          vararg=None, kwonlyargs=[], kw_defaults=[],
                                          kwarg=None, defaults=[]),
        body=[definition, ast.Return(ast.Name(definition.name))], decorator_list=[],
        returns=None)
    if "type_params" in ast.FunctionDef._fields:
        factory.type_params = []
    module = ast.Module([ast.copy_location(factory, definition)], type_ignores=[])
    for node in ast.walk(module):  # the rewrite's new names are read, unless it said not
        if isinstance(node, ast.Name | ast.Attribute | ast.Tuple) and not hasattr(node, "ctx"):
            node.ctx = ast.Load()
    ast.fix_missing_locations(module)
    code = compile(module, fn.__code__.co_filename, "exec")
    made = next(c for c in next(c for c in code.co_consts if isinstance(c, types.CodeType)
                                and c.co_name == _FACTORY).co_consts
                if isinstance(c, types.CodeType) and c.co_name == definition.name)
    cells = dict(zip(fn.__code__.co_freevars, fn.__closure__ or (), strict=True))
    cells[HELPER] = types.CellType(statements)
    converted = types.FunctionType(made, fn.__globals__, fn.__name__, fn.__defaults__,
                                   tuple(cells[n] for n in made.co_freevars))
    converted.__kwdefaults__ = fn.__kwdefaults__
    converted.__qualname__ = fn.__qualname__
    converted.__module__ = fn.__module__
    converted.__doc__ = fn.__doc__
    converted.__dict__.update(fn.__dict__)
    return converted, readable


def _parse(fn: types.FunctionType) -> tuple[ast.Module, int]:
    try:
        lines, first = inspect.getsourcelines(fn)
    except (OSError, TypeError) as err:
        raise TraceError(
            f"tfl.script cannot read the source of {fn.__name__}: {err}. A function typed at "
            "the Python prompt, or made by exec, has no source file to read", op="script",
            hint="define the function in a file or a notebook cell") from None
    source = textwrap.dedent("".join(lines))
    try:
        tree = ast.parse(source)
    except SyntaxError as err:  # (a def inside an expression, such as a decorator call)
        raise TraceError(f"tfl.script could not parse the source of {fn.__name__}: {err}",
                         op="script", hint="script a function defined with a def statement of "
                                           "its own") from None
    if not tree.body or not isinstance(tree.body[0], ast.FunctionDef | ast.AsyncFunctionDef):
        raise TraceError(f"the source of {fn.__name__} is not a def statement", op="script",
                         hint="script a function defined with def")
    return tree, first
