"""Reverse-mode automatic differentiation on a tape.

While gradients are enabled, every op applied to a tensor that needs a gradient is recorded as a
`TapeNode`: which op, its parameters, the nodes of its inputs (the *parents*), and what the op's
gradient rules need later (see `Op.tape_plan`). The result tensor points to its node; the node
points only backwards, to its parents. That is the tape: a graph of nodes reachable from the result.

`backward` walks that graph once in reverse topological order. Each node receives the sum of the
cotangents its consumers sent it, and applies the gradient rule of each parent that needs a
gradient (no other: ``x @ w`` with data `x` never computes ``G wᵀ``). A node used twice therefore
gets both contributions before it runs, and no recursion is needed however deep the graph. Two
details are handled here, once, for every op:

- a cotangent for an input that was broadcast is summed back to that input's shape;
- a cotangent is cast back to its input's dtype (a float32 weight stays float32).

Memory: nodes never point at their own output tensor and tensors never point forwards, so the tape
holds no reference cycles. An intermediate tensor is freed as soon as nothing needs it: a node
keeps an input's values only when the rule of an input that needs a gradient reads them. An op
whose rule needs its *output* (exp, tanh, ...) keeps the output's array, not the tensor, and
rebuilds a tensor for the rule. Once `backward` has run through a node, the node lets go of all
it kept (unless ``retain_graph=True``).

Gradient rules are teachflow ops, so a backward pass can itself be recorded (``create_graph``):
that is how ``tfl.grad(tfl.grad(f))`` works, and how a staged function gets a backward graph.

A control-flow node of a traced graph (a ``cond``, a loop: `teachflow.control`) has several
results and one gradient rule for all its inputs at once (its op's `vjp`). On the tape it is one
node, which keeps its operands and results (symbolic while tracing: they cost nothing), and each
result gets a small node of its own (`RESULT`) that hands its cotangent to the op's node. The op's
node then receives one cotangent per result (zeros for a result nothing used) and its `vjp`
builds the backward computation: a ``cond`` of the branches' gradients, a loop run backwards.
"""

from __future__ import annotations

import math
import weakref
from contextlib import ContextDecorator
from dataclasses import replace
from functools import lru_cache
from typing import Any

import numpy as np

from teachflow.dispatch import bind
from teachflow.errors import AutodiffError, on_behalf_of
from teachflow.ops import creation, elementwise, reduction
from teachflow.ops import shape as shape_ops
from teachflow.ops.op import Op
from teachflow.spec import TensorSpec

# --- Gradient mode ------------------------------------------------------------------------------

_enabled = True


def is_grad_enabled() -> bool:
    return _enabled


class _GradMode(ContextDecorator):
    """Context manager and decorator that turns recording on or off inside its body."""

    def __init__(self, enabled: bool) -> None:
        self.enabled = enabled
        self._previous: list[bool] = []

    def __enter__(self) -> None:
        global _enabled
        self._previous.append(_enabled)
        _enabled = self.enabled

    def __exit__(self, *exc: object) -> None:
        global _enabled
        _enabled = self._previous.pop()


def no_grad() -> _GradMode:
    """``with tfl.no_grad(): ...``: run ops without recording them for backward.

    Use it for inference and for updating parameters. Also works as a decorator.
    """
    return _GradMode(False)


def enable_grad() -> _GradMode:
    """Turn recording back on inside a `no_grad` block."""
    return _GradMode(True)


# --- The tape -----------------------------------------------------------------------------------


class Tracked:
    """What the tape knows of a tensor: its array (`_data`), its device (`_backend`) and its node
    on the tape (`_node`; None when nothing tracks it).

    `teachflow.tensor.Tensor`, the next chapter, is a `Tracked` with everything a user sees
    added. The tape knows no more of it than this, so it reads before it: a gradient rule gets
    its tensors rebuilt as ``type(t)._make(array, backend, node)``, the class of the tensors
    the tape was given.
    """

    __slots__ = ("_backend", "_data", "_node")


