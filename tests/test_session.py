"""Define-and-run by hand: ``with tfl.Graph() as g: ...`` then ``tfl.Session(g).run(...)``.

Building a graph computes nothing (deferred execution); `run` computes only what the fetches
need, from the placeholders fed; a placeholder's None dimensions accept any size. Every mistake
(a missing feed, a stray key, a wrong shape or dtype kind, a tensor from elsewhere, a placeholder
outside a graph) is a `TeachflowError` that names the placeholder or tensor involved.
"""

from __future__ import annotations

import re

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.backends import CPU
from teachflow.ops import OPS


def count_kernel_calls(monkeypatch, *names: str) -> list:
    """Make the CPU kernels of ops `names` record each call (by op name)."""
    calls = []
    for name in names:
        op = OPS[name]
        kernel = CPU.kernels[op]

        def counting(*args, _name=name, _kernel=kernel, **params):
            calls.append(_name)
            return _kernel(*args, **params)

        monkeypatch.setitem(CPU.kernels, op, counting)
    return calls


def build_two_branches():
    """``y = (x * 2).sum(axis=1)`` and ``s = x + z``: two fetches, one needing z."""
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), dtype="float32", name="x")
        z = tfl.placeholder((None, 3), dtype="float32", name="z")
        y = (x * 2).sum(axis=1)
        s = x + z
    return g, x, z, y, s


# --- Direct construction, as API.md shows it -----------------------------------------------------


def test_the_api_example() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), dtype="float32", name="x")
        y = (x * 2).sum(axis=1)
    out = tfl.Session(g).run(y, feed={x: np.ones((4, 3))})
    assert isinstance(out, np.ndarray)
    assert out.dtype == np.float32
    np.testing.assert_array_equal(out, [6.0, 6.0, 6.0, 6.0])


def test_building_records_a_graph_of_symbolic_tensors() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), dtype="float32", name="x")
        y = (x * 2).sum(axis=1)
    assert isinstance(y, tfl.Tensor)
    assert y.shape == (None,) and y.dtype == np.float32
    assert [v.name for v in g.inputs] == ["x"]
    assert [n.op.name for n in g.nodes] == ["mul", "sum"]
    assert "%x: f32[?,3]" in str(g)
    assert "f32[?]" in str(g)
    g.verify()


def test_placeholders_get_default_names() -> None:
    with tfl.Graph() as g:
        tfl.placeholder((2,))
        tfl.placeholder((2,), dtype="int64")
    assert [v.name for v in g.inputs] == ["placeholder0", "placeholder1"]
    assert [v.spec.dtype for v in g.inputs] == [np.float32, np.int64]


def test_placeholder_outside_a_graph_is_refused() -> None:
    with pytest.raises(tfl.TeachflowError, match=r"tfl\.placeholder") as info:
        tfl.placeholder((None, 3), name="x")
    assert "with tfl.Graph()" in str(info.value)
    assert info.value.location.filename == __file__


# --- Fetching ------------------------------------------------------------------------------------


def test_fetch_one_tensor_a_list_a_tuple_or_a_dict() -> None:
    g, x, _, y, _ = build_two_branches()
    with g:
        m = x.mean()
    sess = tfl.Session(g)
    feed = {x: np.arange(6, dtype=np.float32).reshape(2, 3)}
    np.testing.assert_array_equal(sess.run(y, feed=feed), [6.0, 24.0])
    as_list = sess.run([y, m], feed=feed)
    assert isinstance(as_list, list) and len(as_list) == 2
    np.testing.assert_array_equal(as_list[1], 2.5)
    as_tuple = sess.run((m, y, y), feed=feed)
    assert isinstance(as_tuple, tuple)
    np.testing.assert_array_equal(as_tuple[2], [6.0, 24.0])
    as_dict = sess.run({"total": y, "nested": [m, {"again": y}]}, feed=feed)
    assert set(as_dict) == {"total", "nested"}
    np.testing.assert_array_equal(as_dict["nested"][1]["again"], [6.0, 24.0])
    np.testing.assert_array_equal(as_dict["nested"][0], 2.5)


