"""Convolution, pooling and batch norm (issue 33, item 1), beyond what the op table checks.

`op_cases` draws conv2d, max_pool2d and avg_pool2d for the forward, gradient, JVP, vmap and
staged tests. Here: that each is one node (the stepper shows one box), that second derivatives
(through the gradient ops, `teachflow.ops.convolution` and `pooling`) match finite
differences, that graphs using them are saved and loaded and hostile parameters refused, that
mistakes are named with the user's line, and batch norm: its statistics in training and in
eval, its running statistics updated eagerly and written back staged, its buffers in the state
dict. Every expectation is a NumPy formula written here.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from op_cases import conv2d_reference

import teachflow as tfl
from teachflow import nn
from teachflow.core.dispatch import bind
from teachflow.core.errors import DTypeError, ShapeError
from teachflow.nn import functional as F
from teachflow.ops import convolution, pooling
from teachflow.saved import SavedGraphError

RNG = np.random.default_rng(0)


def randn(*shape: int) -> tfl.Tensor:
    return tfl.tensor(RNG.normal(size=shape))


# --- One op each ---------------------------------------------------------------------------------


def test_each_is_one_node_and_its_gradients_are_the_gradient_ops() -> None:
    x, w = randn(2, 3, 6, 6), randn(4, 3, 3, 3)
    graph = tfl.trace(lambda x, w: F.max_pool2d(F.conv2d(x, w, padding=1), 2), x, w)
    assert [n.op.name for n in graph.nodes] == ["conv2d", "max_pool2d"]
    grads = tfl.trace(tfl.grad(lambda x, w: F.avg_pool2d(F.conv2d(x, w), 2).sum(),
                               argnums=(0, 1)), x, w)
    names = {n.op.name for n in grads.nodes}
    assert {"conv2d_input_grad", "conv2d_weight_grad", "avg_pool2d_grad"} <= names


def test_conv2d_input_grad_is_the_adjoint_of_the_convolution() -> None:
    """<conv2d(x, w), g> = <x, conv2d_input_grad(g, w)>, and the same for the weight."""
    p = {"stride": (2, 1), "padding": (1, 0, 2, 1), "dilation": (1, 2), "groups": 2}
    x, w = randn(2, 4, 7, 6), randn(6, 2, 3, 2)
    y = bind(convolution.conv2d, x, w, **p)
    g = randn(*y.shape)
    dx = bind(convolution.conv2d_input_grad, g, w, shape=(7, 6), **p)
    dw = bind(convolution.conv2d_weight_grad, x, g, shape=(3, 2), **p)
    inner = float((y.numpy() * g.numpy()).sum())
    assert inner == pytest.approx(float((x.numpy() * dx.numpy()).sum()), rel=1e-12)
    assert inner == pytest.approx(float((w.numpy() * dw.numpy()).sum()), rel=1e-12)


def test_a_batch_of_images_and_one_image_without_the_batch_axis() -> None:
    x, w = RNG.normal(size=(3, 5, 5)), RNG.normal(size=(2, 3, 3, 3))
    got = F.conv2d(tfl.tensor(x), tfl.tensor(w), stride=2).numpy()
    np.testing.assert_allclose(got, conv2d_reference(x[None], w, (2, 2), (0, 0), (1, 1), 1)[0],
                               rtol=1e-12)
    assert F.max_pool2d(tfl.tensor(x), 2).shape == (3, 2, 2)


# --- Second derivatives --------------------------------------------------------------------------


def _second_order(f, *arrays: np.ndarray) -> bool:
    """Each gradient of f's squared sum, checked against finite differences itself."""
    tensors = [tfl.tensor(a) for a in arrays]
    first = tfl.grad(lambda *t: (f(*t) ** 2).sum(), argnums=tuple(range(len(arrays))))
    return all(tfl.testing.gradcheck(lambda *t, i=i: first(*t)[i], *tensors)
               for i in range(len(arrays)))


