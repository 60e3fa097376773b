"""`Module`: a layer, a model, anything with parameters and a `forward`, as in PyTorch.

A module is a plain Python object. Its *parameters* are the `Parameter` attributes it assigns
(``self.weight = Parameter(...)``) and its *children* the `Module` attributes
(``self.layer1 = Linear(3, 4)``); both are found by looking at the object's attributes, in the
order they were first assigned, so there is no registry to keep in step. A parameter's name is
its path of attribute names, ``layer1.weight``, ``0.bias`` inside a `Sequential`: the same names
PyTorch gives, so a state dict maps one to one onto a PyTorch model's.

Calling a module calls its `forward`. The same module runs eagerly (the tape records the ops on
its parameters) or inside a staged function, where each parameter is a tensor the graph
*captures*: read at every call, never baked in as a constant, so an optimizer's step is seen by
the next call without tracing again. A module's *buffers* (``register_buffer``: `BatchNorm2d`'s
running statistics) are state too, but not parameters: no gradient, no optimizer; they are in
the state dict, and a staged function writes their updates back. ``train()`` and ``eval()``
set the `training` flag of the module and its children; a layer that behaves differently in
training (`Dropout`) reads it through `Module.training_flag`, which a staged function checks
before each call.
"""

from __future__ import annotations

import inspect
import weakref
from collections.abc import Iterator, Mapping
from typing import Any, NamedTuple

import numpy as np

from teachflow.autodiff.tape import no_grad
from teachflow.core import dispatch
from teachflow.core.errors import (
    DTypeError,
    ShapeError,
    TeachflowError,
    enter_scope,
    leave_scope,
    scope_owner,
)
from teachflow.graph import StateGone
from teachflow.tensor.factories import zeros_like
from teachflow.tensor.tensor import Tensor, as_tensor

_new = object.__new__


class Parameter(Tensor):
    """A tensor that is a module's parameter: a leaf that requires grad (as ``nn.Parameter``).

    Assigning one to a module attribute makes it one of the module's `parameters()`."""

    __slots__ = ()

    def __init__(self, data: Any, requires_grad: bool = True) -> None:
        source = data.detach().numpy() if isinstance(data, Tensor) else data
        device = data.device if isinstance(data, Tensor) else None
        super().__init__(source, device=device, requires_grad=requires_grad)

    def __repr__(self) -> str:
        return "Parameter containing:\n" + super().__repr__()

    def __deepcopy__(self, memo: dict) -> Parameter:  # (copy.deepcopy(model) keeps parameters)
        copied = super().__deepcopy__(memo)
        p = _new(Parameter)
        p._data, p._backend, p._node, p._grad = copied._data, copied._backend, None, copied._grad
        p.requires_grad = self.requires_grad
        memo[id(self)] = p
        return p

    def __reduce__(self) -> tuple:
        return Parameter, (self.numpy(), self.requires_grad)


class IncompatibleKeys(NamedTuple):
    """What `Module.load_state_dict` did not load (PyTorch's ``_IncompatibleKeys``): the
    model's names the state dict lacks, and the state dict's names the model lacks."""

    missing_keys: list[str]
    unexpected_keys: list[str]


