"""`tfl.optim` (issue 11, §2 and §3): SGD and Adam step for step as PyTorch documents them, and a
whole training step staged with `tfl.function` giving the eager step's numbers.

The references are PyTorch's documented algorithms, written here independently in NumPy float64
(``torch.optim.SGD`` with dampening 0 and no Nesterov; ``torch.optim.Adam`` without amsgrad).
"""

from __future__ import annotations

import copy
import math

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.errors import DTypeError, TeachflowError

nn = tfl.nn
F = tfl.nn.functional

STEPS = 8


def sgd_reference(theta, grad, lr, momentum=0.0, weight_decay=0.0, steps=STEPS):
    """PyTorch's SGD: g = grad + wd * theta; b = g at step 1, then momentum * b + g;
    theta -= lr * b (or lr * g without momentum). Yields theta and b after each step."""
    b = None
    for _ in range(steps):
        g = grad(theta) + weight_decay * theta
        if momentum:
            b = g if b is None else momentum * b + g
            g = b
        theta = theta - lr * g
        yield theta, b


def adam_reference(theta, grad, lr, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                   steps=STEPS):
    """PyTorch's Adam: m and v moving averages of g and g², bias-corrected m̂ = m / (1 - β1^t),
    v̂ = v / (1 - β2^t); theta -= lr * m̂ / (sqrt(v̂) + eps). Yields theta, m, v per step."""
    beta1, beta2 = betas
    m, v = np.zeros_like(theta), np.zeros_like(theta)
    for t in range(1, steps + 1):
        g = grad(theta) + weight_decay * theta
        m = beta1 * m + (1 - beta1) * g
        v = beta2 * v + (1 - beta2) * g * g
        m_hat, v_hat = m / (1 - beta1 ** t), v / (1 - beta2 ** t)
        theta = theta - lr * m_hat / (np.sqrt(v_hat) + eps)
        yield theta, m, v


# A smooth loss with a gradient that changes from step to step: sum(c * tanh(p)) + sum(p²) / 2.
RNG = np.random.default_rng(42)
START = [RNG.normal(size=(3, 2)), RNG.normal(size=4)]
SCALE = [RNG.normal(size=(3, 2)) * 3, RNG.normal(size=4) * 3]


def numpy_grad(k: int):
    return lambda theta: SCALE[k] * (1 - np.tanh(theta) ** 2) + theta


def teachflow_loss(params):
    return sum((tfl.tensor(c) * p.tanh()).sum() + 0.5 * (p * p).sum()
               for c, p in zip(SCALE, params, strict=True))


def run_teachflow(make_optimizer, steps=STEPS):
    """The same loss minimised by a teachflow optimizer; the parameters after each step."""
    params = [tfl.tensor(s, requires_grad=True) for s in START]
    opt = make_optimizer(params)
    history = []
    for _ in range(steps):
        opt.zero_grad()
        teachflow_loss(params).backward()
        opt.step()
        history.append([p.numpy().copy() for p in params])
    return history, params, opt


SGD_SETTINGS = [dict(lr=0.1), dict(lr=0.1, momentum=0.9), dict(lr=0.05, weight_decay=0.3),
                dict(lr=0.05, momentum=0.8, weight_decay=0.1)]


@pytest.mark.parametrize("settings", SGD_SETTINGS, ids=lambda s: ",".join(s))
def test_sgd_is_pytorchs_step_for_step(settings) -> None:
    history, params, opt = run_teachflow(lambda ps: tfl.optim.SGD(ps, **settings))
    for k, start in enumerate(START):
        reference = list(sgd_reference(start, numpy_grad(k), **settings))
        for step, (theta, _) in enumerate(reference):
            np.testing.assert_allclose(history[step][k], theta, rtol=1e-12, atol=1e-12)
        assert params[k].dtype == np.float64
        if settings.get("momentum"):
            np.testing.assert_allclose(opt.state_dict()["state"][k]["momentum_buffer"].numpy(),
                                       reference[-1][1], rtol=1e-12, atol=1e-12)
    assert not np.allclose(history[-1][0], START[0])  # it did move


