"""`tfl.optim` (issue 11, §2 and §3): SGD and Adam step for step as PyTorch documents them, and a
whole training step staged with `tfl.function` giving the eager step's numbers.

The references are PyTorch's documented algorithms, written here independently in NumPy float64
(``torch.optim.SGD`` with dampening 0 and no Nesterov; ``torch.optim.Adam`` without amsgrad).
"""

from __future__ import annotations

import copy

import numpy as np
import pytest

import teachflow as tfl
from teachflow.errors import DTypeError, TeachflowError

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
