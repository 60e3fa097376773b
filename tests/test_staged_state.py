"""Staged functions that change state mean what they mean eagerly.

A traced function may update tensors that outlive the call (``p -= lr * g`` on an argument or a
captured weight, ``t[i] = v``), fill ``.grad`` with ``backward()``, or clear it. The graph computes
the new values as extra outputs and the call writes them back (functionalisation, as in
``torch.compile``). Every test runs the same Python eagerly and staged and compares the state
afterwards, step for step.
"""

from __future__ import annotations

import collections
import copy
import dataclasses
import functools
import gc
import inspect
import os
import sys
import types
import warnings
import weakref
from unittest import mock

import numpy as np
import pytest

import teachflow as tfl
from teachflow.graph import Value

HERE = os.path.basename(__file__)

# Each test runs by both routes of a staged call: the fast path, and the plain route alone.
pytestmark = pytest.mark.usefixtures("each_route")


def values(*tensors: tfl.Tensor | None) -> list:
    return [None if t is None else t.numpy().copy() for t in tensors]


def assert_same_state(eager: list, staged: list) -> None:
    assert len(eager) == len(staged)
    for e, s in zip(eager, staged, strict=True):
        assert (e is None) == (s is None), (e, s)
        if e is not None:
            np.testing.assert_allclose(s, e, rtol=1e-6, atol=1e-7)


def twice(step, make_state, calls: int = 3, **options):
    """Run `step` eagerly and staged on fresh copies of the same state, `calls` times each;
    return the (eager, staged) outputs and states after every call, and the staged Function."""
    staged = tfl.function(step, **options)
    runs = []
    for fn in (step, staged):
        state = make_state()
        history = []
        for i in range(calls):
            out = fn(*state, i * 1.0) if _takes_step(step) else fn(*state)
            history.append((values(*_flat(out)), [values(t, t.grad) for t in state]))
        runs.append(history)
    return runs[0], runs[1], staged


def _takes_step(fn) -> bool:
    return "i" in inspect.signature(fn).parameters


def _flat(out) -> list:
    return list(out) if isinstance(out, tuple | list) else [out]


def assert_runs_agree(eager, staged) -> None:
    for (e_out, e_state), (s_out, s_state) in zip(eager, staged, strict=True):
        assert_same_state(e_out, s_out)
        for e, s in zip(e_state, s_state, strict=True):
            assert_same_state(e, s)


# --- In-place updates of arguments and captured tensors -----------------------------------------


def test_an_in_place_update_of_an_argument_is_written_back() -> None:
    def step(p, g):
        p -= 0.1 * g
        p *= 2.0
        return p.sum()

    eager, staged, f = twice(step, lambda: (tfl.tensor([1.0, 2.0, 3.0]), tfl.ones(3)))
    assert_runs_agree(eager, staged)
    assert f.trace_count == 1


def test_an_in_place_update_of_a_captured_tensor_is_written_back_and_stays_usable() -> None:
    w = tfl.tensor([1.0, 2.0, 3.0])

    @tfl.function
    def decay(g):
        w.__isub__(0.5 * g)  # `w -= ...` on a global, as a model's weight is updated
        return (w * w).sum()

    out = decay(tfl.ones(3))
    np.testing.assert_allclose(w.numpy(), [0.5, 1.5, 2.5])
    np.testing.assert_allclose(out.numpy(), 0.25 + 2.25 + 6.25)
    decay(tfl.ones(3))
    np.testing.assert_allclose(w.numpy(), [0.0, 1.0, 2.0])
    np.testing.assert_allclose((w + 1).numpy(), [1.0, 2.0, 3.0])  # still an eager tensor
    assert "traced" not in repr(w)
    assert decay.trace_count == 1


def test_a_method_that_updates_self_w_updates_the_model() -> None:
    class Model:
        def __init__(self):
            self.w = tfl.tensor([[1.0, 0.0], [0.0, 1.0]])

        @tfl.function
        def shrink(self, x):
            y = x @ self.w
            self.w *= 0.5
            return y

    eager_model, staged_model = Model(), Model()
    x = tfl.tensor([[1.0, 2.0]])
    for _ in range(3):
        e = Model.shrink.python_function(eager_model, x)
        s = staged_model.shrink(x)
        np.testing.assert_allclose(s.numpy(), e.numpy())
        np.testing.assert_allclose(staged_model.w.numpy(), eager_model.w.numpy())
    assert staged_model.shrink.trace_count == 1


def test_setitem_on_traced_arguments_captures_and_intermediates() -> None:
    def make(buffer):
        def fill(x):
            h = x * 2
            h[0] = -1.0  # an intermediate: only this trace sees it
            x[1:3] = h[2:]  # an argument: written back
            buffer[0] = x.sum()  # a captured tensor: written back
            buffer[1:] += h[1:]
            return h

        return fill

    eager_buffer, staged_buffer = tfl.zeros(4), tfl.zeros(4)
    eager, staged = make(eager_buffer), tfl.function(make(staged_buffer))
    eager_x, staged_x = tfl.tensor([1.0, 2.0, 3.0, 4.0]), tfl.tensor([1.0, 2.0, 3.0, 4.0])
    for _ in range(3):
        np.testing.assert_allclose(staged(staged_x).numpy(), eager(eager_x).numpy())
        np.testing.assert_allclose(staged_x.numpy(), eager_x.numpy())
        np.testing.assert_allclose(staged_buffer.numpy(), eager_buffer.numpy())
    assert staged.trace_count == 1
    assert eager_buffer.numpy()[0] != 0


