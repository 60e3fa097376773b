"""`tfl.nn` (issue 11, §1): modules as PyTorch's, their functional ops, and modules under tracing.

What PyTorch does is written out here by hand (its parameter names, its `repr` text, its
initialisation bounds), and every number is checked against NumPy formulas written in the test,
never against values taken from teachflow itself.
"""

from __future__ import annotations

import copy
import pickle
import weakref

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.errors import DTypeError, ShapeError, TeachflowError
from teachflow.viz.stepper_data import compilation_data

nn = tfl.nn
F = tfl.nn.functional


def raises(cls: type, op: str, *words: str):
    """``pytest.raises`` for a TeachflowError subclass that names `op`, says `words` and hints."""
    return _Raises(cls, op, words)


class _Raises:
    def __init__(self, cls: type, op: str, words: tuple[str, ...]) -> None:
        assert issubclass(cls, TeachflowError)
        self.context = pytest.raises(cls)
        self.op, self.words = op, words

    def __enter__(self) -> None:
        self.info = self.context.__enter__()

    def __exit__(self, *exc: object) -> bool:
        handled = self.context.__exit__(*exc)
        err = self.info.value
        text = str(err)
        assert err.op == self.op and text.startswith(f"{self.op}: "), text
        assert err.hint, f"no hint in: {text}"
        for word in self.words:
            assert word in text, (word, text)
        return handled


def names(module: nn.Module) -> list[str]:
    return [name for name, _ in module.named_parameters()]


def arrays(module: nn.Module) -> dict[str, np.ndarray]:
    return {name: p.numpy().copy() for name, p in module.named_parameters()}


class MLP(nn.Module):
    def __init__(self, n_in: int = 4, hidden: int = 8, n_out: int = 3) -> None:
        super().__init__()
        self.layer1 = nn.Linear(n_in, hidden)
        self.layer2 = nn.Linear(hidden, n_out)

    def forward(self, x):
        return self.layer2(self.layer1(x).relu())


def seed_model() -> nn.Sequential:
    """The seed's example, as written."""
    return tfl.nn.Sequential(tfl.nn.Linear(10, 32), tfl.nn.ReLU(), tfl.nn.Dropout(),
                             tfl.nn.Linear(32, 1))


# --- Parameters and children, by PyTorch's names ------------------------------------------------


def test_sequential_names_its_parameters_by_position_as_pytorch() -> None:
    model = seed_model()
    assert names(model) == ["0.weight", "0.bias", "3.weight", "3.bias"]
    shapes = [p.shape for p in model.parameters()]
    assert shapes == [(32, 10), (32,), (1, 32), (1,)]  # weight is (out_features, in_features)
    assert all(isinstance(p, nn.Parameter) and p.requires_grad for p in model.parameters())
    assert list(model.state_dict()) == names(model)


def test_a_subclass_names_parameters_by_attribute_and_nests() -> None:
    assert names(MLP()) == ["layer1.weight", "layer1.bias", "layer2.weight", "layer2.bias"]

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.features = nn.Sequential(nn.Linear(2, 3), nn.Tanh(), MLP(3, 4, 5))
            self.head = nn.Linear(5, 1, bias=False)
            self.scale = nn.Parameter(tfl.ones(1))  # assigned after the children

    net = Net()
    # PyTorch's order: a module's own parameters, then each child's, depth first.
    assert names(net) == ["scale", "features.0.weight", "features.0.bias",
                          "features.2.layer1.weight", "features.2.layer1.bias",
                          "features.2.layer2.weight", "features.2.layer2.bias", "head.weight"]
    assert [n for n, _ in net.named_children()] == ["features", "head"]
    assert list(net.children()) == [net.features, net.head]
    assert [n for n, _ in net.named_modules()] == [
        "", "features", "features.0", "features.1", "features.2", "features.2.layer1",
        "features.2.layer2", "head"]
    modules = list(net.modules())
    assert modules[0] is net and modules[4] is net.features[2]
    assert names(net.features[2]) == ["layer1.weight", "layer1.bias", "layer2.weight",
                                      "layer2.bias"]
    assert [n for n, _ in net.named_parameters(recurse=False)] == ["scale"]
    assert [n for n, _ in net.features.named_parameters(prefix="features")][:1] == [
        "features.0.weight"]


