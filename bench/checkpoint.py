"""Rematerialisation's trade, side by side in one run: a deep MLP's training step, plain vs with
``tfl.checkpoint`` at every other layer.

The step: 12 layers ``Linear(512, 512)`` and an activation, ReLU and then GELU (one table
each; ``--activation relu`` or ``gelu`` for one), the mean of the squared output as the loss,
backward, and plain SGD. Checkpointed, the layers run in pairs, each pair one region: only every
other layer's input is kept for backward (the checkpoints), and each pair's forward pass runs
again in backward. Printed, plain vs checkpointed:

- peak bytes, staged: `teachflow.memory.peak_bytes` of the compiled step's last stage (its
  schedule as the executor runs it: arguments, weights, gradients and new weights counted);
  the same of the trace, before the passes (fusion moves some reads later);
- peak bytes, eager: the most NumPy held during forward and backward, by tracemalloc (NumPy
  reports its arrays' memory to it), above what was held before;
- FLOPs: the compiled step's ``stats["flops"]``;
- time per step, staged and eager: interleaved rounds (`timing.interleaved_rounds`), the best
  of each, and the paired ratio (the median of the rounds' ratios).

- peak bytes, PyTorch (where it is installed): the same model and step, plain vs
  ``torch.utils.checkpoint`` on the same pairs, from its profiler's memory timeline (parameters,
  inputs, activations, gradients and temporaries, summed at each moment; the largest sum).

Goals: peak <= 0.6x plain, time <= 1.4x plain. The peak counts only where activations are what
fills memory: at batch 256 a layer's activation (0.5 MB) is small beside its weights (1 MB),
their gradient and the new weights, which all live at the end of the step, after backward, the
same with or without checkpoints; so the default batch is 2048 (``--batch 256`` shows that).
Printed last, what the staged peak holds in each case. Plain, it is the 12 activations at the
turn from forward to backward; checkpointed, the 5 checkpoints and the last region's working
set in its backward (the loss's cotangent, the region's recomputed activations), 9 in all,
with the batch and the weights (16.8 MB) in both: about 0.75x, 0.68x of the activations alone.

Why 0.6x is out of reach for the ReLU model, whoever checkpoints it. A layer keeps one activation
for backward (its ReLU's output: the next layer's input, and its own mask). Plain, backward's
first product ``g11 = g12 @ W12.T`` runs with the batch, the 12 activations and ``g11`` live: 14
values of the batch's size (A = 4.2 MB each). Checkpointed, the last region's backward needs,
at the same product, the batch, the 5 checkpoints, the region's recomputed ``h11``, ``g12`` and
``g11``: 9. Weights (W = 12.6 MB) are held in both, so the least ratio is (9A + W) / (14A + W) =
0.70 here, and 9/14 = 0.64 when activations dwarf the weights. PyTorch's own checkpoint on this
very model gives 0.68x (printed below where torch is installed: its trace holds what
teachflow's trace holds, byte for byte); teachflow's plan then lowers the plain step's peak
more than the checkpointed one's, which already sits near its floor.

The GELU model meets the goal, in teachflow and in PyTorch: what a layer keeps for backward is
what checkpointing saves, and a GELU keeps more than a ReLU. teachflow's ``gelu`` is a line of
elementwise ops, ``0.5 * x * (1 + erf(x / √2))``, each keeping what its gradient reads: three
values of the batch's size per layer besides its output (46 activations at the plain peak,
against 13 for ReLU), of which a checkpointed region keeps none (12). PyTorch's ``GELU`` is one
op that keeps its input, so its plain peak is lower and its ratio higher (0.45x), though still
under 0.6x. Eagerly, the GELU's elementwise ops are a large part of the step and run again in
backward: the eager time ratio is higher than the staged one, where fusion makes them one kernel.
Run: ``python bench/checkpoint.py``.
"""

from __future__ import annotations

import argparse
import tracemalloc

import teachflow as tfl
from teachflow.memory import live_ranges, peak_bytes, timeline

from timing import best, interleaved_rounds, microseconds, paired_ratio, ratio_text

WIDTH, DEPTH = 512, 12
#: The activations measured: the module teachflow builds, and PyTorch's (its name in torch.nn).
ACTIVATIONS = {"relu": (tfl.nn.ReLU, "ReLU"), "gelu": (tfl.nn.GELU, "GELU")}


