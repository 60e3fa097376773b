"""Devices: "cpu" on NumPy, "gpu" (alias "cuda") on CuPy, running the same kernels.

The cross-device tests run twice:

- on a *simulated* GPU everywhere: a backend named "gpu" whose array module is NumPy, patched in
  where teachflow looks for CuPy. That exercises everything teachflow itself does with devices
  (placing created tensors, moving them with `.to`, refusing to mix devices, sending gradients
  back across a transfer) on any machine;
- on the real GPU, marked ``gpu``: skipped cleanly where CuPy or a CUDA device is missing, and
  there it checks that every op computes on the GPU what it computes on the CPU.

The device-mixing error is also tested with a fake second backend built by hand, without any GPU.
"""

from __future__ import annotations

import os
import sys
import types
from collections.abc import Callable

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core import backends, dispatch
from teachflow.core.backends import Backend
from teachflow.core.spec import TensorSpec
from teachflow.nn import functional as F
from teachflow.ops import (
    along_axis,
    convolution,
    creation,
    elementwise,
    linalg,
    maths,
    pooling,
    reduction,
)
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import Op
from teachflow.tensor.tensor import Tensor

HERE = os.path.basename(__file__)


# --- Which devices exist -----------------------------------------------------------------------


def test_devices_lists_cpu() -> None:
    found = tfl.devices()
    assert isinstance(found, list) and found[0] == "cpu"
    assert set(found) <= {"cpu", "gpu"}
    assert ("gpu" in found) == (backends.gpu_unavailable_reason() is None)


def test_get_backend_names_and_aliases() -> None:
    cpu = backends.get_backend("cpu")
    assert cpu is backends.CPU and cpu.name == "cpu" and cpu.xp is np
    assert backends.get_backend("CPU") is cpu and backends.get_backend("numpy") is cpu
    assert backends.get_backend(cpu) is cpu  # a Backend passes through
    with pytest.raises(tfl.DeviceError):
        backends.get_backend("tpu")
    with pytest.raises(tfl.DeviceError):
        backends.get_backend(None)


def test_cuda_is_an_alias_of_gpu(monkeypatch) -> None:
    simulated = NumpyBackedGPU()
    monkeypatch.setattr(backends, "_gpu_backend", lambda: simulated)
    for name in ("gpu", "GPU", "cuda", "cuda:0", "gpu:0"):
        assert backends.get_backend(name) is simulated
    assert tfl.devices() == ["cpu", "gpu"]
    assert backends.gpu_unavailable_reason() is None
    assert tfl.zeros(2, device="cuda").device == "gpu"


def test_gpu_unavailable_reasons_are_sentences(monkeypatch) -> None:
    """Each way CuPy can be unusable gives its own reason (computed without the cache)."""
    find = backends._gpu_backend.__wrapped__

    monkeypatch.setitem(sys.modules, "cupy", None)  # `import cupy` raises ImportError
    reason = find()
    assert isinstance(reason, str) and "CuPy is not installed" in reason and "pip" in reason

    def no_driver() -> int:
        raise RuntimeError("CUDA driver version is insufficient")

    fake = types.SimpleNamespace(cuda=types.SimpleNamespace(
        runtime=types.SimpleNamespace(getDeviceCount=no_driver)))
    monkeypatch.setitem(sys.modules, "cupy", fake)
    reason = find()
    assert "CUDA is not usable" in reason and "driver version is insufficient" in reason

    fake.cuda.runtime.getDeviceCount = lambda: 0
    assert "no CUDA device" in find()


# --- A simulated GPU, and the real one ----------------------------------------------------------


class NumpyBackedGPU(Backend):
    """A stand-in GPU: the device is called "gpu" but NumPy computes (no device copies)."""

    def __init__(self) -> None:
        super().__init__("gpu", np)

    def to_numpy(self, array):
        return np.asarray(array)


@pytest.fixture(params=["simulated", pytest.param("cupy", marks=pytest.mark.gpu)])
def gpu(request, monkeypatch) -> str:
    """The device name "gpu", backed by a simulated GPU or (marked `gpu`) by CuPy."""
    if request.param == "simulated":
        simulated = NumpyBackedGPU()
        monkeypatch.setattr(backends, "_gpu_backend", lambda: simulated)
    else:
        reason = backends.gpu_unavailable_reason()
        if reason is not None:
            pytest.skip(f"no usable GPU: {reason}")
    return request.param