@pytest.mark.parametrize("keywords", [{}, {"stride": 2, "padding": 1},
                                      {"dilation": (2, 1), "groups": 2, "padding": "same"}])
def test_conv2d_second_derivatives_match_finite_differences(keywords: dict) -> None:
    x, w = RNG.normal(size=(2, 4, 6, 5)), RNG.normal(size=(4, 4 // keywords.get("groups", 1),
                                                         3, 2))
    assert _second_order(lambda x, w: F.conv2d(x, w, **keywords), x, w)


@pytest.mark.parametrize("pool", [F.max_pool2d, F.avg_pool2d])
def test_pooling_second_derivatives_match_finite_differences(pool) -> None:
    x = RNG.normal(size=(2, 2, 6, 5))
    assert _second_order(lambda x: pool(x, (3, 2), (2, 1), (1, 1)), x)


def test_the_max_pools_gradient_goes_to_the_first_largest_value_as_pytorchs() -> None:
    x = tfl.tensor(np.array([[[[1.0, 3.0], [3.0, 0.0]]]]))
    g = tfl.grad(lambda x: F.max_pool2d(x, 2).sum())(x)
    np.testing.assert_array_equal(g.numpy(), [[[[0.0, 1.0], [0.0, 0.0]]]])


# --- Staged, saved, loaded -----------------------------------------------------------------------


def _net(x: tfl.Tensor, w: tfl.Tensor) -> tfl.Tensor:
    y = F.conv2d(x, w, stride=(1, 2), padding=(1, 2), dilation=(2, 1), groups=2).relu()
    return F.avg_pool2d(F.max_pool2d(y, 2, 1, 1), (2, 1))


def test_staged_is_eager_values_and_gradients() -> None:
    x, w = randn(2, 4, 8, 7), randn(4, 2, 3, 3)
    loss = tfl.grad(lambda x, w: (_net(x, w) ** 2).sum(), argnums=(0, 1))
    for got, want in zip(tfl.function(loss)(x, w), loss(x, w), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    np.testing.assert_allclose(tfl.compile(_net, x, w)(x, w).numpy(), _net(x, w).numpy(),
                               rtol=1e-12)


def test_a_graph_of_convolutions_and_pools_is_saved_and_loaded(tmp_path: Path) -> None:
    x, w = randn(2, 4, 8, 7), randn(4, 2, 3, 3)
    grads = tfl.grad(lambda x, w: (_net(x, w) ** 2).sum(), argnums=(0, 1))
    folder = tfl.save(tfl.compile(grads, x, w), tmp_path / "cnn")
    loaded = tfl.load(folder)
    for got, want in zip(loaded(x, w), grads(x, w), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    text = (folder / "saved.json").read_text()
    assert '"op": "conv2d_weight_grad"' in text.replace('"op":"', '"op": "')


@pytest.mark.parametrize(("param", "value", "words"), [
    ("stride", [0, 1], "stride[0]"), ("padding", [1, 1, -1, 0], "padding[2]"),
    ("dilation", [1, 1 << 40], "dilation[1]"), ("padding", [1, 1], "4 integers"),
    ("groups", 0, "groups"), ("groups", 3, "groups=3"), ("stride", "2", "stride"),
])
def test_hostile_window_parameters_are_refused(tmp_path: Path, param: str, value: object,
                                               words: str) -> None:
    x, w = randn(1, 4, 5, 5), randn(2, 2, 3, 3)
    folder = tfl.save(tfl.compile(lambda x, w: F.conv2d(x, w, groups=2), x, w),
                      tmp_path / "conv")
    document = json.loads((folder / "saved.json").read_text())
    next(n for n in document["graph"]["nodes"] if n["op"] == "conv2d")["params"][param] = value
    (folder / "saved.json").write_text(json.dumps(document))
    with pytest.raises(SavedGraphError) as info:
        tfl.load(folder)
    assert words in str(info.value)


# --- Mistakes ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: F.max_pool2d(tfl.ones(1, 1, 4, 4), 2, padding=2), ShapeError, "half"),
    (lambda: F.max_pool2d(tfl.ones(1, 1, 4, 4), 0), DTypeError, "kernel_size"),
    (lambda: F.avg_pool2d(tfl.ones(1, 1, 2, 2), 3), ShapeError, "does not fit"),
    (lambda: F.avg_pool2d(tfl.ones(4, 4), 2), ShapeError, "(N, C, H, W)"),
    (lambda: F.max_pool2d(tfl.ones(1, 1, 4, 4, dtype="int32"), 2), DTypeError, "floating"),
    (lambda: F.conv2d(tfl.ones(1, 1, 4, 4, dtype="int64"), tfl.ones(1, 1, 2, 2, dtype="int64")),
     DTypeError, "floating"),
    (lambda: F.batch_norm(tfl.ones(3), None, None), ShapeError, "(N, C)"),
    (lambda: nn.BatchNorm2d(3)(tfl.ones(2, 4, 5, 5)), tfl.TeachflowError, "3 channels"),
])
def test_mistakes_are_named_with_the_users_line(make, error, words) -> None:
    with pytest.raises(error) as info:
        make()
    assert words in str(info.value) and info.value.hint
    assert "at test_convolution.py:" in str(info.value)  # the line that called it