def test_setitem_is_differentiable_except_into_a_leaf() -> None:
    def f(x, v):
        h = x * 1.0
        h[1:] = v * 3.0
        return (h * h).sum()

    x, v = tfl.tensor([1.0, 2.0, 3.0]), tfl.tensor([4.0, 5.0])
    dx, dv = tfl.grad(f, argnums=(0, 1))(x, v)
    np.testing.assert_allclose(dx.numpy(), [2.0, 0.0, 0.0])  # overwritten: no gradient
    np.testing.assert_allclose(dv.numpy(), [72.0, 90.0])  # d/dv (3v)^2 = 18 v
    sdx, sdv = tfl.function(tfl.grad(f, argnums=(0, 1)))(x, v)
    np.testing.assert_allclose(sdx.numpy(), dx.numpy())
    np.testing.assert_allclose(sdv.numpy(), dv.numpy())


def test_the_text_form_shows_what_the_call_writes_back() -> None:
    w = tfl.tensor([1.0, 2.0])

    def step(p, g):
        p -= 0.1 * g
        w.__imul__(0.9)
        return (p * w).sum()

    graph = tfl.function(step).get_concrete_function(tfl.ones(2), tfl.ones(2)).graph
    text = str(graph)
    assert "%w = capture f32[2]" in text
    lines = text.splitlines()
    ret = next(i for i, line in enumerate(lines) if line.strip().startswith("return"))
    written = [line.strip() for line in lines[ret + 1:-1]]
    assert [line.split(" <- ")[0] for line in written] == ["%p", "%w"], text
    assert graph.results == [graph.outputs[0]] and len(graph.outputs) == 3
    nxg = graph.to_networkx()
    assert sorted(name for name, _ in nxg.graph["updates"]) == ["p", "w"]
    # (the node that makes w's new value says so, also when it is a kernel with several results)
    assert any("w" in d["updates"] for _, d in nxg.nodes(data=True))


def test_a_compilation_writes_back_too() -> None:
    def step(p, g):
        p -= g
        return p * 1.0

    p = tfl.tensor([5.0, 6.0])
    compiled = tfl.compile(step, p, tfl.ones(2))
    np.testing.assert_allclose(p.numpy(), [5.0, 6.0])  # compiling runs nothing
    compiled(p, tfl.ones(2))
    compiled(p, tfl.ones(2))
    np.testing.assert_allclose(p.numpy(), [3.0, 4.0])


def test_a_tensor_made_inside_is_fresh_at_every_call_as_eagerly() -> None:
    def count(x):
        acc = tfl.tensor([0.0, 0.0])  # made from data inside: a constant of the program
        acc += x
        return acc

    staged = tfl.function(count)
    for _ in range(3):
        np.testing.assert_allclose(staged(tfl.ones(2)).numpy(), [1.0, 1.0])
    assert not staged.concrete_functions[0].graph.updates


@pytest.mark.parametrize("names", ["w, w", "w, other", "other, w"])
def test_one_tensor_under_two_names_is_one_tensor_as_eagerly(names: str) -> None:
    def run(stage) -> list:
        w = tfl.tensor([1.0, 2.0], requires_grad=True)
        other = tfl.tensor([5.0, 5.0])

        def both(a, b):  # and w is captured: it may be a or b too
            with tfl.no_grad():
                a += 1.0  # if b is a, b sees this update
            loss = (a * b).sum() + (w * w).sum()
            loss.backward()
            return b * 1.0

        f = stage(both)
        a, b = {"w, w": (w, w), "w, other": (w, other), "other, w": (other, w)}[names]
        return [(f(a, b).numpy(), w.numpy().copy(), w.grad.numpy().copy()) for _ in range(3)]

    for eager, staged in zip(run(lambda f: f), run(tfl.function), strict=True):
        for e, s in zip(eager, staged, strict=True):
            np.testing.assert_allclose(s, e)



def test_updating_an_eager_tensor_while_building_a_graph_by_hand_is_refused() -> None:
    w = tfl.ones(2)
    with pytest.raises(tfl.TraceError, match="cannot be honoured") as err, tfl.Graph():
        x = tfl.placeholder((2,))
        w -= x
    assert err.value.location.lineno == inspect.currentframe().f_lineno - 1
    np.testing.assert_allclose(w.numpy(), [1.0, 1.0])  # not corrupted
    with tfl.Graph() as g:  # updating a tensor of the graph itself is fine: a new value
        x = tfl.placeholder((2,))
        y = x * 1.0
        y += 1.0
    np.testing.assert_allclose(tfl.Session(g).run(y, feed={x: np.ones(2)}), [2.0, 2.0])


def test_gradients_inside_a_staged_function_read_the_captured_weight_at_each_call() -> None:
    w = tfl.tensor([2.0, 3.0])
    grad_x = tfl.function(tfl.grad(lambda x: (x * w * x).sum()))
    x = tfl.ones(2)
    np.testing.assert_allclose(grad_x(x).numpy(), [4.0, 6.0])
    with tfl.no_grad():
        w -= 1.0  # eagerly, between calls
    np.testing.assert_allclose(grad_x(x).numpy(), [2.0, 4.0])  # the backward sees the new w


# --- backward() inside a staged function ---------------------------------------------------------


def test_backward_inside_writes_the_grad_of_captured_parameters_as_eagerly() -> None:
    def make():
        return (tfl.tensor([1.0, -2.0], requires_grad=True), tfl.tensor([0.5], requires_grad=True))

    def loss_and_backward(w, b):
        loss = ((w * 3.0 + b) ** 2).sum()
        loss.backward()
        return loss

    # The .grad of arguments that require grad accumulates over the calls, as eagerly.
    eager, staged, f = twice(loss_and_backward, make)
    assert_runs_agree(eager, staged)
    assert f.trace_count == 2  # the first call read .grad = None, the second a gradient
    assert ".grad was None when traced" in f.retrace_reasons[0]


