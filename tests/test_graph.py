"""The graph IR: its text form, its networkx view, its verifier, and the node-by-node interpreter.

A graph prints the way a learner writes maths (``%3 = mul %1, %2 : f32[4,4]   # file.py:12``),
ids are deterministic so two traces of one function print the same, `to_networkx` hands it to
networkx with every attribute a drawing needs, and `verify` accepts what tracing produces and
rejects every kind of broken graph a hand-written pass could produce, with a `GraphError`.
"""

from __future__ import annotations

import os
import re

import networkx as nx
import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.backends import CPU
from teachflow.execution.executor import generate, interpret
from teachflow.graph import Value
from teachflow.ops import OPS

HERE = os.path.basename(__file__)
F32 = np.dtype(np.float32)

WEIGHT = tfl.ones(3, 3)
BIAS = np.zeros(3, dtype=np.float32)


def _layer(x):
    h = (x @ WEIGHT + BIAS).relu()
    return h.sum(axis=1, keepdims=True) * 2.0


def _squash(x):
    return x.transpose(1, 0)[0:2] * 3


def traced_layer() -> tfl.Graph:
    return tfl.trace(_layer, tfl.ones(4, 3))


def spec(*shape: int) -> tfl.TensorSpec:
    return tfl.TensorSpec(shape, F32)


def squeeze_spaces(line: str) -> str:
    return re.sub(r" {2,}", " ", line.strip())


# --- Text form ---------------------------------------------------------------------------------


def test_the_text_form_prints_one_node_per_line() -> None:
    line = _layer.__code__.co_firstlineno
    assert [squeeze_spaces(s) for s in str(traced_layer()).splitlines()] == [
        "graph _layer(%x: f32[4,3]) {",
        "%WEIGHT = capture f32[3,3]",  # named as the code that used it names it
        "%3 = const [0.0, 0.0, 0.0] : f32[3]",  # a small constant shows its values
        f"%2 = matmul %x, %WEIGHT : f32[4,3] # {HERE}:{line + 1}",
        f"%4 = add %2, %3 : f32[4,3] # {HERE}:{line + 1}",
        f"%5 = relu %4 : f32[4,3] # {HERE}:{line + 1}",
        f"%6 = sum %5 {{axis=(1,), keepdims=True}} : f32[4,1] # {HERE}:{line + 2}",
        f"%7 = mul %6, 2.0 : f32[4,1] # {HERE}:{line + 2}",
        "return %7",
        "}",
    ]


def test_a_graph_built_by_hand_prints_without_a_name_or_an_empty_return() -> None:
    with tfl.Graph() as g:
        x = tfl.placeholder((None, 3), name="x")
        (x * 2).sum(axis=1)
    lines = str(g).splitlines()
    assert lines[0] == "graph(%x: f32[?,3]) {"  # not "graph graph(...)"
    assert not any(line.strip().startswith("return") for line in lines)  # fetched when run


def test_small_constants_print_their_values_and_big_ones_their_type() -> None:
    small = tfl.compile(lambda x: x * 0 + tfl.full((), 2) * 3, tfl.tensor([2, 3, 4])).graph
    assert "const [6, 6, 6] : i64[3]" in str(small)
    big = tfl.trace(lambda x: x + np.zeros(100, np.float32), tfl.ones(100))
    assert re.search(r"= const f32\[100\]$", str(big), re.M)


def test_the_text_form_lines_up_its_source_comments() -> None:
    lines = [line for line in str(traced_layer()).splitlines() if "#" in line]
    assert len(lines) == 5
    assert len({line.index("#") for line in lines}) == 1


def test_every_node_line_has_the_documented_shape() -> None:
    pattern = re.compile(r"^  %(\w+) = ([a-z_]+)( .*?)? : (f32|i64|bool)\[[\d,?]*\]\s+"
                         rf"# {re.escape(HERE)}:\d+$")
    graph = tfl.trace(_squash, tfl.ones(3, 4))
    node_lines = str(graph).splitlines()[1:-2]
    assert len(node_lines) == len(graph.nodes) == 3
    for node, line in zip(graph.nodes, node_lines, strict=True):
        match = pattern.match(line)
        assert match, line
        assert match.group(1) == str(node.id) and match.group(2) == node.op.name
    assert "{axes=(1, 0)}" in node_lines[0]
    assert "{index=(0:2,)}" in node_lines[1]