# --- Batch norm ----------------------------------------------------------------------------------


def test_batch_norm_trains_on_the_batch_and_moves_its_running_statistics() -> None:
    x = RNG.normal(loc=2.0, scale=3.0, size=(6, 3, 4, 5))
    bn = nn.BatchNorm2d(3, momentum=0.2, dtype="float64")
    with tfl.no_grad():
        bn.weight[...] = tfl.tensor([1.0, 2.0, 0.5])
        bn.bias[...] = tfl.tensor([0.0, -1.0, 1.0])
    got = bn(tfl.tensor(x)).numpy()
    mean, var = x.mean(axis=(0, 2, 3)), x.var(axis=(0, 2, 3))
    c = (1, 3, 1, 1)
    want = (x - mean.reshape(c)) / np.sqrt(var.reshape(c) + 1e-5) * np.array(
        [1.0, 2.0, 0.5]).reshape(c) + np.array([0.0, -1.0, 1.0]).reshape(c)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    count = 6 * 4 * 5
    np.testing.assert_allclose(bn.running_mean.numpy(), 0.2 * mean, rtol=1e-12)
    np.testing.assert_allclose(bn.running_var.numpy(), 0.8 + 0.2 * var * count / (count - 1),
                               rtol=1e-12)
    assert bn.num_batches_tracked.item() == 1
    bn.eval()
    want = (x - bn.running_mean.numpy().reshape(c)) / np.sqrt(
        bn.running_var.numpy().reshape(c) + 1e-5) * bn.weight.numpy().reshape(c) + \
        bn.bias.numpy().reshape(c)
    np.testing.assert_allclose(bn(tfl.tensor(x)).numpy(), want, rtol=1e-12)
    assert bn.num_batches_tracked.item() == 1  # (eval moves nothing)


def test_batch_norm_1d_of_features_and_of_sequences() -> None:
    for shape, axes in (((8, 3), (0,)), ((4, 3, 5), (0, 2))):
        x = RNG.normal(size=shape)
        got = nn.BatchNorm1d(3, affine=False, dtype="float64")(tfl.tensor(x)).numpy()
        keep = tuple(1 if a in axes else d for a, d in enumerate(shape))
        want = (x - x.mean(axis=axes).reshape(keep)) / np.sqrt(
            x.var(axis=axes).reshape(keep) + 1e-5)
        np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    assert tfl.testing.gradcheck(lambda x: F.batch_norm(x, None, None, training=True),
                                 RNG.normal(size=(5, 2, 3)))