ADAM_SETTINGS = [dict(lr=0.05), dict(lr=0.05, betas=(0.8, 0.95), eps=1e-6),
                 dict(lr=0.02, weight_decay=0.2), dict(lr=1e-3, betas=(0.5, 0.9),
                                                       weight_decay=0.05)]


@pytest.mark.parametrize("settings", ADAM_SETTINGS, ids=lambda s: ",".join(s))
def test_adam_is_pytorchs_step_for_step(settings) -> None:
    history, _, opt = run_teachflow(lambda ps: tfl.optim.Adam(ps, **settings))
    state = opt.state_dict()["state"]
    for k, start in enumerate(START):
        reference = list(adam_reference(start, numpy_grad(k), **settings))
        for step, (theta, _, _) in enumerate(reference):
            np.testing.assert_allclose(history[step][k], theta, rtol=1e-12, atol=1e-12)
        _, m, v = reference[-1]
        assert state[k]["step"].item() == STEPS
        np.testing.assert_allclose(state[k]["exp_avg"].numpy(), m, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(state[k]["exp_avg_sq"].numpy(), v, rtol=1e-12, atol=1e-14)


def test_float32_parameters_follow_the_float64_reference_closely() -> None:
    params = [tfl.tensor(s.astype(np.float32), requires_grad=True) for s in START]
    opt = tfl.optim.Adam(params, lr=0.05)
    for _ in range(STEPS):
        opt.zero_grad()
        teachflow_loss(params).backward()
        opt.step()
    for k, start in enumerate(START):
        theta = list(adam_reference(start, numpy_grad(k), lr=0.05))[-1][0]
        assert params[k].dtype == np.float32
        np.testing.assert_allclose(params[k].numpy(), theta, rtol=1e-4, atol=1e-5)


def test_zero_grad_forgets_or_zeroes_the_gradients() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    opt = tfl.optim.SGD([w], lr=0.1)
    (w * w).sum().backward()
    (w * w).sum().backward()  # gradients accumulate until zero_grad
    np.testing.assert_allclose(w.grad.numpy(), [4.0, 8.0])
    opt.zero_grad(set_to_none=False)
    np.testing.assert_array_equal(w.grad.numpy(), [0.0, 0.0])
    opt.zero_grad()
    assert w.grad is None
    opt.step()  # no gradient: nothing moves
    np.testing.assert_array_equal(w.numpy(), [1.0, 2.0])


@pytest.mark.parametrize("make", [
    lambda ps: tfl.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=0.5),
    lambda ps: tfl.optim.Adam(ps, lr=0.1, weight_decay=0.5),
])
def test_a_parameter_without_a_gradient_is_skipped(make) -> None:
    used = tfl.tensor([1.0, -1.0], requires_grad=True)
    unused = tfl.tensor([3.0, 4.0], requires_grad=True)
    opt = make([used, unused])
    for _ in range(3):
        opt.zero_grad()
        (used * used).sum().backward()
        opt.step()
    np.testing.assert_array_equal(unused.numpy(), [3.0, 4.0])  # not even weight decay
    assert unused.grad is None and not np.allclose(used.numpy(), [1.0, -1.0])
    state = opt.state_dict()["state"]
    if "step" in state[0]:
        assert state[0]["step"].item() == 3 and state[1]["step"].item() == 0


