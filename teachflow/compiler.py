"""The compiler: a pipeline of passes, with a snapshot of the graph after every one.

`run_pipeline` runs the passes on a traced graph in order (by default inline, simplify,
constant_fold, cse, dce, bucket_all_reduce, place, partition, fuse, plan_memory); every
`tfl.function` trace goes through it, and ``tfl.compile(f, *examples)`` (in
`teachflow.staged.function`) is one such trace kept with its examples. Each stage
leaves a `Snapshot`: its graph, the graph as networkx (every node marked with what happened to it),
the changes the pass made, and figures (`teachflow.figures`: nodes, kernels launched, bytes moved,
flops, bytes transferred between devices, the peak of bytes held). The pass stepper replays these
snapshots: ``compilation.show()`` opens it in a notebook (displaying a compilation does too), and
``compilation.to_html(path)`` writes it as one web page.

With verification on (``verify=True``, and always in teachflow's own tests), the compiler runs the
traced graph on random inputs and then every stage's graph, and stops at the first pass that
changes a result, naming the pass and the first node whose value differs. Random inputs may leave
an op's domain where the program itself is fine (an integer to a negative power): then the
example inputs the function was traced with are used instead, and verification never rejects a
valid program.
"""

from __future__ import annotations

import gc
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from teachflow.core.backends import get_backend
from teachflow.core.errors import SignatureMismatch, TeachflowError
from teachflow.execution.executor import interpret
from teachflow.figures import every_node, graph_stats
from teachflow.graph import Graph, Node, Value, format_node
from teachflow.passes import PASSES, Change, resolve
from teachflow.passes.base import recomputation
from teachflow.tensor.tensor import Tensor

#: Verify every compilation when no `verify=` is given (teachflow's tests turn this on).
VERIFY_BY_DEFAULT = False


class PassVerificationError(TeachflowError):
    """A pass changed what the program computes."""


@dataclass
class Snapshot:
    """The graph after one stage of the pipeline ("trace" first, then one per pass)."""

    pass_name: str
    graph: Graph
    changes: list[Change] = field(default_factory=list)
    previous: Graph | None = field(default=None, repr=False)
    #: Figures per node, shared by the stages of one compilation (most nodes are in many).
    figures: dict[tuple, tuple[bool, int, int, int]] = field(default_factory=dict, repr=False)
    #: The stage this one repeats, when its pass changed nothing (`graph` is that stage's).
    same_as: Snapshot | None = field(default=None, repr=False)

    @cached_property
    def stats(self) -> dict[str, int]:
        if self.same_as is not None:
            return dict(self.same_as.stats)
        return graph_stats(self.graph, self.figures)

    @cached_property
    def nx(self) -> Any:
        """The stage as an ``nx.DiGraph``; each node's ``status`` says what this pass did to it
        (added, replaced, merged, fused, placed or kept). Nodes the pass removed are listed in the
        graph attribute ``removed``."""
        g = self.graph.to_networkx()
        status = {}
        for change in self.changes:
            for i in change.result:
                status[i] = change.kind
        for node_id, data in g.nodes(data=True):
            data["status"] = status.get(node_id, "kept")
        present = set(g.nodes)
        g.graph["removed"] = sorted({i for c in self.changes for i in c.nodes} - present)
        g.graph["pass_name"] = self.pass_name
        return g

    def __repr__(self) -> str:
        return (f"<Snapshot {self.pass_name}: {len(self.graph)} nodes, "
                f"{len(self.changes)} change(s)>")


