"""Rewrite rules as data, and one engine that applies any table of them.

A rule is a name in plain words, a pattern, and what to put in the pattern's place:

    Rule("x*1 -> x", Pattern(ew.mul, X, 1), lambda m, emit: m.x)

Patterns are small trees: ``Pattern(op, *operands)`` matches a node of that op (or of any op of
a tuple of them), ``Var("x")`` matches any operand and binds it, and a number matches that
literal. The engine walks the graph
once, in order; for each node it tries the rules and, when one matches, puts the replacement in
place of the node's value and records a `Change` that names the rule. It repeats until nothing
matches.

One check guards every rule: the replacement must have exactly the shape, dtype and device of the
value it replaces. So ``x*1 -> x`` cannot fire where ``1`` broadcasts ``x`` to a bigger shape or
promotes its dtype; the rule itself does not have to know.

This is tinygrad's ``PatternMatcher`` idea: because each rule has a name, the pass can explain
itself, and those names are what the pass stepper shows.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from teachflow.graph import Graph, Node, Value, format_node
from teachflow.ops.op import Op
from teachflow.passes.base import Change, Decide, Rewriter, rewrite
from teachflow.passes.cse import ValueNumbering


@dataclass(frozen=True)
class Var:
    """Matches any operand (a value or a literal) and binds it to `name`."""

    name: str


class Pattern:
    """Matches a value computed by op `op` (or by one of a tuple of ops) from operands matching
    `operands`.

    ``Pattern(ew.mul, X, 1, bind="m")`` also binds the matched node to ``m``. The op is its
    declaration itself (`teachflow.ops`), never a name to look up: a rule cannot misspell one.
    """

    def __init__(self, op: Op | tuple[Op, ...], *operands: Any, bind: str | None = None
                 ) -> None:
        self.ops = op if isinstance(op, tuple) else (op,)
        self.operands = operands
        self.bind = bind


class Match(dict):
    """The bindings of a successful match, readable as attributes (``m.x``)."""

    def __getattr__(self, name: str) -> Any:
        try:
            return self[name]
        except KeyError:
            raise AttributeError(name) from None


@dataclass(frozen=True)
class Rule:
    """A named rewrite: when `pattern` matches (and `where` holds), use `rewrite`'s result."""

    name: str
    pattern: Pattern
    rewrite: Callable[[Match, Callable[..., Value]], Value]
    where: Callable[[Match, RewriteContext], bool] | None = field(default=None)


@dataclass
class RewriteContext:
    """What rules may consult: the value numbering (which values compute the same thing), and
    how many times each value is read (by nodes, and as an output of the graph)."""

    numbering: ValueNumbering
    uses: dict[Value, int] = field(default_factory=dict)


def match(pattern: Any, operand: Any, m: Match) -> bool:
    """Does `operand` match `pattern`? Fills `m` with the bindings on success."""
    if isinstance(pattern, Var):
        if pattern.name in m:
            return _same_operand(m[pattern.name], operand)
        m[pattern.name] = operand
        return True
    if isinstance(pattern, Pattern):
        node = operand.producer if isinstance(operand, Value) else None
        if (node is None or node.op not in pattern.ops
                or len(node.inputs) != len(pattern.operands)):
            return False
        return _match_node(pattern, node, m)
    return _is_literal(operand, pattern)


def _match_node(pattern: Pattern, node: Node, m: Match) -> bool:
    orders = [node.inputs]
    if node.op.commutes(node.spec.dtype):
        orders.append(node.inputs[::-1])
    for operands in orders:
        trial = Match(m)
        if all(match(p, o, trial) for p, o in zip(pattern.operands, operands, strict=True)):
            if pattern.bind:
                trial[pattern.bind] = node
            m.clear()
            m.update(trial)
            return True
    return False


def _is_literal(operand: Any, value: Any) -> bool:
    """Is `operand` the number `value` as a program means it: ``-0.0`` is not ``0`` (``x - -0.0``
    turns ``-0.0`` into ``+0.0``), and ``True`` is not ``1``."""
    return (not isinstance(operand, Value) and type(operand) is not bool
            and isinstance(operand, int | float) and operand == value
            and math.copysign(1, operand) == math.copysign(1, value))


def _same_operand(a: Any, b: Any) -> bool:
    return a is b if isinstance(a, Value) or isinstance(b, Value) else a == b


def rule_pass(name: str, rules: list[Rule]) -> Callable[[Graph], tuple[Graph, list[Change]]]:
    """A pass made of a table of rules, applied by `apply_rules`."""

    def run(graph: Graph) -> tuple[Graph, list[Change]]:
        return apply_rules(graph, rules)

    run.__name__ = run.__qualname__ = name
    return run


MAX_SWEEPS = 8


def apply_rules(graph: Graph, rules: list[Rule]) -> tuple[Graph, list[Change]]:
    """Apply `rules` until none matches (or MAX_SWEEPS walks), each walk one `rewrite`."""
    changes: list[Change] = []
    for _ in range(MAX_SWEEPS):
        before = len(changes)
        graph = rewrite(graph, lambda g: _first_rule(rules, changes, g))
        if len(changes) == before:
            break
    return graph, changes


def _first_rule(rules: list[Rule], changes: list[Change], graph: Graph) -> Decide:
    """The decision of one walk: the first rule that matches a node replaces it."""
    uses = {value: len(nodes) for value, nodes in graph.users().items()}
    for value in graph.outputs:
        uses[value] = uses.get(value, 0) + 1
    context = RewriteContext(ValueNumbering(), uses)

    def decide(node: Node, rewriter: Rewriter) -> Value | None:
        replacement, rule = _first_rewrite(node, rules, context, rewriter)
        if replacement is None:
            context.numbering.visit(node)
            return None
        for new in rewriter.added:
            context.numbering.visit(new)
        producer = replacement.producer
        if not rewriter.added and producer is not None:  # x*1 -> x: x's node stands for both
            producer.lineage = tuple(sorted({*producer.lineage, *node.lineage}))
        made = " then ".join(format_node(n) for n in rewriter.added) or str(replacement)
        changes.append(Change("replaced", (node.id,), tuple(n.id for n in rewriter.added) or
                              ((replacement.id,)), rule.name,
                              f"{rule.name}: {format_node(node)} becomes {made}"))
        return replacement

    return decide


def _first_rewrite(node: Node, rules: list[Rule], context: RewriteContext,
                   rewriter: Rewriter) -> tuple[Value | None, Rule | None]:
    for rule in rules:
        if node.op not in rule.pattern.ops:
            continue
        m = Match()
        if not _match_node(rule.pattern, node, m):
            continue
        if rule.where is not None and not rule.where(m, context):
            continue
        emit = _Emitter(rewriter)
        replacement = rule.rewrite(m, emit)
        # The guard every rule gets for free: the replacement must be interchangeable.
        if isinstance(replacement, Value) and replacement.spec == node.spec:
            return replacement, rule
        del rewriter.added[:]  # (what a refused replacement emitted goes with it)
    return None, None


class _Emitter:
    """``emit(op, *inputs, **params)`` for a rule: a new node standing where the matched one
    was."""

    def __init__(self, rewriter: Rewriter) -> None:
        self.rewriter = rewriter

    def __call__(self, op: Op, *inputs: Any, **params: Any) -> Value:
        return self.rewriter.add(op, inputs, params)
