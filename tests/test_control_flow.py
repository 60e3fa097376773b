"""Control flow in the graph: ``tfl.cond``, ``tfl.while_loop`` and ``tfl.fori_loop``.

Eagerly they run Python; staged, each is one node owning closed sub-graphs. These tests check:

1. eager and staged runs agree (tuple carries, closures over traced tensors and captured
   weights, nested control flow, Python-bool predicates), with one trace for many inputs;
2. gradients of ``cond`` and ``fori_loop`` (float64) against central differences and against
   the same program unrolled in Python, eagerly and staged, both ways round;
3. ``while_loop`` refuses to be differentiated, pointing at ``fori_loop``;
4. mistakes are refused with messages that name the problem and the user's line;
5. the text form nests sub-graphs, and ``verify`` recurses into them;
6. the generated executor source uses real ``if``/``while``/``for``;
7. the passes work inside sub-graphs without moving work across their boundary;
8. ``to_networkx`` hangs sub-graphs on their node;
9. a hand-built graph with control flow runs in a ``Session``;
10. random programs mixing elementwise ops with control flow compile to what eager computes.

Every while loop here ends on *any* input (the test suite verifies every compilation on random
inputs, see conftest.py), so a loop's condition is bounded by a counter, or by a magnitude that
the body moves away from whatever the sign.
"""

from __future__ import annotations

import re
import signal
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import networkx as nx
import numpy as np
import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import teachflow as tfl
from teachflow.graph import Graph, Node, subgraphs
from teachflow.testing import finite_differences

HERE = Path(__file__).name
CONTROL = {"cond", "while", "fori_loop"}


def f64(values: Any) -> tfl.Tensor:
    return tfl.tensor(np.asarray(values, dtype=np.float64))


def _line_of(marker: str) -> int:
    """The line of this file that carries the comment ``# <marker>``."""
    lines = Path(__file__).read_text().splitlines()
    found = [n for n, text in enumerate(lines, start=1) if text.rstrip().endswith(f"# <{marker}>")]
    assert len(found) == 1, marker
    return found[0]


def _at(marker: str) -> str:
    return f"{HERE}:{_line_of(marker)}"


def _leaves(out: Any) -> list:
    if isinstance(out, dict):
        return [out[k] for k in sorted(out)]
    return list(out) if isinstance(out, tuple | list) else [out]


def _assert_same(got: Any, want: Any, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    got, want = _leaves(got), _leaves(want)
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert isinstance(a, tfl.Tensor) and isinstance(b, tfl.Tensor)
        assert a.shape == b.shape and a.dtype == b.dtype, (a, b)
        np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=rtol, atol=atol)


def walk(graph: Graph, depth: int = 0) -> Iterator[tuple[Node, Graph, int]]:
    """Every node of `graph` and of the graphs its nodes own, with the graph it is in."""
    for node in graph.nodes:
        yield node, graph, depth
        for sub in subgraphs(node).values():
            yield from walk(sub, depth + 1)


def ops_of(graph: Graph) -> list[str]:
    return [n.op.name for n in graph.nodes]


def control_nodes(graph: Graph, name: str | None = None) -> list[Node]:
    return [n for n, _, _ in walk(graph) if n.op.name in CONTROL
            and (name is None or n.op.name == name)]


W = f64([1.0, -0.5, 0.25])  # an eager weight that staged code captures


# --- 1. Eager and staged agree ---------------------------------------------------------------


def f_dynamic(x):
    return tfl.while_loop(lambda x: x.sum() > 1, lambda x: x * 0.5, x)


def test_a_data_dependent_while_loop_is_one_node_traced_once() -> None:
    staged = tfl.function(f_dynamic)
    big, small = tfl.tensor([4.0, 4.0]), tfl.tensor([0.2, 0.2])
    for x, want in ((big, [0.5, 0.5]), (small, [0.2, 0.2]), (tfl.tensor([3.0, 1.0]),
                                                             [0.75, 0.25])):
        got = staged(x)
        np.testing.assert_array_equal(got.numpy(), np.asarray(want, dtype=np.float32))
        _assert_same(got, f_dynamic(x))
    assert staged.trace_count == 1
    graph = staged.get_concrete_function(big).graph
    assert ops_of(graph) == ["while"]
    (loop,) = graph.nodes
    body, test = loop.params["body_fn"], loop.params["cond_fn"]
    assert ops_of(body) == ["mul"] and body.nodes[0].inputs[1] == 0.5
    assert ops_of(test) == ["sum", "gt"]
    assert loop.inputs == (graph.inputs[0],)


def swap(x, y):
    return tfl.fori_loop(0, 3, lambda i, c: (c[1] * 0.5, c[0] + 1.0), (x, y))


def counter_and_index(x, y):
    def body(i, carry):
        a, n, s = carry
        return a * 0.5 + i.astype("float64"), n + 1, s + a.sum()
    return tfl.fori_loop(2, 6, body, (x, tfl.tensor(0), f64(0.0)))


def unchanged_carry(x, y):
    return tfl.fori_loop(0, 3, lambda i, c: (c[0], c[1] * 2.0), (x, y))


def outer_value_as_carry(x, y):
    return tfl.fori_loop(0, 3, lambda i, c: (c[0] + y, y), (x, x))


def init_also_closed_over(x, y):
    return tfl.fori_loop(0, 3, lambda i, c: c + x, x)


def zero_and_negative_trips(x, y):
    return (tfl.fori_loop(3, 3, lambda i, c: c + y, x),
            tfl.fori_loop(5, 2, lambda i, c: c + y, x))


def while_closing_over_traced(x, y):
    limit = y.abs().sum() * 10 + 1  # an outer traced tensor, read by the condition
    return tfl.while_loop(lambda c: c[0].abs().sum() < limit,
                          lambda c: (c[0] * 2.0 + y, c[1] + 1), (x, tfl.tensor(0)))


def list_carry(x, y):
    return tfl.while_loop(lambda c: c[1] < 3, lambda c: [c[0] + y, c[1] + 1],
                          [x, tfl.tensor(0)])


def dict_carry(x, y):
    return tfl.fori_loop(0, 2, lambda i, c: {"a": c["a"] * 2.0, "b": c["b"] + c["a"]},
                         {"a": x, "b": y})


def cond_tuple(x, y):
    return tfl.cond(x.sum() > y.sum(), lambda a, b: (a * b, a - b), lambda a, b: (b, a * 3.0),
                    x, y)


def cond_closure_and_weight(x, y):
    z = (x * y).tanh()  # traced outside, read inside a branch
    return tfl.cond(x.sum() > 0, lambda a: a * z + W, lambda a: a - W * 2.0, x)


def cond_no_operands(x, y):
    return tfl.cond(x.sum() > 0, lambda: x * 2.0, lambda: y * 3.0)


def cond_inside_fori(x, y):
    def body(i, c):
        return tfl.cond(i % 2 == 0, lambda a: a * y + W, lambda a: a - W * i.astype("float64"), c)
    return tfl.fori_loop(0, 4, body, x)


def while_inside_cond(x, y):
    def grow(a):
        return tfl.while_loop(lambda b: b.abs().sum() < 50.0, lambda b: b * 2.0 + y, a)
    return tfl.cond(x.sum() > 0, grow, lambda a: a * W, x)


