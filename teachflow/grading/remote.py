"""The learner's names as the tests see them: proxies whose calls cross the wall, gradients too.

A test names the learner's functions directly (``my_softmax(x)``). When it runs, each such name
is a `Remote`: calling it sends the arguments to the worker (`teachflow.grading.submission`)
and returns the plain value that comes back. It has no ``__eq__`` of its own, no ``__bool__``,
no ``__array__``: nothing of the learner's runs on the tests' side, so an object whose
``__eq__`` always says True stays in the worker and the call that returns it fails, saying so.

What crosses back is what a test would see next to the learner's code:

- an exception the learner's code raised is raised here with its built-in (or teachflow) base
  classes, so ``pytest.raises(ValueError)`` works; its lines say where it came from;
- a warning is warned here again, with its category, so ``pytest.warns`` works;
- what the call printed is printed here (shown with a failing test);
- a staged function comes back as its graph, to look at (`RemoteGraph`); calling it runs it in
  the worker, under the submission's limits, never here;
- gradients flow through the call. A call with a tensor on the tape (``tfl.grad(lambda t:
  softplus(t).sum())(x)``) becomes one op on the tape here, `SUBMISSION_CALL`, whose results
  are the call's; its gradient rule asks the worker for the vector-Jacobian product, which the
  worker computes with the learner's own ops over the call it kept. Asked while a backward
  pass is itself recorded, that product is such a call too: gradients of gradients work.
"""

from __future__ import annotations

import builtins
import sys
import warnings
from dataclasses import dataclass
from typing import Any

from teachflow.autodiff import tape
from teachflow.core.backends import CPU
from teachflow.grading import wire
from teachflow.grading.failures import FAILED, NOT_DONE, SubmissionFailure
from teachflow.grading.submission import Submission, WorkerStopped, _lines
from teachflow.ops.op import Op, no_flops
from teachflow.saved.loaded import SavedFunction

PRINTED = 2000  # characters kept of what one request printed
PLAIN_DATA = ("only tensors, arrays, numbers, strings, lists, tuples and dicts of them, and "
              "staged functions do")


class RemoteError(SubmissionFailure):
    """An exception the learner's code raised in the worker, as the grader reports it.

    The class a test sees derives from the built-in (or teachflow) exception the worker
    named as well, so ``pytest.raises(ValueError)`` around a learner's call works."""


class NotPlainData(SubmissionFailure):
    """A learner's function returned something that may not cross to the grader."""


_ERROR_CLASSES: dict[tuple[str, str], type[BaseException]] = {}


def _mirror(name: str, base: type, mixin: type | None, kind: str) -> type:
    """A class named as the worker's, deriving from the known `base` it named (and `mixin`)."""
    key = (f"{kind}:{name}", base.__name__)
    if key not in _ERROR_CLASSES:
        bases = (base,) if mixin is None else (base, mixin) if base is not Exception else \
            (mixin,)
        try:  # (the built-in first: its own __new__ makes the exception)
            made = type(name, bases, {"__module__": "submission"})
        except TypeError:  # a base whose layout cannot be mixed in
            made = type(name, (mixin or base,), {"__module__": "submission"})
        _ERROR_CLASSES[key] = made
    return _ERROR_CLASSES[key]


def _known(names: Any, root: type) -> type:
    """The first of `names` (untrusted) that is a built-in or teachflow class under `root`."""
    import teachflow
    import teachflow.core.errors

    for name in names if isinstance(names, list) else []:
        for module in (builtins, teachflow.core.errors, teachflow):
            found = getattr(module, str(name)[:80], None)
            if isinstance(found, type) and issubclass(found, root):
                return found
    return root


