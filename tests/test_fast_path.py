"""The fast path of a staged call is an optional layer: written by the executor's own code
generator, and leaving what the plain route leaves.

Every test of tests/test_function.py, test_staged_state.py and test_guards.py runs by both
routes (conftest.py's ``each_route``). Here, the programs of those files whose state changes
between calls run twice from the same seed, once with the fast path and once by the plain route
alone, and every call's results, the state it wrote back, and each decision to trace again are
compared, bit for bit."""

from __future__ import annotations

from collections.abc import Callable
from unittest import mock

import numpy as np
import pytest

import teachflow as tfl
import teachflow.staged.function as function_module
from teachflow.staged.fast_path import NOT_TAKEN, FastCall


def observed(*things: object) -> list:
    """What a program shows after a call, as plain data (arrays copied)."""
    out = []
    for x in things:
        if isinstance(x, tfl.Tensor):
            out.append(("tensor", x.numpy().copy(), x.dtype, x.requires_grad))
        elif isinstance(x, list | tuple):
            out.append(observed(*x))
        elif isinstance(x, dict):
            out.append({k: observed(v) for k, v in x.items()})
        else:
            out.append(x)
    return out


def assert_same(a: object, b: object, where: str = "") -> None:
    if isinstance(a, np.ndarray):
        assert isinstance(b, np.ndarray) and a.dtype == b.dtype, where
        np.testing.assert_array_equal(a, b, err_msg=where)
    elif isinstance(a, list | tuple):
        assert type(a) is type(b) and len(a) == len(b), (where, a, b)
        for k, (x, y) in enumerate(zip(a, b, strict=True)):
            assert_same(x, y, f"{where}[{k}]")
    elif isinstance(a, dict):
        assert a.keys() == b.keys(), where
        for k in a:
            assert_same(a[k], b[k], f"{where}[{k!r}]")
    else:
        assert a == b, (where, a, b)


def both_routes(program: Callable[[], list]) -> None:
    """Run `program` from seed 0 with the fast path, then again by the plain route alone; each
    returns what it saw after every call. They must agree, and the fast path must have run."""
    taken = []
    original = function_module.Function._fast_call

    def counting(self: function_module.Function, args: tuple) -> object:
        try:
            result = original(self, args)
        except Exception:  # (the call ran, and failed)
            taken.append(True)
            raise
        taken.append(result is not NOT_TAKEN)
        return result

    seen = {}
    for fast in (True, False):
        tfl.manual_seed(0)
        with mock.patch.object(function_module, "TAKE_FAST_PATH", fast), \
                mock.patch.object(function_module.Function, "_fast_call", counting):
            seen[fast] = program()
    assert_same(seen[True], seen[False])
    assert any(taken), "the fast path never ran"


def _mlp_step() -> tuple[tfl.nn.Module, tfl.optim.SGD, tfl.Function]:
    """A model, an SGD step with momentum staged around it: the training step of issue 11."""
    model = tfl.nn.Sequential(tfl.nn.Linear(6, 5), tfl.nn.ReLU(), tfl.nn.Linear(5, 3))
    opt = tfl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = tfl.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, opt, tfl.function(step)


def _batch(seed: int) -> tuple[tfl.Tensor, tfl.Tensor]:
    rng = np.random.default_rng(seed)
    return tfl.tensor(rng.normal(size=(4, 6))), tfl.tensor(rng.integers(0, 3, 4))


def test_a_training_step_leaves_the_same_parameters_gradients_and_buffers() -> None:
    def program() -> list:
        model, opt, step = _mlp_step()
        x, y = _batch(0)
        seen = []
        for k in range(5):
            if k == 3:  # a weight rebound: another trace, with its reason
                model[0].weight = tfl.nn.Parameter(np.full((5, 6), 0.1, np.float32))
            loss = step(x, y)
            seen.append(observed(loss, [(p, p.grad) for p in model.parameters()],
                                 [s["momentum_buffer"] for s in opt.state],
                                 step.trace_count, step.retrace_reasons))
        return seen

    both_routes(program)


def test_gradients_that_accumulate_or_are_cleared_retrace_alike() -> None:
    """A .grad None at one call and not at the next, cleared inside, set outside: the guards
    decide alike, and the gradients written back are the same."""
    def program() -> list:
        w = tfl.zeros(3, requires_grad=True)

        @tfl.function
        def accumulate(x):
            ((x * w - 1.0) ** 2).sum().backward()
            return w.grad * 1.0

        @tfl.function
        def cleared(x):
            w.grad = None
            return (x * w).sum()

        x, seen = tfl.tensor([1.0, 2.0, 3.0]), []
        for k in range(4):
            seen.append(observed(accumulate(x), w.grad, accumulate.trace_count))
            if k == 2:
                seen.append(observed(cleared(x), w.grad, cleared.trace_count))
        w.grad = tfl.ones(3)
        seen.append(observed(accumulate(x), w.grad, accumulate.retrace_reasons))
        return seen

    both_routes(program)


