"""The worker: a submission's code, answering the tests' calls across the wall.

The tests never touch the learner's objects: they ask the worker, in `teachflow.grading.wire`
messages, one request at a time, and read the plain data that comes back. When grading,
`teachflow.grading.sandbox` starts the worker as a walled-in process (`main`); for ``teachflow
check`` it is a process of the learner's own; in a notebook, ``tfl.grading.check()`` asks a
worker in the kernel itself, over the kernel's namespace. The requests and their answers are
the same in all three, which is why a check and a grade cannot disagree.

``{"op": "begin", "cells": [...]}``   the notebook's code cells, in the order they run
``{"op": "run", "index": 3}``         run one of them (a failure is answered, not raised)
``{"op": "get", "path": ["model", "weight"]}``   a name's value, if plain data, else its kind
``{"op": "call", "path": ["my_softmax"], "args": ..., "kwargs": ..., "grad": true}``
``{"op": "vjp", "call": 7, "cotangents": [...], "grad": false}``
``{"op": "seed", "seed": 0}``         start the random generators afresh (`teachflow.grading.seeds`)

A ``call`` runs under the tests' gradient mode (``grad``). A tensor that comes in on a tape is
a leaf here; when the result is on a tape too, the worker keeps the call (its input leaves and
result tensors) under a number, and a later ``vjp`` request backpropagates a cotangent per
result through it, with the learner's own ops: this is how a test differentiates through a
learner's function that lives on the other side of the wall (`teachflow.grading.remote`). A
``vjp`` asked with ``grad`` is kept in turn, so gradients of gradients work too.

Each answer carries what the request printed and the warnings it raised (the tests' side
raises them again, so ``pytest.warns`` sees them). An answer that is not plain data says why
(``"unsendable"``); an exception, its type, the names of its built-in base classes and its
lines as `teachflow.grading.failures` words them.

Run as a process, everything before `Worker.serve` is the grader's own code, run before any
learner code exists in the process: the pipes move to descriptors of their own (0, 1 and 2
point at ``/dev/null``); run by root, it drops to its own user id; it sets hard limits on CPU
time, address space, processes and file size, which nothing it runs later can raise again;
then it imports NumPy and teachflow, so the learner's code finds them as a kernel would.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import os
import resource
import warnings
from collections import OrderedDict
from typing import Any

PRINTED = 4000  # characters of what a request printed, sent back with its answer
WARNINGS = 20   # warnings a request may send back
KEPT_CALLS = 256  # differentiable calls kept for a later vjp (the oldest go first)


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
        if value >= 0:
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
    serve(Worker(), wire.reader_of(inbox), outbox)


def serve(worker: Worker, read: Any, outbox: Any) -> None:
    """Answer requests read with `read` on `outbox` until the pipe closes."""
    from teachflow.grading import wire

    me = os.getpid()
    while True:
        try:
            request, arrays = wire.read_message(read)
        except EOFError:
            return
        answer, payload = worker.answer(request, arrays)
        if os.getpid() != me:  # a process the learner forked, back in this loop: only
            os._exit(0)        # the worker itself answers
        wire.write_message(outbox, answer, payload)


class Worker:
    """The namespace the learner's cells run in, and the answers to the tests' requests.

    `namespace`: a kernel's own, whose cells ran already (``tfl.grading.check()`` in a
    notebook); otherwise the worker makes a fresh one and runs the cells it is sent."""

    def __init__(self, namespace: dict[str, Any] | None = None) -> None:
        self.namespace = namespace
        self.runner: Any = None
        self.cells: dict[int, Any] = {}
        self.kept: dict[int, Any] = {}       # staged functions returned: a call runs here
        self.calls: OrderedDict[int, tuple[list, list]] = OrderedDict()  # (leaves, results)
        self.numbers = 0

    def answer(self, request: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict, dict]:
        """The answer to one request, with what it printed and warned (never raises)."""
        printed = io.StringIO()
        with warnings.catch_warnings(record=True) as warned:
            warnings.simplefilter("always")
            try:
                with contextlib.redirect_stdout(printed), contextlib.redirect_stderr(printed):
                    answer, payload = self._answer(request, arrays)
            except BaseException as error:  # the learner may raise anything
                answer, payload = {"error": {"type": type(error).__name__, "bases": [],
                                             "status": "failed", "lines": [repr(error)[:500]]}
                                   }, {}
        answer["printed"] = printed.getvalue()[-PRINTED:]
        answer["warnings"] = [_warning(w) for w in warned[:WARNINGS]]
        return answer, payload

    def _answer(self, request: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict, dict]:
        op = request.get("op")
        if op == "begin":
            return self.begin(request["cells"]), {}
        if op == "run":
            return self.run(request["index"]), {}
        if op == "get":
            return self.get(request["path"])
        if op == "call":
            return self.call(request, arrays)
        if op == "vjp":
            return self.vjp(request, arrays)
        if op == "seed":
            return self.seed(request["seed"]), {}
        return _error("ValueError", [f"unknown request {op!r}"]), {}

    # -- the notebook's cells ----------------------------------------------------------------

    def begin(self, cells: list[dict[str, Any]]) -> dict[str, Any]:
        from teachflow.grading.notebook import Cell
        from teachflow.grading.runner import Runner, fresh_namespace

        notebook = [Cell(c["index"], "code", c["source"], c["nbgrader"], c["place"])
                    for c in cells]
        self.cells = {cell.index: cell for cell in notebook}
        if self.namespace is None:
            from teachflow.grading import runner

            runner.inside_check = True  # (a notebook's own check() cell does nothing here)
            self.runner = Runner(notebook, fresh_namespace(notebook))
        else:
            self.runner = Runner(notebook, self.namespace, ran_by_kernel=True)
        return {"ok": True}

    def seed(self, seed: Any) -> dict[str, Any]:
        """Seed the learner's random generators: before its cells run, and as each test
        starts (`teachflow.grading.seeds`)."""
        from teachflow.grading.seeds import seed_everything

        seed_everything(int(seed))
        return {"ok": True}

    def run(self, index: int) -> dict[str, Any]:
        """Run a cell (in a kernel's worker: read it, the kernel ran it), and say which of the
        names it defines are bound now: a cell that raised may have bound some first."""
        cell = self.cells[index]
        if self.runner.ran_by_kernel:
            self.runner.read_cell(cell)
        else:
            self.runner.run_cell(cell)
        failure = self.runner.failures.get(index)
        bound = [] if failure is not None and self.runner.ran_by_kernel else sorted(
            name for name in self.runner.defines[index] if name in self.runner.namespace)
        return {"failure": None if failure is None else
                {"status": failure.status, "lines": failure.lines}, "bound": bound}

    # -- the tests' requests -----------------------------------------------------------------

    def resolve(self, path: list[str]) -> Any:
        if path[0] == "$kept":
            return self.kept[int(path[1])]
        value = self.runner.namespace[path[0]]
        for name in path[1:]:
            value = getattr(value, name)
        return value

    def _missing(self, path: list[str]) -> bool:
        if path[0] == "$kept":
            return len(path) != 2 or not path[1].isdigit() or int(path[1]) not in self.kept
        return path[0] not in self.runner.namespace

    def get(self, path: list[str]) -> tuple[dict, dict]:
        from teachflow.grading import wire

        if self._missing(path):
            return {"missing": True}, {}
        try:
            value = self.resolve(path)
        except BaseException as error:  # the learner may raise anything (a property, say)
            return self._failure(error), {}
        if callable(value):  # a function, a module, a staged function
            return {"callable": True, "kind": wire.kind(value)}, {}
        try:
            return self._encoded(value)
        except wire.CannotCross:
            return {"callable": False, "kind": wire.kind(value)}, {}

    def call(self, request: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict, dict]:
        from teachflow.autodiff import tape
        from teachflow.grading import wire

        path = request["path"]
        if self._missing(path):
            return {"missing": True}, {}
        grad = request.get("grad") is True
        try:
            function = self.resolve(path)
            decoder = wire.Decoder(arrays, resolve=self.resolve)
            args = decoder.value(request["args"])
            kwargs = decoder.value(request["kwargs"])
            with tape.enable_grad() if grad else tape.no_grad():
                value = function(*args, **kwargs)
        except BaseException as error:  # the learner may raise anything
            return self._failure(error), {}
        leaves = [t for t in decoder.tensors if t._node is not None] if grad else []
        try:
            answer, payload, results = self._encoded(value, with_tensors=True)
        except wire.CannotCross as why:
            return {"unsendable": str(why)}, {}
        if leaves and any(t._node is not None for t in results):
            answer["call"] = self._keep_call(leaves, results)
        return answer, payload

    def vjp(self, request: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict, dict]:
        """Backpropagate one cotangent per result of a kept call to its input leaves."""
        from teachflow.autodiff import tape
        from teachflow.autodiff.backprop import backpropagate, filled_like
        from teachflow.grading import wire

        number, grad = request.get("call"), request.get("grad") is True
        if number not in self.calls:
            return _error("RuntimeError", ["the call to differentiate is gone: only the "
                                           f"latest {KEPT_CALLS} are kept"]), {}
        leaves, results = self.calls[number]
        try:
            decoder = wire.Decoder(arrays)
            cotangents = decoder.value(request["cotangents"])
            sent = [(r._node, c) for r, c in zip(results, cotangents, strict=True)
                    if c is not None and r._node is not None]
            with tape.enable_grad():
                found = dict(backpropagate([node for node, _ in sent], [c for _, c in sent],
                                           {leaf._node for leaf in leaves}, grad))
            grads = [found.get(leaf._node) for leaf in leaves]
            grads = [g if g is not None else filled_like(leaf, 0)
                     for g, leaf in zip(grads, leaves, strict=True)]
        except BaseException as error:  # the learner's gradient rules may raise anything
            return self._failure(error), {}
        answer, payload, made = self._encoded(grads, with_tensors=True)
        if grad and any(g._node is not None for g in made):
            cotangent_leaves = [t for t in decoder.tensors if t._node is not None]
            answer["call"] = self._keep_call([*cotangent_leaves, *leaves], made)
        return answer, payload

    # -- helpers -----------------------------------------------------------------------------

    def _encoded(self, value: Any, with_tensors: bool = False) -> Any:
        from teachflow.grading import wire

        encoder = wire.Encoder(keep=self._keep)
        answer = {"value": encoder.value(value)}
        return (answer, encoder.arrays, encoder.tensors) if with_tensors else \
            (answer, encoder.arrays)

    def _keep(self, value: Any) -> int:
        self.numbers += 1
        self.kept[self.numbers] = value
        return self.numbers

    def _keep_call(self, leaves: list, results: list) -> int:
        self.numbers += 1
        self.calls[self.numbers] = (leaves, results)
        while len(self.calls) > KEPT_CALLS:
            self.calls.popitem(last=False)
        return self.numbers

    def _failure(self, error: BaseException) -> dict[str, Any]:
        from teachflow.grading.failures import explain_failure

        status, lines = explain_failure(error, self.runner.places, "")
        bases = [c.__name__ for c in type(error).__mro__
                 if c.__module__ in ("builtins", "teachflow.core.errors")]
        return {"error": {"type": type(error).__name__, "bases": bases, "status": status,
                          "lines": lines}}


def _error(kind: str, lines: list[str]) -> dict[str, Any]:
    return {"error": {"type": kind, "bases": [kind], "status": "failed", "lines": lines}}


def _warning(warned: warnings.WarningMessage) -> dict[str, Any]:
    category = warned.category
    bases = [c.__name__ for c in category.__mro__
             if c.__module__ == "builtins" or c.__module__.startswith("teachflow.")]
    return {"category": category.__name__, "bases": bases, "message": str(warned.message)[:2000],
            "filename": str(warned.filename)[:300], "lineno": int(warned.lineno or 0)}
