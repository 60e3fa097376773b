"""Eager execution (define-by-run): what `bind` does when nothing is being traced.

The eager interpreter runs an op's kernel on its inputs' arrays at once and wraps the result in a
new Tensor. If any input needs a gradient (and gradients are enabled), it also records the op on
the autodiff tape. That is all: the same ops and kernels serve staged execution, where a different
interpreter records a graph instead.

This function is on the hot path of every eager op, so it is written for speed: a single pass over
the arguments, no validation before the kernel runs, and no shape rule. When a kernel fails, the
cold path (`_explain`) runs the op's shape rule to say *why* in teachflow's terms. Inside
``with tfl.device(name):`` an op runs on that device, its operands copied there first
(`moved_to_pin`); outside, operands on two devices are an error that names both.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.autodiff import tape
from teachflow.core.backends import (
    CPU,
    PIN,
    PINS_OPEN,
    get_backend,
    rerun_warning_at_user_line,
)
from teachflow.core.dispatch import bind, set_default_interpreter
from teachflow.core.errors import (
    DeviceError,
    DTypeError,
    IndexingError,
    TeachflowError,
    TraceError,
)
from teachflow.graph import Value
from teachflow.ops.creation import to_device
from teachflow.tensor.conversion import as_constant
from teachflow.tensor.tensor import Tensor

_new = object.__new__


class EagerInterpreter:
    """Evaluate now; record on the tape when an input is tracked."""

    def apply(self, op: Any, args: tuple, params: dict) -> Tensor:
        if PINS_OPEN[0] and PIN.backend is not None and not op.device_param:
            args = moved_to_pin(args)
        backend = None
        tracked = converted = False
        arrays = []
        for x in args:
            if isinstance(x, Tensor):
                if x._backend is not backend:
                    if backend is not None:
                        raise _mixed_devices(op, args)
                    backend = x._backend
                if x._node is not None:
                    tracked = True
                x = x._data
            elif type(x) not in _PYTHON_SCALARS:  # Python scalars stay weak
                x = as_constant(x)
                converted = True
            arrays.append(x)
        if op.device_param:  # creation and transfer ops run on the device they are asked for
            backend = get_backend(params[op.device_param])
        elif backend is None:  # only Python scalars or arrays: on the pinned device, or the CPU
            backend = PIN.backend or CPU
        kernel = backend.kernels[op]
        try:  # (a call without keywords, as most ops' are, is a little quicker)
            out = kernel(*arrays, **params) if params else kernel(*arrays)
        except RuntimeWarning as warning:  # NumPy's (log of a negative number): see backends
            out = rerun_warning_at_user_line(kernel, arrays, params, warning)
        except Exception as exc:
            raise _explain(op, args, params, exc) from exc
        if type(out) is not backend.array_type:
            if type(out) is tuple:  # a fused kernel with several results: no gradient, no tape
                return tuple(Tensor._make(backend.xp.asarray(o), backend, None) for o in out)
            out = backend.xp.asarray(out)  # (NumPy returns scalars for 0-d results)
        result = _new(Tensor)
        result._data = out
        result._backend = backend
        if tracked:  # the tape sees the operands as the kernel did (np.float64(2) as 2.0)
            result._node = tape.record(op, _as_taken(args, arrays) if converted else args,
                                           params, out, backend)
        else:
            result._node = None
        result._grad = None
        return result

    # State changes happen at once.

    def assign(self, tensor: Tensor, value: Tensor) -> None:
        tensor._take(value)

    def read_grad(self, tensor: Tensor) -> Tensor | None:
        return tensor._grad

    def write_grad(self, tensor: Tensor, grad: Tensor | None) -> None:
        tensor._grad = grad

    def lift(self, tensor: Tensor) -> Tensor:
        return tensor

    def mark(self, tensor: Tensor, requires_grad: bool) -> None:
        tensor._mark(requires_grad)

    def values(self, tensor: Tensor) -> np.ndarray:
        return tensor._backend.to_numpy(tensor._data)

    def assume(self, read: Callable[[], Any], what: str) -> Any:
        return read()

    def operand(self, tensor: Tensor) -> Tensor:
        return tensor

    def call(self, function: Any, args: tuple, kwargs: dict) -> Any:
        return function.run(args, kwargs)


_PYTHON_SCALARS = frozenset({bool, int, float})


def _as_taken(args: tuple, arrays: list) -> tuple:
    return tuple([x if isinstance(x, Tensor) else a for x, a in zip(args, arrays, strict=True)])


def moved_to_pin(args: tuple) -> tuple:
    """The operands of an op run inside ``with tfl.device(...)``, each on the pinned device: an
    operand elsewhere is copied there (a `to_device` of its own, on the tape and in a trace,
    so that its gradient flows back and `partition` sees the transfer)."""
    pin, moved = PIN.backend, {}
    for x in args:  # (each tensor once: x @ x copies x once)
        if isinstance(x, Tensor) and x._backend is not pin and id(x) not in moved:
            moved[id(x)] = bind(to_device, x, device=pin.name)
    return tuple(moved.get(id(x), x) for x in args) if moved else args


def _mixed_devices(op: Any, args: tuple) -> DeviceError:
    devices = sorted({x.device for x in args if isinstance(x, Tensor)})
    return DeviceError(
        f"operands are on different devices ({' and '.join(devices)})",
        op=op.name, operands=op.describe(args),
        hint=f"move them to one device first, e.g. x.to('{devices[0]}'), or run the op inside "
             f"`with tfl.device('{devices[0]}'):`, which moves its operands there",
    )


def _explain(op: Any, args: tuple, params: dict, exc: Exception) -> TeachflowError:
    """A kernel raised: find the reason in teachflow's terms (the op's shape rule)."""
    stray = next((x._data for x in args if isinstance(x, Tensor) and isinstance(x._data, Value)),
                 None)
    if stray is not None:
        made = f" (made at {stray.producer.source})" if stray.producer is not None and \
            stray.producer.source is not None else ""
        return TraceError(
            f"tensor {stray}{made} is a symbolic tensor of a graph, used where nothing is being "
            "traced or built: there is no graph here to add the op to, and it has no values",
            op=op.name, hint="a tensor computed inside a staged function lives only in its "
                             "trace: return it rather than keeping it (in an attribute, a list, "
                             "a global); a tensor built in `with tfl.Graph():` is used inside "
                             "that block, and computed with tfl.Session(graph).run(tensor, ...)")
    if isinstance(exc, TeachflowError):
        return exc
    try:
        op.abstract_eval(*args, **params)
    except TeachflowError as err:
        return err
    except Exception:  # operands too odd even to describe (a ragged list, say)
        pass
    kind = (IndexingError if isinstance(exc, IndexError) else
            DTypeError if isinstance(exc, TypeError) or "Integers" in str(exc) else
            TeachflowError)
    return kind(
        f"{exc}", op=op.name, operands=_describe_safely(op, args),
        hint="NumPy/CuPy refused these operands (its error is attached as __cause__); "
             "check their dtypes and values",
    )


def _describe_safely(op: Any, args: tuple) -> tuple[str, ...]:
    try:
        return op.describe(args)
    except Exception:
        return tuple(type(a).__name__ for a in args)


#: The eager interpreter: `bind` outside any trace, and for whoever must compute now.
EAGER = EagerInterpreter()
set_default_interpreter(EAGER)
