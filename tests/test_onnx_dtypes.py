"""Every op the ONNX exporter converts, in every dtype teachflow has: the exported model runs in
onnxruntime with teachflow's results, or the export refuses it, naming the op and the dtype.

Nothing in between: no model is written that onnxruntime cannot load ("Could not find an
implementation for Softplus(1)"). Where onnxruntime's kernels lack a type, the exporter computes
in a carrier type or refuses (`teachflow.onnx_export.onnxruntime_types`), and its table of what the
kernels take is checked here against the installed onnxruntime's own registry.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from test_onnx_export import assert_same, ops_in

import teachflow as tfl
from teachflow.core.dispatch import bind
from teachflow.ops import OPS, creation, elementwise
from teachflow.ops.shape import Hole

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from teachflow.onnx_export import OPSET, exported_graph, to_onnx  # noqa: E402
from teachflow.onnx_export.emitter import CONVERTERS  # noqa: E402
from teachflow.onnx_export.onnxruntime_types import KERNELS  # noqa: E402

#: Every dtype a teachflow tensor may have.
DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
RNG = np.random.default_rng(1)
F = tfl.nn.functional
#: The window of the convolution cases: a 2x2 kernel over a 3x3 image, stride 1 (few products
#: to a sum: float16's rounding of a long sum differs between the two runtimes); and a 2x2 pool
#: of stride 2.
WINDOW = {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1)}
POOL = {"kernel_size": (2, 2), "stride": (2, 2), "padding": (0, 0, 0, 0)}


def arr(shape: tuple, dtype: str, low: int = -3, high: int = 4) -> np.ndarray:
    """Small values of `dtype` from `low` to `high` (unsigned ones from 0)."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.random(shape) < 0.5
    values = RNG.integers(max(low, 0) if dtype.kind == "u" else low, max(high, 1), shape)
    if dtype.kind in "fc":
        values = values + RNG.uniform(0, 1, shape) * (1 if dtype.kind == "f" else 1j)
    return values.astype(dtype)


def unary(f: Callable, low: int = -3) -> Callable[[str], tuple]:
    return lambda d: (f, (arr((2, 3), d, low),))


def binary(f: Callable, divisor: bool = False) -> Callable[[str], tuple]:
    return lambda d: (f, (arr((2, 3), d), arr((3,), d, 1) if divisor else arr((3,), d)))


def written(x: Any, v: Any) -> Any:
    y = x.clone()
    y[0] = v
    return y


INDICES = np.array([3, 0, 3])
GATHERED = (Hole(0),)  # (x[i] with an index tensor i: the hole that i fills)

#: For each converted op, by name, a function of a dtype giving a function that uses the op on
#: operands of that dtype, and its inputs.
def calling(staged: tfl.Function) -> Callable:
    """A function that calls `staged` (a ``call`` node, traced)."""
    return lambda x: staged(x)[0]