def test_a_placeholder_can_be_fetched_and_is_converted_to_its_dtype() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((2,), name="x")
    out = tfl.Session(g).run(x, feed={x: np.array([1, 2], dtype=np.int64)})
    assert out.dtype == np.float32  # ints fit a float placeholder (same kind or safer)
    np.testing.assert_array_equal(out, [1.0, 2.0])


def test_feeds_may_be_tensors_lists_or_arrays() -> None:
    g, x, _, y, _ = build_two_branches()
    sess = tfl.Session(g)
    for value in (tfl.ones(2, 3), [[1.0, 1.0, 1.0], [1.0, 1.0, 1.0]], np.ones((2, 3))):
        np.testing.assert_array_equal(sess.run(y, feed={x: value}), [6.0, 6.0])


def test_none_dimensions_accept_different_batch_sizes() -> None:
    g, x, _, y, _ = build_two_branches()
    sess = tfl.Session(g)
    for batch in (1, 4, 7, 0):
        out = sess.run(y, feed={x: np.ones((batch, 3))})
        assert out.shape == (batch,)
        np.testing.assert_array_equal(out, np.full(batch, 6.0))


def test_a_graph_runs_again_and_again_with_new_feeds() -> None:
    g, x, z, _, s = build_two_branches()
    sess = tfl.Session(g)
    for k in range(3):
        out = sess.run(s, feed={x: np.full((2, 3), k), z: np.ones((2, 3))})
        np.testing.assert_array_equal(out, np.full((2, 3), k + 1.0))


def test_an_eager_tensor_used_while_building_is_read_at_run_time() -> None:
    w = tfl.tensor([1.0, 2.0, 3.0])
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), name="x")
        y = x * w
    sess = tfl.Session(g)
    np.testing.assert_array_equal(sess.run(y, feed={x: np.ones((1, 3))}), [[1.0, 2.0, 3.0]])
    with tfl.no_grad():
        w += 1
    np.testing.assert_array_equal(sess.run(y, feed={x: np.ones((1, 3))}), [[2.0, 3.0, 4.0]])


# --- Deferred execution: nothing runs while building; run computes only what is fetched ---------


def test_building_computes_nothing(monkeypatch) -> None:
    calls = count_kernel_calls(monkeypatch, "mul", "sum", "add")
    g, x, _, y, _ = build_two_branches()
    sess = tfl.Session(g)
    assert calls == []
    sess.run(y, feed={x: np.ones((2, 3))})
    assert sorted(calls) == ["mul", "sum"]
    sess.run(y, feed={x: np.ones((5, 3))})  # compiled once, computed at every run
    assert sorted(calls) == ["mul", "mul", "sum", "sum"]


def test_building_draws_no_random_numbers() -> None:
    tfl.manual_seed(7)
    with tfl.Graph() as g:
        noise = tfl.randn(3)
    first_eager = tfl.randn(3).numpy()
    tfl.manual_seed(7)
    np.testing.assert_array_equal(tfl.randn(3).numpy(), first_eager)  # building drew nothing
    tfl.manual_seed(7)
    np.testing.assert_array_equal(tfl.Session(g).run(noise), first_eager)  # running draws


def test_only_the_subgraph_the_fetches_need_runs(monkeypatch) -> None:
    calls = count_kernel_calls(monkeypatch, "mul", "sum", "add")
    g, x, _, y, _ = build_two_branches()
    out = tfl.Session(g).run(y, feed={x: np.ones((2, 3))})  # z is not fed: s is not needed
    np.testing.assert_array_equal(out, [6.0, 6.0])
    assert "add" not in calls


def test_a_fetch_that_needs_no_placeholder_runs_without_feeds() -> None:
    with tfl.Graph() as g:
        tfl.placeholder((None, 3), name="x")
        c = tfl.ones(3) * 5
    np.testing.assert_array_equal(tfl.Session(g).run(c), [5.0, 5.0, 5.0])


