"""Watching what happens before any pass runs: a trace, and a backward pass, step by step.

Both are shown in the pass stepper, its stages being the steps:

- `trace_steps(f, *args)`: tracing as it builds the graph. Stage 0 holds the function's
  arguments, each later stage one more node, as the graph builder records each op `f`
  applies to symbolic tensors (its shape rule, no numbers), with the user's line that applied
  it; the last stage marks what `f` returns.
- `backward_steps(loss)`: the tape `loss` was recorded on, and the backward pass walking it
  (`teachflow.autodiff.backprop.backpropagate`, watched). Stage 0 is the tape: each recorded op a
  node, each tensor made with ``requires_grad=True`` an input, and ``·`` for an operand that
  needs no gradient (it is not on the tape). Then one stage per node the walk reaches, last
  result first: the gradient of loss with respect to that node's result, ``%h.grad``, now
  complete, computed by the gradient rules of the nodes that read it (``∂tanh``: tanh's rule),
  with its value. A leaf's, ``%w.grad``, is what ``loss.backward()`` adds into ``w.grad``.
  Nothing is written into any ``.grad``, and the tape is kept.

Each returns a `Steps`, which the stepper draws as it draws a compilation (a graph that grows
is laid out as it ends up: `teachflow.viz.layout.layout_growing`); ``tfl.viz.show_trace`` and
``tfl.viz.show_backward`` show it in the notebook.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachflow.autodiff.backprop import backpropagate, seed_of, topological_order
from teachflow.autodiff.tape import Leaf, TapeNode
from teachflow.core.errors import AutodiffError, SourceLocation, user_frame
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_flatten
from teachflow.graph import Graph, Value, format_node
from teachflow.ops.op import Op
from teachflow.passes.base import Change
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.trace import trace
from teachflow.viz.values import summarize


@dataclass
class Step:
    """One stage of what is watched: its name, its graph, what it added (as a pass's changes)."""

    pass_name: str
    graph: Graph
    changes: list[Change] = field(default_factory=list)

    @property
    def stats(self) -> dict[str, int]:
        return {"nodes": len(self.graph.nodes)}


@dataclass
class Steps:
    """What the stepper draws: the `snapshots` (steps), laid out as the graph ends up; `words`
    for its first stage; the values to show (`values`: their summaries by value id)."""

    snapshots: list[Step]
    words: dict[str, str]
    values: Any
    grows: bool = True

    @property
    def graph(self) -> Graph:
        return self.snapshots[-1].graph

    def show(self) -> Any:
        """The stepper, stepping through the steps."""
        from teachflow.viz.stepper import PassStepper  # (imports the widget libraries)

        return PassStepper(data=self.data())

    def data(self) -> dict:
        from teachflow.viz.stepper_data import compilation_data

        return compilation_data(self, values=self.values)

    def to_html(self, path: str | Path) -> Path:
        """The stepper as one self-contained page at `path`."""
        from teachflow.viz.html import page_html

        path = Path(path)
        path.write_text(page_html(self.data()), encoding="utf-8")
        return path


class Known:
    """Values known already (what backward computed), as `teachflow.viz.values.Values` gives
    them to the stepper's data: summaries by value id."""

    def __init__(self, arrays: dict[int, Any]) -> None:
        self.summaries = {i: summarize(a) for i, a in arrays.items()}
        self.notes: dict = {}

    def add(self, graph: Graph) -> None:
        """(Nothing to compute: every value is known.)"""


# --- A trace, node by node ----------------------------------------------------------------------


def trace_steps(f: Callable, *args: Any) -> Steps:
    """Tracing `f` on `args`, watched: one stage per op recorded (see the module docstring)."""
    from teachflow.viz.values import Values

    whole = trace(f, *args)
    steps = [Step("arguments", _part(whole, 0))]
    for k, node in enumerate(whole.nodes, start=1):
        last = k == len(whole.nodes)
        said = _where(node.source)
        returns = (f"; {whole.name} returns {', '.join(str(v) for v in whole.results)}: the "
                   "trace is done" if last and whole.results else "")
        sentence = (f"{said}{node.op.name} applied to symbolic tensors: the graph builder ran "
                    f"its shape rule, computed no numbers, and recorded {format_node(node)}"
                    f"{returns}")
        steps.append(Step(node.op.name, _part(whole, k, ends=last),
                          [Change("added", (), (node.id,), f"{node.op.name} recorded",
                                  sentence)]))
    leaves, _ = tree_flatten((args, {}))
    inputs = list({id(t): t for t in leaves if isinstance(t, Tensor)}.values())
    words = {
        "title": f"Tracing {whole.name}, op by op",
        "first": f"Step 1 of {len(steps)}: {whole.name} is called with symbolic tensors, "
                 f"{', '.join(str(v) for v in whole.inputs) or 'no tensors'}: each has a "
                 "shape and a dtype, and no numbers. Step forward to watch each op recorded.",
        "card": "Tracing runs your function once on symbolic tensors. Each op it applies goes "
                "through bind to the graph builder, which records a node instead of computing: "
                "step forward (→ or j) to see each node appear, with the line that made it. "
                "Click a node for its value on the example arguments.",
    }
    return Steps(steps, words, Values(inputs))


def _part(whole: Graph, k: int, ends: bool = False) -> Graph:
    """`whole` as the trace has it after recording `k` nodes: the values those read, the
    nodes, and (at the end) what it returns and writes back."""
    part = Graph(whole.name)
    part.nodes = whole.nodes[:k]
    read = {o for n in part.nodes for o in n.inputs if isinstance(o, Value)}
    part.inputs = list(whole.inputs)
    part.captures = [v for v in whole.captures if v in read or ends]
    part.constants = [v for v in whole.constants if v in read or ends]
    part._owned = whole._owned
    if ends:
        part.outputs, part.updates = list(whole.outputs), list(whole.updates)
    return part


def _where(source: SourceLocation | None) -> str:
    """``cell In[3], line 2, `h = x @ w`: `` (or nothing, for a node no line of yours made)."""
    if source is None:
        return ""
    line = source.line
    return f"{source}{f', `{line}`' if line else ''}: "


# --- A backward pass, node by node --------------------------------------------------------------


#: The operand of a recorded op that needs no gradient: not on the tape, drawn as ``·``.
class _NotOnTape:
    def __repr__(self) -> str:
        return "·"


NOT_ON_TAPE = _NotOnTape()


def backward_steps(loss: Tensor) -> Steps:
    """The backward pass of `loss`, watched: the tape, then one stage per node the walk reaches
    (see the module docstring)."""
    if not isinstance(loss, Tensor) or loss._node is None:
        raise AutodiffError(
            f"{type(loss).__name__} {loss!r:.60} is on no tape: none of the tensors it was "
            "computed from has requires_grad=True (or it was computed under tfl.no_grad())",
            op="show_backward", hint="make a leaf with requires_grad=True, compute from it, "
                                     "and pass the result: tfl.viz.show_backward(loss)")
    if isinstance(loss._data, Value):
        raise AutodiffError("show_backward draws the tape of an eager computation, and this "
                            "tensor is symbolic (inside a trace)", op="show_backward",
                            hint="call it outside tfl.function, on a loss computed eagerly")
    seed = seed_of(loss, None, "show_backward")
    names = _names_in_callers_frame()
    tape = _Tape(loss._node, names)
    backpropagate(loss._node, seed, visit=tape.reached)
    words = {
        "title": "The tape, walked backwards",
        "first": f"Step 1 of {len(tape.steps)}: the tape {tape.name} was recorded on, "
                 f"{tape.ops} ops. backward() walks it from {tape.name}, last op first; step "
                 "forward to watch each gradient computed.",
        "unknown": "Not kept: the tape keeps a value only where a gradient rule reads it.",
        "card": "The tape: each op recorded while computing, pointing back to the tensors it "
                "read (· marks an operand that needs no gradient: it is not on the tape). "
                "Each step adds the gradient of the loss with respect to one more result "
                "(%h.grad), computed by the gradient rules of the ops that read it (∂tanh: "
                "tanh's rule). Click a gradient for its value.",
    }
    return Steps(tape.steps, words, Known(tape.arrays))


class _Tape:
    """The tape as a graph (`forward`), and the stages of the walk, added as it goes."""

    def __init__(self, root: TapeNode, names: dict[int, str]) -> None:
        order = topological_order(root)
        graph = Graph("backward")
        self.value: dict[Any, Value] = {}  # a tape node -> its value in the graph
        self.users: dict[Any, list] = {n: [] for n in order}
        for n in order:
            if type(n) is Leaf:
                tensor = n.tensor()
                device = tensor.device if tensor is not None else "cpu"
                self.value[n] = graph.add_input(TensorSpec(n.shape, n.dtype, device),
                                                names.get(id(n), f"leaf{len(graph.inputs)}"))
                continue
            for p in n.parents:
                if p is not None and n not in self.users[p]:  # (x * x: one user)
                    self.users[p].append(n)
            operands = tuple(NOT_ON_TAPE if p is None else self.value[p] for p in n.parents)
            node = graph.add_node(n.op, operands, n.params,
                                  TensorSpec(n.shape, n.dtype, n.backend.name), None)
            node.output.name = names.get(id(n))
            self.value[n] = node.output
        self.forward, self.ops = graph, len(graph.nodes)
        self.name = str(self.value[root])
        leaves = [(n, n.tensor()) for n in order if type(n) is Leaf]  # (weakly held)
        self.arrays = {self.value[n].id: t.numpy() for n, t in leaves if t is not None}
        self.arrays.update((self.value[n].id, n.backend.to_numpy(n.out)) for n in order
                           if type(n) is TapeNode and n.out is not None)  # (kept for a rule)
        self.grad: dict[Any, Value] = {}  # a tape node -> the value of its gradient
        self.steps = [Step("tape", self._stage())]

    def reached(self, node: Any, g: Any) -> None:
        """The walk reached `node`, with its gradient `g`, complete: one more stage."""
        value = self.value[node]
        users = self.users[node]
        rule = "+".join(f"∂{u.op.name}" for u in users) or "seed"
        operands = tuple(o for u in users for o in self._read(u, node))
        grad = self.forward.add_node(_gradient_op(rule), operands, {}, g.spec, None)
        grad.output.name = f"{str(value)[1:]}.grad"
        self.grad[node] = grad.output
        array = g.numpy()
        self.arrays[grad.id] = array
        what = (f"{value}.grad = ∂{self.name}/∂{value}" if users else
                f"{value}.grad = ∂{self.name}/∂{self.name} = 1: the walk starts from its seed")
        if users:
            sent = ", ".join(f"{self.value[u]} {u.op.name}" for u in users)
            how = (f"the gradient rules of what read it ({sent}) sent it back"
                   f"{', added up' if len(users) > 1 else ''}")
            what = f"{what}: {how}"
        if type(node) is Leaf:
            what += f"; backward() adds it into {str(value)[1:]}.grad"
        shown = summarize(array)
        sentence = f"{what}. Its value: {shown['preview']}{' …' if shown['truncated'] else ''}"
        stage = f"{value}.grad"
        self.steps.append(Step(stage, self._stage(), [Change("added", (), (grad.id,),
                                                                  f"gradient of {value}",
                                                                  sentence)]))

    def _read(self, user: TapeNode, node: Any) -> list:
        """What `user`'s gradient rules read to send `node` its part: `user`'s gradient, and
        the values the tape kept for them (its output, its operands; ``·`` for one not on the
        tape), each once."""
        read: list = [self.grad[user]]
        for k, parent in enumerate(user.parents):
            found = user.op.rule(k) if parent is node and user.op.vjp is None else None
            if found is None:
                continue
            reads = found[1]
            kept = [user] if reads.out else []
            kept += [user.parents[j] for _, j, how in reads.inputs if how == "value"]
            read += [NOT_ON_TAPE if p is None else self.value[p] for p in kept]
        return list(dict.fromkeys(read))

    def _stage(self) -> Graph:
        """The graph now: the tape and the gradients computed so far."""
        part = Graph(self.forward.name)
        part.inputs = list(self.forward.inputs)
        part.nodes = list(self.forward.nodes)
        part._owned = self.forward._owned
        return part


_GRADIENT_OPS: dict[str, Op] = {}


def _gradient_op(rule: str) -> Op:
    """The op a gradient node is drawn with, named by the rules that computed it
    (``∂tanh``; ``∂add+∂mul`` for a value read twice, its gradients added up)."""
    op = _GRADIENT_OPS.get(rule)
    if op is None:
        op = _GRADIENT_OPS[rule] = Op(rule, lambda xp: None, lambda *specs: None,
                                      primitive=False)
    return op


def _names_in_callers_frame() -> dict[int, str]:
    """The names the user's code gives the tensors on a tape (``w``, ``loss``), by the id of
    each tensor's tape node: so the picture says ``%w``, not ``%0``."""
    frame = user_frame()
    if frame is None:
        return {}
    names: dict[int, str] = {}
    for scope in (frame.f_globals, frame.f_locals):
        for name, value in scope.items():
            if isinstance(value, Tensor) and value._node is not None and name.isidentifier() \
                    and not name.startswith("_"):
                names[id(value._node)] = name
    return names


__all__ = ["Steps", "backward_steps", "trace_steps"]
