"""``tfl.optim``: the loop that trains, ``zero_grad(); loss.backward(); step()``, as PyTorch's.

The chapters: `optimizer` (what every optimizer is: parameter groups and their settings, the
state it keeps per parameter, ``zero_grad``, state dicts to resume from), `sgd` and `adam` (two
update rules), and `lr_scheduler` (learning rates that change from epoch to epoch).
"""

from teachflow.optim import lr_scheduler
from teachflow.optim.adam import Adam
from teachflow.optim.optimizer import Optimizer
from teachflow.optim.sgd import SGD

__all__ = ["SGD", "Adam", "Optimizer", "lr_scheduler"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