def test_state_dicts_hold_settings_and_copies_of_the_state() -> None:
    w, b = tfl.tensor([1.0, 2.0], requires_grad=True), tfl.tensor(0.5, requires_grad=True)
    sgd = tfl.optim.SGD([w, b], lr=0.1, momentum=0.9)
    sd = sgd.state_dict()
    assert sd["param_groups"] == [{"lr": 0.1, "momentum": 0.9, "weight_decay": 0.0,
                                   "params": [0, 1]}]
    assert set(sd["state"]) == {0, 1} and set(sd["state"][0]) == {"momentum_buffer"}
    assert tfl.optim.SGD([w], lr=0.1).state_dict()["state"] == {}  # no momentum: no state

    adam = tfl.optim.Adam([w, b], lr=0.01, betas=(0.8, 0.9))
    assert adam.state_dict()["param_groups"] == [{"lr": 0.01, "betas": (0.8, 0.9), "eps": 1e-8,
                                                  "weight_decay": 0.0, "params": [0, 1]}]
    (w.sum() * b).backward()
    adam.step()
    saved = adam.state_dict()
    assert set(saved["state"][1]) == {"step", "exp_avg", "exp_avg_sq"}
    assert saved["state"][1]["exp_avg"].shape == () and saved["state"][0]["step"].item() == 1
    np.testing.assert_allclose(saved["state"][1]["exp_avg"].numpy(), 0.2 * 3.0)  # (1-β1)·g
    adam.step()
    assert saved["state"][0]["step"].item() == 1  # a copy: later steps do not change it
    assert adam.state_dict()["state"][0]["step"].item() == 2


def test_optimizers_refuse_bad_arguments() -> None:
    w = tfl.tensor([1.0], requires_grad=True)
    cases = [
        (lambda: tfl.optim.SGD([], lr=0.1), TeachflowError, "SGD", "no parameters"),
        (lambda: tfl.optim.Adam(nn.Module().parameters()), TeachflowError, "Adam",
         "no parameters"),
        (lambda: tfl.optim.SGD(w, lr=0.1), DTypeError, "SGD", "not one tensor"),
        (lambda: tfl.optim.SGD([tfl.tensor([1.0])], lr=0.1), DTypeError, "SGD",
         "requires grad"),
        (lambda: tfl.optim.Adam([w, tfl.tensor([1, 2])]), DTypeError, "Adam", "parameter 1"),
        (lambda: tfl.optim.SGD([w], lr=-0.1), TeachflowError, "SGD", "lr must be a number"),
        (lambda: tfl.optim.SGD([w], lr="0.1"), TeachflowError, "SGD", "lr must be a number"),
        (lambda: tfl.optim.SGD([w], lr=0.1, momentum=-1), TeachflowError, "SGD", "momentum"),
        (lambda: tfl.optim.Adam([w], lr=float("nan")), TeachflowError, "Adam", "lr"),
        (lambda: tfl.optim.Adam([w], weight_decay=-1e-4), TeachflowError, "Adam",
         "weight_decay"),
        (lambda: tfl.optim.Adam([w], eps=-1.0), TeachflowError, "Adam", "eps"),
        (lambda: tfl.optim.Adam([w], betas=(0.9, 1.0)), TeachflowError, "Adam", "betas"),
        (lambda: tfl.optim.Adam([w], betas=(-0.1, 0.9)), TeachflowError, "Adam", "betas"),
        (lambda: tfl.optim.Adam([w], betas=0.9), TeachflowError, "Adam", "betas"),
        (lambda: tfl.optim.Adam([w], betas=(0.9,)), TeachflowError, "Adam", "betas"),
    ]
    for make, cls, op, words in cases:
        with pytest.raises(cls) as info:
            make()
        err = info.value
        assert err.op == op and str(err).startswith(f"{op}: ") and words in str(err), str(err)
        assert err.hint, str(err)


def test_numpy_scalars_are_numbers_too() -> None:
    w = tfl.tensor([1.0], requires_grad=True)
    opt = tfl.optim.SGD([w], lr=np.float32(0.5))
    (w * 2.0).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.0])


# --- A staged training step: the eager step's numbers ----------------------------------------


def train(model, make_optimizer, batches, staged: bool):
    opt = make_optimizer(model.parameters())

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    fn = tfl.function(step) if staged else step
    history = []
    for x, y in batches:
        loss = fn(x, y)
        history.append((loss.item(), [p.numpy().copy() for p in model.parameters()]))
    return history, fn, opt


OPTIMIZERS = {
    "sgd-momentum": lambda ps: tfl.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-3),
    "adam": lambda ps: tfl.optim.Adam(ps, lr=0.01, weight_decay=1e-3),
}