def mlp(activation: str) -> list:
    tfl.manual_seed(0)
    module = ACTIVATIONS[activation][0]
    return [tfl.nn.Sequential(tfl.nn.Linear(WIDTH, WIDTH), module()) for _ in range(DEPTH)]


def forward(layers: list, x: tfl.Tensor, checkpointed: bool) -> tfl.Tensor:
    """The layers in pairs; with `checkpointed`, each pair is one checkpointed region."""
    h = x
    for i in range(0, len(layers), 2):
        pair = tfl.nn.Sequential(layers[i], layers[i + 1])
        h = tfl.checkpoint(pair)(h) if checkpointed else pair(h)
    return h


def loss_of(layers: list, x: tfl.Tensor, checkpointed: bool) -> tfl.Tensor:
    """The mean of the squared output. (A function of its own: no name holds the output during
    backward, which would keep one more activation alive, eagerly.)"""
    h = forward(layers, x, checkpointed)
    return (h * h).mean()


def training_step(layers: list, checkpointed: bool):
    opt = tfl.optim.SGD([p for layer in layers for p in layer.parameters()], lr=1e-3)

    def step(x):
        opt.zero_grad()
        loss = loss_of(layers, x, checkpointed)
        loss.backward()
        opt.step()
        return loss
    step.opt = opt  # (the optimizer lives as long as the step: a staged step reads it)
    return step


def held_at_peak(graph) -> str:
    """What the schedule holds at its peak, in a few words: the weights (state), the batch (the
    argument), activations (and their cotangents: values of the batch's size) and the rest
    (gradients, new weights: values of a weight's size or less)."""
    ranges = live_ranges(graph)
    held = timeline(graph, ranges=ranges)
    step = held.index(max(held))
    kinds = {"weights": 0, "batch": 0, "activations": 0, "gradients, new weights": 0}
    count = 0
    for r in ranges:
        if not r.live_at(step) or not r.size:
            continue
        if r.held in ("state", "argument"):
            kinds["weights" if r.held == "state" else "batch"] += r.size
        elif r.value.shape and r.value.shape[0] == graph.inputs[0].shape[0]:
            kinds["activations"] += r.size
            count += 1
        else:
            kinds["gradients, new weights"] += r.size
    words = [f"{name} {size / 1e6:.1f}" for name, size in kinds.items()]
    return f"at step {step}/{len(held)}: " + ", ".join(words) + f" MB ({count} activations)"


def eager_peak(layers: list, x: tfl.Tensor, checkpointed: bool) -> int:
    """Bytes NumPy held at most during forward and backward, above what it held before."""
    for layer in layers:
        for p in layer.parameters():
            p.grad = None
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    loss_of(layers, x, checkpointed).backward()
    peak = tracemalloc.get_traced_memory()[1]
    tracemalloc.stop()
    return peak - before


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=2048)
    parser.add_argument("--activation", choices=[*ACTIVATIONS, "both"], default="both",
                        help="the MLP's activation (default: each, one table after the other)")
    parser.add_argument("--number", type=int, default=1, help="steps per timing run")
    parser.add_argument("--repeat", type=int, default=2, help="timing runs per round")
    parser.add_argument("--rounds", type=int, default=5, help="interleaved rounds")
    args = parser.parse_args()
    activations = list(ACTIVATIONS) if args.activation == "both" else [args.activation]
    for n, activation in enumerate(activations):
        if n:
            print()
        measure(activation, args)


def measure(activation: str, args: argparse.Namespace) -> None:
    """Build, run and time the two steps with `activation`; print their table."""
    x = tfl.randn(args.batch, WIDTH)
    kinds = ("plain", "checkpointed")
    layers = {kind: mlp(activation) for kind in kinds}  # (the same start; each kind trains its own)
    steps = {kind: training_step(layers[kind], kind == "checkpointed") for kind in kinds}
    compiled = {kind: tfl.compile(steps[kind], x) for kind in kinds}
    staged = {kind: tfl.function(steps[kind]) for kind in kinds}
    eager = {kind: training_step(layers[kind], kind == "checkpointed") for kind in kinds}
    losses = {kind: float(staged[kind](x)) for kind in kinds}
    assert abs(losses["plain"] - losses["checkpointed"]) <= 1e-5 * abs(losses["plain"]), losses

    figures = {kind: (peak_bytes(compiled[kind].graph),
                      peak_bytes(compiled[kind].snapshots[0].graph),
                      eager_peak(layers[kind], x, kind == "checkpointed"),
                      compiled[kind].snapshots[-1].stats["flops"]) for kind in kinds}
    calls = {f"{mode} {kind}": (lambda f=fns[kind]: f(x))
             for mode, fns in (("staged", staged), ("eager", eager)) for kind in kinds}
    rounds = interleaved_rounds(calls, args.number, args.repeat, args.rounds)
    print("\n".join(report(activation, args.batch, figures, rounds)))
    torch_peaks = pytorch_peaks(activation, args.batch)
    if torch_peaks:
        plain, ck = (peak / 1e6 for peak in torch_peaks)
        print(f"{'peak MB, PyTorch (profiler)':<34}{plain:>12.1f}{ck:>14.1f}"
              f"{ratio_text(ck / plain):>8}")
    else:
        print("(PyTorch is not installed: pip install torch==2.13.0 for its figures)")
    print("Held at the staged peak (last stage):")
    for kind in kinds:
        print(f"  {kind:<13}{held_at_peak(compiled[kind].graph)}")


