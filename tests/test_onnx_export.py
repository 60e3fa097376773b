"""ONNX export: the graph as an ONNX model that onnxruntime (C++) runs with teachflow's results.

Every op with an ONNX equivalent is exported in a small function and run by onnxruntime on the
inputs teachflow ran it on, in several dtypes where the op takes them; a test checks that the
cases use every such op, and that every op teachflow declares is either converted or refused.
Then control flow (If, Loop), models with parameters, and the errors.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
import test_devices

import teachflow as tfl
import teachflow.nn.functional as F
from teachflow.core.dispatch import bind
from teachflow.graph import Graph, subgraphs
from teachflow.ops import OPS, creation, elementwise, pooling, reduction

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from teachflow.onnx_export import IR_VERSION, OPSET, exported_graph, to_onnx  # noqa: E402
from teachflow.onnx_export.creation_ops import REFUSED  # noqa: E402
from teachflow.onnx_export.emitter import CONVERTERS  # noqa: E402

gpu = test_devices.gpu  # a fixture: the device "gpu", simulated by NumPy, and (marked) CuPy's
S = tfl.TensorSpec
RNG = np.random.default_rng(0)


def arr(shape: tuple, dtype: str = "float32", low: float = -3, high: float = 3) -> np.ndarray:
    """Random values of `dtype`: floats in [low, high), ints from low to high - 1, bools."""
    dtype = np.dtype(dtype)
    if dtype.kind == "b":
        return RNG.random(shape) < 0.5
    if dtype.kind in "iu":
        return RNG.integers(max(low, 0) if dtype.kind == "u" else low, high, shape).astype(dtype)
    return RNG.uniform(low, high, shape).astype(dtype)


def nonzero(shape: tuple, dtype: str) -> np.ndarray:
    """Divisors: from -3 to 3, never 0."""
    return (arr(shape, dtype, 1, 4) * RNG.choice([-1, 1], shape)).astype(dtype)


def run_onnx(staged: object, path: Path, inputs: list[np.ndarray]) -> list[np.ndarray]:
    """Export `staged`, and run the file in onnxruntime on `inputs` (in the graph's order)."""
    tfl.export_onnx(staged, path)
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip([i.name for i in session.get_inputs()], inputs,
                                      strict=True)))


def assert_same(got: list[np.ndarray], want: object) -> None:
    want = [w.numpy() for w in (want if isinstance(want, tuple | list) else [want])]
    assert len(got) == len(want)
    for g, w in zip(got, want, strict=True):
        assert g.dtype == w.dtype and g.shape == w.shape, (g.dtype, g.shape, w.dtype, w.shape)
        if w.dtype.kind == "f":
            tol = {2: 2e-3, 4: 2e-5, 8: 1e-12}[w.dtype.itemsize]
            np.testing.assert_allclose(g, w, rtol=tol, atol=tol, equal_nan=True)
        else:
            np.testing.assert_array_equal(g, w)


def same_in_onnxruntime(fn: Callable, *arrays: np.ndarray, path: Path) -> None:
    """Compile `fn` on these inputs, export it, and compare onnxruntime's results with its own."""
    tensors = [tfl.tensor(a) for a in arrays]
    compiled = tfl.compile(fn, *tensors)
    assert_same(run_onnx(compiled, path, list(arrays)), compiled(*tensors))


# --- Every op, in the dtypes it takes -----------------------------------------------------------

F16, F32, F64, I8, I32, I64, U8, B = ("float16", "float32", "float64", "int8", "int32", "int64",
                                     "uint8", "bool")
M = np.array([[True, False, True], [False, False, True]])

def reading(index: object) -> Callable:
    """``x[index]``, the index a constant of the function (not one of its arguments)."""
    return lambda x: x[index]


def writing(index: object, value: object = None) -> Callable:
    """A copy of x with `value` (or the second argument) written at `index`."""
    def write(x: tfl.Tensor, *v: tfl.Tensor) -> tfl.Tensor:
        y = x.clone()
        y[index] = v[0] if v else value
        return y
    return write


def casting(dtype: str) -> Callable:
    return lambda x: x.astype(dtype)


def finding(position: Callable) -> Callable:
    """argmax or argmin, over all axes, one axis, one axis keeping it."""
    return lambda x: (position(x), position(x, axis=1), position(x, axis=0, keepdims=True))


