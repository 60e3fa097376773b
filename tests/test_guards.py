"""The guards of a trace, compiled into one generated function, say what checking each guard
alone says: after every kind of change to the state a trace read, and after none."""

from __future__ import annotations

import gc
from collections.abc import Callable

import numpy as np
import pytest

import teachflow as tfl
from teachflow.staged.concrete import ConcreteFunction

# Each test runs by both routes of a staged call: the fast path, and the plain route alone.
pytestmark = pytest.mark.usefixtures("each_route")


def one_by_one(concrete: ConcreteFunction, tensors: list) -> bool:
    """The guards asked one at a time, as `Guard.holds` answers (and every capture alive)."""
    return (all(v.data.alive for v in concrete.traced.graph.captures)
            and all(g.holds(tensors) for g in concrete.guards))


class Holder:
    pass


def _model_step() -> tuple[Callable, list, tfl.nn.Module]:
    """A staged SGD step on a module: binding, leaf, aliases, requires_grad and assumption
    (Dropout's training flag) guards."""
    model = tfl.nn.Sequential(tfl.nn.Linear(3, 4), tfl.nn.ReLU(), tfl.nn.Linear(4, 2),
                              tfl.nn.Dropout(0.5))
    opt = tfl.optim.SGD(model.parameters(), lr=0.1)

    def step(x):
        opt.zero_grad()
        loss = (model(x) ** 2).mean()
        loss.backward()
        opt.step()
        return loss

    return step, [tfl.ones(5, 3)], model


CHANGES: dict[str, Callable] = {
    "nothing": lambda model, args: None,
    "a weight rebound": lambda model, args: setattr(model[0], "weight",
                                                    tfl.nn.Parameter(tfl.zeros(4, 3))),
    "a layer replaced": lambda model, args: model.__setitem__(2, tfl.nn.Linear(4, 2))
    if hasattr(type(model), "__setitem__") else setattr(model, "2", tfl.nn.Linear(4, 2)),
    "a weight that no longer requires grad": lambda model, args: setattr(
        model[0].weight, "requires_grad", False),
    "the argument requires grad": lambda model, args: setattr(args[0], "requires_grad", True),
    "training mode off": lambda model, args: model.eval(),
}


@pytest.mark.parametrize("change", list(CHANGES))
def test_compiled_guards_agree_with_each_guard_after_a_change_to_a_model(change: str) -> None:
    step, args, model = _model_step()
    staged = tfl.function(step)
    staged(*args)
    (concrete,) = staged.concrete_functions
    assert concrete.guards_hold(args) and one_by_one(concrete, args)
    CHANGES[change](model, args)
    assert concrete.guards_hold(args) == one_by_one(concrete, args)
    assert concrete.guards_hold(args) == (change == "nothing")


def test_compiled_guards_see_a_captured_tensor_gone_and_a_name_rebound() -> None:
    holder = Holder()
    holder.w = tfl.ones(3)

    def f(x):
        return x * holder.w

    staged = tfl.function(f)
    x = tfl.ones(3)
    staged(x)
    (concrete,) = staged.concrete_functions
    holder.w = tfl.full((3,), 2.0)  # rebound: the old tensor is dropped, the name names another
    gc.collect()
    assert concrete.guards_hold([x]) is False and one_by_one(concrete, [x]) is False
    np.testing.assert_array_equal(staged(x).numpy(), [2.0, 2.0, 2.0])
    del holder.w  # a link on the way is gone: no guard holds, and nothing raises
    assert all(c.guards_hold([x]) is False for c in staged.concrete_functions)


def test_compiled_guards_see_a_grad_appear_and_tensors_become_one() -> None:
    w = tfl.ones(3, requires_grad=True)

    def f(x, y):
        loss = (x * y * w).sum()
        loss.backward()
        return loss

    staged = tfl.function(f)
    x, y = tfl.ones(3), tfl.full((3,), 2.0)
    staged(x, y)
    concrete = staged.concrete_functions[0]
    w.grad = None
    assert concrete.guards_hold([x, y]) and one_by_one(concrete, [x, y])
    w.grad = tfl.ones(3)  # backward() now adds to a gradient: another trace
    assert concrete.guards_hold([x, y]) is False and one_by_one(concrete, [x, y]) is False
    w.grad = None
    assert concrete.guards_hold([x, x]) == one_by_one(concrete, [x, x])


def test_the_guard_source_reads_as_the_assumptions_it_checks() -> None:
    step, args, _ = _model_step()
    staged = tfl.function(step)
    staged(*args)
    source = staged.concrete_functions[0].guard_source
    assert source.startswith("def guards_hold(arguments):")
    for name in ("0.weight", "0.bias", "2.weight", "2.bias"):
        assert f"# model.{name} still names the tensor traced" in source
        assert f"# leaf: model.{name}" in source
    assert "'cell_contents'), '0'), 'weight') is not t0" in source
    assert "# requires_grad: x" in source
    compile(source, "<guards>", "exec")