def test_a_shape_that_fails_only_at_run_time_builds_fine() -> None:
    with tfl.Graph() as g:
        a = tfl.placeholder((None, 3), name="a")
        b = tfl.placeholder((None, 3), name="b")
        total = a + b  # fine for any batch size at build time; equal sizes needed at run time
    assert total.shape == (None, 3)
    out = tfl.Session(g).run(total, feed={a: np.ones((2, 3)), b: np.ones((2, 3))})
    np.testing.assert_array_equal(out, np.full((2, 3), 2.0))


def test_a_shape_mismatch_at_run_time_is_a_shape_error() -> None:
    with tfl.Graph() as g:
        a = tfl.placeholder((None, 3), name="a")
        b = tfl.placeholder((None, 3), name="b")
        total = a + b
    with pytest.raises(tfl.ShapeError, match="add"):
        tfl.Session(g).run(total, feed={a: np.ones((4, 3)), b: np.ones((5, 3))})


# --- Errors ------------------------------------------------------------------------------------


def test_a_missing_feed_names_the_placeholder() -> None:
    g, x, _, _, s = build_two_branches()
    with pytest.raises(tfl.TeachflowError, match="%z") as info:
        tfl.Session(g).run(s, feed={x: np.ones((2, 3))})
    assert "not fed" in str(info.value)
    assert "%x" not in info.value.message  # x was fed
    assert info.value.location.filename == __file__


def test_no_feed_at_all_names_every_missing_placeholder() -> None:
    g, _, _, _, s = build_two_branches()
    with pytest.raises(tfl.TeachflowError, match="%x, %z"):
        tfl.Session(g).run(s)


@pytest.mark.parametrize("key", ["x", 0, tfl.ones(2, 3)], ids=["name", "int", "eager_tensor"])
def test_a_feed_key_that_is_not_a_placeholder_is_refused(key) -> None:
    g, x, _, y, _ = build_two_branches()
    with pytest.raises(tfl.TeachflowError, match="not a placeholder of this graph"):
        tfl.Session(g).run(y, feed={x: np.ones((2, 3)), key: np.ones((2, 3))})


def test_a_computed_tensor_of_the_graph_is_not_a_feed_key() -> None:
    g, x, _, y, s = build_two_branches()
    with pytest.raises(tfl.TeachflowError, match="not a placeholder of this graph"):
        tfl.Session(g).run(y, feed={x: np.ones((2, 3)), s: np.ones((2, 3))})


def test_a_placeholder_of_another_graph_is_not_a_feed_key() -> None:
    g, x, _, y, _ = build_two_branches()
    with tfl.Graph():
        other = tfl.placeholder((None, 3), name="other")
    with pytest.raises(tfl.TeachflowError, match="not a placeholder of this graph") as info:
        tfl.Session(g).run(y, feed={x: np.ones((2, 3)), other: np.ones((2, 3))})
    assert "%other" in str(info.value)


@pytest.mark.parametrize("shape", [(4, 2), (3,), (1, 4, 3)])
def test_a_feed_of_the_wrong_shape_names_the_placeholder(shape) -> None:
    g, x, _, y, _ = build_two_branches()
    with pytest.raises(tfl.ShapeError) as info:
        tfl.Session(g).run(y, feed={x: np.ones(shape)})
    message = str(info.value)
    assert "%x" in message and "(None, 3)" in message and str(shape) in message
    assert info.value.location.filename == __file__


def test_a_fixed_dimension_must_match_exactly() -> None:
    with tfl.Graph() as g:
        k = tfl.placeholder((2, 3), name="k")
        doubled = k * 2
    with pytest.raises(tfl.ShapeError, match="%k"):
        tfl.Session(g).run(doubled, feed={k: np.ones((3, 3))})


@pytest.mark.parametrize("value", [np.ones(2), np.array([0.5, 1.5], np.float32),
                                   np.ones(2, np.complex64)], ids=["f64", "f32", "c64"])