def test_a_staged_training_step_writes_the_running_statistics_back_as_eagerly() -> None:
    x, y = randn(8, 2, 6, 6).astype("float32"), tfl.tensor(RNG.integers(0, 3, size=8))

    def model() -> nn.Module:
        tfl.manual_seed(3)
        return nn.Sequential(nn.Conv2d(2, 4, 3), nn.BatchNorm2d(4), nn.ReLU(), nn.MaxPool2d(2),
                             nn.Flatten(), nn.Linear(16, 3))

    states = []
    for staged in (False, True):
        m = model()
        opt = tfl.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y, m=m, opt=opt):
            opt.zero_grad()
            loss = F.cross_entropy(m(x), y)
            loss.backward()
            opt.step()
            return loss
        fn = tfl.function(step) if staged else step
        losses = [fn(x, y).item() for _ in range(3)]
        states.append((losses, {k: v.numpy() for k, v in m.state_dict().items()}))
    (eager_losses, eager), (staged_losses, staged) = states
    np.testing.assert_allclose(staged_losses, eager_losses, rtol=1e-5)
    assert list(staged) == list(eager)
    assert [k for k in eager if k.startswith("1.")] == [
        "1.weight", "1.bias", "1.running_mean", "1.running_var", "1.num_batches_tracked"]
    for name in eager:
        np.testing.assert_allclose(staged[name], eager[name], rtol=1e-5, atol=1e-6)
    assert eager["1.num_batches_tracked"] == 3 and np.abs(eager["1.running_mean"]).max() > 0


def test_buffers_are_in_the_state_dict_in_pytorchs_order_and_load_back() -> None:
    bn = nn.BatchNorm2d(2)
    assert list(bn.state_dict()) == ["weight", "bias", "running_mean", "running_var",
                                     "num_batches_tracked"]
    assert [n for n, _ in bn.named_parameters()] == ["weight", "bias"]
    other = nn.BatchNorm2d(2)
    other.load_state_dict({**bn.state_dict(), "running_var": np.array([4.0, 9.0])})
    np.testing.assert_array_equal(other.running_var.numpy(), [4.0, 9.0])
    assert other.running_var.dtype == np.float32
    assert repr(bn) == ("BatchNorm2d(2, eps=1e-05, momentum=0.1, affine=True, "
                        "track_running_stats=True)")
    assert repr(nn.MaxPool2d(2)) == "MaxPool2d(kernel_size=2, stride=2, padding=0)"


def test_batch_norm_fuses_and_the_fused_kernel_computes_what_eager_computes() -> None:
    x = randn(4, 3, 5, 5)
    fn = lambda x: F.batch_norm(x, None, None, training=True).relu()
    compiled = tfl.compile(fn, x)
    assert len(compiled.graph.nodes) < len(tfl.trace(fn, x).nodes)
    np.testing.assert_allclose(compiled(x).numpy(), fn(x).numpy(), rtol=1e-12, atol=1e-12)


def test_vmap_of_per_example_kernels_is_one_grouped_convolution() -> None:
    xs, ws = randn(3, 2, 4, 5, 5), randn(3, 2, 4, 3, 3)
    got = tfl.vmap(lambda x, w: F.conv2d(x, w, padding=1))(xs, ws)
    for b in range(3):
        np.testing.assert_allclose(got[b].numpy(), conv2d_reference(
            xs[b].numpy(), ws[b].numpy(), (1, 1), (1, 1), (1, 1), 1), rtol=1e-12)
    graph = tfl.trace(tfl.vmap(lambda x, w: F.conv2d(x, w, padding=1)), xs, ws)
    [conv] = [n for n in graph.nodes if n.op is convolution.conv2d]
    assert conv.params["groups"] == 3


def test_max_pool2d_select_reads_the_winning_taps() -> None:
    x = tfl.tensor(np.array([[[[1.0, 5.0, 2.0], [4.0, 0.0, 3.0]]]]))
    y = tfl.tensor(np.array([[[[10.0, 20.0, 30.0], [40.0, 50.0, 60.0]]]]))
    got = bind(pooling.max_pool2d_select, y, x, kernel_size=(2, 2), stride=(1, 1),
               padding=(0, 0, 0, 0))
    np.testing.assert_array_equal(got.numpy(), [[[[20.0, 20.0]]]])
