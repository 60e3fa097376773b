"""The layered layout: deterministic, fewer crossings, and stable from one pass to the next."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest
from stepper_cases import CASES

import teachflow as tfl
from teachflow.graph import subgraphs
from teachflow.viz.layout import (
    MAX_ROUTED_SPAN,
    _with_dummies,
    assign_layers,
    count_crossings,
    layout,
    layout_stages,
    nodes_and_edges,
    reduce_crossings,
)


def mlp_loss(w1, w2, x):
    h = (x @ w1).relu()
    return ((h @ w2).tanh() * 1.0 + (h @ w2).tanh()).sum()


def compiled():
    args = (tfl.randn(4, 8), tfl.randn(8, 3), tfl.randn(5, 4))
    return tfl.compile(tfl.grad(mlp_loss, argnums=(0, 1)), *args)


def test_every_edge_points_down_one_layer_or_more() -> None:
    g = compiled().snapshots[0].nx
    lay = layout(g)
    assert set(lay.positions) == set(g.nodes)
    for u, v in g.edges:
        assert lay.layers[v] > lay.layers[u]
        assert lay.positions[v][1] > lay.positions[u][1]
        route = lay.routes[(u, v)]
        assert route[0] == lay.positions[u] and route[-1] == lay.positions[v]
        ys = [y for _, y in route]
        assert ys == sorted(ys)  # a route never climbs back up


@pytest.mark.parametrize("case", CASES)
def test_the_layout_places_the_nodes_and_edges_of_to_networkx(case: str) -> None:
    """One definition of what is drawn (`Graph.drawn_values`, `Graph.drawn_edges`): an op with
    several results is one node, ``x * x`` one edge, in every stage and every graph a node
    owns."""
    def check(graph: tfl.Graph) -> None:
        g = graph.to_networkx()
        assert nodes_and_edges(graph) == (sorted(g.nodes), sorted(g.edges))
        for node in graph.nodes:
            for sub in subgraphs(node).values():
                check(sub)

    for snapshot in CASES[case]().snapshots:
        check(snapshot.graph)


def test_no_two_nodes_share_a_place() -> None:
    lay = layout(compiled().snapshots[0].nx)
    assert len(set(lay.positions.values())) == len(lay.positions)


def test_the_layout_is_deterministic() -> None:
    a, b = compiled(), compiled()
    assert layout(a.snapshots[0].nx).positions == layout(b.snapshots[0].nx).positions
    assert [s.positions for s in layout_stages(a.snapshots)] == \
        [s.positions for s in layout_stages(b.snapshots)]


def test_sources_sit_just_above_their_first_user() -> None:
    g = nx.DiGraph([(0, 1), (1, 2), (2, 3), (9, 3)])  # 9: an input used only at the bottom
    lay = layout(g)
    assert lay.layers[9] == lay.layers[3] - 1


def test_barycenter_sweeps_remove_crossings() -> None:
    # Two layers wired in reverse: in id order every pair of edges crosses.
    g = nx.DiGraph([(i, 10 + (4 - i)) for i in range(5)])
    nodes, edges = sorted(g.nodes), sorted(g.edges)
    order, chains = _with_dummies(nodes, edges, assign_layers(nodes, edges))
    assert count_crossings(order, chains) == 10
    assert count_crossings(reduce_crossings(order, chains), chains) == 0


def test_crossings_drop_on_a_real_backward_graph() -> None:
    g = compiled().snapshots[0].nx
    nodes, edges = sorted(g.nodes), sorted(g.edges)
    order, chains = _with_dummies(nodes, edges, assign_layers(nodes, edges))
    before = count_crossings(order, chains)
    after = count_crossings(reduce_crossings(order, chains), chains)
    assert after < before


def test_long_edges_get_no_dummies() -> None:
    chain = [(i, i + 1) for i in range(MAX_ROUTED_SPAN + 5)]
    g = nx.DiGraph([*chain, (0, MAX_ROUTED_SPAN + 5), (2, 5)])
    lay = layout(g)
    assert len(lay.routes[(0, MAX_ROUTED_SPAN + 5)]) == 2  # drawn as one curve
    assert len(lay.routes[(2, 5)]) == 4  # bends through the 2 layers it crosses


def test_a_node_that_survives_a_pass_keeps_its_place() -> None:
    c = compiled()
    layouts = layout_stages(c.snapshots)
    first = layouts[0].positions
    for snapshot, lay in zip(c.snapshots, layouts, strict=True):
        assert set(lay.positions) == set(snapshot.nx.nodes)
        for n, place in lay.positions.items():
            if n in first:
                assert place == first[n]


def test_a_new_node_takes_the_place_of_what_it_replaced() -> None:
    c = compiled()
    layouts = layout_stages(c.snapshots)
    for i, snapshot in enumerate(c.snapshots[1:], start=1):
        before = {**{n: p for lay in layouts[:i] for n, p in lay.positions.items()}}
        for change in snapshot.changes:
            for n in change.result:
                if n not in before and n in layouts[i].positions:
                    assert layouts[i].positions[n] == before[change.nodes[-1]]


def test_every_stage_edge_has_a_route_between_its_ends() -> None:
    c = compiled()
    for snapshot, lay in zip(c.snapshots, layout_stages(c.snapshots), strict=True):
        for u, v in snapshot.nx.edges:
            route = lay.routes[(u, v)]
            assert route[0] == lay.positions[u] and route[-1] == lay.positions[v]
    assert np.isfinite(lay.width) and lay.height > 0


def test_an_edge_keeps_its_route_in_every_stage_that_has_it() -> None:
    """The stepper's data sends each edge's route once (`teachflow.viz.stepper_data`)."""
    c = compiled()
    routes: dict = {}
    for lay in layout_stages(c.snapshots):
        for edge, route in lay.routes.items():
            assert routes.setdefault(edge, route) == route
