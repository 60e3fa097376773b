/**
 * Lookups into the compilation's data, built on first use and kept: for one stage (`info`: the
 * stage put together, `stageAt`; its nodes by id, what it removed, where removed nodes are
 * drawn, its fused groups, the nodes inside its control-flow boxes) and across stages
 * (`nodeHistory`: what made each node and what became of it). Each takes the stepper's state
 * `st`, reads only `st.data`, and keeps what it builds in `st.cache` and `st.history`.
 */

import { stageAt } from "./data.js";
import { ghostPlaces } from "./ghosts.js";
import { grouping } from "./groups.js";

/** A stage with more nodes than this (its own plus the ones drawn faded) opens on the
 * neighbourhood of what changed. */
const BIG = 300;

/** Stage `i`'s lookups (called `inf` wherever they are used). */
export function info(st, i) {
  let found = st.cache.get(i);
  if (found) return found;
  const stage = stageAt(st, i);
  const previous = i > 0 ? stageAt(st, i - 1) : null;
  const byId = new Map(stage.nodes.map((n) => [n.id, n]));
  const removedById = new Map(stage.removed.map((n) => [n.id, n]));
  const removedEdges = previous
    ? previous.edges.filter((e) => removedById.has(e.from) || removedById.has(e.to))
    : [];
  // What is drawn at the top: the whole stage, or its nodes in no module's box and the
  // outermost boxes (`groups.js`).
  const grouped = grouping(stage, removedEdges, st.routes);
  const top = grouped?.top ?? { nodes: stage.nodes, removed: stage.removed, edges: stage.edges, removedEdges };
  const moved = ghostPlaces(top);
  // Members of a fused group that this pass removed: collapsed into the kernel in big views.
  const memberOf = new Map();
  const groupSize = new Map();
  for (const c of stage.changes) {
    if (c.kind !== "fused") continue;
    for (const id of c.nodes) if (removedById.has(id)) memberOf.set(id, c.result[0]);
    for (const id of c.result) groupSize.set(id, c.nodes.length);
  }
  const inner = innerNodes(stage, grouped);
  found = { stage, previous, byId, removedById, removedEdges, moved, memberOf, groupSize, inner, top };
  found.boxes = grouped?.boxes ?? new Map();
  found.big = !grouped && stage.nodes.length + stage.removed.length > BIG;
  st.cache.set(i, found);
  return found;
}

/** The nodes inside the stage's boxes (of modules, `grouped`; and of control flow), at any
 * depth: id -> the node, the graph part it is in, the boxes it is in (`owners`, outermost
 * first), and whether this pass removed it (`gone`). */
function innerNodes(stage, grouped) {
  const inner = new Map();
  for (const [id, owners] of grouped?.owners ?? []) {
    if (!owners.length) continue;
    const part = grouped.boxes.get(owners[owners.length - 1]).subgraphs[0];
    const node = grouped.boxes.get(id) ?? part.nodes.find((n) => n.id === id) ??
      part.removed.find((n) => n.id === id);
    inner.set(id, { node, part, owners, gone: !part.nodes.includes(node) });
  }
  const walk = (nodes, owners) => {
    for (const n of nodes) {
      for (const part of n.subgraphs ?? []) {
        const within = [...owners, n.id];
        for (const m of part.nodes) inner.set(m.id, { node: m, part, owners: within, gone: false });
        for (const m of part.removed) {
          if (!inner.has(m.id)) inner.set(m.id, { node: m, part, owners: within, gone: true });
        }
        walk(part.nodes, within);
      }
    }
  };
  for (const n of stage.nodes) walk([n], grouped?.owners.get(n.id) ?? []);
  return inner;
}

/** A node of the stage (inside a box or not), or one it removed (drawn faded); null if
 * neither. */
export function nodeIn(inf, id) {
  return inf.byId.get(id) ?? inf.removedById.get(id) ?? inf.inner.get(id)?.node ??
    inf.boxes.get(id) ?? null;
}

/** A node the stage has (inside a box or not), not one it removed; undefined if none. */
export function presentIn(inf, id) {
  const found = inf.inner.get(id);
  return inf.byId.get(id) ?? (found && !found.gone ? found.node : undefined) ?? inf.boxes.get(id);
}

/** The node of the whole graph that stands for node `id`: itself, or the outermost box it is
 * in. */
export function outermost(inf, id) {
  return inf.inner.get(id)?.owners[0] ?? id;
}

/** For each node id: the changes whose result it is (how it was made) and the changes it was
 * one of the nodes of (what became of it). */
export function nodeHistory(st) {
  if (st.history) return st.history;
  const made = new Map();
  const became = new Map();
  const add = (map, id, entry) => {
    if (!map.has(id)) map.set(id, []);
    map.get(id).push(entry);
  };
  st.data.stages.forEach((stage, s) => {
    stage.changes.forEach((c, k) => {
      for (const id of c.result) add(made, id, { s, k, c });
      for (const id of c.nodes) add(became, id, { s, k, c });
    });
  });
  st.history = { made, became };
  return st.history;
}
