"""``tfl.nn``: modules, the PyTorch way: layers that hold parameters and compute in ``forward``.

    model = tfl.nn.Sequential(tfl.nn.Linear(10, 32), tfl.nn.ReLU(), tfl.nn.Dropout(),
                              tfl.nn.Linear(32, 1))
    loss = tfl.nn.functional.mse_loss(model(x), y)

The chapters: `module` (what a module is: parameters found by attribute, names, modes, state),
`padding` (``F.pad``), `activations` and `losses` (the smooth activations and the
classification losses, each a function beside its module), `functional` (the computations, as
functions: PyTorch's ``F``), `layers` (the modules that call them), `utils` (for the training
loop: gradients clipped by their norm), `parallel` (data parallelism: a module replicated over
the processes of a job, ``DistributedDataParallel``).
"""

from teachflow.nn import functional, parallel, utils
from teachflow.nn.activations import ELU, GELU, LeakyReLU, SiLU, Softplus
from teachflow.nn.layers import (
    AvgPool2d,
    BatchNorm1d,
    BatchNorm2d,
    Conv2d,
    CrossEntropyLoss,
    Dropout,
    Embedding,
    Flatten,
    LayerNorm,
    Linear,
    MaxPool2d,
    MSELoss,
    ReLU,
    Sequential,
    Sigmoid,
    Tanh,
)
from teachflow.nn.losses import BCELoss, BCEWithLogitsLoss, NLLLoss
from teachflow.nn.module import Module, Parameter

__all__ = [
    "ELU",
    "GELU",
    "AvgPool2d",
    "BCELoss",
    "BCEWithLogitsLoss",
    "BatchNorm1d",
    "BatchNorm2d",
    "Conv2d",
    "CrossEntropyLoss",
    "Dropout",
    "Embedding",
    "Flatten",
    "LayerNorm",
    "LeakyReLU",
    "Linear",
    "MSELoss",
    "MaxPool2d",
    "Module",
    "NLLLoss",
    "Parameter",
    "ReLU",
    "Sequential",
    "SiLU",
    "Sigmoid",
    "Softplus",
    "Tanh",
    "functional",
    "parallel",
    "utils",
]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
