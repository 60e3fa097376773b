"""The tape: backward, functional gradients, gradient modes, and the tape's memory behaviour.

Gradients are checked against values worked out by hand or against central finite differences in
float64. The memory tests switch the cyclic garbage collector off, so that only reference counting
frees objects: an object that is still alive then is either referenced or caught in a cycle, and
the tape promises neither for what no gradient rule needs.
"""

from __future__ import annotations

import contextlib
import gc
import inspect
import sys
import warnings
import weakref
from collections.abc import Iterator

import numpy as np
import pytest

import teachflow as tfl
from teachflow.autodiff import tape
from teachflow.core import dispatch


def leaf(values, dtype="float64") -> tfl.Tensor:
    return tfl.tensor(values, dtype=dtype, requires_grad=True)


def close(t: tfl.Tensor | None, expected, rtol: float = 1e-6, atol: float = 1e-8) -> None:
    assert t is not None
    np.testing.assert_allclose(t.numpy(), np.asarray(expected, dtype=np.float64), rtol=rtol,
                               atol=atol)


# --- backward -----------------------------------------------------------------------------------


def test_backward_fills_grad_of_leaves_only() -> None:
    x = leaf([1.0, 2.0, 3.0])
    h = x * 2
    (h * h).sum().backward()
    close(x.grad, 8 * x.numpy())  # d/dx (2x)^2 = 8x
    assert h.grad is None  # intermediates do not keep gradients
    assert x.grad.requires_grad is False and x.grad.is_leaf  # a plain value, not on the tape
    assert x.grad.shape == x.shape and x.grad.dtype == x.dtype


def test_backward_accumulates_into_grad() -> None:
    x = leaf([1.0, -2.0])
    loss = (x * x).sum()
    loss.backward(retain_graph=True)
    close(x.grad, [2.0, -4.0])
    loss.backward()  # the same tape, kept on purpose, walked again
    close(x.grad, [4.0, -8.0])
    (x * x).sum().backward()  # a new tape
    close(x.grad, [6.0, -12.0])
    x.grad = None
    (3 * x).sum().backward()
    close(x.grad, [3.0, 3.0])


def test_a_second_backward_through_a_spent_tape_raises_as_pytorch_does() -> None:
    x = leaf([1.0, -2.0])
    loss = (x + 1.0).sum() * 3.0  # no rule here keeps anything, and still the tape is spent
    loss.backward()
    close(x.grad, [3.0, 3.0])
    with pytest.raises(tfl.AutodiffError, match="tape was freed") as err:
        loss.backward()
    assert "retain_graph=True" in err.value.hint
    assert err.value.location.lineno == inspect.currentframe().f_lineno - 2  # the 2nd backward()
    close(x.grad, [3.0, 3.0])  # nothing was added
    y = (x * x).sum()
    y.backward(retain_graph=True)
    y.backward()
    close(x.grad, [3.0 + 2 * 2.0, 3.0 - 2 * 4.0])


def test_a_part_of_the_tape_that_kept_only_shapes_can_be_gone_through_again() -> None:
    """As in PyTorch: W.T computed once and used by two backward passes (no values were saved
    for its gradient), while a node that kept a value (x * x, x * 2) refuses."""
    w = leaf([[1.0, 2.0], [3.0, 4.0]])
    w_t = w.T
    for _ in range(2):
        (tfl.ones(3, 2, dtype="float64") @ w_t).sum().backward()
    close(w.grad, np.full((2, 2), 6.0))
    x = leaf([1.0, 2.0])
    h = (x + 1.0).reshape(2, 1)
    h.sum().backward()
    (h * 3.0).sum().backward()
    close(x.grad, [4.0, 4.0])
    for kept_a_value in (lambda x: (x * x).sum(), lambda x: (x * 2.0).sum()):
        loss = kept_a_value(leaf([1.0, 2.0]))
        loss.backward()
        with pytest.raises(tfl.AutodiffError, match="tape was freed"):
            loss.backward()


def test_backward_releases_what_the_tape_kept(no_gc) -> None:
    x = leaf([1.0, 2.0])
    h = x * 3
    loss = (h * h).sum()  # mul keeps h for the gradient
    h_data = weakref.ref(h._data)
    del h
    assert alive(h_data)
    loss.backward()
    assert not alive(h_data)  # spent: released at once, although `loss` is still held


def test_backward_with_an_explicit_output_gradient() -> None:
    x = leaf([1.0, 2.0])
    (x * 3).backward(tfl.tensor([1.0, 10.0], dtype="float64"))
    close(x.grad, [3.0, 30.0])
    y = leaf([1.0, 2.0])
    (y ** 2).backward(np.array([1.0, 0.5]))  # a NumPy array works too
    close(y.grad, [2.0, 2.0])


def test_a_node_used_twice_gets_both_contributions() -> None:
    x = leaf([3.0])
    (x * x).sum().backward()
    close(x.grad, [6.0])
    y = leaf([3.0])
    (y + y + y).sum().backward()
    close(y.grad, [3.0])


def test_diamond_graph() -> None:
    x = leaf([0.5, 1.5])
    a = x * 2  # shared by both branches
    b = a.exp()
    c = a * a
    (b + c).sum().backward()
    xs = x.numpy()
    close(x.grad, 2 * np.exp(2 * xs) + 8 * xs)