class TapeNode:
    """One recorded op application: what backward needs to send cotangents to the inputs."""

    __slots__ = ("backend", "dtype", "inputs", "op", "out", "params", "parents", "released",
                 "shape", "source")

    def __init__(self, op, params, parents, inputs, out, backend, shape, dtype) -> None:
        self.op = op
        self.params = params
        self.parents = parents  # per input: its TapeNode or Leaf, or None if it needs no gradient
        self.inputs = inputs  # per input: a snapshot, its spec, or None (see _saved)
        self.out = out  # the output array, for ops whose rule uses the output
        self.backend = backend
        self.shape = shape
        self.dtype = dtype
        self.source = None  # the user's line, when known (staging records it)
        self.released = False  # backward() has run through it and let go of what it kept

    def release(self) -> None:
        """Drop what the gradient rules would read: backward has run, the tape is spent. Only
        shapes stay: a node that kept nothing but shapes (reshape, a sum, x + 1) loses nothing
        and can be gone through again, as in PyTorch, which frees only what it saved (a
        tensor, or a number such as the 2 of ``x * 2``)."""
        freed = self.out is not None
        specs = []
        for x in self.inputs:
            if x is not None and not isinstance(x, TensorSpec):
                freed, x = True, None
            specs.append(x)
        self.inputs = tuple(specs)
        self.out = None
        self.released = self.released or freed

    def __repr__(self) -> str:
        return f"<{self.op.name} node>"


class Leaf:
    """The node of a tensor created with ``requires_grad=True``: backward ends here.

    It refers to its tensor weakly, so a leaf tensor that nothing else uses can still be freed.
    """

    __slots__ = ("dtype", "shape", "tensor")
    parents = ()

    def __init__(self, tensor: Any) -> None:
        self.tensor = weakref.ref(tensor)
        self.shape = tensor.shape
        self.dtype = tensor.dtype

    def __repr__(self) -> str:
        return "<leaf>"


def record(op, args: tuple, params: dict, out: Any, backend: Any) -> TapeNode | None:
    """Put an op application on the tape (the caller knows some input is tracked).

    Only what the gradient rules of the inputs that need a gradient will read is kept (see
    `Op.tape_plan`): everything else can be freed as soon as the forward pass is done with it.
    This runs for every recorded op, so it is written with plain loops: in CPython 3.11 a
    comprehension (a frame of its own) or a zip costs more than the work it would do here.
    """
    if not _enabled or op.grads is None or out.dtype.kind not in "fc":
        return None  # (integer and boolean results carry no gradient)
    parents, needs = [], []
    for x in args:
        node = x._node if isinstance(x, Tracked) else None
        parents.append(node)
        needs.append(node is not None)
    plan = op.tape_plan(tuple(needs))
    if plan is None:
        return None
    keep, keep_out = plan
    inputs = _saved(args, keep) if any(keep) else keep
    shape = out.shape
    # (A value whose size is known only when its graph runs is kept too: see `_fit`.)
    return TapeNode(op, params, tuple(parents), inputs,
                    out if keep_out or None in shape else None, backend, shape, out.dtype)


#: The k-th result of an op with several (``params["index"]``): its node on the tape hands the
#: cotangent on to the op's own node (see `record_results`).
RESULT = Op("result", lambda xp: None, lambda *specs: None, primitive=False)


def record_results(op: Op, args: tuple, params: dict, outs: tuple, backend: Any) -> tuple | None:
    """Put an op with several results on the tape (its `vjp` differentiates it): one node for
    the op, keeping all its operands and results, and one `RESULT` node per float result (None
    for the others); None when no operand is tracked."""
    if not _enabled or op.vjp is None:
        return None
    parents = tuple(x._node if isinstance(x, Tracked) else None for x in args)
    if all(p is None for p in parents):
        return None
    node = TapeNode(op, params, parents, _saved(args, ("value",) * len(args)), tuple(outs),
                    backend, tuple(o.shape for o in outs), None)
    return tuple(TapeNode(RESULT, {"index": k}, (node,), (None,), None, backend, o.shape, o.dtype)
                 if o.dtype.kind in "fc" else None for k, o in enumerate(outs))


def _saved(args: tuple, keep: tuple) -> tuple:
    """What the tape keeps of each input for the gradient rules (`keep` says what: "value",
    "spec" or None): a snapshot, never a live reference.

    A tensor is kept as it is now: a later in-place update (`p -= ...`) rebinds the tensor's
    values and must not change what the rule sees. A NumPy array operand is copied, as tracing
    copies it into the graph, so refilling the caller's buffer cannot change the gradient. Where
    the rule reads only the spec, the spec is kept (unless a size is unknown until the graph
    runs: then the symbolic tensor, which costs nothing to keep, gives the size at run time).
    """
    kept = []
    for i, what in enumerate(keep):
        x = args[i]
        if what is None:
            x = None
        elif isinstance(x, Tracked):
            data = x._data
            if what == "spec" and None not in data.shape:
                x = _spec(data.shape, data.dtype, x._backend.name)
            else:
                x = type(x)._make(data, x._backend, x._node)
        elif isinstance(x, np.ndarray):
            x = x.copy()
        kept.append(x)
    return tuple(kept)