def on_device(t: tfl.Tensor, kind: str) -> bool:
    """The tensor says "gpu", and on a real GPU its values are a CuPy array."""
    real = type(t._data).__module__.startswith("cupy")
    return t.device == "gpu" and (real if kind == "cupy" else not real)


RNG = np.random.default_rng(0)
DATA = {
    "x": RNG.standard_normal((3, 4)).astype(np.float32),
    "y": RNG.standard_normal((3, 4)).astype(np.float32),
    "p": RNG.uniform(0.5, 2.0, (3, 4)).astype(np.float32),  # positive: log, sqrt, pow
    "m": RNG.standard_normal((4, 5)).astype(np.float32),
    "b": RNG.standard_normal((2, 3, 4)).astype(np.float32),
    "v": RNG.standard_normal(4).astype(np.float32),
    "d": RNG.standard_normal((3, 4)),  # float64
    "i": np.array([2, 0, 2]),
    "mask": np.array([True, False, True]),
    "img": RNG.standard_normal((2, 4, 6, 5)).astype(np.float32),  # images: conv, pooling
    "k": RNG.standard_normal((6, 2, 3, 3)).astype(np.float32),
}
DATA["y"][0, 0] = DATA["x"][0, 0]  # a tie, for maximum/minimum/eq


def inputs(device: str) -> dict[str, tfl.Tensor]:
    return {name: tfl.tensor(array, device=device) for name, array in DATA.items()}


def _setitem(x: tfl.Tensor, index: tuple, value: tfl.Tensor) -> tfl.Tensor:
    x[index] = value
    return x


