"""Forward mode, ``tfl.jvp``: every op's JVP rule against finite differences and against reverse
mode; higher order by nesting; control flow; eagerly and staged."""

from __future__ import annotations

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from op_cases import DIFFERENTIABLE_CASES, OpCase

import teachflow as tfl
from teachflow.core.errors import AutodiffError
from teachflow.ops.op import OPS, Op

RNG = np.random.default_rng(0)
#: The transformations trace the function first, and ``x[x > 0]`` has a shape that depends on
#: values: it cannot be traced (as in JAX), and says so (`test_errors_say_what_is_wrong`).
TRACEABLE_CASES = [c for c in DIFFERENTIABLE_CASES if c.name != "t[t>0]"]


def test_every_op_declares_a_jvp_rule() -> None:
    missing = sorted(name for name, op in OPS.items() if op.jvp is None)
    assert missing == [], f"ops with no JVP rule (declare `jvp=` in their declaration): {missing}"


def central_difference(fn, inputs: list, tangents: list, h: float = 1e-6) -> np.ndarray:
    def at(step: float) -> np.ndarray:
        moved = [tfl.tensor(x + step * t) for x, t in zip(inputs, tangents, strict=True)]
        return fn(*moved).numpy()
    return (at(h) - at(-h)) / (2 * h)


@pytest.mark.parametrize("case", TRACEABLE_CASES, ids=str)
@settings(max_examples=examples(10), deadline=None)
@given(data=st.data())
def test_jvp_matches_finite_differences_and_reverse_mode(case: OpCase,
                                                         data: st.DataObject) -> None:
    example = case.draw(data)
    inputs = [np.asarray(a, dtype=np.float64) for a in example.inputs]
    tangents = [RNG.normal(size=np.shape(a)) for a in inputs]
    out, moved = tfl.jvp(example.fn, [tfl.tensor(a) for a in inputs],
                         [tfl.tensor(t) for t in tangents])
    want = example.fn(*[tfl.tensor(a) for a in inputs]).numpy()
    np.testing.assert_allclose(out.numpy(), want, rtol=1e-12, atol=1e-12)
    assert moved.shape == out.shape and moved.dtype == np.float64
    np.testing.assert_allclose(moved.numpy(), central_difference(example.fn, inputs, tangents),
                               rtol=1e-5, atol=1e-6)
    # <c, J t> = <Jᵀ c, t>: forward and reverse mode agree to rounding.
    c = RNG.normal(size=out.shape)
    pulled = tfl.grad(lambda *xs: (example.fn(*xs) * tfl.tensor(c)).sum(),
                      argnums=tuple(range(len(inputs))))(*[tfl.tensor(a) for a in inputs])
    reverse = sum(float((g.numpy() * t).sum()) for g, t in zip(pulled, tangents, strict=True))
    np.testing.assert_allclose(float((moved.numpy() * c).sum()), reverse, rtol=1e-9, atol=1e-9)


def test_jvp_by_hand() -> None:
    x, t = tfl.tensor(np.array([0.5, -1.0])), tfl.tensor(np.array([2.0, 3.0]))
    _, moved = tfl.jvp(tfl.exp, (x,), (t,))
    np.testing.assert_allclose(moved.numpy(), np.exp([0.5, -1.0]) * [2.0, 3.0])
    a, b = tfl.tensor(RNG.normal(size=(2, 3))), tfl.tensor(RNG.normal(size=(3, 4)))
    da, db = tfl.tensor(RNG.normal(size=(2, 3))), tfl.tensor(RNG.normal(size=(3, 4)))
    _, moved = tfl.jvp(lambda a, b: a @ b, (a, b), (da, db))
    want = da.numpy() @ b.numpy() + a.numpy() @ db.numpy()  # the product rule
    np.testing.assert_allclose(moved.numpy(), want, rtol=1e-13)


def test_tangents_keep_the_structure_of_the_results() -> None:
    x, t = tfl.tensor([1.0, 2.0]), tfl.tensor([1.0, 0.0])
    out, moved = tfl.jvp(lambda d: {"sq": d["x"] ** 2, "n": 3}, ({"x": x},), ({"x": t},))
    assert set(moved) == {"sq", "n"} and out["n"] == 3
    np.testing.assert_allclose(moved["sq"].numpy(), [2.0, 0.0])


def cube(x):
    return (x ** 3).sum()


