"""Staged functions where learners and adversaries found them wrong: polymorphism, NumPy scalars,
names in generated code, run-time errors, hints, retracing advice, verification and
`input_signature`.

Each test states the eager meaning and checks the staged one against it.
"""

from __future__ import annotations

import os
import unicodedata
import warnings
from dataclasses import dataclass

import numpy as np
import pytest

import teachflow as tfl
from teachflow.staged.function import RETRACE_WARNING_AFTER

HERE = os.path.basename(__file__)


# --- Polymorphic functions -----------------------------------------------------------------------


class Base:
    def __init__(self, scale: float) -> None:
        self.w = tfl.tensor([scale, scale])

    @tfl.function
    def forward(self, x):
        return x * self.w


class Derived(Base):
    @tfl.function
    def forward(self, x):
        return super().forward(x) + 100.0


def test_an_override_that_calls_super_runs_its_own_method_on_every_call() -> None:
    model = Derived(2.0)
    x = tfl.ones(2)
    for _ in range(3):
        np.testing.assert_allclose(model.forward(x).numpy(), [102.0, 102.0])
    np.testing.assert_allclose(Base(3.0).forward(x).numpy(), [3.0, 3.0])  # a temporary too
    np.testing.assert_allclose(model.forward(x).numpy(), [102.0, 102.0])


BIAS = tfl.tensor([1.0, 2.0])


def test_a_tensor_default_argument_survives_the_fast_path() -> None:
    @tfl.function
    def shift(x, b=BIAS):
        return x + b

    for _ in range(3):  # the second call onwards takes the fast path for tensor-only calls
        np.testing.assert_allclose(shift(tfl.zeros(2)).numpy(), [1.0, 2.0])
    np.testing.assert_allclose(shift(tfl.zeros(2), tfl.ones(2)).numpy(), [1.0, 1.0])
    assert shift.trace_count == 1


@pytest.mark.parametrize("a, b", [(0.0, -0.0), (1, True), (1, 1.0), (0, False),
                                  (np.float64(0.0), np.float64(-0.0))],
                         ids=["signed zeros", "1 and True", "1 and 1.0", "0 and False",
                              "NumPy signed zeros"])
def test_static_values_that_compare_equal_but_compute_differently_never_share_a_trace(a, b):
    def f(x, s):
        return 1.0 / (x * s + 0.0 * s), (x[s] if isinstance(s, bool) else x * s)

    staged = tfl.function(f)
    x = tfl.tensor([1.0, 2.0])
    with np.errstate(divide="ignore"):
        for s in (a, b, a, b):
            got, want = staged(x, s), f(x, s)
            for g, w in zip(got, want, strict=True):
                assert g.shape == w.shape and g.dtype == w.dtype
                np.testing.assert_array_equal(g.numpy(), w.numpy())
    assert staged.trace_count == 2


@dataclass(frozen=True)
class Config:
    eps: float


@pytest.mark.parametrize("a, b", [(Config(0.0), Config(-0.0)),
                                  (frozenset({0.0}), frozenset({-0.0})),
                                  ({1: "key"}, {True: "key"}), ((1, 2.0), (True, 2.0))],
                         ids=["dataclass", "frozenset", "dict keys", "tuple"])
def test_static_containers_that_compare_equal_but_compute_differently(a, b) -> None:
    def f(x, s):
        first = next(iter(s.keys() if isinstance(s, dict) else
                          [s.eps] if isinstance(s, Config) else s))
        return (1.0 / (x * 0.0 + first), x[first] if isinstance(first, bool) else x * first)

    staged = tfl.function(f)
    x = tfl.tensor([1.0, -2.0])
    with np.errstate(divide="ignore"):
        for s in (a, b, a):
            for got, want in zip(staged(x, s), f(x, s), strict=True):
                assert got.shape == want.shape
                np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert staged.trace_count == 2


