"""`tfl.nn`'s layers a PyTorch user reaches for (issue 26, §2): `Conv2d` and `F.conv2d`,
`LayerNorm`, `Embedding`, `CrossEntropyLoss` and `MSELoss`, and `nn.utils.clip_grad_norm_`.

Every value is checked against a NumPy reference written here (the convolution as the naive
loop of its definition), every gradient against finite differences (`tfl.testing.gradcheck`),
and each layer eagerly and staged with `tfl.function`.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.errors import DTypeError, IndexingError, ShapeError, TeachflowError

nn = tfl.nn
F = tfl.nn.functional
RNG = np.random.default_rng(26)


def eager_and_staged(fn, *args):
    """`fn(*args)` eagerly, then staged (a fresh trace), as NumPy arrays."""
    return fn(*args).numpy(), tfl.function(fn)(*args).numpy()


# --- Convolution ----------------------------------------------------------------------------


def conv2d_loops(x, w, b, stride, padding, dilation, groups):
    """The definition: out[n, o, i, j] = b[o] + sum over c, ki, kj of
    x_padded[n, g·C/G + c, i·s + ki·d, j·s + kj·d] · w[o, c, ki, kj], g = o's group."""
    n_images, _, h, width = x.shape
    out_channels, group_channels, kh, kw = w.shape
    (sh, sw), (dh, dw), ((pt, pb), (pl, pr)) = stride, dilation, padding
    xp = np.pad(x, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    oh = (h + pt + pb - dh * (kh - 1) - 1) // sh + 1
    ow = (width + pl + pr - dw * (kw - 1) - 1) // sw + 1
    out = np.zeros((n_images, out_channels, oh, ow))
    per_group = out_channels // groups
    for n in range(n_images):
        for o in range(out_channels):
            first = (o // per_group) * group_channels
            for i in range(oh):
                for j in range(ow):
                    total = 0.0 if b is None else b[o]
                    for c in range(group_channels):
                        for ki in range(kh):
                            for kj in range(kw):
                                total += (xp[n, first + c, i * sh + ki * dh, j * sw + kj * dw]
                                          * w[o, c, ki, kj])
                    out[n, o, i, j] = total
    return out


# (x shape, w shape, bias, conv2d keywords, the loop's (stride, padding, dilation, groups))
CONVS = {
    "plain": ((2, 3, 5, 6), (4, 3, 3, 3), True, {}, ((1, 1), ((0, 0), (0, 0)), (1, 1), 1)),
    "stride-padding": ((2, 2, 7, 6), (3, 2, 3, 2), True, dict(stride=2, padding=1),
                       ((2, 2), ((1, 1), (1, 1)), (1, 1), 1)),
    "pairs": ((1, 2, 8, 7), (2, 2, 2, 3), False, dict(stride=(2, 1), padding=(0, 2)),
              ((2, 1), ((0, 0), (2, 2)), (1, 1), 1)),
    "dilation": ((2, 1, 7, 7), (2, 1, 3, 3), True, dict(dilation=2, padding=2),
                 ((1, 1), ((2, 2), (2, 2)), (2, 2), 1)),
    "groups": ((2, 4, 5, 5), (6, 2, 3, 3), True, dict(groups=2, padding=1),
               ((1, 1), ((1, 1), (1, 1)), (1, 1), 2)),
    "depthwise": ((1, 3, 4, 5), (3, 1, 2, 2), True, dict(groups=3, stride=(1, 2)),
                  ((1, 2), ((0, 0), (0, 0)), (1, 1), 3)),
    "same-even-kernel": ((1, 2, 5, 6), (2, 2, 2, 4), True, dict(padding="same"),
                         ((1, 1), ((0, 1), (1, 2)), (1, 1), 1)),
    "valid": ((1, 2, 4, 4), (1, 2, 3, 3), False, dict(padding="valid"),
              ((1, 1), ((0, 0), (0, 0)), (1, 1), 1)),
    "1x1": ((3, 4, 2, 3), (5, 4, 1, 1), True, {}, ((1, 1), ((0, 0), (0, 0)), (1, 1), 1)),
}


@pytest.mark.parametrize("case", CONVS)
def test_conv2d_is_the_loop_of_its_definition_eagerly_and_staged(case) -> None:
    x_shape, w_shape, with_bias, keywords, loop = CONVS[case]
    x, w = RNG.normal(size=x_shape), RNG.normal(size=w_shape)
    b = RNG.normal(size=w_shape[0]) if with_bias else None
    expected = conv2d_loops(x, w, b, *loop)
    args = [tfl.tensor(x), tfl.tensor(w)] + ([tfl.tensor(b)] if with_bias else [])
    for got in eager_and_staged(lambda *a: F.conv2d(*a, **keywords), *args):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", ["stride-padding", "dilation", "groups", "same-even-kernel"])
def test_conv2d_gradients_match_finite_differences(case) -> None:
    x_shape, w_shape, _, keywords, _ = CONVS[case]
    x = RNG.normal(size=(1, *x_shape[1:]))
    w, b = RNG.normal(size=w_shape), RNG.normal(size=w_shape[0])
    assert tfl.testing.gradcheck(lambda x, w, b: F.conv2d(x, w, b, **keywords), x, w, b)


def test_conv2d_gradients_staged_are_the_eager_ones() -> None:
    x, w = tfl.tensor(RNG.normal(size=(2, 4, 6, 5))), tfl.tensor(RNG.normal(size=(4, 2, 3, 2)))
    loss = tfl.grad(lambda x, w: (F.conv2d(x, w, stride=2, padding=1, groups=2) ** 2).sum(),
                    argnums=(0, 1))
    for eager, staged in zip(loss(x, w), tfl.function(loss)(x, w), strict=True):
        np.testing.assert_allclose(staged.numpy(), eager.numpy(), rtol=1e-12)


def test_conv2d_of_one_image_without_a_batch_axis() -> None:
    x, w = RNG.normal(size=(2, 4, 4)), RNG.normal(size=(3, 2, 3, 3))
    got = F.conv2d(tfl.tensor(x), tfl.tensor(w), padding=1).numpy()
    expected = conv2d_loops(x[None], w, None, (1, 1), ((1, 1), (1, 1)), (1, 1), 1)[0]
    np.testing.assert_allclose(got, expected, rtol=1e-12)


def test_the_conv2d_module_is_pytorchs() -> None:
    tfl.manual_seed(0)
    conv = nn.Conv2d(4, 6, kernel_size=(3, 2), stride=2, padding=1, groups=2)
    assert conv.weight.shape == (6, 2, 3, 2) and conv.bias.shape == (6,)
    assert [n for n, _ in conv.named_parameters()] == ["weight", "bias"]
    bound = 1 / math.sqrt(2 * 3 * 2)  # fan-in: in_channels / groups × the kernel's area
    assert np.abs(conv.weight.numpy()).max() <= bound and np.abs(conv.bias.numpy()).max() <= bound
    assert np.abs(conv.weight.numpy()).max() > 0.8 * bound
    assert repr(conv) == "Conv2d(4, 6, kernel_size=(3, 2), stride=(2, 2), padding=(1, 1), groups=2)"
    assert repr(nn.Conv2d(1, 2, 3, bias=False, dilation=2)) == \
        "Conv2d(1, 2, kernel_size=(3, 3), stride=(1, 1), dilation=(2, 2), bias=False)"
    x = RNG.normal(size=(2, 4, 5, 5)).astype(np.float32)
    expected = conv2d_loops(x, conv.weight.numpy(), conv.bias.numpy(), (2, 2),
                            ((1, 1), (1, 1)), (1, 1), 2)
    for got in eager_and_staged(conv, tfl.tensor(x)):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)


def test_a_small_convnet_trains_staged_as_eagerly() -> None:
    def model():
        tfl.manual_seed(1)
        return nn.Sequential(nn.Conv2d(1, 4, 3, padding=1), nn.ReLU(), nn.Flatten(),
                             nn.Linear(4 * 5 * 5, 3))
    x = tfl.tensor(RNG.normal(size=(6, 1, 5, 5)).astype(np.float32))
    y = tfl.tensor(np.array([0, 1, 2, 0, 1, 2]))
    results = []
    for staged in (False, True):
        m = model()
        opt = tfl.optim.SGD(m.parameters(), lr=0.1)

        def step(x, y, m=m, opt=opt):
            opt.zero_grad()
            loss = nn.CrossEntropyLoss()(m(x), y)
            loss.backward()
            opt.step()
            return loss
        fn = tfl.function(step) if staged else step
        results.append([fn(x, y).item() for _ in range(5)])
    np.testing.assert_allclose(results[1], results[0], rtol=1e-5)
    assert results[0][-1] < results[0][0]


@pytest.mark.parametrize(("make", "error", "words"), [
    (lambda: F.conv2d(tfl.ones(1, 3, 5, 5), tfl.ones(2, 2, 3, 3)), ShapeError, "3 channels"),
    (lambda: F.conv2d(tfl.ones(1, 4, 5, 5), tfl.ones(3, 2, 3, 3), groups=2), ShapeError,
     "groups=2"),
    (lambda: F.conv2d(tfl.ones(1, 1, 2, 2), tfl.ones(1, 1, 3, 3)), ShapeError, "does not fit"),
    (lambda: F.conv2d(tfl.ones(5, 5), tfl.ones(1, 1, 3, 3)), ShapeError, "(N, C, H, W)"),
    (lambda: F.conv2d(tfl.ones(1, 1, 5, 5), tfl.ones(1, 1, 3, 3), tfl.ones(2)), ShapeError,
     "bias"),
    (lambda: F.conv2d(tfl.ones(1, 1, 5, 5), tfl.ones(1, 1, 3, 3), stride=0), DTypeError,
     "stride"),
    (lambda: F.conv2d(tfl.ones(1, 1, 5, 5), tfl.ones(1, 1, 3, 3), padding="same", stride=2),
     ShapeError, "stride 1"),
    (lambda: nn.Conv2d(3, 4, 3, groups=2), TeachflowError, "groups=2"),
    (lambda: nn.Conv2d(3, 4, (3, 3, 3)), DTypeError, "kernel_size"),
])
def test_conv2d_mistakes_say_what_to_do(make, error, words) -> None:
    with pytest.raises(error) as info:
        make()
    assert words in str(info.value) and info.value.hint


# --- LayerNorm ------------------------------------------------------------------------------


def layer_norm_reference(x, axes, weight=None, bias=None, eps=1e-5):
    mean = x.mean(axis=axes, keepdims=True)
    y = (x - mean) / np.sqrt(x.var(axis=axes, keepdims=True) + eps)
    return y * (1 if weight is None else weight) + (0 if bias is None else bias)


def test_layer_norm_normalises_the_last_axes_eagerly_and_staged() -> None:
    x = RNG.normal(loc=3.0, scale=2.0, size=(2, 3, 4))
    weight, bias = RNG.normal(size=(3, 4)), RNG.normal(size=(3, 4))
    expected = layer_norm_reference(x, (1, 2), weight, bias)
    for got in eager_and_staged(lambda x, w, b: F.layer_norm(x, (3, 4), w, b), tfl.tensor(x),
                                tfl.tensor(weight), tfl.tensor(bias)):
        np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-12)
    assert tfl.testing.gradcheck(lambda x, w, b: F.layer_norm(x, (3, 4), w, b, eps=1e-3),
                                 x, weight, bias)


