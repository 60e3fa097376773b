"""The layers: `Linear`, `Conv2d`, the pools (`MaxPool2d`, `AvgPool2d`), batch norm
(`BatchNorm1d`, `BatchNorm2d`), `Embedding`, `LayerNorm`, the activations, `Dropout`, the
losses, and `Sequential` to chain them.

Each is a small `Module` whose ``forward`` calls `teachflow.nn.functional`. `Linear` starts as
PyTorch's does: weight and bias uniform in ±1/√in_features (PyTorch's Kaiming-uniform with
a = √5 comes to exactly that bound for the weight), so a model starts in the same range, and
its weight has PyTorch's shape (out_features, in_features). `Conv2d` starts the same way, its
fan-in being what one output reads: in_channels / groups × the kernel's area. `Embedding`
starts from N(0, 1) and `LayerNorm` as the identity (weight 1, bias 0), as PyTorch's.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Mapping
from typing import Any

from teachflow.autodiff.tape import no_grad
from teachflow.core.errors import DTypeError, TeachflowError
from teachflow.nn import functional as F
from teachflow.nn.module import Module, Parameter
from teachflow.tensor.factories import ones, rand, randn, zeros


class Linear(Module):
    """``y = x @ weight.T + bias``: `in_features` inputs to `out_features` outputs."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True,
                 dtype: Any = "float32", device: str = "cpu") -> None:
        super().__init__()
        _check_sizes("Linear", "e.g. tfl.nn.Linear(784, 128)", in_features=in_features,
                     out_features=out_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((out_features, in_features), in_features, dtype, device)
        self.bias = _uniform((out_features,), in_features, dtype, device) if bias else None

    def forward(self, x: Any) -> Any:
        return F.linear(x, self.weight, self.bias)

    def extra_repr(self) -> str:
        return (f"in_features={self.in_features}, out_features={self.out_features}, "
                f"bias={self.bias is not None}")


def _uniform(shape: tuple[int, ...], fan_in: int, dtype: Any, device: str) -> Parameter:
    """A parameter uniform in ±1/√fan_in, as PyTorch starts `Linear` and `Conv2d`."""
    bound = 1.0 / math.sqrt(fan_in)
    return Parameter(rand(*shape, dtype=dtype, device=device) * (2 * bound) - bound)


def _check_sizes(op: str, example: str, **sizes: Any) -> None:
    for name, n in sizes.items():
        if isinstance(n, bool) or not isinstance(n, int) or n <= 0:
            raise DTypeError(f"{name} must be a positive int, not {n!r}", op=op, hint=example)


class Conv2d(Module):
    """A 2-d convolution of images (N, in_channels, H, W) by `out_channels` kernels of
    `kernel_size`, with PyTorch's `stride`, zero `padding`, `dilation` and `groups` (see
    `functional.conv2d`); its weight has PyTorch's shape (out_channels, in_channels / groups,
    KH, KW)."""

    def __init__(self, in_channels: int, out_channels: int, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] = 1, padding: int | tuple[int, int] | str = 0,
                 dilation: int | tuple[int, int] = 1, groups: int = 1, bias: bool = True,
                 dtype: Any = "float32", device: str = "cpu") -> None:
        super().__init__()
        _check_sizes("Conv2d", "e.g. tfl.nn.Conv2d(3, 16, kernel_size=3, padding=1)",
                     in_channels=in_channels, out_channels=out_channels, groups=groups)
        if in_channels % groups or out_channels % groups:
            raise TeachflowError(f"groups={groups} must divide in_channels={in_channels} and "
                                 f"out_channels={out_channels}", op="Conv2d",
                                 hint="groups=1: every output channel sees every input one")
        kh, kw = F.conv_pair(kernel_size, "kernel_size", op="Conv2d")
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, (kh, kw)
        self.stride = F.conv_pair(stride, "stride", op="Conv2d")
        self.dilation = F.conv_pair(dilation, "dilation", op="Conv2d")
        self.padding = padding if padding in ("same", "valid") else \
            F.conv_pair(padding, "padding", least=0, op="Conv2d")
        self.groups = groups
        fan_in = in_channels // groups * kh * kw
        self.weight = _uniform((out_channels, in_channels // groups, kh, kw), fan_in, dtype,
                               device)
        self.bias = _uniform((out_channels,), fan_in, dtype, device) if bias else None

    def forward(self, x: Any) -> Any:
        return F.conv2d(x, self.weight, self.bias, self.stride, self.padding, self.dilation,
                        self.groups)

    def extra_repr(self) -> str:
        """PyTorch's: the settings that differ from the defaults."""
        parts = [f"{self.in_channels}, {self.out_channels}", f"kernel_size={self.kernel_size}",
                 f"stride={self.stride}"]
        if self.padding not in ((0, 0), "valid"):
            parts.append(f"padding={self.padding!r}" if isinstance(self.padding, str)
                         else f"padding={self.padding}")
        parts += [f"dilation={self.dilation}"] * (self.dilation != (1, 1))
        parts += [f"groups={self.groups}"] * (self.groups != 1)
        parts += ["bias=False"] * (self.bias is None)
        return ", ".join(parts)


class MaxPool2d(Module):
    """The largest value of each window (see `functional.max_pool2d`)."""

    def __init__(self, kernel_size: int | tuple[int, int],
                 stride: int | tuple[int, int] | None = None,
                 padding: int | tuple[int, int] = 0) -> None:
        super().__init__()
        self.kernel_size, self.stride, self.padding = kernel_size, stride or kernel_size, padding

    def forward(self, x: Any) -> Any:
        return F.max_pool2d(x, self.kernel_size, self.stride, self.padding)

    def extra_repr(self) -> str:
        return f"kernel_size={self.kernel_size}, stride={self.stride}, padding={self.padding}"


class AvgPool2d(MaxPool2d):
    """The mean of each window (see `functional.avg_pool2d`)."""

    def forward(self, x: Any) -> Any:
        return F.avg_pool2d(x, self.kernel_size, self.stride, self.padding)


class BatchNorm2d(Module):
    """Each channel normalised by the batch's mean and variance while training, by the running
    ones (updated at each training call: ``(1 - momentum) running + momentum batch``) in eval
    mode; then scaled and shifted by `weight` (ones) and `bias` (zeros), as PyTorch's. Its
    running statistics are buffers: in the state dict, written back by a staged step. Takes
    (N, C, H, W); `BatchNorm1d` takes (N, C) or (N, C, L)."""

    dims: tuple[int, ...] = (4,)

    def __init__(self, num_features: int, eps: float = 1e-5, momentum: float = 0.1,
                 affine: bool = True, track_running_stats: bool = True,
                 dtype: Any = "float32", device: str = "cpu") -> None:
        super().__init__()
        _check_sizes(type(self).__name__, "e.g. tfl.nn.BatchNorm2d(16)",
                     num_features=num_features)
        self.num_features, self.eps, self.momentum = num_features, eps, momentum
        self.weight = Parameter(ones(num_features, dtype=dtype, device=device)) if affine \
            else None
        self.bias = Parameter(zeros(num_features, dtype=dtype, device=device)) if affine \
            else None
        stats = track_running_stats
        self.register_buffer("running_mean", zeros(num_features, dtype=dtype, device=device)
                             if stats else None)
        self.register_buffer("running_var", ones(num_features, dtype=dtype, device=device)
                             if stats else None)
        self.register_buffer("num_batches_tracked", zeros((), dtype="int64", device=device)
                             if stats else None)

    def forward(self, x: Any) -> Any:
        if getattr(x, "ndim", None) not in self.dims or x.shape[1] != self.num_features:
            raise TeachflowError(
                f"takes {' or '.join(f'{d}-d' for d in self.dims)} input with "
                f"{self.num_features} channels on axis 1, not shape {getattr(x, 'shape', x)}",
                op=type(self).__name__, hint="the channels are axis 1: (N, C, ...)")
        training = self.training_flag()
        if training and self.num_batches_tracked is not None:
            with no_grad():
                self.num_batches_tracked[...] = self.num_batches_tracked + 1
        return F.batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                            training or self.running_mean is None, self.momentum, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.weight is not None}, "
                f"track_running_stats={self.running_mean is not None}")


