"""The classification losses (`teachflow/nn/losses.py`) against their formulas, written out here
in NumPy: `nll_loss`, `cross_entropy` (labels with weights, ignored labels and label smoothing;
probability targets), `binary_cross_entropy` and its stable form from logits. Every reduction;
gradients against finite differences; staged equal to eager; saved and loaded; their modules;
errors that name the loss, the shapes and the line.
"""

from __future__ import annotations

import numpy as np
import pytest
from helpers import check_gradients

import teachflow as tfl
import teachflow.nn.functional as F

RNG = np.random.default_rng(7)
Z = RNG.normal(size=(5, 4))  # logits: 5 examples, 4 classes
Y = np.array([3, 0, 2, 2, 1])
W = np.array([0.5, 2.0, 1.0, 1.5])
P = RNG.dirichlet(np.ones(4), size=5)  # probability targets, rows summing to 1
T = RNG.random((5, 4))  # binary targets in [0, 1]


def log_softmax(z: np.ndarray) -> np.ndarray:
    shifted = z - z.max(axis=1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=1, keepdims=True))


def nll(logp: np.ndarray, y: np.ndarray, w: np.ndarray, eps: float, reduction: str,
        ignore: int = -100) -> np.ndarray:
    """PyTorch's formula: per example (1 - eps) w[y] (-logp[y]) + eps sum_c w[c] (-logp[c]) / C;
    the mean divides by the weights of the labels kept."""
    kept = y != ignore
    safe = np.where(kept, y, 0)
    loss = (1 - eps) * -w[safe] * logp[np.arange(len(y)), safe] \
        + eps * -(w * logp).sum(axis=1) / logp.shape[1]
    loss = np.where(kept, loss, 0.0)
    if reduction == "none":
        return loss
    return loss.sum() / (w[safe] * kept).sum() if reduction == "mean" else loss.sum()


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("eps", [0.0, 0.2])
def test_cross_entropy_and_nll_of_labels_are_pytorchs_formula(reduction: str, weighted: bool,
                                                              eps: float) -> None:
    w = W if weighted else np.ones(4)
    weight = tfl.tensor(W) if weighted else None
    want = nll(log_softmax(Z), Y, w, eps, reduction)
    got = F.cross_entropy(tfl.tensor(Z), tfl.tensor(Y), reduction, weight=weight,
                          label_smoothing=eps)
    np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    if eps == 0.0:
        got = F.nll_loss(tfl.tensor(log_softmax(Z)), tfl.tensor(Y), weight, reduction=reduction)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)


@pytest.mark.parametrize("ignored", [0, 2, -1])  # a class, another class, outside the classes
def test_ignored_labels_add_nothing_and_are_not_counted(ignored: int) -> None:
    y = np.array([3, ignored, 2, ignored, 1])
    for eps, weight in [(0.0, None), (0.1, W)]:
        want = nll(log_softmax(Z), y, np.ones(4) if weight is None else W, eps, "mean",
                   ignore=ignored)
        kwargs = {"weight": None if weight is None else tfl.tensor(weight),
                  "label_smoothing": eps}
        eager = F.cross_entropy(tfl.tensor(Z), tfl.tensor(y), "mean", ignored, **kwargs)
        staged = tfl.function(lambda z, y, kwargs=kwargs: F.cross_entropy(
            z, y, "mean", ignored, **kwargs))(tfl.tensor(Z), tfl.tensor(y))  # (counted in it)
        np.testing.assert_allclose(eager.numpy(), want, rtol=1e-12)
        np.testing.assert_allclose(staged.numpy(), want, rtol=1e-12)


def test_cross_entropy_of_probability_targets_smoothed_and_weighted() -> None:
    logp = log_softmax(Z)
    smoothed = 0.7 * P + 0.3 / 4
    cases = [({}, -(P * logp).sum(axis=1).mean()),
             ({"label_smoothing": 0.3}, -(smoothed * logp).sum(axis=1).mean()),
             ({"weight": tfl.tensor(W), "reduction": "sum"}, -(W * P * logp).sum()),
             ({"reduction": "none"}, -(P * logp).sum(axis=1))]
    for kwargs, want in cases:
        got = F.cross_entropy(tfl.tensor(Z), tfl.tensor(P), **kwargs)
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-12)
    # The labels as one-hot probabilities give the labels' loss.
    one_hot = np.eye(4)[Y]
    np.testing.assert_allclose(F.cross_entropy(tfl.tensor(Z), tfl.tensor(one_hot)).numpy(),
                               F.cross_entropy(tfl.tensor(Z), tfl.tensor(Y)).numpy(), rtol=1e-12)


