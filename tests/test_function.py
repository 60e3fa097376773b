"""`tfl.function`: a polymorphic function with one concrete function per input signature.

The contract, as tests: a call with a signature seen before runs the cached concrete function
without running Python; a new shape, dtype, Python value or argument structure traces again, and
`retrace_reasons` says why in a sentence; concrete functions can be asked for, inspected (`.graph`,
`.source`) and called; arguments and results may be nested containers; methods work, capturing
the instance's tensors; too many retraces warn; the generated executor is readable Python; and
gradients flow through a staged call to the tensors (and captured parameters) that need them.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import functools
import gc
import os
import re
import tracemalloc
import types
import warnings
import weakref

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.backends import CPU
from teachflow.ops import OPS
from teachflow.tracing.builder import is_tracing

HERE = os.path.basename(__file__)

# Each test runs by both routes of a staged call: the fast path, and the plain route alone.
pytestmark = pytest.mark.usefixtures("each_route")


def count_kernel_calls(monkeypatch, name: str) -> list:
    """Make the CPU kernel of op `name` count its calls (eager and generated code share it)."""
    calls = []
    op = OPS[name]
    kernel = CPU.kernels[op]

    def counting(*args, **params):
        calls.append(name)
        return kernel(*args, **params)

    monkeypatch.setitem(CPU.kernels, op, counting)
    return calls


def scale(x, n):
    return x * n


# --- Same signature: no retrace ------------------------------------------------------------------


def test_the_same_signature_runs_the_cached_concrete_function(monkeypatch) -> None:
    runs = []

    @tfl.function(verify=False)  # verifying the passes would run kernels while compiling
    def double(x):
        runs.append(1)
        return x * 2

    mul_calls = count_kernel_calls(monkeypatch, "mul")
    with pytest.warns(tfl.SideEffectWarning, match="runs"):  # (only the first call traces)
        results = [double(tfl.full((3, 4), float(i))) for i in range(4)]
    assert double.trace_count == 1
    assert runs == [1]  # the Python body ran once, to trace
    assert len(mul_calls) == 4  # the graph ran on every call
    assert double.retrace_reasons == []
    for i, r in enumerate(results):
        np.testing.assert_allclose(r.numpy(), np.full((3, 4), 2.0 * i))


def test_the_same_python_value_does_not_retrace() -> None:
    f = tfl.function(scale)
    x = tfl.ones(3)
    f(x, 2)
    f(tfl.zeros(3), 2)
    assert f.trace_count == 1


def test_a_numpy_array_argument_is_dynamic_like_a_tensor() -> None:
    f = tfl.function(scale)
    a = f(np.ones(3, dtype=np.float32), 2.0)
    b = f(np.full(3, 5.0, dtype=np.float32), 2.0)
    assert f.trace_count == 1
    np.testing.assert_allclose(a.numpy(), 2.0)
    np.testing.assert_allclose(b.numpy(), 10.0)


# --- New signature: retrace, with a reason -------------------------------------------------------


def test_a_new_shape_retraces_and_says_which_argument_changed() -> None:
    f = tfl.function(scale)
    f(tfl.ones(3, 4), 2)
    f(tfl.ones(5, 4), 2)
    assert f.trace_count == 2
    assert f.retrace_reasons == ["argument x: shape (3, 4) -> (5, 4)"]


def test_a_new_dtype_retraces() -> None:
    f = tfl.function(scale)
    f(tfl.ones(3), 2)
    out = f(tfl.ones(3, dtype="float64"), 2)
    assert out.dtype == np.float64
    assert f.retrace_reasons == ["argument x: dtype float32 -> float64"]


def test_a_new_python_value_retraces() -> None:
    f = tfl.function(scale)
    x = tfl.ones(2)
    f(x, 2)
    out = f(x, 3)
    f(x, 2)  # seen before: no retrace
    assert f.trace_count == 2
    assert f.retrace_reasons == ["argument n: Python value 2 -> 3"]
    np.testing.assert_allclose(out.numpy(), 3.0)


def test_a_python_value_of_another_type_retraces() -> None:
    # 1 == 1.0, but x * 1 and x * 1.0 are different programs (for an int tensor, different dtypes).
    f = tfl.function(scale)
    x = tfl.tensor([1, 2], dtype="int64")
    assert f(x, 1).dtype == np.int64
    assert f(x, 1.0).dtype == np.float64
    assert f.retrace_reasons == ["argument n: Python value 1 -> 1.0"]


def test_several_changes_are_all_named() -> None:
    f = tfl.function(scale)
    f(tfl.ones(3), 2)
    f(tfl.ones(4, dtype="float64"), 5)
    assert f.retrace_reasons == [
        "argument x: shape (3,) -> (4,), dtype float32 -> float64; "
        "argument n: Python value 2 -> 5"]


def test_a_tensor_replaced_by_a_python_value_retraces() -> None:
    f = tfl.function(scale)
    x = tfl.ones(2)
    f(x, tfl.ones(2))
    f(x, 3.0)
    assert f.retrace_reasons == ["argument n: a tensor -> Python value 3.0"]


def test_a_new_structure_retraces() -> None:
    @tfl.function
    def total(xs):
        return tfl.stack(xs).sum(axis=0)

    total([tfl.ones(2), tfl.ones(2)])
    out = total([tfl.ones(2), tfl.ones(2), tfl.ones(2)])
    assert total.trace_count == 2
    assert total.retrace_reasons == ["argument xs: a list of 2 -> a list of 3"]
    np.testing.assert_allclose(out.numpy(), [3.0, 3.0])


def test_one_reason_per_trace_after_the_first() -> None:
    f = tfl.function(scale)
    x = tfl.ones(2)
    for n in [1, 2, 3, 1, 2]:
        f(x, n)
    assert f.trace_count == 3
    assert len(f.retrace_reasons) == 2


def test_a_failed_trace_leaves_no_reason_behind() -> None:
    f = tfl.function(lambda x: x @ x)
    f(tfl.ones(2, 2))
    with pytest.raises(tfl.ShapeError):
        f(tfl.ones(2, 3))
    assert f.trace_count == 1
    assert f.retrace_reasons == []


@pytest.mark.parametrize("second", ["keyword_static", "keyword_tensor"])
def test_passing_the_same_argument_by_keyword_does_not_retrace(second: str) -> None:
    f = tfl.function(scale)
    x = tfl.ones(2)
    if second == "keyword_static":
        f(x, 3)
        f(x, n=3)
    else:
        g = tfl.function(lambda x: x + 1)
        g(x)
        g(x=x)
        f = g
    assert f.trace_count == 1, f.retrace_reasons


def test_passing_a_default_explicitly_does_not_retrace() -> None:
    @tfl.function
    def f(x, n=2):
        return x * n

    x = tfl.ones(2)
    f(x)
    f(x, 2)
    assert f.trace_count == 1, f.retrace_reasons


def test_a_container_type_change_names_the_argument() -> None:
    @tfl.function
    def first(pair):
        return pair[0] + pair[1]

    first((tfl.ones(2), tfl.ones(2)))
    first([tfl.ones(2), tfl.ones(2)])
    assert first.trace_count == 2
    assert "pair" in first.retrace_reasons[0], first.retrace_reasons


# --- Concrete functions --------------------------------------------------------------------------


def test_concrete_functions_lists_one_per_signature() -> None:
    f = tfl.function(scale)
    f(tfl.ones(2), 2)
    f(tfl.ones(3), 2)
    f(tfl.ones(2), 2)
    concrete = f.concrete_functions
    assert len(concrete) == 2
    assert all(isinstance(c, tfl.ConcreteFunction) for c in concrete)
    assert [c.graph.inputs[0].spec.shape for c in concrete] == [(2,), (3,)]


def test_get_concrete_function_traces_without_running(monkeypatch) -> None:
    f = tfl.function(scale, verify=False)  # verifying the passes would run kernels
    mul_calls = count_kernel_calls(monkeypatch, "mul")
    x = tfl.tensor([1.0, 2.0, 3.0])
    cf = f.get_concrete_function(x, 2.0)
    assert isinstance(cf, tfl.ConcreteFunction)
    assert f.trace_count == 1
    assert f.concrete_functions == [cf]
    assert mul_calls == []  # traced and compiled, but nothing computed
    assert f.get_concrete_function(tfl.zeros(3), 2.0) is cf  # same signature: the same one
    np.testing.assert_allclose(cf(x, 2.0).numpy(), [2.0, 4.0, 6.0])
    np.testing.assert_allclose(f(x, 2.0).numpy(), [2.0, 4.0, 6.0])
    assert len(mul_calls) == 2 and f.trace_count == 1


def test_a_concrete_function_has_its_graph_and_source() -> None:
    f = tfl.function(scale, passes=[])
    cf = f.get_concrete_function(tfl.ones(4, 2), 3.0)
    graph = cf.graph
    assert isinstance(graph, tfl.Graph)
    assert [v.name for v in graph.inputs] == ["x"]  # n is static: baked in
    assert graph.inputs[0].spec == tfl.TensorSpec((4, 2), np.float32)
    assert [n.op.name for n in graph.nodes] == ["mul"]
    assert graph.nodes[0].inputs[1] == 3.0
    assert graph.outputs[0].spec == tfl.TensorSpec((4, 2), np.float32)
    assert cf.source.startswith("def scale(x):")
    assert "mul(x, 3.0)" in cf.source
    graph.verify()


def test_without_passes_the_concrete_graph_is_the_raw_trace() -> None:
    def f(x):
        return (x * 1 + 0).exp()

    x = tfl.ones(3)
    cf = tfl.function(f, passes=[]).get_concrete_function(x)
    assert str(cf.graph) == str(tfl.trace(f, x))


@pytest.mark.parametrize("args", [
    (tfl.ones(4), 2.0),  # another shape
    (tfl.ones(3, dtype="float64"), 2.0),  # another dtype
    (tfl.ones(3), 5.0),  # another static value
    (tfl.ones(3),),  # a missing argument
    ([tfl.ones(3)], 2.0),  # another structure
], ids=["shape", "dtype", "value", "missing", "structure"])
def test_calling_a_concrete_function_with_mismatched_arguments_raises(args) -> None:
    cf = tfl.function(scale).get_concrete_function(tfl.ones(3), 2.0)
    with pytest.raises(tfl.TeachflowError, match="traced for") as info:
        cf(*args)
    assert "x: f32[3]" in str(info.value) and "n=2.0" in str(info.value)
    assert info.value.location.filename == __file__


# --- Nested arguments and results, keyword arguments --------------------------------------------


def test_nested_lists_tuples_and_dicts_as_arguments_and_results() -> None:
    @tfl.function
    def step(params, batch):
        w, b = params["layer"]
        y = batch[0] @ w + b
        return {"out": y, "parts": [y.sum(), (y.mean(), "label")]}, 7

    params = {"layer": (tfl.ones(3, 2), tfl.tensor([1.0, -1.0]))}
    batch = [tfl.ones(4, 3)]
    result, seven = step(params, batch)
    assert seven == 7
    assert set(result) == {"out", "parts"}
    assert isinstance(result["parts"], list) and isinstance(result["parts"][1], tuple)
    np.testing.assert_allclose(result["out"].numpy(), np.tile([4.0, 2.0], (4, 1)))
    np.testing.assert_allclose(result["parts"][0].numpy(), 24.0)
    np.testing.assert_allclose(result["parts"][1][0].numpy(), 3.0)
    assert result["parts"][1][1] == "label"
    graph = step.concrete_functions[0].graph
    assert [v.name for v in graph.inputs] == ["params_layer_0", "params_layer_1", "batch_0"]
    step({"layer": (tfl.zeros(3, 2), tfl.zeros(2))}, [tfl.zeros(4, 3)])
    assert step.trace_count == 1


def test_keyword_arguments_tensors_and_static() -> None:
    @tfl.function
    def affine(x, *, w, shift=0.0):
        return x * w + shift

    x, w = tfl.ones(2), tfl.tensor([2.0, 3.0])
    np.testing.assert_allclose(affine(x, w=w, shift=1.0).numpy(), [3.0, 4.0])
    np.testing.assert_allclose(affine(x, shift=1.0, w=w * 2).numpy(), [5.0, 7.0])
    assert affine.trace_count == 1  # keyword order does not matter
    np.testing.assert_allclose(affine(x, w=w, shift=2.0).numpy(), [4.0, 5.0])
    assert affine.trace_count == 2
    assert "Python value 1.0 -> 2.0" in affine.retrace_reasons[0]


def test_keyword_arguments_keep_their_own_names() -> None:
    @tfl.function
    def affine(x, *, w, shift=0.0):
        return x * w + shift

    x, w = tfl.ones(2), tfl.tensor([2.0, 3.0])
    affine(x, w=w, shift=1.0)
    affine(x, w=w, shift=2.0)
    graph = affine.concrete_functions[0].graph
    assert [v.name for v in graph.inputs] == ["x", "w"]
    assert affine.retrace_reasons == ["argument shift: Python value 1.0 -> 2.0"]


def test_a_staged_function_called_from_a_staged_function_is_a_call_then_inlined() -> None:
    inner = tfl.function(lambda x: x.tanh() * 2)

    @tfl.function
    def outer(x):
        return inner(x) + inner(x * 3)

    x = tfl.tensor([0.1, 0.2])
    np.testing.assert_allclose(outer(x).numpy(), 2 * np.tanh([0.1, 0.2]) + 2 * np.tanh([0.3, 0.6]),
                               rtol=1e-6)
    assert inner.trace_count == 1  # its own concrete function, for both calls
    snapshots = outer.concrete_functions[0].compilation.snapshots
    assert [n.op.name for n in snapshots[0].graph.nodes].count("call") == 2  # before the passes
    inlined = snapshots[1]
    assert inlined.pass_name == "inline"
    assert [n.op.name for n in inlined.graph.nodes].count("tanh") == 2


# --- Methods -------------------------------------------------------------------------------------


class Affine:
    def __init__(self, w, b) -> None:
        self.w = tfl.tensor(w, requires_grad=True)
        self.b = tfl.tensor(b, requires_grad=True)

    @tfl.function
    def forward(self, x):
        return (x @ self.w + self.b).tanh()


def test_a_method_captures_the_instance_tensors() -> None:
    # `Affine.forward` is one Function shared by every instance (other tests call it too),
    # so trace counts are compared before and after.
    model = Affine([[1.0, 0.0], [0.0, 2.0]], [0.0, 0.5])
    x = tfl.tensor([[0.5, 0.25]])
    traces = Affine.forward.trace_count
    np.testing.assert_allclose(model.forward(x).numpy(), np.tanh([[0.5, 1.0]]), rtol=1e-6)
    assert model.forward.trace_count == traces + 1  # visible through the bound method
    cf = model.forward.get_concrete_function(x)
    assert cf is model.forward.concrete_functions[-1]
    graph = cf.graph
    assert [v.name for v in graph.inputs] == ["x"]  # self is static, not an input
    assert {id(c.data.tensor()) for c in graph.captures} == {id(model.w), id(model.b)}
    model.forward(tfl.tensor([[1.0, 1.0]]))
    assert model.forward.trace_count == traces + 1


def test_updating_a_parameter_changes_the_method_without_retracing() -> None:
    model = Affine([[1.0, 0.0], [0.0, 1.0]], [0.0, 0.0])
    x = tfl.tensor([[0.5, 0.5]])
    before = model.forward(x).numpy()
    traces = model.forward.trace_count
    with tfl.no_grad():
        model.b += 1.0
    after = model.forward(x).numpy()
    np.testing.assert_allclose(before, np.tanh([[0.5, 0.5]]), rtol=1e-6)
    np.testing.assert_allclose(after, np.tanh([[1.5, 1.5]]), rtol=1e-6)
    assert model.forward.trace_count == traces


def test_each_instance_gets_its_own_trace() -> None:
    class Doubler:
        @tfl.function
        def __call__(self, x):
            return x * 2

    a, b = Doubler(), Doubler()
    x = tfl.ones(2)
    a(x)
    a(x)
    b(x)
    # Each instance has its own polymorphic function (bound to the instance); the one
    # on the class is the template, and never traces itself.
    assert a.__call__.trace_count == 1 and b.__call__.trace_count == 1
    assert a.__call__ is not b.__call__ and a.__call__ is a.__call__
    assert Doubler.__call__.trace_count == 0


def test_a_staged_method_does_not_keep_its_instance_alive() -> None:
    model = Affine([[1.0]], [0.0])
    model.forward(tfl.ones(1, 1))
    ref = weakref.ref(model)
    del model
    gc.collect()  # the instance and its staged method refer to each other: a cycle
    assert ref() is None


class Scaler:
    """A callable object (as a model is): staged whole, ``tfl.function(model)``."""

    def __init__(self) -> None:
        self.w = tfl.tensor([2.0, 3.0])

    def __call__(self, x):
        self.w -= 0.5  # state of the object, updated as eagerly
        return x * self.w


def _scale(x, k):
    return x * k


def test_a_callable_object_and_a_partial_stage_under_their_names() -> None:
    model = Scaler()
    staged = tfl.function(model)
    assert staged.__name__ == "Scaler" and "Scaler" in repr(staged)
    assert not hasattr(staged, "w")  # the object's attributes stay the object's
    x = tfl.ones(2)
    np.testing.assert_array_equal(staged(x).numpy(), [1.5, 2.5])
    np.testing.assert_array_equal(staged(x).numpy(), [1.0, 2.0])  # updated at every call
    np.testing.assert_array_equal(model.w.numpy(), [1.0, 2.0])
    assert staged.trace_count == 1
    assert staged.concrete_functions[0].graph.name == "Scaler"

    triple = functools.partial(_scale, k=3.0)
    assert tfl.function(triple).__name__ == "_scale"
    np.testing.assert_array_equal(tfl.function(triple)(x).numpy(), [3.0, 3.0])
    compiled = tfl.compile(triple, x)
    assert compiled.graph.name == "_scale"
    np.testing.assert_array_equal(compiled(x).numpy(), [3.0, 3.0])


# --- Decorator forms, passes and backend ---------------------------------------------------------


def test_function_with_passes_and_backend_keywords() -> None:
    f = tfl.function(scale, passes=[], backend="cpu")
    assert isinstance(f, tfl.Function)
    assert f.passes == [] and f.backend == "cpu"
    np.testing.assert_allclose(f(tfl.ones(2), 4.0).numpy(), [4.0, 4.0])
    assert f.__name__ == "scale"


def test_decorator_with_arguments() -> None:
    @tfl.function(passes="default", backend="cpu")
    def add_one(x):
        """Adds one."""
        return x + 1

    @tfl.function()
    def add_two(x):
        return x + 2

    assert isinstance(add_one, tfl.Function) and isinstance(add_two, tfl.Function)
    assert add_one.__name__ == "add_one" and add_one.__doc__ == "Adds one."
    np.testing.assert_allclose(add_one(tfl.zeros(2)).numpy(), [1.0, 1.0])
    np.testing.assert_allclose(add_two(tfl.zeros(2)).numpy(), [2.0, 2.0])


def test_an_unknown_backend_is_a_device_error() -> None:
    with pytest.raises(tfl.DeviceError, match="tpu"):
        tfl.function(scale, backend="tpu")(tfl.ones(2), 2)


# --- Retracing warnings --------------------------------------------------------------------------


def test_many_retraces_warn_with_the_reasons() -> None:
    f = tfl.function(scale)
    x = tfl.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("error", tfl.RetracingWarning)
        for n in range(5):  # five traces are fine
            f(x, n)
    with pytest.warns(tfl.RetracingWarning) as record:
        f(x, 5)
    assert len(record) == 1
    message = str(record[0].message)
    assert "traced 6 times" in message
    assert "argument n: Python value 4 -> 5" in message
    assert "tensors" in message  # says what to do
    with pytest.warns(tfl.RetracingWarning, match="traced 7 times"):
        f(x, 6)


def test_the_retracing_warning_points_at_the_call() -> None:
    f = tfl.function(scale)
    x = tfl.ones(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for n in range(5):
            f(x, n)
    with pytest.warns(tfl.RetracingWarning) as record:
        f(x, 5)
    assert record[0].filename == __file__


# --- Static arguments of any kind --------------------------------------------------------------


def test_any_static_argument_is_keyed_by_value_or_by_identity() -> None:
    """A set, a slice, an unhashable object: a set or a slice by what it holds, an object by
    which object it is (its hash, or lack of one, does not matter)."""
    class Unhashable:
        __hash__ = None

    f = tfl.function(lambda x, opts: x * len(opts) if isinstance(opts, set) else x * 2)
    f(tfl.ones(2), {1, 2})
    f(tfl.ones(2), {2, 1})
    f(tfl.ones(2), {1, 2, 3})
    assert f.trace_count == 2
    thing = Unhashable()
    f(tfl.ones(2), thing)
    f(tfl.ones(2), thing)
    f(tfl.ones(2), Unhashable())
    assert f.trace_count == 4
    g = tfl.function(lambda x, s: x[s])
    np.testing.assert_array_equal(g(tfl.arange(4.0), slice(1, 3)).numpy(), [1.0, 2.0])
    g(tfl.arange(4.0), slice(1, 3))
    assert g.trace_count == 1


# --- The generated source ------------------------------------------------------------------------


def _model(x, w, mask):
    dead = (x * 3.0).exp()
    h = (x @ w).relu()
    return h.sum(axis=1) * mask, dead.shape


def test_the_generated_source_is_readable_python() -> None:
    first = _model.__code__.co_firstlineno
    f = tfl.function(_model, passes=[])
    x, w, mask = tfl.ones(4, 3), tfl.ones(3, 2), tfl.ones(4)
    cf = f.get_concrete_function(x, w, mask)
    source = cf.source

    tree = ast.parse(source)
    (fn,) = tree.body
    assert isinstance(fn, ast.FunctionDef) and fn.name == "_model"
    assert [a.arg for a in fn.args.args] == ["x", "w", "mask"]

    lines = source.splitlines()
    body = [line for line in lines[1:-1] if not line.startswith("    del ")]
    calls = [re.match(r"    v\d+ = (\w+)\(.*\)\s+# (.*)$", line) for line in body]
    assert all(calls), lines
    # One line per live node, each calling the op's kernel by name, with the user's line.
    assert [m.group(1) for m in calls] == ["matmul", "relu", "sum", "mul"]
    assert [m.group(2) for m in calls] == [f"{HERE}:{first + 2}"] * 2 + [f"{HERE}:{first + 3}"] * 2
    # An intermediate is let go of right after its last use: matmul's after relu, relu's after
    # sum, sum's after mul (mul's is returned).
    assert [line.strip() for line in lines[1:-1] if line.startswith("    del ")] == [
        f"del {v}" for v in re.findall(r"(v\d+) = (?:matmul|relu|sum)", source)]
    assert lines[-1].startswith("    return (")
    columns = {line.index("#") for line in body}
    assert len(columns) == 1  # the comments line up
    # The dead nodes stay in the (unoptimized) graph but are not emitted.
    assert [n.op.name for n in cf.graph.nodes].count("exp") == 1
    assert "exp" not in source and "3.0" not in source


def test_the_generated_source_runs_on_the_kernels_it_names() -> None:
    f = tfl.function(_model, passes=[])
    x = tfl.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) - 5)
    w, mask = tfl.tensor([[1.0, -1.0], [0.5, 0.5], [-1.0, 2.0]]), tfl.tensor([1.0, 0.0, 2.0, 1.0])
    cf = f.get_concrete_function(x, w, mask)
    namespace = {name: CPU.kernels[op] for name, op in OPS.items()}
    namespace.update(dtype=np.dtype, inf=float("inf"), nan=float("nan"))
    exec(cf.source, namespace)
    (out,) = namespace["_model"](x.numpy(), w.numpy(), mask.numpy())
    np.testing.assert_allclose(out, f(x, w, mask)[0].numpy())
    np.testing.assert_allclose(out, _model(x, w, mask)[0].numpy())


def test_arguments_named_like_kernels_still_make_valid_source() -> None:
    @tfl.function
    def clash(mul, dtype, v1, sum):
        return mul * dtype + v1 - sum

    a, b, c, d = (tfl.full((2,), float(i)) for i in (1, 2, 3, 4))
    np.testing.assert_allclose(clash(a, b, c, d).numpy(), [1.0, 1.0])
    ast.parse(clash.concrete_functions[0].source)


def test_captures_are_parameters_of_the_generated_function() -> None:
    w = tfl.tensor([1.0, 2.0])
    cf = tfl.function(lambda x: x * w).get_concrete_function(tfl.ones(2))
    (fn,) = ast.parse(cf.source).body
    # x, then the captured w (read by reference at each call), by the name the code reads it by
    assert [a.arg for a in fn.args.args] == ["x", "w"]
    assert "= mul(x, w)" in cf.source


def test_an_argument_keeps_its_name_beside_captured_state_named_alike() -> None:
    model = types.SimpleNamespace(w=tfl.tensor([1.0, 2.0]))

    def scale(model_w):
        return model_w * model.w

    cf = tfl.function(scale).get_concrete_function(tfl.ones(2))
    (fn,) = ast.parse(cf.source).body
    assert [a.arg for a in fn.args.args] == ["model_w", "model_w_1"]  # then model.w
    np.testing.assert_allclose(cf(tfl.ones(2)).numpy(), [1.0, 2.0])


def test_constants_and_array_parameters_are_named_for_what_they_are() -> None:
    mask, rows = np.array([1.0, 0.0], dtype=np.float32), np.array([1, 0])
    cf = tfl.function(lambda x: (x * mask)[rows], passes=[]).get_concrete_function(tfl.ones(2))
    mul, getitem = cf.graph.nodes
    assert f"v{mul.id} = mul(x, const{mul.inputs[1].id})" in cf.source
    assert f"getitem(v{mul.id}, index=index{getitem.id})" in cf.source


# --- Gradients through a staged call ------------------------------------------------------------


def _loss(x, w):
    return ((x @ w).tanh() ** 2).mean()


def _eager_grads(x_np, w_np):
    x = tfl.tensor(x_np, requires_grad=True)
    w = tfl.tensor(w_np, requires_grad=True)
    _loss(x, w).backward()
    return x.grad.numpy(), w.grad.numpy()


def test_backward_through_a_staged_call_reaches_arguments_that_require_grad() -> None:
    rng = np.random.default_rng(0)
    x_np, w_np = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    staged = tfl.function(_loss)
    x = tfl.tensor(x_np, requires_grad=True)
    w = tfl.tensor(w_np, requires_grad=True)
    loss = staged(x, w)
    assert loss.requires_grad
    loss.backward()
    want_x, want_w = _eager_grads(x_np, w_np)
    np.testing.assert_allclose(x.grad.numpy(), want_x, rtol=1e-10)
    np.testing.assert_allclose(w.grad.numpy(), want_w, rtol=1e-10)
    staged(tfl.tensor(x_np), tfl.tensor(w_np))  # requires_grad is not part of the signature
    assert staged.trace_count == 1


def test_backward_reaches_parameters_captured_by_a_staged_method() -> None:
    model = Affine([[1.0, -1.0], [0.5, 2.0]], [0.1, -0.2])
    twin = Affine([[1.0, -1.0], [0.5, 2.0]], [0.1, -0.2])
    x = tfl.tensor([[0.3, -0.7], [1.0, 0.5]])
    model.forward(x).sum().backward()
    Affine.forward.python_function(twin, x).sum().backward()  # the eager twin
    np.testing.assert_allclose(model.w.grad.numpy(), twin.w.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(model.b.grad.numpy(), twin.b.grad.numpy(), rtol=1e-6)
    assert np.abs(model.w.grad.numpy()).sum() > 0


def test_tfl_grad_around_a_staged_function() -> None:
    rng = np.random.default_rng(1)
    x_np, w_np = rng.normal(size=(4, 3)), rng.normal(size=(3, 2))
    gx, gw = tfl.grad(tfl.function(_loss), argnums=(0, 1))(tfl.tensor(x_np), tfl.tensor(w_np))
    want_x, want_w = _eager_grads(x_np, w_np)
    np.testing.assert_allclose(gx.numpy(), want_x, rtol=1e-10)
    np.testing.assert_allclose(gw.numpy(), want_w, rtol=1e-10)


def test_under_no_grad_a_staged_call_records_nothing() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    staged = tfl.function(lambda x: (x * w).sum())
    with tfl.no_grad():
        out = staged(tfl.ones(2))
    assert not out.requires_grad
    np.testing.assert_allclose(out.numpy(), 3.0)


# --- Static arguments, defaults and containers, as the call means them ----------------------------


class _Named:
    """Equal to any other of its name: a config or a layer keyed by name."""

    def __init__(self, name: str, w: tfl.Tensor) -> None:
        self.name, self.w = name, w

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Named) and self.name == other.name

    def __hash__(self) -> int:
        return hash(self.name)


def test_objects_that_compare_equal_are_different_static_arguments_unless_the_same() -> None:
    scale = tfl.function(lambda layer, x: x * layer.w)
    first = _Named("dense", tfl.tensor([1.0, 2.0]))
    np.testing.assert_array_equal(scale(first, tfl.ones(2)).numpy(), [1.0, 2.0])
    np.testing.assert_array_equal(scale(_Named("dense", tfl.tensor([10.0, 20.0])),
                                        tfl.ones(2)).numpy(), [10.0, 20.0])
    assert scale.trace_count == 2
    assert "another _Named object" in scale.retrace_reasons[0]
    scale(first, tfl.ones(2))
    assert scale.trace_count == 2  # the same object: its trace
    count = tfl.function(lambda n, x: x * n)
    count(3, tfl.ones(1))
    count(3, tfl.ones(1))
    assert count.trace_count == 1  # numbers compare by value, as ever


def _with_scale(fn):
    @functools.wraps(fn)
    def wrapper(x):
        return fn(x, 2.0)
    return wrapper


@_with_scale
def _scaled(x, scale=1.0):
    return x * scale


def test_a_function_is_called_as_it_was_called_defaults_only_key_the_trace() -> None:
    x = tfl.tensor([1.0, 2.0])
    np.testing.assert_allclose(tfl.function(np.tanh)(x).numpy(), np.tanh([1.0, 2.0]), rtol=1e-6)
    np.testing.assert_array_equal(tfl.compile(np.add, x, x)(x, x).numpy(), [2.0, 4.0])
    np.testing.assert_array_equal(tfl.function(_scaled)(x).numpy(), [2.0, 4.0])  # as eagerly

    @tfl.function
    def f(x, n=2, w=tfl.full((2,), 3.0), /):  # noqa: B008 (a tensor default)
        return x * n + w

    np.testing.assert_array_equal(f(x).numpy(), [5.0, 7.0])
    np.testing.assert_array_equal(f(x, 2).numpy(), [5.0, 7.0])
    assert f.trace_count == 1


def test_a_dicts_key_order_is_part_of_its_structure() -> None:
    """``for k in d`` sees the order, so another order is another trace (and a Compilation,
    made for one order, says so)."""
    x, y = tfl.ones(2), tfl.full((2,), 2.0)
    joined = tfl.function(lambda d: tfl.concatenate(list(d.values())))
    np.testing.assert_array_equal(joined({"a": x, "b": y}).numpy(), [1, 1, 2, 2])
    np.testing.assert_array_equal(joined({"b": y, "a": x}).numpy(), [2, 2, 1, 1])
    assert joined.trace_count == 2
    compiled = tfl.compile(lambda d: d["a"] * d["b"] + d["a"], {"a": x, "b": y})
    np.testing.assert_array_equal(compiled({"a": x, "b": y}).numpy(), [3.0, 3.0])
    with pytest.raises(tfl.TraceError, match=r"keys come in another order \('b', 'a'\)"):
        compiled({"b": y, "a": x})


def test_containers_are_rebuilt_as_the_types_they_were() -> None:
    class Params(dict):
        def total(self):
            return sum(v.sum() for v in self.values())

    np.testing.assert_array_equal(tfl.function(lambda p: p.total())(Params(a=tfl.ones(2))).numpy(),
                                  2.0)
    table = collections.defaultdict(lambda: tfl.zeros(2), w=tfl.ones(2))
    np.testing.assert_array_equal(tfl.function(lambda d: d["w"] + 1)(table).numpy(), [2.0, 2.0])

    @dataclasses.dataclass
    class Batch:
        x: tfl.Tensor

        def __post_init__(self):
            self.double = self.x * 2  # computed from the tensor, also when staged

    staged = tfl.function(lambda b: b.double + b.x)
    np.testing.assert_array_equal(staged(Batch(tfl.ones(2))).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(staged(Batch(tfl.full((2,), 2.0))).numpy(), [6.0, 6.0])


def test_a_staged_function_lets_go_of_each_intermediate_after_its_last_use() -> None:
    """Without fusion, a chain of ops on a big tensor holds about as much memory as eagerly:
    each intermediate is freed once the next op has used it (not at the end of the call)."""
    def chain(x):
        return ((((x * 2.0 + 1.0).tanh() - x) * 3.0).exp() + 1.0).sum()

    x = tfl.ones(1_000_000)  # 4 MB
    for run in (chain, tfl.function(chain, passes=None)):
        run(x)
        tracemalloc.start()
        try:
            run(x)
            peak = tracemalloc.get_traced_memory()[1]
        finally:
            tracemalloc.stop()
        assert peak < 3 * 4_000_000 + 500_000, peak  # at most two intermediates at once, not 7


def test_a_callable_object_whose_getattr_raises_is_staged_without_asking_it() -> None:
    """A model's ``__getattr__`` (PyTorch's Module has one) may raise or compute: the staged
    function reads the name, signature and docstring from the class."""
    class Model:
        """Doubles."""

        def __getattr__(self, name):
            raise RuntimeError(f"no {name} here")

        def __call__(self, x, scale=2.0):
            return x * scale

    run = tfl.function(Model())
    assert run.__name__ == "Model" and run.__doc__ == "Doubles."
    np.testing.assert_array_equal(run(tfl.ones(2)).numpy(), [2.0, 2.0])
    np.testing.assert_array_equal(run(tfl.ones(2), scale=3.0).numpy(), [3.0, 3.0])
    compiled = tfl.compile(Model(), tfl.ones(2))
    np.testing.assert_array_equal(compiled(tfl.ones(2)).numpy(), [2.0, 2.0])


def test_a_generator_function_is_refused_at_trace_time() -> None:
    def squares(x):
        for k in range(3):
            yield x * k

    with pytest.raises(tfl.TraceError, match="returns a generator") as info:
        tfl.function(squares)(tfl.ones(2))
    assert "cannot be a generator" in info.value.hint
    assert not is_tracing()