# Every op, applied on the inputs' device. Each case is named after what it exercises.
FORWARD: dict[str, Callable[[dict], tfl.Tensor]] = {
    "add": lambda t: t["x"] + t["y"],
    "add_scalar": lambda t: t["x"] + 2.0,
    "add_broadcast": lambda t: t["x"] + t["v"],
    "add_float64": lambda t: t["x"] + t["d"],
    "sub": lambda t: t["x"] - t["y"],
    "rsub": lambda t: 1.0 - t["x"],
    "mul": lambda t: t["x"] * t["y"],
    "div": lambda t: t["x"] / t["p"],
    "rdiv": lambda t: 1.0 / t["p"],
    "neg": lambda t: -t["x"],
    "floor_divide": lambda t: t["x"] // t["p"],
    "remainder": lambda t: (t["x"] * 7) % -t["p"],
    "pow_scalar": lambda t: t["p"] ** 2.5,
    "pow_tensor": lambda t: t["p"] ** t["y"],
    "maximum": lambda t: tfl.maximum(t["x"], t["y"]),
    "minimum": lambda t: tfl.minimum(t["x"], 0.0),
    "clip": lambda t: t["x"].clip(-0.5, 0.5),
    "clip_tensors": lambda t: tfl.clip(t["x"], t["y"], t["p"]),
    "clip_int": lambda t: t["i"].clip(max=1),
    "exp": lambda t: t["x"].exp(),
    "log": lambda t: t["p"].log(),
    "sqrt": lambda t: tfl.sqrt(t["p"]),
    "tanh": lambda t: t["x"].tanh(),
    "sigmoid": lambda t: (t["x"] * 30).sigmoid(),
    "softplus": lambda t: dispatch.bind(elementwise.softplus, t["x"] * 30),
    "relu": lambda t: t["x"].relu(),
    "abs": lambda t: t["x"].abs(),
    "sign": lambda t: dispatch.bind(elementwise.sign, t["x"]),
    "lt": lambda t: t["x"] < t["y"],
    "le": lambda t: t["x"] <= t["y"],
    "gt": lambda t: t["x"] > 0,
    "ge": lambda t: t["x"] >= t["y"],
    "eq": lambda t: t["x"] == t["y"],
    "ne": lambda t: t["x"] != t["y"],
    "where": lambda t: tfl.where(t["x"] > 0, t["x"], t["y"]),
    "where_scalar": lambda t: tfl.where(t["x"] > 0, t["x"], 0.0),
    "astype": lambda t: t["x"].astype("float64"),
    "astype_bool": lambda t: (t["x"] > 0).astype("float32"),
    "identity": lambda t: dispatch.bind(elementwise.identity, t["x"]),
    "detach": lambda t: t["x"].detach(),
    "getitem_basic": lambda t: t["x"][1:, ::2],
    "getitem_int": lambda t: t["x"][-1, 2],
    "getitem_newaxis": lambda t: t["b"][None, ..., 1],
    "getitem_array": lambda t: t["x"][t["i"]],
    "getitem_mask": lambda t: t["x"][t["mask"]],
    "scatter_add_basic": lambda t: dispatch.bind(shape_ops.scatter_add, t["x"],
                                                 index=(slice(1, 4),), shape=(5, 4)),
    "scatter_add_repeated": lambda t: dispatch.bind(shape_ops.scatter_add, t["x"],
                                                    index=(DATA["i"],), shape=(4, 4)),
    "setitem": lambda t: _setitem(t["x"] * 1.0, (slice(1, None), 0), t["y"][1:, 1]),
    "reshape": lambda t: t["x"].reshape(2, 6),
    # Gradient helpers for sizes known only at run time (a placeholder's None), run directly.
    "broadcast_like": lambda t: dispatch.bind(shape_ops.broadcast_like, t["v"], t["x"]),
    "reshape_like": lambda t: dispatch.bind(shape_ops.reshape_like, t["x"].T, t["x"]),
    "sum_like": lambda t: dispatch.bind(shape_ops.sum_like, t["b"], t["x"][:1]),
    # Indexing with index arrays computed by a graph, run directly.
    "gather": lambda t: dispatch.bind(shape_ops.gather, t["x"], t["i"].astype("int64"),
                                      index=(shape_ops.Hole(0), slice(1, 3))),
    "scatter": lambda t: dispatch.bind(shape_ops.scatter, t["x"][:, :2], t["x"],
                                       t["i"].astype("int64"),
                                       index=(shape_ops.Hole(0), slice(1, 3))),
    "scatter_add_like": lambda t: dispatch.bind(shape_ops.scatter_add_like, t["x"][1:3], t["x"],
                                                index=(slice(1, 3),)),
    "count_of": lambda t: dispatch.bind(reduction.count_of, t["b"], axis=(0, 2),
                                        dtype=np.dtype("float32")),
    "reshape_infer": lambda t: t["b"].reshape(-1, 4),
    "transpose": lambda t: t["b"].transpose(2, 0, 1),
    "T": lambda t: t["x"].T,
    "unsqueeze_squeeze_flatten": lambda t: t["b"].unsqueeze(1).squeeze().flatten(1),
    "clone": lambda t: t["x"].clone(),
    "broadcast_to": lambda t: tfl.broadcast_to(t["v"], (3, 4)),
    "concatenate": lambda t: tfl.concatenate([t["x"], t["y"]], axis=1),
    "stack": lambda t: tfl.stack([t["x"], t["y"]], axis=-1),
    "sum_all": lambda t: t["x"].sum(),
    "sum_axis": lambda t: t["b"].sum(axis=(0, 2), keepdims=True),
    "mean": lambda t: t["x"].mean(axis=1),
    "max_all": lambda t: t["x"].max(),
    "max_axis": lambda t: tfl.max(t["b"], axis=-1),
    "min_all": lambda t: t["x"].min(),
    "min_axis": lambda t: tfl.min(t["b"], axis=(0, 2), keepdims=True),
    "argmax": lambda t: t["b"].argmax(axis=1),
    "argmax_all": lambda t: tfl.argmax(t["x"]),
    "argmin": lambda t: tfl.argmin(t["x"], axis=-1, keepdims=True),
    "var": lambda t: t["b"].var(axis=(0, 2)),
    "matmul": lambda t: t["x"] @ t["m"],
    "matmul_batched": lambda t: t["b"] @ t["m"],
    "matrix_vector": lambda t: t["x"] @ t["v"],
    "vector_matrix": lambda t: t["v"] @ t["m"],
    "dot": lambda t: tfl.matmul(t["v"], t["v"]),
    "softmax": lambda t: tfl.softmax(t["x"], axis=1),
    "log_softmax": lambda t: tfl.log_softmax(t["b"], axis=0),
    "zeros": lambda t: tfl.zeros(2, 3, device=t["x"].device),
    "ones_int": lambda t: tfl.ones(2, dtype="int32", device=t["x"].device),
    "full": lambda t: tfl.full((2, 2), 1.5, device=t["x"].device),
    "arange": lambda t: tfl.arange(1, 7, 2, device=t["x"].device),
    "arange_float": lambda t: tfl.arange(0.5, device=t["x"].device, dtype="float64"),
    "eye": lambda t: tfl.eye(3, 4, device=t["x"].device),
    "zeros_like": lambda t: tfl.zeros_like(t["x"]) + t["x"],
    "prod": lambda t: t["b"].prod(axis=(0, 2)),
    "all_any": lambda t: tfl.stack([t["x"].all(axis=0), (t["x"] > 0).any(axis=0)]),
    "cumsum": lambda t: t["b"].cumsum(1),
    "cumprod": lambda t: t["x"].cumprod(0),
    "argsort": lambda t: t["x"].argsort(1, descending=True),
    "sort_topk": lambda t: t["b"].sort(0).values + t["b"].topk(2, 0).values.sum(0),
    "linspace": lambda t: tfl.linspace(-1, 1, 5, device=t["x"].device),
    "conv2d": lambda t: F.conv2d(t["img"], t["k"], stride=(2, 1), padding=1, groups=2),
    "max_pool2d": lambda t: F.max_pool2d(t["img"], 2, 1, 1),
    "avg_pool2d": lambda t: F.avg_pool2d(t["img"], (3, 2), padding=(1, 0)),
    # Their gradients, and the max pool's second-order helper, run directly.
    "conv2d_grads": lambda t: tfl.grad(lambda x, w: F.conv2d(x, w, groups=2).sum(),
                                       argnums=(0, 1))(t["img"], t["k"])[1],
    "conv2d_input_grad": lambda t: tfl.grad(lambda x: (F.conv2d(x, t["k"], groups=2) ** 2)
                                            .sum())(t["img"]),
    "pool_grads": lambda t: tfl.grad(lambda x: (F.max_pool2d(x, 2) ** 2).sum()
                                     + (F.avg_pool2d(x, 2) ** 2).sum())(t["img"]),
    "max_pool2d_select": lambda t: dispatch.bind(pooling.max_pool2d_select, t["img"] * 2,
                                                 t["img"], kernel_size=(2, 2), stride=(1, 1),
                                                 padding=(0, 0, 1, 1)),
    "sin_cos_erf": lambda t: t["x"].sin() + t["x"].cos() * t["x"].erf(),
    "log2_rsqrt": lambda t: t["p"].log2() - t["p"].rsqrt(),
    "rounding": lambda t: t["x"].floor() + (t["x"] * 3).round() - t["x"].ceil(),
    "isnan_isinf": lambda t: (t["x"] / 0).isnan() | (t["x"] / 0).isinf(),
    "gather_along": lambda t: t["x"].gather(1, t["i"].astype("int64").reshape(3, 1)),
    "scatter_add_along": lambda t: dispatch.bind(along_axis.scatter_add_along_axis,
                                                 t["x"][:, :1], t["i"].reshape(3, 1),
                                                 axis=1, shape=(3, 4)),
}

