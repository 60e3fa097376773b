"""Fusion groups DAGs of elementwise work, never makes a cycle, and leaves nothing on the table.

Random programs (elementwise ops over broadcasting shapes, values read several times,
reductions, matmuls, shape changes, several outputs) are compiled with the fuse pass and
checked against eager NumPy, and the groups are checked against the rule of
`teachflow/passes/grouping.py`:

- every kernel's nodes are elementwise and of one shape (a reduction may end it), and its
  results are exactly its values needed outside;
- the kernels and the nodes left alone form a DAG (the graph is well formed, in order);
- fusion is *maximal*: where an elementwise node reads a value of its shape made by an
  elementwise node of another kernel, merging the two would make a cycle (there is a path of
  two steps or more between them), or the reader's kernel reads the reduction that ends the
  producer's (rule 4: what reads a reduction starts only when its whole kernel is done), or
  rule 3 keeps the reader out: a node outside read the producer's kernel before it, the
  reader's kernel writes a result that is not a reduction's (merged, it would be held from the
  producer's kernel on), and the value it reads is needed outside anyway (merging frees
  nothing). In ``h = tanh(x); y = h + h.sum(axis=1)`` the ``add`` reads ``h`` straight from
  the kernel of ``tanh`` and ``sum``, one step, and still cannot join it: it needs the
  finished sum.

On edge values (NaN, infinities, values no int32 holds, cast to it), the compiled function's
results and warnings are eager NumPy's.
"""

from __future__ import annotations

import operator
import warnings
from unittest import mock

import networkx as nx
import numpy as np
from helpers import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

import teachflow as tfl
from teachflow.graph import Graph, Value
from teachflow.kernels import numpy_renderer
from teachflow.passes.grouping import group_nodes, grouped_order

SHAPES = {"full": (6, 5), "row": (1, 5), "column": (6, 1)}
UNARY = ["tanh", "relu", "abs", "sigmoid", "exp"]
BINARY = ["add", "sub", "mul", "maximum"]


