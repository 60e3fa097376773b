"""The learner's code seen from the trusted side: a worker to talk to, and proxies for its names.

`Submission` owns one submission's worker (`teachflow.grading.sandbox`). It sends the
notebook's code cells, runs them one at a time with a deadline each, and answers the grader's
`get` and `call` with plain values (`teachflow.grading.wire`). When a cell or a call runs past
its deadline, ends the process (``os._exit``), or uses up a limit, the worker is killed with
all it started, the reason noted in words, and the next request starts a fresh worker that
runs the cells again, leaving out those that failed: one bad cell costs its own tests only.

A test names the learner's functions directly; when grading, each such name is a `Remote`:
calling it sends the arguments to the worker and returns the plain value that comes back. It
has no ``__eq__`` of its own, no ``__bool__``, no ``__array__``: nothing of the learner's
runs in the grader, so an object whose ``__eq__`` always says True stays in the worker and
the call that returns it fails, saying so.
"""

from __future__ import annotations

import builtins
import signal
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from teachflow.grading import sandbox, wire
from teachflow.grading.failures import FAILED, NOT_DONE, SubmissionFailure
from teachflow.grading.notebook import Cell

MAX_STARTS = 6  # a submission whose worker dies more often than this gets no more chances
PRINTED = 2000  # characters kept of what one request printed
PLAIN_DATA = ("only tensors, arrays, numbers, strings, lists, tuples and dicts of them, and "
              "staged functions do")


class WorkerStopped(SubmissionFailure):
    """The worker died or was killed while doing what was asked: `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__([reason])
        self.reason = reason


class RemoteError(SubmissionFailure):
    """An exception the learner's code raised in the worker, as the grader reports it.

    The class a test sees derives from the built-in (or teachflow) exception the worker
    named as well, so ``pytest.raises(ValueError)`` around a learner's call works."""


_ERROR_CLASSES: dict[tuple[str, str], type[RemoteError]] = {}


def remote_error(info: Any, what: str) -> BaseException:
    """The exception to raise in the grader for the worker's answer `info` (untrusted)."""
    if not isinstance(info, dict):
        return WorkerStopped(f"{what} answered nonsense")
    name = str(info.get("type", "Exception"))[:80]
    lines = _lines(info.get("lines"))
    base: type[BaseException] = Exception
    for candidate in info.get("bases", []) if isinstance(info.get("bases"), list) else []:
        found = _known_exception(str(candidate))
        if found is not None:
            base = found
            break
    key = (name, base.__name__)
    if key not in _ERROR_CLASSES:
        bases = (base, RemoteError) if base is not Exception else (RemoteError,)
        try:  # (the built-in first: its own __new__ makes the exception)
            made = type(name, bases, {"__module__": "submission"})
        except TypeError:  # a base whose layout cannot be mixed in
            made = type(name, (RemoteError,), {"__module__": "submission"})
        _ERROR_CLASSES[key] = made
    if name == "MemoryError":
        lines.append(f"({what} ran out of the memory a submission may use)")
    error = _ERROR_CLASSES[key](lines[0] if lines else name)
    error.lines = lines or [name]
    error.status = NOT_DONE if info.get("status") == NOT_DONE else FAILED
    return error


def _lines(lines: Any) -> list[str]:
    """The worker's explanation lines (untrusted): at most 40, of 2000 characters each."""
    return [str(line)[:2000] for line in lines[:40]] if isinstance(lines, list) else []


def _known_exception(name: str) -> type[BaseException] | None:
    import teachflow.errors

    for module in (builtins, teachflow.errors):
        found = getattr(module, name, None)
        if isinstance(found, type) and issubclass(found, Exception):
            return found
    return None