def fori_inside_fori(x, y):
    return tfl.fori_loop(0, 3, lambda i, c: tfl.fori_loop(
        0, 2, lambda j, d: d * 0.5 + (i * j).astype("float64") * y, c), x)


def pred_read_in_a_loop(x, y):
    p = y.sum() > 0
    return tfl.fori_loop(0, 3, lambda i, c: tfl.cond(p, lambda a: a + 1.0, lambda a: a - 1.0, c),
                         x)


PROGRAMS = [swap, counter_and_index, unchanged_carry, outer_value_as_carry, init_also_closed_over,
            zero_and_negative_trips, while_closing_over_traced, list_carry, dict_carry,
            cond_tuple, cond_closure_and_weight, cond_no_operands, cond_inside_fori,
            while_inside_cond, fori_inside_fori, pred_read_in_a_loop]

#: Inputs that take the branches both ways.
INPUTS = [(f64([0.5, -1.0, 2.0]), f64([0.25, 0.5, -0.75])),
          (f64([-0.5, 1.0, -2.0]), f64([-0.25, 0.5, 0.75])),
          (f64([0.1, 0.2, 0.3]), f64([1.0, 1.0, 1.0]))]


@pytest.mark.parametrize("program", PROGRAMS, ids=lambda p: p.__name__)
def test_staged_equals_eager_with_one_trace(program: Callable) -> None:
    staged = tfl.function(program)
    for x, y in INPUTS:
        _assert_same(staged(x, y), program(x, y))
    assert staged.trace_count == 1
    graph = staged.get_concrete_function(*INPUTS[0]).graph
    assert control_nodes(graph), "the control flow should stay in the graph"
    graph.verify()


def test_nested_control_flow_nests_in_the_graph() -> None:
    graph = tfl.trace(cond_inside_fori, *INPUTS[0])
    (loop,) = [n for n in graph.nodes if n.op.name == "fori_loop"]
    body = loop.params["body_fn"]
    assert [n.op.name for n in body.nodes].count("cond") == 1
    graph = tfl.trace(while_inside_cond, *INPUTS[0])
    (branch,) = [n for n in graph.nodes if n.op.name == "cond"]
    assert "while" in ops_of(branch.params["true_fn"])
    assert "while" not in ops_of(branch.params["false_fn"])


def test_sub_graphs_are_closed_outer_values_become_operands() -> None:
    x, y = INPUTS[0]
    graph = tfl.trace(cond_closure_and_weight, x, y)
    (node,) = [n for n in graph.nodes if n.op.name == "cond"]
    z = next(n.output for n in graph.nodes if n.op.name == "tanh")
    (weight,) = graph.captures
    assert node.inputs[1] is graph.inputs[0]  # the explicit operand, then what is read
    assert z in node.inputs and weight in node.inputs
    for key in ("true_fn", "false_fn"):  # both branches take the same inputs
        sub = node.params[key]
        assert len(sub.inputs) == len(node.inputs) - 1
        assert [v.spec for v in sub.inputs] == [o.spec for o in node.inputs[1:]]
    # Nothing inside any sub-graph reads a value of another graph (no hidden edges).
    for inner, owner, depth in walk(tfl.trace(cond_inside_fori, x, y)):
        for o in inner.inputs:
            if hasattr(o, "spec"):
                assert owner.owns(o), (depth, inner)


def test_captured_weight_is_read_at_each_call() -> None:
    w = f64([1.0, 2.0, 3.0])

    def f(x):
        return tfl.fori_loop(0, 2, lambda i, c: tfl.cond(c.sum() > 0, lambda a: a * w,
                                                         lambda a: a - w, c), x)

    staged, x = tfl.function(f), f64([0.5, 0.5, 0.5])
    _assert_same(staged(x), f(x))
    np.testing.assert_allclose(staged(x).numpy(), [0.5, 2.0, 4.5])
    w[0] = 10.0
    _assert_same(staged(x), f(x))
    np.testing.assert_allclose(staged(x).numpy(), [50.0, 2.0, 4.5])
    assert staged.trace_count == 1


def test_a_python_bool_predicate_chooses_while_tracing() -> None:
    def f(x, flag):
        # Shapes may differ: only the chosen branch runs, even traced.
        return tfl.cond(flag, lambda a: a * 2.0, lambda a: a.sum(), x)

    x = INPUTS[0][0]
    staged = tfl.function(f)
    for flag in (True, False):
        _assert_same(staged(x, flag), f(x, flag))
        graph = staged.get_concrete_function(x, flag).graph
        assert not control_nodes(graph)
    assert staged(x, True).shape == (3,) and staged(x, False).shape == ()


def test_eager_cond_runs_only_the_chosen_branch() -> None:
    ran = []

    def t(a):
        ran.append("true")
        return a + 1.0

    def f(a):
        ran.append("false")
        return a - 1.0

    tfl.cond(f64(1.0) > 0, t, f, f64([1.0]))
    assert ran == ["true"]
    ran.clear()
    with pytest.warns(tfl.SideEffectWarning):  # (appending to `ran` while tracing)
        tfl.function(lambda x: tfl.cond(x.sum() > 0, t, f, x))(f64([1.0]))
    assert sorted(ran) == ["false", "true"]  # traced: both, once each


def test_fori_step_index_is_a_0d_int64_tensor_in_both_modes() -> None:
    seen = []

    def body(i, c):
        seen.append((i.shape, i.dtype))
        return c + i.astype("float64")

    x = f64([0.0])
    eager = tfl.fori_loop(1, 4, body, x)
    with pytest.warns(tfl.SideEffectWarning):  # (appending to `seen` while tracing)
        staged = tfl.function(lambda x: tfl.fori_loop(1, 4, body, x))(x)
    np.testing.assert_array_equal(eager.numpy(), [6.0])
    _assert_same(staged, eager)
    assert set(seen) == {((), np.dtype("int64"))}


#: Bodies that combine the step index with the carry as a Python int would be combined.
WEAK_BODIES = {
    "c + i": lambda i, c: c + i, "i * c - i": lambda i, c: i * c - i,
    "c / (i + 1)": lambda i, c: c / (i + 1), "c ** i": lambda i, c: c ** i,
    "maximum, where": lambda i, c: tfl.maximum(c, i) + tfl.where(c > i, i, c),
    "clip": lambda i, c: c.clip(0, i) + tfl.clip(c, i, 9),
    "i < c": lambda i, c: c + (i < c),
}


def _looped(body: Callable, way: str) -> Callable:
    if way == "script":
        @tfl.script
        def scripted(c: tfl.Tensor, n: tfl.Tensor) -> tfl.Tensor:
            for i in range(n):  # (n a tensor: the loop stays a fori_loop)
                c = body(i, c)
            return c
        return lambda c: scripted(c, tfl.tensor(3))
    looped = lambda c: tfl.fori_loop(0, 3, body, c)
    return {"eager": looped, "function": tfl.function(looped),
            "compile": lambda c: tfl.compile(looped, c)(c)}[way]