def test_deeper_diamond_with_reuse_at_several_levels() -> None:
    x = leaf([0.7])
    a = x.tanh()
    b = a * x  # uses x directly and through a
    c = b + a
    d = c * b
    d.sum().backward()
    # d = (a x + a)(a x) with a = tanh x; differentiate numerically in float64.
    f = lambda v: (np.tanh(v) * v + np.tanh(v)) * (np.tanh(v) * v)
    eps = 1e-6
    close(x.grad, (f(0.7 + eps) - f(0.7 - eps)) / (2 * eps), rtol=1e-6)


@pytest.fixture
def low_recursion_limit() -> Iterator[None]:
    """A limit far below the graph depth: a recursive walk of the tape would fail."""
    previous = sys.getrecursionlimit()
    sys.setrecursionlimit(max(300, len(inspect.stack()) + 200))
    try:
        yield
    finally:
        sys.setrecursionlimit(previous)


def test_deep_chain_backprops_without_recursion(low_recursion_limit) -> None:
    x = tfl.tensor(1.0, dtype="float64", requires_grad=True)
    y = x
    for _ in range(5000):
        y = y * 1.0001
    y.backward()
    close(x.grad, 1.0001 ** 5000, rtol=1e-9)
    del y  # freeing a 5000-node chain must not overflow either
    g = tfl.grad(lambda v: _chain(v, 5000))(tfl.tensor(2.0, dtype="float64"))
    close(g, 1.0, rtol=1e-12)


def _chain(v: tfl.Tensor, n: int) -> tfl.Tensor:
    for _ in range(n):
        v = v + 0.0
    return v


def test_leaf_gradient_keeps_its_dtype() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)  # float32
    (w * np.array([1.0, 2.0])).sum().backward()  # computed in float64
    assert w.grad.dtype == np.float32
    close(w.grad, [1.0, 2.0])


def test_grads_into_broadcast_operands_are_summed_back() -> None:
    col = leaf(np.ones((3, 1)))
    row = leaf([1.0, 2.0, 3.0, 4.0])
    (col * row).sum().backward()
    assert col.grad.shape == (3, 1) and row.grad.shape == (4,)
    close(col.grad, np.full((3, 1), 10.0))
    close(row.grad, np.full(4, 3.0))

    s = leaf(2.0)  # a 0-d tensor added to a matrix
    m = leaf(np.arange(6.0).reshape(2, 3))
    (s * m + s).sum().backward()
    assert s.grad.shape == ()
    close(s.grad, 15.0 + 6.0)
    close(m.grad, np.full((2, 3), 2.0))

    batch = leaf(np.ones((2, 3, 4)))
    weight = leaf(np.ones((4, 5)))
    (batch @ weight).sum().backward()  # the batch axis is broadcast over `weight`
    assert weight.grad.shape == (4, 5)
    close(weight.grad, np.full((4, 5), 6.0))

    b = leaf(np.ones((1, 3)))
    tfl.broadcast_to(b, (4, 2, 3)).sum().backward()
    close(b.grad, np.full((1, 3), 8.0))


def test_backward_stops_at_detach_and_comparisons() -> None:
    x = leaf([1.0, 2.0])
    (x * x.detach()).sum().backward()
    close(x.grad, [1.0, 2.0])  # only the non-detached factor contributes
    y = leaf([1.0, -2.0])
    z = y * 2 + (y > 0)
    z.sum().backward()
    close(y.grad, [2.0, 2.0])


def test_backward_through_a_leaf_that_was_freed() -> None:
    x = leaf([1.0, 2.0])
    y = (x + 1.0).sum()  # add saves nothing, so the tape does not keep x alive
    del x
    y.backward()  # nowhere to put the gradient: nothing happens, and nothing breaks


# --- no_grad / enable_grad ----------------------------------------------------------------------


def test_no_grad_context_records_nothing() -> None:
    x = leaf([1.0, 2.0])
    assert tfl.is_grad_enabled()
    with tfl.no_grad():
        assert not tfl.is_grad_enabled()
        y = x * 2
        z = (y + x).exp().sum()
    assert tfl.is_grad_enabled()
    for t in (y, z):
        assert not t.requires_grad and t.grad_fn is None and t.is_leaf
    assert x.requires_grad  # the leaf itself is unchanged


def test_no_grad_as_decorator() -> None:
    seen = []

    @tfl.no_grad()
    def infer(x: tfl.Tensor) -> tfl.Tensor:
        seen.append(tfl.is_grad_enabled())
        return (x * 2).sum()

    x = leaf([1.0])
    out = infer(x)
    assert seen == [False] and not out.requires_grad
    assert tfl.is_grad_enabled()
    assert infer.__name__ == "infer"


def test_no_grad_decorator_is_reentrant() -> None:
    @tfl.no_grad()
    def depth(n: int) -> int:
        assert not tfl.is_grad_enabled()
        return 0 if n == 0 else 1 + depth(n - 1)

    assert depth(3) == 3
    assert tfl.is_grad_enabled()


