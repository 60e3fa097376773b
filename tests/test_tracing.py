"""Tracing: running ordinary Python with the staging interpreter behind `bind`.

What a learner should take from the tracing lesson, as tests: `tfl.trace` records a `Graph`;
Python loops unroll; Python side effects happen once, at trace time; control flow on a tensor's
*value* cannot be traced and says so (pointing at the learner's own line, and at `tfl.script`,
`tfl.cond` and `tfl.while_loop`); everything static (shapes, `len`) works; eager tensors are
captured by reference, NumPy arrays and Python scalars become constants and literals; creation
and random ops become nodes, and random nodes draw anew on every call.
"""

from __future__ import annotations

import os

import numpy as np
import pytest

import teachflow as tfl

HERE = os.path.basename(__file__)


def ops_of(graph: tfl.Graph) -> list[str]:
    return [node.op.name for node in graph.nodes]


# --- tfl.trace returns a Graph ------------------------------------------------------------------


def _affine(x, w):
    return (x @ w).relu().sum(axis=1)


def test_trace_returns_a_graph_with_inputs_nodes_and_outputs() -> None:
    graph = tfl.trace(_affine, tfl.ones(4, 3), tfl.ones(3, 2))
    assert isinstance(graph, tfl.Graph)
    assert [v.name for v in graph.inputs] == ["x", "w"]
    assert [v.spec for v in graph.inputs] == [tfl.TensorSpec((4, 3), np.float32),
                                             tfl.TensorSpec((3, 2), np.float32)]
    assert ops_of(graph) == ["matmul", "relu", "sum"]
    assert len(graph) == 3
    assert len(graph.outputs) == 1
    assert graph.outputs[0] is graph.nodes[-1].output
    assert graph.outputs[0].spec == tfl.TensorSpec((4,), np.float32)
    graph.verify()


def test_trace_records_nothing_but_shapes_and_runs_no_kernel() -> None:
    # The traced inputs are never computed with: a NaN input changes nothing in the graph.
    graph = tfl.trace(_affine, tfl.full((4, 3), float("nan")), tfl.ones(3, 2))
    assert str(graph) == str(tfl.trace(_affine, tfl.zeros(4, 3), tfl.ones(3, 2)))


def test_trace_accepts_keyword_arguments_and_names_inputs_after_them() -> None:
    def scaled(x, *, scale):
        return x * scale

    graph = tfl.trace(scaled, tfl.ones(2), scale=tfl.ones(2))
    assert [v.name for v in graph.inputs] == ["x", "scale"]
    assert ops_of(graph) == ["mul"]


def test_trace_of_the_identity_has_no_nodes_and_returns_its_input() -> None:
    graph = tfl.trace(lambda x: x, tfl.ones(3))
    assert len(graph) == 0
    assert graph.outputs == [graph.inputs[0]]


def test_trace_keeps_nodes_the_result_does_not_need() -> None:
    # The raw trace is what Python did; removing dead code is a pass's job (dce), not tracing's.
    def wasteful(x):
        x.exp()
        return x + 1

    assert ops_of(tfl.trace(wasteful, tfl.ones(3))) == ["exp", "add"]


# --- Python loops unroll ------------------------------------------------------------------------


@pytest.mark.parametrize("steps", [0, 1, 5])
def test_a_python_for_loop_unrolls_into_one_node_per_iteration(steps: int) -> None:
    def repeated(x, n):
        for _ in range(n):
            x = x * 2.0 + 1.0
        return x

    graph = tfl.trace(repeated, tfl.ones(3), steps)
    assert ops_of(graph) == ["mul", "add"] * steps
    assert len(graph.inputs) == 1  # `n` is static: part of the program, not an input


def test_a_python_helper_function_is_inlined() -> None:
    def layer(x):
        return (x * 3.0).tanh()

    def net(x):
        return layer(layer(x))

    assert ops_of(tfl.trace(net, tfl.ones(2))) == ["mul", "tanh", "mul", "tanh"]


def test_an_unrolled_loop_computes_what_the_eager_loop_computes() -> None:
    def repeated(x):
        for i in range(4):
            x = x * 0.5 + i
        return x

    staged = tfl.function(repeated)
    x = tfl.tensor([1.0, -2.0, 3.0])
    np.testing.assert_allclose(staged(x).numpy(), repeated(x).numpy())
    assert len(staged.concrete_functions[0].graph) <= 8


# --- Python side effects happen at trace time only ----------------------------------------------


