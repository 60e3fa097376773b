"""A small CNN on the digits, trained eagerly and staged, beside PyTorch (issue 33).

The model a course reaches for once it leaves MLPs: the 8x8 digits of `tfl.data.load_digits`
(scikit-learn's, a fixed split: seed 0, a quarter held out) as images (N, 1, 8, 8), then

    Conv2d(1, 16, 3, padding=1) -> ReLU -> Conv2d(16, 32, 3) -> ReLU -> MaxPool2d(2)
    -> Flatten -> Linear(32·3·3, 10)

trained with Adam (lr 3e-3, batch 32, the batches in one shuffled order, the same for every
contender) for `EPOCHS` epochs, mean cross-entropy. Every contender starts from the same
parameters (PyTorch's init, drawn by teachflow, copied into PyTorch's model).

- teachflow eager: the step as a learner writes it, ``zero_grad(); loss.backward();
  opt.step()``; each convolution is one op (`teachflow.ops.convolution`: im2col and a matmul).
- teachflow staged: the same step under `tfl.function` (one graph: forward, backward, Adam).
- PyTorch eager: the same model and optimizer (optional: skipped if torch is missing).

Printed: each contender's test accuracy after training (the goal: >= 98% for teachflow eager
and staged), and its time per epoch, the best of the epochs after the first (the first traces
and compiles; its time is printed apart), with the ratio to PyTorch's. The contenders train
epoch by epoch in turn, so that a machine whose load drifts slows each alike.
Run: ``python bench/cnn_digits.py`` (``--epochs N`` to train longer or shorter).
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

import teachflow as tfl
from teachflow import nn

try:
    import torch
except ImportError:
    torch = None

EPOCHS, BATCH, LR, SEED = 12, 32, 3e-3, 0
THREADS = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)


def teachflow_model() -> nn.Module:
    tfl.manual_seed(SEED)
    return nn.Sequential(nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.Conv2d(16, 32, 3),
                         nn.ReLU(), nn.MaxPool2d(2), nn.Flatten(), nn.Linear(32 * 3 * 3, 10))


def torch_model(start: dict[str, np.ndarray]) -> object:
    tnn = torch.nn
    model = tnn.Sequential(tnn.Conv2d(1, 16, 3, padding=1), tnn.ReLU(), tnn.Conv2d(16, 32, 3),
                           tnn.ReLU(), tnn.MaxPool2d(2), tnn.Flatten(), tnn.Linear(32 * 3 * 3, 10))
    model.load_state_dict({k: torch.tensor(v) for k, v in start.items()})
    return model


def batches(n: int, epochs: int) -> list[list[np.ndarray]]:
    """Each epoch's batches of example indices: one shuffled order, for every contender."""
    rng = np.random.default_rng(SEED)
    return [np.array_split(rng.permutation(n), range(BATCH, n, BATCH)) for _ in range(epochs)]


def train_teachflow(data: tuple, order: list, staged: bool):
    """Train, yielding each epoch's seconds, then the test accuracy."""
    x_train, y_train, x_test, y_test = data
    model = teachflow_model()
    opt = tfl.optim.Adam(model.parameters(), lr=LR)

    def step(x: tfl.Tensor, y: tfl.Tensor) -> tfl.Tensor:
        opt.zero_grad()
        loss = nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    run = tfl.function(step) if staged else step
    # Batches sliced beforehand, as a DataLoader hands them over; the last, smaller batch of an
    # epoch is one more signature, traced once.
    pieces = [[(tfl.tensor(x_train[i]), tfl.tensor(y_train[i])) for i in epoch]
              for epoch in order]
    for epoch in pieces:
        start = time.perf_counter()
        for x, y in epoch:
            run(x, y)
        yield time.perf_counter() - start
    model.eval()
    predicted = model(tfl.tensor(x_test)).argmax(axis=1).numpy()
    yield float((predicted == y_test).mean())


def train_torch(data: tuple, order: list):
    x_train, y_train, x_test, y_test = data
    start_state = {k: v.numpy() for k, v in teachflow_model().state_dict().items()}
    model = torch_model(start_state)
    opt = torch.optim.Adam(model.parameters(), lr=LR)
    pieces = [[(torch.tensor(x_train[i]), torch.tensor(y_train[i])) for i in epoch]
              for epoch in order]
    for epoch in pieces:
        start = time.perf_counter()
        for x, y in epoch:
            opt.zero_grad()
            loss = torch.nn.functional.cross_entropy(model(x), y)
            loss.backward()
            opt.step()
        yield time.perf_counter() - start
    with torch.no_grad():
        predicted = model(torch.tensor(x_test)).argmax(dim=1).numpy()
    yield float((predicted == y_test).mean())


def interleaved(trainers: dict, epochs: int) -> dict[str, tuple[float, list[float]]]:
    """Run the trainers epoch by epoch in turn, so that a machine whose load drifts slows each
    alike; (test accuracy, seconds per epoch) of each."""
    times: dict[str, list[float]] = {name: [] for name in trainers}
    for _ in range(epochs):
        for name, trainer in trainers.items():
            times[name].append(next(trainer))
    return {name: (next(trainer), times[name]) for name, trainer in trainers.items()}


def digits() -> tuple:
    x_train, y_train, x_test, y_test = (t.numpy() for t in tfl.data.load_digits(seed=SEED))
    return (x_train.reshape(-1, 1, 8, 8), y_train, x_test.reshape(-1, 1, 8, 8), y_test)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--epochs", type=int, default=EPOCHS)
    epochs = parser.parse_args().epochs
    data = digits()
    order = batches(len(data[0]), epochs)
    trainers = {"teachflow eager": train_teachflow(data, order, staged=False),
                "teachflow staged": train_teachflow(data, order, staged=True)}
    if torch is not None:
        torch.set_num_threads(THREADS)
        trainers["PyTorch eager"] = train_torch(data, order)
    results = interleaved(trainers, epochs)
    print(f"CNN on the digits: {len(data[0])} training images (8x8), {len(data[2])} test, "
          f"batch {BATCH}, Adam lr {LR}, {epochs} epochs; PyTorch on {THREADS} thread(s) "
          "(OMP_NUM_THREADS)")
    peer = min(results["PyTorch eager"][1][1:]) if torch is not None else None
    for name, (accuracy, times) in results.items():
        per_epoch = min(times[1:]) if len(times) > 1 else times[0]
        versus = f"  {per_epoch / peer:5.2f}x PyTorch's" if peer else ""
        print(f"  {name:17s} test accuracy {accuracy:6.2%}   {per_epoch * 1e3:7.1f} ms per "
              f"epoch (first epoch {times[0] * 1e3:.0f} ms){versus}")
    for name in ("teachflow eager", "teachflow staged"):
        if epochs >= EPOCHS and results[name][0] < 0.98:
            print(f"  GOAL MISSED: {name} below 98% test accuracy")


if __name__ == "__main__":
    main()
