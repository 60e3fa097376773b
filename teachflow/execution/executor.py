"""Running a graph: generated straight-line Python, and a node-by-node interpreter.

A staged function does not walk its graph node by node at every call. Once, it *generates* a
Python function with one line per node, each calling the very kernel eager mode calls, and
compiles it. That is `torch.fx`'s ``GraphModule.code`` idea, and why staging pays off for small
ops: the per-op work of eager dispatch (finding the device, checking for the tape, wrapping
results) is done once, at generation time. The source is kept for learners to read:

    def mlp(x, w1, b1):
        v2 = matmul(x, w1)    # model.py:11
        v4 = add(v2, b1)      # model.py:11
        del v2
        v5 = relu(v4)         # model.py:11
        del v4
        v7 = mul(v5, const6)  # model.py:12
        del v5
        return (v7,)

Each value is named for what it is: the function's arguments by their own names (``x``), the
state it reads from outside (the weights ``w1`` and ``b1``, globals here) by the names the
user's code reads it by, a node's result by the node's number (``v5`` is ``%5`` of the graph),
a constant by its number too (``const6``), and a parameter that does not print as Python (an
index array) by its parameter and node (``index9``).

A node that owns graphs (a ``cond``, a loop: `teachflow.execution.control`) writes real Python
control flow around their code: ``if``/``else``, ``while True: ... break``, ``for k in range(...)``.

When the graph carries a memory plan (`teachflow.memory`, made by the pass ``plan_memory``), each
planned value is written into its view of an arena made once per executor and thread, and the
source says so: ``v2 = matmul(x, w, out=slot0_v2)`` writes ``v2`` into slot 0, where an earlier
value, read for the last time, was. A value the plan writes in place of a dying operand has
that operand's slot, shape and dtype, so it is that operand's view: ``v3 = add(v2, b,
out=slot0_v3)`` writes over ``v2`` with nothing more to do. A warm call then allocates only what
it returns.

Only nodes that the requested outputs depend on are emitted: like ``Session.run`` in TensorFlow,
a graph computes what is fetched and nothing else.

`interpret` is the other way to run a graph: node by node through `bind`, so every op is a normal
eager op (values can be inspected one at a time; a tape can record them for autodiff). A
control-flow node runs its graphs the same way, through its op's ``rerun``. When the
generated function fails at run time, `explain_failure` runs the graph that way to find the op
that failed, and lets it explain itself at the user's line, as eagerly.

The generated source calls kernels and names values by names of its own (``tanh``, ``v3``,
``slice(0, 2, None)``); an argument of the user's function is renamed where its name would hide
one of them (``v3_1``), so whatever the user calls their arguments, the executor calls what it
means to.
"""

from __future__ import annotations

import keyword
import unicodedata
from collections.abc import Callable, Sequence
from contextlib import nullcontext
from typing import Any

import numpy as np

from teachflow.autodiff.tape import no_grad
from teachflow.core.backends import Backend, get_backend
from teachflow.core.dispatch import bind
from teachflow.core.errors import TeachflowError, compile_at_user_lines, on_behalf_of
from teachflow.graph import Graph, Node, Value, subgraphs
from teachflow.memory.arena import Arena
from teachflow.memory.writable import plannable_values
from teachflow.tensor.tensor import Tensor

# Parameter values that print as Python source which reads back equal.
_LITERAL = (bool, int, float, str, type(None), type(Ellipsis), slice)


class Executor:
    """A compiled graph: ``executor(*input_arrays, *capture_arrays)`` returns output arrays.

    ``captures`` are the values it reads from state outside the graph (see `Slot`), in argument
    order after the inputs. ``code`` is the `Source` that wrote it (its names, and the kernels
    and constants they hold), ``params`` its parameters' names, ``body`` its lines before the
    return and ``returned`` the names it returns: the fast path of a staged call
    (`teachflow.staged.fast_path`) writes those lines again, into a function of its own.
    """

    def __init__(self, source: str, fn: Callable, captures: list[Value], code: Source,
                 params: list[str], body: list[Line], returned: list[str],
                 pieces: Any = None) -> None:
        self.source = source
        self.fn = fn
        self.captures = captures
        self.code = code
        self.params = params
        self.body = body
        self.returned = returned
        self.pieces = pieces  # on several devices: what runs the pieces (`execution.pieces`)

    def __call__(self, *arrays: Any) -> Any:
        return self.fn(*arrays)


