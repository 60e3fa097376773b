"""Property: whatever passes run, in whatever order, the compiled program computes what eager does.

Hypothesis writes small random programs: a DAG of steps over a pool of values, mixing elementwise
ops (broadcasting operands included), reductions over random axes, matrix products, reshapes and
transposes, Python-literal and NumPy-constant operands, constant subgraphs, steps repeated
verbatim (work for CSE) and identities such as ``x*1`` and ``-(-x)`` (work for simplify). Values
stay in safe domains: ``exp`` only of a ``tanh``, ``log`` and ``sqrt`` only of ``abs(x) + 1``,
divisions only by ``abs(x) + 1``, products only with bounded factors, so nothing overflows.

Each program is compiled with the default pipeline, with every pass, and with a random list of
passes (any subset, any order, repeats allowed), always with verification on; each compilation
must run, on its example inputs and on fresh ones, to what eager execution gives, and each of its
passes, run again on the graph it was given, must give the same graph and leave its input as it
was.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from helpers import axes, examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import teachflow as tfl
from teachflow.passes import PASSES

NAMES = list(PASSES)  # simplify, constant_fold, cse, dce, fuse
EVERY_PASS = ["simplify", "constant_fold", "cse", "dce", "fuse"]
MAX_STEPS = 12

UNARY: dict[str, Callable] = {
    "tanh": lambda a: a.tanh(),
    "sigmoid": lambda a: a.sigmoid(),
    "relu": lambda a: a.relu(),
    "abs": lambda a: a.abs(),
    "neg": lambda a: -a,
    "exp(tanh)": lambda a: a.tanh().exp(),
    "log(abs+1)": lambda a: (a.abs() + 1.0).log(),
    "sqrt(abs+1)": lambda a: (a.abs() + 1).sqrt(),
    "tanh**2": lambda a: a.tanh() ** 2,
}

# Python literals: identities the simplifier knows (and near misses it must leave alone).
LITERAL: dict[str, Callable] = {
    "x*1": lambda a: a * 1,
    "1.0*x": lambda a: 1.0 * a,
    "x+0": lambda a: a + 0,
    "0.0+x": lambda a: 0.0 + a,
    "x-0": lambda a: a - 0,
    "x/1": lambda a: a / 1,
    "x**1": lambda a: a ** 1,
    "-(-x)": lambda a: -(-a),  # noqa: B002
    "x*0": lambda a: a * 0,
    "x-x": lambda a: a - a,
    "x*2.5": lambda a: a * 2.5,
    "3-x": lambda a: 3 - a,
    "x/4": lambda a: a / 4,
    "x.T.T": lambda a: a.T.T,
    "detach": lambda a: a.detach(),
}

BINARY: dict[str, Callable] = {
    "add": lambda a, b: a + b,
    "sub": lambda a, b: a - b,
    "mul(tanh)": lambda a, b: a * b.tanh(),
    "div(abs+1)": lambda a, b: a / (b.abs() + 1.0),
    "maximum": lambda a, b: tfl.maximum(a, b),
    "minimum": lambda a, b: tfl.minimum(a, b),
    "where(a>b)": lambda a, b: tfl.where(a > b, a, b * 0.5),
}


@dataclass
class Step:
    """``pool.append(kind(pool[operands...], arg))``."""

    kind: str
    operands: tuple[int, ...]
    arg: Any = None

    def text(self, index: int) -> str:
        args = ", ".join(f"v{i}" for i in self.operands)
        if isinstance(self.arg, np.ndarray):
            extra = f", const{list(self.arg.shape)}"
        else:
            extra = "" if self.arg is None else f", {self.arg!r}"
        return f"v{index} = {self.kind}({args}{extra})"


def apply(step: Step, pool: list) -> Any:
    a = pool[step.operands[0]] if step.operands else None
    kind, arg = step.kind, step.arg
    if kind in UNARY:
        return UNARY[kind](a)
    if kind in LITERAL:
        return LITERAL[kind](a)
    if kind in BINARY:
        return BINARY[kind](a, pool[step.operands[1]])
    if kind == "f(a)+f(a)":
        return UNARY[arg](a) + UNARY[arg](a)
    if kind == "+const":
        return a + arg
    if kind == "*const":
        return arg * a
    if kind == "+constant subgraph":
        return a + (tfl.ones(*arg, dtype="float64") * 2.0 + 1.0).tanh().exp()
    if kind in ("sum", "mean", "max"):
        axis, keepdims = arg
        return getattr(a, kind)(axis=axis, keepdims=keepdims)
    if kind == "softmax":
        return tfl.softmax(a, axis=arg)
    if kind == "@const":
        return a @ arg
    if kind == "@tanh":
        return a @ pool[step.operands[1]].tanh()
    if kind == "reshape":
        return a.reshape(*arg)
    if kind == "reshape twice":
        return a.reshape(-1).reshape(*arg)
    if kind == "transpose":  # (as one tuple: the order of all axes, the identity too)
        return a.transpose(tuple(arg))
    if kind == "broadcast_to":
        return tfl.broadcast_to(a, arg)
    raise AssertionError(f"unknown step {kind}")


@dataclass
class Program:
    """A random program: its input shapes, its steps over a pool of values, its outputs."""

    input_shapes: tuple[tuple[int, ...], ...]
    steps: list[Step] = field(default_factory=list)
    outputs: tuple[int, ...] = ()
    __name__ = "program"

    def __call__(self, *inputs: Any) -> Any:
        pool = list(inputs)
        for step in self.steps:
            pool.append(apply(step, pool))
        results = tuple(pool[i] for i in self.outputs)
        return results if len(results) > 1 else results[0]

    def __repr__(self) -> str:
        n = len(self.input_shapes)
        lines = [f"def program({', '.join(f'v{i}' for i in range(n))}):  # shapes "
                 f"{list(self.input_shapes)}"]
        lines += [f"    {s.text(n + i)}" for i, s in enumerate(self.steps)]
        lines.append(f"    return {', '.join(f'v{i}' for i in self.outputs)}")
        return "\n".join(lines)




def _broadcasts(a: tuple, b: tuple) -> tuple | None:
    try:
        shape = np.broadcast_shapes(a, b)
    except ValueError:
        return None
    return shape if len(shape) <= 3 else None


def _factorisations(size: int) -> list[tuple[int, ...]]:
    shapes = [(size,), (1, size), (size, 1)]
    shapes += [(d, size // d) for d in range(2, size) if size % d == 0]
    return shapes


@st.composite
def constants(draw: Any, shape: tuple) -> np.ndarray:
    """A NumPy constant that broadcasts against `shape`: a suffix of it, some sides set to 1."""
    keep = draw(st.integers(0, len(shape)))
    suffix = tuple(draw(st.sampled_from([d, 1])) for d in shape[len(shape) - keep:])
    seed = draw(st.integers(0, 2**16))
    return np.random.default_rng(seed).uniform(-1, 1, suffix)


@st.composite
def programs(draw: Any) -> Program:
    main = draw(st.sampled_from([(4,), (3, 4), (2, 3, 4), (1, 4), (3, 1), (2, 2)]))
    second = tuple(draw(st.sampled_from([d, 1])) for d in main[draw(st.integers(0, len(main))):])
    shapes = [main, second]
    if draw(st.booleans()):
        shapes.append((main[-1], draw(st.integers(1, 3))))  # something to multiply by
    program = Program(tuple(shapes))
    pool = [np.zeros(s) for s in shapes]  # stand-ins that track each value's shape

    for _ in range(draw(st.integers(3, MAX_STEPS))):
        i = len(pool) - 1 - draw(st.integers(0, len(pool) - 1))  # recent values, mostly: chains
        a = pool[i].shape
        family = draw(st.sampled_from(["unary", "literal", "binary", "binary", "twice",
                                       "constant", "reduce", "matmul", "shape", "repeat"]))
        step = None
        if family == "unary":
            step = Step(draw(st.sampled_from(sorted(UNARY))), (i,))
        elif family == "literal":
            kind = draw(st.sampled_from(sorted(LITERAL)))
            step = Step(kind, (i,)) if kind != "x.T.T" or len(a) >= 1 else None
        elif family == "binary":
            partners = [j for j, v in enumerate(pool) if _broadcasts(a, v.shape) is not None]
            j = draw(st.sampled_from(partners[::-1]))
            step = Step(draw(st.sampled_from(sorted(BINARY))), (i, j))
        elif family == "twice":
            step = Step("f(a)+f(a)", (i,), draw(st.sampled_from(sorted(UNARY))))
        elif family == "constant":
            kind = draw(st.sampled_from(["+const", "*const", "+constant subgraph"]))
            c = draw(constants(a))
            step = Step(kind, (i,), c.shape if kind == "+constant subgraph" else c)
        elif family == "reduce":
            kind = draw(st.sampled_from(["sum", "mean", "max", "softmax"]))
            if kind == "softmax":
                step = Step(kind, (i,), draw(st.integers(-len(a), len(a) - 1))) if a else None
            else:  # also a reduction of a reduction's result
                step = Step(kind, (i,), (draw(axes(len(a))), draw(st.booleans())))
        elif family == "matmul" and a:
            partners = [j for j, v in enumerate(pool) if v.ndim == 2 and v.shape[0] == a[-1]]
            if partners and draw(st.booleans()):
                step = Step("@tanh", (i, draw(st.sampled_from(partners))))
            else:
                cols = draw(st.integers(1, 3))
                seed = draw(st.integers(0, 2**16))
                weight = np.random.default_rng(seed).uniform(-1, 1, (a[-1], cols)) / a[-1]
                step = Step("@const", (i,), weight)
        elif family == "shape" and a:
            kind = draw(st.sampled_from(["reshape", "reshape twice", "transpose",
                                         "broadcast_to"]))
            size = int(np.prod(a))
            if kind in ("reshape", "reshape twice"):
                target = draw(st.sampled_from([a, *_factorisations(size)]))
                step = Step(kind, (i,), tuple(target))
            elif kind == "transpose":
                step = Step(kind, (i,), tuple(draw(st.permutations(range(len(a))))))
            elif len(a) < 3:
                step = Step(kind, (i,), (2, *a))
        elif family == "repeat" and program.steps:
            step = draw(st.sampled_from(program.steps))  # the same step again: a duplicate
        if step is None:
            continue
        pool.append(np.asarray(apply(step, [tfl.tensor(v) for v in pool])))
        program.steps.append(step)

    # The last value, most values nothing else reads (the rest is dead code), maybe an input.
    used = {i for step in program.steps for i in step.operands}
    sinks = [i for i in range(len(shapes), len(pool) - 1) if i not in used]
    extra = draw(st.lists(st.sampled_from(sinks), unique=True)) if sinks else []
    inputs = draw(st.lists(st.integers(0, len(shapes) - 1), max_size=1))
    program.outputs = (len(pool) - 1, *extra, *inputs)
    return program


PASS_LISTS = st.lists(st.sampled_from(NAMES), max_size=6)


def _inputs(program: Program, seed: int) -> list[tfl.Tensor]:
    rng = np.random.default_rng(seed)
    return [tfl.tensor(rng.uniform(-2, 2, s)) for s in program.input_shapes]


def _results(out: Any) -> list[np.ndarray]:
    return [o.numpy() for o in (out if isinstance(out, tuple) else (out,))]


def _assert_same(got: list[np.ndarray], want: list[np.ndarray]) -> None:
    assert len(got) == len(want)
    for a, b in zip(got, want, strict=True):
        assert a.shape == b.shape and a.dtype == b.dtype == np.float64
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-9)


@settings(max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(programs(), PASS_LISTS, st.integers(0, 2**16))
def test_compiled_programs_equal_eager_for_any_passes_in_any_order(
        program: Program, passes: list[str], seed: int) -> None:
    examples, fresh = _inputs(program, seed), _inputs(program, seed + 1)
    want = _results(program(*examples))
    want_fresh = _results(program(*fresh))
    for chosen in ("default", EVERY_PASS, passes):
        compiled = tfl.compile(program, *examples, passes=chosen, verify=True)
        names = [s.pass_name for s in compiled.snapshots]
        assert names[0] == "trace" and (chosen == "default" or names[1:] == list(chosen))
        _assert_same(_results(compiled(*examples)), want)
        _assert_same(_results(compiled(*fresh)), want_fresh)
        for before, after in zip(compiled.snapshots, compiled.snapshots[1:], strict=False):
            text = str(before.graph)  # each pass is pure and deterministic: run again, the
            again, _ = PASSES[after.pass_name](before.graph)  # same graph comes out
            assert str(again) == str(after.graph) and str(before.graph) == text