#: (case id, function, inputs). Each op's cases come together, named after it.
CASES: list[tuple[str, Callable, tuple]] = [
    *((f"add-{d}", lambda x, y: x + y, (arr((2, 3), d), arr((3,), d))) for d in
      (F16, F32, F64, I8, I32, I64, U8, B)),
    ("add-int32+float32-is-float64", lambda x, y: x + y, (arr((3,), I32), arr((3,), F32))),
    ("add-python-float-stays-float16", lambda x: x + 2.5, (arr((4,), F16),)),
    ("add-python-float-makes-int-float64", lambda x: x + 0.5, (arr((4,), I32),)),
    *((f"sub-{d}", lambda x, y: x - y, (arr((2, 3), d), arr((2, 1), d))) for d in
      (F32, F64, I32, I64, U8)),
    ("sub-literal-first", lambda x: 1 - x, (arr((3,), F32),)),
    *((f"mul-{d}", lambda x, y: x * y, (arr((2, 3), d), arr((2, 3), d))) for d in
      (F16, F32, I32, I64, B)),
    ("mul-by-literal", lambda x: x * 3, (arr((3,), I64),)),
    *((f"div-{d}", lambda x, y: x / y, (arr((4,), d), arr((4,), d, 1, 4))) for d in
      (F32, F64, I32)),
    ("div-by-literal", lambda x: x / 3, (arr((3,), F32),)),
    *((f"neg-{d}", lambda x: -x, (arr((2, 3), d),)) for d in (F16, F32, I32, I64, U8)),
    *((f"pow-{d}", lambda x, y: x ** y, (arr((4,), d, 1, 4), arr((4,), d, 0, 3))) for d in
      (F32, F64, I32, I64, I8)),
    ("pow-square", lambda x: x ** 2, (arr((3,), F16),)),
    ("pow-literal-base", lambda x: 2.0 ** x, (arr((3,), F32),)),
    *((f"maximum-{d}", tfl.maximum, (arr((2, 3), d), arr((3,), d))) for d in
      (F32, F64, I32, I64, U8, B)),
    *((f"minimum-{d}", tfl.minimum, (arr((2, 3), d), arr((3,), d))) for d in
      (F32, I32, I64, B)),
    ("minimum-literal", lambda x: tfl.minimum(x, 0.5), (arr((3,), F32),)),
    *((f"clip-{d}", lambda x: x.clip(-1, 2), (arr((6,), d),)) for d in (F32, F64, I32, I64)),
    ("clip-tensor-bounds", tfl.clip, (arr((2, 3)), arr((3,), low=-3, high=0), arr((2, 1), low=0))),
    *((f"floor_divide-{d}", lambda x, y: x // y, (arr((20,), d, -9, 9), nonzero((20,), d)))
      for d in (F32, F64, I32, I64)),
    ("floor_divide-uint8", lambda x, y: x // y, (arr((8,), U8, 0, 9), arr((8,), U8, 1, 4))),
    ("floor_divide-literal", lambda x: x // 2, (arr((6,), I64, -9, 9),)),
    ("floor_divide-by-zero", lambda x, y: x // y,
     (np.array([7, -7, 0], np.int32), np.array([0, 0, 0], np.int32))),
    ("floor_divide-float-by-zero", lambda x, y: x // y,
     (np.array([7.0, -7.0], np.float32), np.array([0.0, 0.0], np.float32))),
    *((f"remainder-{d}", lambda x, y: x % y, (arr((20,), d, -9, 9), nonzero((20,), d)))
      for d in (F32, F64, I32, I64)),
    ("remainder-by-zero", lambda x, y: x % y,
     (np.array([7, -7], np.int64), np.array([0, 0], np.int64))),
    *((f"exp-{d}", lambda x: x.exp(), (arr((5,), d),)) for d in (F16, F32, F64, I32)),
    *((f"log-{d}", lambda x: x.log(), (arr((5,), d, 1, 9),)) for d in (F16, F32, F64, I64)),
    *((f"sqrt-{d}", lambda x: x.sqrt(), (arr((5,), d, 0, 9),)) for d in (F16, F32, F64, I32)),
    *((f"tanh-{d}", lambda x: x.tanh(), (arr((5,), d),)) for d in (F16, F32, F64)),
    *((f"sigmoid-{d}", lambda x: x.sigmoid(), (arr((5,), d),)) for d in (F16, F32, F64)),
    *((f"softplus-{d}", tfl.softplus, (arr((5,), d),)) for d in (F16, F32)),
    *((f"relu-{d}", lambda x: x.relu(), (arr((2, 3), d),)) for d in (F16, F32, F64, I32, I64, U8)),
    *((f"sign-{d}", lambda x: bind(elementwise.sign, x), (arr((7,), d, -2, 2),)) for d in
      (F32, F64, I32, I64)),
    *((f"abs-{d}", lambda x: x.abs(), (arr((5,), d),)) for d in (F16, F32, F64, I32, I64)),
    *((f"{name}-{d}", op, (arr((3, 4), d, -2, 2), arr((4,), d, -2, 2)))
      for name, op in (("lt", lambda x, y: x < y), ("le", lambda x, y: x <= y),
                       ("gt", lambda x, y: x > y), ("ge", lambda x, y: x >= y),
                       ("eq", lambda x, y: x == y), ("ne", lambda x, y: x != y))
      for d in (F32, F64, I32, I64, U8)),
    ("eq-bool", lambda x, y: x == y, (arr((4,), B), arr((4,), B))),
    ("lt-bool", lambda x, y: x < y, (arr((4,), B), arr((4,), B))),
    ("gt-int-with-python-float", lambda x: x > 0.5, (arr((5,), I32),)),
    ("ne-literal", lambda x: x != 1, (arr((5,), I64, 0, 3),)),
    ("gt-uint8-with-negative-literal", lambda x: (x > -1, x == 300), (arr((5,), U8),)),
    *((f"where-{d}", tfl.where, (arr((2, 3), B), arr((2, 3), d), arr((3,), d))) for d in
      (F16, F32, I32, I64)),
    ("where-literals", lambda c, x: tfl.where(c, x, 0), (arr((4,), B), arr((4,), I32))),
    ("where-mixed-dtypes", tfl.where, (arr((4,), B), arr((4,), I32), arr((4,), F32))),
    *((f"astype-{a}-to-{b}", casting(b), (arr((6,), a, 0, 5),)) for a, b in
      ((F32, I32), (F32, B), (F64, F16), (I64, F32), (B, F32), (I32, U8), (F32, I64))),
    ("identity", lambda x: bind(elementwise.identity, x), (arr((3,)),)),
    ("stop_gradient", lambda x: x.detach() * 2, (arr((3,)),)),
    ("clone", lambda x: x.clone(), (arr((3,), I64),)),
    ("to_device", lambda x: bind(creation.to_device, x, device="cpu"), (arr((3,)),)),
    ("copy", lambda x: bind(creation.copy, x, src="cpu", dst="cpu"), (arr((3,)),)),  # partition's
    *((f"sum-{d}", lambda x: (x.sum(), x.sum(axis=1), x.sum(axis=(0, 2), keepdims=True)),
       (arr((2, 3, 4), d),)) for d in (F16, F32, F64, I32, I64, B)),
    ("sum-over-no-axes", lambda x: bind(reduction.sum, x, axis=(), keepdims=False),
     (arr((2, 3)),)),
    *((f"mean-{d}", lambda x: (x.mean(), x.mean(axis=0), x.mean(axis=(1,), keepdims=True)),
       (arr((3, 4), d),)) for d in (F16, F32, F64, I32)),
    *((f"max-{d}", lambda x: (x.max(), x.max(axis=1), x.max(axis=0, keepdims=True)),
       (arr((3, 4), d),)) for d in (F16, F32, F64, I32, I64, U8, B)),
    ("max-initial", lambda x: bind(reduction.max, x, axis=(1,), keepdims=True, initial=0.5),
     (arr((2, 3)),)),
    ("max-initial-of-nothing", lambda x: bind(reduction.max, x, axis=(1,), keepdims=False,
                                              initial=-1.0), (arr((2, 0)),)),
    *((f"min-{d}", lambda x: (x.min(), x.min(axis=0)), (arr((3, 4), d),)) for d in
      (F32, F64, I32, I64, B)),
    *((f"log_softmax-{d}", lambda x: (x.log_softmax(), x.log_softmax(axis=0)),
       (arr((3, 4), d),)) for d in (F16, F32, F64, I32)),
    ("log_softmax-several-axes", lambda x: bind(reduction.log_softmax, x, axis=(0, 2)),
     (arr((2, 3, 4)),)),
    ("log_softmax-all-axes", lambda x: bind(reduction.log_softmax, x, axis=None),
     (arr((2, 3)),)),
    ("log_softmax-0d", lambda x: x.log_softmax(), (arr(()),)),
    *((f"{name}-{d}", finding(f), (arr((3, 5), d),))
      for name, f in (("argmax", tfl.argmax), ("argmin", tfl.argmin))
      for d in (F32, F64, I32, I64, B)),
    ("argmax-all-keepdims", lambda x: x.argmax(keepdims=True), (arr((3, 5)),)),
    *((f"matmul-{d}", lambda a, b: a @ b, (arr((2, 3), d), arr((3, 4), d))) for d in
      (F16, F32, F64, I32, I64, I8, B)),
    ("matmul-vector-matrix", lambda a, b: a @ b, (arr((3,)), arr((3, 4)))),
    ("matmul-matrix-vector", lambda a, b: a @ b, (arr((2, 3)), arr((3,)))),
    ("matmul-dot", lambda a, b: a @ b, (arr((3,)), arr((3,)))),
    ("matmul-batched", lambda a, b: a @ b, (arr((2, 1, 3, 4)), arr((5, 4, 2)))),
    ("matmul-int32-float32", lambda a, b: a @ b, (arr((2, 3), I32), arr((3, 2), F32))),
    *((f"reshape-{d}", lambda x: (x.reshape(3, 2), x.reshape(-1), x.reshape(1, -1, 1)),
       (arr((2, 3), d),)) for d in (F32, I64, B)),
    ("reshape-to-nothing", lambda x: x.reshape(0, 3), (arr((0, 3)),)),
    *((f"transpose-{d}", lambda x: (x.T, x.transpose(1, 2, 0)), (arr((2, 3, 4), d),))
      for d in (F32, I32, B)),
    *((f"broadcast_to-{d}", lambda x: tfl.broadcast_to(x, (2, 4, 3)), (arr((4, 1), d),))
      for d in (F32, I64, B)),
    *((f"getitem-{name}", reading(index), (arr((4, 5, 6)),)) for name, index in (
        ("int", 1), ("negative-int", -1), ("slice", slice(1, 3)),
        ("reversed", slice(None, None, -1)),
        ("negative-step", (slice(3, 0, -2), slice(None, None, -3))),
        ("steps-and-int", (slice(None, None, 2), 1)), ("ellipsis-none-int", (..., None, 0)),
        ("none", None), ("end", (slice(None), slice(-2, None))), ("empty", slice(3, 1)),
        ("everything", ...), ("array", np.array([2, 0, 2])),
        ("array-after-slice", (slice(None), np.array([1, 0, -1]))),
        ("arrays-together", (slice(None), np.array([0, 1]), np.array([1, 2]))),
        ("arrays-apart", (np.array([0, 1]), slice(None), np.array([1, 2]))),
        ("int-and-array-apart", (0, slice(None), np.array([1, 2]))),
        ("arrays-broadcast", (np.array([[0], [1]]), np.array([1, 2, 3]))),
        ("none-and-array", (None, np.array([0, 1]), slice(1, 3))),
        ("slice-none-array", (slice(1, 3), None, np.array([[0, 1]]))),
        ("mask", (slice(None), np.arange(5) % 2 == 0)),
        ("mask-2d", (np.arange(20).reshape(4, 5) % 3 == 0,)))),
    ("getitem-int64", lambda x: x[1:, 0], (arr((3, 4), I64),)),
    ("getitem-bool", lambda x: x[::-1], (arr((3, 4), B),)),
    *((f"setitem-{name}", writing(index, -1.0), (arr((4, 5)),)) for name, index in (
        ("int", 1), ("slice", (slice(None), slice(1, None, 2))), ("array", np.array([0, 2])),
        ("repeated", (np.array([0, 0, 3]), 1)), ("mask", np.arange(20).reshape(4, 5) > 12))),
    ("setitem-tensor-value", writing((slice(1, 3), 0)), (arr((4, 5)), arr((2,)))),
    ("setitem-repeated-tensor-values", writing(np.array([1, 1, 1])),
     (arr((4,), I32), np.array([5, 6, 7], np.int32))),
    ("setitem-cast", writing(0), (arr((3,), I32), np.array(2.7, np.float32))),
    ("scatter_add", lambda x: tfl.grad(lambda x: (x[1:, ::2] * x[1:, ::2]).sum())(x),
     (arr((3, 4)),)),
    ("scatter_add-repeated", lambda x: tfl.grad(lambda x: x[np.array([0, 0, 2])].sum())(x),
     (arr((3, 2)),)),
    *((f"concatenate-{d}", lambda x, y: (tfl.cat([x, y]), tfl.cat([x, y, x], axis=1)),
       (arr((2, 3), d), arr((2, 3), d))) for d in (F32, I32, B)),
    ("concatenate-mixed", lambda x, y: tfl.cat([x, y], axis=0), (arr((2,), I32), arr((3,), F32))),
    *((f"stack-{d}", lambda x, y: (tfl.stack([x, y]), tfl.stack([x, y], axis=2)),
       (arr((2, 3), d), arr((2, 3), d))) for d in (F32, I64, B)),
    ("gather", lambda x, i: x[i], (arr((5, 3)), np.array([4, 0, -1, 0]))),
    ("gather-int32-indices", lambda x, i: x[:, i],
     (arr((2, 5), I64), np.array([[1, 2]], np.int32))),
    ("gather-with-constant", lambda x, i: x[np.arange(3), i], (arr((3, 4)), np.array([3, 0, 2]))),
    ("gather-apart", lambda x, i: x[i, :, 1], (arr((3, 4, 2)), np.array([2, 0]))),
    ("scatter", lambda x, i: tfl.grad(lambda x: (x[i] ** 2).sum())(x),
     (arr((4, 3)), np.array([1, 1, 3]))),
    ("scatter-apart", lambda x, i: tfl.grad(lambda x: x[i, :, 0].sum())(x),
     (arr((3, 2, 2)), np.array([2, 2]))),
    ("full", lambda x: x + tfl.full((2, 3), 1.5) + tfl.zeros(()), (arr((2, 3)),)),
    ("full-int", lambda x: x * tfl.ones(3, dtype="int32"), (arr((3,), I32),)),
    ("arange", lambda x: x + tfl.arange(5), (arr((5,), I64),)),
    ("arange-float", lambda x: x + tfl.arange(0, 1, 0.1), (arr((10,)),)),
    ("arange-int32-steps", lambda x: x + tfl.arange(2, 12, 3, dtype="int32"), (arr((4,), I32),)),
    ("eye", lambda x: x @ tfl.eye(3), (arr((2, 3)),)),
    ("eye-rectangular-int", lambda x: x + tfl.eye(2, 3, dtype="int64"), (arr((2, 3), I64),)),
    # reductions, scans, movement, einsum, attention and creation of issue 33
    *((f"prod-{d}", lambda x: (x.prod(), x.prod(axis=1), x.prod(axis=0, keepdims=True)),
       (arr((3, 4), d, -2, 3),)) for d in (F16, F32, F64, I32, I64)),
    *((f"all-any-{d}", lambda x: (x.all(), x.any(1), x.all(0, keepdims=True), x.any((0, 1))),
       (arr((3, 4), d, 0, 2),)) for d in (F32, F64, I32, U8, B)),
    *((f"cumsum-{d}", lambda x: (x.cumsum(0), x.cumsum(1)), (arr((3, 4), d),))
      for d in (F16, F32, F64, I32, I64, B)),
    *((f"cumprod-{d}", lambda x: (x.cumprod(0), x.cumprod(2)), (arr((3, 2, 4), d, -2, 3),))
      for d in (F16, F32, F64, I32, I64)),
    *((f"sort-{d}", lambda x: (x.argsort(1), x.argsort(0, descending=True), x.sort(1)[0],
                               x.topk(2, 0)[0], x.topk(3, largest=False)[1]),
       (np.stack([RNG.permutation(5) for _ in range(3)]).astype(d),))
      for d in (F16, F32, F64, I32, I64, U8)),
    ("sort-bool", lambda x: x.argsort(1), (np.array([[True, False, False]]),)),
    ("logsumexp", lambda x: (x.logsumexp(1), x.logsumexp((0, 1), keepdims=True)), (arr((3, 4)),)),
    ("flip-roll", lambda x: (x.flip(0), x.flip((0, 1)), x.roll(1, 1), x.roll((2, -1), (0, 1)),
                             x.roll(3)), (arr((3, 4)),)),
    ("repeat-split-chunk", lambda x: (x.repeat(2, 1, 3), *x.split(2, 1), *x.split([1, 2]),
                                      *x.chunk(2, 1)), (arr((3, 4)),)),
    ("tril-triu-diagonal", lambda x: (x.tril(), x.triu(1), x.tril(-1), x.diagonal(),
                                      x.diagonal(1, 1, 2)), (arr((2, 3, 4)),)),
    ("tril-bool", lambda x: x.tril(), (arr((3, 3), B),)),
    *((f"pad-{mode}", lambda x, mode=mode: tfl.nn.functional.pad(x, (2, 1, 1, 0), mode=mode),
       (arr((2, 3, 4)),)) for mode in ("constant", "replicate", "reflect", "circular")),
    ("pad-crop", lambda x: tfl.nn.functional.pad(x, (-1, 2), value=5.0), (arr((2, 4)),)),
    ("einsum", lambda a, b: (tfl.einsum("bij,bjk->bik", a, b), tfl.einsum("bij->j", a),
                             tfl.einsum("bii->bi", b[:, :3, :3])),
     (arr((2, 3, 4)), arr((2, 4, 5)))),
    ("attention", lambda q, k, v: (tfl.nn.functional.scaled_dot_product_attention(q, k, v),
                                   tfl.nn.functional.scaled_dot_product_attention(
                                       q, k, v, is_causal=True)),
     (arr((2, 3, 4)), arr((2, 3, 4)), arr((2, 3, 5)))),
    ("linspace", lambda x: x + tfl.linspace(-1, 2, 7), (arr((7,)),)),
    # Convolution and pooling (float32: onnxruntime's Conv, ConvTranspose and AveragePool take
    # nothing else), with their gradients: ConvTranspose, a Conv, MaxPool's indices.
    *((f"conv2d-{name}", lambda x, w, k=k: tfl.nn.functional.conv2d(x, w, **k),
       (arr((2, 4, 7, 6)), arr((6, 4 // k.get("groups", 1), 3, 2)))) for name, k in (
        ("plain", {}), ("strided-padded", {"stride": 2, "padding": (1, 2)}),
        ("dilated-grouped", {"dilation": (2, 1), "groups": 2, "padding": "same"}))),
    *((f"conv2d-gradients-{name}", lambda x, w, k=k: tfl.grad(
        lambda x, w: (tfl.nn.functional.conv2d(x, w, **k) ** 2).sum(), argnums=(0, 1))(x, w),
       (arr((2, 4, 7, 6)), arr((6, 2, 3, 2)))) for name, k in (
        ("grouped", {"groups": 2}), ("strided", {"stride": (2, 3), "padding": 1,
                                                 "dilation": (1, 2), "groups": 2}))),
    *((f"{name}-{k}", lambda x, f=f, k=k: (f(x, k[0], k[1], k[2]), tfl.grad(
        lambda x: (f(x, k[0], k[1], k[2]) ** 2).sum())(x)), (arr((2, 3, 7, 6)),))
      for name, f in (("max_pool2d", tfl.nn.functional.max_pool2d),
                      ("avg_pool2d", tfl.nn.functional.avg_pool2d))
      for k in ((2, 2, 0), ((3, 2), (2, 1), (1, 1)))),
    ("max_pool2d-float64", lambda x: tfl.nn.functional.max_pool2d(x, 2), (arr((1, 2, 4, 4), F64),)),
    ("max_pool2d_select", lambda y, x: bind(pooling.max_pool2d_select, y, x, kernel_size=(2, 2),
                                            stride=(1, 2), padding=(1, 0, 1, 1)),
     (arr((2, 3, 5, 6)), arr((2, 3, 5, 6)))),
]
#: The maths library, rounding, tests of a float, picking along an axis, and what is made of
#: them (activations, losses).
SPECIAL = np.array([-2.5, -0.5, 0.5, 1.5, 2.5, np.inf, -np.inf, np.nan, 0.0], np.float32)
CASES += [
    *((f"{name}-{d}", getattr(tfl, name), (arr((2, 3), d),)) for name in ("sin", "cos")
      for d in (F32, F64, I32)),
    *((f"erf-{d}", tfl.erf, (arr((2, 3), d),)) for d in (F16, F32)),
    *((f"{name}-{d}", getattr(tfl, name), (arr((2, 3), d, 1),)) for name in ("log2", "rsqrt")
      for d in (F32, F64, I64)),
    *((f"{name}-{d}", getattr(tfl, name), (SPECIAL.astype(d),)) for name in
      ("floor", "ceil", "round", "isnan", "isinf") for d in (F32, F64)),
    *((f"{name}-int", getattr(tfl, name), (arr((4,), I64),)) for name in
      ("floor", "ceil", "isnan")),
    ("isclose", lambda x, y: tfl.isclose(x, y, equal_nan=True), (SPECIAL, SPECIAL[::-1].copy())),
    ("gather", lambda x, i: x.gather(1, i), (arr((3, 4)), np.array([[3, 0], [1, 1], [0, 2]]))),
    ("gather-gradient", lambda x, i: tfl.grad(lambda x: (x.gather(0, i) ** 2).sum())(x),
     (arr((3, 4)), np.array([[2, 2, 0, 1]]))),
    ("gelu-silu-elu-leaky", lambda x: (F.gelu(x), F.gelu(x, approximate="tanh"), F.silu(x),
                                       F.elu(x), F.leaky_relu(x), F.softplus(x, beta=2.0)),
     (arr((2, 3)),)),
    ("losses", lambda z, p, y: (F.cross_entropy(z, y, label_smoothing=0.1),
                                F.cross_entropy(z, p.softmax()), F.nll_loss(z.log_softmax(), y),
                                F.binary_cross_entropy(z.sigmoid(), p),
                                F.binary_cross_entropy_with_logits(z, p), F.one_hot(y, 3)),
     (arr((2, 3)), arr((2, 3), F32, 0, 1), np.array([2, 0]))),
]


@pytest.mark.filterwarnings("ignore:divide by zero:RuntimeWarning")  # (the by-zero cases)
@pytest.mark.parametrize(("fn", "inputs"), [pytest.param(fn, inputs, id=name)
                                            for name, fn, inputs in CASES])
def test_each_op_runs_in_onnxruntime_as_in_teachflow(fn: Callable, inputs: tuple,
                                                     tmp_path: Path) -> None:
    same_in_onnxruntime(fn, *inputs, path=tmp_path / "model.onnx")


def ops_in(graph: Graph) -> set[str]:
    """The ops of `graph`, inside its control flow too."""
    return {name for node in graph.nodes
            for name in (node.op.name, *(n for g in subgraphs(node).values() for n in ops_in(g)))}


def dynamic_case() -> tfl.Function:
    """Gradients of a function whose first dimension is known only when it runs: they read
    sizes from the tensors (count_of, broadcast_like, sum_like, reshape_like,
    scatter_add_like)."""
    def f(x: tfl.Tensor, b: tfl.Tensor) -> tuple:
        db = tfl.grad(lambda b: (x * b).mean())(b)
        dx = tfl.grad(lambda x: x[1:].sum() + (x.reshape(-1) * 2).sum()
                      + (x.sum(axis=1) * 2).sum() + (x[:, np.array([0, 0])] ** 2).sum())(x)
        return db, dx

    return tfl.function(f, input_signature=[S((None, 3)), S((3,))])


def control_cases() -> dict[str, tuple[Callable, tuple]]:
    """Functions with control flow, by name, and their inputs."""
    def nested(x: tfl.Tensor, n: tfl.Tensor) -> tfl.Tensor:
        def step(i: tfl.Tensor, x: tfl.Tensor) -> tfl.Tensor:
            return tfl.cond(i % 2 == 0, lambda x: x * 2, lambda x: tfl.while_loop(
                lambda x: x.sum() > 1, lambda x: x * 0.5, x), x)
        return tfl.fori_loop(0, 5, step, x) + n

    return {
        "cond-true": (lambda x: tfl.cond(x.sum() > 0, lambda x: x * 2, lambda x: -x, x),
                      (np.ones(3, np.float32),)),
        "cond-false": (lambda x: tfl.cond(x.sum() > 0, lambda x: x * 2, lambda x: -x, x),
                       (-np.ones(3, np.float32),)),
        "cond-reads-outside": (lambda x, w: tfl.cond(x[0] > 0, lambda x: (x @ w, x.sum()),
                                                      lambda x: (x @ w.T, x.max()), x),
                               (arr((3,)), arr((3, 3)))),
        "cond-passes-through": (lambda x, y: tfl.cond(x.sum() > y.sum(), lambda a, b: (a, b),
                                                       lambda a, b: (b, a), x, y),
                                (arr((2,)), arr((2,)))),
        "while_loop": (lambda x: tfl.while_loop(lambda x: x.sum() > 1, lambda x: x * 0.5, x),
                       (np.full(4, 3.0, np.float32),)),
        "while_loop-no-step": (lambda x: tfl.while_loop(lambda x: x.sum() > 100,
                                                        lambda x: x * 0.5, x),
                               (np.ones(4, np.float32),)),
        "while_loop-carry": (lambda x, n: tfl.while_loop(lambda c: c[1] < 10,
                                                         lambda c: (c[0] * 2, c[1] + 3), (x, n)),
                             (arr((2, 2)), np.array(1, np.int64))),
        "fori_loop": (lambda x, w: tfl.fori_loop(
            0, 4, lambda i, c: (c[0] @ w + i.astype("float32"), c[1] + c[0]), (x, x)),
                      (arr((2, 2)), arr((2, 2)))),
        "fori_loop-from-2": (lambda x: tfl.fori_loop(2, 6, lambda i, x: x * i.astype("float32"),
                                                     x), (arr((3,)),)),
        "fori_loop-no-step": (lambda x: tfl.fori_loop(3, 3, lambda i, x: x * 2, x),
                              (arr((3,)),)),
        "fori_loop-gradient": (lambda x: tfl.grad(lambda x: tfl.fori_loop(
            0, 3, lambda i, x: (x * x).tanh(), x).sum())(x),
                               (arr((3,), low=-1, high=1),)),
        "nested": (nested, (np.full(2, 3.0, np.float32), np.array(1.0, np.float32))),
    }


@pytest.mark.parametrize("name", list(control_cases()))
def test_control_flow_runs_as_if_and_loop(name: str, tmp_path: Path) -> None:
    fn, inputs = control_cases()[name]
    same_in_onnxruntime(fn, *inputs, path=tmp_path / "model.onnx")
    model = onnx.load(str(tmp_path / "model.onnx"))
    kinds = {n.op_type for n in model.graph.node}
    assert {"If", "Loop"} & kinds or name == "fori_loop-no-step"  # (no step: no loop)


_twice_tanh = tfl.function(lambda x: (x * 2).tanh())


def _calls(x: tfl.Tensor, w: tfl.Tensor) -> tfl.Tensor:
    return _twice_tanh(x @ w) + _twice_tanh(x - 1)


@pytest.mark.parametrize("passes", ["default", []])
def test_a_call_is_exported_inlined(passes: object, tmp_path: Path) -> None:
    """Kept as a call node (no passes) or inlined by the pass, the model is one flat graph."""
    x, w = arr((2, 3)), arr((3, 3))
    compiled = tfl.compile(_calls, tfl.tensor(x), tfl.tensor(w), passes=passes)
    assert ("call" in ops_in(compiled.graph)) == (passes == [])
    assert_same(run_onnx(compiled, tmp_path / "model.onnx", [x, w]),
                compiled(tfl.tensor(x), tfl.tensor(w)))
    kinds = [n.op_type for n in onnx.load(str(tmp_path / "model.onnx")).graph.node]
    assert kinds.count("Tanh") == 2


def test_a_loop_with_tensor_bounds_runs(tmp_path: Path) -> None:
    """@tfl.script's range(n) on a tensor n: a fori_loop whose bounds the graph computes."""
    @tfl.script
    def f(x: tfl.Tensor, n: tfl.Tensor) -> tfl.Tensor:
        for _ in range(n):
            x = x * 2
        return x

    for n in (0, 3):
        same_in_onnxruntime(f, arr((3,)), np.array(n, np.int64), path=tmp_path / f"{n}.onnx")


def test_sizes_known_only_at_run_time_stay_symbolic(tmp_path: Path) -> None:
    staged = dynamic_case()
    b = tfl.tensor(arr((3,)))
    staged(tfl.tensor(arr((4, 3))), b)
    path = tmp_path / "model.onnx"
    for n in (2, 7):  # one model, any batch size
        x = tfl.tensor(arr((n, 3)))
        assert_same(run_onnx(staged, path, [x.numpy(), b.numpy()]), staged(x, b))
    model = onnx.load(str(path))
    dim = model.graph.input[0].type.tensor_type.shape.dim[0]
    assert dim.dim_param == "x_0"


def test_every_op_is_converted_or_refused_and_every_converted_op_is_tested() -> None:
    """A new op cannot be forgotten: it must be converted (and then used by a case above) or
    refused with a reason."""
    assert not set(CONVERTERS) & set(REFUSED)
    assert set(CONVERTERS) | set(REFUSED) == set(OPS)
    used: set[str] = set()
    for _, fn, inputs in CASES:
        used |= ops_in(tfl.trace(fn, *(tfl.tensor(a) for a in inputs)))
    for fn, inputs in control_cases().values():
        used |= ops_in(tfl.trace(fn, *(tfl.tensor(a) for a in inputs)))
    used |= ops_in(tfl.trace(_calls, tfl.tensor(arr((2, 3))), tfl.tensor(arr((3, 3)))))
    staged = dynamic_case()
    staged(tfl.tensor(arr((4, 3))), tfl.tensor(arr((3,))))
    used |= ops_in(staged.concrete_functions[0].compilation.snapshots[0].graph)
    assert set(CONVERTERS) - used == set()


# --- Models with parameters ----------------------------------------------------------------------


def test_an_mlp_of_plain_tensors_keeps_its_weights_as_initializers(tmp_path: Path) -> None:
    tfl.manual_seed(0)
    w1, b1 = tfl.randn(4, 8) * 0.5, tfl.zeros(8)
    w2, b2 = tfl.randn(8, 3) * 0.5, tfl.zeros(3)

    @tfl.function
    def mlp(x: tfl.Tensor) -> tfl.Tensor:
        return tfl.softmax((x @ w1 + b1).relu() @ w2 + b2, axis=-1)

    x = tfl.tensor(arr((5, 4)))
    want = mlp(x)
    assert_same(run_onnx(mlp, tmp_path / "mlp.onnx", [x.numpy()]), want)
    model = onnx.load(str(tmp_path / "mlp.onnx"))
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in model.graph.initializer}
    np.testing.assert_array_equal(weights["%w1"], w1.numpy())
    assert [i.name for i in model.graph.input] == ["x"]
    assert (model.ir_version, model.opset_import[0].version) == (IR_VERSION, OPSET) == (8, 17)


def test_a_sequential_mlp_in_eval_mode(tmp_path: Path) -> None:
    nn = pytest.importorskip("teachflow.nn")
    tfl.manual_seed(0)
    model = nn.Sequential(nn.Linear(10, 32), nn.ReLU(), nn.Dropout(), nn.Linear(32, 1))
    model.eval()
    staged = tfl.function(model)
    x = tfl.tensor(arr((6, 10)))
    want = staged(x)
    assert_same(run_onnx(staged, tmp_path / "model.onnx", [x.numpy()]), want)


def test_a_graph_traced_on_the_gpu_runs_in_onnxruntime_on_the_cpu(tmp_path: Path,
                                                                    gpu: str) -> None:
    """ONNX has no devices: the weights are copied into the file, the runtime picks its own."""
    w = tfl.randn(3, 4).to("gpu")

    def f(x: tfl.Tensor) -> tfl.Tensor:
        return tfl.cond(x.sum() > 0, lambda x: (x @ w).tanh(), lambda x: x @ w, x).sum(axis=1)

    x = tfl.randn(2, 3).to("gpu")
    compiled = tfl.compile(f, x)
    assert test_devices.on_device(compiled(x), gpu)
    assert_same(run_onnx(compiled, tmp_path / "gpu.onnx", [x.numpy()]), compiled(x))


def test_each_onnx_node_says_which_node_and_line_it_computes() -> None:
    def f(x: tfl.Tensor) -> tfl.Tensor:
        return x.tanh() * 2
    model = to_onnx(tfl.compile(f, tfl.tensor(arr((3,)))))
    tanh = next(n for n in model.graph.node if n.op_type == "Tanh")
    assert tanh.output[0] == "%1" and tanh.doc_string.startswith("%1 = tanh %x : f32[3]")
    assert "test_onnx_export.py" in tanh.doc_string
    assert "graph f(" in model.graph.doc_string  # the text form, for a reader of the file


def test_the_graph_before_fusion_is_exported() -> None:
    def f(x: tfl.Tensor) -> tfl.Tensor:
        return (x.tanh() + 1) * 2
    compiled = tfl.compile(f, tfl.tensor(arr((3,))))
    assert any(not n.op.primitive for n in compiled.graph.nodes)  # fused
    assert exported_graph(compiled) is next(s.graph for s in compiled.snapshots
                                            if s.pass_name == "dce")


# --- Errors -------------------------------------------------------------------------------------


def test_a_random_op_names_itself_and_the_line() -> None:
    def f(x: tfl.Tensor) -> tfl.Tensor:
        return x + tfl.randn(3)  # the line the error points at

    with pytest.raises(tfl.TeachflowError) as err:
        to_onnx(tfl.compile(f, tfl.tensor(arr((3,)))))
    assert err.value.op == "normal"
    assert "the line the error points at" in str(err.value)
    assert "onnxruntime's own generator" in err.value.message


def test_dropout_in_training_mode_is_refused() -> None:
    nn = pytest.importorskip("teachflow.nn")
    model = nn.Sequential(nn.Linear(3, 3), nn.Dropout())
    staged = tfl.function(model)
    staged(tfl.tensor(arr((2, 3))))
    with pytest.raises(tfl.TeachflowError, match="eval"):
        to_onnx(staged)


@pytest.mark.parametrize("what", ["plain function", "untraced", "two traces", "updates state"])
def test_what_cannot_be_exported_says_why(what: str) -> None:
    staged = tfl.function(lambda x: x * 2)
    w = tfl.zeros(3)
    if what == "plain function":
        staged, match = (lambda x: x * 2), "not a function"
    elif what == "untraced":
        match = "0 concrete functions"
    elif what == "two traces":
        staged(tfl.zeros(3))
        staged(tfl.zeros(4))
        match = "2 concrete functions"
    else:
        def step(x: tfl.Tensor) -> tfl.Tensor:
            for p in [w]:
                p -= x
            return x
        staged, match = tfl.function(step), "updates state"
        with tfl.no_grad():
            staged(tfl.ones(3))
    with pytest.raises(tfl.TeachflowError, match=match):
        to_onnx(staged)


def test_export_onnx_is_tfl_export_onnx_and_writes_a_file(tmp_path: Path) -> None:
    compiled = tfl.compile(lambda x: x + 1, tfl.zeros(2))
    path = tfl.export_onnx(compiled, tmp_path / "m.onnx")
    assert path == tmp_path / "m.onnx" and onnx.load(str(path)).producer_name == "teachflow"


def test_a_module_exports_with_its_example_input_as_torch_onnx_export_takes_them(
        tmp_path: Path) -> None:
    """``tfl.export_onnx(model, x, path)``: traced on x, in eval mode (its dropout passes
    through, as PyTorch exports), and the module is back in training mode after."""
    nn = pytest.importorskip("teachflow.nn")
    tfl.manual_seed(0)
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Dropout(0.5), nn.Linear(4, 2))
    x = tfl.tensor(arr((5, 3)))
    path = tfl.export_onnx(model, x, tmp_path / "model.onnx")
    assert model.training and all(m.training for m in model.modules())
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: x.numpy()})
    assert_same(got, model.eval()(x))


def test_any_function_exports_with_a_tuple_of_example_inputs(tmp_path: Path) -> None:
    a, b = arr((2, 3)), arr((3, 4))
    got = run_onnx_of(lambda a, b: (a @ b).tanh(), (tfl.tensor(a), b), tmp_path, [a, b])
    assert_same(got, (tfl.tensor(a) @ tfl.tensor(b)).tanh())
    staged = tfl.function(lambda x: x * 2)  # a tfl.function: its trace for the example
    assert_same(run_onnx_of(staged, tfl.tensor(a), tmp_path, [a]), tfl.tensor(a) * 2)
    assert len(staged.concrete_functions) == 1


def run_onnx_of(fn: Callable, example: object, folder: Path, inputs: list) -> list:
    path = tfl.export_onnx(fn, example, folder / "model.onnx")
    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    return session.run(None, dict(zip([i.name for i in session.get_inputs()], inputs,
                                      strict=True)))


@pytest.mark.parametrize(("args", "match"), [((tfl.zeros(2), 3), "path to write to is int"),
                                             (("m.onnx",), "unless it is given example inputs"),
                                             ((tfl.zeros(2), "m.onnx"), None)])
def test_export_onnx_with_the_wrong_arguments_says_what_it_takes(args: tuple,
                                                                 match: str | None) -> None:
    fn = (lambda x: x * 2) if match else 5
    with pytest.raises(tfl.TeachflowError, match=match or "a function or a module, not a int"):
        tfl.export_onnx(fn, *args)


def test_a_float64_convolution_is_refused_naming_the_op_and_the_line() -> None:
    """onnxruntime's Conv takes float32 alone: a float64 model is never written."""
    def f(x: tfl.Tensor, w: tfl.Tensor) -> tfl.Tensor:
        return tfl.nn.functional.conv2d(x, w)  # the convolution's line

    with pytest.raises(tfl.TeachflowError) as err:
        to_onnx(tfl.compile(f, tfl.tensor(arr((1, 2, 4, 4), F64)),
                            tfl.tensor(arr((3, 2, 2, 2), F64))))
    assert err.value.op == "conv2d" and "float64" in err.value.message
    assert "the convolution's line" in str(err.value)


def test_a_cnn_in_eval_mode_is_conv_relu_maxpool_and_gemm(tmp_path: Path) -> None:
    nn = tfl.nn
    tfl.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.BatchNorm2d(4), nn.ReLU(),
                          nn.MaxPool2d(2), nn.AvgPool2d(2), nn.Flatten(), nn.Linear(4 * 2 * 2, 3))
    model.train()
    model(tfl.tensor(arr((8, 1, 8, 8))))  # (moves the running statistics)
    x = arr((5, 1, 8, 8))
    tfl.export_onnx(model, tfl.tensor(x), tmp_path / "cnn.onnx")
    kinds = [n.op_type for n in onnx.load(str(tmp_path / "cnn.onnx")).graph.node]
    assert {"Conv", "MaxPool", "AveragePool", "MatMul"} <= set(kinds)
    assert model.training  # (exported in eval mode, put back after)
    session = ort.InferenceSession(str(tmp_path / "cnn.onnx"))
    model.eval()
    np.testing.assert_allclose(session.run(None, {session.get_inputs()[0].name: x})[0],
                               model(tfl.tensor(x)).numpy(), rtol=2e-5, atol=2e-5)
