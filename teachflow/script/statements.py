"""What a scripted function calls where its ``if``, ``while`` and ``for`` statements were.

`teachflow.script.rewrite` turns each such statement into functions (its branches, its
condition, its body) and a call of one of these helpers, which decides *when the function runs*
what the statement becomes (AutoGraph's rule):

- its condition (or a ``range`` bound) is a tensor while a graph is being traced: a graph node,
  `cond`, `while_loop` or `fori_loop`, whose sub-graphs are traced from those functions;
- anything else (a Python value, or a tensor outside any trace): Python's own ``if``, ``while``
  or ``for``, exactly as the statement would have run (so Python control flow on Python values
  still unrolls when traced).

The variables a statement assigns and the code after it reads become the node's results (or
the loop's carry), passed in and out by name. A variable that has no value on one of the paths
is an `Undefined`, which says so if it is used.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from teachflow.core.errors import SourceLocation, TraceError, user_frame
from teachflow.execution.control.cond import run_cond
from teachflow.execution.control.loops import run_fori, run_while
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.builder import is_tracing


class Undefined:
    """The value of a variable on a path that never assigned it (``y`` after ``if p: y = 1``
    when ``p`` was false). Using it raises the NameError Python would have raised."""

    __slots__ = ("line", "name")

    def __init__(self, name: str, line: int) -> None:
        self.name, self.line = name, line

    def __repr__(self) -> str:
        return f"<undefined {self.name}>"

    def _fail(self, *args: Any, **kwargs: Any) -> Any:
        raise NameError(f"variable {self.name!r} was never assigned on the path this run took "
                        f"(it is assigned only inside the statement at line {self.line})")

    __bool__ = __call__ = __getitem__ = __iter__ = __len__ = __float__ = __int__ = _fail
    __add__ = __radd__ = __sub__ = __rsub__ = __mul__ = __rmul__ = __truediv__ = _fail
    __rtruediv__ = __matmul__ = __rmatmul__ = __neg__ = __pow__ = __lt__ = __gt__ = _fail
    __le__ = __ge__ = __array__ = _fail

    def __getattr__(self, name: str) -> Any:
        self._fail()


def _staged(x: Any) -> bool:
    """Does `x` make the statement a graph node: a tensor, while a graph is being built?"""
    return isinstance(x, Tensor) and is_tracing()


def _named(fn: Callable, name: str) -> Callable:
    fn.__name__ = fn.__qualname__ = name
    return fn


def _check_defined(values: Sequence[Any], names: Sequence[str], construct: str,
                   line: int, where: str) -> None:
    for value, name in zip(values, names, strict=True):
        if isinstance(value, Undefined):
            raise TraceError(
                f"variable {name!r} {where} at line {line}: as a {construct} node of the graph, "
                "it would have no value on some paths (a graph value exists on every path)",
                op="script", location=_location(line),
                hint=f"give {name} a value before the statement (e.g. {name} = "
                     f"tfl.zeros_like(x)), so that every path has one")


def if_stmt(pred: Any, true_fn: Callable, false_fn: Callable, state: tuple,
            names: tuple[str, ...], line: int) -> tuple:
    """``if pred:`` whose branches assign `names` (`state`: their values before it)."""
    if not _staged(pred):
        return (true_fn if pred else false_fn)(*state)
    if not names:
        raise TraceError(
            "this if on a tensor assigns no variable that is used after it, so a cond node "
            "would have no result; what the branches do besides (print, an append to a list) "
            "happens once, while tracing", op="script", location=_location(line),
            hint="assign the value that differs to a variable in both branches and use it "
                 "after the if")
    results = run_cond(pred, _named(lambda *s: _defined_results(true_fn(*s), names, line,
                                                                  "true"), f"if_true@{line}"),
                       _named(lambda *s: _defined_results(false_fn(*s), names, line, "false"),
                              f"if_false@{line}"),
                       tuple(state), names=_arg_names(state, names), out_names=list(names))
    return tuple(results)


def _defined_results(results: tuple, names: Sequence[str], line: int, branch: str) -> tuple:
    _check_defined(results, names, "cond", line,
                   f"is assigned in only one branch of the if (not the {branch} branch) and "
                   "used after it")
    return tuple(results)


def _arg_names(state: tuple, names: Sequence[str]) -> list[str]:
    return list(names[:len(state)])


def while_stmt(test: Callable, body: Callable, state: tuple, names: tuple[str, ...],
               line: int) -> tuple:
    """``while test: body`` over the loop variables `names` (`state`: their values now)."""
    holds = test(*state)
    if not _staged(holds):
        while holds:
            state = body(*state)
            holds = test(*state)
        return state
    _check_defined(state, names, "while_loop", line,
                   "is first assigned inside the while loop, and read by its condition or "
                   "after it,")
    return tuple(run_while(_named(lambda c: test(*c), f"while_test@{line}"),
                           _named(lambda c: tuple(body(*c)), f"while_body@{line}"),
                           tuple(state), names=list(names)))


def for_stmt(bounds: tuple, body: Callable, state: tuple, names: tuple[str, ...],
             line: int) -> tuple:
    """``for i in range(*bounds): body`` over the loop variables `names`."""
    if not any(_staged(b) for b in bounds):
        for i in range(*bounds):
            state = body(i, *state)
        return state
    lower, upper, step = (0, bounds[0], 1) if len(bounds) == 1 else (*bounds, 1)[:3]
    if not (isinstance(step, int) and step == 1):
        raise TraceError("a for loop over range(...) with a step, whose bounds are tensors, "
                         "cannot become a graph loop here", op="script",
                         location=_location(line),
                         hint="loop over range(lower, upper) and compute lower + i * step")
    _check_defined(state, names, "fori_loop", line,
                   "is first assigned inside the for loop and used after it,")
    return tuple(run_fori(lower, upper, _named(lambda i, c: tuple(body(i, *c)),
                                               f"for_body@{line}"),
                          tuple(state), names=list(names)))


def python_bool(test: Any, construct: str, line: int, rewrite: str) -> Any:
    """The test of a statement that stays Python (it has a `construct` the graph cannot
    express, such as ``return`` or ``break``): fine for a Python value, an error that says what
    to do for a tensor being traced."""
    if _staged(test):
        raise TraceError(
            f"this statement depends on a tensor, so it would become a graph node, but it "
            f"contains {construct}, which a graph's cond or loop cannot express", op="script",
            location=_location(line), hint=rewrite)
    return test


def python_range(bounds: tuple, construct: str, line: int, rewrite: str) -> range:
    """``range(*bounds)`` of a ``for`` that stays Python (it contains `construct`)."""
    if any(_staged(b) for b in bounds):
        raise TraceError(
            f"this for loop's range depends on a tensor, so it would become a graph loop, but "
            f"it contains {construct}, which a graph loop cannot express", op="script",
            location=_location(line), hint=rewrite)
    return range(*bounds)


def and_(left: Any, right: Callable[[], Any]) -> Any:
    """``left and right`` in a condition: ``left & right`` for tensors (both are computed)."""
    if isinstance(left, Tensor):
        return left & right()
    return left and right()


def or_(left: Any, right: Callable[[], Any]) -> Any:
    """``left or right`` in a condition: ``left | right`` for tensors."""
    if isinstance(left, Tensor):
        return left | right()
    return left or right()


def not_(x: Any) -> Any:
    """``not x`` in a condition: ``~x`` for a tensor."""
    return ~x if isinstance(x, Tensor) else not x


def undefined(name: str, line: int) -> Undefined:
    return Undefined(name, line)


def _location(line: int) -> SourceLocation | None:
    """`line` of the scripted function now running (the innermost user code on the stack)."""
    frame = user_frame()
    if frame is None:
        return None
    return SourceLocation(frame.f_code.co_filename, line, frame.f_code.co_name)