def test_a_whole_training_step_staged_gives_eager_losses_and_parameters() -> None:
    rng = np.random.default_rng(0)
    data = tfl.tensor(rng.standard_normal((16, 3)))
    target = data @ tfl.tensor([[1.0], [-2.0], [0.5]]) + 0.3

    class Params:
        def __init__(self):
            self.w = tfl.zeros(3, 1, requires_grad=True)
            self.b = tfl.zeros(1, requires_grad=True)

    def run(staged: bool) -> tuple[list, Params]:
        params = Params()

        def step(x, y):
            for p in (params.w, params.b):  # zero_grad
                p.grad = None
            loss = ((x @ params.w + params.b - y) ** 2).mean()
            loss.backward()
            with tfl.no_grad():
                for p in (params.w, params.b):
                    p -= 0.1 * p.grad
            return loss

        fn = tfl.function(step) if staged else step
        losses = [fn(data, target).item() for _ in range(30)]
        if staged:
            assert fn.trace_count == 1
            text = str(fn.concrete_functions[0].graph)
            assert "%params.w <- " in text and "%params.w.grad <- " in text
        return losses, params

    (eager_losses, eager_params), (staged_losses, staged_params) = run(False), run(True)
    np.testing.assert_allclose(staged_losses, eager_losses, rtol=1e-5)
    assert staged_losses[-1] < 0.05 * staged_losses[0]
    for name in ("w", "b"):
        e, s = getattr(eager_params, name), getattr(staged_params, name)
        np.testing.assert_allclose(s.numpy(), e.numpy(), rtol=1e-5)
        np.testing.assert_allclose(s.grad.numpy(), e.grad.numpy(), rtol=1e-5)
        assert s.is_leaf and s.requires_grad and s.grad.grad_fn is None


def test_backward_inside_accumulates_into_a_grad_that_holds_a_gradient() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)

    @tfl.function
    def accumulate(x):
        loss = (w * x).sum()
        loss.backward()
        return loss

    for i in range(1, 4):
        accumulate(tfl.ones(2))
        np.testing.assert_allclose(w.grad.numpy(), [float(i), float(i)])
    assert accumulate.trace_count == 2  # .grad None, then a gradient: two concrete functions
    w.grad = None
    accumulate(tfl.ones(2))
    np.testing.assert_allclose(w.grad.numpy(), [1.0, 1.0])
    assert accumulate.trace_count == 2


def test_which_tensors_require_grad_is_part_of_what_a_backward_trace_assumes() -> None:
    @tfl.function
    def f(x):
        loss = (x * x).sum()
        loss.backward()
        return loss

    with pytest.raises(tfl.AutodiffError):
        f(tfl.ones(2))  # nothing requires grad: as eagerly
    x = tfl.ones(2, requires_grad=True)
    f(x)
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 2.0])


def test_clearing_grad_inside_a_staged_function_is_written_back() -> None:
    w = tfl.tensor([1.0], requires_grad=True)
    w.grad = tfl.tensor([5.0])

    @tfl.function
    def clear(x):
        w.grad = None
        return x + 1.0

    clear(tfl.ones(1))
    assert w.grad is None
    w.grad = tfl.tensor([7.0])
    clear(tfl.ones(1))
    assert w.grad is None
    assert clear.trace_count == 1


def test_a_staged_step_on_a_deep_copy_matches_the_original() -> None:
    # Write-backs go to the tensors the call was given, never to the ones it was traced with.
    def step(p):
        p -= 1.0
        return p

    staged = tfl.function(step)
    a = tfl.tensor([10.0])
    staged(a)
    b = copy.deepcopy(a)
    staged(b)
    np.testing.assert_allclose(a.numpy(), [9.0])
    np.testing.assert_allclose(b.numpy(), [8.0])


def test_no_grad_inside_a_staged_function_holds_when_differentiating_through_it() -> None:
    def f(x):
        with tfl.no_grad():
            s = x.sum()  # a constant for the gradient, eagerly
        return (x * s).sum()

    x = tfl.tensor([1.0, 2.0])
    want = tfl.grad(f)(x)
    np.testing.assert_allclose(want.numpy(), [3.0, 3.0])
    np.testing.assert_allclose(tfl.grad(tfl.function(f))(x).numpy(), want.numpy())
    np.testing.assert_allclose(tfl.function(tfl.grad(f))(x).numpy(), want.numpy())


def test_a_staged_training_step_runs_its_generated_code() -> None:
    # Its parameters require grad, yet the call is not replayed op by op on the tape: the
    # gradients are already inside the graph.
    w = tfl.zeros(3, requires_grad=True)

    @tfl.function
    def step(x):
        w.grad = None
        loss = ((x * w - 1.0) ** 2).sum()
        loss.backward()
        with tfl.no_grad():
            w.__isub__(0.1 * w.grad)
        return loss

    with mock.patch("teachflow.staged.concrete.interpret",
                    side_effect=AssertionError("op by op")):
        loss = step(tfl.ones(3))
    np.testing.assert_allclose(w.numpy(), [0.2, 0.2, 0.2])
    # Its results are not differentiated again; trying says why, and changes nothing.
    grad = w.grad
    with pytest.raises(tfl.AutodiffError, match="ran backward"):
        (loss + (w * w).sum()).backward()
    assert w.grad is grad


