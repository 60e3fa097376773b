"""``tfl.distributed``: one program, several processes, their arrays reduced together.

Data-parallel training runs the same step in N processes, each on 1/N of the batch, and makes
their gradients equal by an all-reduce before the optimizer steps. The collectives run on
``torch.distributed`` with the gloo backend (``pip install "teachflow[distributed]"``); lesson 10
explains it, and ``tfl.nn.parallel.DistributedDataParallel`` uses it.

- `job`: being one process of a job: `init`, `rank`, `world_size`, `all_reduce`, `broadcast`,
  `shutdown`;
- `launch`: starting the job's processes on this machine, ``launch(fn, world_size, *args)``,
  and ending them all, with the rank that failed and why, if one does.
"""

from teachflow.core.collectives import CollectiveError as CollectiveError
from teachflow.distributed.job import (
    all_reduce,
    broadcast,
    init,
    is_initialized,
    rank,
    shutdown,
    world_size,
)
from teachflow.distributed.launch import launch

# (`CollectiveError`, a foundation's, is reachable here too; it is a `tfl.TeachflowError`.)
__all__ = ["all_reduce", "broadcast", "init", "is_initialized", "launch",
           "rank", "shutdown", "world_size"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