def pytorch_peaks(activation: str, batch: int) -> tuple[int, int] | None:
    """PyTorch's peak bytes for the same step, plain and with ``torch.utils.checkpoint`` on the
    same pairs: the largest total of its profiler's memory timeline on the CPU (forward and
    backward; the optimizer's step adds nothing to the peak). None without torch."""
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
        from torch.utils.checkpoint import checkpoint
    except ImportError:
        return None
    import json
    import tempfile
    import warnings
    torch.manual_seed(0)
    module = getattr(torch.nn, ACTIVATIONS[activation][1])
    layers = [torch.nn.Sequential(torch.nn.Linear(WIDTH, WIDTH), module())
              for _ in range(DEPTH)]
    x = torch.randn(batch, WIDTH)

    def loss_of(checkpointed: bool):  # (a function: no name holds the output in backward)
        h = x
        for i in range(0, DEPTH, 2):
            pair = torch.nn.Sequential(layers[i], layers[i + 1])
            h = checkpoint(pair, h, use_reentrant=False) if checkpointed else pair(h)
        return (h * h).mean()

    peaks = []
    for checkpointed in (False, True):
        with profile(activities=[ProfilerActivity.CPU], profile_memory=True,
                     record_shapes=True, with_stack=True) as prof:
            loss_of(checkpointed).backward()
        with tempfile.TemporaryDirectory() as folder, warnings.catch_warnings():
            warnings.simplefilter("ignore")  # (the timeline is marked experimental)
            prof.export_memory_timeline(f"{folder}/timeline.json", device="cpu")
            with open(f"{folder}/timeline.json") as file:
                _, sizes = json.load(file)
        peaks.append(max(sum(categories) for categories in sizes))
        for layer in layers:
            layer.zero_grad(set_to_none=True)
    return peaks[0], peaks[1]


def report(activation: str, batch: int, figures: dict, rounds: dict) -> list[str]:
    plain, ck = figures["plain"], figures["checkpointed"]
    name = ACTIVATIONS[activation][1]
    lines = [f"Training step, {DEPTH} x Linear({WIDTH}, {WIDTH}) + {name}, batch {batch}, SGD;"
             " checkpointed: a region per pair of layers", "",
             f"{'':<34}{'plain':>12}{'checkpointed':>14}{'ratio':>8}"]
    rows = [("peak MB, staged (plan, last stage)", plain[0] / 1e6, ck[0] / 1e6),
            ("peak MB, staged (the trace)", plain[1] / 1e6, ck[1] / 1e6),
            ("peak MB, eager (tracemalloc)", plain[2] / 1e6, ck[2] / 1e6),
            ("GFLOP per step (staged stats)", plain[3] / 1e9, ck[3] / 1e9)]
    lines += [f"{name:<34}{a:>12.1f}{b:>14.1f}{ratio_text(b / a):>8}" for name, a, b in rows]
    for mode in ("staged", "eager"):
        a, b = best(rounds[f"{mode} plain"]), best(rounds[f"{mode} checkpointed"])
        paired = paired_ratio(rounds, f"{mode} checkpointed", f"{mode} plain")
        lines.append(f"{'time per step, ' + mode:<34}{microseconds(a):>12}{microseconds(b):>14}"
                     f"{ratio_text(paired):>8}")
    lines += ["", "Goals: peak <= 0.60x, time <= 1.40x (time: the median of "
              f"{len(rounds['staged plain'])} paired rounds)."]
    return lines


if __name__ == "__main__":
    main()