def test_enable_grad_inside_no_grad() -> None:
    x = leaf([1.0, 2.0])
    with tfl.no_grad():
        with tfl.enable_grad():
            assert tfl.is_grad_enabled()
            y = (x * x).sum()
        z = x * 3
        assert not tfl.is_grad_enabled()
    assert y.requires_grad and y.grad_fn == "sum"
    assert not z.requires_grad
    y.backward()
    close(x.grad, [2.0, 4.0])


def test_grad_mode_is_restored_after_an_exception() -> None:
    with pytest.raises(RuntimeError), tfl.no_grad():
        raise RuntimeError("boom")
    assert tfl.is_grad_enabled()
    with tfl.no_grad():
        with pytest.raises(RuntimeError), tfl.enable_grad():
            raise RuntimeError("boom")
        assert not tfl.is_grad_enabled()
    assert tfl.is_grad_enabled()


def test_functional_grad_works_inside_no_grad() -> None:
    with tfl.no_grad():
        g = tfl.grad(lambda x: (x ** 2).sum())(tfl.tensor([1.0, 3.0], dtype="float64"))
        assert not tfl.is_grad_enabled()
    close(g, [2.0, 6.0])


# --- grad and value_and_grad --------------------------------------------------------------------


def test_grad_of_a_simple_function() -> None:
    x = tfl.tensor([1.0, 2.0, 3.0], dtype="float64")
    g = tfl.grad(lambda x: (x ** 3).sum())(x)
    close(g, 3 * x.numpy() ** 2)
    assert isinstance(g, tfl.Tensor) and g.shape == x.shape and g.dtype == np.float64
    assert not g.requires_grad  # not recorded: nothing outside is differentiating it
    assert x.grad is None and not x.requires_grad


def test_value_and_grad_returns_the_value() -> None:
    x = tfl.tensor([1.0, 2.0], dtype="float64")
    value, g = tfl.value_and_grad(lambda x: (x * x).sum())(x)
    close(value, 5.0)
    close(g, [2.0, 4.0])
    assert not value.requires_grad and value.shape == ()


def test_argnums_int_and_tuple() -> None:
    a = tfl.tensor([1.0, 2.0], dtype="float64")
    b = tfl.tensor([3.0, 5.0], dtype="float64")
    f = lambda a, b: (a * a * b).sum()
    close(tfl.grad(f)(a, b), 2 * a.numpy() * b.numpy())
    close(tfl.grad(f, argnums=1)(a, b), a.numpy() ** 2)
    close(tfl.grad(f, argnums=-1)(a, b), a.numpy() ** 2)
    ga, gb = tfl.grad(f, argnums=(0, 1))(a, b)
    close(ga, 2 * a.numpy() * b.numpy())
    close(gb, a.numpy() ** 2)
    single = tfl.grad(f, argnums=(1,))(a, b)
    assert isinstance(single, tuple) and len(single) == 1
    close(single[0], a.numpy() ** 2)
    value, (ga2, gb2) = tfl.value_and_grad(f, argnums=(0, 1))(a, b)
    close(value, 1 * 3 + 4 * 5)
    close(ga2, ga.numpy())
    close(gb2, gb.numpy())


def test_keyword_arguments_pass_through_and_are_not_differentiated() -> None:
    f = lambda x, scale=1.0: (x * scale).sum()
    close(tfl.grad(f)(tfl.tensor([1.0, 2.0], dtype="float64"), scale=4.0), [4.0, 4.0])


def test_grad_with_respect_to_a_list_and_a_dict() -> None:
    ws = [tfl.tensor([1.0, 2.0], dtype="float64"), tfl.tensor(3.0, dtype="float64")]
    g = tfl.grad(lambda ws: (ws[0] * ws[1]).sum())(ws)
    assert isinstance(g, list) and len(g) == 2
    close(g[0], [3.0, 3.0])
    close(g[1], 3.0)

    params = {"w": tfl.tensor([[1.0, 2.0]], dtype="float64"),
              "b": (tfl.tensor(0.5, dtype="float64"),)}
    x = tfl.tensor([[1.0], [2.0]], dtype="float64")

    def loss(p, x):
        return ((x @ p["w"] + p["b"][0]) ** 2).mean()

    gp = tfl.grad(loss)(params, x)
    assert set(gp) == {"w", "b"} and isinstance(gp["b"], tuple)
    assert gp["w"].shape == (1, 2) and gp["b"][0].shape == ()
    pred = x.numpy() @ params["w"].numpy() + 0.5
    close(gp["w"], (x.numpy().T @ (2 * pred / 4)))
    close(gp["b"][0], (2 * pred / 4).sum())
    # The arguments were not modified.
    assert isinstance(params["b"], tuple) and params["w"].grad is None


def test_grad_of_numpy_and_python_float_arguments() -> None:
    g = tfl.grad(lambda x: (x * x).sum())(np.array([1.0, 2.0]))
    assert isinstance(g, tfl.Tensor) and g.dtype == np.float64
    close(g, [2.0, 4.0])
    g = tfl.grad(lambda x: x ** 3)(2.0)
    assert isinstance(g, tfl.Tensor) and g.dtype == np.float32  # Python floats are float32
    close(g, 12.0)
    ga, gb = tfl.grad(lambda a, b: a * b, argnums=(0, 1))(2.0, np.float64(5.0))
    close(ga, 5.0)
    close(gb, 2.0)