# --- What tracing cannot honour is refused, and nothing is left corrupted ------------------------


def test_reading_the_values_of_a_captured_tensor_while_tracing_is_refused() -> None:
    step = tfl.tensor(0.0)

    def f(x):
        step.__iadd__(1.0)
        return x * step.item()  # eagerly: 1, 2, 3, ...

    for read in (f, lambda x: x * float(step), lambda x: x + step.numpy(),
                 lambda x: x * (2.0 if step else 3.0)):
        with pytest.raises(tfl.TraceError, match="outside the traced function") as err:
            tfl.function(read)(tfl.ones(1))
        assert "step" in str(err.value) and err.value.location.filename.endswith(HERE)
    np.testing.assert_allclose(step.numpy(), 0.0)  # the refused trace changed nothing
    np.testing.assert_allclose(tfl.function(lambda x: x * step)(tfl.ones(1)).numpy(), [0.0])


def _rebind_global(x):
    global REBOUND
    REBOUND = x * 2


@pytest.mark.parametrize("how", ["attribute", "dict entry", "list entry", "global", "nonlocal"])
def test_rebinding_state_to_a_traced_tensor_is_refused_and_undone(how: str) -> None:
    holder = type("Holder", (), {})()
    holder.w = tfl.tensor([1.0, 2.0])
    table = {"m": tfl.tensor([1.0, 2.0])}
    items = [tfl.tensor([1.0, 2.0])]

    def make():
        acc = tfl.tensor([1.0, 2.0])

        def f(x):
            nonlocal acc
            if how == "attribute":
                holder.w = holder.w - x
            elif how == "dict entry":
                table["m"] = table["m"] * x
            elif how == "list entry":
                items[0] = items[0] + x
            elif how == "global":
                _rebind_global(x)
            else:
                acc = acc + x
            return x.sum()

        return f, lambda: acc

    f, acc = make()
    with pytest.raises(tfl.TraceError, match="was given a tensor of the trace") as err:
        tfl.function(f)(tfl.ones(2))
    assert err.value.location.filename.endswith(HERE)  # the line that computed the tensor
    for kept in (holder.w, table["m"], items[0], acc()):
        np.testing.assert_allclose(kept.numpy(), [1.0, 2.0])  # put back, still eager
    assert "REBOUND" not in globals()


def test_a_gradient_inside_with_respect_to_a_captured_tensor_reads_it_at_each_call() -> None:
    w = tfl.tensor([1.0, 2.0])

    def step(x):
        g = tfl.grad(lambda w: ((w * x) ** 2).sum())(w)
        w.__isub__(0.1 * g)
        return g

    staged = tfl.function(step)
    eager_w = tfl.tensor([1.0, 2.0])
    for _ in range(3):
        got = staged(tfl.ones(2))
        want = tfl.grad(lambda v: ((v * tfl.ones(2)) ** 2).sum())(eager_w)
        eager_w -= 0.1 * want
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.numpy(), eager_w.numpy(), rtol=1e-6)


def test_tfl_tensor_of_a_tensor_inside_a_trace_copies_its_values_at_each_call() -> None:
    w = tfl.tensor([1.0, 2.0])
    staged = tfl.function(lambda x: x * tfl.tensor(w) + tfl.tensor(x, dtype="float64"))
    np.testing.assert_allclose(staged(tfl.ones(2)).numpy(), [2.0, 3.0])
    w += 10.0
    np.testing.assert_allclose(staged(tfl.ones(2)).numpy(), [12.0, 13.0])
    copy_ = tfl.tensor(tfl.tensor([1.0], requires_grad=True))
    assert not copy_.requires_grad  # a copy of the values, off the tape, as eagerly


def test_returning_an_argument_or_a_captured_tensor_returns_that_tensor() -> None:
    w = tfl.tensor([1.0, 2.0])

    def f(p, g):
        p -= g
        w.__imul__(2.0)
        return p, w, p * 1.0

    staged = tfl.function(f)
    p = tfl.tensor([5.0, 5.0])
    for i in range(2):
        a, b, c = staged(p, tfl.ones(2))
        assert a is p and b is w and c is not p  # as eagerly: the same objects
        np.testing.assert_allclose(p.numpy(), [4.0 - i, 4.0 - i])
        np.testing.assert_allclose(c.numpy(), p.numpy())


def test_what_a_trace_records_does_not_depend_on_the_callers_grad_state() -> None:
    def f(x):
        with tfl.no_grad():
            s = (x * x).sum()  # a constant for the gradient
        return (x * s).sum() + (x * x).sum()

    x = tfl.tensor([1.0, 2.0])
    want = tfl.grad(f)(x).numpy()  # s + 2x
    under_no_grad = tfl.function(f)
    with tfl.no_grad():
        under_no_grad(x)  # traced here, under the caller's no_grad
    plain = tfl.function(f)
    plain(x)  # traced with an x that needs no gradient
    for staged in (under_no_grad, plain):
        np.testing.assert_allclose(tfl.grad(staged)(x).numpy(), want)
        assert staged.trace_count == 1
    traced = tfl.trace(f, x)
    assert not [n for n in traced.nodes if n.op.name == "stop_gradient"]  # (no extra nodes)


def test_a_call_whose_arguments_alias_differently_traces_again() -> None:
    @tfl.function
    def shift(a, b):
        a += 1.0
        return b * 1.0

    w, v = tfl.zeros(2), tfl.zeros(2)
    np.testing.assert_allclose(shift(w, w).numpy(), [1.0, 1.0])  # b is a: it sees the update
    np.testing.assert_allclose(shift(w, v).numpy(), [0.0, 0.0])  # b is another tensor
    assert shift.trace_count == 2 and "one and the same" in shift.retrace_reasons[0]
    np.testing.assert_allclose(w.numpy(), [2.0, 2.0])


