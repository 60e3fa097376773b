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

import dataclasses
import enum
import functools
import inspect
import warnings
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow import autodiff, dispatch
from teachflow.backends import get_backend
from teachflow.compiler import Compilation, run_pipeline
from teachflow.errors import (
    DeviceError,
    SignatureMismatch,
    TeachflowError,
    expect_callable,
    user_stacklevel,
)
from teachflow.executor import explain_failure, generate, interpret
from teachflow.graph import Graph, StateGone, Value
from teachflow.ops.op import Op
from teachflow.spec import TensorSpec
from teachflow.staging import (
    Traced,
    argument_names,
    callable_name,
    is_tracing,
    named_arguments,
    signature_of,
    trace_function,
)
from teachflow.tensor import Tensor
from teachflow.tree import TreeDef, tree_flatten, tree_unflatten

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
    """One trace of a `Function`: its graph and the executor generated from it.

    Calling it runs the executor on the tensor arguments and the state it reads (captured
    tensors, and ``.grad``s), then writes back the state the traced code updated (see
    `teachflow.staging`): the new values of tensors updated in place, and new ``.grad``s.
    """

    #: What to do when called with arguments of another signature (a Compilation says its own).
    mismatch_hint = ("call the tfl.function itself: it traces a new concrete function for a new "
                     "signature")

    def __init__(self, traced: Traced, signature: Signature, call_signature: Any = None,
                 passes: Any = "default", backend: str | None = None,
                 verify: bool | None = None, examples: list[Tensor] | None = None,
                 input_signature: list[TensorSpec] | None = None) -> None:
        self.signature = signature
        self.input_signature = input_signature
        self.guards = traced.guards
        self._traced = traced
        self._call_signature = call_signature  # the Python function's, to read calls alike
        self.compilation = Compilation(run_pipeline(traced.graph, passes, verify, examples),
                                       self)
        self.graph = self.compilation.graph  # the optimized graph
        inputs = traced.graph.inputs
        self._backend = get_backend(backend or (inputs[0].spec.device if inputs else "cpu"))
        self._executor = generate(self.graph, self._backend)
        self._out_backends = [get_backend(v.spec.device) for v in self.graph.outputs]
        self._results = len(traced.graph.results)
        # A trace that ran backward() has its gradients inside: it is not differentiated again.
        self._differentiable = all(u.slot.attr != "grad" for u in traced.graph.updates)
        self._single_output = traced.out_tree is None and isinstance(traced.out_leaves[0], Value)

    @property
    def source(self) -> str:
        """The generated Python that runs the graph."""
        return self._executor.source

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        try:
            args, kwargs, _ = canonical_call(self._call_signature, args, kwargs,
                                             self.graph.name)
            leaves, treedef = tree_flatten((args, kwargs))
            leaves, arrays = _as_inputs(leaves)
            keys, tensors = _leaf_keys(leaves)
            if self.input_signature is not None and len(keys) == len(self.signature.names):
                keys = fit_input_signature(self.input_signature, keys, tensors,
                                           list(self.signature.names), self.graph.name)
        except TeachflowError as err:
            why = err.message
            keys, treedef = None, None
        same_tree = treedef is not None and _exact_tree(treedef) == _exact_tree(
            self._traced.in_tree)
        if keys != self.signature.keys or not same_tree:
            if same_tree:
                new = Signature(self.signature.arguments, self.signature.names, keys)
                why = retrace_reason(self.signature, new)
            elif keys is not None:
                why = _structure_difference(self._traced.in_tree, treedef) or \
                    "the arguments are structured differently"
            raise SignatureMismatch(f"this concrete function was traced for ({self.signature}); "
                                    f"these arguments do not fit it: {why}", op="function",
                                    hint=self.mismatch_hint)
        if not self.guards_hold(tensors):
            why = "; ".join([g.reason(tensors) for g in self.guards if not g.holds(tensors)]
                            + [f"{v.data.name} exists" for v in self._traced.graph.captures
                               if not v.data.alive])
            raise SignatureMismatch(f"this concrete function was traced assuming that {why}",
                                    op="function", hint=self.mismatch_hint)
        result = self._call_flat(tensors)
        _write_into_arrays(arrays)
        return result

    def inputs_of(self, /, *args: Any, **kwargs: Any) -> list[Tensor]:
        """The tensors a call with these arguments gives the graph, in the order of its inputs
        (a NumPy array as the tensor made of it)."""
        args, kwargs, _ = canonical_call(self._call_signature, args, kwargs, self.graph.name)
        leaves, _ = _as_inputs(tree_flatten((args, kwargs))[0])
        return _leaf_keys(leaves)[1]

    def guards_hold(self, tensors: list[Tensor] | tuple) -> bool:
        """Does the state outside the graph still look as the trace assumed (and does every
        tensor it reads still exist)?"""
        return (all(v.data.alive for v in self._traced.graph.captures)
                and all(guard.holds(tensors) for guard in self.guards))

    def _call_flat(self, tensors: list[Tensor] | tuple) -> Any:
        """Run on the flat tensor arguments; write back updated state; give back results in
        the function's structure."""
        backend, arrays, tracked = self._backend, [], []
        for t in tensors:
            if t._backend is not backend:
                raise DeviceError(f"this function was compiled for {backend.name} but got a "
                                  f"tensor on {t.device}", op="function")
            if t._node is not None:
                tracked.append(t._node)
            arrays.append(t._data)
        for capture in self._executor.captures:  # read by reference: current values
            state = capture.data.read(tensors)
            if state._node is not None:
                tracked.append(state._node)
            arrays.append(state._data)
        taped = bool(tracked) and autodiff.is_grad_enabled()
        if is_tracing() or (taped and self._differentiable):
            # Inside a trace, the graph's ops join that trace; and where someone may
            # differentiate through this call, they run one by one, on the tape (the optimized
            # graph's fused kernels have no gradient rules).
            results = interpret(self._traced.graph, tensors)
        else:
            try:
                outputs = self._executor.fn(*arrays)
            except Exception as exc:
                raise explain_failure(self._traced.graph, tensors) from exc
            results = [Tensor._make(a if type(a) is b.array_type else b.xp.asarray(a), b, None)
                       for a, b in zip(outputs, self._out_backends, strict=True)]
        write_back(self.graph, tensors, results)
        results = results[:self._results]
        if taped and not self._differentiable and not is_tracing():
            # A trace that ran backward(): its gradients are inside already. Its results say so
            # if backward() reaches them again (the state it updated stays plain, as eagerly).
            results = [_not_differentiable_again(r, tracked, self.graph.name) for r in results]
        results = [r if outside is None else outside.read(tensors)  # `return w`: w itself
                   for r, outside in zip(results, self._traced.returned, strict=True)]
        if self._single_output:
            return results[0]
        it = iter(results)
        leaves = [next(it) if isinstance(v, Value) else v for v in self._traced.out_leaves]
        return tree_unflatten(self._traced.out_tree, leaves)

    def __repr__(self) -> str:
        return f"<ConcreteFunction {self.graph.name}({self.signature}): {len(self.graph)} nodes>"


