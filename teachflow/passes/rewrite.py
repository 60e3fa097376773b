"""Rewrite rules as data, and one engine that applies any table of them.

A rule is a name in plain words, a pattern, and what to put in the pattern's place:

    Rule("x*1 -> x", P("mul", X, 1), lambda m, emit: m.x)

Patterns are small trees: ``P(op, *operands)`` matches a node of that op, ``Var("x")`` matches any
operand and binds it, and a number matches that literal. The engine walks the graph once, in
order; for each node it tries the rules and, when one matches, puts the replacement in place of
the node's value and records a `Change` that names the rule. It repeats until nothing matches.

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
from teachflow.ops import OPS
from teachflow.passes.base import BuiltinPass, Change
from teachflow.passes.cse import ValueNumbering


@dataclass(frozen=True)
class Var:
    """Matches any operand (a value or a literal) and binds it to `name`."""

    name: str


class P:
    """Matches a value computed by op `op` from operands matching `operands`.

    ``P("mul", X, 1, bind="m")`` also binds the matched node to ``m``.
    """

    def __init__(self, op: str, *operands: Any, bind: str | None = None) -> None:
        if op not in OPS:
            raise ValueError(f"unknown op {op!r} in pattern")
        self.op = OPS[op]
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
    pattern: P
    rewrite: Callable[[Match, Callable[..., Value]], Value]
    where: Callable[[Match, RewriteContext], bool] | None = field(default=None)


@dataclass
class RewriteContext:
    """What rules may consult: the value numbering (which values compute the same thing)."""

    numbering: ValueNumbering


def match(pattern: Any, operand: Any, m: Match) -> bool:
    """Does `operand` match `pattern`? Fills `m` with the bindings on success."""
    if isinstance(pattern, Var):
        if pattern.name in m:
            return _same_operand(m[pattern.name], operand)
        m[pattern.name] = operand
        return True
    if isinstance(pattern, P):
        node = operand.producer if isinstance(operand, Value) else None
        if node is None or node.op is not pattern.op or len(node.inputs) != len(pattern.operands):
            return False
        return _match_node(pattern, node, m)
    return _is_literal(operand, pattern)


def _match_node(pattern: P, node: Node, m: Match) -> bool:
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


class RuleSet(BuiltinPass):
    """A pass made of a table of rules, applied by `apply_rules`."""

    def __init__(self, name: str, rules: list[Rule]) -> None:
        self.name = name
        self.rules = rules

    def run(self, graph: Graph) -> tuple[Graph, list[Change]]:
        return apply_rules(graph, self.rules)


MAX_SWEEPS = 8


def apply_rules(graph: Graph, rules: list[Rule]) -> tuple[Graph, list[Change]]:
    """Apply `rules` to a clone of `graph` until none matches (or MAX_SWEEPS walks)."""
    g = graph.clone()
    changes: list[Change] = []
    for _ in range(MAX_SWEEPS):
        found = _sweep(g, rules, changes)
        if not found:
            break
    return g, changes


def _sweep(g: Graph, rules: list[Rule], changes: list[Change]) -> bool:
    mapping: dict[int, Value] = {}
    kept: list[Node] = []
    context = RewriteContext(ValueNumbering())
    found = False
    for node in g.nodes:
        node.inputs = tuple(mapping.get(id(o), o) if isinstance(o, Value) else o
                            for o in node.inputs)
        replacement, emitted, rule = _first_rewrite(g, node, rules, context)
        if replacement is None:
            kept.append(node)
            context.numbering.visit(node)
            continue
        for new in emitted:
            kept.append(new)
            context.numbering.visit(new)
        producer = replacement.producer
        if not emitted and producer is not None:  # x*1 -> x: x's node now stands for both
            producer.lineage = tuple(sorted({*producer.lineage, *node.lineage}))
        mapping[id(node.output)] = replacement
        found = True
        made = " then ".join(format_node(n) for n in emitted) or str(replacement)
        changes.append(Change("replaced", (node.id,), tuple(n.id for n in emitted) or
                              ((replacement.id,)), rule.name,
                              f"{rule.name}: {format_node(node)} becomes {made}"))
    g.nodes = kept
    g.outputs = [mapping.get(id(v), v) for v in g.outputs]
    return found


def _first_rewrite(g: Graph, node: Node, rules: list[Rule],
                   context: RewriteContext) -> tuple[Value | None, list[Node], Rule | None]:
    for rule in rules:
        if rule.pattern.op is not node.op:
            continue
        m = Match()
        if not _match_node(rule.pattern, node, m):
            continue
        if rule.where is not None and not rule.where(m, context):
            continue
        emit = _Emitter(g, node)
        replacement = rule.rewrite(m, emit)
        # The guard every rule gets for free: the replacement must be interchangeable.
        if isinstance(replacement, Value) and replacement.spec == node.spec:
            return replacement, emit.nodes, rule
    return None, [], None


class _Emitter:
    """``emit(op, *inputs, **params)`` for a rule: a new node standing where `node` was."""

    def __init__(self, graph: Graph, node: Node) -> None:
        self.graph, self.node, self.nodes = graph, node, []

    def __call__(self, op: str, *inputs: Any, **params: Any) -> Value:
        specs = [o.spec if isinstance(o, Value) else o for o in inputs]
        spec = OPS[op].abstract_eval(*specs, **params)
        new = self.graph.new_node(OPS[op], inputs, params, spec, self.node.source,
                                  self.node.lineage)
        self.nodes.append(new)
        return new.output