def test_floats_fed_to_an_int_placeholder_are_refused(value) -> None:
    with tfl.Graph() as g:
        k = tfl.placeholder((2,), dtype="int64", name="k")
        doubled = k * 2
    with pytest.raises(tfl.DTypeError) as info:
        tfl.Session(g).run(doubled, feed={k: value})
    message = str(info.value)
    assert "%k" in message and "int64" in message and value.dtype.name in message


def test_ints_fed_to_an_int_placeholder_are_accepted() -> None:
    with tfl.Graph() as g:
        k = tfl.placeholder((2,), dtype="int64", name="k")
        doubled = k * 2
    out = tfl.Session(g).run(doubled, feed={k: np.array([1, 2], np.int32)})
    assert out.dtype == np.int64
    np.testing.assert_array_equal(out, [2, 4])


def test_complex_fed_to_a_float_placeholder_is_refused() -> None:
    g, x, _, y, _ = build_two_branches()
    with pytest.raises(tfl.DTypeError, match="%x"):
        tfl.Session(g).run(y, feed={x: np.ones((2, 3), np.complex64)})


@pytest.mark.parametrize("fetch", [tfl.ones(3), None, "y", np.ones(3)],
                         ids=["eager_tensor", "None", "str", "ndarray"])
def test_fetching_something_that_is_not_a_tensor_of_this_graph(fetch) -> None:
    g, x, _, _, _ = build_two_branches()
    with pytest.raises(tfl.TeachflowError, match="not a tensor of this graph"):
        tfl.Session(g).run(fetch, feed={x: np.ones((2, 3))})


def test_fetching_a_tensor_from_another_graph() -> None:
    g, x, _, _, _ = build_two_branches()
    with tfl.Graph():
        q = tfl.placeholder((3,), name="q")
        elsewhere = q * 2
    with pytest.raises(tfl.TeachflowError, match="not a tensor of this graph") as info:
        tfl.Session(g).run(elsewhere, feed={x: np.ones((2, 3))})
    assert "%1: f32[3]" in str(info.value)  # names the tensor it was given
    assert info.value.location.filename == __file__


def test_mixing_tensors_of_two_graphs_while_building_is_refused() -> None:
    with tfl.Graph():
        outer = tfl.placeholder((2,), name="outer")
    with tfl.Graph(), pytest.raises(tfl.TraceError, match="another graph"):
        outer + tfl.placeholder((2,), name="inner")


def test_using_a_graph_tensor_after_its_block_says_to_build_inside_it() -> None:
    with tfl.Graph():
        x = tfl.placeholder((None, 3), name="x")
        y = x * 2
    with pytest.raises(tfl.TeachflowError) as info:
        y.sum()
    assert info.value.location.filename == __file__
    assert re.search(r"with .*Graph", str(info.value))


# --- Gradients over sizes known only when the graph runs -----------------------------------------


@pytest.mark.parametrize("loss", [
    lambda x: (x * x).sum(),
    lambda x: (x * x).mean(),
    lambda x: (x * x).max(),
    lambda x: (x * x).sum(axis=0).sum(),
    lambda x: x.mean(axis=0, keepdims=True).sum() + x.mean(axis=1).sum(),
    lambda x: tfl.softmax(x, axis=0).max(axis=0).sum() + tfl.log_softmax(x).mean(),
    lambda x: (x @ tfl.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])).tanh().sum(),
    lambda x: (x + tfl.tensor([1.0, 2.0, 3.0])).sum(),
    lambda x: (x.reshape(-1) ** 2).sum(),
    lambda x: x[:, 1].sum() + x.T.sum(),
    lambda x: (x @ tfl.tensor([1.0, 2.0, 3.0])).tanh().sum(),
    lambda x: (tfl.tensor([1.0, 2.0, 3.0]) @ x.T).tanh().sum(),
], ids=["sum", "mean", "max", "sum-axis", "mean-axes", "softmax", "matmul", "broadcast",
        "reshape", "index", "matrix-vector", "vector-matrix"])