def generate(graph: Graph, backend: Backend, outputs: Sequence[Value] | None = None,
             inputs: Sequence[Value] | None = None) -> Executor:
    """Generate, compile and return the executor of `graph` on `backend` (one device: a graph
    on several runs as pieces, `teachflow.execution.pieces`)."""
    outputs = list(graph.outputs if outputs is None else outputs)
    inputs = list(graph.inputs if inputs is None else inputs)
    used = graph.live(outputs)[1]
    captures = [v for v in graph.captures if v in used]
    source = Source(backend)
    # Every name the source uses is claimed once: first its own (kernels and values, in the
    # graphs that nodes own too), then the arguments, which may not hide any of them, then the
    # state read from outside, which may not hide an argument either.
    source.name_values(graph, outputs)
    arena = source.plan_memory(graph, outputs)
    source.name_arguments(inputs, captures)
    body, returned = source.body(graph, outputs)
    body = [*arena, *body]
    returned_text = ", ".join(returned) + ("," if len(outputs) == 1 else "")
    params = [source.name_of[v] for v in [*inputs, *captures]]
    text, fn = source.define(source.function_name(graph.name), params,
                             [*body, (0, f"return ({returned_text})", None)])
    return Executor(text, fn, captures, source, params, body, returned)


#: One line of generated source: its depth of indentation, its text, and the node whose user
#: line it runs as (None for bookkeeping: ``del``, a loop's ``break``, a guard).
Line = tuple[int, str, Node | None]