# Ops the table cannot show by value: random draws differ between generators, `to_device`
# only runs when a tensor changes device (see the `.to` tests below), and `copy` only where
# the partition pass moves a value between the devices of a staged graph.
NOT_IN_TABLE = {"normal", "uniform", "randint", "to_device", "copy"}


GRADIENTS: dict[str, tuple[tuple[str, ...], Callable[..., tfl.Tensor]]] = {
    "mul": (("x", "y"), lambda x, y: (x * y).sum()),
    "matmul_tanh": (("x", "m"), lambda x, m: (x @ m).tanh().mean()),
    "batched_log_softmax": (("b", "m"), lambda b, m: tfl.log_softmax(b @ m).mean()),
    "softmax": (("x", "y"), lambda x, y: (tfl.softmax(x, axis=1) * y).sum()),
    "index": (("x",), lambda x: x[DATA["i"]].sum() + x[1:, ::2].max() + x[DATA["mask"]].mean()),
    "broadcast": (("x", "v"), lambda x, v: ((x + v) ** 2).sum()),
    "pow_log_sqrt": (("p", "y"), lambda p, y: (p ** y).sum() + p.log().sum() + p.sqrt().sum()),
    "select": (("x", "y"), lambda x, y: (tfl.where(x > y, x, y * 2) + tfl.maximum(x, y)
                                         + tfl.minimum(x, y).sigmoid() + x.relu()
                                         + x.abs()).sum()),
    "div_exp": (("x", "p"), lambda x, p: (x / p).sum() - (1 / p).sum() - x.exp().mean()),
    "join": (("x", "y"), lambda x, y: (tfl.stack([x, y]).reshape(6, 4)
                                       * tfl.concatenate([x, y])).T.sum()),
    "mixed_dtypes": (("x", "d"), lambda x, d: (x * d).sum()),
    "scans": (("x", "p"), lambda x, p: (p.prod(axis=0) + x.cumsum(1).sum(0)).sum()
              + (p.cumprod(1) * x).sum() + x.sort(1).values[:, 0].sum() + x.logsumexp(1).sum()),
    "cnn": (("img", "k"), lambda img, k: F.avg_pool2d(F.max_pool2d(
        F.conv2d(img, k, padding=1, groups=2).relu(), 2, 1, 1), 2).mean()),
}


