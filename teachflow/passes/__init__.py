"""The compiler's passes. Each is a pure function ``Graph -> (Graph, changes)``, written with
the one rewrite helper (`base`: what a pass is, and the record of what it changed).

Default pipeline, in order: `inline` (each call of a graph function replaced by the callee's
body, so that every later pass sees one graph), `simplify` (algebraic rules, written as data
and applied by the engine in `rules`), `constant_fold`, `cse`, `dce`, `bucket_all_reduce` (a
data-parallel step's small all-reduces merged into buckets), `place` (which device runs
each node, and why), `partition` (one piece per device, joined by ``copy`` nodes), `fuse` (which
nodes it puts in one kernel is the rule in `grouping`), `plan_memory` (an order of the nodes
that frees memory early, and a reused slot of memory for each intermediate). Placement comes
after the passes that remove nodes, so that no transfer is made for a node that goes, and
before fusion, so that a kernel never spans two devices. Memory planning comes last: a plan
holds only for the nodes, and the order, it was made for, and every pass before it may change
them (a fused kernel's members need no memory of their own at all).
"""

from __future__ import annotations

from typing import Any

from teachflow.core.errors import TeachflowError
from teachflow.passes.base import (
    DROP,
    Change,
    LearnersPass,
    Pass,
    Rewriter,
    as_pass,
    diff_changes,
    rewrite,
)
from teachflow.passes.bucket_all_reduce import bucket_all_reduce
from teachflow.passes.constant_fold import constant_fold
from teachflow.passes.cse import cse
from teachflow.passes.dce import dce
from teachflow.passes.fuse import fuse
from teachflow.passes.inline import inline
from teachflow.passes.partition import partition
from teachflow.passes.place import place
from teachflow.passes.plan_memory import plan_memory
from teachflow.passes.simplify import simplify

#: The built-in passes by name.
PASSES: dict[str, Pass] = {
    "inline": inline,
    "simplify": simplify,
    "constant_fold": constant_fold,
    "cse": cse,
    "dce": dce,
    "bucket_all_reduce": bucket_all_reduce,
    "place": place,
    "partition": partition,
    "fuse": fuse,
    "plan_memory": plan_memory,
}

DEFAULT_PIPELINE = ("inline", "simplify", "constant_fold", "cse", "dce", "bucket_all_reduce",
                    "place", "partition", "fuse", "plan_memory")


def resolve(passes: Any) -> list[Pass]:
    """`passes` as given to tfl.compile: "default", None, or a list of names and passes."""
    if passes is None:
        return []
    if isinstance(passes, str):
        passes = DEFAULT_PIPELINE if passes == "default" else [passes]
    elif not isinstance(passes, list | tuple):  # one pass on its own
        passes = [passes]
    resolved = []
    for p in passes:
        if isinstance(p, str):
            if p not in PASSES:
                raise TeachflowError(f"unknown pass {p!r}", op="compile",
                                     hint=f"built-in passes: {', '.join(PASSES)}")
            resolved.append(PASSES[p])
        else:  # a built-in pass given as itself, or a learner's, checked as it runs
            resolved.append(p if any(p is q for q in PASSES.values()) else as_pass(p))
    return resolved


__all__ = ["DEFAULT_PIPELINE", "DROP", "PASSES", "Change", "LearnersPass", "Pass", "Rewriter",
           "as_pass", "diff_changes", "resolve", "rewrite"]
