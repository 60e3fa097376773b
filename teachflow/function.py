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
import inspect
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow import autodiff
from teachflow.backends import get_backend
from teachflow.compiler import Compilation, run_pipeline
from teachflow.errors import DeviceError, TeachflowError, TraceError, user_stacklevel
from teachflow.executor import generate, interpret
from teachflow.graph import Value
from teachflow.spec import TensorSpec
from teachflow.staging import (
    Traced,
    argument_names,
    is_tracing,
    named_arguments,
    trace_function,
)
from teachflow.tensor import Tensor
from teachflow.tree import tree_flatten, tree_unflatten

#: After this many traces of one function, each further trace warns.
RETRACE_WARNING_AFTER = 5


class RetracingWarning(UserWarning):
    """A `tfl.function` is being traced again and again (each trace costs a Python run)."""


@dataclass(frozen=True)
class Signature:
    """What a trace depends on, with names, so two signatures can be compared in words."""

    arguments: tuple[tuple[str, str], ...]  # per top-level argument: name, structure
    names: tuple[str, ...]  # per flat leaf
    keys: tuple  # per flat leaf: ("tensor", shape, dtype, device) or ("static", type, value)

    def __str__(self) -> str:
        return ", ".join(_describe_leaf(n, k) for n, k in zip(self.names, self.keys,
                                                               strict=True))


