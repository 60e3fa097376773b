"""Compilations that exercise every part of the stepper's data: each pass's kind of change,
constants, state written back, control flow (nested too), a kernel with several results, and
a model's modules (boxes of scopes).
Shared by `test_stepper.py` (Python and Node.js) and `test_browser.py` (Chromium)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import teachflow as tfl


def rules_and_fusion(x, y):
    a = x * 1.0  # x*1 -> x
    b = (a + y).tanh() + (a + y).tanh()  # CSE, and f(x) + f(x) -> 2*f(x)
    return (b * 2.0).sum() + tfl.full((), 2.0) * 3.0  # fused; a constant folded


def training_step() -> tfl.Compilation:
    """A staged SGD step: a captured weight, its gradient, both written back."""
    w = tfl.tensor([[0.5], [-0.5], [1.0]], requires_grad=True)

    def step(x, y):
        w.grad = None
        loss = ((x @ w - y) ** 2).mean()
        loss.backward()
        with tfl.no_grad():
            w.__isub__(0.1 * w.grad)
        return loss

    return tfl.compile(step, tfl.randn(8, 3), tfl.randn(8, 1))


def branch(x, p):  # CSE and fusion inside the true branch
    return tfl.cond(p.sum() > 0, lambda x: x * 2 + x * 2, lambda x: x - 1.0, x) * 3.0 + x


def nested(x):
    def body(i, c):
        return tfl.cond(c.sum() > 0, lambda c: c * 0.99 + 0.01, lambda c: c + c, c)

    return tfl.fori_loop(0, 10, body, x).tanh()


def halve(x):
    return x * 0.5


def loop(x):
    return tfl.while_loop(lambda x: x.sum() > 1, halve, x)


def two_results(x, w):  # one kernel writes h, read by a matmul, and a sum it ends in
    h = (x * 2.0 + 1.0).tanh()
    return h @ w, ((h * x).exp() - h).sum(axis=1) * 0.5


def big_constant(x):  # a NumPy array in the program: a constant of 256 x 256
    return (x @ np.full((256, 256), 0.01, dtype=np.float32) + 1.0).tanh()


def modules_step() -> tfl.Compilation:
    """A staged step of a small model: its nodes made in modules' scopes, drawn as boxes."""
    tfl.manual_seed(0)
    model = tfl.nn.Sequential(tfl.nn.Linear(3, 4), tfl.nn.ReLU(), tfl.nn.Linear(4, 1))
    opt = tfl.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)

    def step(x, y):
        opt.zero_grad()
        loss = tfl.nn.functional.mse_loss(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return tfl.compile(step, tfl.randn(8, 3), tfl.randn(8, 1))


CASES: dict[str, Callable[[], tfl.Compilation]] = {
    "rules and fusion": lambda: tfl.compile(rules_and_fusion, tfl.randn(3, 4), tfl.randn(3, 4)),
    "training step": training_step,
    "cond": lambda: tfl.compile(branch, tfl.tensor([4.0, 4.0]), tfl.tensor([1.0])),
    "loops in loops": lambda: tfl.compile(nested, tfl.ones(4)),
    "while loop": lambda: tfl.compile(loop, tfl.tensor([4.0, 4.0])),
    "two results": lambda: tfl.compile(two_results, tfl.randn(6, 4), tfl.randn(4, 4)),
    "big constant": lambda: tfl.compile(big_constant, tfl.randn(256, 256)),
    "modules": modules_step,
}


def chain(y, n: int = 1250):
    """Issue 13's chain: 4 nodes a step, all fused into one kernel."""
    for _ in range(n):
        y = (y * 1.5 + y).tanh() - y
    return y