def test_closure_parameters_are_not_affected() -> None:
    w = leaf([2.0, 3.0])
    x = leaf([1.0, 1.0])  # even a leaf that requires grad: tfl.grad leaves its .grad alone
    g = tfl.grad(lambda x: (x * w).sum())(x)
    close(g, [2.0, 3.0])
    assert w.grad is None and x.grad is None
    # The closed-over parameter can still be trained with backward afterwards.
    (x * w).sum().backward()
    close(w.grad, [1.0, 1.0])
    close(x.grad, [2.0, 3.0])


def test_output_that_does_not_depend_on_the_input_gives_zeros_and_says_so() -> None:
    x = tfl.tensor([1.0, 2.0, 3.0], dtype="float64")
    with pytest.warns(tfl.GradientWarning, match="computed outside teachflow") as warned:
        g = tfl.grad(lambda x: tfl.tensor(5.0))(x)
    assert warned[0].filename == __file__  # (at the learner's line)
    assert g.shape == (3,) and g.dtype == np.float64
    close(g, [0.0, 0.0, 0.0])
    with warnings.catch_warnings():  # one argument it depends on: zeros for the other, quietly
        warnings.simplefilter("error")
        ga, gb = tfl.grad(lambda a, b: (b * 2).sum(), argnums=(0, 1))(x, tfl.ones(2))
    close(ga, np.zeros(3))
    close(gb, [2.0, 2.0])
    # Only through a comparison or a detach: no gradient path either.
    with pytest.warns(tfl.GradientWarning):
        close(tfl.grad(lambda x: (x > 1).sum() * 1.0)(x), np.zeros(3))
    with pytest.warns(tfl.GradientWarning):
        close(tfl.grad(lambda x: x.detach().sum())(x), np.zeros(3))
    # Values made outside teachflow: the gradient a learner loses without a word
    with pytest.warns(tfl.GradientWarning):
        close(tfl.grad(lambda x: tfl.tensor(np.exp(x.numpy())).sum())(x), np.zeros(3))


# --- Gradients of gradients ---------------------------------------------------------------------

SECOND_ORDER = {
    "cube": lambda x: (x ** 3).sum(),
    "tanh": lambda x: x.tanh().sum(),
    "sigmoid": lambda x: x.sigmoid().sum(),
    "exp": lambda x: x.exp().sum(),
    "log": lambda x: x.log().sum(),
    "softmax": lambda x: (tfl.softmax(x) * tfl.tensor([1.0, -2.0, 3.0], dtype="float64")).sum(),
    "log_softmax": lambda x: (tfl.log_softmax(x) * tfl.tensor([0.2, 0.5, 0.3],
                                                               dtype="float64")).sum(),
    "mixed": lambda x: (x.sqrt() * x.tanh() + tfl.maximum(x, 1.0) ** 2).sum(),
}


@pytest.mark.parametrize("name", list(SECOND_ORDER))
def test_second_derivative_matches_finite_differences_of_the_first(name: str) -> None:
    f = SECOND_ORDER[name]
    df = tfl.grad(f)
    weights = tfl.tensor([0.3, -1.1, 0.7], dtype="float64")
    # h(x) = <grad f(x), w>; its gradient is the Hessian times w, a second derivative.
    h = lambda x: (df(x) * weights).sum()
    x0 = np.array([0.4, 1.3, 2.2])
    hessian_w = tfl.grad(h)(tfl.tensor(x0))
    eps = 1e-5
    expected = np.empty(3)
    for i in range(3):
        step = np.zeros(3)
        step[i] = eps
        expected[i] = (h(tfl.tensor(x0 + step)).item() - h(tfl.tensor(x0 - step)).item()) / (
            2 * eps)
    close(hessian_w, expected, rtol=1e-5, atol=1e-7)


def test_nested_grad_of_grad() -> None:
    f = lambda x: x ** 3
    d1 = tfl.grad(f)
    d2 = tfl.grad(d1)
    d3 = tfl.grad(d2)
    x = tfl.tensor(2.0, dtype="float64")
    close(d1(x), 12.0)
    close(d2(x), 12.0)
    close(d3(x), 6.0)
    assert not d2(x).requires_grad
    # Four levels on tanh, against the closed forms (t = tanh x):
    # the second derivative is -2 t (1 - t^2), the fourth 8 t (1 - t^2)(2 - 3 t^2).
    x = tfl.tensor(0.5, dtype="float64")
    t = np.tanh(0.5)
    close(tfl.grad(tfl.grad(lambda x: x.tanh()))(x), -2 * t * (1 - t ** 2))
    d4 = tfl.grad(tfl.grad(tfl.grad(tfl.grad(lambda x: x.tanh()))))
    close(d4(x), 8 * t * (1 - t ** 2) * (2 - 3 * t ** 2))