def _refuse_backward(g: Any, i: int, *, function: str) -> Any:
    raise autodiff.AutodiffError(
        f"this result comes from a call of the staged function {function}, which ran "
        "backward() inside: its gradients were computed inside the graph, and the call is not "
        "on the tape for another backward", op="backward",
        hint="compute what you want to differentiate outside that staged function (or stage "
             "it separately, without backward() inside)")


#: Marks the results of a staged call that ran backward(): backward() reaching one says why it
#: cannot go on (rather than a silently missing gradient).
_RAN_BACKWARD = Op("staged call that ran backward()", lambda xp: None, lambda *a: None,
                   grads=_refuse_backward, register=False, arg_names=())


def _not_differentiable_again(result: Tensor, parents: list, function: str) -> Tensor:
    if result.dtype.kind not in "fc":
        return result
    node = autodiff.TapeNode(_RAN_BACKWARD, {"function": function}, tuple(parents),
                             (None,) * len(parents), None, result._backend, result.shape,
                             result.dtype)
    return Tensor._make(result._data, result._backend, node)


def write_back(graph: Graph, arguments: list[Tensor] | tuple, outputs: list[Tensor]) -> None:
    """After a run: each piece of state the traced code updated takes its new value, as eagerly
    (a tensor updated in place holds the new values; a .grad is the new gradient, or None).
    Through the interpreter: inside another trace, that trace records the updates in turn."""
    interpreter = dispatch.current_interpreter()
    for update in graph.updates:
        tensor = update.slot.tensor(arguments)
        new = None if update.output is None else outputs[update.output]
        if update.slot.attr == "data":
            interpreter.assign(tensor, new)
        else:  # a gradient is a plain value, off the tape, as backward() leaves it
            interpreter.write_grad(tensor, None if new is None else new.detach())