@pytest.mark.parametrize("kind", OPTIMIZERS)
def test_a_staged_training_step_gives_the_eager_steps_numbers(kind) -> None:
    tfl.manual_seed(0)
    rng = np.random.default_rng(1)
    batches = [(tfl.tensor(rng.normal(size=(16, 6)).astype(np.float32)),
                tfl.tensor(rng.integers(0, 4, 16))) for _ in range(6)]
    model = nn.Sequential(nn.Linear(6, 12), nn.ReLU(), nn.Linear(12, 12), nn.Tanh(),
                          nn.Linear(12, 4))
    twin = copy.deepcopy(model)
    eager, _, _ = train(model, OPTIMIZERS[kind], batches, staged=False)
    staged, fn, opt = train(twin, OPTIMIZERS[kind], batches, staged=True)
    for (e_loss, e_params), (s_loss, s_params) in zip(eager, staged, strict=True):
        np.testing.assert_allclose(s_loss, e_loss, rtol=1e-6)
        for e, s in zip(e_params, s_params, strict=True):
            np.testing.assert_allclose(s, e, rtol=1e-5, atol=1e-6)
    assert eager[-1][0] < eager[0][0]  # it learns
    assert fn.trace_count == 1 and len(fn.concrete_functions) == 1
    assert all(p.grad is not None for p in twin.parameters())  # backward() wrote .grad
    if kind == "adam":  # the step count is state the graph writes back: it kept counting
        assert all(s["step"].item() == len(batches) for s in opt.state)

    graph = fn.concrete_functions[0].graph
    written = [(u.slot.name, u.slot.attr) for u in graph.updates]
    params = [f"model.{n}" for n, _ in twin.named_parameters()]
    assert [name for name, attr in written if name in params and attr == "data"] == params
    assert {f"{p}.grad" for p in params} <= {name for name, _ in written}
    text = str(graph)
    assert all(f"%{p} <- %" in text for p in params), text
    if kind == "adam":
        assert "%opt.state[0]['step'] <- %" in text


# --- zero_grad, Adam's step count, state dicts, parameter groups (issue 26, §3) ---------------


@pytest.mark.parametrize("owner", ["optimizer", "module"])
def test_zero_grad_without_none_leaves_zeros_where_a_gradient_was_inf_or_nan(owner) -> None:
    model = nn.Linear(2, 1)
    opt = tfl.optim.SGD(model.parameters(), lr=0.1)
    (model(tfl.tensor([[np.inf, np.nan]])).sum()).backward()
    assert not np.isfinite(model.weight.grad.numpy()).all()
    (opt if owner == "optimizer" else model).zero_grad(set_to_none=False)
    for p in model.parameters():
        np.testing.assert_array_equal(p.grad.numpy(), np.zeros(p.shape))  # (0 * inf is nan)
        assert p.grad.dtype == p.dtype


def test_adams_step_count_keeps_counting_past_what_float16_can_count() -> None:
    w = tfl.tensor(np.array([0.5, -0.5], np.float16), requires_grad=True)
    opt = tfl.optim.Adam([w], lr=1e-4)
    for _ in range(2050):  # float16 holds every integer up to 2048, then only even ones
        opt.zero_grad()
        (w * w).sum().backward()
        opt.step()
    step = opt.state_dict()["state"][0]["step"]
    assert step.item() == 2050 and step.dtype == np.int64
    assert w.dtype == np.float16 and opt.state[0]["exp_avg"].dtype == np.float16


def test_adams_bias_corrections_are_float64_for_a_float16_parameter() -> None:
    """At the first step m̂ = g and v̂ = g², so every element moves by lr (times |g| / (|g| +
    eps)). Corrections computed in float16 (1 - 0.999 = 0.00098) would move it 1.3% less."""
    g = np.array([1.0, -2.0, 3.0, -0.5], np.float16)
    w = tfl.tensor(np.zeros(4, np.float16), requires_grad=True)
    opt = tfl.optim.Adam([w], lr=0.1)
    (w * tfl.tensor(g)).sum().backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), -0.1 * np.sign(g), rtol=2e-3)


