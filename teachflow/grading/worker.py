"""The worker: a submission's code, run in the sandbox, answering the grader's calls.

`teachflow.grading.sandbox` starts it; everything before `Worker.serve` is the grader's own
code, run before any learner code exists in the process:

1. the pipes to the grader are moved to file descriptors of their own, and descriptors 0, 1
   and 2 point at ``/dev/null`` (what learner code prints is captured per request instead);
2. run by root, it drops to its own user id; then it sets hard limits on CPU time, address
   space, processes and file size, which nothing it runs later can raise again;
3. it imports NumPy and teachflow, so the learner's code finds them as a kernel would.

Then it answers requests (`teachflow.grading.wire` messages), one at a time:

``{"op": "begin", "cells": [...]}``   the notebook's code cells, in the order they run
``{"op": "run", "index": 3}``         run one of them (a failure is answered, not raised)
``{"op": "get", "path": ["model", "weight"]}``   a name's value, if plain data, else its kind
``{"op": "call", "path": ["my_softmax"], "args": ..., "kwargs": ...}``   call it

An answer that is not plain data is answered with why (``"unsendable"``); an exception with
its type, the names of its built-in base classes and its lines as `teachflow.grading.failures`
words them. Nothing here is trusted by the grader: it reads every answer as untrusted data.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
from typing import Any

PRINTED = 4000  # characters of what a request printed, sent back with its answer


def _options() -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="teachflow-worker")
    for name in ("--cpu", "--memory", "--processes", "--file-size"):
        parser.add_argument(name, type=int, required=True)
    parser.add_argument("--uid", type=int)
    parser.add_argument("--probe", action="store_true")
    return parser.parse_args()


def _limit(options: argparse.Namespace) -> None:
    if options.uid is not None:
        os.setgroups([])
        os.setgid(options.uid)
        os.setuid(options.uid)
    for kind, value in ((resource.RLIMIT_CPU, options.cpu), (resource.RLIMIT_AS, options.memory),
                        (resource.RLIMIT_NPROC, options.processes),
                        (resource.RLIMIT_FSIZE, options.file_size), (resource.RLIMIT_CORE, 0)):
        resource.setrlimit(kind, (value, value))


def main() -> None:
    options = _options()
    inbox, outbox = os.dup(0), os.fdopen(os.dup(1), "wb")
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    _limit(options)
    import numpy  # noqa: F401  (imported before learner code, as in a kernel)

    import teachflow  # noqa: F401
    from teachflow.grading import wire

    if options.probe:
        outbox.write(b"ok")
        outbox.flush()
        return
    Worker(wire.reader_of(inbox), outbox).serve()


class Worker:
    """The request loop, and the namespace the learner's cells run in."""

    def __init__(self, read: Any, outbox: Any) -> None:
        from teachflow.grading.runner import Runner

        self.read, self.outbox = read, outbox
        self.runner: Runner | None = None
        self.cells: dict[int, Any] = {}

    def serve(self) -> None:
        from teachflow.grading import wire

        me = os.getpid()
        while True:
            try:
                request, arrays = wire.read_message(self.read)
            except EOFError:
                return
            printed = io.StringIO()
            try:
                with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                    answer, payload = self.answer(request, arrays)
            except BaseException as error:  # the learner may raise anything
                answer, payload = {"error": {"type": type(error).__name__, "bases": [],
                                             "status": "failed", "lines": [repr(error)[:500]]}
                                   }, {}
            if os.getpid() != me:  # a process the learner forked, back in this loop: only
                os._exit(0)        # the worker itself answers
            answer["printed"] = printed.getvalue()[-PRINTED:]
            wire.write_message(self.outbox, answer, payload)

    def answer(self, request: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict, dict]:
        op = request.get("op")
        if op == "begin":
            return self.begin(request["cells"]), {}
        if op == "run":
            return self.run(request["index"]), {}
        if op in ("get", "call"):
            return self.get_or_call(op, request, arrays)
        return {"error": {"type": "ValueError", "bases": [], "status": "failed",
                          "lines": [f"unknown request {op!r}"]}}, {}

    def begin(self, cells: list[dict[str, Any]]) -> dict[str, Any]:
        from teachflow.grading.notebook import Cell
        from teachflow.grading.runner import Runner, fresh_namespace

        notebook = [Cell(c["index"], "code", c["source"], c["nbgrader"], c["place"])
                    for c in cells]
        self.cells = {cell.index: cell for cell in notebook}
        self.runner = Runner(notebook, fresh_namespace(notebook))
        return {"ok": True}

    def run(self, index: int) -> dict[str, Any]:
        assert self.runner is not None
        self.runner.run_cell(self.cells[index])
        failure = self.runner.failures.get(index)
        return {"failure": None if failure is None else
                {"status": failure.status, "lines": failure.lines}}

    def resolve(self, path: list[str]) -> Any:
        assert self.runner is not None
        value = self.runner.namespace[path[0]]
        for name in path[1:]:
            value = getattr(value, name)
        return value

    def get_or_call(self, op: str, request: dict[str, Any],
                    arrays: dict[str, Any]) -> tuple[dict, dict]:
        from teachflow.grading import wire
        from teachflow.grading.failures import explain_failure

        assert self.runner is not None
        path = request["path"]
        if path[0] not in self.runner.namespace:
            return {"missing": True}, {}
        try:
            value = self.resolve(path)
            if op == "call":
                decoder = wire.Decoder(arrays, resolve=self.resolve)
                args = decoder.value(request["args"])
                kwargs = decoder.value(request["kwargs"])
                value = value(*args, **kwargs)
        except BaseException as error:  # the learner may raise anything
            status, lines = explain_failure(error, self.runner.places, "")
            bases = [c.__name__ for c in type(error).__mro__
                     if c.__module__ in ("builtins", "teachflow.errors")]
            return {"error": {"type": type(error).__name__, "bases": bases, "status": status,
                              "lines": lines}}, {}
        if op == "get" and callable(value):  # a function, a module, a staged function
            return {"callable": True, "kind": wire.kind(value)}, {}
        encoder = wire.Encoder()
        try:
            return {"value": encoder.value(value)}, encoder.arrays
        except wire.CannotCross as why:
            if op == "get":
                return {"callable": False, "kind": wire.kind(value)}, {}
            return {"unsendable": str(why)}, {}