def test_rebound_aliased_and_updated_state_is_read_and_written_alike() -> None:
    """A global rebound between calls, one tensor passed twice, an argument updated in place,
    a captured tensor returned, results in a structure."""
    def program() -> list:
        scale = {"w": tfl.tensor([2.0, 3.0])}

        @tfl.function
        def f(x, y):
            x += y * scale["w"]
            return {"sum": (x * y).sum(), "w": scale["w"], "pair": (x, y * 1.0)}

        a, b, seen = tfl.tensor([1.0, 1.0]), tfl.tensor([0.5, 0.25]), []
        for k in range(5):
            if k == 2:
                scale["w"] = tfl.tensor([-1.0, 4.0])  # rebound: read anew, traced again
            args = (a, a) if k == 4 else (a, b)  # one tensor under two names
            seen.append(observed(f(*args), a, b, f.trace_count, f.retrace_reasons))
        return seen

    both_routes(program)


def test_a_call_on_the_tape_and_a_training_flag_take_the_plain_route_alike() -> None:
    """A call someone may differentiate runs op by op on the tape (the fast path hands it over);
    eval() between calls traces again; gradients reach the captured weight alike."""
    def program() -> list:
        w = tfl.ones(3, requires_grad=True)
        drop = tfl.nn.Dropout(0.5)
        scaled = tfl.function(lambda v: drop(v * w).sum())
        v, seen = tfl.ones(3), []
        for k in range(4):
            if k == 2:
                drop.eval()
            out = scaled(v)
            out.backward()
            with tfl.no_grad():
                quiet = scaled(v)
            seen.append(observed(out, quiet, w.grad, scaled.trace_count,
                                 scaled.retrace_reasons))
        return seen

    both_routes(program)


def test_a_failing_call_explains_itself_alike() -> None:
    def program() -> list:
        f = tfl.function(lambda x, y: (x ** y).sum())
        seen = [observed(f(tfl.tensor([2, 3]), tfl.tensor([1, 2])))]
        for _ in range(2):
            with pytest.raises(tfl.TeachflowError) as err:
                f(tfl.tensor([2, 3]), tfl.tensor([1, -2]))  # NumPy refuses: the plain route says
            seen.append(err.value.message)
        return seen

    both_routes(program)


def test_the_fast_path_writes_the_executors_own_lines_in_its_namespace() -> None:
    """One code generator: the whole call holds the executor's lines, as the executor has them,
    and runs in the executor's namespace (its kernels and constants, made once)."""
    _, _, step = _mlp_step()
    x, y = _batch(1)
    step(x, y)
    concrete = step.concrete_functions[0]
    fast = step.fast_call_for(x, y)
    assert isinstance(fast, FastCall) and fast.concrete is concrete
    source = fast.source
    assert source.startswith("def call(arguments):")
    assert "._take_array(" in source and "  # model.0.weight <- output" in source
    executor_lines = concrete.source.splitlines()[1:-1]  # between its def and its return
    whole = [line.removeprefix("    ") for line in source.splitlines()]
    start = whole.index(executor_lines[0])
    assert whole[start:start + len(executor_lines)] == executor_lines
    assert fast.call.__globals__ is concrete.executor.fn.__globals__
    compile(source, "<call>", "exec")
    assert step.fast_call_for(x, 1.0) is None  # not tensors only: the plain route only


def test_anything_unusual_hands_the_call_to_the_plain_route_before_it_changes_anything() -> None:
    """A guard that fails, a call on the tape: `NOT_TAKEN`, nothing written back; the call is
    what the plain route makes it: a retrace with its reason, or op by op."""
    model, _, step = _mlp_step()
    x, y = _batch(2)
    step(x, y)
    fast = step.fast_call_for(x, y)
    weight = model[0].weight
    model[0].weight = tfl.nn.Parameter(np.zeros((5, 6), np.float32))  # names another tensor
    before = [p.numpy().copy() for p in model.parameters()]
    assert fast.call((x, y)) is NOT_TAKEN
    for p, b in zip(model.parameters(), before, strict=True):
        np.testing.assert_array_equal(p.numpy(), b)
    assert weight is not model[0].weight
    step(x, y)
    assert step.trace_count == 2
    assert step.retrace_reasons[-1].startswith("model.0.weight now names another tensor")

    w = tfl.ones(3, requires_grad=True)
    scaled = tfl.function(lambda v: (v * w).sum())  # differentiable: on the tape, op by op
    v = tfl.ones(3)
    scaled(v)
    assert scaled.fast_call_for(v).call((v,)) is NOT_TAKEN
    scaled(v).backward()
    np.testing.assert_array_equal(w.grad.numpy(), [1.0, 1.0, 1.0])
    with tfl.no_grad():  # not recorded: the fast path
        assert scaled.fast_call_for(v).call((v,)) is not NOT_TAKEN


def test_with_the_fast_path_off_no_call_is_written(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(function_module, "TAKE_FAST_PATH", False)
    with mock.patch.object(FastCall, "write", side_effect=AssertionError("written")):
        _, _, step = _mlp_step()
        x, y = _batch(3)
        for _ in range(3):
            step(x, y)
    assert step.trace_count == 1