def test_the_text_form_of_a_graph_with_several_outputs_and_literals() -> None:
    graph = tfl.trace(lambda a, b: (a - b, a * True, -a), tfl.ones(2), tfl.ones(2))
    text = str(graph)
    assert "sub %a, %b : f32[2]" in text
    assert "mul %a, True : f32[2]" in text
    assert "neg %a : f32[2]" in text
    assert text.splitlines()[-2].strip() == "return %2, %3, %4"


def test_node_ids_are_deterministic() -> None:
    assert str(traced_layer()) == str(traced_layer())
    graph = traced_layer()
    ids = [v.id for v in graph.values()]
    assert sorted(ids) == list(range(len(ids)))  # 0, 1, 2, ... in the order values were made
    assert [n.id for n in graph.nodes] == sorted(n.id for n in graph.nodes)


# --- networkx -----------------------------------------------------------------------------------


def test_to_networkx_carries_op_shape_dtype_and_source() -> None:
    graph = traced_layer()
    g = graph.to_networkx()
    assert isinstance(g, nx.DiGraph)
    assert g.number_of_nodes() == (len(graph.inputs) + len(graph.captures)
                                   + len(graph.constants) + len(graph.nodes))
    for _, data in g.nodes(data=True):
        assert {"op", "shape", "dtype", "source"} <= set(data)
    line = _layer.__code__.co_firstlineno
    x, w, b = graph.inputs[0], graph.captures[0], graph.constants[0]
    assert g.nodes[x.id]["op"] == "input" and g.nodes[x.id]["shape"] == (4, 3)
    assert g.nodes[w.id]["op"] == "capture"
    assert g.nodes[b.id]["op"] == "const"
    assert g.nodes[x.id]["dtype"] == "float32"
    for node in graph.nodes:
        data = g.nodes[node.id]
        assert data["op"] == node.op.name
        assert data["shape"] == node.spec.shape
        assert data["source"] in (f"{HERE}:{line + 1}", f"{HERE}:{line + 2}")
    assert nx.is_directed_acyclic_graph(g)


def test_to_networkx_edges_carry_the_operand_index() -> None:
    graph = traced_layer()
    g = graph.to_networkx()
    expected = {(o.id, n.id): i for n in graph.nodes for i, o in enumerate(n.inputs)
                if isinstance(o, Value)}
    assert {(u, v): d["index"] for u, v, d in g.edges(data=True)} == expected
    matmul = graph.nodes[0]
    assert g.edges[graph.inputs[0].id, matmul.id]["index"] == 0
    assert g.edges[graph.captures[0].id, matmul.id]["index"] == 1


def test_networkx_topological_order_agrees_with_the_node_order() -> None:
    graph = traced_layer()
    order = list(nx.topological_sort(graph.to_networkx()))
    positions = {node_id: i for i, node_id in enumerate(order)}
    node_ids = [n.id for n in graph.nodes]
    assert [positions[i] for i in node_ids] == sorted(positions[i] for i in node_ids)


# --- The verifier accepts good graphs ----------------------------------------------------------


@pytest.mark.parametrize("fn, args", [
    (_layer, (tfl.ones(4, 3),)),
    (_squash, (tfl.ones(3, 4),)),
    (lambda x: tfl.softmax(x, axis=-1).log(), (tfl.ones(2, 5),)),
    (lambda x: tfl.where(x > 0, x, tfl.zeros(3)), (tfl.ones(3),)),
    (lambda x: tfl.concatenate([x, x * 2]).max(), (tfl.ones(3),)),
])
def test_traced_graphs_verify(fn, args) -> None:
    graph = tfl.trace(fn, *args)
    assert graph.verify() is None


def hand_built() -> tuple[tfl.Graph, Value, Value]:
    """``out = (x * y) + 1`` built by hand, node by node."""
    graph = tfl.Graph("hand")
    x = graph.add_input(spec(3), name="x")
    y = graph.add_input(spec(3), name="y")
    prod = graph.add_node(OPS["mul"], (x, y), {}, spec(3), None)
    total = graph.add_node(OPS["add"], (prod.output, 1.0), {}, spec(3), None)
    graph.outputs = [total.output]
    return graph, x, y