def test_the_layer_norm_module_starts_as_the_identity_transform() -> None:
    ln = nn.LayerNorm(4)
    assert [n for n, _ in ln.named_parameters()] == ["weight", "bias"]
    np.testing.assert_array_equal(ln.weight.numpy(), np.ones(4))
    np.testing.assert_array_equal(ln.bias.numpy(), np.zeros(4))
    assert repr(ln) == "LayerNorm((4,), eps=1e-05, elementwise_affine=True)"
    x = RNG.normal(size=(5, 4)).astype(np.float32)
    np.testing.assert_allclose(ln(tfl.tensor(x)).numpy(), layer_norm_reference(x, -1),
                               rtol=1e-5, atol=1e-6)
    assert list(nn.LayerNorm(4, elementwise_affine=False).parameters()) == []
    assert [n for n, _ in nn.LayerNorm((2, 3), bias=False).named_parameters()] == ["weight"]
    with pytest.raises(ShapeError, match=r"shape \(4,\), and the input has shape \(2, 3\)"):
        ln(tfl.ones(2, 3))


# --- Embedding ------------------------------------------------------------------------------


def test_embedding_reads_rows_and_sums_the_gradients_of_repeated_ones() -> None:
    emb = nn.Embedding(6, 3)
    index = np.array([[0, 2, 2], [5, 0, 2]])
    table = emb.weight.numpy()
    for got in eager_and_staged(emb, tfl.tensor(index)):
        np.testing.assert_array_equal(got, table[index])
    cotangent = RNG.normal(size=(2, 3, 3)).astype(np.float32)
    (emb(tfl.tensor(index)) * tfl.tensor(cotangent)).sum().backward()
    expected = np.zeros((6, 3), np.float32)
    np.add.at(expected, index, cotangent)
    np.testing.assert_allclose(emb.weight.grad.numpy(), expected, rtol=1e-6)