class ConcreteFunction:
    """One trace of a `Function`: its graph and the executor generated from it."""

    def __init__(self, traced: Traced, signature: Signature, passes: Any = "default",
                 backend: str | None = None, verify: bool | None = None) -> None:
        self.signature = signature
        self._traced = traced
        self.compilation = Compilation(run_pipeline(traced.graph, passes, verify), self)
        self.graph = self.compilation.graph  # the optimized graph
        inputs = traced.graph.inputs
        self._backend = get_backend(backend or (inputs[0].spec.device if inputs else "cpu"))
        self._executor = generate(self.graph, self._backend)
        self._out_backends = [get_backend(v.spec.device) for v in traced.graph.outputs]
        self._single_output = traced.out_tree is None and isinstance(traced.out_leaves[0], Value)

    @property
    def source(self) -> str:
        """The generated Python that runs the graph."""
        return self._executor.source

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        leaves, treedef = tree_flatten((args, _sorted(kwargs)))
        keys, tensors = _leaf_keys(leaves)
        if keys != self.signature.keys or treedef != self._traced.in_tree:
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
            # Someone differentiates through this call: run the traced graph op by op, on the
            # tape (the optimized graph's fused kernels have no gradient rules).
            results = interpret(self._traced.graph, tensors)
        else:
            results = [Tensor._make(a if type(a) is b.array_type else b.xp.asarray(a), b, None)
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

    def __init__(self, fn: Callable, passes: Any = "default", backend: str | None = None,
                 verify: bool | None = None) -> None:
        functools.update_wrapper(self, fn)
        self.python_function = fn
        self.passes = passes
        self.backend = backend
        self.verify = verify
        self.retrace_reasons: list[str] = []
        self._concrete: dict[Any, ConcreteFunction] = {}
        # Calls with tensors only, by position, find their concrete function here directly.
        self._by_tensor_specs: dict[tuple, ConcreteFunction] = {}
        try:
            self._signature: inspect.Signature | None = inspect.signature(fn)
        except (TypeError, ValueError):  # some builtins have none
            self._signature = None

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
                concrete = self._by_tensor_specs.get(tuple(key))
                if concrete is not None:
                    return concrete._call_flat(args)
        concrete, tensors = self._concrete_for(args, kwargs)
        return concrete._call_flat(tensors)

    def get_concrete_function(self, *args: Any, **kwargs: Any) -> ConcreteFunction:
        """The concrete function for these arguments (tracing it if it is new)."""
        return self._concrete_for(args, kwargs)[0]

    def _canonical(self, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        """One form for one call: ``f(x, 3)``, ``f(x, n=3)`` and, if 3 is the default, ``f(x)``
        all become ``(x, 3)``, so they share a trace."""
        if self._signature is None:
            return args, _sorted(kwargs)
        try:
            bound = self._signature.bind(*args, **kwargs)
        except TypeError as exc:
            raise TeachflowError(f"{self.__name__}(): {exc}", op="function") from None
        bound.apply_defaults()
        return bound.args, _sorted(bound.kwargs)

    def _concrete_for(self, args: tuple, kwargs: dict) -> tuple[ConcreteFunction, list]:
        c_args, c_kwargs = self._canonical(args, kwargs)
        leaves, treedef = tree_flatten((c_args, c_kwargs))
        # A NumPy array is data: a tensor input, copied as `tfl.tensor` copies it.
        leaves = [Tensor(x) if isinstance(x, np.ndarray) else x for x in leaves]
        try:
            keys, tensors = _leaf_keys(leaves)
        except _Unhashable as err:
            name = argument_names(self.python_function, c_args, c_kwargs)[err.index]
            raise TeachflowError(
                f"argument {name} is a {type(leaves[err.index]).__name__}, neither a tensor nor "
                "hashable, so it cannot be part of a trace signature", op="function",
                hint="pass tensors, or Python values that can be dict keys") from None
        concrete = self._concrete.get((treedef, keys))
        if concrete is None:
            c_args, c_kwargs = tree_unflatten(treedef, leaves)
            concrete = self._trace(treedef, keys, c_args, c_kwargs)
        if not kwargs and all(type(a) is Tensor for a in args):
            self._by_tensor_specs[tuple(k[1:] for k in keys[:len(args)])] = concrete
        return concrete, tensors

    def _trace(self, treedef: Any, keys: tuple, args: tuple, kwargs: dict) -> ConcreteFunction:
        fn = self.python_function
        signature = Signature(
            tuple((name, _structure(v)) for name, v in named_arguments(fn, args, kwargs)),
            tuple(argument_names(fn, args, kwargs)), keys)
        traced = trace_function(self.python_function, args, kwargs, name=self.__name__)
        concrete = ConcreteFunction(traced, signature, self.passes, self.backend, self.verify)
        if self._concrete:
            previous = list(self._concrete.values())[-1].signature
            self.retrace_reasons.append(retrace_reason(previous, signature))
        self._concrete[(treedef, keys)] = concrete
        if self.trace_count > RETRACE_WARNING_AFTER:
            recent = "; ".join(self.retrace_reasons[-3:])
            warnings.warn(f"{self.__name__} has been traced {self.trace_count} times; each trace "
                          f"runs the Python function again. Recent reasons: {recent}. Pass "
                          "values that change often as tensors, not Python numbers.",
                          RetracingWarning, stacklevel=user_stacklevel())
        return concrete

    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """``@tfl.function`` on a method: each instance gets its own Function (its own traces),
        which holds the instance weakly, so staging a model never keeps it alive."""
        if instance is None:
            return self
        try:
            cache = vars(instance)
        except TypeError:
            raise TeachflowError(f"cannot stage method {self.__name__} of a "
                                 f"{type(instance).__name__}: its instances have no __dict__",
                                 op="function") from None
        # Cached on the instance under the method's name, like functools.cached_property (the
        # lookup here also serves special methods such as __call__, which skip the instance).
        staged = cache.get(self.__name__)
        if not (isinstance(staged, Function) and staged.python_function.method is self):
            staged = cache[self.__name__] = Function(_WeakMethod(self, instance), self.passes,
                                                     self.backend, self.verify)
        return staged

    def __repr__(self) -> str:
        return f"<tfl.function {self.__name__}: {self.trace_count} concrete function(s)>"


class _WeakMethod:
    """A staged method bound to its instance by a weak reference."""

    def __init__(self, method: Function, instance: Any) -> None:
        fn = method.python_function
        functools.update_wrapper(self, fn)
        self.method = method
        self._instance = weakref.ref(instance)
        signature = inspect.signature(fn)
        self.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.method.python_function(self._instance(), *args, **kwargs)


def function(fn: Callable | None = None, *, passes: Any = "default",
             backend: str | None = None, verify: bool | None = None) -> Any:
    """Stage a Python function: ``@tfl.function`` or ``tfl.function(f, passes=...)``.

    Python side effects (``print``, appending to a list) happen while tracing only, not on later
    calls: the graph records tensor operations and nothing else.
    """
    if fn is None:
        return lambda f: Function(f, passes=passes, backend=backend, verify=verify)
    return Function(fn, passes=passes, backend=backend, verify=verify)


# --- Signatures ---------------------------------------------------------------------------------


class _Unhashable(Exception):
    def __init__(self, index: int) -> None:
        self.index = index


def _sorted(kwargs: dict) -> dict:
    return dict(sorted(kwargs.items()))


def _leaf_keys(leaves: list) -> tuple[tuple, list[Tensor]]:
    """Per flat argument, what the trace depends on; and the tensors, whose values it does not."""
    keys, tensors = [], []
    for i, leaf in enumerate(leaves):
        if isinstance(leaf, Tensor):
            keys.append(("tensor", leaf.shape, leaf.dtype, leaf.device))
            tensors.append(leaf)
        else:
            try:
                hash(leaf)
            except TypeError:
                raise _Unhashable(i) from None
            keys.append(("static", type(leaf), leaf))
    return tuple(keys), tensors


def _structure(value: Any) -> str:
    """How an argument is built, for containers (leaves are compared by their keys)."""
    if isinstance(value, dict):
        return f"a dict with keys {', '.join(map(str, value))}"
    if isinstance(value, list | tuple):
        return f"a {type(value).__name__} of {len(value)}"
    return "one value"


def _describe_leaf(name: str, key: tuple) -> str:
    if key[0] == "tensor":
        spec = TensorSpec(key[1], key[2], key[3])
        return f"{name}: {spec}" + (f" on {key[3]}" if key[3] != "cpu" else "")
    return f"{name}={key[2]!r}"


def retrace_reason(old: Signature, new: Signature) -> str:
    """One plain sentence: which argument changed, and how."""
    if old.arguments != new.arguments:
        before, after = dict(old.arguments), dict(new.arguments)
        changes = [f"argument {n}: {before[n]} -> {after[n]}"
                   for n in after if n in before and before[n] != after[n]]
        changes += [f"argument {n} is new" for n in after if n not in before]
        changes += [f"argument {n} is gone" for n in before if n not in after]
        if changes:
            return "; ".join(changes)
    if old.names != new.names:
        return f"the arguments changed from ({', '.join(old.names)}) to ({', '.join(new.names)})"
    changes = []
    for name, a, b in zip(new.names, old.keys, new.keys, strict=True):
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