#: Specs are immutable, and the same few recur at every training step: each is made once.
_spec = lru_cache(maxsize=1024)(TensorSpec)


# --- The backward pass --------------------------------------------------------------------------


def topological_order(*roots: TapeNode | Leaf) -> list:
    """Every node reachable from `roots`, each after all of its parents (iterative DFS)."""
    order: list = []
    visited: set = set()
    stack: list[tuple[Any, bool]] = [(root, False) for root in reversed(roots)]
    while stack:
        node, parents_done = stack.pop()
        if parents_done:
            order.append(node)
        elif node not in visited:
            visited.add(node)
            stack.append((node, True))
            for parent in node.parents:
                if parent is not None and parent not in visited:
                    stack.append((parent, False))
    return order


def sum_to_shape(x: Any, shape: tuple) -> Any:
    """Sum a broadcast cotangent back to the shape of the operand that was broadcast: over the
    leading axes broadcasting added (dropping them), then over the axes it stretched from 1
    (keeping them). Each is one sum, and no reshape is needed, even where a size is known only
    when the graph runs."""
    lead = x.ndim - len(shape)
    if lead:
        x = bind(reduction.sum, x, axis=tuple(range(lead)), keepdims=False)
    ones = tuple(i for i, d in enumerate(shape) if d == 1 and x.shape[i] != 1)
    if ones:
        x = bind(reduction.sum, x, axis=ones, keepdims=True)
    return x


def filled_like(x: Any, value: float) -> Any:
    """A tensor of x's shape, dtype and device, filled with `value` (where a size is known only
    when the graph runs, the shape comes from x then)."""
    if None in x.shape:
        one = bind(creation.full, shape=(), fill_value=value, dtype=x.dtype, device=x.device)
        return shape_ops.broadcast_as(one, x)
    return bind(creation.full, shape=x.shape, fill_value=value, dtype=x.dtype, device=x.device)


def _fit(ct: Any, parent: TapeNode | Leaf, broadcasts: bool) -> Any:
    """Make a cotangent match the shape and dtype of the value it is the gradient of.

    Where a size of that value is known only when the graph runs, an op that broadcasts may
    have stretched a size 1 there: the sums over such axes are then decided at run time, from
    the value itself (a graph value, so keeping it costs nothing)."""
    like = _runtime_like(parent, type(ct)) if broadcasts and None in parent.shape else None
    if like is not None:
        ct = bind(shape_ops.sum_like, ct, like)
    elif ct._data.shape != parent.shape:
        ct = sum_to_shape(ct, parent.shape)
    if ct._data.dtype != parent.dtype:
        ct = bind(elementwise.astype, ct, dtype=parent.dtype)
    return ct


def _runtime_like(node: TapeNode | Leaf, tensor_type: type) -> Any:
    """A symbolic tensor of the value `node` stands for (its size known when the graph runs)."""
    if type(node) is Leaf:
        return node.tensor()
    if node.out is not None:
        return tensor_type._make(node.out, node.backend, None)
    return None


def backpropagate(root: TapeNode | Leaf | list, seed: Any, targets: set | None = None,
                  create_graph: bool = False, release: bool = False) -> list[tuple[Any, Any]]:
    """Send `seed` backwards from `root`; return ``(node, gradient)`` for the nodes where it
    stops: the nodes in `targets` if given, else every leaf reached. With `release`, every node
    passed lets go of what it kept for its rules (`Tensor.backward` does this, as PyTorch does,
    unless asked to retain the tape). `root` and `seed` may be lists: several results, each
    with its cotangent, sent back together."""
    roots, seeds = (root, seed) if isinstance(root, list) else ([root], [seed])
    order = topological_order(*roots)
    for node in order:
        if type(node) is TapeNode and node.released:
            raise AutodiffError(
                f"the tape was freed: an earlier backward() already went through this "
                f"result's {node.op.name} node and released what it kept for the gradient. "
                "Going through it again would add the same gradients into .grad a second time",
                op="backward",
                hint="compute the result again (run the forward pass) before each backward(), "
                     "or pass retain_graph=True to the first backward() to keep the tape")
    if targets is None:
        relevant = None
    else:  # skip every node from which no target can be reached
        relevant = set()
        for node in order:
            if node in targets or any(p in relevant for p in node.parents if p is not None):
                relevant.add(node)
    grads: dict[Any, Any] = {}
    for node, g in zip(roots, seeds, strict=True):
        grads[node] = g if node not in grads else grads[node] + g
    found = []
    with _GradMode(create_graph):
        for node in reversed(order):
            g = grads.pop(node, None)
            if g is None:
                continue
            if type(node) is Leaf or (targets is not None and node in targets):
                found.append((node, g))
                continue
            if relevant is not None and node not in relevant:
                continue
            if node.source is None:
                _send_back(node, g, grads, relevant, create_graph)
            else:  # the ops of this rule belong to the user's line that applied the op
                with on_behalf_of(replace(node.source, note=f"grad of {node.op.name}")):
                    _send_back(node, g, grads, relevant, create_graph)
    if release:
        for node in order:
            if type(node) is TapeNode:
                node.release()
    return found