MAKE: dict[str, Callable[[str], tuple]] = {
    "abs": unary(lambda x: x.abs()), "exp": unary(lambda x: x.exp()),
    "log": unary(lambda x: x.log(), 1), "sqrt": unary(lambda x: x.sqrt(), 0),
    "tanh": unary(lambda x: x.tanh()), "sigmoid": unary(lambda x: x.sigmoid()),
    "softplus": unary(tfl.softplus), "sign": unary(lambda x: bind(elementwise.sign, x)),
    "relu": unary(lambda x: x.relu()), "neg": unary(lambda x: -x),
    "identity": unary(lambda x: bind(elementwise.identity, x) * 1),
    "stop_gradient": unary(lambda x: x.detach() * 1), "clone": unary(lambda x: x.clone() * 1),
    "to_device": unary(lambda x: bind(creation.to_device, x, device="cpu") * 1),
    "copy": unary(lambda x: bind(creation.copy, x, src="cpu", dst="cpu") * 1),
    "add": binary(lambda x, y: x + y), "sub": binary(lambda x, y: x - y),
    "mul": binary(lambda x, y: x * y), "div": binary(lambda x, y: x / y, divisor=True),
    "pow": lambda d: (lambda x, y: x ** y, (arr((2, 3), d, 1), arr((3,), d, 0, 3))),
    "maximum": binary(tfl.maximum), "minimum": binary(tfl.minimum),
    "floor_divide": binary(lambda x, y: x // y, divisor=True),
    "remainder": binary(lambda x, y: x % y, divisor=True),
    "lt": binary(lambda x, y: x < y), "le": binary(lambda x, y: x <= y),
    "gt": binary(lambda x, y: x > y), "ge": binary(lambda x, y: x >= y),
    "eq": binary(lambda x, y: x == y), "ne": binary(lambda x, y: x != y),
    "where": lambda d: (tfl.where, (arr((2, 3), "bool"), arr((2, 3), d), arr((3,), d))),
    "clip": lambda d: (tfl.clip, (arr((2, 3), d), arr((3,), d, -3, 0), arr((2, 1), d, 0))),
    "astype": lambda d: (lambda x: tuple(x.astype(to) for to in DTYPES if to[0] != "c"),
                         (arr((2, 3), d, 0),)),
    "sum": unary(lambda x: (x.sum(), x.sum(axis=1))),
    "mean": unary(lambda x: (x.mean(), x.mean(axis=0))),
    "max": unary(lambda x: (x.max(), x.max(axis=1))),
    "min": unary(lambda x: (x.min(), x.min(axis=0))),
    "log_softmax": unary(lambda x: (x.log_softmax(), x.log_softmax(axis=0))),
    "argmax": unary(lambda x: (x.argmax(), x.argmax(axis=1))),
    "argmin": unary(lambda x: (x.argmin(), x.argmin(axis=0))),
    "count_of": unary(lambda x: bind(OPS["count_of"], x, axis=(1,), dtype=x.dtype)),
    "matmul": lambda d: (lambda a, b: a @ b, (arr((2, 3), d), arr((3, 4), d))),
    "reshape": unary(lambda x: x.reshape(3, 2)), "transpose": unary(lambda x: x.T),
    "broadcast_to": unary(lambda x: tfl.broadcast_to(x, (4, 2, 3))),
    "concatenate": binary(lambda x, y: tfl.cat([x, y.reshape(1, 3)])),
    "stack": binary(lambda x, y: tfl.stack([x[0], y])),
    "getitem": unary(lambda x: (x[1], x[:, ::-1], x[:, np.array([2, 0])])),
    "setitem": binary(written),
    "gather": lambda d: (lambda x, i: x[i], (arr((4, 3), d), INDICES)),
    "scatter": lambda d: (lambda g, like, i: bind(OPS["scatter"], g, like, i, index=GATHERED),
                          (arr((3, 2), d), arr((4, 2), d), INDICES)),
    "scatter_add": unary(lambda g: bind(OPS["scatter_add"], g, index=(slice(1, 3),),
                                        shape=(4, 3))),
    "scatter_add_like": binary(lambda g, like: bind(OPS["scatter_add_like"], g[0],
                                                    like.reshape(1, 3), index=(0,))),
    "broadcast_like": binary(lambda x, like: bind(OPS["broadcast_like"], like, x)),
    "reshape_like": binary(lambda x, like: bind(OPS["reshape_like"], x[0], like)),
    "sum_like": binary(lambda x, like: bind(OPS["sum_like"], x, like)),
    "full": lambda d: (lambda x: x + tfl.full((2, 3), 1, dtype=d), (arr((2, 3), d),)),
    "arange": lambda d: (lambda x: x + tfl.arange(3, dtype=d), (arr((2, 3), d),)),
    "eye": lambda d: (lambda x: x + tfl.eye(2, 3, dtype=d), (arr((2, 3), d),)),
    "cond": lambda d: (lambda p, x: tfl.cond(p, lambda x: x, lambda x: x[::-1], x),
                       (np.array(False), arr((3,), d))),
    "while": lambda d: (lambda x, n: tfl.while_loop(lambda c: c[1] < 3,
                                                    lambda c: (c[0][::-1], c[1] + 1), (x, n)),
                        (arr((3,), d), np.array(0, np.int64))),
    "fori_loop": lambda d: (lambda x: tfl.fori_loop(0, 3, lambda i, x: x[::-1], x),
                            (arr((3,), d),)),
    "call": lambda d: (calling(tfl.function(lambda x: x[::-1])), (arr((3,), d),)),
    "prod": unary(lambda x: (x.prod(), x.prod(axis=1))),
    "all": unary(lambda x: (x.all(), x.all(axis=0))),
    "any": unary(lambda x: (x.any(), x.any(axis=1))),
    "cumsum": unary(lambda x: (x.cumsum(0), x.cumsum(1))),
    "cumprod": unary(lambda x: (x.cumprod(0), x.cumprod(1))),
    # (distinct values: onnxruntime's TopK and a stable sort agree on ties only by chance)
    "argsort": lambda d: (lambda x: (x.argsort(1), x.argsort(0, descending=True)),
                          (np.array([[2, 0, 1], [1, 2, 0]], dtype=d) if d != "bool" else
                           np.array([[True, False]]),)),
    "linspace": lambda d: (lambda x: x + tfl.linspace(0, 4, 3, dtype=d), (arr((2, 3), d),)),
    "sin": unary(lambda x: x.sin()), "cos": unary(lambda x: x.cos()),
    # onnxruntime's Erf is float32's only: an integer's erf (float64, as NumPy gives it) is
    # refused by name, so the case asks for the float32 a model computes in.
    "erf": unary(lambda x: (x if x.dtype.kind == "f" else x.astype("float32")).erf()),
    "log2": unary(lambda x: x.log2(), 1), "rsqrt": unary(lambda x: x.rsqrt(), 1),
    "floor": unary(lambda x: x.floor()), "ceil": unary(lambda x: x.ceil()),
    "round": unary(lambda x: x.round()),
    "isnan": unary(lambda x: x.isnan()), "isinf": unary(lambda x: x.isinf()),
    "take_along_axis": lambda d: (lambda x, i: x.gather(1, i),
                                  (arr((2, 3), d), np.array([[2, 0], [1, 1]]))),
    "scatter_add_along_axis": lambda d: (
        lambda g, i: bind(OPS["scatter_add_along_axis"], g, i, axis=1, shape=(2, 3)),
        (arr((2, 2), d), np.array([[2, 0], [1, 1]]))),
    # Convolution and pooling, and their gradients (each op run by `bind`, as in a graph)
    "conv2d": lambda d: (lambda x, w: F.conv2d(x, w),
                         (arr((1, 1, 3, 3), d, -2, 3), arr((2, 1, 2, 2), d, -2, 3))),
    "conv2d_input_grad": lambda d: (lambda g, w: bind(OPS["conv2d_input_grad"], g, w, **WINDOW,
                                                      groups=1, shape=(3, 3)),
                                    (arr((1, 2, 2, 2), d, -2, 3), arr((2, 1, 2, 2), d, -2, 3))),
    "conv2d_weight_grad": lambda d: (lambda x, g: bind(OPS["conv2d_weight_grad"], x, g,
                                                       **WINDOW, groups=1, shape=(2, 2)),
                                     (arr((1, 1, 3, 3), d, -2, 3), arr((1, 2, 2, 2), d, -2, 3))),
    "max_pool2d": lambda d: (lambda x: F.max_pool2d(x, 2), (arr((1, 2, 4, 4), d),)),
    "avg_pool2d": lambda d: (lambda x: F.avg_pool2d(x, 2), (arr((1, 2, 4, 4), d),)),
    "max_pool2d_grad": lambda d: (lambda g, x: bind(OPS["max_pool2d_grad"], g, x, **POOL),
                                  (arr((1, 2, 2, 2), d), arr((1, 2, 4, 4), d))),
    "max_pool2d_select": lambda d: (lambda t, x: bind(OPS["max_pool2d_select"], t, x, **POOL),
                                    (arr((1, 2, 4, 4), d), arr((1, 2, 4, 4), d))),
    "avg_pool2d_grad": lambda d: (lambda g: bind(OPS["avg_pool2d_grad"], g, **POOL,
                                                 shape=(4, 4)), (arr((1, 2, 2, 2), d),)),
}


def test_every_converted_op_has_its_dtype_cases() -> None:
    assert set(MAKE) == set(CONVERTERS)


def runs_or_is_refused(op: str, dtype: str) -> str:
    """Export the op's case of `dtype`: "ran" if onnxruntime gives teachflow's results, "refused"
    if the export refused it, naming an op of the graph and the dtype; "not computed" if
    teachflow itself refuses the case."""
    fn, inputs = MAKE[op](dtype)
    tensors = [tfl.tensor(a) for a in inputs]
    try:
        compiled = tfl.compile(fn, *tensors)
        with np.errstate(all="ignore"):
            want = compiled(*tensors)
    except tfl.TeachflowError:
        return "not computed"
    graph = exported_graph(compiled)
    try:
        model = to_onnx(compiled)
    except tfl.TeachflowError as err:
        assert err.op in ops_in(graph) | {"export_onnx"}, err
        assert dtype in err.message, err
        return "refused"
    session = ort.InferenceSession(model.SerializeToString(),
                                   providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    assert_same(session.run(None, dict(zip(names, inputs, strict=True))), want)
    return "ran"


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # (NumPy's, on the same values)
@pytest.mark.parametrize("op", sorted(MAKE))
def test_every_op_of_every_dtype_runs_in_onnxruntime_or_is_refused_by_name(op: str) -> None:
    outcomes = {dtype: runs_or_is_refused(op, dtype) for dtype in DTYPES}
    # Whatever it does with the other dtypes, an op runs in those models are made of.
    assert {outcomes[d] for d in ("float32", "int64")} <= {"ran", "not computed"}, outcomes


@pytest.mark.parametrize(("op", "dtype"), [("softplus", "float64"), ("where", "bool"),
                                           ("maximum", "int16"), ("max", "uint32"),
                                           ("floor_divide", "uint16"), ("sum", "uint64"),
                                           ("argmax", "int16"), ("eye", "bool"),
                                           ("sigmoid", "uint8")])
def test_what_onnxruntime_lacks_computes_in_another_type(op: str, dtype: str) -> None:
    """The testers' softplus of float64 and where of bools, and their siblings: a carrier type,
    or softplus written out, not a model onnxruntime cannot load."""
    assert runs_or_is_refused(op, dtype) == "ran"


@pytest.mark.parametrize(("op", "dtype", "lacks"), [("max", "uint64", "ReduceMax"),
                                                    ("add", "complex64", "complex")])
def test_what_no_type_computes_is_refused_naming_op_dtype_and_line(op: str, dtype: str,
                                                                    lacks: str) -> None:
    fn, inputs = MAKE[op](dtype)
    compiled = tfl.compile(fn, *(tfl.tensor(a) for a in inputs))
    with pytest.raises(tfl.TeachflowError, match=f"{op}.*{dtype}.*{lacks}") as caught:
        to_onnx(compiled)
    assert "test_onnx_dtypes.py" in str(caught.value.location)


def test_the_kernel_table_is_onnxruntimes() -> None:
    """`KERNELS` says what the installed onnxruntime's CPU kernels take at the exporter's opset,
    for the dtypes teachflow has. If onnxruntime changes, this says what to write there."""
    from onnxruntime.capi import _pybind_state

    ours = {d for d in DTYPES if d[0] != "c"}
    names = {"float": "float32", "double": "float64"}
    found: dict[str, dict[str, set[str]]] = {}
    for kernel in _pybind_state.get_all_opkernel_def():
        if kernel.op_name not in KERNELS or kernel.domain not in ("", "ai.onnx") or \
                kernel.provider != "CPUExecutionProvider":
            continue
        first, last = kernel.version_range
        if first <= onnx.defs.get_schema(kernel.op_name, OPSET).since_version <= last:
            for param, types in kernel.type_constraints.items():
                kinds = {names.get(t[7:-1], t[7:-1]) for t in types}
                found.setdefault(kernel.op_name, {}).setdefault(param, set()).update(
                    kinds & ours)
    table = {op: {p: set(t.split()) for p, t in params.items()}
             for op, params in KERNELS.items() if " " not in op}  # (not a variant: ScatterND's)
    assert table == found