class Source:
    """Generated source being written: the names it uses, what they hold, and its functions.

    This is teachflow's one code generator: the executor of a graph is written with it, and so
    are the checks of a trace's guards (`teachflow.staged.guard_code`) and the fast path of a
    staged call (`teachflow.staged.fast_path`), which writes an executor's lines again, in the
    same namespace. A name is claimed once (`names`), an object the code refers to is bound to
    a name (`bind`), and `define` compiles a function from lines.

    A node that owns graphs (`teachflow.execution.control`) writes its own lines (``if``/``else``, a
    ``while`` loop) through its op's ``emit(source, node, operands, results)``, and those lines
    take the code of its graphs from `body`, with their inputs named by what the node passes.
    """

    def __init__(self, backend: Backend | None = None) -> None:
        self.backend = backend
        self.namespace: dict[str, Any] = {"dtype": np.dtype, "inf": float("inf"),
                                          "nan": float("nan"),
                                          "__name__": "teachflow.generated"}  # (eager's warnings)
        self.names = _Names([*self.namespace, *_BUILTINS_IN_SOURCE])
        self.kernel_of: dict[Any, str] = {}  # op -> the name its kernel has in the source
        self.name_of: dict[Value, str] = {}
        self.out_of: dict[Value, str] = {}  # a planned value -> its view of the arena

    def name_values(self, graph: Graph, outputs: Sequence[Value]) -> None:
        """Claim the names of the kernels and values that computing `outputs` uses, in `graph`
        and in the graphs its nodes own (whose values are numbered apart: ``v12`` is ``%12``
        wherever it is)."""
        self.name_nodes(graph.live(outputs)[0], graph.constants)

    def name_nodes(self, nodes: list[Node], constants: list[Value]) -> None:
        """Claim the names of the kernels and values of `nodes`, and of the `constants` the
        graph holds."""
        for node in nodes:
            owned = subgraphs(node)
            for sub in owned.values():
                self.name_values(sub, sub.outputs)
            if not owned and node.op not in self.kernel_of:
                self.kernel_of[node.op] = self.bind(node.op.name, self.backend.kernels[node.op])
        for node in nodes:
            for v in node.outputs:
                if v not in self.name_of:
                    self.name_of[v] = self.names.claim(f"v{v.id}")
        for v in constants:
            if v not in self.name_of:
                self.name_of[v] = self.bind(f"const{v.id}", self.backend.asarray(v.data))

    def plan_memory(self, graph: Graph, outputs: Sequence[Value]) -> list[Line]:
        """Follow the graph's memory plan, if it has one (`teachflow.memory`): name a view of
        the arena for each planned value (``slot0_v2``: value ``v2``, in slot 0), which its
        kernel writes into, and return the line that takes this thread's views."""
        plan = getattr(graph, "memory_plan", None)
        if plan is None:
            return []
        # The planner gave slots by this very rule, for the graph's outputs; fetching fewer, a
        # planned value may be returned now, which the rule leaves in memory of its own.
        allowed = plannable_values(graph, outputs)
        slot_of = {b.value: b.slot for b in plan.buffers}
        planned = [v for node in graph.live(outputs)[0] for v in node.outputs
                   if v in allowed and v.id in slot_of]
        if not planned:
            return []
        arena = Arena.of(plan, [(v.id, v.dtype, v.shape) for v in planned], self.backend.xp)
        for v in planned:
            self.out_of[v] = self.names.claim(f"slot{slot_of[v.id]}_v{v.id}")
        views = ", ".join(self.out_of[v] for v in planned) + ("," if len(planned) == 1 else "")
        return [(0, f"{views} = {self.bind('arena', arena)}()  # this thread's planned memory "
                    f"({_count(len(plan.slot_sizes), 'slot')}, {arena.nbytes:,} bytes), made once",
                 None)]

    def name_arguments(self, inputs: Sequence[Value], captures: Sequence[Value]) -> None:
        """Name the function's arguments by their own names, then the state it reads from
        outside by the names the user's code reads it by (once the source's own are taken)."""
        for v in inputs:
            self.name_of[v] = self.names.claim(v.name or f"v{v.id}")
        for v in captures:
            self.name_of[v] = self.names.claim(v.name or f"state{v.id}")

    def function_name(self, name: str, device: str = "") -> str:
        """A name for the function of graph `name` (of its piece on `device`)."""
        name = name if not name.startswith("__") else f"graph{name}"
        return self.names.claim(f"{name}_on_{device}" if device else name)

    def define(self, name: str, params: Sequence[str], body: list[Line]
               ) -> tuple[str, Callable]:
        """``def name(params):`` around the lines of `body`, compiled into this source's
        namespace: its text, and the function. A line that computes a node ends with a comment
        naming the user's line of that node, and runs as that line (a NumPy warning is shown
        there)."""
        width = max((len(text) + 4 * depth for depth, text, node in body if node and node.source),
                    default=0)
        lines = [f"def {name}({', '.join(params)}):"]
        for depth, text, node in body:
            text = "    " * depth + text
            lines.append(f"    {text:<{width}}  # {node.source}" if node and node.source
                         else f"    {text}")
        text = "\n".join([*lines, ""])
        places = {n: node.source for n, (_, _, node) in enumerate(body, start=2) if node}
        code = compile_at_user_lines(text, places, f"<teachflow generated: {name}>")
        exec(code, self.namespace)  # the source was generated here, from our own objects
        return text, self.namespace[name]

    def helper(self, wanted: str, value: Any) -> str:
        """A name for a helper of generated control flow (the same helper: the same name)."""
        key = ("helper", wanted)
        if key not in self.kernel_of:
            self.kernel_of[key] = self.bind(wanted, value)
        return self.kernel_of[key]

    def bind(self, wanted: str, value: Any) -> str:
        """A name of the source (`wanted`, or one like it) that holds `value`."""
        name = self.names.claim(wanted)
        self.namespace[name] = value
        return name

    def operand(self, o: Any) -> str:
        return self.name_of[o] if isinstance(o, Value) else repr(o)

    def _param(self, node: Node, key: str, value: Any) -> str:
        if ((isinstance(value, _LITERAL) and not isinstance(value, np.generic))
                or _is_literal_tuple(value)):
            return repr(value)
        if isinstance(value, np.dtype):
            return f"dtype('{value.name}')"
        return self.bind(f"{key}{node.id}", value)  # anything else (index arrays) by name

    def body(self, graph: Graph, outputs: Sequence[Value] | None = None,
             bound: dict[Value, str] | None = None) -> tuple[list[Line], list[str]]:
        """The lines that compute `outputs` (default: the graph's) of `graph`, whose inputs are
        named as `bound` says, and the names of the results."""
        outputs = list(graph.outputs if outputs is None else outputs)
        self.name_of.update(bound or {})
        return self.lines(graph.live(outputs)[0], set(outputs)), [self.operand(v)
                                                                  for v in outputs]

    def lines(self, nodes: list[Node], kept: set[Value], before: Callable | None = None,
              after: Callable | None = None) -> list[Line]:
        """The lines that run `nodes`, letting go of each intermediate but those `kept` after
        its last use; ``before(node)`` and ``after(node)`` give lines to put around a node's
        (what the pieces of a graph on several devices send each other: `write_pieces`)."""
        # An intermediate is let go of (`del`) right after its last use, as eager mode's
        # temporaries are: the memory of a big tensor is reused at once instead of held to the
        # end.
        last_use = {o: node for node in nodes for o in node.inputs if isinstance(o, Value)}
        lines: list[Line] = []
        for node in nodes:
            lines += before(node) if before else []
            operands = [self.operand(o) for o in node.inputs]
            results = [self.name_of[v] for v in node.outputs]
            if subgraphs(node):
                lines += node.op.emit(self, node, operands, results)
            else:
                args = operands + [f"{k}={self._param(node, k, v)}"
                                   for k, v in node.params.items()] + self.out_argument(node)
                # (a fused kernel with several results returns a tuple of them)
                lines.append((0, f"{', '.join(results)} = {self.kernel_of[node.op]}"
                                 f"({', '.join(args)})", node))
            lines += after(node) if after else []
            done = [self.name_of[o] for o in dict.fromkeys(node.inputs) if isinstance(o, Value)
                    and last_use[o] is node and o.kind == "node" and o not in kept]
            if done:
                lines.append((0, f"del {', '.join(done)}", None))
        return lines


    def out_argument(self, node: Node) -> list[str]:
        """``out=slot0_v2`` (``out=(slot0_v2, slot1_v3)`` for several results) where the node
        writes into planned memory; nothing where it does not."""
        if not node.outputs or any(v not in self.out_of for v in node.outputs):
            return []
        if len(node.outputs) == 1:
            return [f"out={self.out_of[node.output]}"]
        return [f"out=({', '.join(self.out_of[v] for v in node.outputs)})"]


