"""Running a graph cut across devices: each device's piece on its own thread, at once.

After the pass `partition`, a graph on several devices is one piece per device, joined by
``copy`` nodes. `executor_for` writes the executor of any graph: on one device, the executor's
one function (`teachflow.execution.executor.generate`); on several, one function per piece, in
the same way, and one that runs them all at the same time: the piece of the call's own device in
the caller's thread, every other on its device's worker (`Backend.worker`), as TensorFlow runs
each device's partition. NumPy lets go of Python's lock inside a big kernel, so two matrix
products on ``cpu`` and ``cpu:1`` really run side by side (``bench/devices.py`` measures it).

The pieces talk through one `Mail` per call: a piece *puts* each value another piece reads
(``mail.put(4, v4)``) as soon as it has it, and the piece that reads it *takes* it
(``v4 = mail.take(4)``), waiting until it has come. Each piece runs its nodes in one order
shared by all (`soonest_first`: a piece computes what it can before it waits), so every value a
piece waits for is made by nodes earlier in that order: the pieces never wait for each other in
a circle. When a piece fails, every piece waiting for a value is
woken with the failure, and the call raises the first error.

    def f_on_cpu_1(mail, x, y):
        v8 = copy(x, src='cpu', dst='cpu:1')
        v4 = matmul(v8, v8)
        mail.put(4, v4)
"""

from __future__ import annotations

import heapq
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from concurrent.futures import wait as wait_for
from typing import Any

from teachflow.core.backends import Backend, get_backend
from teachflow.execution.executor import Executor, Line, Source, generate
from teachflow.graph import Graph, Node, Value


class PieceFailed(Exception):
    """Another piece of the call failed: the value waited for will never come."""


class Mail:
    """The values the pieces of one call send each other, by value id."""

    def __init__(self) -> None:
        self._boxes: dict[int, Future] = {}
        self._lock = threading.Lock()
        self.error: BaseException | None = None

    def _box(self, key: int) -> Future:
        with self._lock:
            box = self._boxes.get(key)
            if box is None:
                box = self._boxes[key] = Future()
                if self.error is not None:
                    box.set_exception(PieceFailed())
            return box

    def put(self, key: int, array: Any) -> None:
        self._box(key).set_result(array)

    def take(self, key: int) -> Any:
        """The value, once the piece that makes it has put it."""
        return self._box(key).result()

    def fail(self, error: BaseException) -> None:
        """A piece failed: keep its error (the first one), and wake every piece waiting."""
        with self._lock:
            if self.error is None:
                self.error = error
            for box in self._boxes.values():
                if not box.done():
                    box.set_exception(PieceFailed())


#: A piece as the executor wrote it: ``piece(mail, *arrays)``.
Piece = Callable[..., None]


class Pieces:
    """A call of a graph's pieces: ``pieces(*arrays)`` runs them, each on its device, and
    returns the values of `keys` (the graph's outputs that nodes make). `ran` says which thread
    ran each device's piece last (the caller's for `home`'s, else that device's worker)."""

    def __init__(self, home: Backend, pieces: list[tuple[Backend, Piece]],
                 keys: list[int]) -> None:
        self.home = next((p for b, p in pieces if b is home), None)
        self.others = [(b, p) for b, p in pieces if b is not home]
        self.keys = keys
        self.ran: dict[str, str] = {}
        self._home_name = home.name

    def __call__(self, *arrays: Any) -> tuple:
        mail = Mail()
        running = [backend.worker.submit(self._run, backend.name, piece, mail, arrays)
                   for backend, piece in self.others]
        if self.home is not None:
            try:
                self._run(self._home_name, self.home, mail, arrays)
            except BaseException:
                wait_for(running)
                raise mail.error from None
        wait_for(running)
        if mail.error is not None:
            raise mail.error
        return tuple(mail.take(k) for k in self.keys)

    def _run(self, device: str, piece: Piece, mail: Mail, arrays: tuple) -> None:
        self.ran[device] = threading.current_thread().name
        try:
            piece(mail, *arrays)
        except BaseException as exc:
            mail.fail(exc)
            raise


# --- Writing the pieces ---------------------------------------------------------------------------