class Compilation:
    """A traced function compiled by a pipeline of passes; callable like the function.

    ``example_inputs`` are the tensors it was traced with (flat, in the graph's input order),
    kept by `compile` so the stepper can show every node's value on them.
    """

    def __init__(self, snapshots: list[Snapshot], concrete: Any = None,
                 example_inputs: list[Tensor] | None = None) -> None:
        self.snapshots = snapshots
        self.concrete = concrete
        self.example_inputs = example_inputs

    @property
    def graph(self) -> Graph:
        """The final graph."""
        return self.snapshots[-1].graph

    @property
    def source(self) -> str:
        """The generated Python that runs the final graph."""
        return self.concrete.source

    @property
    def kernels(self) -> dict[str, dict[str, str]]:
        """The generated source of every fused kernel, by kernel name (those inside a branch or
        a loop body too): NumPy, C for the CPU and CUDA C, and which one runs on the CPU
        (``"ran"``: a sentence saying why)."""
        return {n.op.name: {"numpy": n.op.numpy_source, "c": n.op.c_source,
                            "cuda": n.op.cuda_source, "ran": n.op.ran}
                for n in every_node(self.graph) if hasattr(n.op, "numpy_source")}

    @property
    def memory_plan(self) -> list[dict[str, Any]]:
        """The final graph's planned buffers (the pass `plan_memory`), one dict each: ``value``
        (its name in the text form, ``"%7"``), ``size`` (bytes), ``first_use`` and
        ``last_use`` (steps of the schedule) and ``slot``; [] without a plan."""
        plan = self.graph.memory_plan
        if plan is None:
            return []
        names = {v.id: str(v) for v in self.graph.values()}
        return [{"value": names[b.value], "size": b.size, "first_use": b.first_use,
                 "last_use": b.last_use, "slot": b.slot} for b in plan.buffers]

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        try:
            return self.concrete(*args, **kwargs)
        except SignatureMismatch as err:  # (what to do differs from a tfl.function's advice)
            raise SignatureMismatch(
                err.message, op=err.op, location=err.location,
                hint="a Compilation runs the signature it was compiled for: compile again for "
                     "these arguments (tfl.compile(f, *new_args)), or stage f with "
                     "tfl.function, which traces once per signature") from None

    # --- Seeing it (the widget libraries load only here, not with teachflow) -----------------

    def show(self) -> Any:
        """The pass stepper for this compilation: a notebook widget to step through the passes."""
        from teachflow.viz.stepper import PassStepper

        return PassStepper.for_compilation(self, self.example_inputs)

    def to_html(self, path: str | Path) -> Path:
        """Write the pass stepper to `path` as one self-contained web page; return the path."""
        from teachflow.viz.html import to_html

        return to_html(self, path, self.example_inputs)

    def _repr_mimebundle_(self, **kwargs: Any) -> tuple[dict, dict]:
        """In a notebook, a compilation displays as its stepper; where widgets cannot run
        (GitHub, nbconvert), as a picture of the final graph; in a terminal, as text."""
        from teachflow.viz.expand import expand_stage
        from teachflow.viz.svg import graph_svg

        widget = self.show()
        bundle = widget._repr_mimebundle_(**kwargs)  # anywidget gives (data, metadata)
        data, metadata = bundle if isinstance(bundle, tuple) else (bundle, {})
        data["image/svg+xml"] = graph_svg(expand_stage(widget.data, -1))
        data["text/plain"] = repr(self)
        return data, metadata

    def __repr__(self) -> str:
        stages = " -> ".join(f"{s.pass_name}({len(s.graph)})" for s in self.snapshots)
        return f"<Compilation {self.graph.name}: {stages}>"


def run_pipeline(graph: Graph, passes: Any, verify: bool | None = None,
                 examples: list[Tensor] | None = None) -> list[Snapshot]:
    """Run `passes` on `graph`; return the snapshots, "trace" first. `examples` are inputs the
    graph is known to run on (those it was traced with), for verification."""
    # Passes allocate many objects that live for the whole compilation; the cyclic garbage
    # collector would keep rescanning them as the graphs grow, making compile time superlinear.
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        return _run_pipeline(graph, passes, verify, examples)
    finally:
        if was_enabled:
            gc.enable()


def _run_pipeline(graph: Graph, passes: Any, verify: bool | None,
                  examples: list[Tensor] | None) -> list[Snapshot]:
    figures: dict[tuple, tuple[bool, int, int, int]] = {}
    snapshots = [Snapshot("trace", graph, recomputation(graph), figures=figures)]
    on = VERIFY_BY_DEFAULT if verify is None else verify
    checker = _Verifier(graph, examples) if on else None
    for p in resolve(passes):
        last = snapshots[-1]
        before = last.graph
        after, changes = p(before)
        same = not changes and any(p is q for q in PASSES.values()) and _unchanged(before, after)
        if same:
            after = before  # one graph in memory, not a copy per stage (the stepper sees it)
        snapshots.append(Snapshot(p.__name__, after, list(changes), previous=before,
                                  figures=figures, same_as=last if same else None))
        if checker is not None:  # well formed, and computing what the traced graph computed
            after.verify()
            checker.check(p.__name__, after)
    return snapshots


def _unchanged(before: Graph, after: Graph) -> bool:
    """Whether `after`, what a built-in pass that reported no change returned, is `before`
    again: the same values in the same order (a node a built-in pass keeps keeps its id and
    what it is; what it makes has a new id), returning the same and writing back the same. (A
    pass may leave out what is not a node without a `Change`: dce drops the constants nothing
    reads. A learner's pass may change a node in place: its stage is always its own.)"""
    return (len(before.nodes) == len(after.nodes)
            and [v.id for v in before.values()] == [v.id for v in after.values()]
            and [v.id for v in before.outputs] == [v.id for v in after.outputs]
            and [(u.slot, u.output) for u in before.updates]
            == [(u.slot, u.output) for u in after.updates])