def test_print_and_append_happen_while_tracing_only(capsys) -> None:
    calls = []

    @tfl.function
    def noisy(x):
        calls.append("traced")
        print("tracing noisy")
        return x + 1

    with pytest.warns(tfl.SideEffectWarning, match=r"calls\[0\] \(set\)"):
        noisy(tfl.ones(3))  # the append is a change of Python state: it happens this once
    noisy(tfl.zeros(3))
    noisy(tfl.full((3,), 7.0))
    assert calls == ["traced"]
    assert capsys.readouterr().out.count("tracing noisy") == 1
    with pytest.warns(tfl.SideEffectWarning):
        out = noisy(tfl.ones(5))  # a new shape: a new trace runs the Python body again
    assert calls == ["traced", "traced"]
    assert capsys.readouterr().out.count("tracing noisy") == 1
    np.testing.assert_allclose(out.numpy(), 2.0)


def test_a_python_counter_in_the_body_is_frozen_into_the_trace() -> None:
    counter = {"n": 0}

    @tfl.function
    def step(x):
        counter["n"] += 1
        return x * counter["n"]

    x = tfl.ones(2)
    with pytest.warns(tfl.SideEffectWarning, match=r"counter\['n'\]: 0 -> 1"):
        first = step(x)
    second = step(x)
    assert counter["n"] == 1
    np.testing.assert_allclose(first.numpy(), 1.0)
    np.testing.assert_allclose(second.numpy(), 1.0)  # eagerly it would be 2: the trace froze it


def test_a_traced_tensor_can_be_printed_while_tracing(capsys) -> None:
    def show(x):
        y = x * 2
        print(x, y)
        return y

    tfl.trace(show, tfl.ones(3))
    printed = capsys.readouterr().out
    assert "%x" in printed and "f32[3]" in printed and "traced" in printed


# --- Control flow on a tensor's value: TraceError ------------------------------------------------
# In each function below the offending line is the *first line of the body*, so the error must
# point at ``co_firstlineno + 1`` of this file.


def _if_on_tensor(x):
    if x.sum() > 0:
        return x
    return -x


def _while_on_tensor(x):
    while x.sum() < 100:
        x = x * 2
    return x


def _bool_of_scalar(x):
    flag = bool(x.sum())
    return x * flag


def _and_on_scalar(x):
    y = x.max() > 0 and x
    return y


def _float_of_scalar(x):
    scale = float(x.mean())
    return x * scale


def _int_of_scalar(x):
    n = int(x.sum())
    return x * n


def _item(x):
    m = x.max().item()
    return x - m


def _numpy(x):
    values = x.numpy()
    return x + values


def _asarray(x):
    values = np.asarray(x)
    return x + values


CONTROL_FLOW = [_if_on_tensor, _while_on_tensor, _bool_of_scalar, _and_on_scalar]
NEEDS_A_VALUE = [*CONTROL_FLOW, _float_of_scalar, _int_of_scalar, _item, _numpy, _asarray]


@pytest.mark.parametrize("fn", NEEDS_A_VALUE, ids=lambda f: f.__name__.strip("_"))
def test_python_code_that_needs_a_traced_value_raises_trace_error(fn) -> None:
    with pytest.raises(tfl.TraceError) as info:
        tfl.trace(fn, tfl.ones(3))
    err = info.value
    message = str(err)
    assert "values exist only when the graph runs" in message
    if fn in CONTROL_FLOW:  # choosing a path: compute both, choose with where
        assert "one path" in message and "tfl.where" in err.hint and "lesson 2" in err.hint \
            and "lesson 4" in err.hint
    else:  # reading values: not about paths at all
        assert "path" not in message and ".numpy()" in err.hint
    for name in ("tfl.script", "tfl.cond", "tfl.while_loop"):  # not there yet: never named
        assert name not in message or hasattr(tfl, name.split(".")[1]), message
    # It points at the learner's line, with that line's text.
    assert err.location is not None
    assert err.location.filename == __file__
    assert err.location.lineno == fn.__code__.co_firstlineno + 1
    assert f"{HERE}:{fn.__code__.co_firstlineno + 1}" in message
    assert err.location.line in message


@pytest.mark.parametrize("fn", [_if_on_tensor, _while_on_tensor, _item],
                         ids=lambda f: f.__name__.strip("_"))
def test_the_same_trace_error_comes_from_a_staged_function_call(fn) -> None:
    staged = tfl.function(fn)
    with pytest.raises(tfl.TraceError, match="values exist only when the graph runs") as info:
        staged(tfl.ones(3))
    assert info.value.location.lineno == fn.__code__.co_firstlineno + 1
    assert staged.trace_count == 0  # a failed trace leaves no concrete function behind


def _index_with_tensor(x):
    y = x[x.sum().astype("int64")]
    return y


def _mask_with_tensor(x):
    y = x[x > 0]
    return y


def test_indexing_with_a_traced_mask_raises_trace_error() -> None:
    fn = _mask_with_tensor
    with pytest.raises(tfl.TraceError, match="traced mask") as info:
        tfl.trace(fn, tfl.ones(3))
    assert info.value.location.filename == __file__
    assert info.value.location.lineno == fn.__code__.co_firstlineno + 1