@pytest.mark.parametrize("dtype", ["float32", "float16", "int32", "uint8"])
@pytest.mark.parametrize("way", ["eager", "function", "compile", "script"])
@pytest.mark.parametrize("body", sorted(WEAK_BODIES))
def test_the_step_index_takes_the_carrys_dtype_as_a_python_int_would(body: str, way: str,
                                                                      dtype: str) -> None:
    """``c + i`` keeps a float32 carry float32 (NumPy would make int64 + float32 float64): the
    index is weakly typed, as a Python int is; the numbers are those of a Python loop."""
    fn, c = WEAK_BODIES[body], tfl.tensor(np.arange(1, 4), dtype=dtype)
    want = c
    with np.errstate(all="ignore"):
        for k in range(3):
            want = fn(k, want)
        if want.dtype != c.dtype:
            pytest.skip(f"{body} makes {dtype} {want.dtype} with a Python int too")
        got = _looped(fn, way)(c)
    assert got.dtype == want.dtype == c.dtype
    _assert_same(got, want, rtol=1e-3 if dtype == "float16" else 1e-6)


@pytest.mark.parametrize("way", ["eager", "function"])
def test_a_while_loops_python_number_counter_is_weak_too(way: str) -> None:
    def count(x: tfl.Tensor) -> tuple:
        return tfl.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 0.5 + c[1], c[1] + 1),
                              (x, 0))

    x, n = (tfl.function(count) if way == "function" else count)(tfl.tensor([4.0]))
    assert (x.dtype, n.dtype, type(n)) == (np.float32, np.int64, tfl.Tensor)
    np.testing.assert_allclose(x.numpy(), [3.0])


def test_an_int64_tensor_counter_promotes_and_the_error_says_to_count_with_a_number() -> None:
    with pytest.raises(tfl.TraceError, match=r"(?s)float32\[1\] to float64\[1\].*"
                                             r"count with 0, not tfl.tensor\(0\)"):
        tfl.while_loop(lambda c: c[1] < 3, lambda c: (c[0] + c[1], c[1] + 1),
                       (tfl.tensor([4.0]), tfl.tensor(0)))


def test_graph_built_by_hand_holds_control_flow() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((3,), dtype="float64", name="x")
        y = tfl.fori_loop(0, 2, lambda i, c: c * 2.0, x)
    assert [n.op.name for n in g.nodes] == ["fori_loop"]
    np.testing.assert_array_equal(tfl.Session(g).run(y, feed={x: np.ones(3)}), 4 * np.ones(3))


# --- 2. Gradients ------------------------------------------------------------------------------


def _numeric(f: Callable, args: list[tfl.Tensor], k: int) -> np.ndarray:
    def loss(arrays: list[np.ndarray]) -> float:
        return f(*[f64(a) for a in arrays]).item()
    return finite_differences(loss, [a.numpy() for a in args])[k]


def _all_ways(f: Callable, args: list[tfl.Tensor], argnums: Any) -> dict[str, Any]:
    return {
        "eager": tfl.grad(f, argnums=argnums)(*args),
        "function(grad(f))": tfl.function(tfl.grad(f, argnums=argnums))(*args),
        "grad(function(f))": tfl.grad(tfl.function(f), argnums=argnums)(*args),
    }


def _check_gradients(f: Callable, unrolled: Callable, args: list[tfl.Tensor]) -> None:
    for argnums in (0, 1, (0, 1)):
        want_unrolled = tfl.grad(unrolled, argnums=argnums)(*args)
        for way, got in _all_ways(f, args, argnums).items():
            nums = argnums if isinstance(argnums, tuple) else (argnums,)
            grads = got if isinstance(argnums, tuple) else (got,)
            wants = want_unrolled if isinstance(argnums, tuple) else (want_unrolled,)
            for k, g, u in zip(nums, grads, wants, strict=True):
                assert g.dtype == np.float64 and g.shape == args[k].shape, way
                np.testing.assert_allclose(g.numpy(), u.numpy(), rtol=1e-10, atol=1e-12,
                                           err_msg=f"{way} vs unrolled, argument {k}")
                np.testing.assert_allclose(g.numpy(), _numeric(f, args, k), rtol=1e-6,
                                           atol=1e-7, err_msg=f"{way} vs differences, arg {k}")


def branchy(x, w):
    y = tfl.cond(x.sum() > 0, lambda a: (a * w).tanh(), lambda a: a * a * w, x)
    return (y * y).sum()


def branchy_unrolled(x, w):
    y = (x * w).tanh() if x.sum().item() > 0 else x * x * w
    return (y * y).sum()


@pytest.mark.parametrize("x", [[0.3, -0.2, 0.5], [-0.3, 0.2, -0.5]], ids=["true", "false"])
def test_cond_gradient_matches_differences_and_a_python_if(x: list) -> None:
    # w is closed over by both branches: its gradient flows through the closure.
    _check_gradients(branchy, branchy_unrolled, [f64(x), f64([1.5, 0.7, -0.4])])


def looped(x, w):
    def body(i, carry):
        a, n, s = carry  # a float carry, an int counter, a float accumulator
        a = (a * w).tanh() + a * 0.5 + i.astype("float64") * 0.1
        return a, n + 1, s + a.sum() * n.astype("float64")
    a, n, s = tfl.fori_loop(1, 4, body, (x, tfl.tensor(0), f64(0.0)))
    return (a * a).sum() + s * n.astype("float64")


def looped_unrolled(x, w):
    a, n, s = x, tfl.tensor(0), f64(0.0)
    for k in range(1, 4):
        i = tfl.tensor(k, dtype="int64")
        a = (a * w).tanh() + a * 0.5 + i.astype("float64") * 0.1
        n, s = n + 1, s + a.sum() * n.astype("float64")
    return (a * a).sum() + s * n.astype("float64")


def test_fori_loop_gradient_matches_differences_and_a_python_for() -> None:
    args = [f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])]
    assert looped(*args).item() == pytest.approx(looped_unrolled(*args).item(), rel=1e-12)
    _check_gradients(looped, looped_unrolled, args)


def cond_in_loop(x, w):
    def body(i, a):
        return tfl.cond((a * w).sum() > 0, lambda a: (a * w).tanh() + 0.1,
                        lambda a: a * 0.9 - w * 0.1, a)
    return (tfl.fori_loop(0, 4, body, x) ** 2).sum()


def cond_in_loop_unrolled(x, w):
    a = x
    for _ in range(4):
        a = (a * w).tanh() + 0.1 if (a * w).sum().item() > 0 else a * 0.9 - w * 0.1
    return (a ** 2).sum()


def test_gradient_through_a_cond_inside_a_fori_loop() -> None:
    args = [f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])]
    _check_gradients(cond_in_loop, cond_in_loop_unrolled, args)