def test_a_static_nan_is_one_program_not_a_retrace_per_call() -> None:
    staged = tfl.function(lambda x, s: x + s)
    for _ in range(3):
        staged(tfl.ones(2), float("nan"))
    assert staged.trace_count == 1


def test_a_compilation_accepts_the_arguments_it_was_compiled_with() -> None:
    def f(x, scale=2.0, *, shift=1.0):
        return x * scale + shift

    x = tfl.ones(3)
    compiled = tfl.compile(f, x)
    for call in (lambda: compiled(x), lambda: compiled(x, 2.0), lambda: compiled(x=x),
                 lambda: compiled(x, shift=1.0), lambda: compiled(np.ones(3, np.float32))):
        np.testing.assert_allclose(call().numpy(), [3.0, 3.0, 3.0])
    with pytest.raises(tfl.TraceError, match="shape") as err:
        compiled(tfl.ones(4))
    assert "call the tfl.function" not in str(err.value)
    assert "compile again" in err.value.hint
    assert err.value.location.filename.endswith(HERE)
    for wrong in (lambda: compiled(x, 3.0), lambda: compiled(x, nonsense=1),
                  lambda: compiled(), lambda: compiled([1.0, 2.0])):
        with pytest.raises(tfl.TraceError, match="traced for"):
            wrong()


# --- NumPy scalars work where Python scalars do --------------------------------------------------

NUMPY_SCALARS = [np.float64(2.0), np.sqrt(64), np.float32(0.5), np.int64(3), np.bool_(True),
                 np.int32(-2)]
IDS = ["float64", "sqrt(64)", "float32", "int64", "bool_", "int32"]


def _with_scalar(x, s):
    y = (x * s + s) / (abs(s) + 1) - tfl.maximum(x, s) + tfl.where(x > s, x, s)
    return (y ** 2).sum() + tfl.full((2,), s).sum() + x[np.int64(1)] * s


@pytest.mark.parametrize("s", NUMPY_SCALARS, ids=IDS)
def test_a_numpy_scalar_acts_as_the_python_scalar_it_holds(s) -> None:
    x = tfl.tensor([1.0, -3.0, 4.5])
    python = s.item()
    want = _with_scalar(x, python)
    got_eager = _with_scalar(x, s)
    assert got_eager.dtype == want.dtype  # weak, as a Python scalar (never float64 by itself)
    assert (x * s).dtype == np.float32
    np.testing.assert_allclose(got_eager.numpy(), want.numpy(), rtol=1e-6)
    staged = tfl.function(lambda x: _with_scalar(x, s))
    compiled = tfl.compile(lambda x: _with_scalar(x, s), x)  # fused kernels, generated code
    for got in (staged(x), compiled(x), tfl.function(_with_scalar)(x, s)):
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    with tfl.Graph() as g:
        p = tfl.placeholder((3,), name="x")
        out = _with_scalar(p, s)
    np.testing.assert_allclose(tfl.Session(g).run(out, feed={p: x.numpy()}), want.numpy(),
                               rtol=1e-6)
    dx = tfl.grad(lambda x: _with_scalar(x, s))(x)
    np.testing.assert_allclose(tfl.function(tfl.grad(lambda x: _with_scalar(x, s)))(x).numpy(),
                               dx.numpy(), rtol=1e-6)


# --- Generated code never collides with user names -----------------------------------------------


@pytest.mark.parametrize("name", ["slice", "np", "range", "tanh", "fused_k1", "dtype",
                                  "Ellipsis", "inf", "nan", "v3", "const2", "index5", "getitem",
                                  "results", "in_parallel", "mul", "exp"])