# Builtins that parameter values print as (``slice(0, 2, None)``, ``Ellipsis``).
_BUILTINS_IN_SOURCE = ("slice", "Ellipsis")


class _Names:
    """The names of one generated source, each used once. Python reads an identifier after
    normalising it (NFKC: ``ｖ3`` *is* ``v3``), so names are compared the way Python will."""

    def __init__(self, reserved: Sequence[str]) -> None:
        self._taken = {unicodedata.normalize("NFKC", n) for n in reserved}

    def claim(self, wanted: str) -> str:
        """`wanted` made a Python identifier (not a keyword), with ``_1``, ``_2``, ... until
        it is free."""
        base = unicodedata.normalize("NFKC", wanted)
        base = "".join(c if (f"a{c}").isidentifier() else "_" for c in base) or "arg"
        if not base.isidentifier():
            base = f"_{base}"
        if keyword.iskeyword(base) or keyword.issoftkeyword(base):
            base = f"{base}_"
        name, i = base, 1
        while name in self._taken:
            name, i = f"{base}_{i}", i + 1
        self._taken.add(name)
        return name


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}" + ("" if n == 1 else "s")


def _is_literal_tuple(value: Any) -> bool:
    return isinstance(value, tuple) and all(
        (isinstance(v, _LITERAL) and not isinstance(v, np.generic)) or _is_literal_tuple(v)
        for v in value)


def interpret(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Value] | None = None,
              on_node: Callable[[Node, Tensor], None] | None = None,
              input_values: Sequence[Value] | None = None,
              state: dict | None = None) -> list[Tensor]:
    """Run the graph one node at a time, each through `bind` (so eagerly, on the tape if an
    input is tracked). `on_node(node, result)` sees every intermediate result. An op that fails
    reports the line that created its node. The state the graph reads is read now, unless
    `state` gives it (by `Slot`)."""
    outputs = list(graph.outputs if outputs is None else outputs)
    input_values = graph.inputs if input_values is None else input_values
    env: dict[Value, Any] = dict(zip(input_values, inputs, strict=True))
    for v in graph.captures:
        env[v] = state[v.data] if state is not None else v.data.read(inputs)
    for v in graph.constants:
        backend = get_backend(v.spec.device)
        env[v] = Tensor._make(backend.asarray(v.data), backend, None)
    for node in graph.live(outputs)[0]:
        args = [env[o] if isinstance(o, Value) else o for o in node.inputs]
        with on_behalf_of(node.source), (no_grad() if node.no_grad else nullcontext()):
            if subgraphs(node):  # control flow: eagerly it runs its graphs, op by op
                result = node.op.rerun(args, node.params)
                env.update(zip(node.outputs, result, strict=True))
                if on_node is not None:
                    on_node(node, result)
                continue
            result = bind(node.op, *args, **node.params)
            if len(node.outputs) > 1:  # a fused kernel with several results
                env.update(zip(node.outputs, result, strict=True))
                if on_node is not None:
                    on_node(node, result)
                continue
            env[node.output] = result
        leaf = graph.leaf_values.get(node.output)
        if leaf is not None:  # an update of a leaf: the leaf, with its new values
            owner = leaf.tensor(inputs) if state is None else None
            if owner is not None and owner._node is not None:
                env[node.output] = result = Tensor._make(result._data, result._backend,
                                                              owner._node)
        if on_node is not None:
            on_node(node, result)
    return [env[v] for v in outputs]


def explain_failure(graph: Graph, inputs: Sequence[Tensor], outputs: Sequence[Value] | None = None,
                    input_values: Sequence[Value] | None = None) -> Exception:
    """The generated function failed: run the graph op by op, eagerly, so that the op that fails
    explains itself as it would have eagerly (op, operands, the line that created its node)."""
    try:
        with no_grad():
            interpret(graph, inputs, outputs, input_values=input_values)
    except TeachflowError as err:
        return err
    return TeachflowError("the graph failed to run, although every op of it runs on its own",
                          op=graph.name, hint="the original error is attached as __cause__")