def test_gradient_with_respect_to_a_tensor_only_the_loop_body_reads() -> None:
    x = f64([0.3, -0.2, 0.5])

    def f(w):
        return tfl.fori_loop(0, 3, lambda i, c: (c * w).tanh(), x).sum()

    w = f64([1.5, 0.7, -0.4])
    want = _numeric(f, [w], 0)
    for got in (tfl.grad(f)(w), tfl.function(tfl.grad(f))(w), tfl.grad(tfl.function(f))(w)):
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6, atol=1e-8)
    leaf = f64([1.5, 0.7, -0.4])
    leaf.requires_grad = True
    tfl.fori_loop(0, 3, lambda i, c: (c * leaf).tanh(), x).sum().backward()
    np.testing.assert_allclose(leaf.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def test_gradient_of_a_captured_weight_through_backward_inside_a_function() -> None:
    x = f64([0.3, -0.2, 0.5])
    weight = f64([1.5, 0.7, -0.4])
    weight.requires_grad = True

    @tfl.function
    def step(x):
        loss = tfl.fori_loop(0, 3, lambda i, c: (c * weight).tanh(), x).sum()
        loss.backward()
        return loss

    step(x)
    want = _numeric(lambda w: tfl.fori_loop(0, 3, lambda i, c: (c * w).tanh(), x).sum(),
                    [weight.detach()], 0)
    np.testing.assert_allclose(weight.grad.numpy(), want, rtol=1e-6, atol=1e-8)


def test_eager_gradient_of_a_zero_trip_fori_loop() -> None:
    def f(x, w):
        return (tfl.fori_loop(2, 2, lambda i, c: c * w, x) * w).sum()

    x, w = f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])
    gx, gw = tfl.grad(f, argnums=(0, 1))(x, w)
    np.testing.assert_allclose(gx.numpy(), w.numpy())
    np.testing.assert_allclose(gw.numpy(), x.numpy())


@pytest.mark.parametrize("bounds", [(2, 2), (5, 1)])
def test_staged_gradient_of_a_fori_loop_that_runs_no_step(bounds: tuple) -> None:
    lower, upper = bounds

    def f(x, w):
        return (tfl.fori_loop(lower, upper, lambda i, c: c * w, x) * w).sum()

    x, w = f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])
    gx, gw = tfl.function(tfl.grad(f, argnums=(0, 1)))(x, w)
    np.testing.assert_allclose(gx.numpy(), w.numpy())
    np.testing.assert_allclose(gw.numpy(), x.numpy())


def _second(f: Callable) -> Callable:
    """h(x, w) = sum(df/dx): its gradient is the Hessian of f times a vector of ones."""
    return lambda x, w: tfl.grad(f)(x, w).sum()


@pytest.mark.parametrize("f", [branchy, looped, cond_in_loop],
                         ids=["cond", "fori", "cond_in_fori"])
@pytest.mark.parametrize("x", [[0.3, -0.2, 0.5], [-0.3, 0.2, -0.5]], ids=["pos", "neg"])
def test_eager_second_order_gradient_through_control_flow(f: Callable, x: list) -> None:
    args = [f64(x), f64([1.5, 0.7, -0.4])]
    got = tfl.grad(_second(f))(*args)
    np.testing.assert_allclose(got.numpy(), _numeric(_second(f), args, 0), rtol=1e-5,
                               atol=1e-6)


@pytest.mark.parametrize("way", ["function(grad(h))", "grad(function(h))"])
@pytest.mark.parametrize("f", [branchy, looped, cond_in_loop],
                         ids=["cond", "fori", "cond_in_fori"])
def test_staged_second_order_gradient_through_control_flow(f: Callable, way: str) -> None:
    args = [f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])]
    h = _second(f)
    got = tfl.function(tfl.grad(h))(*args) if way == "function(grad(h))" else \
        tfl.grad(tfl.function(h))(*args)
    np.testing.assert_allclose(got.numpy(), _numeric(h, args, 0), rtol=1e-5, atol=1e-6)


def test_staged_third_order_gradient_through_a_fori_loop_equals_eager() -> None:
    # Each order differentiates the loops the previous one built (history loops included).
    def f(x, w):
        return (tfl.fori_loop(0, 3, lambda i, c: (c * w).tanh() + c * c * 0.1, x) ** 3).sum()
    h3 = _second(_second(f))
    args = [f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])]
    want = tfl.grad(h3)(*args).numpy()  # eagerly the loop is plain Python
    np.testing.assert_allclose(tfl.function(tfl.grad(h3))(*args).numpy(), want, rtol=1e-10)
    np.testing.assert_allclose(want, _numeric(h3, args, 0), rtol=1e-4, atol=1e-5)


def branchy_true(x, w):
    y = (x * w).tanh()  # branchy where x.sum() > 0, without the cond
    return (y * y).sum()


def test_staged_second_order_gradient_without_control_flow_is_right() -> None:
    args = [f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])]
    h = _second(branchy_true)
    want = _numeric(h, args, 0)
    np.testing.assert_allclose(tfl.function(tfl.grad(h))(*args).numpy(), want, rtol=1e-5,
                               atol=1e-6)
    np.testing.assert_allclose(tfl.grad(_second(branchy))(*args).numpy(), want, rtol=1e-5,
                               atol=1e-6)


def test_staged_gradient_graph_holds_a_cond_of_gradients_and_a_backward_loop() -> None:
    args = [f64([0.3, -0.2, 0.5]), f64([1.5, 0.7, -0.4])]
    graph = tfl.function(tfl.grad(branchy)).get_concrete_function(*args).graph
    assert len(control_nodes(graph, "cond")) == 2  # the forward cond and the gradient's cond
    graph.verify()
    concrete = tfl.function(tfl.grad(looped)).get_concrete_function(*args)
    loops = [n for n in concrete.graph.nodes if n.op.name == "fori_loop"]
    # The forward loop, one that also keeps the history, and the backward loop.
    assert len(loops) >= 2 and sum(bool(n.params.get("history")) for n in loops) == 1
    assert concrete.source.count("for step") >= 2 and ".append(" in concrete.source


# --- 3. while_loop is not differentiable ----------------------------------------------------------


def through_while(x):
    return tfl.while_loop(lambda a: a.abs().sum() < 10, lambda a: a * 2.0 + 0.5, x).sum()


@pytest.mark.parametrize("way", ["grad", "backward", "function(grad(f))", "grad(function(f))"])
def test_while_loop_gradient_raises_and_suggests_fori_loop(way: str) -> None:
    x = f64([1.0, 2.0])
    with pytest.raises(tfl.AutodiffError) as info:
        if way == "grad":
            tfl.grad(through_while)(x)
        elif way == "backward":
            leaf = f64([1.0, 2.0])
            leaf.requires_grad = True
            through_while(leaf).backward()
        elif way == "function(grad(f))":
            tfl.function(tfl.grad(through_while))(x)
        else:
            tfl.grad(tfl.function(through_while))(x)
    text = str(info.value)
    assert "while_loop" in text and "fori_loop" in text
    assert "depends on data" in text and "unbounded memory" in text


def test_while_loop_outside_the_gradient_path_is_fine() -> None:
    def f(x):
        scale = tfl.while_loop(lambda s: s < 8.0, lambda s: s * 2.0, x.sum().detach() * 0 + 1)
        return (x * scale).sum()

    x = f64([1.0, 2.0])
    for g in (tfl.grad(f)(x), tfl.function(tfl.grad(f))(x)):
        np.testing.assert_allclose(g.numpy(), [8.0, 8.0])


# --- 4. Mistakes, explained at the user's line -------------------------------------------------


def branch_dtypes(x):
    return tfl.cond(x.sum() > 0, lambda a: a, lambda a: a.astype("float64"), x)  # <dtype>