class Function:
    """A polymorphic function: ``@tfl.function`` on a Python function (or method)."""

    def __init__(self, fn: Callable, passes: Any = "default", backend: str | None = None,
                 verify: bool | None = None,
                 input_signature: list[TensorSpec] | None = None) -> None:
        expect_callable(fn, "function", "tfl.function(f)")
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
        self.input_signature = _check_input_signature(input_signature)
        self.retrace_reasons: list[str] = []
        self._concrete: dict[Any, list[ConcreteFunction]] = {}
        self._bound_to_classes: dict[type, Function] = {}  # (a staged classmethod)
        # Calls with tensors only, by position, find their concrete function here directly.
        self._by_tensor_specs: dict[tuple, ConcreteFunction] = {}
        self._signature = signature_of(fn)
        # A decorated function shows the signature of the function it wraps (__wrapped__), but
        # the wrapper may read its arguments otherwise (set a default of its own, take them
        # only by keyword): its calls are keyed as made, not put in one form.
        if self._signature is not None and inspect.isfunction(fn) and inspect.unwrap(fn) is not fn:
            own = signature_of(fn, follow_wrapped=False)
            if own is None or not _same_parameters(own, self._signature):
                self._signature = None

    @property
    def trace_count(self) -> int:
        return sum(len(found) for found in self._concrete.values())

    @property
    def concrete_functions(self) -> list[ConcreteFunction]:
        return [c for found in self._concrete.values() for c in found]

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
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
                if concrete is not None and (not concrete.guards or concrete.guards_hold(args)):
                    try:
                        return concrete._call_flat(args)
                    except StateGone:  # a tensor it read is gone: find (or trace) another
                        pass
        concrete, tensors, arrays = self._concrete_for(args, kwargs)
        result = concrete._call_flat(tensors)
        _write_into_arrays(arrays)
        return result

    def get_concrete_function(self, /, *args: Any, **kwargs: Any) -> ConcreteFunction:
        """The concrete function for these arguments (tracing it if it is new)."""
        return self._concrete_for(args, kwargs)[0]

    def _concrete_for(self, args: tuple, kwargs: dict) -> tuple[ConcreteFunction, list, list]:
        """The concrete function for a call, the call's tensors, and its NumPy arrays (each
        with the tensor made of it: see `_as_inputs`)."""
        c_args, c_kwargs, left_out = canonical_call(self._signature, args, kwargs,
                                                    self.__name__)
        leaves, treedef = tree_flatten((c_args, c_kwargs))
        leaves, arrays = _as_inputs(leaves)
        keys, tensors = _leaf_keys(leaves)
        if self.input_signature is not None:
            names = argument_names(self.python_function, c_args, c_kwargs)
            keys = fit_input_signature(self.input_signature, keys, tensors, names, self.__name__)
        candidates = self._concrete.setdefault((_exact_tree(treedef), keys), [])
        concrete = next((c for c in candidates if c.guards_hold(tensors)), None)
        if concrete is None:
            c_args, c_kwargs = tree_unflatten(treedef, leaves)
            concrete = self._trace(treedef, keys, c_args, c_kwargs, tensors, candidates,
                                   left_out)
        if (not kwargs and self.input_signature is None and len(tensors) == len(args)
                and all(type(a) is Tensor for a in args)):
            self._by_tensor_specs[tuple(k[1:] for k in keys)] = concrete
        return concrete, tensors, arrays

    def _trace(self, treedef: Any, keys: tuple, args: tuple, kwargs: dict,
               tensors: list[Tensor], candidates: list[ConcreteFunction],
               left_out: frozenset[str] = frozenset()) -> ConcreteFunction:
        fn = self.python_function
        signature = Signature(
            tuple((name, _structure(v)) for name, v in named_arguments(fn, args, kwargs)),
            tuple(argument_names(fn, args, kwargs)), keys)
        specs = None if self.input_signature is None else [TensorSpec(k[1], k[2], k[3])
                                                           for k in keys if k[0] == "tensor"]
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
        varying = _varying_dimensions(recent)
        if varying:
            name, spec = varying
            return (f"The shape of argument {name} keeps changing: trace once for every size "
                    f"with tfl.function(f, input_signature=[tfl.TensorSpec({spec.shape}, "
                    f"{spec.dtype.name!r}), ...]) (None marks a dimension that varies).")
        static = _varying_static(recent)
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