def make_model() -> nn.Module:
    tfl.manual_seed(3)
    return nn.Sequential(nn.Linear(5, 8), nn.Tanh(), nn.Linear(8, 3))


BATCHES = [(tfl.tensor(np.random.default_rng(k).normal(size=(6, 5)).astype(np.float32)),
            tfl.tensor(np.random.default_rng(k).integers(0, 3, 6))) for k in range(8)]

RESUMABLE = {
    "sgd-momentum": lambda ps: tfl.optim.SGD(ps, lr=0.1, momentum=0.9, weight_decay=1e-2),
    "adam": lambda ps: tfl.optim.Adam(ps, lr=0.01, betas=(0.8, 0.99), weight_decay=1e-3),
}


def stepper(model, opt, staged: bool):
    """One training step on a batch, eager or staged."""
    def step(x, y):
        opt.zero_grad()
        F.cross_entropy(model(x), y).backward()
        opt.step()

    return tfl.function(step) if staged else step


def training_steps(step, model, batches) -> list[np.ndarray]:
    for x, y in batches:
        step(x, y)
    return [p.numpy().copy() for p in model.parameters()]


@pytest.mark.parametrize("staged", [False, True], ids=["eager", "staged"])
@pytest.mark.parametrize("kind", RESUMABLE)
def test_training_resumed_from_state_dicts_takes_the_same_steps(kind, staged) -> None:
    model = make_model()
    opt = RESUMABLE[kind](model.parameters())
    training_steps(stepper(model, opt, staged=False), model, BATCHES[:4])
    saved_model, saved_opt = model.state_dict(), opt.state_dict()
    without_stopping = training_steps(stepper(model, opt, staged), model, BATCHES[4:])

    resumed = make_model()
    resumed_opt = RESUMABLE[kind](resumed.parameters())
    step = stepper(resumed, resumed_opt, staged)
    if staged:  # traced before the load, the step reads the state loaded into its tensors
        training_steps(step, resumed, BATCHES[:1])
    resumed.load_state_dict(saved_model)
    resumed_opt.load_state_dict(saved_opt)
    after = training_steps(step, resumed, BATCHES[4:])
    for a, b in zip(without_stopping, after, strict=True):
        np.testing.assert_array_equal(a, b)
    for a, b in zip(opt.state, resumed_opt.state, strict=True):
        for name in a:
            np.testing.assert_array_equal(a[name].numpy(), b[name].numpy())
    if staged:
        assert step.trace_count == 1


def test_a_state_dict_loads_from_plain_data_and_keeps_the_optimizers_dtypes() -> None:
    w = tfl.tensor(np.ones(3, np.float32), requires_grad=True)
    opt = tfl.optim.Adam([w], lr=0.1)
    opt.load_state_dict({"state": {"0": {"step": np.float32(7.0), "exp_avg": [0.1, 0.2, 0.3],
                                         "exp_avg_sq": np.full(3, 0.5)}},
                         "param_groups": [{"lr": 0.05, "betas": [0.5, 0.9], "eps": 1e-6,
                                           "weight_decay": 0.0, "params": [0]}]})
    state = opt.state[0]
    assert state["step"].item() == 7 and state["step"].dtype == np.int64
    assert state["exp_avg"].dtype == np.float32 and state["exp_avg_sq"].dtype == np.float32
    np.testing.assert_allclose(state["exp_avg"].numpy(), [0.1, 0.2, 0.3], rtol=1e-7)
    group = opt.param_groups[0]
    assert (group["lr"], group["betas"], group["eps"]) == (0.05, (0.5, 0.9), 1e-6)


def test_an_sgd_without_momentum_takes_a_momentum_from_a_state_dict() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    with_momentum = tfl.optim.SGD([w], lr=0.1, momentum=0.5)
    (w * w).sum().backward()
    with_momentum.step()
    plain = tfl.optim.SGD([tfl.tensor([1.0, 2.0], requires_grad=True)], lr=0.1)
    plain.load_state_dict(with_momentum.state_dict())
    assert plain.param_groups[0]["momentum"] == 0.5
    np.testing.assert_array_equal(plain.state[0]["momentum_buffer"].numpy(), [2.0, 4.0])