def test_an_argument_named_like_something_the_executor_calls(name: str) -> None:
    namespace: dict = {"tfl": tfl}
    exec(f"def f({name}, other):\n"
         f"    h = ({name}[0:2] * 2.0 + other[1:]).tanh()\n"
         f"    return (h[..., None] * {name}[1:, None]).exp().sum() + {name}.max()\n",
         namespace)
    f = namespace["f"]
    x, y = tfl.tensor([1.0, 2.0, 3.0]), tfl.tensor([0.5, -0.5, 1.0])
    want = f(x, y).numpy()
    for staged in (tfl.function(f), tfl.compile(f, x, y)):
        np.testing.assert_allclose(staged(x, y).numpy(), want, rtol=1e-6)


@pytest.mark.parametrize("names", [("sum_1", "sum"), ("slice_1", "slice"), ("v2_1", "v2"),
                                   ("ｖ3", "v3"), ("ｓlice", "x"), ("ｇetitem", "getitem")],
                         ids=str)
def test_two_names_that_one_renaming_or_normalising_would_make_equal(names) -> None:
    """Python reads ``ｖ3`` as ``v3`` (NFKC), and renaming ``sum`` to ``sum_1`` must not take
    the name of another argument: every name of the generated source is claimed once."""
    a, b = names
    x, y = tfl.tensor([1.0, 2.0]), tfl.tensor([0.5, -3.0])
    want = (x[0:1] * 2.0 + y).tanh().numpy()
    if unicodedata.normalize("NFKC", a) != b:  # (else one Python name: only placeholders)
        namespace: dict = {}
        exec(f"def f({a}, {b}):\n    return ({a}[0:1] * 2.0 + {b}).tanh()\n", namespace)
        f = namespace["f"]
        for staged in (tfl.function(f), tfl.compile(f, x, y)):
            np.testing.assert_allclose(staged(x, y).numpy(), want, rtol=1e-6)
    with tfl.Graph() as g:
        p, q = tfl.placeholder((2,), name=a), tfl.placeholder((2,), name=b)
        out = (p[0:1] * 2.0 + q).tanh()
    np.testing.assert_allclose(tfl.Session(g).run(out, feed={p: x.numpy(), q: y.numpy()}), want,
                               rtol=1e-6)


@pytest.mark.parametrize("name", ["class", "None", "match", "ｇetitem", "__init__", "3d",
                                  "x\u09f4", "\u2160", "a\u00b7b", "·"])
def test_a_graph_named_like_a_keyword_or_a_kernel_runs(name: str) -> None:
    with tfl.Graph(name) as g:
        x = tfl.placeholder((2,), name="x")
        y = x[0:1] * 2.0
    np.testing.assert_array_equal(tfl.Session(g).run(y, feed={x: np.ones(2)}), [2.0])


# --- Run-time failures are explained as eagerly --------------------------------------------------


def _negative_power(x, n):
    return (x + 1) ** n


@pytest.mark.parametrize("how", ["function", "compile", "session"])
def test_a_run_time_failure_names_the_op_the_operands_and_the_users_line(how: str) -> None:
    x, n = tfl.tensor([1, 2]), tfl.tensor([1, 1])
    bad = tfl.tensor([1, -1])
    line = _negative_power.__code__.co_firstlineno + 1
    if how == "function":
        staged = tfl.function(_negative_power)
        staged(x, n)
        run = lambda: staged(x, bad)
    elif how == "compile":
        compiled = tfl.compile(_negative_power, x, n)
        run = lambda: compiled(x, bad)
    else:
        with tfl.Graph() as g:
            px, pn = tfl.placeholder((2,), "int64", "x"), tfl.placeholder((2,), "int64", "n")
            out = _negative_power(px, pn)
        run = lambda: tfl.Session(g).run(out, feed={px: x.numpy(), pn: bad.numpy()})
    with pytest.raises(tfl.DTypeError) as err:
        run()
    assert err.value.op == "pow" and "negative integer powers" in str(err.value)
    assert err.value.operands and "int64" in err.value.operands[0]
    assert err.value.location.filename.endswith(HERE) and err.value.location.lineno == line
    assert "<teachflow" not in str(err.value)