# --- Verification -------------------------------------------------------------------------------


class _Verifier:
    """Runs the traced graph once on random inputs, then each stage, and compares."""

    def __init__(self, graph: Graph, examples: list[Tensor] | None) -> None:
        nodes = list(every_node(graph))
        # Random ops draw differently per run; collectives need the other ranks to run too.
        self.skip = any(n.op.impure for n in nodes)
        if self.skip:
            return
        rng = np.random.default_rng(0)
        self.reference: dict[int, np.ndarray] = {}
        # A loop that runs until a condition holds may never end on random inputs: only the
        # caller's own inputs are run then (if there are none, nothing is compared).
        unbounded = any(getattr(n.op, "unbounded", False) for n in nodes)
        tries = (examples,) if unbounded else (self._random(graph.inputs, rng), examples)
        for inputs in tries:
            if inputs is None:
                continue
            self.inputs = inputs
            # State the graph reads: its current values, except gradients of arguments (which
            # exist only at a call), drawn at random.
            self.state = {v.data: _random_tensor(v, rng) if isinstance(v.data.owner, int)
                          else v.data.read() for v in graph.captures}
            try:
                self.outputs = self._run(graph, self.reference)
                self.scale = _magnitude(self.reference.values())
                return
            except Exception:  # outside some op's domain (an integer to a negative power)
                self.reference.clear()
        self.skip = True  # no inputs this program runs on: nothing to compare

    @staticmethod
    def _random(values: list[Value], rng: np.random.Generator) -> list[Tensor]:
        return [_random_tensor(v, rng) for v in values]

    def _run(self, graph: Graph, values: dict[int, np.ndarray]) -> list[np.ndarray]:
        def keep(node: Node, result: Tensor | tuple) -> None:
            results = result if isinstance(result, tuple) else (result,)
            for value, tensor in zip(node.outputs, results, strict=True):
                values[value.id] = tensor.numpy()  # (control flow gives one per result)

        with np.errstate(all="ignore"):  # random inputs may leave an op's domain (log(-1))
            return [t.numpy() for t in interpret(graph, self.inputs, on_node=keep,
                                                 state=self.state)]

    def check(self, pass_name: str, graph: Graph) -> None:
        if self.skip:
            return
        values: dict[int, np.ndarray] = {}
        outputs = self._run(graph, values)
        if all(_close(a, b, self.scale) for a, b in zip(outputs, self.outputs, strict=True)):
            return
        culprit = next((n for n in graph.nodes if n.id in self.reference and n.id in values
                        and not _close(values[n.id], self.reference[n.id], self.scale)), None)
        where = (f"the first node whose value differs is {format_node(culprit)}"
                 if culprit is not None else "the outputs differ")
        raise PassVerificationError(f"pass {pass_name} changed the result: {where}",
                                    op="compile", location=culprit.source if culprit else None,
                                    hint="a pass must compute exactly what the graph computed "
                                         "before it; check the rule or pass named above")


def _random_tensor(v: Value, rng: np.random.Generator) -> Tensor:
    backend = get_backend(v.spec.device)
    return Tensor._make(backend.asarray(_random_array(v, rng)), backend, None)


def _random_array(v: Value, rng: np.random.Generator) -> np.ndarray:
    shape = tuple(3 if d is None else d for d in v.shape)
    if v.dtype.kind == "b":
        return rng.random(shape) < 0.5
    if v.dtype.kind in "iu":
        return rng.integers(-5, 6, shape).astype(v.dtype)
    return rng.standard_normal(shape).astype(v.dtype)


def _magnitude(values: Any) -> float:
    """The largest finite magnitude among a run's floating-point values (at least 1)."""
    largest = 1.0
    for v in values:
        if v.dtype.kind in "fc" and v.size:
            finite = np.abs(v[np.isfinite(v)])
            if finite.size:
                largest = max(largest, float(finite.max()))
    return largest


def _close(a: np.ndarray, b: np.ndarray, scale: float = 1.0) -> bool:
    """Equal up to rounding. A pass may reorder a float computation (a fused sum adds block by
    block), which changes the last bits of each partial result: the tolerance is the square
    root of the dtype's epsilon (about 3e-4 for float32, 0.03 for float16), relative to the
    value, and absolute relative to `scale`, the largest magnitude the program computed along
    the way (``(x + 100).mean() - 100`` keeps the rounding error of numbers near 100). A wrong
    rewrite is off by far more."""
    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    if a.dtype.kind in "fc":
        tol = float(np.sqrt(np.finfo(a.dtype).eps))
        return bool(np.allclose(a, b, rtol=tol, atol=tol * scale, equal_nan=True))
    return bool(np.array_equal(a, b))
