"""Bucketing all-reduces: many small exchanges become a few large ones.

A data-parallel training step (``tfl.nn.parallel.DistributedDataParallel`` under
``tfl.function``) all-reduces every gradient: one ``all_reduce`` node per parameter, most of them
small (a bias of 10 numbers). Each all-reduce costs a round trip between the processes however
few bytes it carries, so the pass merges neighbours into *buckets* of at most `bucket_mb`
megabytes, as PyTorch's DDP does at run time::

    %5 = all_reduce %4 {reduction='mean'}          %12 = reshape %4 {shape=(10,)}
    %9 = all_reduce %8 {reduction='mean'}    ->    %13 = reshape %8 {shape=(1280,)}
                                                   %14 = concatenate %12, %13
                                                   %15 = all_reduce %14 {reduction='mean'}
                                                   %5 = reshape (getitem %15 [0:10]) ...

Buckets follow the order the gradients are made in (the backward pass's), and each bucket's
all-reduce stands where its last gradient is made: early buckets can travel while the rest of
the backward pass computes (an executor that runs collectives asynchronously overlaps them;
this one waits for each where it stands). A bucket closes early when something reads one of its
results before it is full (the all-reduce must have happened by then), and holds one reduction
of one dtype on one device. The values are the same with and without the pass: an all-reduce is
elementwise across the processes, so reducing the concatenation reduces each piece.
"""

from __future__ import annotations

import math

from teachflow.graph import Graph, Node, Value
from teachflow.ops.collective import all_reduce
from teachflow.ops.shape import concatenate, getitem
from teachflow.ops.views import reshape
from teachflow.passes.base import DROP, Change, Decide, Rewriter, rewrite

#: The size of a bucket, in megabytes, unless the node says (DDP's ``bucket_mb``).
BUCKET_MB = 25.0


def bucket_all_reduce(graph: Graph, bucket_mb: float | None = None) -> tuple[Graph,
                                                                             list[Change]]:
    """Merge neighbouring all-reduces into one per bucket of at most `bucket_mb` MB (default:
    each node's ``bucket_mb``, else `BUCKET_MB`)."""
    changes: list[Change] = []

    def decide_for(g: Graph) -> Decide:
        last_of = {b[-1]: b for b in buckets(g.nodes, bucket_mb) if len(b) > 1}
        merged = {n for b in last_of.values() for n in b}

        def decide(node: Node, rewriter: Rewriter) -> object:
            if node not in merged:
                return None
            bucket = last_of.get(node)
            if bucket is None:
                return DROP  # (its value is given when its bucket's last member is reached)
            reduced, results = _merge(bucket, rewriter)
            for member, result in zip(bucket[:-1], results, strict=False):
                rewriter.replace(member.output, result)
            mb = sum(_nbytes(n) for n in bucket) / 2**20
            changes.append(Change(
                "bucketed", tuple(n.id for n in bucket), (reduced.producer.id,),
                "all-reduces -> one bucket",
                f"{len(bucket)} all-reduces ({', '.join(str(n.output) for n in bucket)}; "
                f"{mb:.3g} MB) become one, of their gradients flattened and concatenated, "
                f"placed right after the last of them is made so that it can travel while "
                f"the rest of the backward pass computes"))
            return results[-1]

        return decide

    return rewrite(graph, decide_for), changes


def buckets(nodes: list[Node], bucket_mb: float | None = None) -> list[list[Node]]:
    """The all-reduce nodes among `nodes`, in order, grouped into buckets (see the module
    docstring)."""
    done: list[list[Node]] = []
    open_: dict[tuple, list[Node]] = {}
    for node in nodes:
        read = {o for o in node.inputs if isinstance(o, Value)}
        for key, bucket in list(open_.items()):  # a result read before its bucket is full
            if any(m.output in read for m in bucket):
                done.append(open_.pop(key))
        if node.op is not all_reduce:
            continue
        key = (node.params["reduction"], node.spec.dtype, node.spec.device)
        limit = (bucket_mb or node.params.get("bucket_mb") or BUCKET_MB) * 2**20
        bucket = open_.get(key)
        if bucket is not None and sum(map(_nbytes, bucket)) + _nbytes(node) > limit:
            done.append(open_.pop(key))
            bucket = None
        if bucket is None:
            bucket = open_[key] = []
        bucket.append(node)
    place = {node: k for k, node in enumerate(nodes)}
    return sorted([*done, *open_.values()], key=lambda b: place[b[0]])


def _nbytes(node: Node) -> int:
    return math.prod(node.spec.shape) * node.spec.dtype.itemsize


def _merge(bucket: list[Node], rewriter: Rewriter) -> tuple[Value, list[Value]]:
    """Flatten, concatenate, all-reduce once, and cut the result back into its members'."""
    sizes = [math.prod(n.spec.shape) for n in bucket]
    flat = [rewriter.add(reshape, (n.inputs[0],), {"shape": (size,)}, lineage=(n.id,))
            for n, size in zip(bucket, sizes, strict=True)]
    lineage = tuple(n.id for n in bucket)
    joined = rewriter.add(concatenate, tuple(flat), {"axis": 0}, lineage=lineage)
    reduced = rewriter.add(all_reduce, (joined,), dict(bucket[-1].params), lineage=lineage)
    results, start = [], 0
    for node, size in zip(bucket, sizes, strict=True):
        piece = rewriter.add(getitem, (reduced,), {"index": (slice(start, start + size),)},
                             lineage=(node.id,))
        results.append(rewriter.add(reshape, (piece,), {"shape": node.spec.shape},
                                    lineage=(node.id,)))
        start += size
    return reduced, results