def test_grad_of_grad_with_tensor_backward_inside() -> None:
    # A learner's training step differentiated again: value_and_grad inside grad.
    def inner_loss(w):
        return (w ** 4).sum() / 4  # gradient w^3

    def outer(w):
        value, g = tfl.value_and_grad(inner_loss)(w)
        return (g * g).sum() + value  # w^6 summed + w^4/4 summed

    w = tfl.tensor([1.0, 2.0], dtype="float64")
    close(tfl.grad(outer)(w), 6 * w.numpy() ** 5 + w.numpy() ** 3)


def test_grad_through_a_closed_over_tensor_of_an_outer_grad() -> None:
    def outer(y):
        inner = tfl.grad(lambda x: (x * y).sum())(tfl.tensor(3.0, dtype="float64"))  # = y
        return inner * y  # = y^2

    close(tfl.grad(outer)(tfl.tensor(2.0, dtype="float64")), 4.0)


def test_value_and_grad_value_stays_connected_to_a_closed_over_tensor() -> None:
    def outer(y):
        value, _ = tfl.value_and_grad(lambda x: (x * y).sum())(tfl.tensor(3.0, dtype="float64"))
        return value  # = 3 y

    close(tfl.grad(outer)(tfl.tensor(2.0, dtype="float64")), 3.0)


# --- Memory: what the tape keeps alive -----------------------------------------------------------


@pytest.fixture
def no_gc() -> Iterator[None]:
    """Reference counting only: what stays alive is referenced (or in a cycle)."""
    gc.collect()
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def alive(ref: weakref.ref) -> bool:
    return ref() is not None


def live_nodes() -> int:
    """How many tape nodes exist (Node has no weakref slot, so count them instead)."""
    return sum(type(o) is tape.TapeNode for o in gc.get_objects())


def teachflow_garbage() -> list[str]:
    """Collect, and name the teachflow objects that only a cycle kept alive. (Other garbage may
    come from earlier tests, released while the collector was off.)"""
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        return [type(o).__name__ for o in gc.garbage
                if type(o).__module__.startswith("teachflow")]
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def test_an_intermediate_no_rule_needs_is_freed_at_once(no_gc) -> None:
    x = leaf([1.0, 2.0, 3.0])
    h = x * 2
    h_ref, h_data = weakref.ref(h), weakref.ref(h._data)
    y = h.sum()  # sum keeps only the shape of its input
    del h
    assert not alive(h_ref) and not alive(h_data)
    g = x + 1.0  # add keeps nothing
    g_ref = weakref.ref(g)
    z = (g - 3.0).tanh()  # sub keeps nothing; tanh keeps its output's array only
    del g
    assert not alive(g_ref)
    z_ref, z_data = weakref.ref(z), weakref.ref(z._data)
    loss = z.sum() + y
    del z
    assert not alive(z_ref)  # the tensor is gone ...
    assert alive(z_data)  # ... but tanh's rule keeps its output array
    loss.backward()
    del loss
    assert not alive(z_data)


def test_intermediates_are_freed_when_the_loss_is_deleted(no_gc) -> None:
    x = leaf(np.linspace(0.1, 1.0, 6).reshape(2, 3))
    w = leaf(np.ones((3, 4)))
    h = x @ w  # matmul keeps both inputs
    a = h.tanh()
    b = a * a
    loss = tfl.log_softmax(b).mean() + x[0, 1:].sum()
    refs = [weakref.ref(t) for t in (h, a, b, loss)]
    arrays = [weakref.ref(t._data) for t in (h, a, b)]
    del h, a, b
    assert not alive(refs[0])  # tanh keeps its output, not its input
    assert not alive(arrays[0])
    assert alive(arrays[1])  # a's values are still needed by the rule of a * a
    del loss
    assert not any(alive(r) for r in refs + arrays)
    assert alive(weakref.ref(x)) and x.grad is None


def test_everything_is_freed_after_backward_and_del_loss(no_gc) -> None:
    nodes_before = live_nodes()
    x = leaf(np.linspace(0.1, 1.0, 6).reshape(2, 3))
    w = leaf(np.full((3, 4), 0.5))
    h = (x @ w).exp()
    s = tfl.softmax(h * x.sum(), axis=0)
    loss = (s * s).sum() + tfl.stack([x, x]).max() + tfl.concatenate([x, x], axis=1).mean()
    assert live_nodes() > nodes_before
    tensors = [weakref.ref(t) for t in (h, s, loss)]
    arrays = [weakref.ref(t._data) for t in (h, s, loss)]
    saved_out = weakref.ref(h._node.out)  # exp saved its output array for its rule
    del h, s
    loss.backward()
    assert x.grad is not None and w.grad is not None
    del loss
    assert not any(alive(r) for r in [*tensors, *arrays, saved_out])
    assert live_nodes() == nodes_before
    assert x.grad._node is None and w.grad._node is None  # gradients hold no tape either


def test_backward_creates_no_reference_cycles(no_gc) -> None:
    x = leaf(np.linspace(0.1, 1.0, 6).reshape(2, 3))
    w = leaf(np.ones((3, 4)))
    loss = (tfl.log_softmax((x @ w).tanh()).mean() + tfl.softmax(x).max()
            + x[0, 1:].sum() + tfl.stack([x, x]).sum())
    loss.backward()
    x_ref = weakref.ref(x)
    del loss, x, w
    assert not alive(x_ref)
    assert teachflow_garbage() == []