class Module:
    """The base class of layers and models: subclass it, assign parameters and sub-modules in
    ``__init__``, and compute in ``forward``::

        class MLP(tfl.nn.Module):
            def __init__(self):
                super().__init__()
                self.hidden = tfl.nn.Linear(64, 32)
                self.out = tfl.nn.Linear(32, 10)

            def forward(self, x):
                return self.out(self.hidden(x).relu())
    """

    training: bool = True  # (a class default: a subclass that skips super().__init__() works)
    # A staged function looks inside a module for the tensors its code reaches (names in the
    # graph, ``model.0.weight``; a layer replaced after a trace is seen), as inside the user's
    # own objects, although the class is teachflow's (see `teachflow.tracing.python_state`).
    _user_state = True

    def __init__(self) -> None:
        self.training = True

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        raise TeachflowError(f"{type(self).__name__} has no forward method", op="Module",
                             hint="define forward(self, x) in your Module subclass: calling the "
                                  "module calls it")

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """``forward``, its ops recorded in this module's scope (`errors.name_scope`): its name
        in the module that calls it and its class, ``Sequential/0:Linear``, so that the stepper
        draws each module as a box of the nodes it made."""
        caller = scope_owner()
        name = self._name_in(caller) if isinstance(caller, Module) else type(self).__name__
        previous = enter_scope(name, self)
        try:
            return self.forward(*args, **kwargs)
        finally:
            leave_scope(previous)

    def _name_in(self, caller: Module) -> str:
        """``0:Linear``: this module's attribute name in `caller`, and its class (the class
        alone when `caller` does not hold it, as a layer kept in a list)."""
        for name, value in vars(caller).items():
            if value is self:
                return f"{name}:{type(self).__name__}"
        return type(self).__name__

    @property
    def __signature__(self) -> inspect.Signature:
        """Calling a module calls ``forward``, so its signature is forward's (a staged module's
        graph names its inputs after forward's parameters)."""
        return inspect.signature(self.forward)

    # --- What it holds ------------------------------------------------------------------------

    def named_children(self) -> Iterator[tuple[str, Module]]:
        """``(name, module)`` for each direct sub-module, in the order assigned."""
        for name, value in vars(self).items():
            if isinstance(value, Module):
                yield name, value

    def children(self) -> Iterator[Module]:
        for _, child in self.named_children():
            yield child

    def named_modules(self, prefix: str = "", remove_duplicate: bool = True
                      ) -> Iterator[tuple[str, Module]]:
        """This module (named `prefix`, "" at the top) and every module inside it, each once
        (or, not `remove_duplicate`, under each of its names)."""
        seen: set[int] = set()
        stack = [(prefix, self)]
        while stack:
            name, module = stack.pop()
            if remove_duplicate and id(module) in seen:
                continue
            seen.add(id(module))
            yield name, module
            children = [(f"{name}.{n}" if name else n, c) for n, c in module.named_children()]
            stack.extend(reversed(children))

    def modules(self) -> Iterator[Module]:
        for _, module in self.named_modules():
            yield module

    def named_parameters(self, prefix: str = "", recurse: bool = True,
                         remove_duplicate: bool = True) -> Iterator[tuple[str, Parameter]]:
        """``(dotted name, parameter)`` for each parameter, each once (a parameter shared by two
        layers is listed under its first name; under each, not `remove_duplicate`), in
        PyTorch's order: a module's own parameters, then its children's."""
        seen: set[int] = set()
        modules = (self.named_modules(prefix, remove_duplicate) if recurse
                   else iter([(prefix, self)]))
        for path, module in modules:
            for name, value in vars(module).items():
                if isinstance(value, Parameter) and not (remove_duplicate and id(value) in seen):
                    seen.add(id(value))
                    yield (f"{path}.{name}" if path else name), value

    def parameters(self, recurse: bool = True) -> Iterator[Parameter]:
        for _, p in self.named_parameters(recurse=recurse):
            yield p

    def register_buffer(self, name: str, tensor: Tensor | None) -> None:
        """Keep `tensor` as state that is not a parameter (PyTorch's buffers: running
        statistics): an attribute like any other, listed by `named_buffers` and in the state
        dict, moved by `to`."""
        if (tensor is not None and not isinstance(tensor, Tensor)) or isinstance(tensor, Parameter):
            raise DTypeError(f"a buffer is a tensor (not a parameter) or None, not "
                             f"{type(tensor).__name__}", op="register_buffer",
                             hint="self.register_buffer('running_mean', tfl.zeros(n))")
        vars(self).setdefault("_buffer_names", [])
        if name not in self._buffer_names:
            self._buffer_names.append(name)
        setattr(self, name, tensor)

    def named_buffers(self, prefix: str = "", remove_duplicate: bool = True
                      ) -> Iterator[tuple[str, Tensor]]:
        """``(dotted name, tensor)`` for each buffer of this module and those inside it."""
        for path, module in self.named_modules(prefix, remove_duplicate):
            for name in vars(module).get("_buffer_names", ()):
                value = getattr(module, name)
                if value is not None:
                    yield (f"{path}.{name}" if path else name), value

    def buffers(self) -> Iterator[Tensor]:
        for _, b in self.named_buffers():
            yield b

    def _named_state(self) -> dict[str, Tensor]:
        """Parameters and buffers by name, each module's own in turn (PyTorch's order)."""
        state: dict[str, Tensor] = {}
        for path, module in self.named_modules(remove_duplicate=False):
            state.update(module.named_parameters(path, recurse=False, remove_duplicate=False))
            state.update(module.named_buffers(path) if vars(module).get("_buffer_names")
                         else ())
        return state

    # --- Modes and gradients ----------------------------------------------------------------

    def train(self, mode: bool = True) -> Module:
        """Training mode (`Dropout` drops) for this module and all inside it; returns it."""
        if not isinstance(mode, bool):
            raise DTypeError(f"train() takes a bool, not {type(mode).__name__} {mode!r}",
                             op="train", hint="model.train() or model.eval()")
        for module in self.modules():
            module.training = mode
        return self

    def eval(self) -> Module:
        """Evaluation mode (`Dropout` passes its input through); returns the module."""
        return self.train(False)

    def training_flag(self) -> bool:
        """`training`, read so that a staged function that traced one mode traces again in the
        other (``model.eval()`` between two calls is seen by the second)."""
        ref, kind = weakref.ref(self), type(self).__name__

        def read() -> bool:
            module = ref()
            if module is None:
                raise StateGone(f"the {kind} module whose training flag the trace read is gone")
            return module.training
        return dispatch.current_interpreter().assume(read, f"the {kind} module's training flag")

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget every parameter's gradient (``.grad = None``, PyTorch's default), or set it to
        zeros (zeros, even where a gradient was inf or nan)."""
        for p in self.parameters():
            p.grad = None if set_to_none or p.grad is None else zeros_like(p.grad)

    # --- State --------------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Tensor]:
        """``{name: values}`` for every parameter and buffer, under each of its names (a
        parameter shared by two layers twice, as in PyTorch): copies, so a saved state dict
        stays as it was while training goes on (PyTorch's share memory with the parameters)."""
        with no_grad():
            return {name: p.detach().clone() for name, p in self._named_state().items()}

    def load_state_dict(self, state_dict: Mapping[str, Any], strict: bool = True
                        ) -> IncompatibleKeys:
        """Copy values into the parameters of the same names. Checks first, and changes nothing
        when a check fails: if `strict`, the names are the model's (none unknown, none missing),
        and every shape is equal. Values may be tensors or NumPy arrays
        (``torch_model.state_dict()`` converted with ``.numpy()``); each is cast to its
        parameter's dtype. Returns the names not loaded, as PyTorch does (with `strict`, none)."""
        if not isinstance(state_dict, Mapping):
            raise DTypeError(f"load_state_dict takes a dict of name: values, not "
                             f"{type(state_dict).__name__}", op="load_state_dict",
                             hint="model.load_state_dict(other.state_dict())")
        own = self._named_state()
        unexpected = [k for k in state_dict if k not in own]
        missing = [k for k in own if k not in state_dict]
        if strict and (unexpected or missing):
            raise TeachflowError(
                f"the state dict does not fit {type(self).__name__}: "
                + "; ".join(part for part in (
                    f"unexpected {', '.join(map(repr, unexpected))}" if unexpected else "",
                    f"missing {', '.join(map(repr, missing))}" if missing else "") if part)
                + f". The model's parameters are {', '.join(own)}", op="load_state_dict",
                hint="names follow the attributes (layer1.weight, 0.bias); strict=False loads "
                     "the names that match and skips the others")
        values = {}
        for name, data in state_dict.items():
            p = own.get(name)
            if p is None:
                continue
            value = as_tensor(np.asarray(data.numpy() if isinstance(data, Tensor) else data))
            if value.shape != p.shape:
                raise ShapeError(f"size mismatch for {name}: the state dict holds shape "
                                 f"{value.shape}, the parameter in the model has {p.shape}",
                                 op="load_state_dict",
                                 hint="the model must be built with the same layer sizes")
            values[name] = value
        with no_grad():
            for name, value in values.items():
                own[name][...] = value.astype(own[name].dtype).to(own[name].device)
        return IncompatibleKeys(missing, unexpected)

    # --- Devices ------------------------------------------------------------------------------

    def to(self, device: str) -> Module:
        """Move every parameter to `device` ("cpu" or "gpu"); returns the module. (Make the
        optimizer after moving: it holds the parameters themselves.)"""
        for module in self.modules():
            for name, value in list(vars(module).items()):
                if isinstance(value, Parameter) and value.device != device:
                    setattr(module, name, Parameter(value.to(device), value.requires_grad))
                elif name in vars(module).get("_buffer_names", ()) and value is not None:
                    setattr(module, name, value.to(device))
        return self

    # --- How it prints ----------------------------------------------------------------------

    def extra_repr(self) -> str:
        """What goes between the parentheses of this module's line (its settings)."""
        return ""

    def __repr__(self) -> str:
        """PyTorch's layout: settings inline when there is nothing else, else one line each."""
        extra = self.extra_repr()
        lines = extra.split("\n") if extra else []
        children = [f"({name}): {child!r}".replace("\n", "\n  ")
                    for name, child in self.named_children()]
        if not children and len(lines) <= 1:
            return f"{type(self).__name__}({extra})"
        return f"{type(self).__name__}(\n  " + "\n  ".join(lines + children) + "\n)"
