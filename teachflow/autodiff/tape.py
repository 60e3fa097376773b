"""Reverse-mode automatic differentiation, first half: the tape, and when it records.

While gradients are enabled, every op applied to a tensor that needs a gradient is recorded as a
`TapeNode`: which op, its parameters, the nodes of its inputs (the *parents*), and what the op's
gradient rules need later (see `Op.tape_plan`). The result tensor points to its node; the node
points only backwards, to its parents. That is the tape: a graph of nodes reachable from the result.

The second half, `teachflow.autodiff.backprop`, walks that graph backwards (``loss.backward()``).

Memory: nodes never point at their own output tensor and tensors never point forwards, so the tape
holds no reference cycles. An intermediate tensor is freed as soon as nothing needs it: a node
keeps an input's values only when the rule of an input that needs a gradient reads them. An op
whose rule needs its *output* (exp, tanh, ...) keeps the output's array, not the tensor, and
rebuilds a tensor for the rule. Once `backward` has run through a node, the node lets go of all
it kept (unless ``retain_graph=True``).

A control-flow node of a traced graph (a ``cond``, a loop: `teachflow.execution.control`) has
several results and one gradient rule for all its inputs at once (its op's `vjp`). On the tape it is
one node, which keeps its operands and results (symbolic while tracing: they cost nothing), and each
result gets a small node of its own (`RESULT`) that hands its cotangent to the op's node. The op's
node then receives one cotangent per result (see `teachflow.autodiff.backprop`).
"""

from __future__ import annotations

import weakref
from contextlib import ContextDecorator
from functools import lru_cache
from itertools import count
from typing import Any

import numpy as np

from teachflow.core.backends import get_backend
from teachflow.core.spec import TensorSpec
from teachflow.graph import Value
from teachflow.ops.op import Op

_new = object.__new__

