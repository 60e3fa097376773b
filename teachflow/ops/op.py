"""What an op is: one declaration that says everything about it.

An `Op` names a primitive operation and carries, in one place:

- `kernel`: given an array module `xp` (NumPy or CuPy), the function that computes the op. Writing
  the kernel against `xp` is what lets one line of code run on the CPU and on the GPU. The backend
  calls `kernel(xp)` once and caches the result, so eager dispatch pays nothing for it.
- `shape_rule`: given the operands' `TensorSpec`s (shape, dtype, device), the result's spec. Eager
  mode never needs it (NumPy computes the result), but tracing does, and so do error messages.
- `grads`: the gradient rules, one per input (as in PyTorch's ``derivatives.yaml``), written with
  teachflow ops so they run eagerly, can be traced into a backward graph, and can be
  differentiated again. A rule receives the output's cotangent `g` and, *by name*, exactly what it
  reads: inputs by their names in `arg_names` (``x``), or only their shape, dtype and device as a
  `TensorSpec` (``x_spec``), the output as ``out``, parameters by their names. ``mul``'s rules are
  ``lambda g, y: g * y`` and ``lambda g, x: g * x``; ``sum``'s reads only ``x_spec``. Backward runs
  only the rules of inputs that need a gradient (PyTorch's ``needs_input_grad``), and the forward
  pass keeps only what those rules read: ``y * 2.0`` keeps nothing of ``y``, because the rule for
  ``y`` reads only the 2.0. The autodiff engine sums a cotangent back to its input's shape when
  the op broadcast that input, so rules never do it themselves. Ops with any number of inputs
  (concatenate) give one rule for all, which may also take ``i`` (which input) and ``xs`` (the
  specs of all inputs).
- `fusion`: for elementwise ops, the expression (C syntax, operands ``{0}``, ``{1}``, ...) that
  the fusion pass uses to generate one kernel for a chain of ops. Each operand comes converted
  to the dtype NumPy computes the op in (the result's; for a comparison, the operands' common
  dtype), except those named in `fusion_as_is`: ``where`` reads its ``cond`` only for its truth.
  `fusion_literal` gives another expression for a Python literal operand that NumPy computes
  otherwise: ``(1, 0.5): "sqrt({0})"``, as NumPy computes ``x ** 0.5`` (of -inf: nan, where C's
  ``pow`` gives inf).
  On the CPU, a fused kernel runs the op's own `kernel` with ``out=`` a buffer it reuses block
  after block, so an elementwise kernel takes ``out=``: a ufunc does, and ``relu``'s is
  ``lambda x, out=None: xp.maximum(x, 0, out=out)``.
- `out_may_alias`: that buffer may be the memory of one of the op's own operands, as it may for
  a ufunc, which reads each element before writing it. Not so for ``where``, whose kernel writes
  its result in two passes.
- `view`: the result is the operand's own memory, seen anew (``reshape``, ``transpose``,
  ``identity``): no kernel runs and no data moves; a fused kernel passes the value on as is.
- `partials`: for a reduction that a fused kernel computes in pieces (block by block on the CPU,
  in parallel on a GPU), how the pieces' results combine: a `Partials`. ``sum`` adds partial
  sums, starting from 0; ``max`` takes their ``maximum``, starting from the dtype's smallest.
- `jvp`: forward mode, the tangent of the result given the operands' tangents (the JVP rule,
  ``jvp(op, primals, tangents, out, params)``; a tangent None is zero). Elementwise ops share
  one (`tangents.diagonal`: their Jacobian is diagonal, so each VJP rule, applied to a tangent,
  is its JVP); ops linear in their operands apply themselves to the tangents (`tangents.linear`).
- `batch`: the batching rule of ``tfl.vmap``, ``batch(op, args, dims, params, size) -> (out,
  dim)``: the op applied to operands with an extra batch axis (`dims`: where, or None), and
  where the result has it. Elementwise ops share one (`batching.elementwise`).
- `flops`: floating-point operations, roughly, given the result's spec and then the operands':
  one per element of the result unless the op says otherwise (2·m·n·k for a matrix product,
  `no_flops` for ops that only move or make data). The compiler's figures add them up.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from dataclasses import dataclass, field
from functools import lru_cache
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.core.dispatch import bind
from teachflow.core.errors import DeviceError, DTypeError, ShapeError
from teachflow.core.spec import TensorSpec

Kernel = Callable[..., Any]

#: Every op, by name: the vocabulary of the graph IR and of saved graphs.
OPS: dict[str, Op] = {}


class RuleError(Exception):
    """Raised by a shape rule; `Op.check` turns it into a ShapeError/DTypeError with context."""

    def __init__(self, message: str, hint: str | None = None, kind: type = ShapeError) -> None:
        super().__init__(message)
        self.message, self.hint, self.kind = message, hint, kind


def per_element(out: TensorSpec, *operands: Any) -> int:
    """The flops of most ops: one per element of the result."""
    return max(out.size, 0)  # (-1 while a size is unknown)


def no_flops(out: TensorSpec, *operands: Any) -> int:
    """The flops of an op that only moves or makes data: none."""
    return 0


@dataclass(frozen=True, eq=False)
class Op:
    """A primitive operation. See the module docstring for what each field means."""

    name: str
    kernel: Callable[[ModuleType], Kernel]
    shape_rule: Callable[..., TensorSpec] = field(repr=False)
    grads: tuple[Callable[..., Any] | None, ...] | Callable[..., Any] | None = field(
        default=None, repr=False)
    fusion: str | None = None
    fusion_as_is: tuple[str, ...] = ()
    fusion_literal: tuple[tuple[int, float, str], ...] = ()  # (operand, literal, expression)
    out_may_alias: bool = True
    view: bool = False
    partials: Partials | None = None
    flops: Callable[..., int] = field(default=per_element, repr=False)
    arg_names: tuple[str, ...] = ("x", "y", "z")
    #: The parameter that names the device an op runs on, for ops that run there and not on
    #: their inputs' device: ``"device"`` (creation, `to_device`), ``"dst"`` (`copy`).
    device_param: str | None = None
    #: Random ops draw anew every time; passes must never merge or fold them.
    random: bool = False
    #: Collectives (`all_reduce`) exchange data with other processes, which wait for this one:
    #: passes must never merge, fold or drop them, nor move them past one another.
    communicates: bool = False
    #: ``op(x, y) == op(y, x)`` exactly: CSE may match the operands in either order. A function
    #: of the result's dtype where that depends on it (see `commutes`).
    commutative: bool | Callable[[np.dtype], bool] = False
    #: False for ops made by the compiler (fused kernels): they are not part of the vocabulary.
    primitive: bool = True
    #: The op stretches size-1 (or missing) axes of its inputs: a cotangent flowing back into
    #: such an input is summed back to its shape (elementwise ops, `broadcast_to`).
    broadcasts: bool = False
    #: One gradient rule for all inputs at once, for an op with several results (control
    #: flow): ``vjp(cotangents, inputs, params, needs)`` gives a cotangent per input (None for
    #: an input that needs none); `cotangents` has one per result.
    vjp: Callable[..., list] | None = field(default=None, repr=False)
    #: Forward mode and batching (see the module docstring).
    jvp: Callable[..., Any] | None = field(default=None, repr=False)
    batch: Callable[..., Any] | None = field(default=None, repr=False)
    #: Parameters at these values say nothing new (``sum``'s ``axis=None, keepdims=False``):
    #: the text form of the graph leaves them out, as the maths would.
    defaults: dict[str, Any] = field(default_factory=dict, repr=False)
    #: What the tape keeps of an application, by which inputs need a gradient (`tape_plan`).
    tape_plans: dict[tuple, TapePlan | bool] = field(default_factory=dict, init=False,
                                                     repr=False)

    def __post_init__(self) -> None:
        if self.grads is not None:
            rules = (self.grads,) if callable(self.grads) else self.grads
            object.__setattr__(self, "_reads", tuple(
                None if rule is None else _reads(self, rule) for rule in rules))
        if self.primitive:
            OPS[self.name] = self

    @property
    def differentiable(self) -> bool:
        return self.grads is not None or self.vjp is not None

    def commutes(self, dtype: np.dtype) -> bool:
        """True if swapping the two operands gives bit for bit the same result of this dtype."""
        c = self.commutative
        return c(dtype) if callable(c) else c

    def rule(self, i: int) -> tuple[Callable[..., Any], Reads] | None:
        """The gradient rule of input `i`, and what it reads (None if `i` has no gradient)."""
        if self.grads is None:
            return None
        if callable(self.grads):
            return self.grads, self._reads[0]
        rule = self.grads[i] if i < len(self.grads) else None
        return None if rule is None else (rule, self._reads[i])

    def tape_plan(self, needs: tuple[bool | None, ...]) -> TapePlan | None:
        """For inputs that need a gradient (`needs`: True for those; False for the other
        tensors, None for operands that are not tensors): what the forward pass must keep.
        None when no rule applies (nothing to record). Found once for each `needs` and kept in
        `tape_plans` (where the tape looks first)."""
        plan = self.tape_plans.get(needs)
        if plan is None:
            keep: list[str | None] = [None] * len(needs)
            out, any_rule = False, False
            for i, need in enumerate(needs):
                found = self.rule(i) if need else None
                if found is None:
                    continue
                any_rule, reads = True, found[1]
                out = out or reads.out
                every = "value" if reads.all_values else "spec" if reads.all_inputs else None
                wanted = [(j, every) for j in range(len(needs))] if every else []
                for j, what in [*wanted, *((j, what) for _, j, what in reads.inputs)]:
                    keep[j] = "value" if "value" in (keep[j], what) else what
            plan = self.tape_plans[needs] = TapePlan.of(keep, out, needs) if any_rule else False
        return plan or None

    @property
    def impure(self) -> bool:
        """Its result is not a function of its operands alone (a random draw, a collective):
        no pass may merge it with another, nor compute it at compile time."""
        return self.random or self.communicates

    @property
    def elementwise(self) -> bool:
        return self.fusion is not None

    def common_device(self, specs: list) -> str | None:
        """The device the op runs on: where all its operands live (a `DeviceError` naming them
        where they do not)."""
        return _common_device(self, specs)

    def abstract_eval(self, *args: Any, **params: Any) -> TensorSpec | tuple[TensorSpec, ...]:
        """The spec of the result for operands described by specs (or Python scalars); a
        tuple of specs for an op with several results (a loop carrying several tensors)."""
        specs = [spec_of(a) for a in args]
        device = params.get(self.device_param) if self.device_param else \
            self.common_device(specs)
        try:
            result = self.shape_rule(*specs, **params)
        except RuleError as err:
            raise err.kind(err.message, op=self.name, operands=self.describe(args),
                           hint=err.hint) from None
        except (OverflowError, TypeError, ValueError) as exc:  # NumPy refused, deciding a dtype
            kind = ShapeError if isinstance(exc, ValueError) else DTypeError
            raise kind(f"these operands do not go together: {exc}", op=self.name,
                       operands=self.describe(args),
                       hint="a Python int must fit the tensor's integer dtype; check the "
                            "operands' dtypes and values") from exc
        if isinstance(result, tuple):  # an op with several results gives each one's spec
            return result
        return TensorSpec(result.shape, result.dtype, device or "cpu")

    def describe(self, args: tuple) -> tuple[str, ...]:
        """One phrase per operand for error messages: ``"a: float32[3, 4] on cpu"``."""
        names = self.arg_names if len(args) <= len(self.arg_names) else [
            f"x{i}" for i in range(len(args))]  # variadic ops (concatenate): x0, x1, ...
        return tuple(f"{name}: {describe(a)}" for name, a in zip(names, args, strict=False))

    def __repr__(self) -> str:
        return f"<op {self.name}>"


def no_tangent(op: Op, primals: tuple, tangents: tuple, out: Any, params: dict) -> None:
    """The JVP rule of a result that cannot move smoothly: integers and bools (comparisons,
    argmax), values made from nothing (zeros, random numbers), a gradient stopped on purpose."""
    return None


def unbatched(op: Op, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """The batching rule of an op with no tensor operands: one result, the same for every
    example. For random numbers that is JAX's answer too: under ``vmap`` every example gets the
    *same* draw; draw a batch outside the vmapped function and pass it in for one per example."""
    return bind(op, *args, **params), None


@dataclass(frozen=True)
class Partials:
    """How a reduction is computed in pieces and the pieces' results combined (`Op.partials`).

    A fused kernel reduces each block of rows to a partial result and combines the partial
    results into one, starting from a value that changes nothing: the sum of partial sums is the
    sum, the maximum of partial maxima the max, and a mean is a sum divided by the count.
    """

    method: str  # the array method that reduces one piece: ``x.sum(axis=..., out=part)``
    combine: Op  # the elementwise op that merges two partial results: ``add``, ``maximum``
    identity: Callable[[np.dtype], bool | int | float]  # where partial results start, per dtype
    mean: bool = False  # the combined total is divided by the count at the end
    #: The dtype partial results add up in, given the result's (NumPy's mean adds float16 up in
    #: float32); None: the result's own.
    accumulate: Callable[[np.dtype], np.dtype] | None = None


@dataclass(frozen=True)
class TapePlan:
    """What the forward pass keeps of one op application for the gradient rules that will run
    (`Op.tape_plan`), the same for every application with the same inputs needing a gradient."""

    keep: tuple[str | None, ...]  # per input: "value", "spec" or None (nothing)
    out: bool  # keep the output too
    kept: tuple[int, ...]  # the inputs something of which is kept
    #: Per input: it is a tensor and something of it is kept. The tape keeps a tensor's array,
    #: and gives a rule a tensor again.
    tensors: tuple[bool, ...]
    arrays: tuple[int, ...]  # the tensors whose values are kept (the usual case)
    others: tuple[int, ...]  # the rest of `kept`: specs, operands that are not tensors

    @staticmethod
    def of(keep: list[str | None], out: bool, needs: tuple[bool | None, ...]) -> TapePlan:
        kept = tuple(j for j, what in enumerate(keep) if what is not None)
        tensors = tuple(j in kept and needs[j] is not None for j in range(len(needs)))
        arrays = tuple(j for j in kept if tensors[j] and keep[j] == "value")
        return TapePlan(tuple(keep), out, kept, tensors, arrays,
                        tuple(j for j in kept if j not in arrays))


@dataclass(frozen=True)
class Reads:
    """What one gradient rule reads, found once from its parameter names."""

    inputs: tuple[tuple[str, int, str], ...]  # (parameter name, input position, "value"/"spec")
    out: bool  # reads the op's output as `out`
    params: tuple[str, ...]  # the op's parameters it takes by name
    index: bool  # takes `i`, which input it is computing for (rules of variadic ops)
    all_inputs: bool  # takes `xs`, the specs of all inputs (rules of variadic ops)
    all_values: bool = False  # takes `inputs`, the values of all inputs


def _reads(op: Op, rule: Callable[..., Any]) -> Reads:
    names = list(inspect.signature(rule).parameters)[1:]  # the first is the cotangent `g`
    inputs, params = [], []
    for n in names:
        if n in op.arg_names:
            inputs.append((n, op.arg_names.index(n), "value"))
        elif n.endswith("_spec") and n[:-5] in op.arg_names:
            inputs.append((n, op.arg_names.index(n[:-5]), "spec"))
        elif n not in ("out", "i", "xs", "inputs"):
            params.append(n)
    return Reads(tuple(inputs), "out" in names, tuple(params), "i" in names, "xs" in names,
                 "inputs" in names)


def op_for_ufunc(ufunc: np.ufunc) -> Op | None:
    """The op whose NumPy kernel *is* `ufunc` (``np.tanh`` -> tanh), or None. Found from the
    declarations, so a new op declared as ``lambda xp: xp.sin`` is found too."""
    return _ops_by_ufunc(len(OPS)).get(ufunc)


@lru_cache(maxsize=1)
def _ops_by_ufunc(count: int) -> dict[np.ufunc, Op]:
    """Built again whenever an op has been declared since (`count` is how many there are)."""
    table: dict[np.ufunc, Op] = {}
    for op in OPS.values():
        kernel = op.kernel(np)
        if isinstance(kernel, np.ufunc):
            table.setdefault(kernel, op)
    return table


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
            hint=f"move them to one device first, e.g. x.to('{min(devices)}'), or run the op "
                 f"inside `with tfl.device('{min(devices)}'):`, which moves its operands there",
        )
    return devices.pop() if devices else "cpu"
