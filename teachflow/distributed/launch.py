"""Starting a job on this machine: `launch` runs a function in several processes, one per rank.

    def train(steps):
        tfl.distributed.rank(), tfl.distributed.world_size()   # 0 or 1, and 2
        ...
        return loss

    losses = tfl.distributed.launch(train, 2, 100)   # [rank 0's loss, rank 1's]

Each rank is a new Python process (multiprocessing's *spawn*: nothing of this process is
inherited but its environment), so the function and its arguments travel pickled, by
``cloudpickle``: a function defined in a notebook cell or a script's ``__main__`` travels as its
code. Each process finds the others through the environment variables ``torchrun`` sets too
(`RANK`, `WORLD_SIZE`, `MASTER_ADDR`, `MASTER_PORT`): rank 0 listens on a free port of the
loopback address, and gloo talks over the loopback interface (``GLOO_SOCKET_IFNAME=lo``), so
nothing leaves the machine. Each gets ``OMP_NUM_THREADS=1`` unless you set it: N processes each
running as many BLAS threads as there are cores would fight over them.

A job never hangs silently. The parent waits for every rank's result, its death, or the
`timeout`, whichever comes first; the first failure ends every process of the job and raises a
`CollectiveError` naming the rank: its traceback if it raised, its exit code if it died (a
crash, ``os._exit``, a signal), or the seconds waited if the job ran out of time. (When one rank
fails, the others are usually stuck waiting for it inside a collective; that is why they are
ended rather than waited for.)
"""

from __future__ import annotations

import multiprocessing
import os
import socket
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from multiprocessing.connection import wait
from typing import Any

from teachflow.core import collectives
from teachflow.core.collectives import INSTALL, CollectiveError

#: The seconds a job may take, by default.
TIMEOUT = 120.0


def launch(fn: Callable[..., Any], world_size: int, *args: Any, timeout: float = TIMEOUT) -> list:
    """Run ``fn(*args)`` in `world_size` processes of one job; their results, in rank order."""
    if not isinstance(world_size, int) or world_size < 1:
        raise CollectiveError(f"world_size must be a positive int, not {world_size!r}",
                              op="distributed.launch")
    payload = _pickled((fn, args))
    context = multiprocessing.get_context("spawn")
    port = free_port()
    ranks, pipes = [], []
    try:
        for rank in range(world_size):
            ours, theirs = context.Pipe(duplex=False)
            process = context.Process(target=run_rank, args=(payload, theirs, timeout),
                                      name=f"teachflow rank {rank}", daemon=True)
            with _environment(rank, world_size, port):
                process.start()
            theirs.close()
            ranks.append(process)
            pipes.append(ours)
        results = _results(ranks, pipes, timeout)
        for process in ranks:  # (each is leaving the job: a moment to do so)
            process.join(5)
        return results
    finally:
        _end(ranks)


def free_port() -> int:
    """A TCP port of the loopback address no one listens on now (the OS picks it)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_rank(payload: bytes, pipe: Any, timeout: float) -> None:
    """What each process of `launch` runs: join the job, call the function, send back its
    result, or the traceback of what it raised."""
    try:
        import cloudpickle

        fn, args = cloudpickle.loads(payload)
        collectives.join(int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]),
                         os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), timeout)
        message = ("result", cloudpickle.dumps(fn(*args)))
    except BaseException:  # (sent to the parent, which raises it with the rank)
        message = ("raised", traceback.format_exc())
    try:
        pipe.send(message)
    finally:
        pipe.close()
        collectives.leave()


def _pickled(what: Any) -> bytes:
    try:
        import cloudpickle
    except ImportError:
        raise CollectiveError("launch sends the function to its processes with cloudpickle, "
                              "which is not installed", op="distributed.launch",
                              hint=INSTALL) from None
    return cloudpickle.dumps(what)


@contextmanager
def _environment(rank: int, world_size: int, port: int) -> Iterator[None]:
    """This process's environment, as rank `rank`'s should be while it starts (a spawned
    process copies it), then as it was."""
    wanted = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(world_size),
              "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": str(port), "GLOO_SOCKET_IFNAME": "lo",
              "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    before = {name: os.environ.get(name) for name in wanted}
    os.environ.update(wanted)
    try:
        yield
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _results(ranks: list, pipes: list, timeout: float) -> list:
    """Every rank's result, or the first failure as a `CollectiveError`."""
    import cloudpickle

    deadline = time.monotonic() + timeout
    results: dict[int, Any] = {}
    waiting = dict(enumerate(pipes))
    while waiting:
        left = deadline - time.monotonic()
        ready = wait([*waiting.values(), *(ranks[r].sentinel for r in waiting)],
                     timeout=max(left, 0))
        if not ready:
            raise CollectiveError(
                f"the job ran out of time: rank(s) {', '.join(map(str, sorted(waiting)))} had "
                f"not finished after {timeout:g} s; every process was ended",
                op="distributed.launch",
                hint="a rank waiting in a collective the others never join hangs: every rank "
                     "must call the same collectives in the same order (or give a longer "
                     "timeout=)")
        for rank, pipe in list(waiting.items()):
            if pipe in ready or ranks[rank].sentinel in ready:
                results[rank] = _received(rank, pipe, ranks[rank], cloudpickle)
                del waiting[rank]
    return [results[r] for r in range(len(ranks))]


def _received(rank: int, pipe: Any, process: Any, cloudpickle: Any) -> Any:
    """What rank `rank` sent: its result; a `CollectiveError` if it raised or died."""
    try:
        kind, body = pipe.recv()
    except EOFError:  # it died before it could say anything
        process.join(5)
        code = process.exitcode
        how = f"was killed by signal {-code}" if code is not None and code < 0 else \
            f"exited with code {code}"
        raise CollectiveError(f"rank {rank} died: it {how} before returning a result; every "
                              "other process was ended", op="distributed.launch",
                              hint="a crash in native code, running out of memory, or os._exit "
                                   "in the function") from None
    if kind == "raised":
        raise CollectiveError(f"rank {rank} raised an exception; every other process was "
                              f"ended. Its traceback:\n{body}", op="distributed.launch")
    return cloudpickle.loads(body)


def _end(ranks: list) -> None:
    """End every process still running, first asking (SIGTERM), then not (SIGKILL)."""
    for process in ranks:
        if process.is_alive():
            process.terminate()
    for process in ranks:
        process.join(2)
        if process.is_alive():
            process.kill()
            process.join(2)