def branch_shapes(x):
    return tfl.cond(x.sum() > 0, lambda a: a, lambda a: a.sum(), x)  # <shape>


def branch_structures(x):
    return tfl.cond(x.sum() > 0, lambda a: (a, a), lambda a: a, x)  # <structure>


def carry_dtype(x):
    return tfl.fori_loop(0, 3, lambda i, a: a.astype("float64"), x)  # <carry dtype>


def carry_shape(x):
    return tfl.while_loop(lambda a: a.sum() < 10, lambda a: a.sum(), x)  # <carry shape>


def carry_structure(x):
    return tfl.fori_loop(0, 3, lambda i, c: c[0], (x, x))  # <carry structure>


def non_tensor_result(x):
    return tfl.cond(x.sum() > 0, lambda a: "yes", lambda a: "no", x)  # <non-tensor>


def non_tensor_carry(x):
    return tfl.fori_loop(0, 2, lambda i, a: None, x)  # <non-tensor carry>


def in_place_outside(x):
    y = x * 1.0

    def touch(a):
        y[0] = 5.0  # <in-place>
        return a

    return tfl.cond(x.sum() > 0, touch, lambda a: a, x)


def in_place_in_loop(x):
    y = x * 1.0

    def body(i, a):
        y[0] = 5.0  # <in-place loop>
        return a + y

    return tfl.fori_loop(0, 2, body, x)


X32 = tfl.tensor([1.0, 2.0, 3.0])

STAGED_ERRORS = [
    (branch_dtypes, "dtype", ["true branch", "false branch", "float32[3]", "float64[3]"]),
    (branch_shapes, "shape", ["true branch", "false branch", "float32[3]", "float32[]",
                              "same shape"]),
    (branch_structures, "structure", ["true branch", "false branch", "structure"]),
    (non_tensor_result, "non-tensor", ["true branch", "str", "not a tensor"]),
    (non_tensor_carry, "non-tensor carry", ["body", "NoneType", "not a tensor"]),
    (in_place_outside, "in-place", ["in-place", "true branch", "return"]),
    (in_place_in_loop, "in-place loop", ["in-place", "body of tfl.fori_loop", "return"]),
]

BOTH_MODES_ERRORS = [
    (carry_dtype, "carry dtype", ["loop variable 0", "float32[3]", "float64[3]"]),
    (carry_shape, "carry shape", ["loop variable 0", "float32[3]", "float32[]"]),
    (carry_structure, "carry structure", ["same structure"]),
]


@pytest.mark.parametrize("case", STAGED_ERRORS + BOTH_MODES_ERRORS, ids=lambda c: c[1])
def test_staged_mistakes_raise_trace_errors_at_the_users_line(case: tuple) -> None:
    fn, marker, words = case
    with pytest.raises(tfl.TraceError) as info:
        tfl.function(fn)(X32)
    text = str(info.value)
    for word in words:
        assert word in text, (word, text)
    assert _at(marker) in text, text


@pytest.mark.parametrize("case", BOTH_MODES_ERRORS, ids=lambda c: c[1])
def test_eager_loops_check_their_carry_too(case: tuple) -> None:
    fn, marker, words = case
    with pytest.raises(tfl.TraceError) as info:
        fn(X32)
    for word in words:
        assert word in str(info.value)
    assert _at(marker) in str(info.value)


def test_eager_branches_are_plain_python() -> None:
    # Eagerly only one branch runs: nothing to disagree with, nothing to check.
    assert branch_dtypes(X32).dtype == np.float32
    assert non_tensor_result(X32) == "yes"
    y = X32 * 1.0
    tfl.cond(X32.sum() > 0, lambda a: y.__setitem__(0, 5.0) or a, lambda a: a, X32)
    assert y.numpy()[0] == 5.0


def float_predicate(x):
    return tfl.cond(x.sum(), lambda a: a, lambda a: a, x)  # <float pred>


def vector_predicate(x):
    return tfl.cond(x > 0, lambda a: a, lambda a: a, x)  # <vector pred>


def float_bound(x):
    return tfl.fori_loop(0, 3.0, lambda i, a: a, x)  # <float bound>


def tensor_bound(x):
    return tfl.fori_loop(0, tfl.tensor(3), lambda i, a: a, x)  # <tensor bound>


def non_bool_condition(x):
    return tfl.while_loop(lambda a: a.sum(), lambda a: a * 2, x)  # <loop condition>


@pytest.mark.parametrize("staged", [False, True], ids=["eager", "staged"])
@pytest.mark.parametrize("case", [
    (float_predicate, "float pred", tfl.DTypeError, ["predicate", "bool", "float32"]),
    (vector_predicate, "vector pred", tfl.ShapeError, ["predicate", "scalar", "(3,)"]),
    (float_bound, "float bound", tfl.TeachflowError, ["upper bound", "Python int", "float"]),
    (tensor_bound, "tensor bound", tfl.TeachflowError, ["upper bound", "Python int",
                                                        "while_loop"]),
    (non_bool_condition, "loop condition", tfl.TraceError, ["condition", "scalar bool",
                                                            "float32[]"]),
], ids=lambda c: c[1])
def test_bad_predicates_and_bounds(case: tuple, staged: bool) -> None:
    fn, marker, kind, words = case
    with pytest.raises(kind) as info:
        (tfl.function(fn) if staged else fn)(X32)
    for word in words:
        assert word in str(info.value), (word, str(info.value))
    assert _at(marker) in str(info.value)


def test_non_callable_branch_is_refused() -> None:
    with pytest.raises(tfl.TeachflowError, match="cond"):
        tfl.cond(X32.sum() > 0, X32, lambda a: a, X32)
    with pytest.raises(tfl.TeachflowError, match="while_loop"):
        tfl.while_loop(lambda a: a.sum() > 0, "body", X32)


# --- 5. Text form and verify -------------------------------------------------------------------


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def test_text_form_nests_sub_graphs_indented() -> None:
    def f(x, y):
        z = tfl.fori_loop(0, 2, lambda i, c: tfl.cond(c.sum() > 0, lambda a: a * y,
                                                      lambda a: a - y, c), x)
        return tfl.while_loop(lambda a: a.abs().sum() < 20.0, lambda a: a * 3.0, z)

    text = str(tfl.trace(f, *INPUTS[0]))
    lines = text.splitlines()

    def line(pattern: str) -> str:
        (found,) = [ln for ln in lines if re.search(pattern, ln)]
        return found

    loop, body = line(r"= fori_loop 0, 2"), line(r"^\s*body_fn: <lambda>\(%i")
    cond, true, false = line(r"= cond %"), line(r"true_fn:"), line(r"false_fn:")
    while_, test, body2 = line(r"= while %"), line(r"cond_fn:"), line(r"body_fn: <lambda>\(%a")
    assert _indent(loop) == 2 and _indent(while_) == 2
    assert _indent(body) == _indent(test) == _indent(body2) == 4
    assert _indent(cond) == 6 and _indent(true) == _indent(false) == 8
    assert _indent(line(r"= mul %a, %y")) == 10 and _indent(line(r"= sub %a, %y")) == 10
    assert text.count("return") == 6  # graph, fori body, 2 branches, cond_fn, body_fn
    assert HERE in text  # each node's line of source