def remote_error(info: Any, what: str) -> BaseException:
    """The exception to raise in the grader for the worker's answer `info` (untrusted)."""
    if not isinstance(info, dict):
        return WorkerStopped(f"{what} answered nonsense")
    name = str(info.get("type", "Exception"))[:80]
    lines = _lines(info.get("lines"))
    if name == "MemoryError":
        lines.append(f"({what} ran out of the memory a submission may use)")
    cls = _mirror(name, _known(info.get("bases"), Exception), RemoteError, "error")
    error = cls(lines[0] if lines else name)
    error.lines = lines or [name]
    error.status = NOT_DONE if info.get("status") == NOT_DONE else FAILED
    return error


def warn_again(answer: dict[str, Any]) -> None:
    """Warn here what the worker's code warned there (untrusted), each as its category."""
    for info in answer.get("warnings", [])[:20] if isinstance(answer.get("warnings"), list) \
            else []:
        if not isinstance(info, dict):
            continue
        category = _mirror(str(info.get("category", "UserWarning"))[:80],
                           _known(info.get("bases"), Warning), None, "warning")
        lineno = info.get("lineno")
        warnings.warn_explicit(str(info.get("message", ""))[:2000], category,
                               str(info.get("filename", "<submission>"))[:300],
                               lineno if type(lineno) is int else 0)