def test_a_shared_parameter_or_layer_is_listed_once_and_saved_under_each_name() -> None:
    a, b = nn.Linear(3, 3), nn.Linear(3, 3)
    b.weight = a.weight  # tied weights
    model = nn.Sequential(a, nn.ReLU(), b)
    assert names(model) == ["0.weight", "0.bias", "2.bias"]
    assert len(list(model.parameters())) == 3
    # PyTorch's state dict has every name, a tied weight under both.
    assert list(model.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    fresh = nn.Sequential(nn.Linear(3, 3), nn.ReLU(), nn.Linear(3, 3))
    fresh.load_state_dict(model.state_dict())
    np.testing.assert_array_equal(fresh[2].weight.numpy(), a.weight.numpy())

    layer = nn.Linear(2, 2)
    twice = nn.Sequential(layer, nn.Tanh(), layer)
    assert names(twice) == ["0.weight", "0.bias"]
    assert list(twice.modules()) == [twice, layer, twice[1]]
    assert list(twice.state_dict()) == ["0.weight", "0.bias", "2.weight", "2.bias"]


def test_a_layer_without_bias_has_no_bias_parameter() -> None:
    layer = nn.Linear(3, 2, bias=False)
    assert names(layer) == ["weight"] and layer.bias is None
    x = np.arange(6.0, dtype=np.float32).reshape(2, 3)
    np.testing.assert_allclose(layer(x).numpy(), x @ layer.weight.numpy().T, rtol=1e-6)


# --- How a module prints: PyTorch's text --------------------------------------------------------


def test_repr_of_the_seed_model_is_pytorchs() -> None:
    assert repr(seed_model()) == (
        "Sequential(\n"
        "  (0): Linear(in_features=10, out_features=32, bias=True)\n"
        "  (1): ReLU()\n"
        "  (2): Dropout(p=0.5, inplace=False)\n"
        "  (3): Linear(in_features=32, out_features=1, bias=True)\n"
        ")")


def test_repr_of_nested_and_custom_modules_is_pytorchs() -> None:
    inner = nn.Sequential(nn.Linear(2, 3, bias=False), nn.Tanh())
    assert repr(nn.Sequential(inner, nn.Flatten(), nn.Sigmoid())) == (
        "Sequential(\n"
        "  (0): Sequential(\n"
        "    (0): Linear(in_features=2, out_features=3, bias=False)\n"
        "    (1): Tanh()\n"
        "  )\n"
        "  (1): Flatten(start_dim=1, end_dim=-1)\n"
        "  (2): Sigmoid()\n"
        ")")
    assert repr(MLP()) == (
        "MLP(\n"
        "  (layer1): Linear(in_features=4, out_features=8, bias=True)\n"
        "  (layer2): Linear(in_features=8, out_features=3, bias=True)\n"
        ")")

    class Scaled(nn.Module):  # settings and children: the settings on a line of their own
        def __init__(self):
            super().__init__()
            self.inner = nn.ReLU()

        def extra_repr(self):
            return "scale=2.0"

    assert repr(Scaled()) == "Scaled(\n  scale=2.0\n  (inner): ReLU()\n)"
    assert repr(nn.Module()) == "Module()"
    assert repr(nn.Dropout(0.25)) == "Dropout(p=0.25, inplace=False)"
    assert repr(nn.Parameter(tfl.zeros(2))).startswith("Parameter containing:\n")


# --- Subclasses, calls, modes -------------------------------------------------------------------


def test_a_module_subclass_computes_its_forward() -> None:
    tfl.manual_seed(1)
    model = MLP()
    x = np.random.default_rng(0).normal(size=(5, 4)).astype(np.float32)
    w1, b1, w2, b2 = (p.numpy() for p in model.parameters())
    expected = np.maximum(x @ w1.T + b1, 0) @ w2.T + b2
    np.testing.assert_allclose(model(tfl.tensor(x)).numpy(), expected, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(model(x).numpy(), expected, rtol=1e-5, atol=1e-6)  # arrays too


def test_a_subclass_that_forgets_super_init_still_works() -> None:
    class Forgetful(nn.Module):
        def __init__(self):
            self.fc = nn.Linear(2, 3)
            self.drop = nn.Dropout(0.5)

        def forward(self, x):
            return self.drop(self.fc(x))

    model = Forgetful()
    assert names(model) == ["fc.weight", "fc.bias"] and model.training
    assert model(tfl.ones(4, 2)).shape == (4, 3)
    assert model.eval() is model and not model.training and not model.drop.training
    x = tfl.ones(4, 2)
    np.testing.assert_array_equal(model(x).numpy(), model.fc(x).numpy())
    assert "Forgetful(" in repr(model)


def test_train_and_eval_set_every_module_and_return_it() -> None:
    model = nn.Sequential(MLP(), nn.Dropout(), nn.Sequential(nn.Dropout(0.1)))
    assert all(m.training for m in model.modules())
    assert model.eval() is model
    assert not any(m.training for m in model.modules())
    assert model.train() is model and all(m.training for m in model.modules())
    model.train(False)
    assert not any(m.training for m in model.modules())
    model[2].train()  # a part only
    assert [m.training for m in model.modules()] == [False] * 5 + [True, True]
    with raises(DTypeError, "train", "bool"):
        model.train(1)


def test_zero_grad_forgets_or_zeroes_every_gradient() -> None:
    model = MLP()
    F.mse_loss(model(tfl.ones(2, 4)), tfl.zeros(2, 3)).backward()
    assert all(p.grad is not None for p in model.parameters())
    model.zero_grad(set_to_none=False)
    for p in model.parameters():
        assert p.grad.shape == p.shape and not p.grad.numpy().any()
    model.zero_grad()
    assert all(p.grad is None for p in model.parameters())


def test_a_module_without_forward_says_so() -> None:
    class NoForward(nn.Module):
        pass

    with raises(TeachflowError, "Module", "NoForward has no forward", "forward(self, x)"):
        NoForward()(tfl.ones(2))


# --- State dicts ----------------------------------------------------------------------------------


def test_state_dict_holds_copies_that_training_does_not_change() -> None:
    model = MLP()
    state = model.state_dict()
    before = {k: v.numpy().copy() for k, v in state.items()}
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(state[name].numpy(), p.numpy())
        assert state[name] is not p and not state[name].requires_grad
    opt = tfl.optim.SGD(model.parameters(), lr=0.5)
    F.mse_loss(model(tfl.ones(2, 4)), tfl.zeros(2, 3)).backward()
    opt.step()
    assert any(not np.array_equal(before[k], p.numpy()) for k, p in model.named_parameters())
    for k, v in state.items():
        np.testing.assert_array_equal(v.numpy(), before[k])


def test_load_state_dict_copies_values_in_place_from_tensors_or_numpy() -> None:
    tfl.manual_seed(0)
    source, target = MLP(), MLP()
    held = list(target.parameters())
    result = target.load_state_dict(source.state_dict())
    assert result.missing_keys == [] and result.unexpected_keys == []
    for (_, p), (_, q) in zip(source.named_parameters(), target.named_parameters(), strict=True):
        np.testing.assert_array_equal(q.numpy(), p.numpy())
    assert list(target.parameters()) == held  # the same tensors: an optimizer still holds them

    rng = np.random.default_rng(0)
    from_numpy = {name: rng.normal(size=p.shape) for name, p in target.named_parameters()}
    target.load_state_dict(from_numpy)  # float64 arrays, as torch's .numpy() might give
    for name, p in target.named_parameters():
        assert p.dtype == np.float32 and p.requires_grad
        np.testing.assert_allclose(p.numpy(), from_numpy[name].astype(np.float32))


@pytest.mark.parametrize("change, words", [
    (lambda s: s.update({"layer3.weight": np.zeros((2, 2))}), ["unexpected 'layer3.weight'"]),
    (lambda s: s.pop("layer2.bias"), ["missing 'layer2.bias'"]),
    (lambda s: s.update({"layer2.weight": np.zeros((8, 3))}),
     ["size mismatch for layer2.weight", "(8, 3)", "(3, 8)"]),
])
def test_a_state_dict_that_does_not_fit_changes_nothing(change, words) -> None:
    model = MLP()
    before = arrays(model)
    state = {k: np.full(v.shape, 7.0) for k, v in before.items()}  # would change every value
    change(state)
    cls = ShapeError if "size mismatch" in words[0] else TeachflowError
    with raises(cls, "load_state_dict", *words):
        model.load_state_dict(state)
    for name, p in model.named_parameters():
        np.testing.assert_array_equal(p.numpy(), before[name])


def test_load_state_dict_not_strict_loads_what_matches_as_pytorch() -> None:
    model = MLP()
    before = arrays(model)
    state = {"layer1.bias": np.ones(8), "extra.weight": np.ones(3)}
    result = model.load_state_dict(state, strict=False)
    assert result.unexpected_keys == ["extra.weight"]
    assert result.missing_keys == ["layer1.weight", "layer2.weight", "layer2.bias"]
    np.testing.assert_array_equal(model.layer1.bias.numpy(), np.ones(8))
    np.testing.assert_array_equal(model.layer2.weight.numpy(), before["layer2.weight"])
    with raises(ShapeError, "load_state_dict", "size mismatch"):  # shapes are always checked
        model.load_state_dict({"layer1.bias": np.ones(9)}, strict=False)
    with raises(DTypeError, "load_state_dict", "list"):
        model.load_state_dict([np.ones(8)])


def test_deepcopy_and_pickle_keep_parameters() -> None:
    model = seed_model().eval()
    clone = copy.deepcopy(model)
    assert names(clone) == names(model) and not clone.training and not clone[2].training
    for p, q in zip(model.parameters(), clone.parameters(), strict=True):
        assert isinstance(q, nn.Parameter) and q.requires_grad and q is not p
        np.testing.assert_array_equal(q.numpy(), p.numpy())
    before = arrays(model)
    F.mse_loss(clone(tfl.ones(2, 10)), tfl.zeros(2, 1)).backward()
    assert all(p.grad is None for p in model.parameters())
    assert all(q.grad is not None for q in clone.parameters())
    with tfl.no_grad():
        clone[0].weight *= 0.0
    np.testing.assert_array_equal(model[0].weight.numpy(), before["0.weight"])

    thawed = pickle.loads(pickle.dumps(model))
    assert all(isinstance(p, nn.Parameter) for p in thawed.parameters())
    for name, p in thawed.named_parameters():
        np.testing.assert_array_equal(p.numpy(), before[name])


def test_to_cpu_keeps_the_module_and_its_parameters() -> None:
    model = MLP()
    held = list(model.parameters())
    assert model.to("cpu") is model and list(model.parameters()) == held


# --- Sequential -----------------------------------------------------------------------------------


def test_sequential_indexes_iterates_and_slices_as_pytorch() -> None:
    layers = [nn.Linear(2, 3), nn.ReLU(), nn.Linear(3, 4), nn.Tanh()]
    model = nn.Sequential(*layers)
    assert len(model) == 4 and list(model) == layers
    assert model[0] is layers[0] and model[-1] is layers[3]
    tail = model[2:]
    assert isinstance(tail, nn.Sequential) and list(tail) == layers[2:]
    assert names(tail) == ["2.weight", "2.bias"]  # a slice keeps the names, as PyTorch's
    x = tfl.ones(5, 2)
    np.testing.assert_array_equal(model(x).numpy(), tail(model[:2](x)).numpy())
    named = nn.Sequential({"hidden": nn.Linear(2, 3), "act": nn.ReLU()})
    assert names(named) == ["hidden.weight", "hidden.bias"] and len(named) == 2
    assert len(nn.Sequential()) == 0
    np.testing.assert_array_equal(nn.Sequential()(x).numpy(), x.numpy())


def test_sequential_refuses_what_is_not_a_module() -> None:
    with raises(TeachflowError, "Sequential", "argument 1 is the class ReLU", "ReLU()"):
        tfl.nn.Sequential(tfl.nn.Linear(2, 3), tfl.nn.ReLU)  # no parentheses
    with raises(TeachflowError, "Sequential", "argument 0 is function"):
        nn.Sequential(tfl.relu)
    with raises(TeachflowError, "Sequential", "named 'a.b'"):
        nn.Sequential({"a.b": nn.ReLU()})
    with raises(TeachflowError, "Sequential", "named 'forward'"):
        nn.Sequential({"forward": nn.ReLU()})
    model = nn.Sequential(nn.ReLU(), nn.Tanh())
    with raises(TeachflowError, "Sequential", "2 modules", "no module 2"):
        model[2]
    with raises(TeachflowError, "Sequential", "no module 'a'"):
        model["a"]


# --- Linear -------------------------------------------------------------------------------------


@pytest.mark.parametrize("sizes", [(0, 3), (3, -1), (2.0, 3), (True, 3), ("4", 3)])
def test_linear_refuses_bad_sizes(sizes) -> None:
    with raises(DTypeError, "Linear", "must be a positive int"):
        nn.Linear(*sizes)


def test_linear_refuses_an_input_of_the_wrong_width() -> None:
    with raises(ShapeError, "linear", "4 features", "takes 5"):
        nn.Linear(5, 2)(tfl.ones(3, 4))


@pytest.mark.parametrize("fan_in, fan_out", [(400, 500), (4, 20000)])
def test_linear_init_is_uniform_in_plus_minus_one_over_sqrt_fan_in(fan_in, fan_out) -> None:
    tfl.manual_seed(3)
    layer = nn.Linear(fan_in, fan_out)
    bound = 1 / np.sqrt(fan_in)  # PyTorch's, for weight and bias alike (not fan_out)
    for p in (layer.weight, layer.bias):
        v = p.numpy().astype(np.float64).ravel()
        assert p.dtype == np.float32
        assert np.abs(v).max() <= bound
        # Spread over the whole range: the extremes near the bounds, mean 0, the spread of a
        # uniform distribution (std = bound / sqrt(3)).
        gap = 20 * 2 * bound / v.size  # ~20 times the expected gap to the bound
        assert v.max() > bound - gap and v.min() < -bound + gap
        assert abs(v.mean()) < 6 * bound / np.sqrt(3 * v.size)
        assert abs(v.std() / (bound / np.sqrt(3)) - 1) < 6 / np.sqrt(v.size)
    assert not np.array_equal(layer.weight.numpy()[:, 0], layer.bias.numpy())


# --- Functional: cross_entropy, mse_loss, dropout ---------------------------------------------


def reference_cross_entropy(logits: np.ndarray, target: np.ndarray) -> np.ndarray:
    """Each example's ``logsumexp(z) - z[target]``, written the stable way in NumPy."""
    m = logits.max(axis=1, keepdims=True)
    lse = m[:, 0] + np.log(np.exp(logits - m).sum(axis=1))
    return lse - logits[np.arange(len(target)), target]


def softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(axis=1, keepdims=True))
    return e / e.sum(axis=1, keepdims=True)


@pytest.fixture
def classification():
    rng = np.random.default_rng(7)
    logits = rng.normal(scale=3.0, size=(6, 5))
    logits[0] = [1000.0, 0.0, -1000.0, 2.0, 3.0]  # large logits: a stable formula stays finite
    target = np.array([0, 4, 2, 2, 1, 3])
    return logits, target


@pytest.mark.parametrize("reduction", ["mean", "sum", "none"])
def test_cross_entropy_equals_logsumexp_minus_the_target_logit(classification, reduction):
    logits, target = classification
    each = reference_cross_entropy(logits, target)
    expected = {"mean": each.mean(), "sum": each.sum(), "none": each}[reduction]
    got = F.cross_entropy(tfl.tensor(logits), tfl.tensor(target), reduction=reduction)
    assert got.dtype == np.float64 and got.shape == np.shape(expected)
    np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)
    got32 = F.cross_entropy(tfl.tensor(logits.astype(np.float32)), tfl.tensor(target),
                            reduction=reduction)
    assert np.isfinite(got32.numpy()).all()
    np.testing.assert_allclose(got32.numpy(), expected, rtol=1e-5, atol=1e-4)


