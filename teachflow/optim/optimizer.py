"""What every optimizer is: parameters in groups with their settings, and per parameter the
state its rule keeps.

An optimizer holds the parameters it updates, in *parameter groups*: each a dict of its
``params`` and its settings (``lr``, ``momentum``, ...), as PyTorch's ``param_groups``, so that
``opt.param_groups[0]["lr"] = 0.01`` (or a scheduler of `lr_scheduler`) changes a learning
rate. `step` reads each parameter's ``.grad`` and updates the parameter *in place*, under
`no_grad` (an update is not part of the model's computation). In place matters twice: the module
keeps the same tensor, and a staged function whose graph captured that tensor reads the new
values at its next call.

The state is made of tensors, made when the optimizer is, and updated in place too, even Adam's
step count: a staged training step (`tfl.function` around ``zero_grad / forward / backward /
step``) then traces the update rule into graph nodes that read the state and write it back at
every call. A Python int counting steps would be read once, while tracing, and frozen into the
graph as a constant: Adam's bias correction would stay at step 1 forever. A setting is a Python
number that the trace reads once too: a staged step assumes it, and traces again when it changes
(``f.retrace_reasons`` says which).

`state_dict` and `load_state_dict` save and restore both, as PyTorch's (the state by each
parameter's position, the groups with their settings), so that training resumed from a state
dict takes exactly the steps it would have taken without stopping.

The formulas are PyTorch's, as its documentation gives them (including where weight decay is
added and how Adam corrects its bias), so the numbers agree step for step.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable, Iterable, Mapping
from numbers import Real
from typing import Any

import numpy as np

from teachflow.autodiff.tape import no_grad
from teachflow.core import dispatch
from teachflow.core.errors import DTypeError, ShapeError, TeachflowError, name_scope
from teachflow.graph import StateGone
from teachflow.tensor.factories import zeros_like
from teachflow.tensor.tensor import Tensor


class Optimizer:
    """What `SGD` and `Adam` share: the parameter groups, the state, `zero_grad`, state dicts.

    `params` is an iterable of tensors, or of dicts (parameter groups: ``{"params": [...],
    "lr": 0.01}``), each setting a group does not give being the optimizer's (`defaults`)."""

    _user_state = True  # (a staged step names its state by the code's path: opt.state[0]['step'])

    def __init__(self, params: Iterable[Any], defaults: dict[str, Any]) -> None:
        kind = type(self).__name__
        if isinstance(params, Tensor):
            raise DTypeError(f"{kind} takes an iterable of parameters, not one tensor", op=kind,
                             hint=f"{kind}(model.parameters(), ...) or {kind}([w, b], ...)")
        self.defaults = {name: self._checked_setting(name, v) for name, v in defaults.items()}
        self.params: list[Tensor] = []
        self.state: list[dict[str, Tensor]] = []  # (by the parameter's position in `params`)
        self.param_groups: list[dict[str, Any]] = []
        given = list(params)
        groups = given if given and all(isinstance(g, Mapping) for g in given) else [
            {"params": given}]
        for group in groups:
            self.add_param_group(group)
        if not self.params:
            raise TeachflowError(f"{kind} got no parameters to optimize", op=kind,
                                 hint="pass model.parameters() (did the model make its layers "
                                      "in __init__?), or a list of tensors")

    def add_param_group(self, group: Mapping[str, Any]) -> None:
        """Optimize more parameters, with settings of their own (the others: `defaults`)."""
        kind = type(self).__name__
        params = group.get("params", ()) if isinstance(group, Mapping) else None
        params = [params] if isinstance(params, Tensor) else params
        if params is None or not isinstance(params, Iterable):
            raise DTypeError(f"a parameter group is a dict with the key 'params', not "
                             f"{group!r:.60}",
                             op=kind, hint=f"{kind}([{{'params': [w], 'lr': 0.1}}, ...])")
        params = list(params)
        for i, p in enumerate(params):
            self._check_parameter(p, len(self.params) + i, params[:i])
        unknown = [k for k in group if k != "params" and k not in self.defaults]
        if unknown:
            raise TeachflowError(f"{kind} has no setting {unknown[0]!r}", op=kind,
                                 hint=f"its settings: {', '.join(self.defaults)}")
        settings = {**self.defaults, **{k: self._checked_setting(k, v)
                                        for k, v in group.items() if k != "params"}}
        new_group = {"params": params, **settings}
        with no_grad():
            self.state += [self._new_state(p, new_group) for p in params]
        self.params += params
        self.param_groups.append(new_group)

    def _check_parameter(self, p: Any, i: int, before: list[Tensor]) -> None:
        kind = type(self).__name__
        if not isinstance(p, Tensor) or not p.requires_grad or p.dtype.kind != "f":
            raise DTypeError(
                f"parameter {i} is not a float tensor that requires grad "
                f"({type(p).__name__} {getattr(p, 'dtype', '')})", op=kind,
                hint="tfl.tensor(..., requires_grad=True), or a module's parameters()")
        if any(p is q for q in [*self.params, *before]):
            raise TeachflowError(f"parameter {i} is given twice (PyTorch refuses it too: two "
                                 "updates per step)", op=kind,
                                 hint="give each parameter once, in one group")

    def _checked_setting(self, name: str, value: Any) -> Any:
        """A setting (lr, momentum, ...): a number >= 0."""
        if isinstance(value, bool) or not isinstance(value, Real) or not value >= 0:
            kind = type(self).__name__
            raise TeachflowError(f"{name} must be a number >= 0, not {value!r}", op=kind,
                                 hint=f"e.g. {kind}(model.parameters(), lr=0.01)")
        return value

    # --- A step -----------------------------------------------------------------------------

    def zero_grad(self, set_to_none: bool = True) -> None:
        """Forget the gradients (``.grad = None``), so the next backward() starts afresh; or,
        not `set_to_none`, set them to zeros (zeros, even where a gradient was inf or nan)."""
        for p in self.params:
            p.grad = None if set_to_none or p.grad is None else zeros_like(p.grad)

    def step(self) -> None:
        with no_grad(), name_scope(type(self).__name__):  # (a staged step's nodes: one box)
            first = 0
            for i, group in enumerate(self.param_groups):
                params = group["params"]
                settings = self._settings(i)
                for p, state in zip(params, self.state[first:first + len(params)], strict=True):
                    if p.grad is not None:
                        self._update(p, p.grad, state, settings)
                first += len(params)

    def _settings(self, i: int) -> dict[str, Any]:
        """Group `i`'s settings, as this step reads them: a staged step assumes each one's
        value, and traces again when one changes (as it does for a module's ``training``)."""
        interpreter = dispatch.current_interpreter()
        return {name: interpreter.assume(self._setting_reader(i, name), self._setting_name(i, name))
                for name in self.param_groups[i] if name != "params"}

    def _setting_reader(self, i: int, name: str) -> Callable[[], Any]:
        ref, kind = weakref.ref(self), type(self).__name__

        def read() -> Any:
            optimizer = ref()
            if optimizer is None:
                raise StateGone(f"the {kind} optimizer whose {name} the trace read is gone")
            return optimizer.param_groups[i].get(name)
        return read

    def _setting_name(self, i: int, name: str) -> str:
        """``the SGD optimizer's lr`` (of group 1, where there are several)."""
        group = f" (group {i})" if len(self.param_groups) > 1 else ""
        return f"the {type(self).__name__} optimizer's {name}{group}"

    def _new_state(self, p: Tensor, group: dict[str, Any]) -> dict[str, Tensor]:
        """The state the rule keeps for `p` (tensors, updated in place by `_update`)."""
        return {}

    def _update(self, p: Tensor, g: Tensor, state: dict[str, Tensor],
                settings: dict[str, Any]) -> None:
        raise NotImplementedError

    # --- State dicts --------------------------------------------------------------------------

    def state_dict(self) -> dict[str, Any]:
        """The state of each parameter by its position (copies), and the groups with their
        settings and their parameters' positions (as PyTorch's)."""
        groups, first = [], 0
        for group in self.param_groups:
            count = len(group["params"])
            groups.append({**{k: v for k, v in group.items() if k != "params"},
                           "params": list(range(first, first + count))})
            first += count
        with no_grad():
            state = {i: {k: v.detach().clone() for k, v in s.items()}
                     for i, s in enumerate(self.state) if s}
        return {"state": state, "param_groups": groups}

    def load_state_dict(self, state_dict: Mapping[str, Any]) -> None:
        """Take the settings and state of `state_dict` (from `state_dict`, or PyTorch's with
        its tensors as NumPy arrays): each group's settings, and each parameter's state copied
        into this optimizer's own tensors (a staged step that read them reads the new values),
        in their dtypes. Checks first, and changes nothing when a check fails."""
        kind = type(self).__name__
        groups, state = self._checked_layout(state_dict)
        values = {}
        for key, entries in state.items():
            position = _position(key, len(self.params), kind)
            p = self.params[position]
            for name, data in entries.items():
                value = np.asarray(data.numpy() if isinstance(data, Tensor) else data)
                own = self.state[position].get(name)
                expected = p.shape if own is None else own.shape
                if value.shape != expected:
                    raise ShapeError(f"the state {name!r} of parameter {position} has shape "
                                     f"{value.shape}, and the optimizer's {expected}",
                                     op="load_state_dict",
                                     hint="load a state dict of an optimizer of the same model")
                values[position, name] = value
        settings = [{k: self._checked_setting(k, v) if k in self.defaults else v
                     for k, v in saved.items() if k != "params"} for saved in groups]
        for group, saved_settings in zip(self.param_groups, settings, strict=True):
            group.update(saved_settings)
        with no_grad():
            for (position, name), value in values.items():
                own = self.state[position].get(name)
                if own is None:  # (a momentum the optimizer did not have when it was made)
                    p = self.params[position]
                    self.state[position][name] = Tensor(value.astype(p.dtype), device=p.device)
                else:
                    own[...] = Tensor(value.astype(own.dtype), device=own.device)

    def _checked_layout(self, state_dict: Any) -> tuple[list, Mapping]:
        """The groups and the state of `state_dict`, which must have this optimizer's
        groups, each with as many parameters."""
        kind = type(self).__name__
        if not isinstance(state_dict, Mapping) or not {"state", "param_groups"} <= set(state_dict):
            raise DTypeError(f"load_state_dict takes a dict with 'state' and 'param_groups', not "
                             f"{type(state_dict).__name__}", op="load_state_dict",
                             hint=f"opt.load_state_dict(saved) with saved = {kind.lower()}"
                                  ".state_dict()")
        groups, state = list(state_dict["param_groups"]), state_dict["state"]
        theirs = [len(g.get("params", ())) if isinstance(g, Mapping) else None for g in groups]
        ours = [len(g["params"]) for g in self.param_groups]
        if theirs != ours or not isinstance(state, Mapping):
            raise TeachflowError(f"the state dict's parameter groups hold {theirs} parameters, "
                                 f"this {kind}'s {ours}", op="load_state_dict",
                                 hint="load a state dict of an optimizer made for the same "
                                      "parameters, in the same groups")
        return groups, state

    def __repr__(self) -> str:
        settings = ", ".join(f"{k}={v}" for k, v in self.defaults.items())
        return f"{type(self).__name__}({len(self.params)} parameters, {settings})"


def _position(key: Any, count: int, kind: str) -> int:
    """A state dict's key for a parameter: its position (an int, or an int as a string, as JSON
    gives it back)."""
    position = int(key) if isinstance(key, str) and key.isdigit() else key
    if isinstance(position, bool) or not isinstance(position, int | np.integer) \
            or not 0 <= position < count:
        raise TeachflowError(f"the state dict has state for parameter {key!r}, and the "
                             f"{kind} has parameters 0 to {count - 1}", op="load_state_dict",
                             hint="load a state dict of an optimizer made for the same parameters")
    return int(position)