@pytest.mark.parametrize(("saved", "error", "words"), [
    ({"state": {}}, DTypeError, "'param_groups'"),
    ({"state": {}, "param_groups": []}, TeachflowError, "hold [] parameters"),
    ({"state": {}, "param_groups": [{"lr": 0.1, "params": [0]}]}, TeachflowError,
     "hold [1] parameters"),
    ({"state": {5: {}}, "param_groups": [{"lr": 0.1, "params": [0, 1]}]}, TeachflowError,
     "parameter 5"),
    ({"state": {0: {"exp_avg": np.zeros(4)}},
      "param_groups": [{"lr": 0.1, "params": [0, 1]}]}, tfl.ShapeError, "shape (4,)"),
    ({"state": {0: {"exp_avg": np.zeros(2)}},
      "param_groups": [{"lr": -1.0, "params": [0, 1]}]}, TeachflowError, "lr must be"),
    ({"state": {0: {"exp_avg": np.ones(2)}, 1: {"exp_avg": np.ones(3)}},
      "param_groups": [{"lr": 0.1, "params": [0, 1]}]}, tfl.ShapeError, "shape (3,)"),
])
def test_a_state_dict_that_does_not_fit_changes_nothing(saved, error, words) -> None:
    w, b = tfl.tensor([1.0, 2.0], requires_grad=True), tfl.tensor(0.5, requires_grad=True)
    opt = tfl.optim.Adam([w, b], lr=0.01)
    before = opt.state_dict()
    with pytest.raises(error) as info:
        opt.load_state_dict(saved)
    assert words in str(info.value) and info.value.op in ("load_state_dict", "Adam")
    after = opt.state_dict()
    assert after["param_groups"] == before["param_groups"]
    for i, state in after["state"].items():
        for name, value in state.items():
            np.testing.assert_array_equal(value.numpy(), before["state"][i][name].numpy())