class Remote:
    """A name in the learner's notebook, living in the worker (see the module's docstring)."""

    __slots__ = ("_kind", "_path", "_submission")

    def __init__(self, submission: Submission, path: tuple[str, ...], kind: str) -> None:
        self._submission, self._path, self._kind = submission, path, kind

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._submission.call(self._path, args, kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return self._submission.get((*self._path, name))

    def __repr__(self) -> str:
        return f"<{'.'.join(self._path)}: the submission's {self._kind}, run in its sandbox>"


def _ref(value: Any) -> list[str] | None:
    return list(value._path) if isinstance(value, Remote) else None


class Submission:
    """One submission's worker: its cells, started (and restarted) on demand."""

    def __init__(self, cells: list[Cell], isolation: str, limits: sandbox.Limits,
                 scratch: Path) -> None:
        self.cells, self.isolation, self.limits = cells, isolation, limits
        self.graphs = Path(tempfile.mkdtemp(prefix="graphs-", dir=scratch))
        self.failures: dict[int, tuple[str, list[str]]] = {}
        self.worker: sandbox.Worker | None = None
        self.starts = 0

    # -- the worker's life -----------------------------------------------------------------

    def start(self) -> None:
        """Start a worker and run the cells that have not failed, each within the deadline."""
        while self.worker is None:
            if self.starts >= MAX_STARTS:
                raise WorkerStopped(f"the worker was stopped {MAX_STARTS} times; no more tries")
            self.starts += 1
            self.worker = sandbox.start(self.isolation, self.limits)
            runnable = [c for c in self.cells if c.index not in self.failures]
            try:
                self._ask({"op": "begin", "cells": [
                    {"index": c.index, "place": c.place, "source": c.source,
                     "nbgrader": c.nbgrader}
                    for c in runnable]}, {}, "the worker")
            except WorkerStopped as stopped:
                self.starts = MAX_STARTS
                raise WorkerStopped(f"the worker did not start: {stopped.reason}") from None
            for cell in runnable:
                try:
                    answer, _ = self._ask({"op": "run", "index": cell.index}, {}, "it")
                except WorkerStopped as stopped:
                    self.failures[cell.index] = (FAILED, [stopped.reason])
                    break
                failure = answer.get("failure")
                if isinstance(failure, dict):
                    status = NOT_DONE if failure.get("status") == NOT_DONE else FAILED
                    self.failures[cell.index] = (status, _lines(failure.get("lines"))
                                                 or ["it raised an error"])

    def close(self) -> None:
        if self.worker is not None:
            self.worker.kill()
            self.worker = None

    def _ask(self, request: dict[str, Any], arrays: dict[str, Any],
             what: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """Send `request`; the answer, or WorkerStopped (the worker killed) with the reason."""
        worker = self.worker
        assert worker is not None and worker.process.stdin is not None
        deadline = time.monotonic() + self.limits.timeout
        try:
            wire.write_message(worker.process.stdin, request, arrays)
            answer, payload = wire.read_message(
                wire.reader_of(worker.process.stdout.fileno(), deadline), self._wire_limits())
        except TimeoutError:
            reason = (f"{what} did not finish within {self.limits.timeout:g} s "
                      f"(a loop that never ends?)")
        except (EOFError, BrokenPipeError, OSError):
            reason = self._death(worker, what)
        except wire.BadMessage as bad:
            reason = f"{what}: the worker answered with a malformed message ({bad})"
        else:
            return answer, payload
        worker.kill()
        self.worker = None
        raise WorkerStopped(reason)

    def _wire_limits(self) -> wire.Limits:
        return wire.Limits(payload=min(1 << 30, self.limits.memory_mb << 20))

    def _death(self, worker: sandbox.Worker, what: str) -> str:
        try:
            status = worker.process.wait(timeout=5)
        except Exception:
            return f"{what} closed the worker's connection to the grader"
        if worker.isolation == "bubblewrap" and status > 128:
            status = -(status - 128)  # bwrap reports a signal as 128 + its number
        if status >= 0:
            return (f"{what} ended the worker process (exit status {status}): code must not "
                    f"exit (os._exit, sys.exit at the top level of a process)")
        signals = {signal.SIGXCPU: "used more than its CPU time",
                   signal.SIGXFSZ: f"wrote a file larger than {self.limits.file_mb} MB",
                   signal.SIGKILL: "was killed (out of memory?)",
                   signal.SIGSEGV: "crashed (segmentation fault)"}
        why = signals.get(-status, f"was killed by signal {-status}")
        return f"{what} {why}; limits: {self.limits.memory_mb} MB of memory"

    # -- what tests do ---------------------------------------------------------------------

    def get(self, path: tuple[str, ...]) -> Any:
        """The value of `path` in the worker's namespace: plain data, or a `Remote`."""
        answer, arrays = self._request({"op": "get", "path": list(path)}, {}, ".".join(path))
        if answer.get("missing"):
            raise NameError(f"name {path[0]!r} is not defined", name=path[0]) \
                if len(path) == 1 else AttributeError(".".join(path))
        if "value" in answer:
            return self._decode(answer["value"], arrays)
        kind = str(answer.get("kind", "object"))[:80]
        return Remote(self, path, kind)

    def call(self, path: tuple[str, ...], args: tuple, kwargs: dict[str, Any]) -> Any:
        name = ".".join(path)
        encoder = wire.Encoder(ref=_ref)
        try:
            request = {"op": "call", "path": list(path), "args": encoder.value(list(args)),
                       "kwargs": encoder.value(dict(kwargs))}
        except wire.CannotCross as why:
            raise TypeError(f"{name}(...) was given {why}, which cannot cross to the "
                            f"submission: {PLAIN_DATA}") from None
        answer, arrays = self._request(request, encoder.arrays, f"{name}(...)")
        if "value" in answer:
            return self._decode(answer["value"], arrays)
        if "unsendable" in answer:
            raise NotPlainData([f"{name}(...) returned {str(answer['unsendable'])[:300]}, "
                                f"which cannot cross to the grader: {PLAIN_DATA}"])
        if answer.get("missing"):
            raise NameError(f"name {path[0]!r} is not defined", name=path[0])
        raise remote_error(answer.get("error"), f"{name}(...)")

    def _request(self, request: dict[str, Any], arrays: dict[str, Any],
                 what: str) -> tuple[dict[str, Any], dict[str, Any]]:
        self.start()
        answer, payload = self._ask(request, arrays, what)
        printed = answer.get("printed")
        if isinstance(printed, str) and printed:  # shown with the test, if it fails, under
            sys.stdout.write(printed[-PRINTED:])  # "it printed:"
        return answer, payload

    def _decode(self, tree: Any, arrays: dict[str, Any]) -> Any:
        try:
            return wire.Decoder(arrays, graphs=self.graphs).value(tree)
        except (wire.BadMessage, ValueError, TypeError) as bad:
            raise WorkerStopped(f"the worker answered with a malformed value ({bad})") from None


class NotPlainData(SubmissionFailure):
    """A learner's function returned something that may not cross to the grader."""