def fit_input_signature(specs: list[TensorSpec], keys: tuple, tensors: list[Tensor],
                        names: list[str], function: str) -> tuple:
    """With an input_signature, every tensor argument must fit its spec; the keys become the
    specs' (so every fitting call shares one trace). `names` name every flat argument."""
    names = [n for n, k in zip(names, keys, strict=True) if k[0] == "tensor"]
    if len(tensors) != len(specs):
        raise TeachflowError(f"{function} was given an input_signature of {len(specs)} spec(s) "
                             f"but called with {len(tensors)} tensor(s)", op="function",
                             hint="pass one tensor per TensorSpec")
    fitted = iter(zip(specs, tensors, names, strict=True))
    new_keys = []
    for key in keys:
        if key[0] != "tensor":
            new_keys.append(key)
            continue
        spec, t, name = next(fitted)
        if not _fits(t.spec, spec):
            raise TeachflowError(
                f"argument {name}: {t.spec} on {t.device} does not fit the input_signature's "
                f"{spec}", op="function", operands=(f"{name}: {t.dtype.name}{list(t.shape)}",),
                hint="a None dimension accepts any size; the others, the dtype and the number "
                     "of dimensions must match")
        new_keys.append(("tensor", spec.shape, spec.dtype, t.device))
    return tuple(new_keys)


# --- Signatures ---------------------------------------------------------------------------------


def _same_parameters(a: inspect.Signature, b: inspect.Signature) -> bool:
    """The same names, kinds and defaults (the very objects: a tensor default is compared by
    identity, not by ``==``)."""
    pa, pb = list(a.parameters.values()), list(b.parameters.values())
    return len(pa) == len(pb) and all(
        x.name == y.name and x.kind == y.kind and x.default is y.default
        for x, y in zip(pa, pb, strict=True))


def canonical_call(signature: inspect.Signature | None, args: tuple, kwargs: dict,
                   name: str = "function") -> tuple[tuple, dict, frozenset[str]]:
    """One form for one call: ``f(x, 3)``, ``f(x, n=3)`` and, if 3 is the default, ``f(x)``
    all become ``(x, 3)``, so they share a trace. Also the parameters that took their default
    only for that (none with a tensor in it): a trace calls the function without them, as it
    was called (a wrapper, a ufunc, may not take them all)."""
    if signature is None:
        return args, _sorted(kwargs), frozenset()
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError as exc:
        raise TeachflowError(f"{name}(): {exc}", op="function") from None
    given = set(bound.arguments)
    bound.apply_defaults()
    left_out, keep_positional = set(), False
    for param in reversed(signature.parameters.values()):  # (a positional-only one kept keeps
        positional = param.kind is inspect.Parameter.POSITIONAL_ONLY  # those before it)
        if param.name in given or _holds_tensor(param.default) or (positional and
                                                                   keep_positional):
            keep_positional = keep_positional or positional
        elif param.name in bound.arguments:
            left_out.add(param.name)
    return bound.args, _sorted(bound.kwargs), frozenset(left_out)


def _holds_tensor(value: Any) -> bool:
    return any(isinstance(leaf, Tensor | np.ndarray) for leaf in tree_flatten(value)[0])


def _sorted(kwargs: dict) -> dict:
    return dict(sorted(kwargs.items()))


