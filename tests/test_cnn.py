"""A small CNN learns the digits, eagerly and staged (issue 33: what bench/cnn_digits.py times).

A smaller model than the benchmark's (conv 1->8 without a bias, as before a batch norm, which
cancels it: Adam would move it by rounding noise alone; batch norm, ReLU, max pool, linear)
trains for a few epochs on part of the training set; its test accuracy must rise far above
chance (10%), and the staged step must train the same model as the eager one. No timing.
"""

from __future__ import annotations

import numpy as np
import pytest

import teachflow as tfl
from teachflow import nn

pytest.importorskip("sklearn")


def train(staged: bool, epochs: int = 3, batch: int = 32) -> tuple[float, dict]:
    x_train, y_train, x_test, y_test = (t.numpy() for t in tfl.data.load_digits(seed=0))
    x_train, x_test = x_train.reshape(-1, 1, 8, 8)[:640], x_test.reshape(-1, 1, 8, 8)
    y_train = y_train[:640]
    tfl.manual_seed(0)
    model = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(),
                          nn.MaxPool2d(2), nn.Flatten(), nn.Linear(8 * 4 * 4, 10))
    opt = tfl.optim.Adam(model.parameters(), lr=0.01)

    def step(x: tfl.Tensor, y: tfl.Tensor) -> tfl.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = tfl.function(step) if staged else step
    for _ in range(epochs):
        for i in range(0, len(x_train), batch):
            run(tfl.tensor(x_train[i:i + batch]), tfl.tensor(y_train[i:i + batch]))
    model.eval()
    predicted = model(tfl.tensor(x_test)).argmax(axis=1).numpy()
    return float((predicted == y_test).mean()), model.state_dict()


def test_a_small_cnn_learns_the_digits_eagerly_and_staged_alike() -> None:
    (eager, eager_state), (staged, staged_state) = train(staged=False), train(staged=True)
    assert eager > 0.8 and staged > 0.8  # chance is 0.1
    assert abs(eager - staged) <= 0.01
    for name, value in eager_state.items():
        np.testing.assert_allclose(staged_state[name].numpy(), value.numpy(), rtol=1e-3,
                                   atol=1e-4)