def test_cross_entropy_gradient_is_softmax_minus_one_hot(classification) -> None:
    logits, target = classification
    one_hot = np.eye(logits.shape[1])[target]
    z = tfl.tensor(logits, requires_grad=True)
    F.cross_entropy(z, tfl.tensor(target)).backward()
    np.testing.assert_allclose(z.grad.numpy(), (softmax(logits) - one_hot) / len(target),
                               rtol=1e-10, atol=1e-14)
    weights = np.linspace(0.5, 2.0, len(target))
    z = tfl.tensor(logits, requires_grad=True)
    (F.cross_entropy(z, tfl.tensor(target), reduction="none") * tfl.tensor(weights)).sum() \
        .backward()
    np.testing.assert_allclose(z.grad.numpy(), weights[:, None] * (softmax(logits) - one_hot),
                               rtol=1e-10, atol=1e-14)


def test_cross_entropy_refuses_bad_shapes_dtypes_and_classes() -> None:
    logits = tfl.randn(3, 4)
    with raises(ShapeError, "cross_entropy", "(3, 4) and (2,)"):
        F.cross_entropy(logits, tfl.tensor([0, 1]))
    with raises(ShapeError, "cross_entropy", "(N, C)"):
        F.cross_entropy(tfl.randn(12), tfl.tensor([0, 1, 2]))
    with raises(DTypeError, "cross_entropy", "integer targets"):
        F.cross_entropy(logits, tfl.tensor([0.0, 1.0, 2.0]))
    with raises(DTypeError, "cross_entropy", "float logits"):
        F.cross_entropy(tfl.tensor([[1, 2], [3, 4], [5, 6]]), tfl.tensor([0, 1, 1]))
    for bad in (4, -1):  # outside 0..C-1, found eagerly before anything is computed
        with raises(TeachflowError, "cross_entropy", f"class {bad}", "0..3"):
            F.cross_entropy(logits, tfl.tensor([0, bad, 1]))
    with raises(TeachflowError, "cross_entropy", "'avg'"):
        F.cross_entropy(logits, tfl.tensor([0, 1, 2]), reduction="avg")