def _close(on_gpu: tfl.Tensor, on_cpu: tfl.Tensor, rtol: float = 1e-5,
           atol: float = 1e-6) -> None:
    assert on_gpu.shape == on_cpu.shape
    assert on_gpu.dtype == on_cpu.dtype
    if on_cpu.dtype.kind in "fc":
        np.testing.assert_allclose(on_gpu.numpy(), on_cpu.numpy(), rtol=rtol, atol=atol)
    else:
        np.testing.assert_array_equal(on_gpu.numpy(), on_cpu.numpy())


@pytest.mark.parametrize("case", list(FORWARD))
def test_forward_on_gpu_equals_cpu(gpu, case: str) -> None:
    fn = FORWARD[case]
    expected = fn(inputs("cpu"))
    out = fn(inputs("gpu"))
    assert expected.device == "cpu"
    assert on_device(out, gpu)
    _close(out, expected)


@pytest.mark.parametrize("case", list(GRADIENTS))
def test_gradients_on_gpu_equal_cpu(gpu, case: str) -> None:
    names, fn = GRADIENTS[case]

    def run(device: str) -> tuple[tfl.Tensor, list[tfl.Tensor]]:
        leaves = [tfl.tensor(DATA[n], device=device, requires_grad=True) for n in names]
        loss = fn(*leaves)
        loss.backward()
        return loss, [leaf.grad for leaf in leaves]

    loss_cpu, grads_cpu = run("cpu")
    loss_gpu, grads_gpu = run("gpu")
    assert on_device(loss_gpu, gpu)
    _close(loss_gpu, loss_cpu, rtol=1e-4)
    for g_gpu, g_cpu in zip(grads_gpu, grads_cpu, strict=True):
        assert on_device(g_gpu, gpu)
        _close(g_gpu, g_cpu, rtol=1e-4, atol=1e-5)


def test_functional_and_second_order_gradients_on_gpu(gpu) -> None:
    x0 = np.array([0.5, 1.0, 2.0])
    x = tfl.tensor(x0, device="gpu")
    g = tfl.grad(lambda x: (x ** 3).sum())(x)
    assert on_device(g, gpu)
    np.testing.assert_allclose(g.numpy(), 3 * x0 ** 2)
    gg = tfl.grad(lambda x: tfl.grad(lambda z: (z ** 3).sum())(x).sum())(x)
    assert on_device(gg, gpu)
    np.testing.assert_allclose(gg.numpy(), 6 * x0)
    value, (gw,) = tfl.value_and_grad(lambda w: tfl.tanh(w).sum(), argnums=(0,))(x)
    assert on_device(value, gpu) and on_device(gw, gpu)
    np.testing.assert_allclose(gw.numpy(), 1 - np.tanh(x0) ** 2)