def test_a_python_int_too_big_for_the_dtype_is_a_dtype_error_when_traced() -> None:
    x = tfl.tensor([1, 2], dtype="int64")
    for stage in (lambda f: f, tfl.function):
        with pytest.raises(tfl.DTypeError) as err:
            stage(lambda x: x + 2 ** 70)(x)
        assert err.value.op == "add" and err.value.location.filename.endswith(HERE)
        assert "int64" in str(err.value)


def test_an_error_is_never_located_in_generated_code() -> None:
    def f(x):
        return x.reshape(2, 2)

    staged = tfl.function(f, passes=None)
    staged(tfl.ones(4))
    with pytest.raises(tfl.TeachflowError) as err:
        staged(tfl.ones(3))  # a new trace, which fails in the shape rule at the user's line
    assert err.value.location.filename.endswith(HERE)


# --- Hints name what exists and fits the cause ---------------------------------------------------


def test_control_flow_on_a_traced_value_points_at_where_and_the_lesson() -> None:
    def relu_if(x):
        if x.sum() > 0:
            return x
        return -x

    with pytest.raises(tfl.TraceError) as err:
        tfl.trace(relu_if, tfl.ones(3))
    assert "tfl.where" in err.value.hint and "lesson 2" in err.value.hint
    for way in ("tfl.cond", "tfl.while_loop", "@tfl.script"):  # the ways that exist now
        assert way in err.value.hint and hasattr(tfl, way.split(".")[-1])


def test_reading_values_while_tracing_is_not_called_choosing_a_path() -> None:
    with pytest.raises(tfl.TraceError) as err:
        tfl.trace(lambda x: x * float(x.numpy().sum()), tfl.ones(3))
    assert "path" not in str(err.value) and ".numpy()" in err.value.hint


def test_retracing_advice_fits_the_cause() -> None:
    @tfl.function
    def by_shape(x):
        return x * 2

    with pytest.warns(tfl.RetracingWarning) as caught:
        for n in range(1, RETRACE_WARNING_AFTER + 2):
            by_shape(tfl.ones(n, 3))
    message = str(caught[-1].message)
    assert "input_signature=[tfl.TensorSpec((None, 3), 'float32')" in message

    @tfl.function
    def by_value(x, lr):
        return x * lr

    with pytest.warns(tfl.RetracingWarning) as caught:
        for i in range(RETRACE_WARNING_AFTER + 1):
            by_value(tfl.ones(2), 0.1 * (i + 1))
    message = str(caught[-1].message)
    assert "as tensors" in message and "input_signature" not in message
    assert caught[-1].filename == __file__


# --- input_signature: one trace for a dimension that varies --------------------------------------


def test_input_signature_traces_once_for_every_size_that_fits() -> None:
    @tfl.function(input_signature=[tfl.TensorSpec((None, 3), "float32")])
    def f(x):
        return (x * 2).sum(axis=1) + x.mean()

    for rows in (1, 4, 7):
        x = tfl.randn(rows, 3)
        np.testing.assert_allclose(f(x).numpy(), ((x * 2).sum(axis=1) + x.mean()).numpy(),
                                   rtol=1e-5)
    assert f.trace_count == 1
    assert f.concrete_functions[0].graph.inputs[0].spec.shape == (None, 3)
    for wrong in (tfl.ones(4, 2), tfl.ones(4, 3, dtype="float64"), tfl.ones(3)):
        with pytest.raises(tfl.TeachflowError, match="input_signature"):
            f(wrong)


def test_input_signature_with_a_gradient_inside() -> None:
    w = tfl.tensor([[1.0], [2.0], [3.0]])
    grad = tfl.function(tfl.grad(lambda x: ((x @ w).tanh() ** 2).mean()),
                        input_signature=[tfl.TensorSpec((None, 3), "float32")])
    for rows in (2, 5):
        x = tfl.randn(rows, 3)
        want = tfl.grad(lambda x: ((x @ w).tanh() ** 2).mean())(x)
        np.testing.assert_allclose(grad(x).numpy(), want.numpy(), rtol=1e-5, atol=1e-7)
    assert grad.trace_count == 1


