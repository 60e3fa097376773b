"""``tfl.nn``: modules, the PyTorch way: layers that hold parameters and compute in ``forward``.

    model = tfl.nn.Sequential(tfl.nn.Linear(10, 32), tfl.nn.ReLU(), tfl.nn.Dropout(),
                              tfl.nn.Linear(32, 1))
    loss = tfl.nn.functional.mse_loss(model(x), y)

The chapters: `module` (what a module is: parameters found by attribute, names, modes, state),
`functional` (the computations, as functions), `layers` (the modules that call them), `utils`
(for the training loop: gradients clipped by their norm), `parallel` (data parallelism: a module
replicated over the processes of a job, ``DistributedDataParallel``).
"""

from teachflow.nn import functional, parallel, utils
from teachflow.nn.layers import (
    Conv2d,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    MSELoss,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)
from teachflow.nn.module import Module, Parameter

__all__ = ["Conv2d", "CrossEntropyLoss", "Dropout", "Embedding", "Flatten", "LayerNorm",
           "Linear", "MSELoss", "Module", "Parameter", "ReLU", "Sequential", "Sigmoid", "Tanh",
           "functional", "parallel", "utils"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
