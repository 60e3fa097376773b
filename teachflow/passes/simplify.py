"""Algebraic simplification: a table of named rewrite rules.

Each rule is an identity of algebra that holds for every value the operand can take, so the
rewritten graph computes exactly what the original did. Where floating point makes an identity
false the rule is restricted, and the restriction is part of its name:

- ``x*0 -> 0`` is *not* true for floats: ``inf*0`` and ``nan*0`` are ``nan``. It is applied only
  to integer and boolean tensors, which can hold neither.
- ``x - x -> 0``: the same (``inf - inf`` is ``nan``).
- ``x+0 -> x`` is *not* true for floats either: ``-0.0 + 0`` is ``+0.0``, and ``1/x`` tells the
  two zeros apart. (``x-0``, ``x*1`` and ``x/1`` keep the sign, so they hold for every float.)

Every rule also gets a free check from the engine (`rules.py`): its result must have the shape,
dtype and device of what it replaces, so ``x*1 -> x`` never fires where the ``1`` would have
broadcast or promoted ``x``.
"""

from __future__ import annotations

from teachflow.graph import Value
from teachflow.ops import creation, linalg
from teachflow.ops import elementwise as ew
from teachflow.ops import shape as shape_ops
from teachflow.passes.rules import Pattern, Rule, Var, rule_pass

X, Y = Var("x"), Var("y")


def _integer(m: dict, _context: object) -> bool:
    x = m["x"]
    return isinstance(x, Value) and x.dtype.kind in "biu"


def _integer_of_known_shape(m: dict, context: object) -> bool:
    """An integer x whose zeros can be made by `full` (every size known before the graph runs)."""
    return _integer(m, context) and None not in m["x"].shape


def _zeros_like(m: dict, emit) -> Value:
    x = m["x"]
    return emit(creation.full, shape=x.shape, fill_value=0, dtype=x.dtype, device=x.spec.device)


def _same_computation(m: dict, context) -> bool:
    return isinstance(m["x"], Value) and context.numbering.same(m["x"], m["y"])


def _product_read_transposed(m: dict, context) -> bool:
    """A 2-D product whose only reader is a transpose (as a weight's gradient comes out of
    ``x @ w.T``): computing the transposed product directly costs nothing more."""
    return (m["t"].params["axes"] == (1, 0) and context.uses.get(m["product"].output) == 1
            and all(isinstance(v, Value) and v.ndim == 2 for v in (m["x"], m["y"])))


def _transposed_product(m: dict, emit) -> Value:
    def swapped(v: Value) -> Value:  # v.T, or what v is the transpose of
        node = v.producer
        if node is not None and node.op is shape_ops.transpose and node.params["axes"] == (1, 0):
            return node.inputs[0]
        return emit(shape_ops.transpose, v, axes=(1, 0))
    return emit(linalg.matmul, swapped(m["y"]), swapped(m["x"]))


def _compose_transposes(m: dict, emit) -> Value:
    inner, outer = m["inner"].params["axes"], m["outer"].params["axes"]
    axes = tuple(inner[a] for a in outer)
    if axes == tuple(range(len(axes))):
        return m["x"]
    return emit(shape_ops.transpose, m["x"], axes=axes)


#: The elementwise ops of two operands, which broadcast them to one shape as NumPy does.
_BROADCASTING = (ew.add, ew.sub, ew.mul, ew.div, ew.pow, ew.maximum, ew.minimum, ew.floor_divide,
                 ew.remainder, ew.lt, ew.le, ew.gt, ew.ge, ew.eq, ew.ne)
BROADCAST_READ = "op(x, broadcast_to(y)) -> op(x, y) (an elementwise op broadcasts by itself)"


def _unbroadcast(m: dict, emit) -> Value:
    node, broadcast = m["op"], m["b"]
    operands = [m["y"] if v is broadcast.output else v for v in node.inputs]
    return emit(node.op, *operands, **node.params)