def test_every_op_is_in_the_device_tables() -> None:
    """Adding an op means adding it to FORWARD (or saying why not): record which ops the tables
    reach, by running them on the CPU behind an interpreter that notes each op it is given."""

    class Recorder:
        def __init__(self, inner) -> None:
            self.inner, self.seen = inner, set()

        def apply(self, op, args, params):
            self.seen.add(op.name)
            return self.inner.apply(op, args, params)

        def __getattr__(self, name):  # state changes: as the inner interpreter does them
            return getattr(self.inner, name)

    declared = {v.name for module in (elementwise, reduction, shape_ops, linalg, creation,
                                      convolution, pooling, maths, along_axis)
                for v in vars(module).values() if isinstance(v, Op)}
    with dispatch.interpreting(Recorder(dispatch.current_interpreter())) as recorder:
        for fn in FORWARD.values():
            fn(inputs("cpu"))
    missing = declared - recorder.seen - NOT_IN_TABLE
    assert not missing, f"ops without a cross-device case in FORWARD: {sorted(missing)}"
    assert declared >= NOT_IN_TABLE


# --- Moving tensors -----------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [np.arange(6, dtype=np.float32).reshape(2, 3), np.array([1.5, -2.0]), np.array([3, 4]),
     np.array([True, False]), np.array(2.5, dtype=np.float32), np.zeros((0, 3), np.float32)],
    ids=["float32", "float64", "int64", "bool", "0-d", "empty"],
)
def test_to_round_trips(gpu, data: np.ndarray) -> None:
    t = tfl.tensor(data)
    g = t.to("gpu")
    assert on_device(g, gpu) and g.shape == t.shape and g.dtype == t.dtype
    assert g.to("gpu") is g and g.to("cuda") is g
    back = g.to("cpu")
    assert back.device == "cpu" and isinstance(back.numpy(), np.ndarray)
    np.testing.assert_array_equal(back.numpy(), data)
    np.testing.assert_array_equal(g.numpy(), data)  # .numpy() copies to the host
    np.testing.assert_array_equal(np.asarray(g), data)
    assert back.dtype == data.dtype and g.tolist() == data.tolist()
    assert t.to("cuda").device == "gpu" and g.cpu().device == "cpu"


def test_creation_on_the_gpu(gpu) -> None:
    made = [
        tfl.tensor([1.0, 2.0], device="gpu"),
        tfl.tensor(np.ones(2), device="cuda"),
        tfl.zeros(2, 3, device="gpu"),
        tfl.ones(3, device="gpu"),
        tfl.full((2,), 4.0, device="gpu"),
        tfl.randn(2, 2, device="gpu"),
        tfl.rand(5, device="gpu"),
        tfl.randn(3, device="gpu", requires_grad=True),
    ]
    for t in made:
        assert on_device(t, gpu)
    assert tfl.zeros_like(made[2]).device == "gpu" and tfl.ones_like(made[3]).device == "gpu"
    assert made[4].tolist() == [4.0, 4.0]
    assert made[6].numpy().min() >= 0 and made[6].numpy().max() < 1
    assert made[-1].requires_grad and made[-1].is_leaf


def test_gpu_tensor_attributes_and_values(gpu) -> None:
    t = tfl.tensor([[1.0, 2.0]], device="gpu")
    assert t.device == "gpu" and t.shape == (1, 2) and t.dtype == np.float32 and t.ndim == 2
    assert "device='gpu'" in repr(t)
    assert t.sum().item() == 3.0 and float(t[0, 1]) == 2.0
    assert len(t) == 1 and [r.tolist() for r in t] == [[1.0, 2.0]]
    assert isinstance(t.numpy(), np.ndarray)
    assert (t + 1).device == "gpu" and (2 * t).dtype == np.float32  # Python scalars stay weak


def test_numpy_operand_with_gpu_tensor(gpu) -> None:
    """A NumPy array is CPU data: combining it with a GPU tensor is a device mix-up, reported
    as such, rather than CuPy's TypeError from inside the kernel."""
    if gpu == "simulated":
        pytest.skip("the simulated GPU computes with NumPy, which accepts NumPy operands")
    t = tfl.tensor([1.0, 2.0], device="gpu")
    with pytest.raises(tfl.DeviceError) as info:
        t + np.array([1.0, 1.0])
    assert "cpu" in str(info.value) and "gpu" in str(info.value)
    assert isinstance(info.value.__cause__, Exception)


def test_gradient_flows_back_across_to(gpu) -> None:
    x = tfl.tensor([1.0, 2.0, 3.0], requires_grad=True)  # on the CPU
    y = x.to("gpu")
    assert y.requires_grad and y.grad_fn == "to_device" and on_device(y, gpu)
    (y * y).sum().backward()
    assert x.grad.device == "cpu"
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])

    w = tfl.tensor([1.0, -1.0], device="gpu", requires_grad=True)
    (w.to("cpu") * 3).sum().backward()
    assert on_device(w.grad, gpu)
    np.testing.assert_allclose(w.grad.numpy(), [3.0, 3.0])


