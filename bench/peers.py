"""How does teachflow compare with a peer? teachflow, NumPy and PyTorch side by side in one run.

1. The cheapest ops, one after another: 20 ops alternating ``y = y * a`` and ``y = y + b`` on 4x4
   float32, where the kernels cost almost nothing and the time per op is the framework's own
   dispatch. Contenders: NumPy's ufuncs called by hand, teachflow eager without the tape (no input
   requires grad), teachflow eager recording the tape (``x`` requires grad; the forward chain only),
   teachflow staged (``tfl.function`` of the chain), PyTorch eager without autograd (no input
   requires grad) and PyTorch recording for autograd (``x`` requires grad).
2. An MLP training step without the optimizer: batch 64, 784 -> 128 -> 10, ReLU, mean softmax
   cross-entropy, the loss and the gradients of both weights and both biases. Contenders: the
   forward and backward passes written by hand in NumPy, teachflow eager (``loss.backward()`` on
   parameters that require grad, ``.grad = None`` before each step), teachflow staged
   (``tfl.value_and_grad`` under ``tfl.function``: one joint forward-and-backward graph) and
   PyTorch eager (the same ``backward()`` step).

Every contender is first checked to compute the same values (float32 tolerances). Then rounds are
interleaved (each round times every contender) and the best time of each is kept, so drifting
machine load hits them all alike.

Goals (ratios of times, lower is better):
  chain: teachflow eager / PyTorch eager <= 0.8, teachflow recording / PyTorch autograd <= 1.0,
         teachflow staged / NumPy by hand <= 1.15;
  MLP:   teachflow eager / PyTorch eager <= 1.0, teachflow staged / NumPy by hand <= 1.10.

Threads: PyTorch is given as many intra-op threads as OpenBLAS (behind NumPy's matmul, and so
teachflow's) uses: ``OMP_NUM_THREADS`` where it is set, else ``os.cpu_count()`` (2 on the course
machine). So no side has cores the other lacks. (teachflow's fused kernels split only arrays far
bigger than these between cores.) On a busy machine, ``OMP_NUM_THREADS=1`` gives steadier MLP
figures: a matmul split between two threads waits for whichever core is taken.

PyTorch is optional: without it the NumPy and teachflow figures are still printed. To get it, in a
separate environment: ``pip install torch==2.13.0`` (or ``pip install -e .[bench]``).
Run: ``python bench/peers.py``.
"""

from __future__ import annotations

import argparse
import os

import numpy as np

import teachflow as tfl

from timing import interleaved_best, measured, ratio
from workloads import N_OPS, mlp_loss, mlp_params, mlp_step_numpy, mlp_step_teachflow

try:
    import torch
except ImportError:
    torch = None

THREADS = int(os.environ.get("OMP_NUM_THREADS") or os.cpu_count() or 1)


