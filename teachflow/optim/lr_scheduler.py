"""``tfl.optim.lr_scheduler``: a learning rate that changes from epoch to epoch, as PyTorch's.

A scheduler holds an optimizer and sets the ``lr`` of each of its parameter groups. It starts
at epoch 0 with the groups' learning rates as they were (kept as ``initial_lr`` in each group);
each ``scheduler.step()``, called once per epoch after the epoch's ``optimizer.step()`` calls,
moves to the next epoch and sets the rate for it. The rules are PyTorch's formulas, written as
PyTorch writes them: from the rate the group has now (*chainable*: a rate changed by hand, or
by another scheduler, carries on from where it is), so the numbers are PyTorch's.

A staged training step reads the learning rate as a Python number, so each new rate traces the
step again (`tfl.optim.Optimizer` explains why): a `StepLR` changes it rarely; a
`CosineAnnealingLR` at every epoch.
"""

from __future__ import annotations

import math
from typing import Any

from teachflow.core.errors import DTypeError, TeachflowError
from teachflow.optim.optimizer import Optimizer


class LRScheduler:
    """What the schedulers share: the epoch count (`last_epoch`), the groups' first rates
    (`base_lrs`), `step`, `get_last_lr` and state dicts. A scheduler says how the rate changes
    in `get_lr`."""

    def __init__(self, optimizer: Optimizer, last_epoch: int = -1) -> None:
        kind = type(self).__name__
        if not isinstance(optimizer, Optimizer):
            raise DTypeError(f"{kind} takes an optimizer, not {type(optimizer).__name__}",
                             op=kind, hint=f"{kind}(tfl.optim.SGD(model.parameters(), lr=0.1), "
                                           "...)")
        _check_int(last_epoch, "last_epoch", kind, least=-1)
        if last_epoch == -1:
            for group in optimizer.param_groups:
                group.setdefault("initial_lr", group["lr"])
        elif any("initial_lr" not in group for group in optimizer.param_groups):
            raise TeachflowError(f"last_epoch={last_epoch} resumes a schedule, and the optimizer "
                                 "has no 'initial_lr' (set by a scheduler that started it)",
                                 op=kind, hint="start with last_epoch=-1 (the default), or load "
                                               "the optimizer's state dict first")
        self.optimizer = optimizer
        self.base_lrs = [group["initial_lr"] for group in optimizer.param_groups]
        self.last_epoch = last_epoch
        self._step_count = 0
        self.step()  # (epoch 0: the rates as they were; PyTorch's scheduler steps once too)

    def get_lr(self) -> list[float]:
        """The rate of each group for epoch `last_epoch`, from the rates the groups have now."""
        raise NotImplementedError

    def step(self) -> None:
        """Move to the next epoch and set each group's learning rate for it."""
        self._step_count += 1
        self.last_epoch += 1
        for group, lr in zip(self.optimizer.param_groups, self.get_lr(), strict=True):
            group["lr"] = lr
        self._last_lr = [group["lr"] for group in self.optimizer.param_groups]

    def get_last_lr(self) -> list[float]:
        """The learning rate of each group, as the last `step` set it."""
        return list(self._last_lr)

    def state_dict(self) -> dict[str, Any]:
        """Everything but the optimizer (which has a state dict of its own), as PyTorch's."""
        return {k: v for k, v in vars(self).items() if k != "optimizer"}

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        """Take the epoch, the base rates and the settings of `state_dict` (from
        `state_dict`); the optimizer's rates come with the optimizer's own state dict."""
        if not isinstance(state_dict, dict) or set(state_dict) != set(self.state_dict()):
            kind = type(self).__name__
            held = sorted(state_dict) if isinstance(state_dict, dict) else type(state_dict)
            raise TeachflowError(f"this is not the state dict of a {kind}: it holds {held}",
                                 op="load_state_dict",
                                 hint=f"load what a {kind}'s state_dict() returned")
        vars(self).update(state_dict)

    def __repr__(self) -> str:
        return f"{type(self).__name__}(last_epoch={self.last_epoch}, lr={self._last_lr})"


class StepLR(LRScheduler):
    """The rate times `gamma` every `step_size` epochs: ``base_lr * gamma ** (epoch //
    step_size)``."""

    def __init__(self, optimizer: Optimizer, step_size: int, gamma: float = 0.1,
                 last_epoch: int = -1) -> None:
        _check_int(step_size, "step_size", "StepLR", least=1)
        _check_number(gamma, "gamma", "StepLR")
        self.step_size, self.gamma = step_size, gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        rates = [group["lr"] for group in self.optimizer.param_groups]
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return rates
        return [lr * self.gamma for lr in rates]


class CosineAnnealingLR(LRScheduler):
    """From the base rate down to `eta_min` along half a cosine, over `T_max` epochs (and back
    up over the next `T_max`, as PyTorch's):

        lr(t) = eta_min + (base_lr - eta_min) * (1 + cos(pi * t / T_max)) / 2

    computed, as PyTorch does, from the rate of the epoch before: ``lr(t) = eta_min + (lr(t-1) -
    eta_min) * (1 + cos(pi t / T_max)) / (1 + cos(pi (t-1) / T_max))``, with a step of its own
    where that ratio would divide by zero (just after each minimum)."""

    def __init__(self, optimizer: Optimizer, T_max: int, eta_min: float = 0.0,
                 last_epoch: int = -1) -> None:
        _check_int(T_max, "T_max", "CosineAnnealingLR", least=1)
        _check_number(eta_min, "eta_min", "CosineAnnealingLR")
        self.T_max, self.eta_min = T_max, eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self) -> list[float]:
        t, period, low = self.last_epoch, self.T_max, self.eta_min
        groups = self.optimizer.param_groups
        if t == 0:
            return [group["lr"] for group in groups]
        if self._step_count == 1:  # (resumed at epoch t > 0: no rate before to start from)
            return [low + (base - low) * (1 + math.cos(t * math.pi / period)) / 2
                    for base in self.base_lrs]
        if (t - 1 - period) % (2 * period) == 0:  # just past a minimum: cos(...) + 1 was 0
            return [group["lr"] + (base - low) * (1 - math.cos(math.pi / period)) / 2
                    for base, group in zip(self.base_lrs, groups, strict=True)]
        ratio = (1 + math.cos(math.pi * t / period)) / (1 + math.cos(math.pi * (t - 1) / period))
        return [low + (group["lr"] - low) * ratio for group in groups]


def _check_int(value: Any, name: str, kind: str, least: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < least:
        raise TeachflowError(f"{name} must be an int >= {least}, not {value!r}", op=kind,
                             hint=f"e.g. {kind}(optimizer, 10)")


def _check_number(value: Any, name: str, kind: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int | float) or not value >= 0:
        raise TeachflowError(f"{name} must be a number >= 0, not {value!r}", op=kind,
                             hint=f"e.g. {kind}(optimizer, 10, {name}=0.1)")


__all__ = ["CosineAnnealingLR", "LRScheduler", "StepLR"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