def test_mse_loss_value_gradient_and_shape_check() -> None:
    rng = np.random.default_rng(2)
    a, b = rng.normal(size=(4, 3)), rng.normal(size=(4, 3))
    x, y = tfl.tensor(a, requires_grad=True), tfl.tensor(b, requires_grad=True)
    loss = F.mse_loss(x, y)
    np.testing.assert_allclose(loss.numpy(), ((a - b) ** 2).mean(), rtol=1e-12)
    loss.backward()
    np.testing.assert_allclose(x.grad.numpy(), 2 * (a - b) / a.size, rtol=1e-12)
    np.testing.assert_allclose(y.grad.numpy(), -2 * (a - b) / a.size, rtol=1e-12)
    np.testing.assert_allclose(F.mse_loss(x, y, reduction="sum").numpy(), ((a - b) ** 2).sum())
    np.testing.assert_allclose(F.mse_loss(x, y, reduction="none").numpy(), (a - b) ** 2)
    with raises(ShapeError, "mse_loss", "(4, 1)", "(4,)", "reshape"):
        F.mse_loss(tfl.ones(4, 1), tfl.ones(4))


def test_linear_and_activations_match_numpy() -> None:
    rng = np.random.default_rng(5)
    x, w, b = rng.normal(size=(3, 4)), rng.normal(size=(2, 4)), rng.normal(size=2)
    np.testing.assert_allclose(F.linear(tfl.tensor(x), tfl.tensor(w), tfl.tensor(b)).numpy(),
                               x @ w.T + b, rtol=1e-12)
    t = tfl.tensor(x)
    np.testing.assert_allclose(nn.ReLU()(t).numpy(), np.maximum(x, 0))
    np.testing.assert_allclose(nn.Tanh()(t).numpy(), np.tanh(x), rtol=1e-12)
    np.testing.assert_allclose(nn.Sigmoid()(t).numpy(), 1 / (1 + np.exp(-x)), rtol=1e-12)
    assert nn.Flatten()(tfl.ones(5, 2, 3, 4)).shape == (5, 24)