def test_gradients_through_a_none_dimension_in_direct_construction(loss) -> None:
    rng = np.random.default_rng(1)
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), name="x")
        dx = tfl.grad(loss)(x)
    assert dx.shape == (None, 3)
    session = tfl.Session(g)
    for rows in (2, 5):  # one graph, any batch size
        data = rng.standard_normal((rows, 3)).astype(np.float32)
        want = tfl.grad(loss)(tfl.tensor(data)).numpy()
        np.testing.assert_allclose(session.run(dx, feed={x: data}), want, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("loss", [
    lambda x: (x.reshape(-1) ** 3).sum(),
    lambda x: (x[1:] ** 3).sum(),
    lambda x: (tfl.softmax(x, axis=0) * tfl.tensor([1.0, 2.0, 3.0])).sum(),
    lambda x: x.var(axis=0).sum() * 2.0,
    lambda x: ((x - x.mean(axis=0, keepdims=True)) ** 3).sum(),
    lambda x: (x[tfl.tensor([2, 0, 1, 1])] ** 3).sum(),
], ids=["reshape", "slice", "softmax", "var", "centred", "gather"])
def test_second_order_gradients_through_a_none_dimension(loss) -> None:
    """The first gradient has ops that take a size from a tensor at run time (reshape_like,
    sum_like, scatter); their size operand has no gradient of its own."""
    square = lambda x: (tfl.grad(loss)(x) ** 2).sum()
    rng = np.random.default_rng(2)
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), name="x")
        d2 = tfl.grad(square)(x)
    staged = tfl.function(tfl.grad(square), input_signature=[tfl.TensorSpec((None, 3))])
    for rows in (3, 5):
        data = rng.standard_normal((rows, 3)).astype(np.float32)
        want = tfl.grad(square)(tfl.tensor(data)).numpy()
        np.testing.assert_allclose(tfl.Session(g).run(d2, feed={x: data}), want, rtol=1e-4,
                                   atol=1e-5)
        np.testing.assert_allclose(staged(tfl.tensor(data)).numpy(), want, rtol=1e-4, atol=1e-5)


def test_the_gradient_of_broadcast_to_sums_back_over_sizes_known_at_run_time() -> None:
    loss = lambda x: (tfl.broadcast_to(x, (2, 3)) * tfl.tensor([1.0, 2.0, 3.0])).sum()
    with tfl.Graph() as g:
        x = tfl.placeholder((None, None), name="x")
        dx = tfl.grad(loss)(x)
    staged = tfl.function(tfl.grad(loss), input_signature=[tfl.TensorSpec((None, None))])
    for shape in ((2, 1), (1, 3), (2, 3)):
        data = np.ones(shape, np.float32)
        want = tfl.grad(loss)(tfl.tensor(data)).numpy()
        np.testing.assert_array_equal(tfl.Session(g).run(dx, feed={x: data}), want)
        np.testing.assert_array_equal(staged(tfl.tensor(data)).numpy(), want)


@pytest.mark.parametrize("normalise", [tfl.softmax, tfl.log_softmax])
def test_softmax_over_a_none_dimension_that_is_empty_when_the_graph_runs(normalise) -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), name="x")
        y = normalise(x, axis=0)
    staged = tfl.function(lambda x: normalise(x, axis=0),
                          input_signature=[tfl.TensorSpec((None, 3))])
    for rows in (0, 2):
        data = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        want = normalise(tfl.tensor(data), axis=0).numpy()
        with np.errstate(divide="ignore"):  # (log of the empty sum: no values to take it of)
            np.testing.assert_allclose(tfl.Session(g).run(y, feed={x: data}), want, rtol=1e-6)
            np.testing.assert_allclose(staged(tfl.tensor(data)).numpy(), want, rtol=1e-6)