def test_verify_recurses_into_sub_graphs() -> None:
    graph = tfl.trace(cond_inside_fori, *INPUTS[0])
    graph.verify()
    (loop,) = graph.nodes[-1:]
    body = loop.params["body_fn"]
    (branch,) = [n for n in body.nodes if n.op.name == "cond"]
    true = branch.params["true_fn"]
    kept = true.nodes
    true.nodes = kept[1:]  # a branch whose first node is gone: its next node reads nothing
    with pytest.raises(tfl.GraphError) as info:
        graph.verify()
    assert "body_fn" in str(info.value) and "true_fn" in str(info.value)
    true.nodes = kept
    graph.verify()
    spec = body.outputs[0].spec
    body.outputs[0].spec = tfl.TensorSpec((4,), spec.dtype, spec.device)  # a wrong spec
    with pytest.raises(tfl.GraphError, match="in body_fn of node"):
        graph.verify()
    body.outputs[0].spec = spec
    graph.verify()


def test_verify_names_a_broken_loop_condition() -> None:
    graph = tfl.trace(f_dynamic, tfl.tensor([4.0, 4.0]))
    test = graph.nodes[0].params["cond_fn"]
    test.nodes = test.nodes[1:]
    with pytest.raises(tfl.GraphError, match="cond_fn"):
        graph.verify()


# --- 6. Generated source -----------------------------------------------------------------------


def test_generated_source_uses_real_python_control_flow() -> None:
    x, y = INPUTS[0]
    branchy_source = tfl.function(cond_tuple).get_concrete_function(x, y).source
    assert "if " in branchy_source and "else:" in branchy_source
    assert "while" not in branchy_source and "for " not in branchy_source
    while_source = tfl.function(f_dynamic).get_concrete_function(tfl.tensor([4.0, 4.0])).source
    assert "while True:" in while_source and "break" in while_source
    assert re.search(r"\n\s+if not v\d+:\n\s+break\n", while_source)
    fori_source = tfl.compile(fori_inside_fori, x, y).source
    assert "for step in range(0, 3):" in fori_source
    assert "for step_1 in range(0, 2):" in fori_source  # the inner loop's own counter
    nested = tfl.function(while_inside_cond).get_concrete_function(x, y).source
    lines = nested.splitlines()
    (if_line,) = [ln for ln in lines if ln.strip().startswith("if v")]
    (while_line,) = [ln for ln in lines if "while True:" in ln]
    assert _indent(while_line) == _indent(if_line) + 4  # the loop inside the branch
    assert HERE in nested  # the user's lines, as comments


# --- 7. Passes inside sub-graphs -------------------------------------------------------------


def _ids(graph: Graph) -> set[int]:
    return {v.id for n in graph.nodes for v in n.outputs}


def _snapshot(compilation: Any, name: str) -> tuple[Any, Graph]:
    """The snapshot of pass `name` and the graph the pass was given."""
    names = [s.pass_name for s in compilation.snapshots]
    k = names.index(name)
    return compilation.snapshots[k], compilation.snapshots[k - 1].graph


def passes_program(x, y):
    outer = (x * y).tanh()  # also computed inside the true branch: must stay in both

    def t(a, b):
        return (a * b).tanh() + (a * b).sigmoid() + outer  # a duplicate a*b: CSE

    def f(a, b):
        return a - b

    r = tfl.cond(x.sum() > 0, t, f, x, y)

    def body(i, c):
        dead = c.exp()  # noqa: F841  (DCE)
        return ((c * 1) * 0.5 + 0.1).tanh() * 2.0 - c.sigmoid()  # x*1: simplify; a chain: fuse

    return tfl.fori_loop(0, 3, body, r) + outer


def _find(graph: Graph, name: str) -> Node:
    (node,) = [n for n in graph.nodes if n.op.name == name]
    return node


def test_passes_apply_inside_sub_graphs() -> None:
    args = INPUTS[0]
    compilation = tfl.compile(passes_program, *args)
    _assert_same(compilation(*args), passes_program(*args))
    for x, y in INPUTS[1:]:
        _assert_same(compilation(x, y), passes_program(x, y))

    snap, before = _snapshot(compilation, "cse")
    branch = _find(before, "cond").params["true_fn"]
    merged = [c for c in snap.changes if c.kind == "merged"]
    assert merged and all(set(c.nodes) | set(c.result) <= _ids(branch) for c in merged)
    after_branch = _find(snap.graph, "cond").params["true_fn"]
    assert ops_of(after_branch).count("mul") == ops_of(branch).count("mul") - 1

    snap, before = _snapshot(compilation, "simplify")
    body = _find(before, "fori_loop").params["body_fn"]
    rewritten = [c for c in snap.changes if c.rule == "x*1 -> x"]
    assert rewritten and all(set(c.nodes) <= _ids(body) for c in rewritten)
    assert not any(n.op.name == "mul" and n.inputs[1] == 1
                   for n in _find(snap.graph, "fori_loop").params["body_fn"].nodes)

    snap, before = _snapshot(compilation, "dce")
    body = _find(before, "fori_loop").params["body_fn"]
    names = {n.id: n.op.name for n in body.nodes}
    assert [names.get(c.nodes[0]) for c in snap.changes if c.kind == "removed"] == ["exp"]
    assert {"cond", "fori_loop"} <= set(ops_of(snap.graph))  # the control nodes stay

    snap, before = _snapshot(compilation, "fuse")
    body_after = _find(snap.graph, "fori_loop").params["body_fn"]
    fused = [n for n in body_after.nodes if getattr(n.op, "group", None) is not None]
    assert len(fused) == 1 and body_after.outputs == [fused[0].output]
    assert any(c.kind == "fused" and set(c.result) <= _ids(body_after) for c in snap.changes)
    compilation.graph.verify()


def test_nothing_moves_across_the_sub_graph_boundary() -> None:
    args = INPUTS[0]
    compilation = tfl.compile(passes_program, *args, passes=["simplify", "constant_fold",
                                                             "cse", "dce"])
    graph = compilation.graph
    branch = _find(graph, "cond").params["true_fn"]
    assert "tanh" in ops_of(graph) and "tanh" in ops_of(branch)  # outer and inner tanh(x*y)
    assert ops_of(graph).count("mul") == 1 and ops_of(branch).count("mul") == 1
    body = _find(graph, "fori_loop").params["body_fn"]
    assert "sigmoid" in ops_of(body) and "sigmoid" not in ops_of(graph)
    _assert_same(compilation(*args), passes_program(*args))


def test_every_pass_alone_keeps_control_flow_programs_right() -> None:
    args = INPUTS[0]
    for program in (passes_program, cond_inside_fori, while_inside_cond, counter_and_index):
        want = program(*args)
        for passes in (["simplify"], ["constant_fold"], ["cse"], ["dce"], ["fuse"], "default"):
            compilation = tfl.compile(program, *args, passes=passes)
            _assert_same(compilation(*args), want)
            compilation.graph.verify()