def test_a_hand_built_graph_verifies_and_runs() -> None:
    graph, _, _ = hand_built()
    graph.verify()
    assert "%3 = add %2, 1.0 : f32[3]" in str(graph)
    x, y = np.array([1.0, 2.0, 3.0], np.float32), np.array([2.0, 2.0, 2.0], np.float32)
    (out,) = generate(graph, CPU)(x, y)
    np.testing.assert_allclose(out, [3.0, 5.0, 7.0])


# --- ... and rejects broken ones ---------------------------------------------------------------


def test_use_before_define_is_rejected() -> None:
    graph = traced_layer()
    graph.nodes[0], graph.nodes[1] = graph.nodes[1], graph.nodes[0]
    with pytest.raises(tfl.GraphError, match="before it is defined"):
        graph.verify()


def test_an_operand_that_was_never_defined_is_rejected() -> None:
    graph, _, _ = hand_built()
    stray = Value(99, spec(3), "node")
    graph.nodes[1].inputs = (stray, 1.0)
    with pytest.raises(tfl.GraphError, match="%99 before it is defined"):
        graph.verify()


def test_a_recorded_spec_that_disagrees_with_the_shape_rule_is_rejected() -> None:
    graph = tfl.Graph("wrong_spec")
    x = graph.add_input(spec(3, 4), name="x")
    node = graph.add_node(OPS["sum"], (x,), {"axis": (1,), "keepdims": False}, spec(4), None)
    graph.outputs = [node.output]
    with pytest.raises(tfl.GraphError, match=r"records f32\[4\] but sum .* gives f32\[3\]"):
        graph.verify()


def test_a_recorded_dtype_that_disagrees_is_rejected() -> None:
    graph, _, _ = hand_built()
    graph.nodes[0].output.spec = tfl.TensorSpec((3,), np.float64)
    with pytest.raises(tfl.GraphError, match="records f64"):
        graph.verify()


def test_an_op_that_rejects_its_operands_is_rejected() -> None:
    graph = tfl.Graph("bad_operands")
    a = graph.add_input(spec(3), name="a")
    b = graph.add_input(spec(4), name="b")
    node = graph.add_node(OPS["add"], (a, b), {}, spec(3), None)
    graph.outputs = [node.output]
    with pytest.raises(tfl.GraphError, match="rejects its operands"):
        graph.verify()


@pytest.mark.parametrize("where", ["input", "node", "capture"])
def test_a_value_defined_twice_is_rejected(where: str) -> None:
    graph = traced_layer()
    if where == "input":
        graph.inputs.append(graph.inputs[0])
    elif where == "node":
        graph.nodes.append(graph.nodes[-1])
    else:
        graph.captures.append(graph.captures[0])
    with pytest.raises(tfl.GraphError, match="defined twice"):
        graph.verify()


def test_an_output_not_in_the_graph_is_rejected() -> None:
    graph, _, _ = hand_built()
    graph.outputs = [Value(42, spec(3), "node")]
    with pytest.raises(tfl.GraphError, match="output %42 is not defined"):
        graph.verify()


def test_a_dropped_node_whose_value_is_still_an_output_is_rejected() -> None:
    graph = traced_layer()
    graph.nodes.pop()  # a pass removed the last node but forgot the outputs
    with pytest.raises(tfl.GraphError, match="not defined"):
        graph.verify()


def test_an_output_from_another_graph_is_rejected() -> None:
    graph, other = traced_layer(), traced_layer()
    graph.outputs = [other.outputs[0]]
    with pytest.raises(tfl.GraphError):
        graph.verify()


def test_an_operand_from_another_graph_is_rejected() -> None:
    graph, other = traced_layer(), traced_layer()
    relu = graph.nodes[2]
    relu.inputs = (other.nodes[1].output,)
    with pytest.raises(tfl.GraphError):
        graph.verify()


@pytest.mark.parametrize("operand", ["two", np.ones(3, np.float32), None, [1.0, 2.0, 3.0]],
                         ids=["str", "ndarray", "None", "list"])
def test_an_operand_of_a_bad_type_is_rejected(operand) -> None:
    graph, x, _ = hand_built()
    graph.nodes[0].inputs = (x, operand)
    with pytest.raises(tfl.GraphError, match=f"operand of type {type(operand).__name__}"):
        graph.verify()


def test_a_node_that_is_not_its_outputs_producer_is_rejected() -> None:
    graph, _, _ = hand_built()
    graph.nodes[1].output.producer = graph.nodes[0]
    with pytest.raises(tfl.GraphError, match="producer"):
        graph.verify()


