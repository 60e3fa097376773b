"""What an op is: one declaration that says everything about it.

An `Op` names a primitive operation and carries, in one place:

- `kernel`: given an array module `xp` (NumPy or CuPy), the function that computes the op. Writing
  the kernel against `xp` is what lets one line of code run on the CPU and on the GPU. The backend
  calls `kernel(xp)` once and caches the result, so eager dispatch pays nothing for it.
- `shape_rule`: given the operands' `TensorSpec`s (shape, dtype, device), the result's spec. Eager
  mode never needs it (NumPy computes the result), but tracing does, and so do error messages.
- `vjp`: the gradient rule, written with teachflow ops so it runs eagerly, can be traced into a
  backward graph, and can be differentiated again. It receives the output cotangent `g`, the
  inputs, `out=` the output (when the op saves it), and the op's parameters; it returns one
  cotangent per input (None where there is none). The autodiff engine sums a cotangent back to its
  input's shape when the op broadcast that input, so rules never do it themselves.
- `saves`: what the forward pass keeps for `vjp` ("inputs", "shapes" or "nothing"), plus
  `saves_output`. Keeping only what the rule needs is what lets intermediates be freed early.
- `fusion`: for elementwise ops, the expression (C syntax, operands ``{0}``, ``{1}``, ...) that
  the fusion pass uses to generate one kernel for a chain of ops.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.errors import DeviceError, DTypeError, ShapeError
from teachflow.spec import TensorSpec

Kernel = Callable[..., Any]

#: Every op, by name: the vocabulary of the graph IR and of saved graphs.
OPS: dict[str, Op] = {}


class RuleError(Exception):
    """Raised by a shape rule; `Op.check` turns it into a ShapeError/DTypeError with context."""

    def __init__(self, message: str, hint: str | None = None, kind: type = ShapeError) -> None:
        super().__init__(message)
        self.message, self.hint, self.kind = message, hint, kind


@dataclass(frozen=True, eq=False)
class Op:
    """A primitive operation. See the module docstring for what each field means."""

    name: str
    kernel: Callable[[ModuleType], Kernel]
    shape_rule: Callable[..., TensorSpec] = field(repr=False)
    vjp: Callable[..., tuple] | None = field(default=None, repr=False)
    saves: str = "inputs"
    saves_output: bool = False
    fusion: str | None = None
    arg_names: tuple[str, ...] = ("x", "y", "z")
    #: Ops with a `device` parameter (creation, transfer) run on that device, not their inputs'.
    placed: bool = False
    #: Random ops draw anew every time; passes must never merge or fold them.
    random: bool = False
    #: ``op(x, y) == op(y, x)``: CSE may match the operands in either order.
    commutative: bool = False
    #: False for ops made by the compiler (fused kernels): they are not part of the vocabulary.
    register: bool = True

    def __post_init__(self) -> None:
        if self.saves not in ("inputs", "shapes", "nothing"):
            raise ValueError(f"op {self.name}: saves must be 'inputs', 'shapes' or 'nothing'")
        if self.register:
            OPS[self.name] = self

    @property
    def differentiable(self) -> bool:
        return self.vjp is not None

    @property
    def elementwise(self) -> bool:
        return self.fusion is not None

    def abstract_eval(self, *args: Any, **params: Any) -> TensorSpec:
        """The spec of the result for operands described by specs (or Python scalars)."""
        specs = [spec_of(a) for a in args]
        device = params.get("device") if self.placed else _common_device(self, specs)
        try:
            result = self.shape_rule(*specs, **params)
        except RuleError as err:
            raise err.kind(err.message, op=self.name, operands=self.describe(args),
                           hint=err.hint) from None
        return TensorSpec(result.shape, result.dtype, device or "cpu")

    def describe(self, args: tuple) -> tuple[str, ...]:
        """One phrase per operand for error messages: ``"a: float32[3, 4] on cpu"``."""
        names = self.arg_names if len(args) <= len(self.arg_names) else [
            f"x{i}" for i in range(len(args))]  # variadic ops (concatenate): x0, x1, ...
        return tuple(f"{name}: {describe(a)}" for name, a in zip(names, args, strict=False))

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def spec_of(x: Any) -> Any:
    """A TensorSpec for a tensor or array; Python scalars stay as they are (they are *weak*:
    under NumPy's rules ``float32_tensor * 2.0`` stays float32)."""
    if isinstance(x, TensorSpec | bool | int | float | complex):
        return x
    spec = getattr(x, "spec", None)  # a Tensor
    if spec is not None:
        return spec
    arr = np.asarray(x)
    return TensorSpec(arr.shape, arr.dtype, "cpu")


def describe(x: Any) -> str:
    """``"float32[3, 4] on cpu"`` for a tensor, ``"Python float 2.0"`` for a scalar."""
    if isinstance(x, bool | int | float | complex):
        return f"Python {type(x).__name__} {x!r}"
    spec = spec_of(x)
    return f"{spec.dtype.name}{list(spec.shape)} on {spec.device}"


def _common_device(op: Op, specs: list) -> str:
    devices = {s.device for s in specs if isinstance(s, TensorSpec)}
    if len(devices) > 1:
        raise DeviceError(
            f"operands are on different devices ({', '.join(sorted(devices))})",
            op=op.name, operands=op.describe(tuple(specs)),
            hint="move them to one device first, e.g. x.to('gpu') or x.to('cpu')",
        )
    return devices.pop() if devices else "cpu"


# --- Shape rules shared by many ops -------------------------------------------------------------


def broadcast_shapes(*shapes: tuple) -> tuple:
    """NumPy broadcasting, with an error that says which dimension disagrees."""
    ndim = max((len(s) for s in shapes), default=0)
    result = []
    for axis in range(-ndim, 0):
        dims = [s[axis] for s in shapes if len(s) >= -axis]
        sizes = {d for d in dims if d is not None and d != 1}  # None: not known until run time
        if len(sizes) > 1:
            same_rank = len({len(s) for s in shapes}) == 1
            where = f"dimension {ndim + axis}" if same_rank else \
                f"dimension {axis} (counting from the right, as broadcasting does)"
            detail = ", ".join(
                f"{s[axis]} in operand {i}" for i, s in enumerate(shapes) if len(s) >= -axis
            )
            raise RuleError(
                f"cannot broadcast shapes {' and '.join(str(s) for s in shapes)}: "
                f"{where} differs ({detail})",
                hint="broadcasting lines shapes up from the right; each dimension must match "
                     "or be 1. Reshape an operand (x.reshape(...)) or add a size-1 axis.",
            )
        result.append(sizes.pop() if sizes else None if None in dims else 1)
    return tuple(result)


def shape_of(x: Any) -> tuple:
    return x.shape if isinstance(x, TensorSpec) else ()


@lru_cache(maxsize=4096)
def _numpy_result_dtype(kernel: Kernel, operands: tuple) -> np.dtype:
    samples = [np.empty(0, dtype=o) if isinstance(o, np.dtype) else o[1] for o in operands]
    return np.dtype(kernel(*samples).dtype)


def elementwise_rule(kernel: Callable[[ModuleType], Kernel]) -> Callable[..., TensorSpec]:
    """Shape rule of an elementwise op: broadcast the shapes; let NumPy decide the dtype.

    The dtype comes from running the NumPy kernel on empty arrays of the operands' dtypes, so it
    follows NumPy's promotion rules exactly (including weak Python scalars) without a table.
    """
    numpy_kernel = kernel(np)

    def rule(*operands: Any) -> TensorSpec:
        shape = broadcast_shapes(*(shape_of(o) for o in operands))
        # A scalar's type is part of the key: 1 == 1.0, but int64 * 1.0 is float64.
        kinds = tuple(o.dtype if isinstance(o, TensorSpec) else (type(o), o) for o in operands)
        try:
            dtype = _numpy_result_dtype(numpy_kernel, kinds)
        except TypeError as exc:
            raise RuleError(f"unsupported dtypes: {exc}", kind=DTypeError) from None
        return TensorSpec(shape, dtype)

    return rule


def normalize_axis(axis: int, ndim: int) -> int:
    """Turn a possibly negative axis into 0..ndim-1, or raise a RuleError."""
    if not -ndim <= axis < ndim:
        raise RuleError(
            f"axis {axis} is out of range for a tensor of {ndim} dimension(s)",
            hint=f"use an axis from {-ndim} to {ndim - 1}" if ndim else "a 0-d tensor has no axes",
        )
    return axis % ndim
