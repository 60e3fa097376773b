"""A whole training step, side by side in one run: teachflow eager and staged, NumPy by hand,
PyTorch eager.

The step of issue 11: batch 64 of MNIST-sized inputs (784 features), an MLP 784 -> 128 -> 10
with ReLU, mean cross-entropy over integer labels, and plain SGD (lr 0.01):
``zero_grad(); loss = cross_entropy(model(x), y); loss.backward(); opt.step()``.

- NumPy by hand: the forward pass, the backward pass written out (``softmax - one_hot``), and the
  four in-place updates; the floor, with no framework at all.
- teachflow eager: `tfl.nn.Sequential`, `tfl.nn.functional.cross_entropy`, `tfl.optim.SGD`.
- teachflow staged: the same step under `tfl.function` (one graph: forward, backward, and the
  parameter updates, written back after each call).
- PyTorch eager: ``torch.nn.Sequential``, ``F.cross_entropy``, ``torch.optim.SGD`` (optional;
  ``pip install torch==2.13.0``, a CPU build, in a separate environment).

All start from the same parameters, and are first checked to give the same loss and the same
parameters after three steps (float32 tolerances). Then rounds are interleaved (each round times
every contender, moments apart) and the best time per step of each is printed. The goal ratios
are paired: in each round, one contender's time over the other's, and the median of those over
the rounds (this machine's load drifts; a ratio of two bests can pair a lucky moment of one
with an unlucky moment of the other).

Goals: teachflow staged <= 1.10x NumPy by hand, and faster than PyTorch eager.
Threads: PyTorch gets as many as OpenBLAS uses (``OMP_NUM_THREADS``, else the core count).
Run: ``python bench/train_step.py``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import teachflow as tfl

from timing import best, interleaved_rounds, microseconds, paired_ratio, ratio, ratio_text

try:
    import torch
except ImportError:
    torch = None

THREADS = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)
LR = 0.01


def initial(rng: np.random.Generator) -> list[np.ndarray]:
    """Weights as (out, in), PyTorch's layout, and biases: one set every contender starts from."""
    shapes = [(128, 784), (128,), (10, 128), (10,)]
    return [(rng.uniform(-1, 1, s) / np.sqrt(784 if k < 2 else 128)).astype(np.float32)
            for k, s in enumerate(shapes)]


def numpy_step(params: list[np.ndarray], x: np.ndarray, y: np.ndarray) -> float:
    """One SGD step by hand, updating `params` in place; returns the loss."""
    w1, b1, w2, b2 = params
    n = x.shape[0]
    z1 = x @ w1.T + b1
    h = np.maximum(z1, 0)
    logits = h @ w2.T + b2
    shifted = logits - logits.max(axis=1, keepdims=True)
    e = np.exp(shifted)
    total = e.sum(axis=1, keepdims=True)
    loss = -(shifted[np.arange(n), y] - np.log(total[:, 0])).mean()
    d_logits = e / total
    d_logits[np.arange(n), y] -= 1
    d_logits /= n
    dh = (d_logits @ w2) * (z1 > 0)
    grads = (dh.T @ x, dh.sum(axis=0), d_logits.T @ h, d_logits.sum(axis=0))
    for p, g in zip(params, grads, strict=True):
        p -= LR * g
    return float(loss)


def teachflow_model(params: list[np.ndarray]) -> tuple:
    model = tfl.nn.Sequential(tfl.nn.Linear(784, 128), tfl.nn.ReLU(), tfl.nn.Linear(128, 10))
    model.load_state_dict(dict(zip(["0.weight", "0.bias", "2.weight", "2.bias"], params,
                                   strict=True)))
    opt = tfl.optim.SGD(model.parameters(), lr=LR)

    def step(x, y):
        opt.zero_grad()
        loss = tfl.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return model, step