def test_dropout_in_evaluation_is_the_identity() -> None:
    x = tfl.randn(50, 20)
    assert F.dropout(x, 0.5, training=False) is x
    layer = nn.Dropout(0.9).eval()
    np.testing.assert_array_equal(layer(x).numpy(), x.numpy())
    np.testing.assert_array_equal(nn.Dropout(0.0)(x).numpy(), x.numpy())  # p=0: nothing dropped


@pytest.mark.parametrize("p", [0.1, 0.5, 0.8])
def test_dropout_drops_about_p_and_scales_what_it_keeps(p) -> None:
    tfl.manual_seed(11)
    n = 100_000
    x = tfl.tensor(np.random.default_rng(0).uniform(1.0, 2.0, size=(100, n // 100))
                   .astype(np.float32), requires_grad=True)
    y = nn.Dropout(p)(x)
    out, inp = y.numpy(), x.numpy()
    dropped = out == 0
    assert abs(dropped.mean() - p) < 6 * np.sqrt(p * (1 - p) / n)
    np.testing.assert_allclose(out[~dropped], inp[~dropped] / (1 - p), rtol=1e-6)
    y.sum().backward()  # the gradient is the mask, scaled alike
    np.testing.assert_allclose(x.grad.numpy(), np.where(dropped, 0.0, 1 / (1 - p)), rtol=1e-6)
    again = nn.Dropout(p)(x).numpy() == 0
    assert (again != dropped).any()  # a new mask at every call


def test_dropout_with_p_one_drops_everything_and_bad_p_is_refused() -> None:
    x = tfl.randn(4, 5, requires_grad=True)
    y = nn.Dropout(1.0)(x)
    assert y.shape == x.shape and not y.numpy().any()
    y.sum().backward()
    assert not x.grad.numpy().any()
    for bad in (1.5, -0.1, "0.5", True, None):
        with raises(TeachflowError, "Dropout", "drop probability", "[0, 1]"):
            nn.Dropout(bad)
    with raises(TeachflowError, "dropout", "drop probability"):
        F.dropout(x, 2.0)


# --- Under tracing --------------------------------------------------------------------------------


def members(graph) -> list:
    """Every node of `graph`, with the nodes a fused kernel stands for in its place."""
    found = []
    for node in graph.nodes:
        group = getattr(node.op, "group", None)
        found += [node] if group is None else [*group.nodes, *filter(None, [group.reduction])]
    return found


def random_ops(graph) -> list:
    return [node for node in members(graph) if node.op.random]


def test_parameters_are_captures_never_constants() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    staged = tfl.function(lambda x: model(x))
    cf = staged.get_concrete_function(tfl.ones(5, 3))
    shapes = {p.shape for p in model.parameters()}
    for snapshot in cf.compilation.snapshots:  # traced, and after every pass
        graph = snapshot.graph
        captured = [v.data.tensor() for v in graph.captures]
        assert all(any(c is p for c in captured) for p in model.parameters()), snapshot.pass_name
        assert not [c for c in graph.constants if c.shape in shapes], snapshot.pass_name
    # Named as the code reaches them, so the graph reads as the model does.
    assert {v.name for v in cf.graph.captures} == {f"model.{n}" for n in names(model)}
    assert "%model.0.weight = capture f32[4,3]" in str(cf.graph)


def test_an_optimizer_step_between_calls_is_seen_without_a_retrace() -> None:
    tfl.manual_seed(0)
    model = MLP()
    staged = tfl.function(lambda x: model(x))
    x = tfl.randn(6, 4)
    first = staged(x).numpy()
    np.testing.assert_allclose(first, model(x).numpy(), rtol=1e-6)
    opt = tfl.optim.SGD(model.parameters(), lr=0.5)
    F.mse_loss(model(x), tfl.zeros(6, 3)).backward()
    opt.step()  # eagerly, in place
    second = staged(x).numpy()
    assert not np.allclose(first, second)
    np.testing.assert_allclose(second, model(x).numpy(), rtol=1e-6)
    model.load_state_dict({k: v * 0.5 for k, v in model.state_dict().items()})
    np.testing.assert_allclose(staged(x).numpy(), model(x).numpy(), rtol=1e-6)
    assert staged.trace_count == 1


def test_a_layer_replaced_after_a_call_is_seen_by_the_next() -> None:
    model = MLP()
    staged = tfl.function(lambda x: model(x))
    x = tfl.randn(2, 4)
    staged(x)
    old = model.layer2  # still alive: the graph must not go on reading its weights
    model.layer2 = nn.Linear(8, 3)
    np.testing.assert_allclose(staged(x).numpy(), model(x).numpy(), rtol=1e-6)
    assert staged.trace_count == 2 and "model.layer2.weight" in staged.retrace_reasons[-1]
    assert old.weight.shape == (3, 8)


def test_dropout_is_a_random_op_that_no_pass_folds_or_merges() -> None:
    tfl.manual_seed(5)
    model = nn.Sequential(nn.Dropout(0.5), nn.Dropout(0.5))
    staged = tfl.function(lambda x: model(x))
    x = tfl.ones(200, 100)
    out = staged(x).numpy()
    snapshots = staged.concrete_functions[0].compilation.snapshots
    assert {"constant_fold", "cse"} <= {s.pass_name for s in snapshots}
    for snapshot in snapshots:
        assert len(random_ops(snapshot.graph)) == 2, snapshot.pass_name
    # Two masks, not one used twice: a value survives both with probability 1/4, scaled by 4.
    assert set(np.unique(out)) <= {0.0, 4.0}
    assert abs((out == 4.0).mean() - 0.25) < 0.02
    again = staged(x).numpy()
    assert (again != out).any() and staged.trace_count == 1  # a new draw at every call


def test_eval_after_a_call_retraces_without_the_random_op_and_train_reuses_the_first() -> None:
    tfl.manual_seed(6)
    model = nn.Sequential(nn.Linear(8, 8), MLP(8, 8, 8), nn.Dropout(0.5))
    staged = tfl.function(lambda x: model(x))
    x = tfl.randn(16, 8)
    staged(x)
    first = staged.concrete_functions[0]
    assert len(random_ops(first.traced.graph)) == 1 and len(random_ops(first.graph)) == 1

    model.eval()
    np.testing.assert_allclose(staged(x).numpy(), model(x).numpy(), rtol=1e-6)
    np.testing.assert_array_equal(staged(x).numpy(), staged(x).numpy())  # no randomness left
    assert staged.trace_count == 2
    assert "Dropout module's training flag was True when traced, now False" in \
        staged.retrace_reasons[-1]
    second = staged.concrete_functions[1]
    assert not random_ops(second.graph) and not random_ops(second.traced.graph)

    model.train()
    out = staged(x).numpy()
    assert staged.trace_count == 2  # the first concrete function again
    hidden = model[1](model[0](x)).numpy()
    kept = out != 0
    assert (~kept).any()
    np.testing.assert_allclose(out[kept], 2 * hidden[kept], rtol=1e-5)


def test_the_training_flag_guard_does_not_keep_the_module_alive() -> None:
    model = nn.Dropout(0.5)
    ref = weakref.ref(model)
    staged = tfl.function(lambda m, x: m(x))
    staged(model, tfl.ones(3))
    del model
    assert ref() is None


def test_the_stepper_data_of_a_staged_model_names_its_parameters() -> None:
    model = MLP()
    staged = tfl.function(lambda x: model(x))
    cf = staged.get_concrete_function(tfl.ones(2, 4))
    text = str(compilation_data(cf.compilation))
    assert "model.layer1.weight" in text and "model.layer2.bias" in text
