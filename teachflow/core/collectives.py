"""Collectives: several processes computing one result together, on an existing engine.

Data-parallel training runs one process per worker (a *rank*, numbered 0 to the *world size*
minus 1), each on its own share of the batch, and one operation joins them: the **all-reduce**,
after which every rank holds the sum (or mean, max, min) of everyone's array. teachflow does
not write that engine itself: it stands on ``torch.distributed`` with the gloo backend (CPU, over
TCP; the same calls run NCCL between GPUs), the optional extra ``teachflow[distributed]``.

NumPy arrays cross to the engine without a copy: ``torch.from_numpy`` gives a tensor that *is*
the array's memory, so the engine reduces the array in place. (A CuPy array would go to NCCL the
same way, through DLPack: `_engine_tensor` is where that would be added; it refuses now.)

A process joins a job once (`join`; the chapter `teachflow.distributed` says from where) and
leaves it at the end (`leave`). A *world of one* needs no engine at all: the all-reduce of one
array is the array, so a training step can be traced and shown without the extra installed.
torch is imported only when a process joins a real job: ``import teachflow`` never loads it.
"""

from __future__ import annotations

import datetime
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.core.errors import TeachflowError

#: The reductions an all-reduce may apply. ``mean`` is a sum divided by the world size (gloo
#: has no mean of its own).
REDUCTIONS = ("sum", "mean", "max", "min")

INSTALL = 'pip install "teachflow[distributed]"'


class CollectiveError(TeachflowError, RuntimeError):
    """A collective that cannot run: no job joined, the engine missing, a rank that failed."""


@dataclass(frozen=True)
class Job:
    """The job this process has joined: its rank, how many ranks there are, and the engine's
    module (``torch.distributed``; None for a world of one, which needs none)."""

    rank: int
    size: int
    engine: Any = None


_job: Job | None = None


def engine() -> Any:
    """``torch.distributed``, imported now; a `CollectiveError` saying how to install it."""
    try:
        import torch.distributed as dist
    except ImportError:
        raise CollectiveError("collectives run on torch.distributed, and torch is not installed",
                              op="distributed", hint=INSTALL) from None
    return dist


def join(rank: int, size: int, address: str = "127.0.0.1", port: int | None = None,
         timeout: float = 300.0) -> Job:
    """Join the job of `size` ranks as `rank`, meeting the others at `address`:`port` (rank 0
    listens there). A world of one joins nothing."""
    global _job
    if _job is not None:
        raise CollectiveError(f"this process has joined a job already (rank {_job.rank} of "
                              f"{_job.size})", op="distributed.init",
                              hint="call tfl.distributed.shutdown() first to leave it")
    if not 0 <= rank < size:
        raise CollectiveError(f"rank {rank} is not one of a world of {size} (0 to {size - 1})",
                              op="distributed.init")
    if size == 1:
        _job = Job(0, 1)
        return _job
    if port is None:
        raise CollectiveError("a job of several ranks needs the port rank 0 listens on",
                              op="distributed.init", hint="set MASTER_PORT")
    dist = engine()
    dist.init_process_group("gloo", init_method=f"tcp://{address}:{port}", rank=rank,
                            world_size=size, timeout=datetime.timedelta(seconds=timeout))
    _job = Job(rank, size, dist)
    return _job


def leave() -> None:
    """Leave the job (if any): the engine's connections close."""
    global _job
    if _job is not None and _job.engine is not None:
        _job.engine.destroy_process_group()
    _job = None


def job() -> Job:
    """The job joined; a `CollectiveError` saying how to join one if none is."""
    if _job is None:
        raise CollectiveError(
            "this process has joined no job: a collective needs the other ranks",
            op="all_reduce",
            hint="run the function with tfl.distributed.launch(fn, world_size), or call "
                 "tfl.distributed.init() in a script started by torchrun (or "
                 "tfl.distributed.init(world_size=1) to try it in one process)")
    return _job


def joined() -> bool:
    return _job is not None


def all_reduce_(array: np.ndarray, op: str = "sum", async_op: bool = False) -> Any:
    """Reduce `array` across the ranks, in place: afterwards every rank's holds the result. With
    `async_op`, returns a handle whose ``wait()`` finishes it (meanwhile the array is the
    engine's), as ``torch.distributed``'s; else None. A ``mean`` is finished by the caller's
    ``wait`` too: the division by the world size happens there."""
    w = job()
    if w.engine is None:  # a world of one: the reduction of one array is the array
        return _Done() if async_op else None
    dist = w.engine
    kind = {"sum": dist.ReduceOp.SUM, "mean": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX,
            "min": dist.ReduceOp.MIN}[op]
    work = dist.all_reduce(_engine_tensor(array), op=kind, async_op=async_op)
    if op == "mean":
        if async_op:
            return _Mean(work, array, w.size)
        array /= w.size
    return work


def broadcast_(array: np.ndarray, src: int = 0) -> None:
    """Overwrite every rank's `array` with rank `src`'s, in place."""
    w = job()
    if w.engine is not None:
        w.engine.broadcast(_engine_tensor(array), src=src)


def _engine_tensor(array: Any) -> Any:
    """The engine's view of `array`'s memory: no copy. A CuPy array would become a CUDA tensor
    here (``torch.from_dlpack``) and be reduced by NCCL; that is not built yet."""
    if not isinstance(array, np.ndarray):
        raise CollectiveError(f"collectives take NumPy arrays, not {type(array).__name__}: the "
                              "GPU path (NCCL) is not built yet", op="all_reduce",
                              hint="move the tensor to the CPU first: x.to('cpu')")
    if not (array.flags.c_contiguous and array.flags.writeable):
        raise CollectiveError("a collective reduces an array in place, and this one is not "
                              "contiguous and writable", op="all_reduce",
                              hint="pass np.ascontiguousarray(array)")
    import torch

    return torch.from_numpy(array)


class _Done:
    """The handle of a collective already finished (a world of one)."""

    def wait(self) -> None:
        return None


@dataclass
class _Mean:
    """The handle of an asynchronous mean: the sum's, then the division."""

    work: Any
    array: np.ndarray
    size: int

    def wait(self) -> None:
        self.work.wait()
        self.array /= self.size