def _send_back(node: TapeNode, g: Any, grads: dict, relevant: set | None,
               create_graph: bool) -> None:
    """Apply the gradient rule of each input that needs one; add its cotangent to the input's
    sum."""
    op = node.op
    if op is RESULT or op.vjp is not None:
        _send_back_results(node, g, grads, relevant)
        return
    out = None
    if node.out is not None:
        out = type(g)._make(node.out, node.backend, node if create_graph else None)
    for i, parent in enumerate(node.parents):
        if parent is None or (relevant is not None and parent not in relevant):
            continue
        found = op.rule(i)
        if found is None:  # an input with no gradient (the `like` of sum_like, an index array)
            continue
        rule, reads = found
        kwargs = {}
        for name, j, _ in reads.inputs:
            kwargs[name] = node.inputs[j]
        if reads.out:
            kwargs["out"] = out
        if reads.index:
            kwargs["i"] = i
        if reads.all_inputs:
            kwargs["xs"] = node.inputs
        if reads.all_values:
            kwargs["inputs"] = node.inputs
        for name in reads.params:
            kwargs[name] = node.params[name]
        ct = rule(g, **kwargs)
        if ct is None:
            continue
        ct = _fit(ct, parent, op.broadcasts)
        previous = grads.get(parent)
        grads[parent] = ct if previous is None else previous + ct


def _send_back_results(node: TapeNode, g: Any, grads: dict, relevant: set | None) -> None:
    """The two halves of an op with several results: a `RESULT` node puts its cotangent in its
    place among the op's; the op's node runs its `vjp` on all of them at once."""
    if node.op is RESULT:
        parent = node.parents[0]
        slots = grads.get(parent)
        if slots is None:
            slots = grads[parent] = [None] * len(parent.out)
        k = node.params["index"]
        slots[k] = g if slots[k] is None else slots[k] + g
        return
    like = next(c for c in g if c is not None)
    cts = [c if c is not None else filled_like(type(like)._make(o, node.backend, None), 0)
           for c, o in zip(g, node.out, strict=True)]
    needs = tuple(p is not None and (relevant is None or p in relevant) for p in node.parents)
    cotangents = node.op.vjp(cts, node.inputs, node.params, needs)
    for parent, need, ct in zip(node.parents, needs, cotangents, strict=True):
        if ct is None or not need:
            continue
        ct = _fit(ct, parent, False)
        previous = grads.get(parent)
        grads[parent] = ct if previous is None else previous + ct


def backward(tensor: Tracked, grad: Tracked | None = None, retain_graph: bool = False) -> None:
    """``tensor.backward()``: accumulate d(tensor)/d(leaf) into every leaf's ``.grad``; `grad`
    is the gradient of `tensor` to start from (1 for a scalar when not given).

    The tape is spent afterwards (its nodes release what they kept), so a second backward()
    through it raises instead of silently adding the gradients again; ``retain_graph=True``
    keeps it for another backward()."""
    if tensor._node is None:
        raise AutodiffError(
            "this tensor does not require grad: none of the tensors it was computed from has "
            "requires_grad=True (or it was computed under tfl.no_grad())",
            op="backward", hint="create inputs with requires_grad=True, e.g. "
                                "tfl.tensor(data, requires_grad=True)")
    seed = seed_of(tensor, grad, "backward")
    for leaf, g in backpropagate(tensor._node, seed, release=not retain_graph):
        owner = leaf.tensor()
        if owner is not None:
            owner.grad = g if owner.grad is None else owner.grad + g


def seed_of(output: Tracked, grad: Tracked | None, who: str) -> Tracked:
    """The cotangent backpropagation starts from: `grad`, or 1 for a scalar `output`."""
    if grad is None:
        if None in output.shape or math.prod(output.shape) != 1:
            raise AutodiffError(
                f"the output has shape {output.shape}; backward needs a scalar output, or a "
                "`grad` argument of the output's shape", op=who,
                hint="reduce it first, e.g. loss = out.sum() or out.mean()")
        return filled_like(output, 1)
    if grad.shape != output.shape:
        raise AutodiffError(f"grad has shape {grad.shape} but the output has {output.shape}",
                            op=who)
    return grad