def torch_model(params: list[np.ndarray]) -> tuple:
    model = torch.nn.Sequential(torch.nn.Linear(784, 128), torch.nn.ReLU(),
                                torch.nn.Linear(128, 10))
    model.load_state_dict({k: torch.from_numpy(v.copy()) for k, v in
                           zip(["0.weight", "0.bias", "2.weight", "2.bias"], params,
                               strict=True)})
    opt = torch.optim.SGD(model.parameters(), lr=LR)

    def step(x, y):
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss
    return model, step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=50, help="steps per timing run")
    parser.add_argument("--repeat", type=int, default=5, help="timing runs per round")
    parser.add_argument("--rounds", type=int, default=9,
                        help="interleaved rounds (the best is printed, and paired ratios)")
    args = parser.parse_args()

    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 784)).astype(np.float32)
    y = rng.integers(0, 10, 64)
    start = initial(rng)

    np_params = [p.copy() for p in start]
    eager_model, eager_step = teachflow_model(start)
    staged_model, step = teachflow_model(start)
    staged_step = tfl.function(step)
    tx, ty = tfl.tensor(x), tfl.tensor(y)
    calls = {"numpy": lambda: numpy_step(np_params, x, y),
             "eager": lambda: eager_step(tx, ty),
             "staged": lambda: staged_step(tx, ty)}
    models = {"eager": eager_model, "staged": staged_model}
    versions = f"numpy {np.__version__}, {THREADS} thread(s)"
    if torch is not None:
        torch.set_num_threads(THREADS)
        torch_net, torch_step = torch_model(start)
        px, py = torch.from_numpy(x), torch.from_numpy(y)
        calls["torch"] = lambda: torch_step(px, py)
        versions += f", torch {torch.__version__}"
    else:
        print("PyTorch is missing, so only NumPy and teachflow are measured. To compare with it:\n"
              "  pip install torch==2.13.0   (a CPU build is enough)")
    print(versions)

    # The same numbers first: three steps from the same start, losses and parameters.
    losses = {name: [float(call()) for _ in range(3)] for name, call in calls.items()}
    for name, got in losses.items():
        np.testing.assert_allclose(got, losses["numpy"], rtol=1e-4, err_msg=name)
    for name, model in models.items():
        for got, want in zip(model.parameters(), np_params, strict=True):
            np.testing.assert_allclose(got.numpy(), want, rtol=1e-4, atol=1e-6, err_msg=name)
    if torch is not None:
        for got, want in zip(torch_net.parameters(), np_params, strict=True):
            np.testing.assert_allclose(got.detach().numpy(), want, rtol=1e-4, atol=1e-6)

    rounds = interleaved_rounds(calls, args.number, args.repeat, args.rounds)
    assert staged_step.trace_count == 1
    print("\n".join(report(rounds)))


LABELS = {"numpy": "NumPy by hand", "eager": "teachflow eager", "staged": "teachflow staged",
          "torch": "PyTorch eager"}


def report(rounds: dict[str, list[float]]) -> list[str]:
    """The printed lines: each contender's best time per step and its ratio to NumPy, then the
    paired goal ratios (PyTorch's where it was measured)."""
    t = {name: best(times) for name, times in rounds.items()}
    lines = ["", "SGD training step, batch 64, 784-128-10, cross-entropy, time per step:"]
    lines += [f"  {label:<18} {microseconds(t[key])}   {ratio(t[key], t['numpy']):>5} NumPy"
              for key, label in LABELS.items() if key in t]
    lines.append(f"Paired ratios, the median over {len(rounds['numpy'])} rounds:")
    goals = [("staged", "numpy", "teachflow staged / NumPy by hand: ", " (goal <= 1.10)")]
    if "torch" in rounds:
        goals += [("staged", "torch", "teachflow staged / PyTorch eager: ", " (goal < 1)"),
                  ("eager", "torch", "teachflow eager / PyTorch eager:  ", "")]
    lines += [f"  {label}{ratio_text(paired_ratio(rounds, a, b))}{goal}"
              for a, b, label, goal in goals]
    return lines

if __name__ == "__main__":
    main()