def test_a_graph_error_is_a_teachflow_error_naming_the_users_line() -> None:
    graph = traced_layer()
    graph.nodes[0].output.spec = spec(9, 9)
    with pytest.raises(tfl.TeachflowError) as info:
        graph.verify()
    assert isinstance(info.value, tfl.GraphError)
    assert info.value.op == "verify"
    assert info.value.location.lineno == _layer.__code__.co_firstlineno + 1


# --- interpret: node by node --------------------------------------------------------------------


def test_interpret_sees_every_intermediate_and_matches_the_generated_executor() -> None:
    graph = traced_layer()
    x = tfl.tensor(np.arange(12, dtype=np.float32).reshape(4, 3) - 6)
    seen = []
    (out,) = interpret(graph, [x], on_node=lambda node, value: seen.append((node, value)))
    assert [node for node, _ in seen] == graph.nodes
    assert all(isinstance(value, tfl.Tensor) for _, value in seen)
    assert [value.shape for _, value in seen] == [n.spec.shape for n in graph.nodes]

    # The generated executor, asked for every intermediate, computes the same values.
    every = generate(graph, CPU, outputs=[n.output for n in graph.nodes])
    intermediates = every(x.numpy(), WEIGHT.numpy())
    for (node, value), array in zip(seen, intermediates, strict=True):
        np.testing.assert_allclose(value.numpy(), array, err_msg=node.op.name)
    np.testing.assert_allclose(out.numpy(), generate(graph, CPU)(x.numpy(), WEIGHT.numpy())[0])
    np.testing.assert_allclose(out.numpy(), _layer(x).numpy())


def test_interpret_runs_only_the_nodes_the_outputs_need() -> None:
    def wasteful(x):
        x.exp()
        return x * 2

    graph = tfl.trace(wasteful, tfl.ones(3))
    seen = []
    interpret(graph, [tfl.ones(3)], on_node=lambda node, value: seen.append(node.op.name))
    assert seen == ["mul"]
    seen.clear()
    interpret(graph, [tfl.ones(3)], outputs=[graph.nodes[0].output],
              on_node=lambda node, value: seen.append(node.op.name))
    assert seen == ["exp"]


def test_interpret_records_on_the_tape_for_tracked_inputs() -> None:
    graph = tfl.trace(lambda x: (x * x).sum(), tfl.ones(3))
    x = tfl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (out,) = interpret(graph, [x])
    out.backward()
    np.testing.assert_allclose(x.grad.numpy(), [2.0, 4.0, 6.0])


def test_a_constant_prints_its_values_as_its_dtype_writes_them() -> None:
    """A float32 0.3 is 0.3 (not 0.30000001192092896), a constant or a scalar operand; nested
    rows keep their brackets."""
    graph = tfl.trace(lambda x: x * np.float32(0.3) + np.array([[0.1, 0.2]], np.float32),
                      tfl.ones(1, 2))
    text = str(graph)
    assert "mul %x, 0.3 :" in text and "const [[0.1, 0.2]] : f32[1,2]" in text
    assert "0.300000" not in text
    assert "const [True, False] : bool[2]" in str(
        tfl.trace(lambda x: x * np.array([True, False]), tfl.ones(2)))


def test_parameters_at_their_defaults_are_left_out_as_the_maths_would() -> None:
    text = str(tfl.trace(lambda x: x.exp().mean() + x.sum(axis=0).max(keepdims=True).sum(),
                         tfl.ones(2, 3)))
    assert re.search(r"= mean %\d+ : f32\[\]", text)  # not {axis=None, keepdims=False}
    assert "sum %x {axis=(0,)} : f32[3]" in text
    assert re.search(r"= max %\d+ \{keepdims=True\} : f32\[1\]", text)


def test_a_fused_node_prints_with_the_body_it_computes() -> None:
    staged = tfl.function(lambda x: x.relu() + 1.0)
    lines = str(staged.get_concrete_function(tfl.ones(3)).graph).splitlines()
    at = next(i for i, line in enumerate(lines) if "= fused_k1 %x : f32[3]" in line)
    assert re.fullmatch(r"  \{ %\d+ = relu %x : f32\[3\]", lines[at + 1])
    assert re.fullmatch(r"    %\d+ = add %\d+, 1\.0 : f32\[3\] \}", lines[at + 2])