RULES = [
    # Identities of arithmetic.
    Rule("x*1 -> x", Pattern(ew.mul, X, 1), lambda m, emit: m.x),
    Rule("x+0 -> x (integer x only)", Pattern(ew.add, X, 0), lambda m, emit: m.x, where=_integer),
    Rule("x-0 -> x", Pattern(ew.sub, X, 0), lambda m, emit: m.x),
    Rule("x/1 -> x", Pattern(ew.div, X, 1), lambda m, emit: m.x),
    Rule("x**1 -> x", Pattern(ew.pow, X, 1), lambda m, emit: m.x),
    Rule("-(-x) -> x", Pattern(ew.neg, Pattern(ew.neg, X)), lambda m, emit: m.x),
    Rule("x*0 -> 0 (integer x only)", Pattern(ew.mul, X, 0), _zeros_like,
         where=_integer_of_known_shape),
    Rule("x-x -> 0 (integer x only)", Pattern(ew.sub, X, X), _zeros_like,
         where=_integer_of_known_shape),
    # The same computation twice is twice the computation: one of them is no longer needed.
    Rule("f(x) + f(x) -> 2*f(x)", Pattern(ew.add, X, Y), lambda m, emit: emit(ew.mul, m.x, 2),
         where=_same_computation),
    # Shape ops that undo or repeat each other.
    Rule("reshape(reshape(x)) -> reshape(x)",
         Pattern(shape_ops.reshape, Pattern(shape_ops.reshape, X), bind="outer"),
         lambda m, emit: emit(shape_ops.reshape, m.x, shape=m.outer.params["shape"])),
    Rule("reshape(x) to its own shape -> x", Pattern(shape_ops.reshape, X), lambda m, emit: m.x),
    Rule("transpose(transpose(x)) -> transpose(x)",
         Pattern(shape_ops.transpose, Pattern(shape_ops.transpose, X, bind="inner"), bind="outer"),
         _compose_transposes),
    Rule("transpose(x) keeping every axis -> x", Pattern(shape_ops.transpose, X, bind="t"),
         lambda m, emit: m.x,
         where=lambda m, _: m.t.params["axes"] == tuple(range(len(m.t.params["axes"])))),
    # (a @ b).T is b.T @ a.T: the same numbers, made in the layout they are read in. A transpose
    # is a view that reads across rows; an elementwise kernel reading that view strides through
    # memory (a weight update after x @ w.T took 3x as long). Transposes of the inputs are views
    # that matmul reads as they are, and a transpose of a transpose cancels (the rule above).
    Rule("transpose(a @ b) -> b.T @ a.T (the product made in the layout it is read in)",
         Pattern(shape_ops.transpose, Pattern(linalg.matmul, X, Y, bind="product"), bind="t"),
         _transposed_product, where=_product_read_transposed),
    # An elementwise op broadcasts its operands itself: a broadcast_to feeding it only makes a
    # view, and ends a fusion group (the gradient of a sum makes one). The free check keeps the
    # broadcast where the op alone would make a smaller result.
    *[Rule(BROADCAST_READ, Pattern(_BROADCASTING, *operands, bind="op"), _unbroadcast)
      for operands in ((X, Pattern(shape_ops.broadcast_to, Y, bind="b")),
                       (Pattern(shape_ops.broadcast_to, Y, bind="b"), X))],
    Rule("broadcast_to(x) to its own shape -> x", Pattern(shape_ops.broadcast_to, X),
         lambda m, emit: m.x),
    Rule("astype(x) to its own dtype -> x", Pattern(ew.astype, X), lambda m, emit: m.x),
    # After tracing, gradients have been taken: these identities have done their job.
    Rule("identity(x) -> x", Pattern(ew.identity, X), lambda m, emit: m.x),
    Rule("stop_gradient(x) -> x (gradients are already in the graph)",
         Pattern(ew.stop_gradient, X), lambda m, emit: m.x),
]

simplify = rule_pass("simplify", RULES)