def test_backward_inside_reaching_an_argument_computed_outside_is_refused() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)

    @tfl.function
    def f(a):
        (a * a).sum().backward()  # eagerly this reaches w through a's history
        return a

    with pytest.raises(tfl.TraceError, match="computed from other tensors outside") as err:
        f(w * 3)
    assert err.value.location.filename.endswith(HERE)
    assert w.grad is None

    @tfl.function
    def g(a):
        a *= 2.0  # an in-place update of such an argument is fine (it is not a leaf)
        return a.sum()

    a = w * 3
    g(a)
    np.testing.assert_allclose(a.numpy(), [6.0, 12.0])


class _Cache:
    """A callable object whose state is its own: a model, or an empty container of layers."""

    def __init__(self) -> None:
        self.last = None
        self.w = tfl.tensor([1.0, 2.0])

    def __len__(self) -> int:
        return 0  # falsy, as an empty Sequential would be

    def __getattr__(self, name: str):
        raise AttributeError(name)  # as a Module's, which looks in its own tables first

    def __call__(self, x):
        self.last = x * self.w
        return self.last + 1.0


@pytest.mark.parametrize("wrap", ["object", "partial of a method", "bound method"])
def test_state_of_a_callable_object_is_watched_as_a_methods_self_is(wrap: str) -> None:
    model = _Cache()
    fn = {"object": model,
          "partial of a method": functools.partial(_Cache.__call__, model),
          "bound method": model.__call__}[wrap]
    with pytest.raises(tfl.TraceError, match=r"self\.last was given a tensor of the trace"):
        tfl.function(fn)(tfl.ones(2))
    assert model.last is None  # put back as it was
    np.testing.assert_allclose(model.w.numpy(), [1.0, 2.0])


# --- A captured tensor is found again along the whole path the code took to it --------------------


class _Layer:
    def __init__(self, v: float) -> None:
        self.w = tfl.tensor([v, v])


class _Block:
    def __init__(self, v: float) -> None:
        self.layers = [_Layer(v)]


class _Net:
    def __init__(self, v: float) -> None:
        self.blocks = {"first": _Block(v)}


NET = _Net(1.0)
CONFIG = {"w": tfl.tensor([1.0, 1.0])}


def test_rebinding_any_link_of_the_path_to_a_captured_tensor_retraces() -> None:
    """A notebook cell that makes the model again (``model = Model()``), a config dict replaced,
    a layer swapped deep inside: each call follows the path again, from the global down."""
    global NET, CONFIG
    NET, CONFIG = _Net(1.0), {"w": tfl.tensor([1.0, 1.0])}  # (as a cell run again makes them)
    deep = tfl.function(lambda x: x * NET.blocks["first"].layers[0].w)
    config = tfl.function(lambda x: x * CONFIG["w"])
    np.testing.assert_array_equal(deep(tfl.ones(2)).numpy(), [1.0, 1.0])
    np.testing.assert_array_equal(config(tfl.ones(2)).numpy(), [1.0, 1.0])
    NET = _Net(3.0)  # the root rebound
    CONFIG = {"w": tfl.tensor([7.0, 7.0])}
    np.testing.assert_array_equal(deep(tfl.ones(2)).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(config(tfl.ones(2)).numpy(), [7.0, 7.0])
    NET.blocks["first"].layers[0] = _Layer(5.0)  # a link deep inside
    np.testing.assert_array_equal(deep(tfl.ones(2)).numpy(), [5.0, 5.0])
    assert deep.trace_count == 3 and config.trace_count == 2
    assert "NET.blocks['first'].layers[0].w now names another tensor" in deep.retrace_reasons[0]
    NET.blocks["first"].layers[0].w += 1.0  # in place: the same tensor, no new trace
    np.testing.assert_array_equal(deep(tfl.ones(2)).numpy(), [6.0, 6.0])
    assert deep.trace_count == 3


def test_a_closure_variable_rebound_with_nonlocal_is_read_anew() -> None:
    def make():
        w = tfl.tensor([1.0, 1.0])

        @tfl.function
        def scale(x):
            return x * w

        def set_w(v):
            nonlocal w
            w = v

        return scale, set_w

    scale, set_w = make()
    np.testing.assert_array_equal(scale(tfl.ones(2)).numpy(), [1.0, 1.0])
    set_w(tfl.tensor([10.0, 10.0]))
    np.testing.assert_array_equal(scale(tfl.ones(2)).numpy(), [10.0, 10.0])
    assert scale.trace_count == 2 and "w now names another tensor" in scale.retrace_reasons[0]


def test_a_tensor_rebound_away_is_not_kept_alive_by_the_old_trace() -> None:
    global REBOUND_BIG
    REBOUND_BIG = tfl.zeros(1000, 100)
    total = tfl.function(lambda x: (x @ REBOUND_BIG).sum())
    refs = []
    for _ in range(3):
        total(tfl.ones(2, 1000))
        refs.append(weakref.ref(REBOUND_BIG))
        REBOUND_BIG = tfl.zeros(1000, 100)
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True]
    concrete = total.concrete_functions[0]
    with pytest.raises(tfl.TraceError, match="REBOUND_BIG exists"):
        concrete(tfl.ones(2, 1000))  # its tensor is gone: it says so


