"""Reading a Python callable without running any of the user's code.

A trace needs to know a function's signature, a readable name for it and for each argument, and
the plain Python function under its wrappers (a method, a ``functools.partial``, a decorated
function, a callable object) with the objects it runs on. A user's object may define
``__getattr__`` to do anything, so everything here is read from classes and ``__dict__``s.
"""

from __future__ import annotations

import functools
import inspect
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.core.tree import tree_paths


def python_function(fn: Callable) -> tuple[types.FunctionType | None, list[tuple[str, Any]]]:
    """The Python function whose code a call of `fn` runs, and the objects it runs on (an
    instance, a partial's bound arguments), looked up without calling anything of the user's:
    a method, a staged method, a ``functools.partial``, a callable object, or a decorated
    function (followed through ``__wrapped__``)."""
    owners: list[tuple[str, Any]] = []
    for _ in range(100):  # (a chain of wrappers, never a cycle)
        if isinstance(fn, functools.partial):
            owners += _partial_arguments(fn)
            fn = fn.func
            continue
        if isinstance(fn, types.MethodType):
            owners.append(("self", fn.__self__))
            fn = fn.__func__
            continue
        wrapped = own_attribute(fn, "__wrapped__")
        if wrapped is not None:  # functools.wraps, and a staged function or method
            instance = own_attribute(fn, "instance")
            if instance is not None:
                owners.append(("self", instance))
            fn = wrapped
            continue
        if isinstance(fn, types.FunctionType):
            return fn, owners
        call = inspect.getattr_static(type(fn), "__call__", None)  # a callable object's class
        if not isinstance(call, types.FunctionType):
            return None, owners
        owners.append(("self", fn))
        fn = call
    return None, owners


def _partial_arguments(fn: functools.partial) -> list[tuple[str, Any]]:
    """A partial's bound arguments under the names of the parameters they fill."""
    try:
        bound = inspect.signature(fn.func).bind_partial(*fn.args, **fn.keywords)
    except (TypeError, ValueError):  # no signature to read: name them by position
        return [("partial", (fn.args, fn.keywords))]
    return list(bound.arguments.items())


def own_attribute(obj: Any, name: str) -> Any:
    """`obj`'s attribute `name` from its ``__dict__`` (None if absent): no ``__getattr__``."""
    try:
        return object.__getattribute__(obj, "__dict__").get(name)
    except Exception:
        return None


def signature_of(fn: Callable, follow_wrapped: bool = True) -> inspect.Signature | None:
    """`fn`'s signature (None where it has none). A callable object's is its class's
    ``__call__``'s, read from the class: asking the object could run a ``__getattr__`` of the
    user's, which may do anything. (A class may say otherwise with a ``__signature__``
    property, as `teachflow.nn.Module` does: calling a module calls its ``forward``.)"""
    try:
        if isinstance(fn, types.FunctionType | types.MethodType | types.BuiltinFunctionType |
                      functools.partial | np.ufunc) or own_attribute(fn, "__signature__") \
                or isinstance(inspect.getattr_static(type(fn), "__signature__", None), property):
            return inspect.signature(fn, follow_wrapped=follow_wrapped)
        call = inspect.getattr_static(type(fn), "__call__", None)
        signature = inspect.signature(call, follow_wrapped=follow_wrapped)
        return signature.replace(parameters=list(signature.parameters.values())[1:])
    except (TypeError, ValueError):  # builtins and callables without a signature
        return None


def named_arguments(fn: Callable, args: tuple, kwargs: dict) -> list[tuple[str, Any]]:
    """``(name, value)`` for each argument as passed: parameter names for positional ones."""
    signature = signature_of(fn)
    params = list(signature.parameters.values()) if signature is not None else []
    kinds = inspect.Parameter
    fixed = [p.name for p in params
             if p.kind in (kinds.POSITIONAL_ONLY, kinds.POSITIONAL_OR_KEYWORD)]
    rest = next((p.name for p in params if p.kind is kinds.VAR_POSITIONAL), "arg")
    positional = [fixed[i] if i < len(fixed) else f"{rest}_{i - len(fixed)}"
                  for i in range(len(args))]
    return [*zip(positional, args, strict=True), *kwargs.items()]


def callable_name(fn: Callable) -> str:
    """What to call `fn` in a graph and in messages: its own name; for a callable object its
    class's, for a ``functools.partial`` that of the function it calls."""
    if isinstance(fn, functools.partial):
        return callable_name(fn.func)
    if isinstance(fn, types.FunctionType | types.MethodType | types.BuiltinFunctionType | type):
        return fn.__name__
    # An object's own name (a ufunc's, a staged function's), unless reading it would run a
    # __getattr__ of the user's, which may do anything; else its class's name.
    own = inspect.getattr_static(type(fn), "__getattr__", None) is None
    name = getattr(fn, "__name__", None) if own else own_attribute(fn, "__name__")
    return name if isinstance(name, str) else type(fn).__name__


def argument_names(fn: Callable, args: tuple, kwargs: dict) -> list[str]:
    """A readable name for every flat argument leaf, in `tree_flatten((args, kwargs))` order:
    ``x``, ``params_0``, ``cfg_lr``, ..."""
    return ["_".join([name, *(str(p) for p in path)])
            for name, value in named_arguments(fn, args, kwargs) for path in tree_paths(value)]