def test_mixing_devices_raises_naming_both(gpu) -> None:
    a = tfl.ones(2)
    b = tfl.ones(2, device="gpu")
    for mix in (lambda: a + b, lambda: b * a, lambda: tfl.maximum(a, b),
                lambda: tfl.ones(2, 2) @ b, lambda: tfl.stack([a, b]),
                lambda: tfl.where(a > 0, a, b)):
        with pytest.raises(tfl.DeviceError) as info:
            mix()
        message = str(info.value)
        assert "cpu" in message and "gpu" in message
        assert f"{HERE}:{mix.__code__.co_firstlineno}" in message
    x = tfl.ones(2, requires_grad=True)
    with pytest.raises(tfl.DeviceError):
        x * b  # a tracked operand changes nothing


# --- The device check without any GPU: a fake second backend -------------------------------------


def fake_gpu_tensor(array: np.ndarray, backend: Backend) -> Tensor:
    return Tensor._make(array, backend, None)


@pytest.fixture
def fake() -> Backend:
    """A second backend that is not the CPU's, built by hand: no CuPy, no patching."""
    return Backend("gpu", np)


def test_mixing_with_a_fake_backend_raises_device_error(fake: Backend) -> None:
    cpu = tfl.tensor([1.0, 2.0])
    other = fake_gpu_tensor(np.array([3.0, 4.0], dtype=np.float32), fake)
    assert other.device == "gpu"
    with pytest.raises(tfl.DeviceError) as info:
        cpu + other
    err = info.value
    assert isinstance(err, RuntimeError) and err.op == "add"
    message = str(err)
    assert "add" in message and "cpu" in message and "gpu" in message
    assert "float32[2] on cpu" in message and "float32[2] on gpu" in message
    assert f"{HERE}:{info.tb.tb_lineno}" in message  # the test's own line
    assert err.hint and "to(" in err.hint


@pytest.mark.parametrize(
    "mix",
    [
        pytest.param(lambda c, g: c @ g, id="matmul"),
        pytest.param(lambda c, g: g - c, id="sub-reversed"),
        pytest.param(lambda c, g: tfl.concatenate([c, c, g]), id="concatenate"),
        pytest.param(lambda c, g: tfl.stack([g, c]), id="stack"),
        pytest.param(lambda c, g: tfl.where(c > 0, g, 0.0), id="where"),
        pytest.param(lambda c, g: tfl.maximum(c, g), id="maximum"),
    ],
)
def test_every_kind_of_op_refuses_mixed_devices(fake: Backend, mix) -> None:
    c = tfl.tensor([1.0, 2.0], requires_grad=True)
    g = fake_gpu_tensor(np.array([3.0, 4.0], dtype=np.float32), fake)
    with pytest.raises(tfl.DeviceError) as info:
        mix(c, g)
    assert "cpu" in str(info.value) and "gpu" in str(info.value)
    assert info.value.op is not None and info.value.op in str(info.value)


def test_ops_on_one_fake_device_stay_there(fake: Backend) -> None:
    g = fake_gpu_tensor(np.array([1.0, 2.0], dtype=np.float32), fake)
    for out in (g + g, g * 2.0, (g @ g), tfl.softmax(g), g[0]):
        assert out._backend is fake and out.device == "gpu"
    np.testing.assert_allclose((g * g)._data, [1.0, 4.0])


def test_the_shape_rule_also_refuses_mixed_devices() -> None:
    """What tracing uses: the op's abstract evaluation on specs alone."""
    on_cpu = TensorSpec((2,), np.float32, "cpu")
    on_gpu = TensorSpec((2,), np.float32, "gpu")
    with pytest.raises(tfl.DeviceError) as info:
        elementwise.add.abstract_eval(on_cpu, on_gpu)
    assert "cpu" in str(info.value) and "gpu" in str(info.value)
    assert elementwise.add.abstract_eval(on_gpu, on_gpu).device == "gpu"
    assert linalg.matmul.abstract_eval(on_gpu, on_gpu).device == "gpu"