def _as_inputs(leaves: list) -> tuple[list, list]:
    """A NumPy array argument is data: a tensor input, copied as `tfl.tensor` copies it. Also
    each array with its tensor and the tensor's values now: an update of the tensor inside the
    function goes back into the array after the call (`_write_into_arrays`), as the same
    update of the array would eagerly."""
    inputs, arrays, made = [], [], {}
    for x in leaves:
        if isinstance(x, np.ndarray):
            t = made.get(id(x))  # one array passed twice is one tensor, as it is one array
            if t is None:
                t = made[id(x)] = Tensor(x)
                arrays.append((t, x, t._data))
            x = t
        inputs.append(x)
    return inputs, arrays


def _write_into_arrays(arrays: list) -> None:
    for tensor, array, before in arrays:
        if tensor._data is not before:  # updated in place by the call
            np.copyto(array, tensor.numpy(), casting="same_kind")


class _Exact:
    """A static value as a signature key: equal only to a value that is the same program text.
    In Python ``0.0 == -0.0``, ``1 == True``, ``{1: "a"} == {True: "a"}`` and ``nan != nan``,
    but ``1 / (x * -0.0)`` is not ``1 / (x * 0.0)``, ``x[True]`` is not ``x[1]``, and ``x * nan``
    is one program however often it is called. So the key compares types and, for numbers,
    their text, all the way into tuples, sets and dataclasses."""

    __slots__ = ("_value", "key")

    def __init__(self, value: Any) -> None:
        self.key = _exact_key(value)
        # An object compared by identity is held weakly (as `_Same` holds it): a model passed
        # once is not kept alive by the trace made for it.
        self._value = self.key[1] if isinstance(self.key[1], _Same) else _held(value)

    @property
    def value(self) -> Any:
        return self._value.value if isinstance(self._value, _Same) else self._value()

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Exact) and self.key == other.key

    def __hash__(self) -> int:
        return hash(self.key)

    def __repr__(self) -> str:
        return repr(self.value)


def _exact_key(value: Any) -> Any:
    if isinstance(value, float | complex | np.inexact):
        return type(value), repr(value)
    if isinstance(value, slice):  # (not hashable before Python 3.12)
        return slice, tuple(_exact_key(v) for v in (value.start, value.stop, value.step))
    if isinstance(value, tuple | list | frozenset | set):
        keys = [_exact_key(v) for v in value]
        return type(value), (frozenset(keys) if isinstance(value, frozenset | set)
                             else tuple(keys))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return type(value), tuple(_exact_key(getattr(value, f.name))
                                  for f in dataclasses.fields(value))
    if isinstance(value, _VALUES):
        return type(value), value
    # Any other object is the same static argument only if it is the same object: one that says
    # it equals another (by a name, a config) may still hold other tensors and compute otherwise.
    return type(value), _Same(value)


#: Values whose equality is what they compute with.
_VALUES = (str, bytes, int, np.integer, np.bool_, np.dtype, type, enum.Enum, slice, range,
           type(None), type(Ellipsis), TensorSpec)


def _by_identity(value: Any) -> bool:
    """Is this static argument the same only when it is the same object?"""
    key = _exact_key(value)[1]
    return isinstance(key, _Same) or (key is value and not isinstance(value, _VALUES))


class _Same:
    """Equal only to itself (a static argument compared by identity), which it holds weakly
    where it can: once the object is gone, nothing can be the same object again."""

    __slots__ = ("_id", "_ref")

    def __init__(self, value: Any) -> None:
        self._id = id(value)
        self._ref = _held(value)

    @property
    def value(self) -> Any:
        return self._ref()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, _Same) or other._id != self._id:
            return False
        mine = self._ref()
        return mine is not None and mine is other._ref()

    def __hash__(self) -> int:
        return self._id


def _held(value: Any) -> Any:
    """A callable that gives `value`: a weak reference where one can be made."""
    if isinstance(value, _VALUES + (float, complex, np.inexact, tuple, list, set, frozenset)):
        return lambda: value
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


def _exact_tree(treedef: TreeDef | None) -> Any:
    """A treedef whose dict keys compare exactly (a dict keyed by 1 is not one keyed by True)."""
    if treedef is None:
        return None
    keys = treedef.keys
    if issubclass(treedef.kind, dict):
        keys = tuple(_Exact(k) for k in keys)
    return treedef.kind, keys, tuple(_exact_tree(c) for c in treedef.children)