@pytest.mark.parametrize("construct", ["fori_loop", "cond", "while_loop"])
def test_control_flow_on_constants_only_compiles(construct: str) -> None:
    # (constant_fold once called the kernel of such a node: control-flow ops have none.)
    def f(x):
        if construct == "fori_loop":
            c = tfl.fori_loop(0, 3, lambda i, c: c * 2.0, f64(1.0))
        elif construct == "cond":
            c = tfl.cond(tfl.tensor(True), lambda a: a * 8.0, lambda a: a * 3.0, f64(1.0))
        else:
            c = tfl.while_loop(lambda c: c < 8.0, lambda c: c * 2.0, f64(1.0))
        return x * c

    x = f64([1.0, 2.0])
    np.testing.assert_array_equal(f(x).numpy(), [8.0, 16.0])
    _assert_same(tfl.function(f)(x), f(x))
    for passes in ("default", ["constant_fold"]):
        compilation = tfl.compile(f, x, passes=passes)
        _assert_same(compilation(x), f(x))


def test_compilation_kernels_include_those_inside_sub_graphs() -> None:
    compilation = tfl.compile(passes_program, *INPUTS[0])
    fused = {n.op.name for n, _, _ in walk(compilation.graph)
             if getattr(n.op, "group", None) is not None}
    assert len(fused) == 3
    assert set(compilation.kernels) == fused


class _Hung(BaseException):
    """Raised by the alarm: a BaseException, so no `except Exception` swallows it."""


@contextmanager
def _time_limit(seconds: float) -> Iterator[None]:
    def alarm(signum: int, frame: Any) -> None:
        raise _Hung

    previous = signal.signal(signal.SIGALRM, alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def test_verification_does_not_hang_on_a_while_loop() -> None:
    def f(x):
        return tfl.while_loop(lambda c: c < 10.0, lambda c: c * 2.0 - 1.0, x)

    x = tfl.tensor(3.0, dtype="float64")
    assert f(x).item() == 17.0
    try:  # it takes well under a second: a limit this far off trips only on a hang
        with _time_limit(120.0):
            compilation = tfl.compile(f, x, verify=True)
    except _Hung:
        pytest.fail("tfl.compile(..., verify=True) ran for more than 120 s: it hangs")
    assert compilation(x).item() == 17.0


def test_stage_figures_count_the_work_inside_a_loop_body() -> None:
    def f(x):
        return tfl.fori_loop(0, 10, lambda i, c: (c * 2.0 + c * 2.0).tanh() + 1.0, x)

    compilation = tfl.compile(f, tfl.tensor([1.0, 2.0, 3.0, 4.0]))
    stats = {s.pass_name: s.stats for s in compilation.snapshots}
    # The loop node and its body's five ops (mul, mul, add, tanh, add), one flop per element each.
    assert stats["trace"]["nodes"] == 1 + 5 and stats["trace"]["kernels"] == 5
    assert stats["trace"]["flops"] == 5 * 4
    assert stats["cse"]["flops"] == 4 * 4  # the body's second c * 2.0 is gone
    assert stats["fuse"]["kernels"] == 1  # the body is one kernel; the loop node launches none
    assert stats["fuse"]["bytes_moved"] < stats["dce"]["bytes_moved"]


# --- 8. networkx ---------------------------------------------------------------------------------


def test_to_networkx_hangs_sub_graphs_on_their_node() -> None:
    def f(x):
        y = tfl.cond(x.sum() > 0, lambda a: a * 2.0, lambda a: -a, x)
        a, n = tfl.fori_loop(0, 3, lambda i, c: (c[0] + y, c[1] + 1), (x, tfl.tensor(0)))
        return a * n.astype("float64")

    graph = tfl.trace(f, INPUTS[0][0])
    g = graph.to_networkx()
    cond, loop = _find(graph, "cond"), _find(graph, "fori_loop")
    data = g.nodes[cond.id]
    assert data["op"] == "cond" and set(data["subgraphs"]) == {"true_fn", "false_fn"}
    true = data["subgraphs"]["true_fn"]
    assert isinstance(true, nx.DiGraph)
    assert sorted(d["op"] for _, d in true.nodes(data=True)) == ["input", "mul"]
    assert sorted(d["op"] for _, d in data["subgraphs"]["false_fn"].nodes(data=True)) == \
        ["input", "neg"]
    loop_data = g.nodes[loop.id]
    assert loop_data["outputs"] == [v.id for v in loop.outputs] and len(loop.outputs) == 2
    assert loop_data["dtypes"] == ["float64", "int64"] and loop_data["shapes"] == [(3,), ()]
    assert loop.outputs[1].id not in g  # one networkx node per op, keyed by its first result
    body = loop_data["subgraphs"]["body_fn"]
    assert [d["op"] for _, d in body.nodes(data=True)].count("add") == 2
    assert any(d.get("is_output") for _, d in body.nodes(data=True))
    # Edges from the loop say which result they carry.
    cast = next(n for n in graph.nodes if n.op.name == "astype")
    assert g.edges[loop.id, cast.id]["output"] == 1
    assert g.edges[cond.id, loop.id]["output"] == 0


def test_to_networkx_params_do_not_show_object_addresses() -> None:
    g = tfl.trace(cond_tuple, *INPUTS[0]).to_networkx()
    for _, data in g.nodes(data=True):
        assert " object at 0x" not in data["params"]


# --- 9. Session -----------------------------------------------------------------------------------


def test_session_runs_a_hand_built_graph_with_cond_and_while() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), dtype="float64", name="x")
        y = tfl.cond(x.sum() > 0, lambda a: a * 2.0, lambda a: -a, x)
        z = tfl.while_loop(lambda a: a.abs().sum() < 100.0, lambda a: a * 3.0, y)
        n = tfl.fori_loop(0, 4, lambda i, c: c + i.astype("float64"), x)
    g.verify()
    assert "cond" in str(g) and "while" in str(g) and "body_fn:" in str(g)
    session = tfl.Session(g)
    ones = np.ones((2, 3))
    got_y, got_z, got_n = session.run([y, z, n], feed={x: ones})
    np.testing.assert_array_equal(got_y, 2 * ones)
    np.testing.assert_array_equal(got_z, 18 * ones)  # 12 -> 36 -> 108: two steps
    np.testing.assert_array_equal(got_n, 7 * ones)
    got = session.run({"y": y, "z": z}, feed={x: -np.ones((4, 3))})
    np.testing.assert_array_equal(got["y"], np.ones((4, 3)))
    np.testing.assert_array_equal(got["z"], 9 * np.ones((4, 3)))
    assert session.run(z, feed={x: np.full((1, 3), 50.0)}).tolist() == [[100.0] * 3]


# --- 10. Random programs with control flow ----------------------------------------------------

# Elementwise steps: each keeps its operand's shape, and stays bounded when repeated a few times.
UNARY: dict[str, Callable] = {
    "tanh": lambda a: a.tanh(),
    "sigmoid": lambda a: a.sigmoid(),
    "relu": lambda a: a.relu(),
    "abs": lambda a: a.abs(),
    "neg": lambda a: -a,
    "exp(tanh)": lambda a: a.tanh().exp(),
    "log(abs+1)": lambda a: (a.abs() + 1.0).log(),
    "x*1": lambda a: a * 1,
    "x+0": lambda a: a + 0,
    "-(-x)": lambda a: -(-a),  # noqa: B002
    "x*0.5": lambda a: a * 0.5,
    "x*2.5": lambda a: a * 2.5,
    "1.5-x": lambda a: 1.5 - a,
    "f+f": lambda a: a.tanh() + a.tanh(),
}

