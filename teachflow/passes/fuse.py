"""Fusion: run a connected piece of elementwise work as one kernel.

Unfused, ``tanh(x * y + w)`` is three kernels: each reads its operands from memory and writes a
temporary back, so the data crosses the memory bus five times. Fused, it is one kernel that reads
``x``, ``y`` and ``w`` once and writes the result once; the intermediates live in cache (NumPy,
C) or in registers (CUDA). For large arrays memory traffic is the cost, so this is the
optimization that matters most.

Which nodes fuse is decided by one rule, in `grouping.py`: elementwise nodes of one shape that
are connected form a group, a chain, a tree or any DAG, as long as no cycle between kernels
appears; a reduction of a group's value joins it and ends it; every value needed outside a group
is an output of its kernel (multi-output fusion, as XLA calls it). Each group becomes one node
whose op carries its generated kernels (see `teachflow.kernels`): NumPy source that works block
by block, a C loop compiled by the system's C compiler, and CUDA C for CuPy.

The pass's last part builds them (`build_kernels`): each new kernel, for the device its node
runs on. On the CPU the C kernel is compiled where a compiler is present and the group suits it
and is big enough to pay for a call into C; otherwise the NumPy one is made, and the op says
which (`FusedOp.ran`); on a GPU, the CUDA kernel. So the executor only looks kernels up, as it
looks up every op's. Each change's sentence says what the kernel reads and writes, why the
group stops where it does, and which kernel was built.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Any

import numpy as np

from teachflow.core.backends import get_backend
from teachflow.graph import Graph, Node, Value, format_node, subgraphs
from teachflow.kernels.group import FusedGroup
from teachflow.ops.op import Op
from teachflow.passes.base import DROP, Change, Decide, Rewriter, rewrite
from teachflow.passes.grouping import Group, group_nodes, grouped_order


@dataclass(frozen=True, eq=False)
class FusedOp(Op):
    """The op of a fused node: one generated kernel for a whole group (its sources are
    written once, when first read)."""

    group: FusedGroup | None = field(default=None, repr=False)
    kernels: BuiltKernels | None = field(default=None, repr=False)

    @cached_property
    def numpy_source(self) -> str:
        from teachflow.kernels.numpy_renderer import numpy_source

        return numpy_source(self.group)

    @cached_property
    def c_source(self) -> str:
        from teachflow.kernels.c_renderer import c_source

        return c_source(self.group)

    @cached_property
    def cuda_source(self) -> str:
        from teachflow.kernels.cuda_fused import cuda_source

        return cuda_source(self.group)

    @property
    def ran(self) -> str:
        """Which kernel runs on the CPU, and why: a sentence."""
        return self.kernels.cpu or "decided when it is built for the CPU: C where a C " \
            "compiler is present and the group suits it and is not too small, else NumPy"


class BuiltKernels:
    """A group's kernel for each array module (the op's ``kernel(xp)``), and which one runs on
    the CPU. The fuse pass builds the kernel for the device its node runs on (`build`); one
    asked for before it is built (a learner's own fusion pass made the op; another device) is
    built then."""

    def __init__(self, group: FusedGroup) -> None:
        self.group = group
        self.made: dict[Any, Callable[..., Any]] = {}
        self.cpu: str | None = None

    def __call__(self, xp: Any) -> Callable[..., Any]:
        if xp not in self.made:
            self.build(xp)
        return self.made[xp]

    def build(self, xp: Any) -> str:
        """Build the kernel for the array module `xp` (NumPy: the CPU; CuPy: a GPU); say which
        kernel it is, and why, in words."""
        if xp is not np:
            from teachflow.kernels.cuda_fused import cuda_kernel

            self.made[xp] = cuda_kernel(self.group, xp)
            return "CUDA C, compiled by CuPy on its first launch"
        from teachflow.kernels.c_runtime import cpu_kernel, without_history

        self.made[xp], self.cpu = cpu_kernel(self.group)
        return without_history(self.cpu)


def fused_op(group: FusedGroup) -> FusedOp:
    specs = group.specs
    kernels = BuiltKernels(group)
    return FusedOp(group.name, kernels, lambda *_: specs if len(specs) > 1 else specs[0],
                   primitive=False, arg_names=tuple(f"in{i}" for i in range(len(group.inputs))),
                   group=group, kernels=kernels)


def fuse(graph: Graph) -> tuple[Graph, list[Change]]:
    """Replace each group of nodes (see `grouping.py`) by one node that runs a generated kernel,
    where the group's last node was; the node has one result per value needed outside. Last,
    build the new kernels (`build_kernels`)."""
    changes: list[Change] = []

    def decide_for(g: Graph) -> Decide:
        groups = group_nodes(g)
        if groups:
            g.nodes = grouped_order(g, groups)  # each group's nodes next to each other
        last = {group.nodes[-1]: group for group in groups}
        members = {n for group in groups for n in group.nodes}
        # Kernel names are unique in the graph, also when fuse runs a second time.
        numbered = sum(isinstance(n.op, FusedOp) for n in g.nodes)
        returned = set(g.outputs)

        def decide(node: Node, rewriter: Rewriter) -> Any:
            if node not in members:
                return None
            group = last.get(node)
            if group is not None:  # the group is complete: its kernel takes its place
                changes.append(_fuse(rewriter, group, numbered + len(changes), returned))
            return DROP  # read only inside the group, or an output the kernel now makes

        return decide

    fused = rewrite(graph, decide_for)
    return fused, build_kernels(fused, changes)


def build_kernels(graph: Graph, changes: list[Change]) -> list[Change]:
    """The pass's last part: build the kernel of each fused node that `changes` made, for the
    device the node runs on (C or NumPy on the CPU, CUDA C on a GPU); each change, saying which
    kernel was built."""
    made = {n.id: n for n in _every_node(graph)}
    built = []
    for change in changes:
        node = made[change.result[0]]
        device = node.outputs[0].spec.device
        which = node.op.kernels.build(get_backend(device).xp)
        built.append(replace(change, sentence=f"{change.sentence} Built for {device} as {which}."))
    return built


def _every_node(graph: Graph) -> Iterator[Node]:
    """The nodes of `graph` and of the graphs its nodes own."""
    for node in graph.nodes:
        yield node
        for sub in subgraphs(node).values():
            yield from _every_node(sub)


def _fuse(rewriter: Rewriter, group: Group, index: int, returned: set[Value]) -> Change:
    """Add the fused node of `group`, put its results in place of the group's outputs, and say
    what happened."""
    members = group.nodes
    inside = {v for n in members for v in n.outputs}
    inputs = list(dict.fromkeys(o for n in members for o in n.inputs
                                if isinstance(o, Value) and o not in inside))
    reduction = group.reduction
    elementwise = members[:-1] if reduction is not None else members
    fused_group = FusedGroup(f"fused_k{index + 1}", tuple(elementwise), reduction,
                             tuple(inputs), tuple(group.outputs),
                             tuple(v in returned for v in group.outputs))
    specs = fused_group.specs
    lineage = tuple(sorted({i for n in members for i in n.lineage}))
    first = rewriter.add(fused_op(fused_group), tuple(inputs), {},
                         specs if len(specs) > 1 else specs[0], lineage)
    node = first.producer
    for old, new in zip(group.outputs, node.outputs, strict=True):
        rewriter.replace(old, new)
    return Change("fused", tuple(n.id for n in members), (node.id,), _rule(group),
                  _sentence(group, fused_group, node))


def _rule(group: Group) -> str:
    outputs = len(group.outputs)
    if len(group.nodes) == 1:
        return "a broadcast into a bigger result -> a kernel of its own"
    return ("elementwise ops -> one kernel" if outputs == 1
            else f"elementwise ops -> one kernel with {outputs} results")


def _sentence(group: Group, fused: FusedGroup, node: Node) -> str:
    """What the kernel does instead of its nodes, and where and why the group stops."""
    members = group.nodes
    if len(members) == 1:  # (rule 6 of grouping.py: it broadcasts into a bigger result)
        return (f"%{members[0].id} {members[0].op.name} runs as a kernel of its own, "
                f"{fused.name} ({format_node(node)}): it writes more elements than it reads (its "
                "operands broadcast), which the kernel does at the speed of memory, and NumPy's "
                "broadcasting loop a row at a time.")
    names = [f"%{n.id} {n.op.name}" for n in members]
    if len(names) > 8:
        names = [*names[:4], f"... ({len(names) - 6:,} more)", *names[-2:]]
    reads = Counter(o for m in members for o in m.inputs if isinstance(o, Value))
    reused = sum(1 for n in members if reads[n.output] > 1)
    outputs = len(fused.outputs)
    sentence = (f"{len(members):,} ops ({', '.join(names)}) run as one kernel {fused.name} "
                f"({format_node(node)}): it reads its {len(fused.inputs)} input(s) once and "
                f"writes {'one result' if outputs == 1 else f'{outputs} results'}, "
                "with no temporaries in memory")
    if reused:
        sentence += (f"; {reused:,} value(s) read more than once inside it are computed once")
    if fused.reduction is not None:
        sentence += (f"; it ends in %{fused.reduction.id} {fused.reduction.op.name}, reduced as "
                     "the values are computed")
    stops = _stops(group.stops)
    return f"{sentence}. It stops {stops}." if stops else f"{sentence}."


_WHY = {
    "returned": "the graph returns {values}",
    "reduction": "{readers}: another reduction (a kernel ends with its one)",
    "after reduction": "{readers}: it reads the reduction, done only when the kernel is",
    "shape": "{readers}: another shape",
    "not elementwise": "{readers}: not elementwise",
    "cycle": "{readers}: joining would make a cycle (it also reads a value computed outside "
             "from this group's)",
    "read before": "{readers}: a node outside read the group's values before it, so the kernel "
                   "runs ahead of it: joined, its result would be one of the kernel's results, "
                   "held in memory from there, and free none of the group's values",
}


def _stops(stops: list[tuple[str, Node | None, Value]]) -> str:
    """``where the graph returns %9; at %12 matmul: not elementwise``: the stops, by reason."""
    parts = []
    for why, words in _WHY.items():
        found = [(reader, value) for w, reader, value in stops if w == why]
        if not found:
            continue
        readers = list(dict.fromkeys(f"%{r.id} {r.op.name}" for r, _ in found if r is not None))
        values = list(dict.fromkeys(f"%{v.id}" for _, v in found))
        phrase = words.format(readers=_few(readers), values=_few(values))
        parts.append(phrase if why == "returned" else f"at {phrase}")
    return "; ".join(parts).replace("the graph returns", "where the graph returns", 1)


def _few(items: list[str]) -> str:
    return ", ".join(items) if len(items) <= 3 else f"{', '.join(items[:3])} and " \
        f"{len(items) - 3:,} more"