# --- Verification never rejects a valid program --------------------------------------------------


def test_verification_samples_inputs_the_program_accepts() -> None:
    # Random integers would include negative exponents, which integer powers refuse.
    x, n = tfl.tensor([2, 3]), tfl.tensor([3, 0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        compiled = tfl.compile(lambda x, n: (x ** n) * 2 + 1, x, n, verify=True)
    np.testing.assert_array_equal(compiled(x, n).numpy(), [17, 3])
    staged = tfl.function(lambda x, n: x ** n, verify=True)
    np.testing.assert_array_equal(staged(x, n).numpy(), [8, 1])


# --- Captured tensors are found by the names the code uses ------------------------------------

REBOUND = tfl.tensor([1.0, 2.0])


def test_a_captured_global_rebound_between_calls_is_read_anew() -> None:
    global REBOUND

    @tfl.function
    def scale(x):
        return x * REBOUND

    np.testing.assert_allclose(scale(tfl.ones(2)).numpy(), [1.0, 2.0])
    REBOUND = tfl.tensor([10.0, 20.0])  # another tensor under the same name
    np.testing.assert_allclose(scale(tfl.ones(2)).numpy(), [10.0, 20.0])
    assert "REBOUND now names another tensor" in scale.retrace_reasons[0]
    REBOUND -= 5.0  # in place: the same tensor, no new trace
    np.testing.assert_allclose(scale(tfl.ones(2)).numpy(), [5.0, 15.0])
    assert scale.trace_count == 2


def test_an_attribute_rebound_between_calls_is_read_anew() -> None:
    class Model:
        def __init__(self):
            self.w = tfl.tensor([1.0, 2.0])

        @tfl.function
        def forward(self, x):
            return x * self.w

    model = Model()
    np.testing.assert_allclose(model.forward(tfl.ones(2)).numpy(), [1.0, 2.0])
    model.w = tfl.tensor([3.0, 3.0])
    np.testing.assert_allclose(model.forward(tfl.ones(2)).numpy(), [3.0, 3.0])
    with pytest.warns(tfl.RetracingWarning, match="update it in place"):
        for _ in range(RETRACE_WARNING_AFTER):
            model.w = model.w + 1.0
            model.forward(tfl.ones(2))


# --- A captured tensor is an input like an argument ---------------------------------------------

COLUMNS = tfl.tensor(np.array([2, 0]))  # a global, captured by the functions below
ROW = tfl.tensor(1)
LABELS = tfl.tensor(np.array([2, 0, 3]))


def _with_a_closure() -> dict:
    """Functions that take a tensor parameter from outside: a global or a closure's variable."""
    picked, low, flag, mask = tfl.tensor(np.array([[1], [0]])), tfl.tensor(0.5), \
        tfl.tensor(True), tfl.tensor(np.array([[True, False, True, False]] * 3))
    return {
        "x[:, i]": lambda x: x[:, COLUMNS], "x[i]": lambda x: x[ROW],
        "x[i, j]": lambda x: x[picked, COLUMNS], "x[i, 1:]": lambda x: x[COLUMNS[:1], 1:],
        "gradient through x[:, i]": lambda x: tfl.grad(lambda x: (x[:, COLUMNS] ** 2).sum())(x),
        "in a loop body": lambda x: tfl.fori_loop(0, 2, lambda k, c: c + x[:, COLUMNS].sum(), x),
        "in a cond branch": lambda x: tfl.cond(flag, lambda x: x[ROW], lambda x: x[0], x),
        "clip bound": lambda x: x.clip(low, ROW), "where mask": lambda x: tfl.where(mask, x, low),
        "cross_entropy's targets": lambda x: tfl.nn.functional.cross_entropy(x, LABELS),
    }


@pytest.mark.parametrize("way", ["function", "compile"])
@pytest.mark.parametrize("case", list(_with_a_closure()))
def test_a_captured_tensor_parameter_works_staged_as_eagerly(case: str, way: str) -> None:
    """``x[:, i]`` with ``i`` a global or a closure's tensor traces as with ``i`` an argument
    (it was a TraceError: the index was read as a value while tracing)."""
    fn = _with_a_closure()[case]
    x = tfl.tensor(np.arange(12.0).reshape(3, 4))
    staged = tfl.function(fn) if way == "function" else tfl.compile(fn, x)
    np.testing.assert_array_equal(staged(x).numpy(), fn(x).numpy())


def test_a_captured_index_is_read_when_the_graph_runs() -> None:
    """By reference, as a captured weight: an update of the index is seen by the next call."""
    index = tfl.tensor(np.array([0, 1]))
    staged = tfl.function(lambda x: x[index])
    x = tfl.tensor([10.0, 20.0, 30.0])
    np.testing.assert_array_equal(staged(x).numpy(), [10.0, 20.0])
    index += 1
    np.testing.assert_array_equal(staged(x).numpy(), [20.0, 30.0])
    assert staged.trace_count == 1


def test_a_captured_mask_is_refused_as_a_mask_argument_is() -> None:
    """How many values a mask picks depends on its values, known only when the graph runs."""
    mask = tfl.tensor([True, False, True])
    with pytest.raises(tfl.TraceError, match="mask"):
        tfl.function(lambda x: x[mask])(tfl.ones(3))


# --- More that used to escape as bare Python errors ----------------------------------------------


def test_numpy_and_tensor_slice_bounds_work_staged() -> None:
    x = tfl.tensor(np.arange(6.0).reshape(2, 3))
    k = np.int64(1)
    for f in (lambda x: x[:, k:], lambda x: x[::np.int32(2)], lambda x: x[:, tfl.tensor(1):]):
        want = f(x).numpy()
        np.testing.assert_array_equal(tfl.function(f)(x).numpy(), want)
        np.testing.assert_array_equal(tfl.compile(f, x)(x).numpy(), want)
    with pytest.raises(tfl.DTypeError, match="slice bounds"):
        x[0.5:]


def test_a_function_or_argument_named_like_what_the_source_uses() -> None:
    namespace: dict = {}
    exec("def slice(x):\n    return x[0:1] * 2\n"
         "def Ellipsis(x):\n    return x[..., 0]\n", namespace)
    x = tfl.ones(2, 3)
    for name in ("slice", "Ellipsis"):
        f = namespace[name]
        np.testing.assert_array_equal(tfl.function(f)(x).numpy(), f(x).numpy())

    @tfl.function
    def add(self, y):
        return self + y

    np.testing.assert_array_equal(add(self=x, y=x).numpy(), (x + x).numpy())
    np.testing.assert_array_equal(add.get_concrete_function(self=x, y=x)(self=x, y=x).numpy(),
                                  (x + x).numpy())


def test_tensor_specs_check_what_they_are_given() -> None:
    with pytest.raises(tfl.ShapeError, match="tuple of sizes"):
        tfl.TensorSpec(None, "float32")
    with pytest.raises(tfl.DTypeError, match="not a dtype"):
        tfl.TensorSpec((None, 3), "floaty")
    assert tfl.TensorSpec((2**40, 2**40), "float32").size == 2**80  # no int64 overflow
    with pytest.raises(tfl.ShapeError, match="never negative"):
        tfl.TensorSpec((-1, 3))  # TensorFlow's None is teachflow's None, not -1
    with pytest.raises(tfl.DeviceError, match="unknown device 'tpu'"):
        tfl.TensorSpec((3,), device="tpu")


def test_a_tensor_spec_is_float32_on_the_cpu_unless_told() -> None:
    """As TensorFlow's: the dtype may be left out (float32, also for an explicit None: NumPy's
    np.dtype(None) would be float64), and the device may be spelled "cuda"."""
    assert tfl.TensorSpec((None, 3)) == tfl.TensorSpec((None, 3), "float32", "cpu")
    assert tfl.TensorSpec((2,), None).dtype == np.float32
    assert tfl.TensorSpec([2], "int64", "cuda:0") == tfl.TensorSpec((2,), np.int64, "gpu")
    f = tfl.function(lambda x: x * 2, input_signature=[tfl.TensorSpec((None,))])
    f(tfl.ones(3))
    f(tfl.ones(5))
    assert f.trace_count == 1


def test_a_staged_classmethod() -> None:
    class Scaler:
        factor = 3.0

        @classmethod
        @tfl.function
        def scale(cls, x):
            return x * cls.factor

    np.testing.assert_array_equal(Scaler.scale(tfl.ones(2)).numpy(), [3.0, 3.0])
    np.testing.assert_array_equal(Scaler().scale(tfl.ones(2)).numpy(), [3.0, 3.0])


def test_where_of_two_python_numbers_has_the_default_dtype() -> None:
    cond = tfl.tensor([True, False])
    for a, b, dtype in ((1.0, 0.0, np.float32), (2, 0.5, np.float32), (2, 3, np.int64)):
        assert tfl.where(cond, a, b).dtype == dtype
        assert tfl.function(lambda c, a=a, b=b: tfl.where(c, a, b))(cond).dtype == dtype


def test_unknown_sizes_in_indexing_concatenation_and_gradients() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, None), name="x")
        p = tfl.placeholder((None, 3), name="p")
        assert x[0].shape == (None,) and x[1:].shape == (None, None)
        assert p[::2].shape == (None, 3) and p[:5].shape == (None, 3) and p[0].shape == (3,)
        assert p[:, np.array([True, False, True])].shape == (None, 2)
        joined = tfl.concatenate([tfl.placeholder((2, None)), tfl.placeholder((None, 4))])
        assert joined.shape == (None, 4)
        with pytest.warns(tfl.GradientWarning):  # (of the comparison: zeros, said)
            grads = [tfl.grad(lambda x: x[::2].sum())(p),
                     tfl.grad(lambda x: tfl.stack([x, x * 2]).sum())(p),
                     tfl.grad(lambda x: (x > 0).astype("float32").sum())(p),
                     tfl.grad(lambda x: x.var(axis=0).sum())(p)]
        variance = p.var()
    data = np.arange(15.0, dtype=np.float32).reshape(5, 3)
    session = tfl.Session(g)
    got = session.run(grads, feed={p: data})
    with pytest.warns(tfl.GradientWarning):
        want = [tfl.grad(f)(tfl.tensor(data)).numpy() for f in (
            lambda x: x[::2].sum(), lambda x: tfl.stack([x, x * 2]).sum(),
            lambda x: (x > 0).astype("float32").sum(), lambda x: x.var(axis=0).sum())]
    for a, b in zip(got, want, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5)
    np.testing.assert_allclose(session.run(variance, feed={p: data}), data.var(ddof=1))
    with pytest.raises(tfl.ShapeError, match="known only when the graph runs"), tfl.Graph():
        q = tfl.placeholder((None, 3))
        tfl.grad(lambda x: tfl.concatenate([x, x * 2], axis=0).sum())(q)