def executor_for(graph: Graph, backend: Backend, outputs: Sequence[Value] | None = None,
                 inputs: Sequence[Value] | None = None) -> Executor:
    """The executor of `graph`, called on `backend`'s arrays: one function on one device; on
    several, a function per device's piece and one that runs them (`Pieces`)."""
    outputs = list(graph.outputs if outputs is None else outputs)
    inputs = list(graph.inputs if inputs is None else inputs)
    nodes, used = graph.live(outputs)
    if len({node.spec.device for node in nodes}) < 2:
        return generate(graph, backend, outputs, inputs)
    captures = [v for v in graph.captures if v in used]
    source = Source(backend)
    source.name_nodes([], graph.constants)
    made = [v for v in dict.fromkeys(outputs) if v.kind == "node"]
    source.name_of.update({v: source.names.claim(f"v{v.id}") for v in made})
    source.name_arguments(inputs, captures)
    params = [source.name_of[v] for v in [*inputs, *captures]]
    texts, pieces = write_pieces(graph, backend, nodes, made, [*inputs, *captures])
    results = ", ".join(source.name_of[v] for v in made) + ("," if len(made) == 1 else "")
    body = [(0, f"{results} = {source.bind('pieces', pieces)}({', '.join(params)})", None)]
    returned = [source.operand(v) for v in outputs]
    returned_text = ", ".join(returned) + ("," if len(outputs) == 1 else "")
    text, fn = source.define(source.function_name(graph.name), params,
                             [*body, (0, f"return ({returned_text})", None)])
    return Executor("\n".join([*texts, text]), fn, captures, source, params, body, returned,
                    pieces)


def write_pieces(graph: Graph, home: Backend, nodes: list[Node], made: list[Value],
                 arguments: list[Value]) -> tuple[list[str], Pieces]:
    """The functions that run `nodes`, one per device, each putting in the call's mail the
    values other pieces read or the call returns (`made`), and taking those it reads from
    other pieces: their sources, and what runs them."""
    nodes = soonest_first(nodes)
    where = {v: node.spec.device for node in nodes for v in node.outputs}
    crossing = {o for node in nodes for o in node.inputs
                if isinstance(o, Value) and o in where and where[o] != node.spec.device}
    sent = crossing | set(made)
    texts, pieces = [], []
    for device in dict.fromkeys(node.spec.device for node in nodes):
        mine = [node for node in nodes if node.spec.device == device]
        source = Source(get_backend(device))
        source.name_nodes(mine, graph.constants)
        waiting = {v for v in crossing if where[v] != device}
        source.name_of.update({v: source.names.claim(f"v{v.id}") for v in waiting})
        mail = source.names.claim("mail")
        source.name_arguments(arguments, [])

        def take(node: Node, source: Source = source, mail: str = mail,
                 waiting: set = waiting) -> list[Line]:
            wanted = [o for o in dict.fromkeys(node.inputs) if o in waiting]
            waiting.difference_update(wanted)
            return [(0, f"{source.name_of[o]} = {mail}.take({o.id})  # from {where[o]}", None)
                    for o in wanted]

        def put(node: Node, source: Source = source, mail: str = mail) -> list[Line]:
            return [(0, f"{mail}.put({v.id}, {source.name_of[v]})", None)
                    for v in node.outputs if v in sent]

        lines = source.lines(mine, set(), take, put)
        text, fn = source.define(source.function_name(graph.name, device),
                                 [mail, *(source.name_of[v] for v in arguments)], lines)
        texts.append(text)
        pieces.append((source.backend, fn))
    return texts, Pieces(home, pieces, [v.id for v in made])


def soonest_first(nodes: list[Node]) -> list[Node]:
    """`nodes` in an order in which each piece computes what it can before it waits: a
    topological order that takes a node reading a value from another device only when no other
    is ready (the graph's order would have a piece wait for ``a.to("cpu")`` before it computes
    its own branch). One order for all the pieces, each running its own nodes in it: no two
    pieces ever wait for each other."""
    made_by = {v: node for node in nodes for v in node.outputs}
    needs = {node: {made_by[o] for o in node.inputs if isinstance(o, Value) and o in made_by}
             for node in nodes}
    users: dict[Node, list[Node]] = {node: [] for node in nodes}
    for node, earlier in needs.items():
        for e in earlier:
            users[e].append(node)
    waits = {node: any(e.spec.device != node.spec.device for e in needs[node]) for node in nodes}
    position = {node: i for i, node in enumerate(nodes)}
    left = {node: len(needs[node]) for node in nodes}
    ready = [(waits[n], position[n]) for n in nodes if not left[n]]
    heapq.heapify(ready)
    order = []
    while ready:
        node = nodes[heapq.heappop(ready)[1]]
        order.append(node)
        for user in users[node]:
            left[user] -= 1
            if not left[user]:
                heapq.heappush(ready, (waits[user], position[user]))
    return order