class BatchNorm1d(BatchNorm2d):
    __doc__ = BatchNorm2d.__doc__
    dims = (2, 3)


class Embedding(Module):
    """A table of `num_embeddings` vectors of `embedding_dim` numbers: ``emb(index)`` is the
    row of each index. The row `padding_idx` (if given) starts at zeros and is never trained."""

    def __init__(self, num_embeddings: int, embedding_dim: int, padding_idx: int | None = None,
                 dtype: Any = "float32", device: str = "cpu") -> None:
        super().__init__()
        _check_sizes("Embedding", "e.g. tfl.nn.Embedding(1000, 64)",
                     num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        if padding_idx is not None and (isinstance(padding_idx, bool) or not isinstance(
                padding_idx, int) or not -num_embeddings <= padding_idx < num_embeddings):
            raise TeachflowError(f"padding_idx must be a row of the table (from "
                                 f"{-num_embeddings} to {num_embeddings - 1}), not "
                                 f"{padding_idx!r}", op="Embedding", hint="e.g. padding_idx=0")
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.padding_idx = None if padding_idx is None else padding_idx % num_embeddings
        table = randn(num_embeddings, embedding_dim, dtype=dtype, device=device)
        if self.padding_idx is not None:
            table[self.padding_idx] = 0.0
        self.weight = Parameter(table)

    def forward(self, index: Any) -> Any:
        return F.embedding(index, self.weight, self.padding_idx)

    def extra_repr(self) -> str:
        padding = "" if self.padding_idx is None else f", padding_idx={self.padding_idx}"
        return f"{self.num_embeddings}, {self.embedding_dim}{padding}"


class LayerNorm(Module):
    """Each example normalised over its last axes (`normalized_shape`) to mean 0 and variance
    1, then scaled by `weight` and shifted by `bias`, learnt per element (`elementwise_affine`;
    `bias=False` keeps only the weight)."""

    def __init__(self, normalized_shape: int | tuple[int, ...], eps: float = 1e-5,
                 elementwise_affine: bool = True, bias: bool = True, dtype: Any = "float32",
                 device: str = "cpu") -> None:
        super().__init__()
        shape = (normalized_shape,) if isinstance(normalized_shape, int) else \
            tuple(normalized_shape)
        _check_sizes("LayerNorm", "e.g. tfl.nn.LayerNorm(64)",
                     **{f"normalized_shape[{i}]": n for i, n in enumerate(shape)})
        self.normalized_shape, self.eps = shape, eps
        self.elementwise_affine = elementwise_affine
        self.weight = Parameter(ones(shape, dtype=dtype, device=device)) \
            if elementwise_affine else None
        self.bias = Parameter(zeros(shape, dtype=dtype, device=device)) \
            if elementwise_affine and bias else None

    def forward(self, x: Any) -> Any:
        return F.layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return (f"{self.normalized_shape}, eps={self.eps}, "
                f"elementwise_affine={self.elementwise_affine}")


class CrossEntropyLoss(Module):
    """``loss(logits, target)`` is `functional.cross_entropy`, with its `reduction`,
    `ignore_index`, class `weight` and `label_smoothing`."""

    def __init__(self, weight: Any = None, *, ignore_index: int = -100, reduction: str = "mean",
                 label_smoothing: float = 0.0) -> None:
        super().__init__()
        F.check_reduction(reduction, "CrossEntropyLoss")
        self.ignore_index, self.reduction = ignore_index, reduction
        self.weight, self.label_smoothing = weight, label_smoothing

    def forward(self, logits: Any, target: Any) -> Any:
        return F.cross_entropy(logits, target, self.reduction, self.ignore_index,
                               weight=self.weight, label_smoothing=self.label_smoothing)


class MSELoss(Module):
    """``loss(input, target)`` is `functional.mse_loss`, with its `reduction`."""

    def __init__(self, *, reduction: str = "mean") -> None:
        super().__init__()
        F.check_reduction(reduction, "MSELoss")
        self.reduction = reduction

    def forward(self, input: Any, target: Any) -> Any:
        return F.mse_loss(input, target, self.reduction)


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
    """Merge the axes from `start_dim` to `end_dim` into one; by default every axis but the
    first (the batch): (N, 32, 3, 3) -> (N, 288), between a CNN's convolutions and its
    `Linear` layers."""

    def __init__(self, start_dim: int = 1, end_dim: int = -1) -> None:
        super().__init__()
        self.start_dim, self.end_dim = start_dim, end_dim

    def forward(self, x: Any) -> Any:
        return x.flatten(self.start_dim, self.end_dim)

    def extra_repr(self) -> str:
        return f"start_dim={self.start_dim}, end_dim={self.end_dim}"


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
