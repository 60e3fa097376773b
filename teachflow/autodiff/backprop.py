"""Reverse-mode automatic differentiation, second half: the backward pass over the tape.

`backward` walks the tape (`teachflow.autodiff.tape`) once, in the reverse of the order it was
recorded in (a reverse topological order). Each node
receives the sum of the cotangents its consumers sent it, and applies the gradient rule of each
parent that needs a gradient (no other: ``x @ w`` with data `x` never computes ``G wᵀ``). A node
used twice therefore gets both contributions before it runs, and no recursion is needed however
deep the graph. Two details are handled here, once, for every op:

- a cotangent for an input that was broadcast is summed back to that input's shape;
- a cotangent is cast back to its input's dtype (a float32 weight stays float32).

Gradient rules are teachflow ops, so a backward pass can itself be recorded (``create_graph``):
that is how ``tfl.grad(tfl.grad(f))`` works, and how a staged function gets a backward graph.

A control-flow node (a ``cond``, a loop: `teachflow.execution.control`) receives one cotangent per
result (zeros for a result nothing used), and its op's `vjp` builds the backward computation: a
``cond`` of the branches' gradients, a loop run backwards.
"""

from __future__ import annotations

import math
import weakref
from collections.abc import Callable
from dataclasses import replace
from operator import attrgetter
from typing import Any

from teachflow.autodiff.tape import RESULT, Leaf, TapeNode, Tracked, _GradMode
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError, on_behalf_of
from teachflow.ops import creation, elementwise, reduction
from teachflow.ops import shape as shape_ops


def topological_order(*roots: TapeNode | Leaf) -> list:
    """Every node reachable from `roots`, in the order they were recorded (`TapeNode.number`):
    each after all of its parents, since a node is made after them.

    Backward walks it in reverse, as PyTorch's engine does: the mirror image of the forward
    pass, so each cotangent is used by its rules as soon as it is complete, and what an op kept
    for them (an activation) is read for the last time early. (The order of a depth-first
    search is topological too, but may put an op applied early, as a weight's ``w.T`` in
    ``x @ w.T``, first: its gradient then comes last, and holds what it reads, the layer's
    cotangent and input, until the whole backward pass is done.)"""
    reached: set = set()
    stack = list(roots)
    while stack:
        node = stack.pop()
        if node not in reached:
            reached.add(node)
            stack += [p for p in node.parents if p is not None and p not in reached]
    return sorted(reached, key=_recorded)


_recorded = attrgetter("number")


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
                  create_graph: bool = False, release: bool = False,
                  visit: Callable[[Any, Any], None] | None = None,
                  early_leaves: bool = False) -> list[tuple[Any, Any]]:
    """Send `seed` backwards from `root`; return ``(node, gradient)`` for the nodes where it
    stops: the nodes in `targets` if given, else every leaf reached. With `release`, every node
    passed lets go of what it kept for its rules as soon as they have run, so an activation is
    freed during the walk, layer by layer (`Tensor.backward` does this, as PyTorch does, unless
    asked to retain the tape). `root` and `seed` may be lists: several results, each
    with its cotangent, sent back together. `visit(node, gradient)` watches the walk: it is
    called for each node as the walk reaches it, with its gradient, complete (the picture of
    `teachflow.viz.show_backward`). With `early_leaves`, a leaf is reached as soon as the last
    node that sends it a cotangent has run (as PyTorch's engine counts dependencies), not at
    the end of the walk (a leaf is recorded before everything that uses it): its gradient's
    hooks run while the walk goes on."""
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
    found: list = []
    senders = _senders(order) if early_leaves else {}
    with _GradMode(create_graph):
        for node in reversed(order):
            if node in senders and senders[node] <= 0:
                continue  # (reached already)
            g = grads.pop(node, None)
            if g is not None:
                _reach(node, g, grads, relevant, targets, found, visit, create_graph)
            if release and type(node) is TapeNode:  # (its rules have run, or never will)
                node.release()
            for leaf in node.parents if senders else ():
                if leaf in senders:
                    senders[leaf] -= 1
                    g = grads.pop(leaf, None) if senders[leaf] == 0 else None
                    if g is not None:
                        _reach(leaf, g, grads, relevant, targets, found, visit, create_graph)
    return found


