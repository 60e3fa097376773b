"""`tfl.function`: a polymorphic function, with one concrete (traced, compiled) function per
input signature.

This is multi-stage programming as in TensorFlow's ``tf.function``. Calling a `Function` first
splits its arguments by *binding time* (binding-time analysis):

- a tensor is **dynamic**: only its shape, dtype and device are known when tracing, and its values
  arrive at every call;
- anything else (a Python number, a string, a module) is **static**: its value is baked into the
  trace, so a new value needs a new trace.

Those static parts form the *signature*. The first call with a signature traces the Python
function into a graph and generates its executor (a `ConcreteFunction`); later calls with the same
signature skip Python entirely and run the executor. `retrace_reasons` says, in a sentence per
trace, which argument changed and how, so the cost of retracing stays visible.
"""

from __future__ import annotations

import functools
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow import autodiff
from teachflow.backends import get_backend
from teachflow.errors import DeviceError, TeachflowError, TraceError
from teachflow.executor import generate, interpret
from teachflow.graph import Value
from teachflow.spec import TensorSpec
from teachflow.staging import Traced, argument_names, is_tracing, trace_function
from teachflow.tensor import Tensor, as_tensor
from teachflow.tree import tree_flatten, tree_unflatten

#: After this many traces of one function, each further trace warns.
RETRACE_WARNING_AFTER = 5


class RetracingWarning(UserWarning):
    """A `tfl.function` is being traced again and again (each trace costs a Python run)."""


class ConcreteFunction:
    """One trace of a `Function`: its graph and the executor generated from it."""

    def __init__(self, traced: Traced, names: list[str], leaf_keys: tuple,
                 backend: str | None = None) -> None:
        self.graph = traced.graph
        self.compilation = None
        self.names = names
        self.leaf_keys = leaf_keys
        self._traced = traced
        inputs = traced.graph.inputs
        device = backend or (inputs[0].spec.device if inputs else "cpu")
        self._backend = get_backend(device)
        self._executor = generate(traced.graph, self._backend)
        self._out_backends = [get_backend(v.spec.device) for v in traced.graph.outputs]
        self._single_output = traced.out_tree is None and isinstance(traced.out_leaves[0], Value)

    @property
    def source(self) -> str:
        """The generated Python that runs the graph."""
        return self._executor.source

    @property
    def signature(self) -> str:
        """The input signature, e.g. ``x: f32[4,4], n=3``."""
        return ", ".join(describe_leaf(n, k) for n, k in zip(self.names, self.leaf_keys,
                                                              strict=True))

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, treedef = tree_flatten((args, _sorted(kwargs)))
        keys, tensors = _leaf_keys(leaves)
        if keys != self.leaf_keys or treedef != self._traced.in_tree:
            raise TraceError(f"this concrete function was traced for ({self.signature}); "
                             "these arguments do not match it", op="function",
                             hint="call the tfl.function itself: it traces a new concrete "
                                  "function for a new signature")
        return self._call_flat(tensors)

    def _call_flat(self, tensors: list[Tensor] | tuple) -> Any:
        """Run on the flat tensor arguments; give back results in the function's structure."""
        backend, arrays, tracked = self._backend, [], False
        for t in tensors:
            if t._backend is not backend:
                raise DeviceError(f"this function was compiled for {backend.name} but got a "
                                  f"tensor on {t.device}", op="function")
            tracked = tracked or t._node is not None
            arrays.append(t._data)
        for capture in self._executor.captures:  # read by reference: current values
            tracked = tracked or capture.data._node is not None
            arrays.append(capture.data._data)
        if tracked and autodiff.is_grad_enabled():
            # Someone differentiates through this call: run it op by op, on the tape.
            results = interpret(self.graph, tensors)
        else:
            results = [Tensor._make(a, b, None)
                       for a, b in zip(self._executor.fn(*arrays), self._out_backends,
                                       strict=True)]
        if self._single_output:
            return results[0]
        it = iter(results)
        leaves = [next(it) if isinstance(v, Value) else v for v in self._traced.out_leaves]
        return tree_unflatten(self._traced.out_tree, leaves)

    def __repr__(self) -> str:
        return f"<ConcreteFunction {self.graph.name}({self.signature}): {len(self.graph)} nodes>"