# With a second value read from around (a closure), broadcast to the first's shape.
BINARY: dict[str, Callable] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul(tanh)": lambda a, b: a * b.tanh(),
    "maximum": lambda a, b: tfl.maximum(a, b),
    "where(a>b)": lambda a, b: tfl.where(a > b, a, b * 0.5),
}


@dataclass
class Chain:
    """Elementwise steps applied to one value; `closure` indexes a value read from outside."""

    steps: list[tuple[str, int | None]]

    def __call__(self, a: Any, pool: list) -> Any:
        for kind, other in self.steps:
            a = UNARY[kind](a) if other is None else BINARY[kind](a, pool[other])
        return a

    def __repr__(self) -> str:
        return " . ".join(k if o is None else f"{k}(v{o})" for k, o in reversed(self.steps))


@dataclass
class CFStep:
    kind: str  # "op", "cond", "fori", "while"
    operand: int
    chains: list[Chain]
    pred: int = 0  # cond: the value whose sum decides
    bounds: tuple[int, int] = (0, 0)  # fori: range; while: the step limit
    nested: bool = False  # fori: a cond inside the body

    def run(self, pool: list) -> Any:
        a = pool[self.operand]
        if self.kind == "op":
            return self.chains[0](a, pool)
        if self.kind == "cond":
            return tfl.cond(pool[self.pred].sum() > 0, lambda v: self.chains[0](v, pool),
                            lambda v: self.chains[1](v, pool), a)
        if self.kind == "fori":
            def body(i, carry):
                v, k = carry
                v = self.chains[0](v, pool) + i.astype(v.dtype) * 0.25
                if self.nested:
                    v = tfl.cond(v.sum() > 0, lambda u: self.chains[1](u, pool),
                                 lambda u: self.chains[2](u, pool), v)
                return v, k + 1
            return tfl.fori_loop(*self.bounds, body, (a, tfl.tensor(0)))[0]
        # A while loop whose trip count depends on data, but at most limit + 1 steps: the
        # counter rises by one per step and the tanh term stays in (-1, 1).
        limit = self.bounds[1]
        return tfl.while_loop(
            lambda c: c[1].astype(c[0].dtype) + c[0].tanh().mean() < limit,
            lambda c: (self.chains[0](c[0], pool), c[1] + 1), (a, tfl.tensor(0)))[0]

    def text(self, index: int) -> str:
        c = self.chains
        if self.kind == "op":
            return f"v{index} = {c[0]!r}(v{self.operand})"
        if self.kind == "cond":
            return f"v{index} = cond(v{self.pred}.sum() > 0, {c[0]!r}, {c[1]!r}, v{self.operand})"
        if self.kind == "fori":
            inner = f" then cond({c[1]!r}, {c[2]!r})" if self.nested else ""
            return f"v{index} = fori{self.bounds}({c[0]!r}{inner}, v{self.operand})"
        return f"v{index} = while(steps<{self.bounds[1]}: {c[0]!r}, v{self.operand})"


@dataclass
class CFProgram:
    input_shapes: tuple[tuple[int, ...], ...]
    steps: list[CFStep] = field(default_factory=list)
    outputs: tuple[int, ...] = ()
    __name__ = "cf_program"

    def __call__(self, *inputs: Any) -> Any:
        pool = list(inputs)
        for step in self.steps:
            pool.append(step.run(pool))
        return tuple(pool[i] for i in self.outputs)

    def __repr__(self) -> str:
        n = len(self.input_shapes)
        lines = [f"def program({', '.join(f'v{i}' for i in range(n))}):  # shapes "
                 f"{list(self.input_shapes)}"]
        lines += [f"    {s.text(n + i)}" for i, s in enumerate(self.steps)]
        lines.append(f"    return {', '.join(f'v{i}' for i in self.outputs)}")
        return "\n".join(lines)


@st.composite
def chains(draw: Any, shape: tuple, shapes: list[tuple], max_size: int = 3) -> Chain:
    partners = [j for j, s in enumerate(shapes) if np.broadcast_shapes(shape, s) == shape]
    steps: list[tuple[str, int | None]] = []
    for _ in range(draw(st.integers(1, max_size))):
        if partners and draw(st.integers(0, 2)) == 0:
            steps.append((draw(st.sampled_from(sorted(BINARY))), draw(st.sampled_from(partners))))
        else:
            steps.append((draw(st.sampled_from(sorted(UNARY))), None))
    return Chain(steps)


@st.composite
def cf_programs(draw: Any) -> CFProgram:
    main = draw(st.sampled_from([(3,), (2, 3), (1, 3), ()]))
    second = draw(st.sampled_from([main, main[1:], ()]))
    program = CFProgram((main, second))
    shapes = [main, second]
    for _ in range(draw(st.integers(2, 5))):
        i = len(shapes) - 1 - draw(st.integers(0, min(2, len(shapes) - 1)))
        shape = shapes[i]
        kind = draw(st.sampled_from(["op", "cond", "cond", "fori", "fori", "while"]))
        count = {"op": 1, "cond": 2, "fori": 3, "while": 1}[kind]
        step = CFStep(kind, i, [draw(chains(shape, shapes)) for _ in range(count)])
        if kind == "cond":
            step.pred = draw(st.integers(0, len(shapes) - 1))
        elif kind == "fori":
            lower = draw(st.integers(0, 2))
            step.bounds = (lower, lower + draw(st.integers(0, 3)))
            step.nested = draw(st.booleans())
        elif kind == "while":
            step.bounds = (0, draw(st.integers(0, 3)))
        program.steps.append(step)
        shapes.append(shape)
    n = len(shapes)
    extra = draw(st.lists(st.integers(2, n - 2), unique=True, max_size=2)) if n > 3 else []
    program.outputs = (n - 1, *extra)
    return program


EVERY_PASS = ["simplify", "constant_fold", "cse", "dce", "fuse"]


@settings(max_examples=examples(80), deadline=None,
          suppress_health_check=[HealthCheck.too_slow])
@given(cf_programs(), st.lists(st.sampled_from(EVERY_PASS), max_size=5), st.integers(0, 2**16))
def test_random_control_flow_programs_compile_to_what_eager_computes(
        program: CFProgram, passes: list[str], seed: int) -> None:
    rng = np.random.default_rng(seed)
    examples = [f64(rng.uniform(-2, 2, s)) for s in program.input_shapes]
    fresh = [f64(rng.uniform(-2, 2, s)) for s in program.input_shapes]
    want, want_fresh = program(*examples), program(*fresh)
    for chosen in ("default", EVERY_PASS, passes):
        compilation = tfl.compile(program, *examples, passes=chosen, verify=True)
        assert control_nodes(compilation.snapshots[0].graph) or all(
            s.kind == "op" for s in program.steps)
        compilation.graph.verify()
        _assert_same(compilation(*examples), want, rtol=1e-9, atol=1e-9)
        _assert_same(compilation(*fresh), want_fresh, rtol=1e-9, atol=1e-9)
