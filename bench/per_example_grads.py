"""Per-example gradients: ``tfl.vmap(tfl.grad(loss))`` staged, against a Python loop of
``tfl.grad`` calls, and against ``torch.func.vmap(torch.func.grad(loss))`` where PyTorch is
installed.

The model is a 784-128-10 MLP with tanh and cross-entropy (integer labels), float32, and the
batch has 64 examples. Each way gives the gradient of every example's own loss with respect to
every parameter; the results are checked to agree before anything is timed. Side by side, in one
run, interleaved (`timing.interleaved_rounds`), each ratio the median of the rounds' paired
ratios:

- vmap(grad), staged: one ``tfl.function`` whose graph is the batched gradient (no loop in it);
- loop of grad: 64 calls of ``tfl.grad(loss)``, eagerly, one per example;
- torch.func: ``torch.func.vmap(torch.func.grad(loss), in_dims=(None, 0, 0))``, eagerly.

Goals (issue 30): vmap(grad) staged at least 10x the loop, and within 1.5x of torch.func.

Run: ``python bench/per_example_grads.py`` (``--rounds 3`` for a quick look).
"""

from __future__ import annotations

import argparse

import numpy as np

import teachflow as tfl

from timing import interleaved_rounds, microseconds, paired_ratio, ratio_text

try:
    import torch
    import torch.func
except ImportError:  # (optional: the peer is skipped, saying so)
    torch = None

BATCH, SIZES = 64, (784, 128, 10)


def loss(params, x, y):
    """One example's cross-entropy: x (784,), y an integer label."""
    w1, b1, w2, b2 = params
    logits = (x @ w1 + b1).tanh() @ w2 + b2
    return -tfl.log_softmax(logits, axis=-1)[y]


def loss_torch(params, x, y):
    w1, b1, w2, b2 = params
    logits = torch.tanh(x @ w1 + b1) @ w2 + b2
    return torch.nn.functional.cross_entropy(logits.unsqueeze(0), y.unsqueeze(0))


def problem(seed: int = 0) -> tuple:
    rng = np.random.default_rng(seed)
    n_in, n_hidden, n_out = SIZES
    params = tuple(a.astype(np.float32) for a in (
        rng.normal(size=(n_in, n_hidden)) / np.sqrt(n_in), np.zeros(n_hidden),
        rng.normal(size=(n_hidden, n_out)) / np.sqrt(n_hidden), np.zeros(n_out)))
    xs = rng.normal(size=(BATCH, n_in)).astype(np.float32)
    ys = rng.integers(0, n_out, size=BATCH)
    return params, xs, ys


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=7)
    args = parser.parse_args()
    params, xs, ys = problem()
    t_params = tuple(tfl.tensor(p) for p in params)
    t_xs, t_ys = tfl.tensor(xs), tfl.tensor(ys)

    staged = tfl.function(tfl.vmap(tfl.grad(loss), in_axes=(None, 0, 0)))
    one = tfl.grad(loss)

    def loop() -> list:
        return [one(t_params, t_xs[k], t_ys[k]) for k in range(BATCH)]

    calls = {"vmap(grad), staged": lambda: staged(t_params, t_xs, t_ys), "loop of grad": loop}
    batched = [g.numpy() for g in staged(t_params, t_xs, t_ys)]
    looped = [np.stack([g[p].numpy() for g in loop()]) for p in range(4)]
    for b, want in zip(batched, looped, strict=True):
        np.testing.assert_allclose(b, want, rtol=1e-4, atol=1e-6)
    if torch is not None:
        torch.set_num_threads(1)
        p_torch = tuple(torch.from_numpy(p) for p in params)
        x_torch, y_torch = torch.from_numpy(xs), torch.from_numpy(ys)
        peer = torch.func.vmap(torch.func.grad(loss_torch), in_dims=(None, 0, 0))
        calls["torch.func"] = lambda: peer(p_torch, x_torch, y_torch)
        for b, want in zip(batched, peer(p_torch, x_torch, y_torch), strict=True):
            np.testing.assert_allclose(b, want.numpy(), rtol=1e-4, atol=1e-6)

    nodes = len(tfl.compile(tfl.vmap(tfl.grad(loss), in_axes=(None, 0, 0)), t_params, t_xs,
                            t_ys).graph.nodes)
    print(f"per-example gradients, 784-128-10 tanh MLP, cross-entropy, batch {BATCH}, float32")
    print(f"vmap(grad) compiles to one graph of {nodes} nodes (no loop, nothing per example)")
    times = interleaved_rounds(calls, number=1, repeat=3, rounds=args.rounds)
    for name, per_round in times.items():
        print(f"  {name:<20} {microseconds(min(per_round))}")
    loop_ratio = paired_ratio(times, "loop of grad", "vmap(grad), staged")
    print(f"loop of grad / vmap(grad) staged: {ratio_text(loop_ratio)} (goal >= 10x)")
    if torch is None:
        print("torch.func: skipped (PyTorch is not installed: pip install -e .[bench])")
        return
    peer_ratio = paired_ratio(times, "vmap(grad), staged", "torch.func")
    print(f"vmap(grad) staged / torch.func: {ratio_text(peer_ratio)} (goal <= 1.5x; "
          "PyTorch on one thread, as teachflow)")


if __name__ == "__main__":
    main()