def test_indexing_with_a_traced_integer_tensor_is_a_gather() -> None:
    # The result's shape is the index's: traceable (the positions arrive when the graph runs).
    graph = tfl.trace(_index_with_tensor, tfl.tensor([0.5, 0.5, 1.5]))
    assert [n.op.name for n in graph.nodes][-1] == "gather"
    x = tfl.tensor([0.5, 0.5, 1.5])  # sums to 2.5: index 2
    np.testing.assert_array_equal(tfl.function(_index_with_tensor)(x).numpy(),
                                  _index_with_tensor(x).numpy())


def test_the_same_functions_run_eagerly() -> None:
    # Not a limitation of the code, only of tracing: eagerly every value is known.
    x = tfl.tensor([1.0, 2.0, 3.0])
    np.testing.assert_allclose(_if_on_tensor(x).numpy(), [1.0, 2.0, 3.0])
    np.testing.assert_allclose(_float_of_scalar(x).numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(_item(x).numpy(), [-2.0, -1.0, 0.0])


def test_bool_of_a_many_element_traced_tensor_is_ambiguous_as_it_is_eagerly() -> None:
    # Its shape alone decides this one, so tracing gives the eager error, not a TraceError.
    def truth(x):
        return bool(x)

    with pytest.raises(tfl.ShapeError, match="ambiguous") as traced:
        tfl.trace(truth, tfl.ones(3))
    with pytest.raises(tfl.ShapeError, match="ambiguous") as eager:
        truth(tfl.ones(3))
    assert traced.value.message == eager.value.message


def test_control_flow_on_a_static_argument_traces_one_branch() -> None:
    def branchy(x, training):
        if training:
            return x * 0.5
        return x

    assert ops_of(tfl.trace(branchy, tfl.ones(2), True)) == ["mul"]
    assert ops_of(tfl.trace(branchy, tfl.ones(2), False)) == []


# --- What is static works while tracing ---------------------------------------------------------


def test_len_shape_arithmetic_and_iteration_over_the_first_dimension() -> None:
    def rows_scaled(x):
        n = len(x)
        rows = [row * (i + 1) for i, row in enumerate(x)]
        flat = tfl.stack(rows).reshape(n * x.shape[1])
        return flat / (x.ndim * x.size)

    x = tfl.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    graph = tfl.trace(rows_scaled, x)
    assert ops_of(graph).count("getitem") == 3  # one per row: iteration unrolled
    assert [n.params["index"] for n in graph.nodes if n.op.name == "getitem"] == [
        (0,), (1,), (2,)]
    assert graph.outputs[0].spec.shape == (6,)
    staged = tfl.function(rows_scaled)
    np.testing.assert_allclose(staged(x).numpy(), rows_scaled(x).numpy())
    np.testing.assert_allclose(staged(x).numpy(), [1, 2, 6, 8, 15, 18] / np.float32(12))


def test_shape_dtype_and_ndim_of_traced_tensors_are_known() -> None:
    seen = {}

    def inspect_specs(x):
        y = x.sum(axis=0)
        seen.update(shape=y.shape, dtype=y.dtype, ndim=y.ndim, device=y.device)
        return y

    tfl.trace(inspect_specs, tfl.ones(4, 5, dtype="float64"))
    assert seen == {"shape": (5,), "dtype": np.float64, "ndim": 1, "device": "cpu"}


# --- Eager tensors are captured by reference -----------------------------------------------------


def test_an_eager_tensor_used_inside_is_a_capture_not_an_input() -> None:
    w = tfl.tensor([1.0, 2.0, 3.0])

    def scale(x):
        return x * w + w

    graph = tfl.trace(scale, tfl.ones(3))
    assert len(graph.inputs) == 1
    assert len(graph.captures) == 1  # used twice, captured once
    assert graph.captures[0].data.tensor() is w and graph.captures[0].name == "w"
    assert graph.captures[0].kind == "capture"
    assert graph.nodes[0].inputs[1] is graph.captures[0]


@pytest.mark.parametrize("requires_grad", [False, True], ids=["tensor", "parameter"])
def test_updating_a_captured_tensor_in_place_changes_the_next_call(requires_grad: bool) -> None:
    w = tfl.tensor([1.0, 2.0, 3.0], requires_grad=requires_grad)

    @tfl.function
    def scale(x):
        return x * w

    x = tfl.ones(3)
    np.testing.assert_allclose(scale(x).numpy(), [1.0, 2.0, 3.0])
    with tfl.no_grad():
        w -= 1
    np.testing.assert_allclose(scale(x).numpy(), [0.0, 1.0, 2.0])
    with tfl.no_grad():
        w *= 10
    np.testing.assert_allclose(scale(x).numpy(), [0.0, 10.0, 20.0])
    assert scale.trace_count == 1


def test_numpy_arrays_become_constants_and_python_scalars_literals() -> None:
    offset = np.array([1.0, 2.0, 3.0], dtype=np.float32)

    def shift(x):
        return x * 2.5 + offset - 1

    graph = tfl.trace(shift, tfl.ones(3))
    assert len(graph.captures) == 0
    assert len(graph.constants) == 1
    np.testing.assert_array_equal(graph.constants[0].data, offset)
    assert graph.constants[0].spec == tfl.TensorSpec((3,), np.float32)
    mul, add, sub = graph.nodes
    assert mul.inputs == (graph.inputs[0], 2.5)  # a literal operand, not a value
    assert add.inputs[1] is graph.constants[0]
    assert sub.inputs[1] == 1 and type(sub.inputs[1]) is int
    np.testing.assert_allclose(tfl.function(shift)(tfl.ones(3)).numpy(), [2.5, 3.5, 4.5])


def test_a_python_list_operand_becomes_a_constant() -> None:
    graph = tfl.trace(lambda x: x + [1.0, 2.0], tfl.ones(2))
    assert len(graph.constants) == 1
    assert graph.constants[0].spec.dtype == np.float32  # lists follow tfl.tensor's rules


def test_a_numpy_constant_is_fixed_when_traced() -> None:
    offset = np.array([1.0, 2.0], dtype=np.float32)

    @tfl.function
    def shift(x):
        return x + offset

    np.testing.assert_allclose(shift(tfl.zeros(2)).numpy(), [1.0, 2.0])
    offset[:] = 100.0
    np.testing.assert_allclose(shift(tfl.zeros(2)).numpy(), [1.0, 2.0])


# --- Creation and random ops ---------------------------------------------------------------------


def test_tracing_a_function_that_creates_tensors() -> None:
    def padded(x):
        return (tfl.zeros(x.shape) + x, tfl.ones(2, len(x)) * 3, tfl.randn(*x.shape) * 0)

    graph = tfl.trace(padded, tfl.ones(4))
    assert ops_of(graph).count("full") == 2
    assert ops_of(graph).count("normal") == 1
    assert len(graph.captures) == 0  # created inside: nodes of the graph, not captures
    a, b, c = tfl.function(padded)(tfl.tensor([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(a.numpy(), [1.0, 2.0, 3.0, 4.0])
    np.testing.assert_allclose(b.numpy(), np.full((2, 4), 3.0))
    assert c.shape == (4,) and c.dtype == np.float32


def test_random_ops_draw_anew_on_every_call_of_the_staged_function() -> None:
    @tfl.function
    def noisy(x):
        return x + tfl.randn(*x.shape)

    x = tfl.zeros(1000)
    first, second = noisy(x).numpy(), noisy(x).numpy()
    assert noisy.trace_count == 1
    assert not np.allclose(first, second)
    assert abs(first.mean()) < 0.2 and 0.8 < first.std() < 1.2  # really N(0, 1)
    u = tfl.function(lambda x: x + tfl.rand(*x.shape))
    assert not np.allclose(u(x).numpy(), u(x).numpy())


def test_seeded_staged_draws_repeat_and_match_eager_draws() -> None:
    def noisy(x):
        return x + tfl.randn(*x.shape)

    staged = tfl.function(noisy)
    x = tfl.zeros(5)
    tfl.manual_seed(3)
    eager = noisy(x).numpy()
    tfl.manual_seed(3)
    first = staged(x).numpy()  # traces (draws nothing) then runs (draws once)
    tfl.manual_seed(3)
    again = staged(x).numpy()
    np.testing.assert_array_equal(first, eager)
    np.testing.assert_array_equal(again, eager)


# --- What tracing must refuse cleanly ------------------------------------------------------------


def test_a_traced_tensor_cannot_leak_into_another_trace() -> None:
    leaked = []

    def keep(x):
        leaked.append(x)
        return x * 2

    with pytest.raises(tfl.TraceError, match="was given a tensor of the trace"):
        tfl.trace(keep, tfl.ones(2))  # found at once, when the trace ends ...
    assert leaked == []  # ... and undone

    def smuggle(x):  # a place tracing does not watch: found when the tensor is used again
        keep.__dict__.setdefault("box", []).append(x)
        return x

    tfl.trace(smuggle, tfl.ones(2))
    with pytest.raises(tfl.TraceError, match="another graph"):
        tfl.trace(lambda y: y + keep.box[0], tfl.ones(2))


def test_a_placeholder_inside_a_traced_function_is_refused() -> None:
    def with_placeholder(x):
        return x + tfl.placeholder((3,), name="p")

    with pytest.raises(tfl.TraceError, match="placeholder"):
        tfl.function(with_placeholder)(tfl.ones(3))