def test_the_gradient_into_a_known_operand_sums_over_the_unknown_batch() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), name="x")
        b = tfl.placeholder((3,), name="b")
        db = tfl.grad(lambda b: ((x + b) ** 2).sum())(b)
    data, bias = np.ones((4, 3), np.float32), np.array([1.0, 2.0, 3.0], np.float32)
    np.testing.assert_allclose(tfl.Session(g).run(db, feed={x: data, b: bias}),
                               2 * (data + bias).sum(axis=0))


# --- Sizes known only when the graph runs -------------------------------------------------------


@pytest.mark.parametrize("make", [tfl.zeros_like, tfl.ones_like,
                                  lambda x: tfl.full_like(x, 2.5)], ids=["zeros", "ones", "full"])
def test_like_tensors_take_an_unknown_size_when_the_graph_runs(make) -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), name="x")
        y = x + make(x)
    assert y.shape == (None, 3)
    session = tfl.Session(g)
    for rows in (1, 4):
        data = np.arange(rows * 3, dtype=np.float32).reshape(rows, 3)
        want = (tfl.tensor(data) + make(tfl.tensor(data))).numpy()
        np.testing.assert_array_equal(session.run(y, feed={x: data}), want)


def test_python_sizes_of_an_unknown_dimension_are_explained() -> None:
    """len(x), a loop over rows, or a size used as a number need the size now: a clear error."""
    with tfl.Graph():
        x = tfl.placeholder((None, 3), name="x")
        with pytest.raises(tfl.TraceError, match=r"len\(\) of a tensor of shape \(None, 3\)"):
            len(x)
        with pytest.raises(tfl.TraceError, match="known only when the graph runs"):
            [row.sum() for row in x]
        with pytest.raises(tfl.ShapeError, match=r"the shape \(None, -1\) has a size known only"):
            x.reshape(x.shape[0], -1)
        with pytest.raises(tfl.DTypeError, match="None is not a tensor") as info:
            x.sum() / x.shape[0]
        assert "None until the graph runs" in info.value.hint
        assert len(x[0]) == 3  # a known size is an int as ever


# --- Mistakes in building and feeding -----------------------------------------------------------


def test_a_placeholder_shape_is_checked_and_an_int_is_one_dimension() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder(3, name="x")
        for bad in [(-1, 3), (2.5,), "3", (True, 2), None]:
            with pytest.raises(tfl.ShapeError, match="a shape is a tuple of sizes") as info:
                tfl.placeholder(bad)
            assert info.value.op == "placeholder"
    assert x.shape == (3,)
    np.testing.assert_array_equal(tfl.Session(g).run(x, feed={x: [1, 2, 3]}), [1, 2, 3])


def test_a_feed_that_is_not_a_dict_or_not_an_array_is_explained() -> None:
    g, x, _, y, _ = build_two_branches()
    session = tfl.Session(g)
    with pytest.raises(tfl.TeachflowError, match="feed is a dict from placeholders to values, "
                                                 "not list"):
        session.run(y, feed=[(x, np.ones((2, 3)))])
    with pytest.raises(tfl.ShapeError, match="the value fed to placeholder %x is not an array"):
        session.run(y, feed={x: [[1, 2, 3], [1, 2]]})
    np.testing.assert_array_equal(session.run(y, feed={x: np.ones((2, 3))}), [6, 6])  # unharmed


@pytest.mark.parametrize("graph", [None, "g", lambda: None])
def test_a_session_runs_a_graph_and_nothing_else(graph) -> None:
    with pytest.raises(tfl.TeachflowError, match="a Session runs a Graph, not"):
        tfl.Session(graph)


def test_a_fetched_array_is_its_own_not_a_view_of_the_feed() -> None:
    with tfl.Graph() as g:
        p = tfl.placeholder((2, 3), name="p")
        flat = p.reshape(6)
    feed = np.ones((2, 3), np.float32)
    same, reshaped = tfl.Session(g).run([p, flat], feed={p: feed})
    feed[:] = 7.0  # the caller reuses its buffer
    assert same.sum() == 6.0 and reshaped.sum() == 6.0