def chain_ufuncs(x, a, b):
    """The chain as NumPy calls written by hand: the floor, what the kernels themselves cost."""
    y = x
    for _ in range(N_OPS // 2):
        y = np.multiply(y, a)
        y = np.add(y, b)
    return y


def chain_operators(x, a, b):
    """The same chain with operators, which teachflow and PyTorch tensors both understand."""
    y = x
    for _ in range(N_OPS // 2):
        y = y * a
        y = y + b
    return y


def mlp_loss_torch(w1, b1, w2, b2, x, onehot):
    """`workloads.mlp_loss` in PyTorch's spelling."""
    h = (x @ w1 + b1).relu()
    logits = h @ w2 + b2
    return -(torch.log_softmax(logits, dim=1) * onehot).sum() / x.shape[0]


def backward_step(loss_fn, params, x, onehot):
    """One eager step as a PyTorch user writes it: zero the grads, forward, ``loss.backward()``."""
    for p in params:
        p.grad = None
    loss = loss_fn(*params, x, onehot)
    loss.backward()
    return loss, [p.grad for p in params]


def as_numpy(t) -> np.ndarray:
    """The values of a NumPy array, a teachflow tensor or a PyTorch tensor, as a NumPy array."""
    return np.asarray(t.detach() if torch is not None and isinstance(t, torch.Tensor) else t)


def ratio_line(label: str, a: float, b: float, goal: float) -> str:
    """``a / b``, two timings, against its goal."""
    if not (measured(a) and measured(b)):
        verdict = "not measured"
    else:
        verdict = "met" if a / b <= goal else f"missed by {a / b / goal - 1:.0%}"
    return f"  {label:<40} {ratio(a, b):>5}   (goal <= {goal:.2f}x: {verdict})"


def chain_benchmark(number: int, repeat: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    x, a, b = (rng.uniform(lo, hi, (4, 4)).astype(np.float32)
               for lo, hi in ((-1, 1), (0.5, 1), (-0.5, 0.5)))
    plain = [tfl.tensor(v) for v in (x, a, b)]
    taped = [tfl.tensor(x, requires_grad=True), *plain[1:]]
    staged = tfl.function(chain_operators)
    calls = {
        "numpy": lambda: chain_ufuncs(x, a, b),
        "eager": lambda: chain_operators(*plain),
        "taped": lambda: chain_operators(*taped),
        "staged": lambda: staged(*plain),
    }
    if torch is not None:
        t_plain = [torch.from_numpy(v) for v in (x, a, b)]
        t_taped = [torch.from_numpy(x.copy()).requires_grad_(), *t_plain[1:]]
        calls["torch"] = lambda: chain_operators(*t_plain)
        calls["autograd"] = lambda: chain_operators(*t_taped)

    # The contenders must compute the same thing, or the comparison means nothing.
    expected = chain_ufuncs(x, a, b)
    for name, call in calls.items():
        np.testing.assert_allclose(as_numpy(call()), expected, rtol=1e-5, atol=1e-6,
                                   err_msg=name)
    t = interleaved_best(calls, number, repeat, rounds)
    assert staged.trace_count == 1

    rows = [("numpy", "NumPy ufuncs by hand"), ("eager", "teachflow eager, no tape"),
            ("taped", "teachflow eager, recording"), ("staged", "teachflow staged"),
            ("torch", "PyTorch eager, no autograd"), ("autograd", "PyTorch eager, autograd")]
    print(f"\n{N_OPS}-op chain (y*a, y+b alternating), 4x4 float32, time per op:")
    for key, label in rows:
        if key in t:
            print(f"  {label:<28} {t[key] / N_OPS * 1e6:7.3f} us   "
                  f"{ratio(t[key], t['numpy']):>5} NumPy")
    if torch is not None:
        print(ratio_line("teachflow eager / PyTorch eager", t["eager"], t["torch"], 0.8))
        print(ratio_line("teachflow recording / PyTorch autograd",
                         t["taped"], t["autograd"], 1.0))
    print(ratio_line("teachflow staged / NumPy by hand", t["staged"], t["numpy"], 1.15))


def mlp_benchmark(number: int, repeat: int, rounds: int) -> None:
    rng = np.random.default_rng(0)
    x = rng.normal(size=(64, 784)).astype(np.float32)
    onehot = np.eye(10, dtype=np.float32)[rng.integers(0, 10, 64)]
    params = mlp_params(rng)
    tf_params = [tfl.tensor(p, requires_grad=True) for p in params]
    tf_x, tf_onehot = tfl.tensor(x), tfl.tensor(onehot)
    tf_args = [tf_x, tf_onehot, *(tfl.tensor(p) for p in params)]
    staged = tfl.function(mlp_step_teachflow)
    calls = {
        "numpy": lambda: mlp_step_numpy(x, onehot, *params),
        "eager": lambda: backward_step(mlp_loss, tf_params, tf_x, tf_onehot),
        "staged": lambda: staged(*tf_args),
    }
    if torch is not None:
        t_params = [torch.from_numpy(p.copy()).requires_grad_() for p in params]
        t_x, t_onehot = torch.from_numpy(x), torch.from_numpy(onehot)
        calls["torch"] = lambda: backward_step(mlp_loss_torch, t_params, t_x, t_onehot)

    loss, grads = mlp_step_numpy(x, onehot, *params)
    for name, call in calls.items():
        got_loss, got_grads = call()
        np.testing.assert_allclose(as_numpy(got_loss), loss, rtol=1e-4, err_msg=name)
        for got, want in zip(got_grads, grads, strict=True):
            np.testing.assert_allclose(as_numpy(got), want, rtol=1e-3, atol=1e-5, err_msg=name)
    t = interleaved_best(calls, number, repeat, rounds)
    assert staged.trace_count == 1

    rows = [("numpy", "NumPy by hand"), ("eager", "teachflow eager, backward()"),
            ("staged", "teachflow staged"), ("torch", "PyTorch eager, backward()")]
    print("\nMLP step, batch 64, 784-128-10, forward + backward, time per step:")
    for key, label in rows:
        if key in t:
            print(f"  {label:<28} {t[key] * 1e6:7.1f} us   {ratio(t[key], t['numpy']):>5} NumPy")
    if torch is not None:
        print(ratio_line("teachflow eager / PyTorch eager", t["eager"], t["torch"], 1.0))
    print(ratio_line("teachflow staged / NumPy by hand", t["staged"], t["numpy"], 1.10))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--number", type=int, default=2000, help="chain calls per timing run")
    parser.add_argument("--repeat", type=int, default=7, help="timing runs per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds (best is kept)")
    args = parser.parse_args()

    versions = f"numpy {np.__version__}, {THREADS} thread(s)"
    if torch is None:
        print("PyTorch is missing, so only NumPy and teachflow are measured. To compare with it:\n"
              "  pip install torch==2.13.0   (a CPU build is enough)")
    else:
        torch.set_num_threads(THREADS)
        versions += f", torch {torch.__version__} with {torch.get_num_threads()} thread(s)"
    print(versions)
    chain_benchmark(args.number, args.repeat, args.rounds)
    mlp_benchmark(max(args.number // 40, 1), args.repeat, args.rounds)


if __name__ == "__main__":
    main()
