/**
 * A model's modules as boxes. Each node records the module that made it (its `scope`,
 * "Sequential/0:Linear"), and a stage lists its boxes (`stage.groups`, laid out by
 * teachflow/viz/groups.py: each node has its place in its own box, each box its place in the
 * box around it). `grouping` builds what the drawing shows instead of the flat graph: its top
 * level (the nodes in no box, and the outermost boxes), and each box as a node that owns one
 * graph, so that `boxes.js` draws it closed or opened as it draws a loop, with the same toggle
 * and the same room made around it when it opens. A pure function of one stage's data.
 */

import { isOp, plural } from "./common.js";

/** The stage's graph by module: `top` (its `nodes`, `removed`, `edges` and `removedEdges`, as
 * the stage has them), the `boxes` by id, and `owners` (the boxes each node and box is in,
 * outermost first); null when the stage has no boxes. `removedEdges` are the edges of the
 * stage before that went with the nodes it lost; `routes` the bends of edges, by the node or
 * box they go to and the one they come from. */
export function grouping(stage, removedEdges, routes) {
  if (!stage.groups?.length) return null;
  const byScope = new Map(stage.groups.map((g) => [g.scope, g]));
  /** The innermost box of `scope`: its longest prefix that is a box. */
  const boxOf = (scope) => {
    for (let s = scope; s; s = s.slice(0, Math.max(s.lastIndexOf("/"), 0))) {
      if (byScope.has(s)) return byScope.get(s);
    }
    return null;
  };
  const chains = new Map(); // box scope -> the boxes it is in, itself first, outermost last
  const chainOf = (scope) => {
    const box = boxOf(scope);
    if (!box) return [];
    if (!chains.has(box.scope)) {
      const at = box.scope.lastIndexOf("/");
      chains.set(box.scope, [box, ...chainOf(at < 0 ? "" : box.scope.slice(0, at))]);
    }
    return chains.get(box.scope);
  };
  const boxes = new Map(stage.groups.map((g) => [g.id, moduleBox(g)]));
  const frames = new Map([[null, frame()]]); // box id (null: the top) -> what it holds
  for (const id of boxes.keys()) frames.set(id, frame());
  for (const box of boxes.values()) frames.get(chainOf(box.scope)[1]?.id ?? null).nodes.push(box);
  const chainOfNode = new Map();
  const place = (n, list) => {
    const chain = chainOf(n.scope);
    chainOfNode.set(n.id, chain);
    frames.get(chain[0]?.id ?? null)[list].push(n);
  };
  for (const n of stage.nodes) place(n, "nodes");
  for (const n of stage.removed) if (!chainOfNode.has(n.id)) place(n, "removed");
  for (const [id, box] of boxes) chainOfNode.set(id, chainOf(box.scope).slice(1));
  const at = new Map();
  for (const list of frames.values()) for (const n of [...list.nodes, ...list.removed]) at.set(n.id, n);
  joinEdges(stage.edges, "edges", frames, chainOfNode, at, routes);
  joinEdges(removedEdges, "removedEdges", frames, chainOfNode, at, routes);
  const owners = new Map();
  for (const [id, chain] of chainOfNode) owners.set(id, chain.map((b) => b.id).reverse());
  for (const [id, box] of boxes) finish(box, frames.get(id), stage, owners);
  return { top: frames.get(null), boxes, owners };
}

function frame() {
  return { nodes: [], removed: [], edges: [], removedEdges: [] };
}

/** A box as a node that owns one graph: closed, "▸ 0:Linear" over how many nodes it holds. */
function moduleBox(g) {
  const name = g.scope.slice(g.scope.lastIndexOf("/") + 1);
  return {
    id: g.id, kind: "module", op: "module", scope: g.scope, x: g.x, y: g.y, label: name,
    text: g.scope, type: "", device: "cpu", source: "", source_line: "", inputs: [],
    lineage: [g.id], status: "kept", value: null, kernel: null, body: [], results: undefined,
    is_output: false, updates: [], changes_inside: 0, caption: "",
    subgraphs: [{ key: g.scope, name: "", nodes: [], edges: [], removed: [], removed_edges: [],
      changes: 0, values_from: "" }],
  };
}