def test_higher_order_by_nesting() -> None:
    x, t = tfl.tensor(np.array([0.5, -2.0, 1.5])), tfl.tensor(np.array([1.0, 2.0, -1.0]))
    # Hessian-vector products: forward over reverse, reverse over forward, forward over forward.
    hvp = tfl.jvp(tfl.grad(cube), (x,), (t,))[1]
    np.testing.assert_allclose(hvp.numpy(), 6 * x.numpy() * t.numpy(), rtol=1e-13)
    rof = tfl.grad(lambda x: tfl.jvp(cube, (x,), (t,))[1])(x)
    np.testing.assert_allclose(rof.numpy(), 6 * x.numpy() * t.numpy(), rtol=1e-13)
    fof = tfl.jvp(lambda x: tfl.jvp(cube, (x,), (t,))[1], (x,), (t,))[1]
    np.testing.assert_allclose(fof.item(), float((6 * x.numpy() * t.numpy() ** 2).sum()))


def test_jvp_inside_a_staged_function_is_part_of_its_graph() -> None:
    x, t = tfl.tensor(np.array([0.5, -2.0, 1.5])), tfl.tensor(np.array([1.0, 2.0, -1.0]))
    staged = tfl.function(lambda x, t: tfl.jvp(tfl.grad(cube), (x,), (t,))[1])
    np.testing.assert_allclose(staged(x, t).numpy(), 6 * x.numpy() * t.numpy(), rtol=1e-13)
    text = str(tfl.compile(lambda x, t: tfl.jvp(tfl.tanh, (x,), (t,))[1], x, t).snapshots[0]
               .graph)
    assert "tangent of tanh by its JVP rule" in text


def with_control_flow(x):
    y = tfl.cond(x.sum() > 0, lambda a: a.tanh() * 2, lambda a: a * a, x)
    z = tfl.fori_loop(0, 3, lambda i, c: c * 0.5 + y.exp() * i, x)
    w = tfl.while_loop(lambda c: c.sum() < 20.0, lambda c: c * 1.5 + 1.0, z.abs())
    return (z * y).sum() + w.sum()


@pytest.mark.parametrize("staged", [False, True])
@pytest.mark.parametrize("sign", [1.0, -1.0])
def test_jvp_through_cond_and_loops(staged: bool, sign: float) -> None:
    x = tfl.tensor(sign * np.array([0.3, 0.7, 0.2]))
    t = tfl.tensor([1.0, -0.5, 0.25])

    def tangent(x, t):
        return tfl.jvp(with_control_flow, (x,), (t,))[1]
    got = (tfl.function(tangent) if staged else tangent)(x, t)
    want = central_difference(with_control_flow, [x.numpy()], [t.numpy()])
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)


def test_jvp_through_a_call_of_a_staged_function() -> None:
    inner = tfl.function(lambda a: (a * a).tanh())
    x, t = tfl.tensor(np.array([0.3, 0.7])), tfl.tensor(np.array([1.0, 2.0]))
    outer = tfl.function(lambda x, t: tfl.jvp(lambda a: inner(a) * 2, (x,), (t,))[1])
    graph = tfl.compile(lambda x, t: tfl.jvp(lambda a: inner(a) * 2, (x,), (t,))[1], x, t)
    assert any(n.op.name == "call" for n in graph.snapshots[0].graph.nodes)
    want = central_difference(lambda a: inner(a) * 2, [x.numpy()], [t.numpy()])
    np.testing.assert_allclose(outer(x, t).numpy(), want, rtol=1e-6)


def test_errors_say_what_is_wrong() -> None:
    x = tfl.tensor([1.0, 2.0])
    with pytest.raises(AutodiffError, match="tangent has its primal's shape"):
        tfl.jvp(tfl.exp, (x,), (tfl.tensor([1.0]),))
    with pytest.raises(AutodiffError, match="structure of primals"):
        tfl.jvp(tfl.exp, (x,), (x, x))
    with pytest.raises(tfl.TraceError, match="traced mask"):
        tfl.jvp(lambda a: a[a > 1], (x,), (x,))
    no_rule = Op("jvp_test_no_rule", lambda xp: lambda x: x * 2, lambda x: x, primitive=False)
    with pytest.raises(AutodiffError, match="no JVP rule for op jvp_test_no_rule") as err:
        tfl.jvp(lambda a: tfl.core.dispatch.bind(no_rule, a), (x,), (x,))
    assert "test_jvp.py" in str(err.value)  # the user's line