def test_parameter_groups_have_settings_of_their_own() -> None:
    w, b = tfl.tensor([1.0, 2.0], requires_grad=True), tfl.tensor([3.0], requires_grad=True)
    opt = tfl.optim.SGD([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1, momentum=0.9)
    assert [g["lr"] for g in opt.param_groups] == [0.1, 0.5]
    assert opt.state_dict()["param_groups"][1] == {"lr": 0.5, "momentum": 0.9,
                                                   "weight_decay": 0.0, "params": [1]}
    (w.sum() + b.sum()).backward()
    opt.step()
    np.testing.assert_allclose(w.numpy(), [0.9, 1.9])
    np.testing.assert_allclose(b.numpy(), [2.5])
    with pytest.raises(TeachflowError, match="given twice"):
        tfl.optim.SGD([{"params": [w]}, {"params": [w]}], lr=0.1)
    with pytest.raises(TeachflowError, match="no setting 'momentun'"):
        tfl.optim.SGD([{"params": [w], "momentun": 0.9}], lr=0.1)


def test_a_staged_step_traces_again_when_a_setting_changes() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    twin = tfl.tensor([1.0, 2.0], requires_grad=True)
    staged_opt, eager_opt = tfl.optim.SGD([w], lr=0.1), tfl.optim.SGD([twin], lr=0.1)

    def step(p, opt):
        opt.zero_grad()
        (p * p).sum().backward()
        opt.step()

    staged = tfl.function(lambda: step(w, staged_opt))
    for lr in (0.1, 0.1, 0.3, 0.3, 0.05):
        for opt in (staged_opt, eager_opt):
            opt.param_groups[0]["lr"] = lr
        staged()
        step(twin, eager_opt)
        np.testing.assert_allclose(w.numpy(), twin.numpy(), rtol=1e-6)
    assert staged.trace_count == 3
    assert staged.retrace_reasons[0] == "the SGD optimizer's lr was 0.1 when traced, now 0.3"


# --- Learning-rate schedulers -------------------------------------------------------------------

sched = tfl.optim.lr_scheduler


def rates(scheduler, epochs: int) -> list[float]:
    """The rate of the first group at epochs 0, 1, ..., each read after that epoch's steps."""
    seen = []
    for _ in range(epochs):
        seen.append(scheduler.optimizer.param_groups[0]["lr"])
        assert scheduler.get_last_lr() == [seen[-1]]
        scheduler.optimizer.step()
        scheduler.step()
    return seen


def sgd(lr: float = 0.1) -> tfl.optim.SGD:
    return tfl.optim.SGD([tfl.tensor([1.0], requires_grad=True)], lr=lr)


def test_step_lr_multiplies_by_gamma_every_step_size_epochs() -> None:
    got = rates(sched.StepLR(sgd(0.5), step_size=3, gamma=0.1), 10)
    np.testing.assert_allclose(got, [0.5 * 0.1 ** (e // 3) for e in range(10)], rtol=1e-15)


@pytest.mark.parametrize(("t_max", "eta_min"), [(5, 0.0), (4, 0.01), (1, 0.0)])
def test_cosine_annealing_follows_the_closed_form_down_and_back_up(t_max, eta_min) -> None:
    base = 0.2
    got = rates(sched.CosineAnnealingLR(sgd(base), T_max=t_max, eta_min=eta_min), 3 * t_max + 2)
    expected = [eta_min + (base - eta_min) * (1 + math.cos(math.pi * e / t_max)) / 2
                for e in range(3 * t_max + 2)]
    np.testing.assert_allclose(got, expected, rtol=1e-12, atol=1e-15)


@pytest.mark.parametrize("make", [lambda o: sched.StepLR(o, 2, gamma=0.5),
                                  lambda o: sched.CosineAnnealingLR(o, T_max=6, eta_min=0.01)],
                         ids=["step", "cosine"])
def test_a_schedule_resumed_from_state_dicts_gives_the_same_rates(make) -> None:
    opt = sgd()
    scheduler = make(opt)
    rates(scheduler, 3)
    saved_opt, saved_sched = opt.state_dict(), scheduler.state_dict()
    assert "optimizer" not in saved_sched and saved_sched["last_epoch"] == 3
    without_stopping = rates(scheduler, 6)

    resumed_opt = sgd(lr=123.0)
    resumed = make(resumed_opt)
    resumed_opt.load_state_dict(saved_opt)
    resumed.load_state_dict(saved_sched)
    assert rates(resumed, 6) == without_stopping


def test_a_scheduler_sets_every_groups_rate_and_keeps_the_first() -> None:
    w, b = tfl.tensor([1.0], requires_grad=True), tfl.tensor([1.0], requires_grad=True)
    opt = tfl.optim.Adam([{"params": [w]}, {"params": [b], "lr": 0.5}], lr=0.1)
    scheduler = sched.StepLR(opt, step_size=1, gamma=0.5)
    scheduler.step()
    assert scheduler.get_last_lr() == [0.05, 0.25]
    assert [g["initial_lr"] for g in opt.param_groups] == [0.1, 0.5] == scheduler.base_lrs


@pytest.mark.parametrize(("make", "words"), [
    (lambda: sched.StepLR([tfl.tensor([1.0])], 2), "takes an optimizer"),
    (lambda: sched.StepLR(sgd(), 0), "step_size must be an int >= 1"),
    (lambda: sched.StepLR(sgd(), 2, gamma=-1.0), "gamma must be"),
    (lambda: sched.CosineAnnealingLR(sgd(), T_max=2.5), "T_max must be an int"),
    (lambda: sched.CosineAnnealingLR(sgd(), T_max=3, last_epoch=4), "initial_lr"),
])
def test_schedulers_refuse_bad_arguments(make, words) -> None:
    with pytest.raises(TeachflowError, match=words) as info:
        make()
    assert info.value.hint
