"""One submission's worker seen from the tests' side: started, asked, timed, restarted.

A `Submission` owns the worker that runs a notebook's code (`teachflow.grading.worker`) and
is the one way the tests reach it. It is the same object whether the worker is a sandboxed
process (``teachflow grade``), a process of the learner's own (``teachflow check``) or the
learner's kernel itself (``tfl.grading.check()``): only its `Channel` differs, so the tests
meet one route, and check and grade give the same verdicts.

- Cells run when the tests need them (`run_to`): a test cell sees the cells above it in the
  notebook, as in a kernel run from the top. Each runs within the deadline.
- Every request has a deadline (`Limits.timeout`), and the submission a budget (`Limits.budget`)
  over all of them: once it is spent, what is left fails at once, saying so. A function whose
  call ran past its deadline is not called again: its later calls fail at once, so one endless
  loop costs one timeout, not one per test.
- When a request runs past its deadline, ends the process, or uses up a limit, the worker is
  killed with all it started, the reason noted in words, and the next request starts a fresh
  worker that runs again the cells that had run, leaving out those that killed one: one bad
  cell costs its own tests only. A cell that merely raised runs again (what it bound before
  raising is bound again, as in the kernel it was written in).
- The worker's random generators start from fixed seeds (`teachflow.grading.seeds`): before
  its cells run, and again as each test starts (`seed`), also after a restart.
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from teachflow.grading import sandbox, seeds, wire
from teachflow.grading.failures import FAILED, NOT_DONE, SubmissionFailure
from teachflow.grading.notebook import Cell

MAX_STARTS = 6  # a submission whose worker dies more often than this gets no more chances


class WorkerStopped(SubmissionFailure):
    """The worker died or was killed while doing what was asked: `reason` says why."""

    def __init__(self, reason: str) -> None:
        super().__init__([reason])
        self.reason = reason


class Channel(Protocol):
    """A started worker, as the tests talk to it."""

    def ask(self, request: dict[str, Any], arrays: dict[str, Any], deadline: float,
            what: str) -> tuple[dict[str, Any], dict[str, Any]]:
        """The worker's answer, or `WorkerStopped` (the worker is gone) saying why."""

    def close(self) -> None:
        """Stop the worker and all it started."""


class ProcessChannel:
    """A worker process (`teachflow.grading.sandbox`), over its pipes."""

    def __init__(self, isolation: str, limits: sandbox.Limits, cwd: str | None = None) -> None:
        self.limits = limits
        self.worker = sandbox.start(isolation, limits, cwd=cwd)

    def ask(self, request: dict[str, Any], arrays: dict[str, Any], deadline: float,
            what: str) -> tuple[dict[str, Any], dict[str, Any]]:
        worker = self.worker
        assert worker.process.stdin is not None and worker.process.stdout is not None
        try:
            wire.write_message(worker.process.stdin, request, arrays)
            return wire.read_message(wire.reader_of(worker.process.stdout.fileno(), deadline),
                                     wire.MessageLimits(payload=min(1 << 30,
                                                             self.limits.memory_mb << 20)))
        except TimeoutError:
            reason = f"{what} {over_time(self.limits)}"
        except (EOFError, BrokenPipeError, OSError):
            reason = self.worker.death(what)
        except wire.BadMessage as bad:
            reason = f"{what}: the worker answered with a malformed message ({bad})"
        self.close()
        raise WorkerStopped(reason)

    def close(self) -> None:
        self.worker.kill()


class KernelChannel:
    """The learner's kernel as the worker (``tfl.grading.check()`` in a notebook).

    Requests and answers are still written as messages and read back, so that what a test
    gets is what it would get across the wall. Nothing can stop a call in the kernel's own
    thread; one that takes longer than the deadline fails once it returns, as grading's
    deadline would have stopped it."""

    def __init__(self, worker: Any, limits: sandbox.Limits) -> None:
        self.worker, self.limits = worker, limits

    def ask(self, request: dict[str, Any], arrays: dict[str, Any], deadline: float,
            what: str) -> tuple[dict[str, Any], dict[str, Any]]:
        request, arrays = _through_the_wire(request, arrays)
        answer, payload = self.worker.answer(request, arrays)
        if time.monotonic() > deadline:
            raise WorkerStopped(f"{what} {over_time(self.limits)}")
        return _through_the_wire(answer, payload)

    def close(self) -> None:
        pass


def _through_the_wire(header: dict[str, Any], arrays: dict[str, Any]) -> tuple[dict, dict]:
    import io

    buffer = io.BytesIO()
    wire.write_message(buffer, header, arrays)
    data = memoryview(buffer.getvalue())
    position = 0

    def read(size: int) -> bytes:
        nonlocal position
        chunk = bytes(data[position:position + size])
        position += size
        return chunk

    return wire.read_message(read)


def over_time(limits: sandbox.Limits) -> str:
    return f"did not finish within {limits.timeout:g} s (a loop that never ends?)"