def _leaf_keys(leaves: list) -> tuple[tuple, list[Tensor]]:
    """Per flat argument, what the trace depends on; and the tensors, whose values it does not."""
    keys, tensors = [], []
    for leaf in leaves:
        if isinstance(leaf, Tensor):
            keys.append(("tensor", leaf.shape, leaf.dtype, leaf.device))
            tensors.append(leaf)
        else:  # (any value: what compares by value is keyed by it, anything else by identity)
            keys.append(("static", type(leaf), _Exact(leaf)))
    return tuple(keys), tensors


def _check_input_signature(specs: Any) -> list[TensorSpec] | None:
    if specs is None:
        return None
    if not isinstance(specs, list | tuple) or not all(isinstance(s, TensorSpec) for s in specs):
        raise TeachflowError("input_signature must be a list of tfl.TensorSpec, one per tensor "
                             f"argument, not {specs!r}", op="function",
                             hint='e.g. input_signature=[tfl.TensorSpec((None, 3), "float32")]')
    return list(specs)


def _fits(spec: TensorSpec, pattern: TensorSpec) -> bool:
    """Does a tensor of `spec` fit `pattern` (None in the pattern: any size)?"""
    return (spec.dtype == pattern.dtype and len(spec.shape) == len(pattern.shape)
            and all(p is None or p == d for d, p in zip(spec.shape, pattern.shape, strict=True)))


def _varying_dimensions(signatures: list[Signature]) -> tuple[str, TensorSpec] | None:
    """A tensor argument whose rank and dtype stay while some sizes change across `signatures`:
    its name and a spec with None where sizes changed."""
    if len(signatures) < 2 or len({s.names for s in signatures}) != 1:
        return None
    for i, name in enumerate(signatures[0].names):
        keys = [s.keys[i] for s in signatures]
        if any(k[0] != "tensor" for k in keys) or len({(len(k[1]), k[2]) for k in keys}) != 1:
            continue
        shapes = [k[1] for k in keys]
        if len(set(shapes)) > 1:
            merged = tuple(d[0] if len(set(d)) == 1 else None for d in zip(*shapes, strict=True))
            return name, TensorSpec(merged, keys[0][2])
    return None


def _varying_static(signatures: list[Signature]) -> tuple[str, list] | None:
    """A static argument whose value changes across `signatures`: its name and values."""
    if len(signatures) < 2 or len({s.names for s in signatures}) != 1:
        return None
    for i, name in enumerate(signatures[0].names):
        keys = [s.keys[i] for s in signatures]
        if all(k[0] == "static" for k in keys) and len(set(keys)) > 1:
            return name, [k[2].value for k in keys]
    return None


def _structure_difference(traced: TreeDef | None, given: TreeDef | None) -> str | None:
    """Where two argument structures first differ, when it is a dict's key order (which the
    function sees: ``for k in d``)."""
    if traced is None or given is None or traced.kind is not given.kind:
        return None
    if issubclass(traced.kind, dict) and traced.keys != given.keys and \
            set(traced.keys) == set(given.keys):
        return (f"a dict's keys come in another order ({', '.join(map(repr, given.keys))}) than "
                f"when traced ({', '.join(map(repr, traced.keys))}), and the function sees that "
                "order")
    for a, b in zip(traced.children, given.children, strict=False):
        found = _structure_difference(a, b)
        if found:
            return found
    return None


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
        elif a[0] == b[0] == "static" and _by_identity(a[2].value) and _by_identity(b[2].value):
            changes.append(f"argument {name}: another {type(b[2].value).__name__} object (an "
                           "object is compared by identity: the same object, or a new trace)")
        elif a[0] == b[0] == "static":
            changes.append(f"argument {name}: Python value {a[2]!r} -> {b[2]!r}")
        else:
            changes.append(f"argument {name}: {_kind(a)} -> {_kind(b)}")
    return "; ".join(changes) or "a new signature"


def _kind(key: tuple) -> str:
    return "a tensor" if key[0] == "tensor" else f"Python value {key[2]!r}"


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