def test_binary_cross_entropy_and_its_form_from_logits() -> None:
    p = 1 / (1 + np.exp(-Z))
    want = -(T * np.log(p) + (1 - T) * np.log(1 - p))
    for reduction, reduce in [("mean", np.mean), ("sum", np.sum), ("none", lambda a: a)]:
        got = F.binary_cross_entropy(tfl.tensor(p), tfl.tensor(T), reduction=reduction)
        np.testing.assert_allclose(got.numpy(), reduce(want), rtol=1e-10)
        got = F.binary_cross_entropy_with_logits(tfl.tensor(Z), tfl.tensor(T),
                                                 reduction=reduction)
        np.testing.assert_allclose(got.numpy(), reduce(want), rtol=1e-10)
    pw = np.array([1.0, 2.0, 0.5, 3.0])
    got = F.binary_cross_entropy_with_logits(tfl.tensor(Z), tfl.tensor(T), tfl.tensor(W),
                                             pos_weight=tfl.tensor(pw))
    np.testing.assert_allclose(got.numpy(), (W * -(pw * T * np.log(p) + (1 - T) * np.log(1 - p)))
                               .mean(), rtol=1e-10)


def test_the_stable_forms_never_overflow_and_clamp_the_logs_at_100() -> None:
    x = tfl.tensor([-1000.0, -50.0, 0.0, 50.0, 1000.0], dtype="float32", requires_grad=True)
    t = tfl.tensor([1.0, 1.0, 0.5, 0.0, 0.0], dtype="float32")
    with np.errstate(over="raise", invalid="raise"):
        loss = F.binary_cross_entropy_with_logits(x, t, reduction="none")
    np.testing.assert_allclose(loss.numpy(), [1000.0, 50.0, np.log(2), 50.0, 1000.0],
                               rtol=1e-6)
    loss.sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), [-1.0, -1.0, 0.0, 1.0, 1.0], atol=1e-6)
    p = tfl.tensor([0.0, 1.0, 1.0], requires_grad=True)
    loss = F.binary_cross_entropy(p, tfl.tensor([1.0, 0.0, 1.0]), reduction="none")
    np.testing.assert_allclose(loss.numpy(), [100.0, 100.0, 0.0], rtol=1e-6)  # PyTorch's clamp
    loss.sum().backward()
    assert np.isfinite(p.grad.numpy()).all()


@pytest.mark.parametrize("name", ["cross_entropy", "smoothed", "probabilities", "nll_loss",
                                  "binary", "logits"])
def test_gradients_match_finite_differences(name: str) -> None:
    y, p, t, w = tfl.tensor(Y), tfl.tensor(P), tfl.tensor(T), tfl.tensor(W)
    fn = {"cross_entropy": lambda z: F.cross_entropy(z, y, weight=w),
          "smoothed": lambda z: F.cross_entropy(z, y, "none", 2, label_smoothing=0.2),
          "probabilities": lambda z: F.cross_entropy(z, p),
          "nll_loss": lambda z: F.nll_loss(z, y, w, reduction="sum"),
          "binary": lambda z: F.binary_cross_entropy(z.sigmoid(), t),
          "logits": lambda z: F.binary_cross_entropy_with_logits(z, t, pos_weight=w)}[name]
    check_gradients(fn, [Z])


def test_the_gradient_of_cross_entropy_is_softmax_minus_one_hot() -> None:
    g = tfl.grad(lambda z: F.cross_entropy(z, tfl.tensor(Y), "sum"))(tfl.tensor(Z))
    np.testing.assert_allclose(g.numpy(), np.exp(log_softmax(Z)) - np.eye(4)[Y], rtol=1e-12)