def test_a_captured_tensor_that_only_the_trace_knew_is_gone_and_the_call_traces_again() -> None:
    holder = [tfl.tensor([2.0, 2.0])]

    def make():
        def f(x):
            return x * holder[0]
        return f

    staged = tfl.function(make())
    np.testing.assert_array_equal(staged(tfl.ones(2)).numpy(), [2.0, 2.0])
    holder[0] = tfl.tensor([4.0, 4.0])
    gc.collect()
    np.testing.assert_array_equal(staged(tfl.ones(2)).numpy(), [4.0, 4.0])


# --- Containers given as arguments, and NumPy arrays ----------------------------------------------


def test_state_stored_into_an_argument_container_is_refused_and_in_place_updates_work() -> None:
    def new_entries(params, state):
        for k, p in params.items():
            state[k] = 0.9 * p  # a new entry of the caller's dict: it would be lost
        return params["w"]

    with pytest.raises(tfl.TraceError, match=r"state\['w'\] was given a tensor of the trace"):
        tfl.function(new_entries)({"w": tfl.ones(2)}, {})
    with pytest.raises(tfl.TraceError, match=r"xs\[0\] was given a tensor of the trace"):
        tfl.function(lambda xs, t: xs.append(t * 2))([], tfl.ones(1))

    def momentum(params, grads, state, lr=0.1, mu=0.9):
        for k, p in params.items():
            state[k] *= mu
            state[k] += grads[k]
            p -= lr * state[k]

    def run(step):
        params, state = {"w": tfl.tensor([1.0, 2.0])}, {"w": tfl.zeros(2)}
        for _ in range(4):
            step(params, {"w": tfl.ones(2)}, state)
        return params["w"].numpy(), state["w"].numpy()

    for got, want in zip(run(tfl.function(momentum)), run(momentum), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_an_array_argument_updated_in_place_is_updated_as_eagerly() -> None:
    def step(p, g):
        p -= 0.5 * g

    eager, staged = np.array([1.0, 2.0], np.float32), np.array([1.0, 2.0], np.float32)
    for _ in range(2):
        step(eager, np.ones(2, np.float32))
        tfl.function(step)(staged, np.ones(2, np.float32))
    np.testing.assert_array_equal(staged, eager)


def test_an_argument_updated_in_place_must_not_be_a_leaf_that_requires_grad() -> None:
    def f(w, g):
        w -= g
        return (w * w).sum()

    staged = tfl.function(f)
    staged(tfl.ones(2), tfl.ones(2))  # traced with a plain tensor
    w = tfl.tensor([1.0, 1.0], requires_grad=True)
    with pytest.raises(tfl.AutodiffError, match="in-place update of a leaf"):
        staged(w, tfl.ones(2))  # refused, as eagerly
    with pytest.raises(tfl.AutodiffError, match="in-place update of a leaf"):
        f(w, tfl.ones(2))
    np.testing.assert_array_equal(w.numpy(), [1.0, 1.0])


# --- Wherever the code leaves a tensor of the trace, it is found and put back ---------------------


class _Counter:
    total = None


_LOG: dict = {}


def _log3(t):
    _LOG["last"] = t


def _log2(t):
    _log3(t)


def _log1(t):
    _log2(t)


class _Model:
    count = None

    def __init__(self) -> None:
        self.w = tfl.ones(2)

    @tfl.function
    def forward(self, x):
        type(self).count = x * 2  # a class attribute, reached through the instance
        return x


@pytest.mark.parametrize("where", ["class attribute", "three calls down", "deque", "set",
                                   "module attribute", "type(self)"])
def test_a_tensor_of_the_trace_left_anywhere_the_code_reaches_is_refused(where, monkeypatch):
    module = types.ModuleType("learners_state")
    module.last = None
    monkeypatch.setitem(sys.modules, "learners_state", module)
    queue, bag = collections.deque(), set()
    fn, kept = {
        "class attribute": (lambda x: setattr(_Counter, "total", x.sum()),
                            lambda: _Counter.total),
        "three calls down": (lambda x: _log1(x * 2), lambda: _LOG.get("last")),
        "deque": (lambda x: queue.append(x * 2), lambda: queue[0] if queue else None),
        "set": (lambda x: bag.add(x * 2), lambda: next(iter(bag), None)),
        "module attribute": (lambda x: setattr(module, "last", x * 2), lambda: module.last),
        "type(self)": (_Model().forward, lambda: _Model.count),
    }[where]
    with pytest.raises(tfl.TraceError, match="was given a tensor of the trace"):
        tfl.function(fn)(tfl.ones(2))
    assert kept() is None  # put back as it was


def test_python_state_changed_while_tracing_is_said_to_change_only_once() -> None:
    class Schedule:
        def __init__(self) -> None:
            self.t = 0
            self.w = tfl.ones(2)

        @tfl.function
        def step(self, g):
            self.t += 1  # a Python int: this runs while tracing, once
            self.w -= 0.1 * g / self.t

    schedule = Schedule()
    with pytest.warns(tfl.SideEffectWarning, match=r"self\.t: 0 -> 1") as record:
        schedule.step(tfl.ones(2))
    assert record[0].filename.endswith(HERE)  # at the learner's call
    schedule.step(tfl.ones(2))
    assert schedule.t == 1


# --- State that backward() and no_grad see -------------------------------------------------------


W_LEAF = tfl.tensor([1.0, 2.0, 3.0], requires_grad=True)


def test_a_leaf_updated_under_no_grad_inside_stays_the_leaf_for_a_backward_outside() -> None:
    def on_argument(w, x):
        with tfl.no_grad():
            w[0] = 100.0
        return (w * x).sum()

    def on_capture(x):
        with tfl.no_grad():
            W_LEAF.__isub__(0.1 * x)
        return (W_LEAF * x).sum()

    x = tfl.tensor([0.5, 0.6, 0.7])
    for run in (on_argument, tfl.function(on_argument)):
        w = tfl.tensor([1.0, 2.0, 3.0], requires_grad=True)
        loss = run(w, x)
        loss.backward()
        np.testing.assert_allclose(w.grad.numpy(), x.numpy())
        np.testing.assert_allclose(w.numpy(), [100.0, 2.0, 3.0])
    for run in (on_capture, tfl.function(on_capture)):
        W_LEAF.grad = None
        run(x).backward()
        np.testing.assert_allclose(W_LEAF.grad.numpy(), x.numpy())


def test_returning_a_grad_returns_that_grad_plain_as_eagerly() -> None:
    def grads(w, x):
        (w * x).sum().backward()
        return w.grad

    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    g = tfl.function(grads)(w, tfl.tensor([3.0, 4.0]))
    assert g is w.grad and not g.requires_grad
    v = tfl.tensor([1.0, 1.0], requires_grad=True)
    (v * g).sum().backward()
    np.testing.assert_array_equal(v.grad.numpy(), [3.0, 4.0])


def test_requires_grad_set_on_an_argument_inside_is_refused() -> None:
    def mark(w):
        w.requires_grad = True
        return w * 2

    with pytest.raises(tfl.TraceError, match=r"setting w\.requires_grad inside") as err:
        tfl.function(mark)(tfl.ones(2))
    assert err.value.location.filename.endswith(HERE)


# --- Masks and dtypes of in-place updates --------------------------------------------------------


def test_a_masked_assignment_is_where_eagerly_and_staged() -> None:
    def clamp_high(p):
        p[p > 2] = 0.0
        q = p * 1.0
        q[q.sum() > 0] = -1.0  # a 0-d mask: all or nothing
        return q

    for run in (clamp_high, tfl.function(clamp_high)):
        p = tfl.tensor([1.0, 3.0, 5.0])
        np.testing.assert_array_equal(run(p).numpy(), [-1.0, -1.0, -1.0])
        np.testing.assert_array_equal(p.numpy(), [1.0, 0.0, 0.0])

    def rows(p):
        p[p.sum(axis=1) > 2] = -1.0  # a mask of the leading axis picks rows
        return p

    for run in (rows, tfl.function(rows)):
        np.testing.assert_array_equal(run(tfl.tensor([[1.0, 3.0], [0.0, 1.0]])).numpy(),
                                      [[-1.0, -1.0], [0.0, 1.0]])

    def loss(x):
        y = x * 1.0
        y[y > 2] = 0.0
        return y.sum()

    x = tfl.tensor([1.0, 3.0, 5.0])
    for grad in (tfl.grad(loss), tfl.grad(tfl.function(loss))):
        np.testing.assert_array_equal(grad(x).numpy(), [1.0, 0.0, 0.0])


def test_an_in_place_update_that_would_lose_the_fraction_is_refused() -> None:
    for run in (lambda t: t.__iadd__(0.5), tfl.function(lambda t: t.__iadd__(0.5))):
        t = tfl.tensor([1, 2])
        with pytest.raises(tfl.DTypeError, match="cannot store float64 results in this int64"):
            run(t)
        np.testing.assert_array_equal(t.numpy(), [1, 2])
    t = tfl.tensor([1, 2])
    t[0] = 0.5  # assignment at an index converts, as in NumPy and PyTorch
    np.testing.assert_array_equal(t.numpy(), [0, 2])


# --- Paths found from the staged function's own world ---------------------------------------------


class _Lin:
    def __init__(self, v: float) -> None:
        self.w = tfl.full((2,), v)

    def __call__(self, x):
        return x * self.w  # the innermost frame sees only self.w


MODEL = _Lin(1.0)


def test_a_model_made_again_between_calls_is_the_one_used_though_a_method_reads_it() -> None:
    global MODEL
    MODEL = _Lin(1.0)
    step = tfl.function(lambda x: MODEL(x))
    np.testing.assert_array_equal(step(tfl.ones(2)).numpy(), [1.0, 1.0])
    old = weakref.ref(MODEL)
    MODEL = _Lin(5.0)  # a notebook cell run again
    np.testing.assert_array_equal(step(tfl.ones(2)).numpy(), [5.0, 5.0])
    assert step.trace_count == 2 and "MODEL.w now names another tensor" in step.retrace_reasons[0]
    assert "%MODEL.w = capture" in str(step.concrete_functions[-1].graph)
    gc.collect()
    assert old() is None  # the trace of the old model does not keep it


def test_optimizer_state_keyed_by_parameters_is_named_on_one_line_and_updated() -> None:
    p = tfl.ones(2, 2)
    state = {p: tfl.zeros(2, 2)}

    @tfl.function
    def step(x):
        state[p] *= 0.9
        state[p] += x
        return x

    step(tfl.ones(2, 2))
    step(tfl.ones(2, 2))
    np.testing.assert_allclose(state[p].numpy(), np.full((2, 2), 1.9))
    graph = str(step.concrete_functions[0].graph)
    assert "%state[<Tensor>] = capture" in graph and "tensor(" not in graph


ACTIVATIONS: dict = {}


class _Recording:
    def __init__(self) -> None:
        self.w = tfl.ones(2)

    def __call__(self, x):
        ACTIVATIONS["h"] = x * self.w  # a global the staged function never names itself
        return ACTIVATIONS["h"]


@pytest.mark.parametrize("where", ["a method's global", "a helper's closure", "a namespace",
                                   "globals()"])
def test_a_tensor_left_where_called_code_reaches_is_found(where: str) -> None:
    store: dict = {}
    box = types.SimpleNamespace(y=None)

    def keep(y):
        store["y"] = y  # a closure of a function the staged one calls

    model = _Recording()
    fn, kept = {
        "a method's global": (lambda x: model(x), lambda: ACTIVATIONS.get("h")),
        "a helper's closure": (lambda x: keep(x * 2) or x, lambda: store.get("y")),
        "a namespace": (lambda x: setattr(box, "y", x * 2) or x, lambda: box.y),
        "globals()": (lambda x: globals().__setitem__("_LEFT_HERE", x * 2) or x,
                      lambda: globals().get("_LEFT_HERE")),
    }[where]
    with pytest.raises(tfl.TraceError, match="was given a tensor of the trace"):
        tfl.function(fn)(tfl.ones(2))
    assert kept() is None


def test_python_values_changed_in_an_argument_container_are_said_to_stay_in_a_copy() -> None:
    def count(state, x):
        state["step"] += 1
        return x * state["step"]

    state = {"step": 0}
    with pytest.warns(tfl.SideEffectWarning, match="stays in that copy"):
        tfl.function(count)(state, tfl.ones(1))
    assert state == {"step": 0}
    log = [1, 2]
    with pytest.warns(tfl.SideEffectWarning, match=r"log\[1\] \(removed\)"):
        tfl.function(lambda x: log.pop() and x)(tfl.ones(1))


def test_equal_python_values_set_again_are_no_side_effect() -> None:
    class Layer:
        def __init__(self) -> None:
            self.shape, self.config, self.n = (2,), {"act": "relu"}, np.int64(2)
            self.w = tfl.ones(2)

        @tfl.function
        def forward(self, x):
            self.shape = tuple(x.shape)  # the same values, made again
            self.config = {"act": "relu"}
            self.n = np.int64(2)
            return x * self.w

    with warnings.catch_warnings():
        warnings.simplefilter("error", tfl.SideEffectWarning)
        Layer().forward(tfl.ones(2))


# --- Arguments rebuilt as they were -------------------------------------------------------------


def test_arguments_are_rebuilt_with_all_they_hold() -> None:
    @dataclasses.dataclass
    class Scaled:
        w: tfl.Tensor
        scale: float = dataclasses.field(default=1.0, init=False)

    @dataclasses.dataclass
    class Custom:
        w: tfl.Tensor

        def __init__(self, v: float) -> None:
            self.w = tfl.full((2,), v)

    class Params(dict):
        def __init__(self, **kw) -> None:
            super().__init__(**kw)
            self.note = "kept"

    class Pair(tuple):
        def __new__(cls, a, b):
            return super().__new__(cls, (a, b))

    scaled = Scaled(tfl.ones(2))
    scaled.scale = 5.0
    np.testing.assert_array_equal(tfl.function(lambda s: s.w * s.scale)(scaled).numpy(), [5, 5])
    np.testing.assert_array_equal(tfl.function(lambda c: c.w * 2)(Custom(3.0)).numpy(), [6, 6])
    params = Params(a=tfl.ones(2))
    assert tfl.function(lambda p: p["a"] * len(p.note))(params).numpy().tolist() == [4.0, 4.0]
    pair = Pair(tfl.ones(1), tfl.ones(1))
    np.testing.assert_array_equal(tfl.function(lambda t: t[0] + t[1])(pair).numpy(), [2.0])


def test_one_array_passed_twice_is_one_array() -> None:
    def bump(p, q):
        p += 1
        q += 1

    eager, staged = np.zeros(2, np.float32), np.zeros(2, np.float32)
    bump(eager, eager)
    tfl.function(bump)(staged, staged)
    np.testing.assert_array_equal(staged, eager)


def test_a_static_argument_object_is_not_kept_alive_by_its_trace() -> None:
    class Model:
        def __init__(self) -> None:
            self.w = tfl.zeros(100, 10)

    run = tfl.function(lambda m, x: x @ m.w)
    refs = []
    for _ in range(3):
        model = Model()
        run(model, tfl.ones(2, 100))
        refs.append(weakref.ref(model))
    del model
    gc.collect()
    assert [r() is None for r in refs] == [True, True, True]


def test_a_constant_made_lazily_inside_is_kept_as_that_constant() -> None:
    """A module that makes its mask on first use (``self.mask = tfl.tensor(np.tril(...))``)
    keeps it as eagerly: its values are known while tracing, so it is no leak."""
    class Causal:
        mask = None

        def __call__(self, x):
            if self.mask is None:
                self.mask = tfl.tensor(np.tril(np.ones((3, 3), np.float32))) * 2.0
            return x * self.mask

    eager, staged = Causal(), Causal()
    x = tfl.ones(3, 3)
    want = eager(x).numpy()
    run = tfl.function(staged)
    np.testing.assert_array_equal(run(x).numpy(), want)
    assert not isinstance(staged.mask._data, Value)  # an eager tensor, usable anywhere
    np.testing.assert_array_equal(staged.mask.numpy(), eager.mask.numpy())
    np.testing.assert_array_equal(run(x + 1).numpy(), eager(x + 1).numpy())


def test_a_value_computed_from_an_argument_left_in_the_model_is_still_a_leak() -> None:
    class Keeps:
        last = None

        def __call__(self, x):
            self.last = x * 2.0
            return x

    keeps = Keeps()
    with pytest.raises(tfl.TraceError, match="last"):
        tfl.function(keeps)(tfl.ones(2))
    assert keeps.last is None  # put back as it was
