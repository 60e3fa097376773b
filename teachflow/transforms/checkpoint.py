"""Rematerialisation: ``tfl.checkpoint(fn)``, as ``torch.utils.checkpoint``: compute again in
backward what the forward pass would have kept. Lesson 8 (memory) measures the trade.

Backward reads the forward pass's intermediates (``tanh``'s rule reads its output, ``x @ w``'s
reads ``x``), so the tape keeps them, all of them at once by the end of the forward pass: that is
what fills memory when training a deep model. ``tfl.checkpoint(fn)(*args)`` runs `fn` *without*
recording it, and puts one node on the tape for the whole region, which keeps only its inputs:
the tensors among `args`, and the tracked tensors `fn` reads from outside (a module's weights),
found by watching the ops `fn` applies. When backward reaches that node, `fn` runs again on the
kept inputs, this time on a tape of its own, and the cotangents go back through that tape (as a
``cond``'s gradient runs its branch again: `teachflow.execution.control.vjp`). Memory for
compute: a region's activations live only while its own backward runs, at the price of a second
forward pass of the region.

- The same random numbers: every generator's state is kept with the region and set again for
  the second run (PyTorch's ``preserve_rng_state``), so a dropout inside keeps its mask. While
  tracing, a random op is a node that draws when the graph runs: the second run reads the first
  one's draw instead of drawing anew.
- Staged (inside `tfl.function`, whose backward pass is traced into the graph), the second run
  is nodes of the backward graph, made again: each is marked `SourceLocation.recomputed`, so
  that no pass merges it with the forward node it repeats (which CSE, seeing the same op on the
  same operands, would otherwise do, and keep the activation alive again: see
  `teachflow.passes.cse`). The pass stepper draws them in a colour of their own.
- ``tfl.checkpoint(fn)`` is `fn` checkpointed (a decorator); ``tfl.checkpoint(fn, *args)``
  calls it at once, as PyTorch's ``checkpoint(fn, *args)`` does.
"""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Any

from teachflow.autodiff import tape
from teachflow.autodiff.backprop import backpropagate, filled_like
from teachflow.core import dispatch, random
from teachflow.core.dispatch import bind
from teachflow.core.errors import (
    AutodiffError,
    SourceLocation,
    expect_callable,
    on_behalf_of,
    user_location,
)
from teachflow.core.tree import TreeDef, tree_flatten, tree_unflatten
from teachflow.graph import Value
from teachflow.ops import elementwise
from teachflow.ops.op import Op
from teachflow.tensor.eager import EagerInterpreter
from teachflow.tensor.tensor import Tensor