def test_embeddings_padding_row_starts_at_zero_and_gets_no_gradient() -> None:
    emb = nn.Embedding(5, 2, padding_idx=-1)
    assert emb.padding_idx == 4 and repr(emb) == "Embedding(5, 2, padding_idx=4)"
    np.testing.assert_array_equal(emb.weight.numpy()[4], [0.0, 0.0])
    (emb(tfl.tensor([4, 1, 4])) * 3.0).sum().backward()
    np.testing.assert_array_equal(emb.weight.grad.numpy()[4], [0.0, 0.0])
    np.testing.assert_array_equal(emb.weight.grad.numpy()[1], [3.0, 3.0])
    with tfl.no_grad():
        emb.weight[4] = 7.0  # a padding row's values are read as they are
    np.testing.assert_array_equal(emb(tfl.tensor([4])).numpy(), [[7.0, 7.0]])


@pytest.mark.parametrize(("index", "error", "words"), [
    ([0, 5], IndexingError, "index 5 is outside 0..4"),
    ([-1], IndexingError, "index -1"),  # (NumPy would read the last row)
    ([0.0, 1.0], DTypeError, "integer indices"),
])
def test_embedding_refuses_indices_outside_its_table(index, error, words) -> None:
    with pytest.raises(error) as info:
        nn.Embedding(5, 2)(tfl.tensor(index))
    assert words in str(info.value) and info.value.op == "embedding"