def test_a_concrete_function_of_an_input_signature_takes_every_size_that_fits() -> None:
    f = tfl.function(lambda x: x.sum(axis=0),
                     input_signature=[tfl.TensorSpec((None, 3), "float32")])
    concrete = f.get_concrete_function(tfl.ones(2, 3))
    np.testing.assert_array_equal(concrete(tfl.ones(7, 3)).numpy(), [7.0, 7.0, 7.0])
    with pytest.raises(tfl.TraceError, match="does not fit"):
        concrete(tfl.ones(7, 2))


@dataclass(frozen=True)
class Batch:
    x: tfl.Tensor
    scale: float


@dataclass
class Out:
    loss: tfl.Tensor
    parts: dict


def test_dataclasses_of_tensors_in_and_out_of_a_staged_function() -> None:
    @tfl.function
    def f(batch):
        y = batch.x * batch.scale
        return Out(y.sum(), {"y": y})

    for values in ([1.0, 2.0], [10.0, 20.0]):  # new tensors: the same trace
        out = f(Batch(tfl.tensor(values), 2.0))
        assert isinstance(out, Out) and out.loss.item() == 2 * sum(values)
        np.testing.assert_allclose(out.parts["y"].numpy(), np.array(values) * 2)
    f(Batch(tfl.tensor([1.0, 2.0]), 3.0))  # a new static value: a new trace
    assert f.trace_count == 2

    with pytest.raises(tfl.TraceError, match="inside a set"):
        tfl.function(lambda x: {x * 1.0})(tfl.ones(2))