def test_functional_grad_frees_its_watched_inputs(no_gc) -> None:
    seen: list[weakref.ref] = []

    def f(x):
        seen.append(weakref.ref(x))
        return (x * 2).sum()

    tfl.grad(f)(tfl.tensor([1.0, 2.0]))
    assert not alive(seen[0])


def test_grad_of_grad_frees_the_inner_graph(no_gc) -> None:
    inner: list[weakref.ref] = []

    def f(x):
        g = tfl.grad(lambda z: (z ** 3).sum())(x)
        inner.append(weakref.ref(g))
        return g.sum()

    close(tfl.grad(f)(tfl.tensor([1.0, 2.0], dtype="float64")), [6.0, 12.0])
    assert not alive(inner[0])


def test_leaf_tensors_are_weakly_referenced_by_their_leaf_node(no_gc) -> None:
    t = tfl.ones(3, requires_grad=True)
    node = t._node
    assert isinstance(node, tape.Leaf)
    assert isinstance(node.tensor, weakref.ref) and node.tensor() is t
    t_ref = weakref.ref(t)
    del t
    assert not alive(t_ref)
    assert node.tensor() is None
    assert node.shape == (3,) and node.dtype == np.float32  # what backward needs stays


def test_nodes_point_only_backwards(no_gc) -> None:
    x = leaf([1.0, 2.0])
    y = x.exp()
    node = y._node
    assert isinstance(node, tape.TapeNode) and node.op.name == "exp"
    assert node.parents == (x._node,)
    # The node keeps what exp's rule needs (its output array), never the output tensor itself.
    assert all(not isinstance(v, tfl.Tensor) or v is not y for v in node.inputs)
    assert node.out is y._data
    y_ref = weakref.ref(y)
    del y
    assert not alive(y_ref)


# --- Only what is needed: rules for the inputs that need a gradient (needs_input_grad) -----------


def test_a_scalar_factor_keeps_nothing_of_the_tensor(no_gc) -> None:
    x = leaf([1.0, 2.0])
    y = x * 3  # an intermediate that needs a gradient
    y_data = weakref.ref(y._data)
    z = y * 2.0  # the rule for y reads only the 2.0
    del y
    assert not alive(y_data)
    z.sum().backward()
    close(x.grad, [6.0, 6.0])


def test_only_the_operand_a_needed_rule_reads_is_kept(no_gc) -> None:
    w = leaf(np.ones((3, 2)))
    data = tfl.tensor(np.arange(6.0).reshape(2, 3), dtype="float64")
    data_array = weakref.ref(data._data)
    h = data @ w  # dW = dataᵀ G reads the data; d(data) is never needed, so w's values are not
    node = h._node
    assert node.inputs[0] is data._data  # the data's array is kept; of w, only its spec
    assert node.inputs[1] == tfl.TensorSpec((3, 2), np.float64)
    other = tfl.tensor([5.0, 6.0], dtype="float64")
    other_array = weakref.ref(other._data)
    h2 = w[0] * other  # the rule for w[0] reads `other`: kept
    del data, other
    assert alive(data_array) and alive(other_array)
    (h.sum() + h2.sum()).backward()
    close(w.grad, [[3.0 + 5.0, 3.0 + 6.0], [5.0, 5.0], [7.0, 7.0]])


class _Recorder:
    """An interpreter that notes the name of every op it applies, then hands it on."""

    def __init__(self, inner, seen: list[str]) -> None:
        self.inner, self.seen = inner, seen

    def apply(self, op, args, params):
        self.seen.append(op.name)
        return self.inner.apply(op, args, params)

    def __getattr__(self, name):
        return getattr(self.inner, name)


@contextlib.contextmanager
def recording_ops() -> Iterator[list[str]]:
    """The names of the ops run inside, in order (a backward pass's kernels, say)."""
    seen: list[str] = []
    with dispatch.interpreting(_Recorder(dispatch.current_interpreter(), seen)):
        yield seen


def test_backward_runs_only_the_rules_of_inputs_that_need_a_gradient() -> None:
    x = tfl.randn(4, 3)  # data: no gradient
    w = tfl.randn(3, 2, requires_grad=True)
    loss = (x @ w).sum()
    with recording_ops() as seen:
        loss.backward()
    assert seen.count("matmul") == 1  # xᵀ G for w, and no G wᵀ for the data


def test_a_numpy_operand_is_a_snapshot_eagerly_as_when_staged() -> None:
    def loss(x, buffer):
        return (x * buffer).sum()

    for run in (loss, tfl.function(loss)):
        buffer = np.array([1.0, 2.0])
        x = leaf([3.0, 4.0])
        y = run(x, buffer)
        buffer[:] = 100.0  # the caller refills its buffer before backward
        y.backward()
        close(x.grad, [1.0, 2.0])
    x = leaf([3.0, 4.0])
    mask = np.array([True, False])
    y = tfl.where(mask, x * x, tfl.maximum(x, buffer)).sum()  # functions copy arrays too
    mask[:] = False
    y.backward()
    close(x.grad, [6.0, 0.0])


# --- log_softmax: one op, one gradient rule -----------------------------------------------------