#: Each tape node and leaf is numbered as it is made: a node is made after its parents, so its
#: number is larger than theirs, and backward walks the tape in the reverse of this order.
_numbers = count()

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

    `teachflow.tensor.tensor.Tensor`, the next chapter, is a `Tracked` with everything a user sees
    added. The tape knows no more of it than this, so it reads before it: a gradient rule gets
    its tensors rebuilt as ``type(t)._make(array, backend, node)``, the class of the tensors
    the tape was given.
    """

    __slots__ = ("_backend", "_data", "_node")
    #: The tape keeps only the array of a tensor of this class where a rule reads its values,
    #: and gives the rule a tensor of the class it was given again. A class whose tensors
    #: compute differently (`teachflow.tensor.tensor.WeakTensor`) says False: such a tensor is
    #: kept as itself, so that the rule sees what the op saw.
    _tape_keeps_array = True


class TapeNode:
    """One recorded op application: what backward needs to send cotangents to the inputs."""

    __slots__ = ("backend", "dtype", "inputs", "number", "op", "out", "params", "parents",
                 "released", "shape", "source", "tensors")

    def __init__(self, op, params, parents, inputs, out, backend, shape, dtype,
                 tensors=None) -> None:
        self.op = op
        self.params = params
        self.parents = parents  # per input: its TapeNode or Leaf, or None if it needs no gradient
        self.inputs = inputs  # per input: what its rules read of it, or None (see _kept)
        self.tensors = tensors  # per input: whether it was a tensor whose array `inputs` keeps
        self.out = out  # the output array, for ops whose rule uses the output
        self.backend = backend
        self.shape = shape
        self.dtype = dtype
        self.source = None  # the user's line, when known (staging records it)
        self.released = False  # backward() has run through it and let go of what it kept
        self.number = next(_numbers)  # (made after its parents: see `_numbers`)

    def operand(self, j: int, tensor_type: type) -> Any:
        """What a gradient rule gets of input `j`: a tensor again (of `tensor_type`, on the tape
        where the input was, for a gradient of the gradient) where the tape kept a tensor's
        array, else what was kept (its spec, a number, a copy of an array)."""
        kept = self.inputs[j]
        if self.tensors is not None and self.tensors[j] and type(kept) is not TensorSpec \
                and not isinstance(kept, Tracked):
            backend = self.backend
            if type(kept) is Value and kept.spec.device != backend.name:  # (an operand of a
                backend = get_backend(kept.spec.device)  # node owning graphs may live elsewhere)
            return tensor_type._make(kept, backend, self.parents[j])
        return kept

    def release(self) -> None:
        """Drop what the gradient rules would read: backward has run, the tape is spent. Only
        shapes stay: a node that kept nothing but shapes (reshape, a sum, x + 1) loses nothing
        and can be gone through again, as in PyTorch, which frees only what it saved (a
        tensor, or a number such as the 2 of ``x * 2``)."""
        freed = self.out is not None
        specs = []
        for x in self.inputs:
            if x is not None and type(x) is not TensorSpec:
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

    __slots__ = ("dtype", "number", "shape", "tensor")
    parents = ()

    def __init__(self, tensor: Any) -> None:
        self.number = next(_numbers)
        self.tensor = weakref.ref(tensor)
        self.shape = tensor.shape
        self.dtype = tensor.dtype

    def __repr__(self) -> str:
        return "<leaf>"


def record(op, args: tuple, params: dict, out: Any, backend: Any) -> TapeNode | None:
    """Put an op application on the tape (the caller knows some input is tracked).

    Only what the gradient rules of the inputs that need a gradient will read is kept (see
    `Op.tape_plan`): everything else can be freed as soon as the forward pass is done with it.
    This runs for every recorded op, so it is written with plain loops (in CPython 3.11 a
    comprehension, a frame of its own, or a zip costs more than the work it would do here),
    and it fills in the node's fields itself (calling ``TapeNode(...)`` would add a tenth to
    the cost of recording an op).
    """
    dtype = out.dtype
    # (Looking the dtype's class up in a set is quicker than reading its kind; `kind` still
    # answers for a dtype the set does not know.)
    if not _enabled or (type(dtype) not in _FLOAT_DTYPES and dtype.kind not in "fc"):
        return None  # (integer and boolean results carry no gradient)
    parents, needs = [], []
    for x in args:
        if isinstance(x, Tracked):
            node = x._node
            parents.append(node)
            needs.append(node is not None)
        else:
            parents.append(None)
            needs.append(None)
    needs = tuple(needs)
    plan = op.tape_plans.get(needs) or op.tape_plan(needs)
    if not plan:
        return None  # (no rule of the inputs needing a gradient: an op without gradient too)
    node = _new(TapeNode)
    node.op, node.params, node.parents, node.backend = op, params, tuple(parents), backend
    if plan.kept:
        kept = list(plan.keep)
        for j in plan.arrays:  # (the usual case, inline: a tensor whose values a rule reads)
            x = args[j]
            kept[j] = x._data if x._tape_keeps_array else _kept(x, "value")
        for j in plan.others:
            kept[j] = _kept(args[j], kept[j])
        node.inputs = tuple(kept)
    else:
        node.inputs = plan.keep
    node.tensors = plan.tensors
    shape = node.shape = out.shape
    # (A value whose size is known only when its graph runs is kept too: see `_fit`. Only a
    # symbolic value can be one, so an array's shape is not searched for an unknown size.)
    node.out = out if plan.out or (type(out) is not backend.array_type and None in shape) \
        else None
    node.dtype, node.source, node.released = dtype, None, False
    node.number = next(_numbers)
    return node


#: The classes of NumPy's (and so CuPy's) floating and complex dtypes: those that carry gradients.
_FLOAT_DTYPES = frozenset(type(np.dtype(code)) for code in "efdgFDG")


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
    tensors = tuple(isinstance(x, Tracked) for x in args)
    kept = tuple(_kept(x, "value") for x in args)
    node = TapeNode(op, params, parents, kept, tuple(outs), backend,
                    tuple(o.shape for o in outs), None, tensors)
    return tuple(TapeNode(RESULT, {"index": k}, (node,), (None,), None, backend, o.shape, o.dtype)
                 if o.dtype.kind in "fc" else None for k, o in enumerate(outs))


def _kept(x: Any, what: str) -> Any:
    """What the tape keeps of operand `x` for the gradient rules (`what` they read: "value" or
    "spec"): of a tensor, its array (`TapeNode.operand` makes it a tensor again), never a live
    reference.

    A tensor's array is kept as it is now: a later in-place update (`p -= ...`) gives the tensor
    another array and must not change what the rule sees. A NumPy array operand is copied, as
    tracing copies it into the graph, so refilling the caller's buffer cannot change the
    gradient. Where the rule reads only the spec, the spec is kept (unless a size is unknown
    until the graph runs: then the symbolic array, which costs nothing to keep, gives the size
    at run time).
    """
    if isinstance(x, Tracked):
        data = x._data
        if what == "spec" and None not in data.shape:
            return _spec(data.shape, data.dtype, x._backend.name)
        return data if x._tape_keeps_array else type(x)._make(data, x._backend, x._node)
    if isinstance(x, np.ndarray):
        return x.copy()
    return x


#: Specs are immutable, and the same few recur at every training step: each is made once.
_spec = lru_cache(maxsize=1024)(TensorSpec)