def _program(steps: list[tuple], every: bool = False) -> tuple:
    """A function of (x, r, c, w) doing `steps`; each step names the values it reads by index
    into the values so far (taken modulo their number). It returns three of them, or `every`
    one (then no node is dead, and each computes in the compiled function too)."""
    def f(x, r, c, w):
        values = [x, r, c]
        for kind, a, b in steps:
            u, v = values[a % len(values)], values[b % len(values)]
            if kind == "cast":  # (NaN, infinities and big values are not int32's)
                values.append(u.astype("int32").astype("float64") * 0.5)
            elif kind == "exp":
                values.append(u.tanh().exp())  # bounded: no overflow
            elif kind in UNARY:
                values.append(getattr(u, kind)())
            elif kind in BINARY:
                values.append(getattr(tfl, kind)(u, v) if kind == "maximum"
                              else getattr(operator, kind)(u, v))
            elif kind == "sum_rows" and u.ndim == 2:
                values.append(u.sum(axis=1, keepdims=True))
            elif kind == "mean":
                values.append(u.mean())
            elif kind == "matmul" and u.shape == SHAPES["full"]:
                values.append(u @ w)
            elif kind == "scale":
                values.append(u * 0.5 + 1.0)
        if every:
            return tuple(values)
        # Several results: the last value and two picked ones, so some groups have outputs
        # in the middle.
        return values[-1], values[len(values) // 2], values[(2 * len(values)) // 3]

    return f


STEP = st.tuples(st.sampled_from([*UNARY, *BINARY, *BINARY, "sum_rows", "mean", "matmul",
                                  "scale"]),
                 st.integers(0, 40), st.integers(0, 40))


def _inputs(seed: int, edges: bool = False) -> list:
    """Normal values; with `edges`, a third of them NaN, infinities or too big for int32."""
    rng = np.random.default_rng(seed)
    arrays = [rng.standard_normal(SHAPES[k]) for k in ("full", "row", "column")]
    if edges:
        arrays = [np.where(rng.random(a.shape) < 1 / 3, rng.choice(EDGES, a.shape), a)
                  for a in arrays]
    return [tfl.tensor(a) for a in arrays] + [tfl.tensor(rng.standard_normal((5, 5)))]


EDGES = np.array([np.nan, np.inf, -np.inf, 3e9, -1e300, 1e300])


def _units(graph: Graph) -> tuple[nx.DiGraph, dict[int, int]]:
    """The graph with each kernel as one node; and which unit each original node id is in."""
    unit_of: dict[int, int] = {}
    dag = nx.DiGraph()
    for node in graph.nodes:
        group = getattr(node.op, "group", None)
        for member in (group.members if group else (node,)):
            unit_of[member.id] = node.id
        dag.add_node(node.id)
        for o in node.inputs:
            if isinstance(o, Value) and o.producer is not None:
                dag.add_edge(o.producer.id, node.id)
    return dag, unit_of


def _long_path(dag: nx.DiGraph, a: int, b: int) -> bool:
    """True if `b` is reachable from `a` by a path of two or more edges."""
    return any(nx.has_path(dag, s, b) for s in dag.successors(a) if s != b)


def _reads_reduction(graph: Graph, first: int, then: int) -> bool:
    """True if the unit `then` reads the reduction that ends the kernel `first`."""
    by_id = {n.id: n for n in graph.nodes}
    group = getattr(by_id[first].op, "group", None)
    if group is None or group.reduction is None:
        return False
    reduced = by_id[first].outputs[-1]  # a kernel's reduction is its last result
    return any(o is reduced for o in by_id[then].inputs)


def _read_before(before: Graph, after: Graph, unit_of: dict[int, int], first: int,
                 then: int, value: Value) -> bool:
    """Rule 3: a node outside the kernel `first`, not a reduction, reads it before the unit
    `then` begins; the unit `then` writes a result that is not a reduction's; and `value`, of
    `first`, is read outside both (or returned), or made late itself (after such a reader)."""
    by_id = {n.id: n for n in after.nodes}
    at = {n.id: i for i, n in enumerate(before.nodes)}
    start = min(at[m] for m, unit in unit_of.items() if unit == then)
    made = {v.id for m, unit in unit_of.items() if unit == first for v in _node(before, m).outputs}
    reads = [at[n.id] for n in before.nodes if unit_of[n.id] != first and n.op.partials is None
             and any(isinstance(o, Value) and o.id in made for o in n.inputs)]
    group = getattr(by_id[then].op, "group", None)
    reduced = group.reduction.output.id if group is not None and group.reduction else None
    held = any(v.id != reduced for v in (group.outputs if group else by_id[then].outputs))
    others = [u for u in before.users().get(value, ()) if unit_of[u.id] not in (first, then)]
    needed = bool(others) or value in before.outputs or min(reads) < at[value.producer.id]
    return min(reads, default=start) < start and held and needed


def _node(graph: Graph, node_id: int):
    return next(n for n in graph.nodes if n.id == node_id)


def _check_groups(before: Graph, after: Graph) -> None:
    dag, unit_of = _units(after)
    assert nx.is_directed_acyclic_graph(dag)
    users = {v.id: [u.id for u in us] for v, us in before.users().items()}
    returned = {v.id for v in before.outputs}
    for node in after.nodes:
        group = getattr(node.op, "group", None)
        if group is None:
            continue
        shape = group.nodes[0].spec.shape
        assert all(n.op.elementwise and n.spec.shape == shape for n in group.nodes)
        members = {n.id for n in group.members}
        needed = {v.id for n in group.members for v in n.outputs
                  if v.id in returned or any(u not in members for u in users.get(v.id, ()))}
        last = group.members[-1].output.id  # an output even when nothing reads it
        assert {v.id for v in group.outputs} - {last} == needed - {last}
    for node in before.nodes:  # maximal: every edge left between kernels would close a cycle
        for o in node.inputs:
            producer = o.producer if isinstance(o, Value) else None
            if (producer is None or not producer.op.elementwise or not node.op.elementwise
                    or producer.spec.shape != node.spec.shape
                    or unit_of[producer.id] == unit_of[node.id]):
                continue
            first, then = unit_of[producer.id], unit_of[node.id]
            assert (_long_path(dag, first, then) or _reads_reduction(after, first, then)
                    or _read_before(before, after, unit_of, first, then, o)), (
                f"%{producer.id} and %{node.id} could fuse")


# h = tanh(x); return h + h.sum(axis=1), h, the sum: the add reads h from the kernel that
# sums it, one step, and reads the sum too (a random run found it while the property above
# knew only cycles as a reason to stop).
READS_THE_REDUCTION = [("tanh", 0, 0), ("sum_rows", 3, 0), ("tanh", 0, 0), ("add", 3, 4)]

# h = tanh(x); h @ w reads h first; then rule 3. h * x joins h's kernel, as do the exp and sub
# after it, for all of it ends in the sum (nothing of it is held)...
LATE_BUT_INSIDE = [("tanh", 0, 0), ("matmul", 3, 0), ("mul", 3, 0), ("exp", 5, 0),
                   ("sub", 6, 3), ("sum_rows", 7, 0), ("add", 8, 4), ("add", 9, 1),
                   *[("tanh", 10 + i, 0) for i in range(8)]]
# ... but h * 0.5 + 1.0, read by another matmul, does not: it would be held from h's kernel on.
LATE_AND_HELD = [("tanh", 0, 0), ("matmul", 3, 0), ("scale", 3, 0), ("matmul", 5, 0),
                 ("add", 6, 4), *[("tanh", 7 + i, 0) for i in range(8)]]


@settings(max_examples=examples(60))
@given(steps=st.lists(STEP, min_size=1, max_size=25), seed=st.integers(0, 2**16),
       block=st.sampled_from([numpy_renderer.BLOCK_ELEMENTS, 4, 7]))
@example(steps=READS_THE_REDUCTION, seed=0, block=4)
@example(steps=LATE_BUT_INSIDE, seed=0, block=4)
@example(steps=LATE_AND_HELD, seed=0, block=4)
def test_random_dags_fuse_into_kernels_that_compute_what_eager_does(steps, seed, block) -> None:
    f = _program(steps)
    args = _inputs(seed)
    with mock.patch.object(numpy_renderer, "BLOCK_ELEMENTS", block):  # several blocks, even small
        compiled = tfl.compile(f, *args, passes=["dce", "fuse"], verify=False)
        results = compiled(*args)
    _check_groups(compiled.snapshots[-2].graph, compiled.graph)
    want = [r.numpy() for r in f(*args)]
    for got, expected in zip(results, want, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


@settings(max_examples=60, deadline=None)
@given(steps=st.lists(st.tuples(st.sampled_from([*UNARY, *BINARY, "cast", "cast", "matmul",
                                                 "scale"]), st.integers(0, 40),
                                st.integers(0, 40)), min_size=1, max_size=25),
       seed=st.integers(0, 2**16), block=st.sampled_from([numpy_renderer.BLOCK_ELEMENTS, 4, 7]))
def test_random_dags_on_edge_values_give_eagers_results_and_warnings(steps, seed, block) -> None:
    """NaN, infinities and values no int32 holds, through elementwise work and casts: the
    compiled function (NumPy and C kernels, as each group suits) gives eager NumPy's results
    and its warnings. (Reductions of such values: test_fused_kernels.py, test_c_kernels.py.)"""
    f = _program(steps, every=True)
    args = _inputs(seed, edges=True)
    with mock.patch.object(numpy_renderer, "BLOCK_ELEMENTS", block), \
            warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        compiled = tfl.compile(f, *args, passes=["dce", "fuse"], verify=False)
        caught.clear()  # (tracing runs nothing, but say so)
        results = compiled(*args)
        said = {str(w.message) for w in caught}
        caught.clear()
        want = [r.numpy() for r in f(*args)]
        warned = {str(w.message) for w in caught}
    assert said == warned
    for got, expected in zip(results, want, strict=True):
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


def test_the_5000_op_chain_is_one_kernel() -> None:
    def chain(y):
        for _ in range(1250):
            y = (y * 1.5 + y).tanh() - y
        return y

    x = tfl.randn(3, 4)
    compiled = tfl.compile(chain, x, verify=False)
    (node,) = compiled.graph.nodes
    assert len(node.op.group.nodes) == 5000 and len(node.outputs) == 1
    np.testing.assert_allclose(compiled(x).numpy(), chain(x).numpy(), rtol=1e-5)


def _diamond(x, w):
    h = (x * 2.0 + 1.0).tanh()  # read by the matmul before the group's last node
    a = h * w
    b = (h @ w).relu()
    return a + b, h.sum()


def test_a_group_moves_before_a_node_that_reads_it_early() -> None:
    x, w = tfl.randn(4, 4), tfl.randn(4, 4)
    graph = tfl.trace(_diamond, x, w)
    groups = group_nodes(graph)
    order = grouped_order(graph, groups)
    first = next(g for g in groups if any(n.op.name == "tanh" for n in g.nodes))
    at = [order.index(n) for n in first.nodes]
    assert at == list(range(at[0], at[0] + len(at)))  # next to each other
    matmul = next(n for n in graph.nodes if n.op.name == "matmul")
    assert order.index(matmul) > at[-1]  # it reads h: after the kernel that makes h
    compiled = tfl.compile(_diamond, x, w)  # verified against the traced graph
    kernel = compiled.graph.nodes[0]
    assert len(kernel.outputs) == 3  # h (for the matmul), a (for the add) and h's sum


def test_each_kernel_says_why_it_stops() -> None:
    x, w = tfl.randn(4, 4), tfl.randn(4, 4)
    compiled = tfl.compile(_diamond, x, w)
    first, second = next(s for s in compiled.snapshots if s.pass_name == "fuse").changes
    assert "writes 3 results" in first.sentence
    assert "it ends in %9 sum, reduced as the values are computed" in first.sentence
    assert "matmul: not elementwise" in first.sentence
    assert "joining would make a cycle" in first.sentence
    assert "where the graph returns" in second.sentence

    def shapes(x):
        column = x.sum(axis=1, keepdims=True).tanh() * 2.0  # (4, 1)
        return (column + x).exp()  # (4, 4): a kernel of its own

    compiled = tfl.compile(shapes, x)
    fuse = next(s for s in compiled.snapshots if s.pass_name == "fuse")
    assert any("another shape" in c.sentence for c in fuse.changes)


def test_a_reduction_joins_its_operands_group_and_ends_it() -> None:
    """A reduction of a group's value joins the group, whatever else needs its values (they
    are its other outputs); one reduction per group, the first; what reads the reduction stays
    outside (it can start only when the whole kernel is done)."""
    def alone(x):
        return (x * 2.0).tanh().sum()

    def shared(x):
        h = (x * 2.0).tanh()
        return h.sum(), h * 3.0

    def two(x):
        h = (x * 2.0).tanh()
        return h.sum(axis=1), h.max(axis=0)

    def centred(x):
        h = (x * 2.0).tanh()
        return h - h.mean()

    x = tfl.randn(4, 5)
    (kernel,) = tfl.compile(alone, x).graph.nodes
    assert kernel.op.group.reduction is not None and len(kernel.outputs) == 1
    for f, ops, outputs in ((shared, ["fused_k1"], 2), (two, ["fused_k1", "max"], 2),
                            (centred, ["fused_k1", "sub"], 2)):
        compiled = tfl.compile(f, x)
        assert [n.op.name for n in compiled.graph.nodes] == ops, str(compiled.graph)
        kernel = compiled.graph.nodes[0]
        assert kernel.op.group.reduction is not None and len(kernel.outputs) == outputs
        assert kernel.outputs[-1].spec == kernel.op.group.reduction.spec
        got, want = compiled(x), f(x)
        got, want = (got, want) if isinstance(want, tuple) else ((got,), (want,))
        for a, b in zip(got, want, strict=True):
            np.testing.assert_allclose(a.numpy(), b.numpy(), rtol=1e-5, atol=1e-6)
    snapshots = tfl.compile(centred, x).snapshots
    sentence = next(s for s in snapshots if s.pass_name == "fuse").changes[0].sentence
    assert "%4 sub: it reads the reduction, done only when the kernel is" in sentence, sentence
    assert "cycle" not in sentence, sentence  # it reads h too, but the sum is why it waits


def test_a_multi_output_kernel_runs_in_blocks_and_in_the_stepper_values() -> None:
    def f(x):
        h = (x * 2.0 + 1.0).tanh()
        return h, (h * x).exp() - h

    x = tfl.randn(300, 500)
    compiled = tfl.compile(f, x)
    (kernel,) = compiled.graph.nodes
    assert len(kernel.outputs) == 2
    source = kernel.op.numpy_source
    assert "out0, out1 = out" in source and "in_blocks(" in source
    for got, want in zip(compiled(x), f(x), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
    out = (np.empty((300, 500), np.float32), np.empty((300, 500), np.float32))
    run = kernel.op.kernel(np)
    assert run(x.numpy(), out=out) is out
    np.testing.assert_allclose(out[1], f(x)[1].numpy(), rtol=1e-6)
    from teachflow.viz.values import stage_values
    values, _ = stage_values(compiled.graph, [x], {})
    assert all(v.id in values for v in kernel.outputs)


def test_a_broadcast_into_a_bigger_result_is_a_kernel_of_its_own() -> None:
    """Rule 6: one node that writes more elements than it reads (an outer product) gets a
    kernel; one that writes no more (same shapes, a row added to every row) stays as it is."""
    x, y = tfl.randn(300), tfl.randn(200)
    compiled = tfl.compile(lambda x, y: x.reshape(300, 1) * y.reshape(1, 200), x, y)
    fused = [n for n in compiled.graph.nodes if hasattr(n.op, "group")]
    assert [[m.op.name for m in n.op.group.members] for n in fused] == [["mul"]]
    change, = next(s for s in compiled.snapshots if s.pass_name == "fuse").changes
    assert change.rule == "a broadcast into a bigger result -> a kernel of its own"
    assert "writes more elements than it reads" in change.sentence
    np.testing.assert_array_equal(compiled(x, y).numpy(),
                                  np.multiply.outer(x.numpy(), y.numpy()))

    a, b, row = tfl.randn(300, 200), tfl.randn(300, 200), tfl.randn(200)
    for f in (lambda a, b, row: a * b, lambda a, b, row: a + row):
        graph = tfl.compile(f, a, b, row).graph
        assert not group_nodes(graph)
        assert not any(hasattr(n.op, "group") for n in graph.nodes)