class Function:
    """A polymorphic function: ``@tfl.function`` on a Python function (or method)."""

    def __init__(self, fn: Callable, passes: Any = "default", backend: str | None = None) -> None:
        functools.update_wrapper(self, fn)
        self.python_function = fn
        self.passes = passes
        self.backend = backend
        self._concrete: dict[Any, ConcreteFunction] = {}
        self.retrace_reasons: list[str] = []

    @property
    def trace_count(self) -> int:
        return len(self._concrete)

    @property
    def concrete_functions(self) -> list[ConcreteFunction]:
        return list(self._concrete.values())

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if is_tracing():  # called from code being traced: trace through it (inline)
            return self.python_function(*args, **kwargs)
        if not kwargs:  # the common case, kept fast: only tensors, passed by position
            key = []
            for a in args:
                if type(a) is not Tensor:
                    break
                key.append((a._data.shape, a._data.dtype, a._backend.name))
            else:
                concrete = self._concrete.get(tuple(key))
                if concrete is not None:
                    return concrete._call_flat(args)
        return self._call_general(args, kwargs)

    def _call_general(self, args: tuple, kwargs: dict) -> Any:
        concrete, tensors = self._concrete_for(args, kwargs)
        return concrete._call_flat(tensors)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> ConcreteFunction:
        """The concrete function for these arguments (tracing it if it is new)."""
        return self._concrete_for(args, kwargs)[0]

    def _concrete_for(self, args: tuple, kwargs: dict) -> tuple[ConcreteFunction, list]:
        kwargs = _sorted(kwargs)
        leaves, treedef = tree_flatten((args, kwargs))
        leaves = [as_tensor(x) if isinstance(x, np.ndarray) else x for x in leaves]
        keys, tensors = _leaf_keys(leaves)
        fast = not kwargs and all(type(a) is Tensor for a in args)
        key = tuple(k[1:] for k in keys) if fast else (treedef, keys)
        concrete = self._concrete.get(key)
        if concrete is None:
            concrete = self._trace(key, keys, tree_unflatten(treedef, leaves), args, kwargs)
        return concrete, tensors

    def _trace(self, key: Any, keys: tuple, structured: tuple, args: tuple,
               kwargs: dict) -> ConcreteFunction:
        names = argument_names(self.python_function, args, kwargs)
        if len(names) != len(keys):
            names = [f"arg{i}" for i in range(len(keys))]
        if self._concrete:
            previous = list(self._concrete.values())[-1]
            self.retrace_reasons.append(retrace_reason(previous.names, previous.leaf_keys,
                                                       names, keys))
        sym_args, sym_kwargs = structured
        traced = trace_function(self.python_function, sym_args, sym_kwargs,
                                name=getattr(self.python_function, "__name__", "f"))
        concrete = ConcreteFunction(traced, names, keys, self.backend)
        self._concrete[key] = concrete
        if self.trace_count > RETRACE_WARNING_AFTER:
            recent = "; ".join(self.retrace_reasons[-3:])
            warnings.warn(f"{self.__name__} has been traced {self.trace_count} times; each trace "
                          f"runs the Python function again. Recent reasons: {recent}. Pass "
                          "values that change often as tensors, not Python numbers.",
                          RetracingWarning, stacklevel=4)
        return concrete

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """``@tfl.function`` on a method: the instance is a static argument (by identity)."""
        return self if instance is None else BoundFunction(self, instance)

    def __repr__(self) -> str:
        return f"<tfl.function {self.__name__}: {self.trace_count} concrete function(s)>"


class BoundFunction:
    """A `Function` seen through an instance (``model.forward``): calls pass the instance first,
    and everything else (``trace_count``, ``concrete_functions``, ...) is the Function's."""

    def __init__(self, function: Function, instance: Any) -> None:
        self._function = function
        self._instance = instance

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._function(self._instance, *args, **kwargs)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> ConcreteFunction:
        return self._function.get_concrete_function(self._instance, *args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._function, name)


def function(fn: Callable | None = None, *, passes: Any = "default",
             backend: str | None = None) -> Any:
    """Stage a Python function: ``@tfl.function`` or ``tfl.function(f, passes=...)``.

    Python side effects (``print``, appending to a list) happen while tracing only, not on later
    calls: the graph records tensor operations and nothing else.
    """
    if fn is None:
        return lambda f: Function(f, passes=passes, backend=backend)
    return Function(fn, passes=passes, backend=backend)


# --- Signatures ---------------------------------------------------------------------------------


def _sorted(kwargs: dict) -> dict:
    return dict(sorted(kwargs.items()))


def _leaf_keys(leaves: list) -> tuple[tuple, list[Tensor]]:
    """Per flat argument, what the trace depends on; and the tensors, whose values it does not."""
    keys, tensors = [], []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            keys.append(("tensor", leaf.shape, leaf.dtype, leaf.device))
            tensors.append(leaf)
        else:
            try:
                hash(leaf)
            except TypeError:
                raise TeachflowError(
                    f"a {type(leaf).__name__} argument is neither a tensor nor hashable, so it "
                    "cannot be part of a trace signature", op="function",
                    hint="pass tensors, or Python values that can be dict keys") from None
            keys.append(("static", type(leaf), leaf))
    return tuple(keys), tensors


def describe_leaf(name: str, key: tuple) -> str:
    if key[0] == "tensor":
        spec = TensorSpec(key[1], key[2], key[3])
        return f"{name}: {spec}" + (f" on {key[3]}" if key[3] != "cpu" else "")
    return f"{name}={key[2]!r}"


def retrace_reason(old_names: list[str], old: tuple, new_names: list[str], new: tuple) -> str:
    """One plain sentence: which argument changed, and how."""
    if old_names != new_names or len(old) != len(new):
        return (f"the arguments changed from ({', '.join(old_names)}) "
                f"to ({', '.join(new_names)})")
    changes = []
    for name, a, b in zip(new_names, old, new, strict=True):
        if a == b:
            continue
        if a[0] == b[0] == "tensor":
            parts = [f"{label} {a[i] if i == 1 else str(a[i])} -> {b[i] if i == 1 else str(b[i])}"
                     for label, i in (("shape", 1), ("dtype", 2), ("device", 3)) if a[i] != b[i]]
            changes.append(f"argument {name}: {', '.join(parts)}")
        elif a[0] == b[0] == "static":
            changes.append(f"argument {name}: Python value {a[2]!r} -> {b[2]!r}")
        else:
            changes.append(f"argument {name}: {_kind(a)} -> {_kind(b)}")
    return "; ".join(changes) or "a new signature"


def _kind(key: tuple) -> str:
    return "a tensor" if key[0] == "tensor" else f"Python value {key[2]!r}"