class Remote:
    """A name in the learner's notebook, living in the worker (see the module's docstring)."""

    __slots__ = ("_kind", "_path", "_submission")

    def __init__(self, submission: Submission, path: tuple[str, ...], kind: str) -> None:
        self._submission, self._path, self._kind = submission, path, kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return call(self._submission, self._path, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return get(self._submission, (*self._path, name))

    def __repr__(self) -> str:
        return f"<{'.'.join(self._path)}: the submission's {self._kind}, run in its sandbox>"


class RemoteGraph(SavedFunction):
    """A staged function the learner's code returned: its graph is here, to look at and show;
    a call (of it, or of its ``compilation``) runs in the worker, under the submission's
    limits, as the learner's own code does."""

    def __init__(self, loaded: SavedFunction, submission: Submission, number: int) -> None:
        self.__dict__.update(loaded.__dict__)
        self.compilation = type(loaded.compilation)(loaded.compilation.snapshots, self)
        self._submission, self._number = submission, number

    def __call__(self, /, *args: Any) -> Any:
        return call(self._submission, ("$kept", str(self._number)), args, {})

    def __repr__(self) -> str:
        return f"<the submission's staged function {self.graph.name}, run in its sandbox>"


def _ref(value: Any) -> list[str] | None:
    if isinstance(value, Remote):
        return list(value._path)
    if isinstance(value, RemoteGraph):
        return ["$kept", str(value._number)]
    return None


def get(submission: Submission, path: tuple[str, ...]) -> Any:
    """The value of `path` in the worker's namespace: plain data, or a `Remote`."""
    answer, arrays = _request(submission, {"op": "get", "path": list(path)}, {}, ".".join(path))
    if answer.get("missing"):
        raise NameError(f"name {path[0]!r} is not defined", name=path[0]) \
            if len(path) == 1 else AttributeError(".".join(path))
    if "value" in answer:
        return _decode(submission, answer["value"], arrays)[0]
    if "error" in answer:
        raise remote_error(answer["error"], ".".join(path))
    return Remote(submission, path, str(answer.get("kind", "object"))[:80])


def call(submission: Submission, path: tuple[str, ...], args: tuple,
         kwargs: dict[str, Any]) -> Any:
    """Call the learner's `path` with `args` there; the result here, on the tape if an
    argument is (see the module's docstring)."""
    name = ".".join(path) if path[0] != "$kept" else "the staged function"
    grad = tape.is_grad_enabled()
    encoder = wire.Encoder(ref=_ref, tracked=lambda t: grad and t._node is not None)
    try:
        request = {"op": "call", "path": list(path), "args": encoder.value(list(args)),
                   "kwargs": encoder.value(dict(kwargs)), "grad": grad}
    except wire.CannotCross as why:
        raise TypeError(f"{name}(...) was given {why}, which cannot cross to the "
                        f"submission: {PLAIN_DATA}") from None
    answer, arrays = _request(submission, request, encoder.arrays, f"{name}(...)", path)
    if "value" in answer:
        value, results = _decode(submission, answer["value"], arrays)
        inputs = [t for t in encoder.tensors if grad and t._node is not None]
        _on_tape(submission, answer.get("call"), inputs, results, name)
        return value
    if "unsendable" in answer:
        raise NotPlainData([f"{name}(...) returned {str(answer['unsendable'])[:300]}, "
                            f"which cannot cross to the grader: {PLAIN_DATA}"])
    if answer.get("missing"):
        raise NameError(f"name {path[0]!r} is not defined", name=path[0])
    raise remote_error(answer.get("error"), f"{name}(...)")


def _request(submission: Submission, request: dict[str, Any], arrays: dict[str, Any],
             what: str, function: tuple[str, ...] | None = None) -> tuple[dict, dict]:
    answer, payload = submission.request(request, arrays, what, function)
    printed = answer.get("printed")
    if isinstance(printed, str) and printed:  # shown with the test, if it fails, under
        sys.stdout.write(printed[-PRINTED:])  # "it printed:"
    warn_again(answer)
    return answer, payload


def _decode(submission: Submission, tree: Any, arrays: dict[str, Any]) -> tuple[Any, list]:
    """The value, and the tensors in it (made off the tape: `_on_tape` puts them on)."""
    decoder = wire.Decoder(arrays, graphs=submission.graphs,
                           kept=lambda loaded, number: RemoteGraph(loaded, submission, number),
                           leaves=False)
    try:
        return decoder.value(tree), decoder.tensors
    except (wire.BadMessage, ValueError, TypeError) as bad:
        raise WorkerStopped(f"the worker answered with a malformed value ({bad})") from None


# -- gradients through the wall ----------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class KeptCall:
    """A call the worker kept, to differentiate: which one, and how many results it had."""

    submission: Submission
    number: int
    name: str
    results: int


def _submission_call_vjp(cotangents: list, inputs: tuple, params: dict, needs: tuple) -> list:
    """The gradient rule of `SUBMISSION_CALL`: the worker's vector-Jacobian product."""
    kept: KeptCall = params["call"]
    grad = tape.is_grad_enabled()  # (a backward pass being recorded: create_graph)
    encoder = wire.Encoder(tracked=lambda t: grad and t._node is not None)
    request = {"op": "vjp", "call": kept.number, "cotangents": encoder.value(list(cotangents)),
               "grad": grad}
    what = f"the gradient of {kept.name}(...)"
    answer, arrays = _request(kept.submission, request, encoder.arrays, what)
    if "value" not in answer:
        raise remote_error(answer.get("error"), what)
    grads, results = _decode(kept.submission, answer["value"], arrays)
    if not isinstance(grads, list) or len(grads) != len(inputs):
        raise WorkerStopped(f"{what}: the worker answered {len(inputs)} gradients wrongly")
    # (in the order of the worker's leaves: the cotangents on a tape, then the call's inputs)
    tracked = [*(t for t in encoder.tensors if t._node is not None), *inputs] if grad else []
    _on_tape(kept.submission, answer.get("call"), tracked, results, f"d {kept.name}")
    return grads


#: A call of a learner's function, on the tests' tape: its results came from the worker, and
#: its gradient rule asks the worker (no kernel: it never runs here).
SUBMISSION_CALL = Op("submission_call", lambda xp: None, lambda *specs: None,
                     vjp=_submission_call_vjp, flops=no_flops, primitive=False)


def _on_tape(submission: Submission, number: Any, inputs: list, results: list,
             name: str) -> None:
    """Record the worker's call `number` on the tape, its results among `results`."""
    if type(number) is not int or not inputs or not results:
        return
    params = {"call": KeptCall(submission, number, name, len(results))}
    nodes = tape.record_results(SUBMISSION_CALL, tuple(inputs), params,
                                    tuple(r._data for r in results), CPU)
    for result, node in zip(results, nodes or (), strict=False):
        result._node = node
