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

A call takes one plain route (`Function.run`): find the concrete functions traced for the call's
signature, and among them the one whose guards hold (none: trace a new one, and say why); run
its executor; write back the state it updated (`teachflow.staged.concrete` says how). Calls made
with tensors only may take a fast path first: the same steps written as one generated function
(`teachflow.staged.fast_path`), which hands the call to the plain route whenever anything is
unusual.
"""

from __future__ import annotations

import functools
import inspect
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.compiler import Compilation
from teachflow.core import dispatch
from teachflow.core.errors import TeachflowError, expect_callable, user_stacklevel
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.staged.calls import call_node, calls_as_node, tracing
from teachflow.staged.concrete import ConcreteFunction, as_inputs, write_into_arrays
from teachflow.staged.fast_path import NOT_TAKEN, FastCall
from teachflow.staged.signature import (
    Signature,
    canonical_call,
    check_input_signature,
    exact_tree,
    fit_input_signature,
    leaf_keys,
    retrace_reason,
    same_parameters,
    structure,
    varying_dimensions,
    varying_static,
)
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.callables import argument_names, callable_name, named_arguments, signature_of
from teachflow.tracing.trace import trace_function

#: After this many traces of one function, each further trace warns.
RETRACE_WARNING_AFTER = 5

#: Calls with tensors only try the fast path first (`teachflow.staged.fast_path`). Off, every
#: call takes the plain route; the tests run both ways.
TAKE_FAST_PATH = True


class RetracingWarning(UserWarning):
    """A `tfl.function` is being traced again and again (each trace costs a Python run)."""


class Function:
    """A polymorphic function: ``@tfl.function`` on a Python function (or method)."""

    def __init__(self, fn: Callable, passes: Any = "default", backend: str | None = None,
                 verify: bool | None = None,
                 input_signature: list[TensorSpec] | None = None) -> None:
        expect_callable(fn, "function", "tfl.function(f)")
        if isinstance(fn, Function):  # staged again (with these options): the same Python
            fn = fn.python_function
        # A function's name, docstring and attributes; a callable object (a model) or a
        # functools.partial lends only a name, that of its class or of the function it calls.
        if inspect.isfunction(fn) or inspect.ismethod(fn):
            functools.update_wrapper(self, fn)
        else:  # (read from the class: an object's own __getattr__ may do anything)
            self.__wrapped__ = fn
            self.__name__ = self.__qualname__ = callable_name(fn)
            self.__doc__ = inspect.getattr_static(type(fn), "__doc__", None)
        self.python_function = fn
        self.passes = passes
        self.backend = backend
        self.verify = verify
        self.input_signature = check_input_signature(input_signature)
        self.retrace_reasons: list[str] = []
        self._concrete: dict[Any, list[ConcreteFunction]] = {}
        self._bound_to_classes: dict[type, Function] = {}  # (a staged classmethod)
        # The fast path of calls with tensors only, by position: by their tensors' specs.
        self._fast_calls: dict[tuple, FastCall] = {}
        self._signature = signature_of(fn)
        # A decorated function shows the signature of the function it wraps (__wrapped__), but
        # the wrapper may read its arguments otherwise (set a default of its own, take them
        # only by keyword): its calls are keyed as made, not put in one form.
        if self._signature is not None and inspect.isfunction(fn) and inspect.unwrap(fn) is not fn:
            own = signature_of(fn, follow_wrapped=False)
            if own is None or not same_parameters(own, self._signature):
                self._signature = None

    @property
    def trace_count(self) -> int:
        return sum(len(found) for found in self._concrete.values())

    @property
    def concrete_functions(self) -> list[ConcreteFunction]:
        return [c for found in self._concrete.values() for c in found]

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return dispatch.call(self, args, kwargs)

    def run(self, args: tuple, kwargs: dict) -> Any:
        """A call, eagerly: find (or trace) the concrete function for these arguments, whose
        guards hold; run it; write back the state it updated. (First, for tensors only, the
        fast path: the same, generated as one function.)"""
        if TAKE_FAST_PATH and not kwargs:
            result = self._fast_call(args)
            if result is not NOT_TAKEN:
                return result
        concrete, tensors, arrays = self._concrete_for(args, kwargs)
        result = concrete.run_flat(tensors)
        write_into_arrays(arrays)
        return result

    def _fast_call(self, args: tuple) -> Any:
        """The call by its fast path, if one was written for arguments like these (tensors of
        the same shapes, dtypes and devices); else `NOT_TAKEN`."""
        key: list = []  # shape, dtype, device of each tensor, one after another
        for a in args:
            if type(a) is not Tensor:
                return NOT_TAKEN
            data = a._data
            key += (data.shape, data.dtype, a._backend.name)
        fast = self._fast_calls.get(tuple(key))
        if fast is None:
            return NOT_TAKEN
        if fast.call is None:  # its first call writes it
            fast.write()
        return fast.call(args)

    def fast_call_for(self, /, *args: Any) -> FastCall | None:
        """The fast path that calls with these arguments take (its ``source``: the generated
        Python of a whole call), or None where they take the plain route only (not tensors
        only, or not called before)."""
        if not all(type(a) is Tensor for a in args):
            return None
        fast = self._fast_calls.get(tuple(part for a in args
                                          for part in (a._data.shape, a._data.dtype,
                                                       a._backend.name)))
        if fast is not None and fast.call is None:
            fast.write()
        return fast

    def inline(self, args: tuple, kwargs: dict) -> Any:
        """Called from code being traced: the concrete function for these arguments (found or
        traced as for any call, eagerly: not into the trace under way) becomes one ``call``
        node of that trace; where it cannot (`calls_as_node`), its ops join the trace."""
        with dispatch.eagerly():
            concrete, tensors, arrays = self._concrete_for(args, kwargs)
        if calls_as_node(concrete, arrays):
            return call_node(concrete, tensors)
        return self.python_function(*args, **kwargs)

    def get_concrete_function(self, /, *args: Any, **kwargs: Any) -> ConcreteFunction:
        """The concrete function for these arguments (tracing it if it is new)."""
        return self._concrete_for(args, kwargs)[0]

    def _concrete_for(self, args: tuple, kwargs: dict) -> tuple[ConcreteFunction, list, list]:
        """The concrete function for a call, the call's tensors, and its NumPy arrays (each
        with the tensor made of it: see `as_inputs`)."""
        c_args, c_kwargs, left_out = canonical_call(self._signature, args, kwargs,
                                                    self.__name__)
        leaves, treedef = tree_flatten((c_args, c_kwargs))
        leaves, arrays = as_inputs(leaves)
        keys, tensors = leaf_keys(leaves)
        if self.input_signature is not None:
            names = argument_names(self.python_function, c_args, c_kwargs)
            keys = fit_input_signature(self.input_signature, keys, tensors, names, self.__name__)
        candidates = self._concrete.setdefault((exact_tree(treedef), keys), [])
        concrete = next((c for c in candidates if c.guards_hold(tensors)), None)
        if concrete is None:
            c_args, c_kwargs = tree_unflatten(treedef, leaves)
            concrete = self._trace(treedef, keys, c_args, c_kwargs, tensors, candidates,
                                   left_out)
        if (not kwargs and self.input_signature is None and len(tensors) == len(args)
                and all(type(a) is Tensor for a in args)):
            key = tuple(part for k in keys for part in k[1:])
            fast = self._fast_calls.get(key)
            if fast is None or fast.concrete is not concrete:
                self._fast_calls[key] = FastCall(concrete)
        return concrete, tensors, arrays

    def _trace(self, treedef: Any, keys: tuple, args: tuple, kwargs: dict,
               tensors: list[Tensor], candidates: list[ConcreteFunction],
               left_out: frozenset[str] = frozenset()) -> ConcreteFunction:
        fn = self.python_function
        signature = Signature(
            tuple((name, structure(v)) for name, v in named_arguments(fn, args, kwargs)),
            tuple(argument_names(fn, args, kwargs)), keys)
        specs = None if self.input_signature is None else [TensorSpec(k[1], k[2], k[3])
                                                           for k in keys if k[0] == "tensor"]
        with tracing(fn, self.__name__):
            traced = trace_function(fn, args, kwargs, name=self.__name__, specs=specs,
                                    left_out=left_out)
        concrete = ConcreteFunction(traced, signature, self._signature, self.passes,
                                    self.backend, self.verify, examples=tensors,
                                    input_signature=self.input_signature)
        if candidates:  # same signature, but the state it read is not as assumed any more
            failed = [g for g in candidates[-1].guards if not g.holds(tensors)]
            self.retrace_reasons.append("; ".join(g.reason(tensors) for g in failed))
        elif self.trace_count:
            previous = self.concrete_functions[-1].signature
            self.retrace_reasons.append(retrace_reason(previous, signature))
        candidates.append(concrete)
        if self.trace_count > RETRACE_WARNING_AFTER:
            recent = "; ".join(self.retrace_reasons[-3:])
            warnings.warn(f"{self.__name__} has been traced {self.trace_count} times; each trace "
                          f"runs the Python function again. Recent reasons: {recent}. "
                          f"{self._retrace_advice()}", RetracingWarning,
                          stacklevel=user_stacklevel())
        return concrete

    def _retrace_advice(self) -> str:
        """What to do about retracing, for the cause seen most recently."""
        recent = [c.signature for c in self.concrete_functions[-RETRACE_WARNING_AFTER:]]
        varying = varying_dimensions(recent)
        if varying:
            name, spec = varying
            return (f"The shape of argument {name} keeps changing: trace once for every size "
                    f"with tfl.function(f, input_signature=[tfl.TensorSpec({spec.shape}, "
                    f"{spec.dtype.name!r}), ...]) (None marks a dimension that varies).")
        static = varying_static(recent)
        if static is not None:
            name, values = static
            if all(isinstance(v, int | float | np.number) and not isinstance(v, bool)
                   for v in values):
                return (f"Python numbers are part of the signature (argument {name}): pass "
                        "values that change often as tensors (tfl.tensor(lr)), not as Python "
                        "numbers.")
            return (f"Argument {name} is static (a Python value, part of the signature) and "
                    "takes a new value again and again: each is a new trace. Call it with "
                    "fewer different values, or make what changes a tensor argument.")
        if any("rebound" in r for r in self.retrace_reasons[-3:]):
            return ("A captured tensor is rebound between calls (w = w - lr * g), so every call "
                    "reads a new tensor: update it in place (w -= lr * g) to keep one trace.")
        if any(".grad was" in r for r in self.retrace_reasons[-3:]):
            return ("The .grad the function reads is None on some calls and not on others: "
                    "clear gradients the same way before every call (opt.zero_grad()).")
        return "Call it with arguments of one signature (the same shapes, dtypes and devices)."


    def __get__(self, instance: Any, owner: type | None = None) -> Any:
        """``@tfl.function`` on a method: each instance gets its own Function (its own traces),
        cached on the instance. The two refer to each other, a cycle the garbage collector
        frees with the instance (``Model(...).forward(x)`` needs the instance during the call,
        so the Function cannot hold it weakly)."""
        if instance is None:
            return self
        if isinstance(instance, type):  # under @classmethod: bound to the class, cached here
            staged = self._bound_to_classes.get(instance)
            if staged is None:
                staged = self._bound_to_classes[instance] = self._bound(instance)
            return staged
        try:
            cache = vars(instance)
        except TypeError:
            raise TeachflowError(f"cannot stage method {self.__name__} of a "
                                 f"{type(instance).__name__}: its instances have no __dict__",
                                 op="function") from None
        # Cached on the instance under the method's name, like functools.cached_property (the
        # lookup here also serves special methods such as __call__, which skip the instance).
        # A method the instance's class overrides (reached through super()) is cached under its
        # qualified name instead, so it never takes the place of the override.
        key = self.__name__ if _resolves_to(type(instance), self.__name__, self) \
            else f"{self.__qualname__} (staged)"
        staged = cache.get(key)
        if not (isinstance(staged, Function) and staged.python_function.method is self):
            staged = cache[key] = self._bound(instance)
        return staged

    def _bound(self, instance: Any) -> Function:
        return Function(_BoundMethod(self, instance), self.passes, self.backend, self.verify,
                        self.input_signature)

    def __repr__(self) -> str:
        return f"<tfl.function {self.__name__}: {self.trace_count} concrete function(s)>"


def _resolves_to(cls: type, name: str, attribute: Any) -> bool:
    """Is `attribute` what ``cls.name`` finds (the most derived definition)?"""
    for klass in cls.__mro__:
        if name in vars(klass):
            return vars(klass)[name] is attribute
    return False


class _BoundMethod:
    """A staged method bound to its instance."""

    def __init__(self, method: Function, instance: Any) -> None:
        fn = method.python_function
        functools.update_wrapper(self, fn)
        self.method = method
        self.instance = instance
        signature = inspect.signature(fn)
        self.__signature__ = signature.replace(parameters=list(signature.parameters.values())[1:])

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return self.method.python_function(self.instance, *args, **kwargs)


def function(fn: Callable | None = None, *, passes: Any = "default",
             backend: str | None = None, verify: bool | None = None,
             input_signature: list[TensorSpec] | None = None) -> Any:
    """Stage a Python function: ``@tfl.function`` or ``tfl.function(f, passes=...)``.

    Python side effects (``print``, appending to a list) happen while tracing only, not on later
    calls: the graph records tensor operations and nothing else. Updates of tensors (``p -= g``,
    ``t[i] = v``, ``.grad`` from ``backward()``) are the exception: they take effect at every
    call, as eagerly. With ``input_signature=[tfl.TensorSpec((None, 3), "float32"), ...]`` it
    traces once for every argument that fits (None: any size there).
    """
    def stage(f: Callable) -> Function:
        return Function(f, passes=passes, backend=backend, verify=verify,
                        input_signature=input_signature)

    return stage if fn is None else stage(fn)


def compile(f: Any, *example_args: Any, passes: Any = "default", backend: str | None = None,
            verify: bool | None = None, **example_kwargs: Any) -> Compilation:
    """Trace `f` on the example arguments and compile it: a `Compilation` with a snapshot of
    every stage, callable on arguments of the same signature.

    It is a `tfl.function` traced once: its concrete function for these arguments, with the
    example tensors kept so that the stepper can show every node's value on them."""
    staged = Function(f, passes=passes, backend=backend, verify=verify)
    concrete = staged.get_concrete_function(*example_args, **example_kwargs)
    return Compilation(concrete.compilation.snapshots, concrete,
                       concrete.inputs_of(*example_args, **example_kwargs))


def one_compilation(obj: Any, op: str, what: str, hint: str) -> Compilation | None:
    """The compilation `obj` stands for, where one graph is wanted (`tfl.save`,
    `tfl.export_onnx`): a `Compilation` itself, a concrete function's, or that of a
    `tfl.function` traced exactly once (several traces are several graphs: which one is meant
    must be said). None for anything else. `what` names the one graph in the error."""
    if isinstance(obj, Function):
        traces = obj.concrete_functions
        if len(traces) != 1:
            raise TeachflowError(
                f"tfl.function {obj.__name__} has {len(traces)} concrete functions, and {what} "
                "is one graph", op=op,
                hint=hint if traces else "call it once first, so that it traces, or give "
                                         "f.get_concrete_function(*example_args)")
        obj = traces[0]
    if isinstance(obj, ConcreteFunction):
        obj = obj.compilation
    return obj if isinstance(obj, Compilation) else None