def _senders(order: list) -> dict:
    """How many times each leaf of `order` is a parent: the cotangents it waits for."""
    senders: dict = {}
    for node in order:
        for p in node.parents:
            if type(p) is Leaf:
                senders[p] = senders.get(p, 0) + 1
    return senders


def _reach(node: TapeNode | Leaf, g: Any, grads: dict, relevant: set | None,
           targets: set | None, found: list, visit: Callable[[Any, Any], None] | None,
           create_graph: bool) -> None:
    """The walk reaches `node` with its complete gradient `g`: stop there (a leaf, a target),
    or apply the rules of its parents."""
    if visit is not None:
        visit(node, g)
    if type(node) is Leaf or (targets is not None and node in targets):
        found.append((node, g))
    elif relevant is not None and node not in relevant:
        return
    elif node.source is None:
        _send_back(node, g, grads, relevant, create_graph)
    else:  # the ops of this rule belong to the user's line that applied the op
        with on_behalf_of(replace(node.source, note=f"grad of {node.op.name}",
                                  scope=gradient_scope(node.source.scope))):
            _send_back(node, g, grads, relevant, create_graph)


def gradient_scope(scope: str) -> str:
    """Where the gradient of an op made in `scope` (a module's: `errors.name_scope`) is
    recorded: ``gradients/Sequential/0:Linear``, as TensorBoard's, apart from the forward pass
    (whose nodes it reads, and which never reads it back)."""
    return f"gradients/{scope}" if scope else ""


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
            kwargs[name] = node.operand(j, type(g))
        if reads.out:
            kwargs["out"] = out
        if reads.index:
            kwargs["i"] = i
        if reads.all_inputs:
            kwargs["xs"] = _operands(node, type(g))
        if reads.all_values:
            kwargs["inputs"] = _operands(node, type(g))
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
    cotangents = node.op.vjp(cts, _operands(node, type(like)), node.params, needs)
    for parent, need, ct in zip(node.parents, needs, cotangents, strict=True):
        if ct is None or not need:
            continue
        ct = _fit(ct, parent, False)
        previous = grads.get(parent)
        grads[parent] = ct if previous is None else previous + ct


def _operands(node: TapeNode, tensor_type: type) -> tuple:
    """What the gradient rules get of every input of `node` (see `TapeNode.operand`)."""
    return tuple([node.operand(j, tensor_type) for j in range(len(node.inputs))])


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
    if not GRAD_HOOKS:
        for leaf, g in backpropagate(tensor._node, seed, release=not retain_graph):
            _accumulate(leaf, g)
        return
    # A leaf's gradient is complete when the walk reaches it: accumulated there, and its hooks
    # run while the rest of the walk goes on (data parallelism starts its all-reduce then).
    backpropagate(tensor._node, seed, release=not retain_graph, early_leaves=True,
                  visit=lambda node, g: _accumulate(node, g) if type(node) is Leaf else None)


#: The hooks that run when a tensor's ``.grad`` is final for this backward(), by the tensor's id
#: (see `Tensor.register_post_accumulate_grad_hook`; a tensor's go when it does).
GRAD_HOOKS: dict[int, list[Callable[[Any], None]]] = {}


def register_grad_hook(tensor: Any, hook: Callable[[Any], None]) -> Callable[[], None]:
    """Run ``hook(tensor)`` whenever backward() has accumulated `tensor`'s gradient; returns a
    function that removes it."""
    hooks = GRAD_HOOKS.get(id(tensor))
    if hooks is None:
        hooks = GRAD_HOOKS[id(tensor)] = []
        weakref.finalize(tensor, GRAD_HOOKS.pop, id(tensor), None)
    hooks.append(hook)
    return lambda: hooks.remove(hook)


def _accumulate(leaf: Leaf, g: Any) -> None:
    owner = leaf.tensor()
    if owner is not None:
        owner.grad = g if owner.grad is None else owner.grad + g
        for hook in GRAD_HOOKS.get(id(owner), ()):
            hook(owner)


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