class Submission:
    """One submission's worker: its program's cells, run on demand (see the module's
    docstring); `connect` starts a worker and returns its channel; the staged functions the
    worker returns are read from files in `scratch`."""

    def __init__(self, cells: list[Cell], connect: Callable[[], Channel],
                 limits: sandbox.Limits, scratch: Path) -> None:
        self.cells, self.connect, self.limits = cells, connect, limits
        self.graphs = Path(tempfile.mkdtemp(prefix="graphs-", dir=scratch))
        self.failures: dict[int, tuple[str, list[str]]] = {}
        self.bound: dict[int, set[str]] = {}
        self.killed: set[int] = set()          # cells that killed a worker: never run again
        self.done = 0                          # how many of `cells` have run
        self.channel: Channel | None = None
        self.starts = 0
        self.spent = 0.0                       # seconds of requests, against the budget
        self.over_time: dict[tuple[str, ...], str] = {}  # functions whose call timed out
        self.seeded: int | None = None         # the seed the running test started from

    # -- the worker's life -----------------------------------------------------------------

    def _start(self) -> Channel:
        """A worker with the cells that ran so far run again (but those that killed one)."""
        while self.channel is None:
            if self.spent >= self.limits.budget:
                raise WorkerStopped(self._spent())
            if self.starts >= MAX_STARTS:
                raise WorkerStopped(f"the worker was stopped {MAX_STARTS} times; no more tries")
            self.starts += 1
            self.channel = self.connect()
            try:
                self._ask({"op": "begin", "cells": [
                    {"index": c.index, "place": c.place, "source": c.source,
                     "nbgrader": c.nbgrader} for c in self.cells]}, {}, "the worker")
            except WorkerStopped as stopped:
                self.starts = MAX_STARTS
                raise WorkerStopped(f"the worker did not start: {stopped.reason}") from None
            self._seed(seeds.SEED)
            for cell in self.cells[:self.done]:
                if cell.index not in self.killed and not self._run(cell):
                    break
            if self.seeded is not None:
                self._seed(self.seeded)  # (the test goes on as if the worker had not stopped)
        return self.channel

    def seed(self, seed: int) -> None:
        """Start the worker's random generators afresh from `seed`: each test does. A worker
        not started yet is seeded when it starts."""
        self.seeded = seed
        if self.channel is not None:
            self._seed(seed)

    def _seed(self, seed: int) -> None:
        if self.channel is not None:
            with contextlib.suppress(WorkerStopped):  # (the test's own request says why)
                self._ask({"op": "seed", "seed": seed}, {}, "seeding the random generators")

    def run_to(self, count: int) -> None:
        """Run the program's cells up to the `count`-th (those not run yet)."""
        while self.done < count:
            cell = self.cells[self.done]
            self.done += 1
            try:
                self._start()
            except WorkerStopped as stopped:
                self.failures.setdefault(cell.index, (FAILED, [stopped.reason]))
                continue
            self._run(cell)

    def _run(self, cell: Cell) -> bool:
        """Run one cell; False when it killed the worker."""
        try:
            answer, _ = self._ask({"op": "run", "index": cell.index}, {}, "it")
        except WorkerStopped as stopped:
            self.failures[cell.index] = (FAILED, [stopped.reason])
            self.killed.add(cell.index)
            return False
        failure = answer.get("failure")
        if isinstance(failure, dict):
            status = NOT_DONE if failure.get("status") == NOT_DONE else FAILED
            lines = failure.get("lines")
            self.failures[cell.index] = (status, _lines(lines) or ["it raised an error"])
        bound = answer.get("bound")
        self.bound[cell.index] = {str(n) for n in bound} if isinstance(bound, list) else set()
        return True

    def close(self) -> None:
        if self.channel is not None:
            self.channel.close()
            self.channel = None

    # -- requests ----------------------------------------------------------------------------

    def request(self, request: dict[str, Any], arrays: dict[str, Any], what: str,
                function: tuple[str, ...] | None = None) -> tuple[dict, dict]:
        """Ask the worker (started if need be); `function` names the learner's function
        called, which is not called again once a call of it has timed out."""
        if function is not None and function in self.over_time:
            raise WorkerStopped(f"{what} was not called: {self.over_time[function]}")
        self._start()
        try:
            return self._ask(request, arrays, what)
        except WorkerStopped as stopped:
            if function is not None and "did not finish within" in stopped.reason:
                self.over_time[function] = (f"an earlier call of {'.'.join(function)} did "
                                            f"not finish within {self.limits.timeout:g} s")
            raise

    def _ask(self, request: dict[str, Any], arrays: dict[str, Any],
             what: str) -> tuple[dict, dict]:
        left = self.limits.budget - self.spent
        if left <= 0:
            self.close()
            raise WorkerStopped(f"{what} was not run: {self._spent()}")
        channel = self.channel
        assert channel is not None
        start = time.monotonic()
        try:
            return channel.ask(request, arrays, start + min(self.limits.timeout, left), what)
        except WorkerStopped as stopped:
            self.channel = None
            if left < self.limits.timeout and "did not finish within" in stopped.reason:
                raise WorkerStopped(f"{what} did not finish before the submission used up "
                                    f"its {self.limits.budget:g} s in all") from None
            raise
        finally:
            self.spent += time.monotonic() - start


    def _spent(self) -> str:
        return f"the submission used up its {self.limits.budget:g} s in all"


def _lines(lines: Any) -> list[str]:
    """The worker's explanation lines (untrusted): at most 40, of 2000 characters each."""
    return [str(line)[:2000] for line in lines[:40]] if isinstance(lines, list) else []