@pytest.mark.parametrize("op", ["add", "mul", "div", "sub", "minimum"])
def test_a_size_unknown_when_traced_may_be_broadcast_at_run_time(op) -> None:
    def f(a, b):
        y = {"add": a + b, "mul": a * b, "div": a / b, "sub": a - b,
             "minimum": tfl.minimum(a, b)}[op]
        return y.sum()

    grad = tfl.grad(f, argnums=(0, 1))
    unknown = tfl.TensorSpec((None, None), "float32")
    staged = tfl.function(grad, input_signature=[unknown, unknown])
    a, b = tfl.tensor(np.full((5, 1), 2.0, np.float32)), tfl.tensor(np.ones((5, 3), np.float32))
    for got, want in zip(staged(a, b), grad(a, b), strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got.numpy(), want.numpy())


def _cross_entropy(z, y):
    logp = tfl.log_softmax(z)
    return -logp[np.arange(z.shape[0]), y].mean()


def test_indexing_with_an_integer_tensor_of_the_graph() -> None:
    z, y = tfl.randn(5, 4), tfl.tensor([0, 3, 1, 1, 2])
    want, want_grad = _cross_entropy(z, y), tfl.grad(_cross_entropy)(z, y)
    for staged in (tfl.function(_cross_entropy), tfl.compile(_cross_entropy, z, y)):
        np.testing.assert_allclose(staged(z, y).numpy(), want.numpy(), rtol=1e-6)
    for staged in (tfl.function(tfl.grad(_cross_entropy)),
                   tfl.compile(tfl.grad(_cross_entropy), z, y)):
        np.testing.assert_allclose(staged(z, y).numpy(), want_grad.numpy(), rtol=1e-5)
    assert "gather" in [n.op.name for n in tfl.trace(_cross_entropy, z, y).nodes]
    # Every batch size through one trace, labels of unknown length too.
    specs = [tfl.TensorSpec((None, 4), "float32"), tfl.TensorSpec((None,), "int64")]
    grad = tfl.function(tfl.grad(_picked), input_signature=specs)
    for n in (2, 6):
        zz, yy = tfl.randn(n, 4), tfl.tensor(np.arange(n) % 4)
        np.testing.assert_allclose(grad(zz, yy).numpy(), tfl.grad(_picked)(zz, yy).numpy(),
                                   rtol=1e-5, atol=1e-7)
    assert grad.trace_count == 1


def _picked(z, y):
    logp = tfl.log_softmax(z)
    return logp[:, 0].sum() + logp[0, y].sum()


def test_a_traced_mask_or_assignment_at_traced_positions_is_refused() -> None:
    with pytest.raises(tfl.TraceError, match="mask"):
        tfl.trace(lambda x: x[x > 0], tfl.ones(3))

    def assign(x, i):
        x[i] = 0.0
        return x

    with pytest.raises(tfl.TraceError, match="positions a traced tensor holds"):
        tfl.trace(assign, tfl.ones(3), tfl.tensor([1]))