def test_log_softmax_is_one_op_with_the_values_worked_out_by_hand() -> None:
    x = leaf([[0.0, np.log(3.0)], [5.0, 5.0]])
    y = tfl.log_softmax(x, axis=1)
    assert y.grad_fn == "log_softmax"  # (not the sub of x - max - log(sum(exp)))
    close(y, [[np.log(1 / 4), np.log(3 / 4)], [np.log(1 / 2), np.log(1 / 2)]])
    close(tfl.log_softmax(tfl.tensor([[1000.0, 0.0]]), axis=1), [[0.0, -1000.0]])  # no overflow
    close(tfl.log_softmax(x, axis=0), [[np.log(1 / (1 + np.exp(5))), np.log(3 / (3 + np.exp(5)))],
                                       [np.log(np.exp(5) / (1 + np.exp(5))),
                                        np.log(np.exp(5) / (3 + np.exp(5)))]])
    # Integers are normalised as the floats they become, unsigned ones too (x - max would wrap).
    for dtype, result, rtol in (("int32", np.float64, 1e-6), ("uint8", np.float16, 5e-3)):
        y = tfl.tensor(np.array([0, 2], dtype)).log_softmax()
        assert y.dtype == result  # (as exp's)
        close(y, [np.log(1 / (1 + np.e ** 2)), np.log(np.e ** 2 / (1 + np.e ** 2))], rtol)


def test_the_gradient_of_log_softmax_is_its_rule_four_kernels() -> None:
    """``g - exp(out) * sum(g)``: exp, sum, mul and sub, where the chain rule through x - max -
    log(sum(exp(x - max))) ran six kernels and a broadcast."""
    x = leaf([[0.5, -1.0, 2.0], [0.0, 0.0, 3.0]])
    c = tfl.tensor([[1.0, 0.0, 0.0], [0.0, 0.0, 1.0]], dtype="float64")
    picked = tfl.log_softmax(x, axis=1) * c
    seed = tfl.ones_like(picked)
    with recording_ops() as seen:
        picked.backward(seed)
    assert seen == ["mul", "exp", "sum", "mul", "sub"]  # (the first mul: * c's rule)
    p = np.exp(x.numpy()) / np.exp(x.numpy()).sum(axis=1, keepdims=True)
    close(x.grad, c.numpy() - p * c.numpy().sum(axis=1, keepdims=True))


def test_a_weak_operand_reaches_its_gradient_rule_weak() -> None:
    """The tape keeps a tensor's array and gives the rule a tensor again, but a weak tensor (a
    loop's number) stays weak: its rule computes with it as the op did."""
    from teachflow.ops import elementwise
    from teachflow.tensor.weak import WeakTensor

    x = leaf([0.05, 0.5], dtype="float32")
    y = dispatch.bind(elementwise.mul, x, WeakTensor.of(tfl.tensor(0.1, dtype="float64")))
    assert type(y._node.operand(1, tfl.Tensor)) is WeakTensor


# --- Numerics at the edges, as PyTorch computes them ---------------------------------------------


def test_power_gradient_with_respect_to_the_exponent_at_a_zero_base() -> None:
    # d(x**y)/dy = x**y log x, whose limit at x = 0 is 0 for y >= 0 (PyTorch and JAX give 0);
    # for y < 0, x**y is inf and the gradient is -inf, as in PyTorch.
    base = tfl.tensor([0.0, 0.0, 0.0, 2.0], dtype="float64")
    y = tfl.tensor([2.0, 0.0, -1.0, 3.0], dtype="float64")
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no inf or nan on the way for y >= 0, not even masked
        dy = tfl.grad(lambda y: (base[:2] ** y[:2]).sum())(y)
    close(dy, [0.0, 0.0, 0.0, 0.0])
    with np.errstate(all="ignore"):
        dy = tfl.grad(lambda y: (base ** y).sum())(y)
    np.testing.assert_array_equal(dy.numpy()[:2], [0.0, 0.0])
    assert dy.numpy()[2] == -np.inf
    close(dy[3], 8.0 * np.log(2.0))