def checkpoint(fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """``checkpoint(fn)(*args)`` (or ``checkpoint(fn, *args)``): ``fn(*args)``, whose
    activations are computed again in backward instead of kept. Values and gradients are the
    plain ones; `fn` may return a tensor or a tuple, list or dict of them, take any arguments
    (tensors or not, tracked or not), and read tracked tensors from outside (a module's
    weights). Without arguments, the checkpointed function is returned (a decorator)."""
    expect_callable(fn, "checkpoint", "tfl.checkpoint(fn)(x), or tfl.checkpoint(fn, x)")
    if args or kwargs:
        return _checkpointed(fn, args, kwargs)

    def checkpointed(*args: Any, **kwargs: Any) -> Any:
        return _checkpointed(fn, args, kwargs)

    # (a module is callable too, but its attributes are not a function's to copy)
    return functools.wraps(fn)(checkpointed) if isinstance(fn, types.FunctionType) \
        else checkpointed


def _checkpointed(fn: Callable, args: tuple, kwargs: dict) -> Any:
    if not tape.is_grad_enabled():
        return fn(*args, **kwargs)  # (nothing is recorded: nothing to keep, nor to recompute)
    interpreter = dispatch.current_interpreter()
    leaves, treedef = tree_flatten((args, kwargs))
    leaves = [interpreter.operand(x) if isinstance(x, Tensor) else x for x in leaves]
    args, kwargs = tree_unflatten(treedef, leaves)
    staging = not isinstance(interpreter, EagerInterpreter)
    rng = random.rng_state()
    watch = _Watch(interpreter, draws=[] if staging else None)
    # Eagerly, nothing of the region is recorded, so each activation is freed when the region
    # is done with it. While tracing, recording costs nothing (the values are symbolic), and a
    # node traced with recording off would run off the tape if the graph is later run on one.
    with dispatch.interpreting(watch), tape.enable_grad() if staging else tape.no_grad():
        out = fn(*args, **kwargs)
    outs, out_def = tree_flatten(out)
    results = [k for k, o in enumerate(outs) if isinstance(o, Tensor) and o.dtype.kind in "fc"]
    if not any(isinstance(o, Tensor) for o in outs):
        raise AutodiffError(
            f"the checkpointed function returned {type(out).__name__}, with no tensor in it: "
            "there is nothing for a gradient to flow back through", op="checkpoint",
            hint="return the tensor(s) the function computes: tfl.checkpoint(fn)(x) with fn "
                 "ending in `return y`")
    inputs = _inputs(leaves, watch.outside)
    if not any(x._node is not None for x in inputs) or not results:
        return tree_unflatten(out_def, [_untracked(o) for o in outs])
    region = _Region(fn, treedef, [None if isinstance(x, Tensor) else x for x in leaves],
                     [x._backend for x in inputs], rng, watch.draws)
    nodes = _record(region, inputs, [outs[k] for k in results])
    for k, node in zip(results, nodes, strict=True):
        outs[k] = Tensor._make(outs[k]._data, outs[k]._backend, node)
    return tree_unflatten(out_def, [outs[k] if k in results else _untracked(o)
                                    for k, o in enumerate(outs)])


def _untracked(x: Any) -> Any:
    return Tensor._make(x._data, x._backend, None) if isinstance(x, Tensor) else x


def _inputs(leaves: list, outside: dict) -> list[Tensor]:
    """The region's inputs: its tensor arguments, then the tracked tensors it read from
    outside that are not among them."""
    given = [x for x in leaves if isinstance(x, Tensor)]
    nodes = {x._node for x in given}
    return given + [x for node, x in outside.items() if node not in nodes]


@dataclass
class _Region:
    """What a checkpoint node keeps to run its region again: the function, how to rebuild its
    arguments (the tensors among them come from the node's inputs), the generators' state, the
    random draws of a traced region."""

    fn: Callable
    treedef: TreeDef | None
    others: list  # the arguments that are not tensors, by position (None for a tensor)
    backends: list
    rng: dict
    draws: list | None


def _record(region: _Region, inputs: list[Tensor], results: list[Tensor]) -> list:
    """The tape's node for the region (inputs kept, its op's `vjp` runs the region again), and
    one `tape.RESULT` node per result, as for an op with several results."""
    kept = tuple(x._data for x in inputs)
    # The results are not kept (only what a zero cotangent needs: their specs; a symbolic
    # value, which costs nothing, where a size is known only when the graph runs).
    outs = tuple(r._data if isinstance(r._data, Value) else r.spec for r in results)
    node = tape.TapeNode(CHECKPOINT, {"region": region}, tuple(x._node for x in inputs), kept,
                         outs, results[0]._backend, tuple(r.shape for r in results), None,
                         (True,) * len(inputs))
    node.source = user_location()  # (the line that called the region: its gradient names it)
    return [tape.TapeNode(tape.RESULT, {"index": k}, (node,), (None,), None, r._backend,
                          r.shape, r.dtype) for k, r in enumerate(results)]


def _recompute(cotangents: list, inputs: tuple, params: dict, needs: tuple) -> list:
    """The region's vjp: run it again on its inputs (fresh leaves where a gradient is needed),
    under the random state it first ran with, and backpropagate the cotangents through it."""
    region: _Region = params["region"]
    create_graph = tape.is_grad_enabled()  # (a gradient of this gradient is wanted)
    fresh, swap, leaves = [], {}, {}
    for j, (x, need) in enumerate(zip(inputs, needs, strict=True)):
        parent = x._node
        t = Tensor._make(x._data, region.backends[j], None)
        if need and create_graph:  # (still joined to the tape: the gradient is differentiable)
            with tape.enable_grad():
                t = bind(elementwise.identity, Tensor._make(t._data, t._backend, parent))
            leaves[j] = t._node
        elif need:
            t._node = leaves[j] = tape.Leaf(t)
        if parent is not None:
            swap[parent] = t
        fresh.append(t)
    given = iter(fresh)
    args, kwargs = tree_unflatten(region.treedef, [next(given) if x is None else x
                                                   for x in region.others])
    watch = _Watch(dispatch.current_interpreter(), swap=swap, draws=region.draws, again=True)
    now = random.rng_state()
    random.set_rng_state(region.rng)
    try:
        with on_behalf_of(None), dispatch.interpreting(watch), tape.enable_grad():
            out = region.fn(*args, **kwargs)  # (its own lines: each node names its line)
    finally:
        random.set_rng_state(now)
    outs = [o for o in tree_flatten(out)[0] if isinstance(o, Tensor) and o.dtype.kind in "fc"]
    roots, seeds = [], []
    for o, ct in zip(outs, cotangents, strict=True):
        if o._node is not None:
            roots.append(o._node)
            seeds.append(ct)
    found = dict(backpropagate(roots, seeds, set(leaves.values()), create_graph)) \
        if roots else {}
    return [None if not need else found[leaves[j]] if leaves[j] in found
            else filled_like(fresh[j], 0) for j, need in enumerate(needs)]


#: The tape's op for a checkpointed region (never a node of a graph: tracing records the
#: region's own ops).
CHECKPOINT = Op("checkpoint", lambda xp: None, lambda *specs: None, primitive=False,
                vjp=_recompute)


class _Watch:
    """The interpreter inside a region: the one around it, watching the ops the region applies.

    The first run notes the tracked tensors from outside that the region reads (each by its
    node on the tape) and, while tracing, the random draws. The second run (`again`) reads the
    fresh inputs in their place (`swap`), replays the draws, and marks the nodes it traces as
    recomputed. Everything else is the interpreter around it, which it says it is (`__class__`),
    so that a check of the mode (`teachflow.tracing.builder.is_tracing`) answers as outside."""

    def __init__(self, inner: Any, swap: dict | None = None, draws: list | None = None,
                 again: bool = False) -> None:
        self.inner, self.swap, self.draws, self.again = inner, swap or {}, draws, again
        self.outside: dict = {}  # tape node -> the tensor from outside that has it
        self.made: set = set()  # the tape nodes of the region's own results
        self.drawn = 0

    @property
    def __class__(self) -> type:  # type: ignore[override]
        return type(self.inner)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def apply(self, op: Any, args: tuple, params: dict) -> Any:
        args = tuple(self._operand(x) for x in args)
        if op.random and self.draws is not None and self.again:
            drawn = self.draws[self.drawn]
            self.drawn += 1
            return Tensor._make(drawn._data, drawn._backend, None)
        result = self.inner.apply(op, args, params)
        for r in result if isinstance(result, tuple) else (result,):
            self._made(r)
        if op.random and self.draws is not None:
            self.draws.append(result)
        return result

    def call(self, function: Any, args: tuple, kwargs: dict) -> Any:
        raise AutodiffError(
            f"a staged function ({getattr(function, '__name__', function)}) is called inside "
            "tfl.checkpoint: its graph reads tensors the checkpoint cannot see, so their "
            "gradients would be lost", op="checkpoint",
            hint="checkpoint plain Python code (the function's own code, undecorated), or "
                 "use tfl.checkpoint inside the staged function")

    def _operand(self, x: Any) -> Any:
        if not isinstance(x, Tensor) or x._node is None or x._node in self.made:
            return x
        if self.again:
            return self.swap.get(x._node, x)
        x = self.inner.operand(x)
        self.outside.setdefault(x._node, x)
        return x

    def _made(self, r: Any) -> None:
        if not isinstance(r, Tensor):
            return
        if r._node is not None:
            self.made.add(r._node)
        producer = r._data.producer if isinstance(r._data, Value) else None
        if self.again and producer is not None and not _recomputed(producer.source):
            producer.source = replace(producer.source, recomputed=True) \
                if producer.source is not None else SourceLocation("", 0, recomputed=True)


def _recomputed(location: SourceLocation | None) -> bool:
    return location is not None and location.recomputed