# --- Loss modules ---------------------------------------------------------------------------


def cross_entropy_reference(logits, target, ignore_index):
    shifted = logits - logits.max(axis=1, keepdims=True)
    log_p = shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))
    kept = target != ignore_index
    each = np.where(kept, -log_p[np.arange(len(target)), np.where(kept, target, 0)], 0.0)
    return each, kept


@pytest.mark.parametrize("ignore_index", [-100, 2, 0])
@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_loss_ignores_ignore_index_eagerly_and_staged(reduction,
                                                                    ignore_index) -> None:
    logits = RNG.normal(size=(7, 4))
    target = np.array([0, 2, -100, 1, 2, 3, 0])
    target = np.where(target == -100, ignore_index, target)
    each, kept = cross_entropy_reference(logits, target, ignore_index)
    expected = {"mean": each.sum() / kept.sum(), "sum": each.sum(), "none": each}[reduction]
    loss = nn.CrossEntropyLoss(reduction=reduction, ignore_index=ignore_index)
    for got in eager_and_staged(loss, tfl.tensor(logits), tfl.tensor(target)):
        np.testing.assert_allclose(got, expected, rtol=1e-12)
    z = tfl.tensor(logits, requires_grad=True)
    F.cross_entropy(z, tfl.tensor(target), ignore_index=ignore_index).backward()
    np.testing.assert_array_equal(z.grad.numpy()[~kept], 0.0)  # an ignored row: no gradient
    assert tfl.testing.gradcheck(lambda z: F.cross_entropy(z, tfl.tensor(target),
                                                           ignore_index=ignore_index), logits)