/** Put each edge where it is drawn: in the innermost box that holds both its ends (else at
 * the top), between the nodes or boxes there that hold them; one edge per pair of those. */
function joinEdges(edges, kind, frames, chainOfNode, at, routes) {
  const seen = new Set();
  for (const e of edges) {
    const a = chainOfNode.get(e.from) ?? [];
    const b = chainOfNode.get(e.to) ?? [];
    const k = a.findIndex((box) => b.includes(box));
    const shared = k < 0 ? null : a[k];
    const from = unitIn(e.from, a, shared);
    const to = unitIn(e.to, b, shared);
    if (from === e.from && to === e.to) {
      frames.get(shared?.id ?? null)[kind].push(e);
      continue;
    }
    stubs(e.to, b, shared, "in", kind, frames, seen);
    stubs(e.from, a, shared, "out", kind, frames, seen);
    const key = `${kind}${from}>${to}`;
    if (seen.has(key) || !at.has(from) || !at.has(to)) continue;
    seen.add(key);
    const ends = [[at.get(from).x, at.get(from).y], [at.get(to).x, at.get(to).y]];
    const bends = routes?.get(to)?.get(from);
    frames.get(shared?.id ?? null)[kind].push({
      from, to, index: e.index, indices: e.indices,
      route: bends ? [ends[0], ...bends, ends[1]] : ends,
    });
  }
}

/** Inside each box that holds one end `id` of an edge (in the boxes `chain`) but not the other
 * (so below `shared`), a stub on what holds that end there: a short line in (`way` "in") or
 * out, saying that the edge goes on outside the box. Once per box, end and way. */
function stubs(id, chain, shared, way, kind, frames, seen) {
  const k = shared === null ? chain.length : chain.indexOf(shared);
  for (let j = 0; j < k; j++) {
    const unit = unitIn(id, chain, chain[j]);
    const key = `${kind}${way}${chain[j].id}:${unit}`;
    if (seen.has(key)) continue;
    seen.add(key);
    frames.get(chain[j].id)[kind].push(way === "in" ? { from: null, to: unit, route: [] }
      : { from: unit, to: null, route: [] });
  }
}

/** The node or box that stands for node `id` (in the boxes `chain`, innermost first) in the
 * box `shared` (null: the top): itself, or the box inside `shared` that holds it. */
function unitIn(id, chain, shared) {
  const k = shared === null ? chain.length : chain.indexOf(shared);
  return k === 0 ? id : chain[k - 1].id;
}

/** Fill box `box` from what it holds (`held`): its graph, how many nodes it holds at any
 * depth, the changes inside it, whether it holds an output, and the state its nodes write. */
function finish(box, held, stage, owners) {
  const inside = new Set();
  for (const [id, chain] of owners) if (chain.includes(box.id)) inside.add(id);
  const ops = stage.nodes.filter((n) => inside.has(n.id) && isOp(n));
  const changes = stage.changes.filter((c) => [...c.nodes, ...c.result].some((id) => inside.has(id))).length;
  Object.assign(box.subgraphs[0], {
    name: plural(ops.length, "node"), nodes: held.nodes, edges: held.edges, removed: held.removed,
    removed_edges: held.removedEdges, changes,
  });
  box.caption = plural(ops.length, "node");
  box.changes_inside = changes;
  box.is_output = ops.some((n) => n.is_output);
  box.updates = ops.flatMap((n) => n.updates);
  box.words = `${box.scope}: the ${plural(ops.length, "node")} made by ${describe(box.scope)}` +
    (changes ? `; ${plural(changes, "change")} inside.` : ".");
}

/** What made a scope's nodes, in words: "the module 0 (a Linear) of Sequential". */
function describe(scope) {
  if (scope.startsWith("gradients/")) return `the gradient of ${describe(scope.slice(10))}`;
  const parts = scope.split("/");
  const last = parts[parts.length - 1];
  const [name, kind] = last.includes(":") ? last.split(":") : [last, ""];
  const where = parts.length > 1 ? ` of ${parts.slice(0, -1).join("/")}` : "";
  return kind ? `the module ${name} (a ${kind})${where}` : `${name}${where}`;
}
