"""A model's modules in its graph: each node records the module that made it (its scope, as
TensorBoard's name scopes), passes keep it, and the stepper's data draws each as a box."""

from __future__ import annotations

from stepper_cases import modules_step

import teachflow as tfl
from teachflow import nn
from teachflow.core import errors
from teachflow.viz.expand import expand
from teachflow.viz.groups import collapsed, layout_grouped
from teachflow.viz.stepper_data import compilation_data
from teachflow.viz.svg import graph_svg


class MLP(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.hidden = nn.Linear(4, 8)
        self.out = nn.Linear(8, 2)

    def forward(self, x):
        return self.out(self.hidden(x).relu())


def scopes(graph) -> dict[str, str]:
    """Each node's op and id, and the scope it was made in."""
    return {f"%{n.id} {n.op.name}": n.source.scope for n in graph.nodes}


def test_a_traced_node_records_the_modules_whose_forward_made_it() -> None:
    model = nn.Sequential(nn.Linear(3, 4), nn.ReLU(), nn.Linear(4, 2))
    graph = tfl.trace(lambda x: model(x).sum(), tfl.randn(5, 3))
    made = scopes(graph)
    assert [s for name, s in made.items() if "matmul" in name] == [
        "Sequential/0:Linear", "Sequential/2:Linear"]
    assert [s for name, s in made.items() if "relu" in name] == ["Sequential/1:ReLU"]
    assert [s for name, s in made.items() if "sum" in name] == [""]  # outside the model
    mlp = MLP()
    inner = scopes(tfl.trace(mlp, tfl.randn(5, 4)))
    assert set(inner.values()) == {"MLP/hidden:Linear", "MLP", "MLP/out:Linear"}  # relu: MLP's
    assert errors._scope == ""  # (nothing left behind)


def test_a_gradient_an_optimizer_and_a_loss_have_scopes_of_their_own() -> None:
    compilation = modules_step()
    made = set(scopes(compilation.snapshots[0].graph).values())
    assert {"Sequential/0:Linear", "gradients/Sequential/0:Linear", "mse_loss",
            "gradients/mse_loss", "SGD"} <= made
    assert not any(s.startswith("gradients/gradients") for s in made)


def test_an_eager_error_inside_a_module_still_names_the_users_line() -> None:
    model = nn.Sequential(nn.Linear(3, 4))
    try:
        model(tfl.randn(2, 5))
    except tfl.ShapeError as err:
        assert err.location.filename == __file__ and err.location.scope == "Sequential/0:Linear"
    else:
        raise AssertionError("a (2, 5) input to Linear(3, 4) must fail")
    assert errors._scope == ""


def test_passes_keep_each_nodes_scope_from_what_it_stands_for() -> None:
    compilation = modules_step()
    traced = {n.id: n.source.scope for n in compilation.snapshots[0].graph.nodes}
    for snap in compilation.snapshots[1:]:
        for node in snap.graph.nodes:
            origins = {traced[i] for i in node.lineage if i in traced}
            if origins:  # (a new constant, folded, stands for nodes too)
                assert node.source.scope in origins, (snap.pass_name, node)
    fused = [n for n in compilation.graph.nodes if n.op.name.startswith("fused")]
    assert fused and all(n.source.scope for n in fused)


def test_the_stepper_data_sends_each_nodes_scope_and_each_stages_boxes() -> None:
    compilation = modules_step()
    data = compilation_data(compilation, compilation.example_inputs)
    stages = expand(data)
    trace = stages[0]
    boxes = {g["scope"]: g for g in trace["groups"]}
    assert {"Sequential", "Sequential/0:Linear", "Sequential/1:ReLU", "Sequential/2:Linear",
            "gradients", "gradients/Sequential", "mse_loss", "SGD"} <= set(boxes)
    assert all(g["id"] < 0 for g in boxes.values())
    ids = {g["scope"]: g["id"] for g in trace["groups"]}
    for stage in stages:  # a box keeps its id from stage to stage
        assert all(ids.get(g["scope"], g["id"]) == g["id"] for g in stage["groups"])
    by_id = {n["id"]: n for n in trace["nodes"]}
    for node in compilation.snapshots[0].graph.nodes:
        assert by_id[node.id]["scope"] == node.source.scope
    # A weight goes in the box of the first op that reads it: a layer's in the layer's, a
    # momentum buffer in the optimizer's; an input stays outside.
    captures = {n["label"]: n["scope"] for n in trace["nodes"] if n["kind"] == "capture"}
    assert captures["%model.0.weight (capture)"] == "Sequential/0:Linear"
    assert captures["%model.2.bias (capture)"] == "Sequential/2:Linear"
    assert captures["%opt.state[0]['momentum_buffer'] (capture)"] == "SGD"
    assert all(n["scope"] == "" for n in trace["nodes"] if n["kind"] == "input")


def frames(stage: dict) -> dict[str, list[tuple[float, float]]]:
    """The places in each box's frame (by the box's scope, "" the whole graph) of the nodes
    and boxes drawn in it."""
    scopes = {g["scope"] for g in stage["groups"]}

    def box(scope: str) -> str:  # the longest prefix of `scope` that is a box
        parts = scope.split("/") if scope else []
        return next(("/".join(parts[:k]) for k in range(len(parts), 0, -1)
                     if "/".join(parts[:k]) in scopes), "")

    found: dict[str, list] = {}
    for n in stage["nodes"]:
        found.setdefault(box(n["scope"]), []).append((n["x"], n["y"]))
    for g in stage["groups"]:
        found.setdefault(box(g["scope"].rpartition("/")[0]), []).append((g["x"], g["y"]))
    return found


def test_each_box_is_laid_out_on_its_own_with_no_two_things_in_one_place() -> None:
    compilation = modules_step()
    for stage in expand(compilation_data(compilation)):
        for scope, places in frames(stage).items():
            assert len(places) == len(set(places)), (stage["pass"], scope)
    top = collapsed(expand(compilation_data(compilation))[0])  # closed: a few boxes
    assert len([n for n in top["nodes"] if n["kind"] == "node"]) <= 2
    assert {n["text"] for n in top["nodes"] if n["id"] < 0} == {"Sequential", "mse_loss",
                                                               "gradients", "SGD"}


def test_a_module_called_twice_around_another_still_draws_as_boxes() -> None:
    class Twice(nn.Module):  # a, b, a: the boxes of a and b read each other in a circle
        def __init__(self) -> None:
            super().__init__()
            self.a = nn.Linear(4, 4)
            self.b = nn.Tanh()

        def forward(self, x):
            return self.a(self.b(self.a(x)))

    compilation = tfl.compile(Twice(), tfl.randn(2, 4))
    (grouped, *_) = layout_grouped(compilation.snapshots)
    assert {"Twice", "Twice/a:Linear", "Twice/b:Tanh"} <= set(grouped.groups)
    a, b = grouped.groups["Twice/a:Linear"], grouped.groups["Twice/b:Tanh"]
    assert grouped.layout.positions[a] != grouped.layout.positions[b]
    assert {(a, b), (b, a)} <= set(grouped.layout.routes)  # one of them drawn back up


def test_a_graph_without_modules_is_laid_out_whole_as_before() -> None:
    compilation = tfl.compile(lambda x: (x * 2.0).tanh().sum(), tfl.randn(3))
    assert layout_grouped(compilation.snapshots) is None
    assert all(stage["groups"] == [] for stage in compilation_data(compilation)["stages"])


def test_the_static_picture_draws_the_modules_closed() -> None:
    compilation = modules_step()
    stage = expand(compilation_data(compilation, compilation.example_inputs))[0]
    svg = graph_svg(stage)
    assert "▸ Sequential" in svg and "▸ SGD" in svg
    matmuls = [n for n in compilation.snapshots[0].graph.nodes if n.op.name == "matmul"]
    assert not any(f'data-node-id="{n.id}"' in svg for n in matmuls)  # inside closed boxes


def test_recording_scopes_leaves_the_names_of_captured_weights_as_they_were() -> None:
    mlp = MLP()
    forward = tfl.function(mlp)
    forward(tfl.randn(5, 4))
    captures = [v.data.name for v in forward.concrete_functions[0].graph.captures]
    assert captures == ["self.hidden.weight", "self.hidden.bias", "self.out.weight",
                        "self.out.bias"]