def test_mse_loss_module_and_bad_reductions() -> None:
    a, b = RNG.normal(size=(3, 2)), RNG.normal(size=(3, 2))
    np.testing.assert_allclose(nn.MSELoss(reduction="sum")(tfl.tensor(a), tfl.tensor(b)).numpy(),
                               ((a - b) ** 2).sum(), rtol=1e-12)
    for make in (lambda: nn.MSELoss(reduction="avg"), lambda: nn.CrossEntropyLoss(reduction=1)):
        with pytest.raises(TeachflowError, match="reduction must be"):
            make()


# --- clip_grad_norm_ ------------------------------------------------------------------------


@pytest.mark.parametrize("norm_type", [2.0, 1.0, 3.0, math.inf])
@pytest.mark.parametrize("max_norm", [0.5, 1e3])
def test_clip_grad_norm_returns_the_total_norm_and_scales_the_gradients(max_norm,
                                                                        norm_type) -> None:
    grads = [RNG.normal(size=(3, 2)), RNG.normal(size=4), RNG.normal(size=())]
    params = [tfl.tensor(np.zeros_like(g), requires_grad=True) for g in grads]
    unused = tfl.tensor([1.0], requires_grad=True)  # no .grad: left out
    for p, g in zip(params, grads, strict=True):
        (p * tfl.tensor(g)).sum().backward()
    everything = np.concatenate([g.ravel() for g in grads])
    total = np.abs(everything).max() if norm_type == math.inf else \
        (np.abs(everything) ** norm_type).sum() ** (1 / norm_type)
    got = nn.utils.clip_grad_norm_([*params, unused], max_norm, norm_type=norm_type)
    assert isinstance(got, tfl.Tensor) and got.shape == ()
    np.testing.assert_allclose(got.item(), total, rtol=1e-12)
    factor = min(1.0, max_norm / (total + 1e-6))
    for p, g in zip(params, grads, strict=True):
        np.testing.assert_allclose(p.grad.numpy(), g * factor, rtol=1e-12)
    assert unused.grad is None


def test_clip_grad_norm_in_a_staged_step_clips_as_eagerly() -> None:
    w, twin = (tfl.tensor([3.0, 4.0], requires_grad=True) for _ in range(2))

    def step(p):
        p.grad = None
        (p * p).sum().backward()
        return nn.utils.clip_grad_norm_(p, 1.0)

    staged = tfl.function(lambda: step(w))
    for _ in range(2):
        np.testing.assert_allclose(staged().numpy(), step(twin).numpy(), rtol=1e-6)
        np.testing.assert_allclose(w.grad.numpy(), twin.grad.numpy(), rtol=1e-6)
    np.testing.assert_allclose(w.grad.numpy(), [0.6, 0.8], rtol=1e-6)


def test_clip_grad_norm_mistakes() -> None:
    w = tfl.tensor([np.inf, 1.0], requires_grad=True)
    (w * w).sum().backward()  # a gradient of inf
    with pytest.raises(TeachflowError, match="max_norm must be"):
        nn.utils.clip_grad_norm_([w], -1.0)
    with pytest.raises(TeachflowError, match="inf") as info:
        nn.utils.clip_grad_norm_([w], 1.0, error_if_nonfinite=True)
    assert info.value.op == "clip_grad_norm_"
    assert nn.utils.clip_grad_norm_([tfl.tensor([1.0], requires_grad=True)], 1.0).item() == 0.0