def test_second_derivatives_are_the_softmaxs_and_the_sigmoids() -> None:
    """d²/dz² of the summed cross-entropy is diag(p) - p pᵀ in each row, whatever the labels (and
    the smoothing); of the loss from logits, σ(x)(1 - σ(x))."""
    z = tfl.tensor(Z[0])
    hessian = tfl.hessian(lambda z: F.cross_entropy(z.reshape(1, 4), tfl.tensor(Y[:1]),
                                                    label_smoothing=0.3))(z)
    p = np.exp(log_softmax(Z[:1]))[0]
    np.testing.assert_allclose(hessian.numpy(), np.diag(p) - np.outer(p, p), atol=1e-12)
    s = 1 / (1 + np.exp(-Z))
    d2 = tfl.grad(lambda x: tfl.grad(lambda u: F.binary_cross_entropy_with_logits(
        u, tfl.tensor(T), reduction="sum"))(x).sum())(tfl.tensor(Z))
    np.testing.assert_allclose(d2.numpy(), s * (1 - s), rtol=1e-12)


def test_staged_saved_and_loaded_they_give_eager_values(tmp_path) -> None:
    def losses(z, y, p, t):
        return (F.cross_entropy(z, y, label_smoothing=0.1), F.cross_entropy(z, p),
                F.nll_loss(z.log_softmax(), y), F.binary_cross_entropy(z.sigmoid(), t),
                F.binary_cross_entropy_with_logits(z, t))

    args = [tfl.tensor(a) for a in (Z, Y, P, T)]
    staged = tfl.function(losses)
    want = [loss.item() for loss in losses(*args)]
    np.testing.assert_allclose([loss.item() for loss in staged(*args)], want, rtol=1e-12)
    loaded = tfl.load(tfl.save(staged, tmp_path / "losses"))
    np.testing.assert_allclose([loss.item() for loss in loaded(*args)], want, rtol=1e-12)


def test_the_modules_call_the_functions() -> None:
    z, y, t, w = tfl.tensor(Z), tfl.tensor(Y), tfl.tensor(T), tfl.tensor(W)
    pairs = [(tfl.nn.NLLLoss(w, reduction="sum")(z, y), F.nll_loss(z, y, w, reduction="sum")),
             (tfl.nn.CrossEntropyLoss(w, label_smoothing=0.1)(z, y),
              F.cross_entropy(z, y, weight=w, label_smoothing=0.1)),
             (tfl.nn.BCELoss()(z.sigmoid(), t), F.binary_cross_entropy(z.sigmoid(), t)),
             (tfl.nn.BCEWithLogitsLoss(pos_weight=w)(z, t),
              F.binary_cross_entropy_with_logits(z, t, pos_weight=w))]
    for module_value, function_value in pairs:
        assert module_value.item() == function_value.item()


@pytest.mark.parametrize(("call", "error", "words"), [
    (lambda: F.nll_loss(tfl.tensor(Z), tfl.tensor(Y[:3])), tfl.ShapeError, r"\(N, C\)"),
    (lambda: F.nll_loss(tfl.tensor(Z), tfl.tensor(Y * 1.0)), tfl.DTypeError, "integer targets"),
    (lambda: F.cross_entropy(tfl.tensor(Z), tfl.tensor(Y + 1)), tfl.TeachflowError,
     "class 4, outside"),
    (lambda: F.cross_entropy(tfl.tensor(Z), tfl.tensor(P[:, :3])), tfl.ShapeError,
     "probability targets of the logits. shape"),
    (lambda: F.cross_entropy(tfl.tensor(Z), tfl.tensor(Y), label_smoothing=1.5),
     tfl.TeachflowError, "label_smoothing is a number in"),
    (lambda: F.cross_entropy(tfl.tensor(Z), tfl.tensor(Y), weight=tfl.tensor(W[:3])),
     tfl.ShapeError, "weight has shape"),
    (lambda: F.binary_cross_entropy(tfl.tensor(Z), tfl.tensor(T)), tfl.TeachflowError,
     "outside \\[0, 1\\]"),
    (lambda: F.binary_cross_entropy_with_logits(tfl.tensor(Z), tfl.tensor(T[0])),
     tfl.ShapeError, "must be equal"),
    (lambda: F.binary_cross_entropy_with_logits(tfl.tensor(Z), tfl.tensor(T),
                                                reduction="avg"), tfl.TeachflowError,
     "reduction must be one of"),
])
def test_bad_input_names_the_loss_the_shapes_and_the_line(call, error, words: str) -> None:
    with pytest.raises(error, match=words) as caught:
        call()
    assert "test_losses.py" in str(caught.value.location)