def test_power_of_a_python_zero_base() -> None:
    y = tfl.tensor([2.0, 0.5, 0.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        close(tfl.grad(lambda y: (0.0 ** y).sum())(y), [0.0, 0.0, 0.0])
        close(tfl.grad(lambda y: (2.0 ** y).sum())(y), 2.0 ** y.numpy() * np.log(2.0), rtol=1e-6)


def test_second_derivative_in_the_exponent_at_a_zero_base_is_finite() -> None:
    base = tfl.tensor([0.0, 3.0], dtype="float64")
    d = tfl.grad(lambda y: (base ** y).sum())
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        d2 = tfl.grad(lambda y: d(y).sum())(tfl.tensor([2.0, 2.0], dtype="float64"))
    close(d2, [0.0, 9.0 * np.log(3.0) ** 2])


def test_staged_power_gradients_equal_eager_ones_at_a_zero_base() -> None:
    base = tfl.tensor([0.0, 1.5], dtype="float64")
    y = tfl.tensor([2.0, -0.5], dtype="float64")
    grad = tfl.grad(lambda b, y: (b ** y).sum(), argnums=(0, 1))
    eager = grad(base, y)
    staged = tfl.function(grad)(base, y)
    for e, s in zip(eager, staged, strict=True):
        np.testing.assert_array_equal(e.numpy(), s.numpy())


def test_a_power_of_a_python_base_keeps_only_its_output(no_gc) -> None:
    y = leaf([1.0, 2.0]) * 1.0  # an intermediate that needs a gradient
    y_data = weakref.ref(y._data)
    z = 2.0 ** y  # its gradient, 2**y log 2, needs only the output
    del y
    assert not alive(y_data)
    z.sum().backward()


# --- Operands that are not tensors reach the rules as the kernel saw them ------------------------


@pytest.mark.parametrize("stage", [lambda f: f, tfl.function], ids=["eager", "staged"])
def test_a_list_or_tuple_operand_is_an_array_to_the_gradient_rule(stage) -> None:
    m = [[1.0, 2.0], [3.0, 4.0]]
    cases = [
        (lambda w: (w @ m).sum(), np.ones((2, 2)) @ np.array(m).T),
        (lambda w: (m @ w).sum(), np.array(m).T @ np.ones((2, 2))),
        (lambda w: (w @ (1.0, 2.0)).sum(), np.tile([1.0, 2.0], (2, 1))),
        (lambda w: (w ** [[2.0, 3.0]]).sum(), np.tile([2.0, 3.0], (2, 1))),
        (lambda w: ([[2.0, 3.0]] ** w).sum(), np.tile(np.log([2.0, 3.0]) * [2.0, 3.0], (2, 1))),
    ]
    for loss, want in cases:
        close(tfl.grad(stage(loss))(tfl.ones(2, 2)), want, rtol=1e-6)


def test_an_operand_that_shares_its_buffer_is_copied_for_backward() -> None:
    values = [1.0, 2.0, 3.0]
    x = leaf([1.0, 1.0, 1.0])
    y = (x * values).sum()
    values[0] = 100.0  # the caller edits its list before backward
    y.backward()
    close(x.grad, [1.0, 2.0, 3.0])
    base = np.array([[1.0, 2.0, 3.0]])
    view = base[0]  # a view: refilling `base` changes it
    t = tfl.tensor(view)
    x = leaf([1.0, 1.0, 1.0])
    y = (x * view).sum() + (x * t).sum()
    base[:] = 0.0
    y.backward()
    close(x.grad, [2.0, 4.0, 6.0])
    close(t, [1.0, 2.0, 3.0])  # tfl.tensor copies


def test_numpy_scalars_are_the_python_scalars_they_hold_to_the_gradient_rules() -> None:
    x = tfl.tensor([0.0, 1.0, -2.0])
    for zero in (0, np.int64(0), np.float32(0.0)):
        # d(x**0)/dx is 0 whatever flows in, as in PyTorch (not inf * 0)
        close(tfl.grad(lambda x, zero=zero: ((x ** zero) * np.inf).sum())(x), [0.0, 0.0, 0.0])
    y = tfl.tensor([1.0, 2.0])
    staged = tfl.function(tfl.grad(lambda y: (np.float64(2.0) ** y).sum()))
    close(staged(y), 2.0 ** y.numpy() * np.log(2.0), rtol=1e-6)
    assert staged.concrete_functions[0].graph.nodes[-1].spec.dtype == np.float32  # no float64


def test_the_exponent_gradient_at_a_zero_base_is_nan_for_a_nan_exponent() -> None:
    y = tfl.tensor([np.nan, 1.0, -1.0])
    with np.errstate(all="ignore"):
        for base in (0.0, tfl.zeros(3)):
            np.testing.assert_array_equal(tfl.grad(lambda y, b=base: (b ** y).sum())(y).numpy(),
                                          [np.nan, 0.0, -np.inf])  # as PyTorch


def test_a_gradient_is_a_plain_value_even_for_parameters_that_require_grad(no_gc) -> None:
    """As PyTorch's autograd.grad without create_graph: nothing of the forward pass is kept
    alive by the gradient (or by value_and_grad's value), so a training loop does not grow."""
    w = leaf([[1.0], [2.0]])
    x = tfl.tensor(np.ones((1000, 2), np.float32))
    value, g = tfl.value_and_grad(lambda w: ((x @ w).tanh() ** 2).mean())(w)
    assert not g.requires_grad and not value.requires_grad
    assert live_nodes() == 0
    outer = tfl.grad(lambda w: (tfl.grad(lambda v: (v ** 3).sum())(w) ** 2).sum())(w)
    close(outer, 2 * 3 * w.numpy() ** 2 * 6 * w.numpy())  # grad of grad still records


def test_backward_frees_what_a_node_kept_as_soon_as_its_rules_have_run() -> None:
    from teachflow.autodiff.backprop import backpropagate, filled_like

    x = tfl.randn(4, requires_grad=True)
    h = x.tanh()  # (tanh and exp keep their results for their rules)
    y = h.exp()
    loss = y.sum()
    released = []
    backpropagate(loss._node, filled_like(loss, 1), release=True,
                  visit=lambda node, g: released.append((node, y._node.released)))
    assert (h._node, True) in released  # exp's output was let go before tanh's rule ran
    assert h._node.released
