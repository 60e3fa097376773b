"""Being one process of a job: joining it, who you are in it, and the collectives.

A process started by `launch` (or by ``torchrun``, on this machine or many) calls `init`, which
reads the job from the environment, as ``torch.distributed`` does: ``RANK`` (which process this
is), ``WORLD_SIZE`` (how many), ``MASTER_ADDR`` and ``MASTER_PORT`` (where rank 0 listens).
`launch` calls it for you. ``init(world_size=1)`` joins a world of one, which needs no engine:
the all-reduce of one array is the array, so a data-parallel program runs (and traces) in one
process too.

`all_reduce` is the op ``all_reduce`` (`teachflow.ops.collective`): eagerly it reduces now;
inside ``tfl.function`` it becomes a node of the graph.
"""

from __future__ import annotations

import os
from typing import Any

from teachflow.core import collectives
from teachflow.core.collectives import CollectiveError
from teachflow.core.dispatch import bind
from teachflow.ops.collective import all_reduce as _all_reduce
from teachflow.tensor.tensor import Tensor, as_tensor


def init(rank: int | None = None, world_size: int | None = None, timeout: float = 300.0) -> None:
    """Join the job the environment describes (``RANK``, ``WORLD_SIZE``, ``MASTER_ADDR``,
    ``MASTER_PORT``); `rank` and `world_size`, where given, instead of the environment's."""
    size = world_size if world_size is not None else _from_environment("WORLD_SIZE")
    me = rank if rank is not None else 0 if size == 1 else _from_environment("RANK")
    port = os.environ.get("MASTER_PORT")
    collectives.join(me, size, os.environ.get("MASTER_ADDR", "127.0.0.1"),
                     int(port) if port else None, timeout)


def shutdown() -> None:
    """Leave the job (``torch.distributed.destroy_process_group``)."""
    collectives.leave()


def is_initialized() -> bool:
    """Whether this process has joined a job."""
    return collectives.joined()


def rank() -> int:
    """Which process of the job this is: 0 to ``world_size() - 1``."""
    return collectives.job().rank


def world_size() -> int:
    """How many processes the job has."""
    return collectives.job().size


def all_reduce(t: Any, op: str = "sum") -> Tensor:
    """Every rank's `t` reduced (``"sum"``, ``"mean"``, ``"max"``, ``"min"``), on every rank: a
    new tensor (`t` is left as it is). Differentiable for sum and mean."""
    t = as_tensor(t)
    _all_reduce.abstract_eval(t, reduction=op)  # (eagerly too: a bad `op` named before it runs)
    return bind(_all_reduce, t, reduction=op)


def broadcast(t: Tensor, src: int = 0) -> Tensor:
    """Overwrite `t`'s values, on every rank, with rank `src`'s (in place); returns `t`."""
    collectives.broadcast_(t._data, src)
    return t


def _from_environment(name: str) -> int:
    value = os.environ.get(name)
    if value is None or not value.isdigit():
        raise CollectiveError(
            f"the environment variable {name} is {'not set' if value is None else repr(value)}: "
            "it says which job to join", op="distributed.init",
            hint="start the script with torchrun (which sets RANK, WORLD_SIZE, MASTER_ADDR and "
                 "MASTER_PORT), run the function with tfl.distributed.launch(fn, world_size), "
                 "or call tfl.distributed.init(world_size=1) for a world of one")
    return int(value)
