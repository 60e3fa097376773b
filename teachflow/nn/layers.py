"""The layers: `Linear`, the activations, `Dropout`, and `Sequential` to chain them.

Each is a small `Module` whose ``forward`` calls `teachflow.nn.functional`. `Linear` starts as
PyTorch's does: weight and bias uniform in ±1/√in_features (PyTorch's Kaiming-uniform with
a = √5 comes to exactly that bound for the weight), so a model starts in the same range, and
its weight has PyTorch's shape (out_features, in_features).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from teachflow.errors import DTypeError, TeachflowError
from teachflow.factories import rand
from teachflow.nn import functional as F
from teachflow.nn.module import Module, Parameter


class Linear(Module):
    """``y = x @ weight.T + bias``: `in_features` inputs to `out_features` outputs."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype: Any = "float32", device: str = "cpu") -> None:
        super().__init__()
        for name, n in (("in_features", in_features), ("out_features", out_features)):
            if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
                raise DTypeError(f"{name} must be a positive int, not {n!r}", op="Linear",
                                 hint="e.g. tfl.nn.Linear(784, 128)")
        self.in_features, self.out_features = in_features, out_features
        bound = 1.0 / math.sqrt(in_features)

        def uniform(*shape: int) -> Parameter:
            return Parameter(rand(*shape, dtype=dtype, device=device) * (2 * bound) - bound)
        self.weight = uniform(out_features, in_features)
        self.bias = uniform(out_features) if bias else None

    def forward(self, x: Any) -> Any:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


class ReLU(Module):
    """``max(x, 0)``."""

    def forward(self, x: Any) -> Any:
        return F.relu(x)


class Tanh(Module):
    def forward(self, x: Any) -> Any:
        return F.tanh(x)


class Sigmoid(Module):
    """``1 / (1 + exp(-x))``."""

    def forward(self, x: Any) -> Any:
        return F.sigmoid(x)


class Dropout(Module):
    """While training, zero each element with probability `p` and scale the rest by
    ``1 / (1 - p)``; in evaluation (``model.eval()``), pass the input through."""

    def __init__(self, p: float = 0.5) -> None:
        super().__init__()
        self.p = F.check_probability(p, "Dropout")

    def forward(self, x: Any) -> Any:
        return F.dropout(x, self.p, training=self.training_flag())

    def extra_repr(self) -> str:
        return f"p={self.p}, inplace=False"


class Flatten(Module):
    """Keep the first axis (the batch), flatten the rest: (N, 8, 8) -> (N, 64)."""

    def forward(self, x: Any) -> Any:
        return x.reshape(x.shape[0], -1)

    def extra_repr(self) -> str:
        return "start_dim=1, end_dim=-1"


class Sequential(Module):
    """Modules applied one after the other; they are named ``0``, ``1``, ... (so parameters
    are ``0.weight``, ``2.bias``, as in PyTorch), or by the keys of one dict given instead
    (``Sequential({"hidden": Linear(64, 32), "act": ReLU()})``), and ``model[i]`` is the i-th.
    A slice keeps the names: ``model[2:]`` holds ``2.weight``, as PyTorch's does."""

    def __init__(self, *modules: Module | Mapping[str, Module]) -> None:
        super().__init__()
        named = (list(modules[0].items()) if len(modules) == 1 and isinstance(modules[0], Mapping)
                 else [(str(i), m) for i, m in enumerate(modules)])
        for i, (name, module) in enumerate(named):
            if not isinstance(module, Module):
                what = (f"the class {module.__name__} itself" if isinstance(module, type)
                        else f"{type(module).__name__} {module!r:.60}")
                raise TeachflowError(
                    f"Sequential takes modules, and argument {i} is {what}", op="Sequential",
                    hint="pass layers, e.g. tfl.nn.ReLU() (with parentheses), or wrap a "
                         "function in a Module subclass")
            if not isinstance(name, str) or not name or "." in name or hasattr(Sequential, name):
                raise TeachflowError(
                    f"a module cannot be named {name!r}", op="Sequential",
                    hint="a name is a non-empty string without dots that is not already an "
                         "attribute of Sequential (forward, training, ...)")
            setattr(self, name, module)

    def forward(self, x: Any) -> Any:
        for module in self.children():
            x = module(x)
        return x

    def __len__(self) -> int:
        return sum(1 for _ in self.children())

    def __iter__(self) -> Iterator[Module]:
        return self.children()

    def __getitem__(self, index: int | slice) -> Any:
        modules = list(self.children())
        if isinstance(index, slice):
            return Sequential(dict(list(self.named_children())[index]))
        try:
            return modules[index]
        except (IndexError, TypeError):
            raise TeachflowError(f"this Sequential has {len(modules)} modules; there is no "
                                 f"module {index!r}", op="Sequential",
                                 hint=f"an int from 0 to {len(modules) - 1} (or negative, from "
                                      "the end), or a slice") from None
