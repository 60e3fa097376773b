/**
 * Choosing what to draw, and where. A small stage is drawn whole. A big one (`inf.big`) is
 * drawn as the neighbourhood of its changes, a page of changes at a time (`view`): fused groups
 * collapsed into their kernel, and repeated blocks (the many nodes of one source line of an
 * unrolled loop) collapsed into one box each, until the learner opens a block or expands
 * everything. `place` then puts each drawn box somewhere, making room around the control-flow
 * boxes the learner opened (`boxes.js`). Pure functions of a stage's lookups (`inf`) and the
 * selection; what they work out once per stage is kept on `inf`.
 */

import { boxGeometry, extent, insidePlaces, isBox, makeRoom } from "./boxes.js";
import { isOp, PAD, plural, X_SCALE, Y_SCALE } from "./common.js";
import { nodeIn, outermost } from "./stage.js";

/** The most nodes drawn in a neighbourhood view; half of them are the changed nodes. */
const VIEW_LIMIT = 300;
/** A neighbour joins that view only this many layers above or below its changed node (farther
 * ones, such as a weight fed from the top of the graph, get a stub), so the view stays compact. */
const NEAR_LAYERS = 3;
/** In a big view, the nodes of one user source line are drawn as one collapsed block when that
 * line repeats (its most frequent op occurs) at least BLOCK_REPS times over BLOCK_NODES nodes. */
const BLOCK_REPS = 8;
const BLOCK_NODES = 16;

/** Each node's neighbours in the stage, through its edges and the edges of what it removed. */
function neighbours(inf) {
  if (inf.adjacent) return inf.adjacent;
  const adjacent = new Map();
  const link = (a, b) => {
    if (!adjacent.has(a)) adjacent.set(a, []);
    adjacent.get(a).push(b);
  };
  for (const e of inf.stage.edges) {
    link(e.from, e.to);
    link(e.to, e.from);
  }
  for (const e of inf.removedEdges) {
    link(e.from, e.to);
    link(e.to, e.from);
  }
  inf.adjacent = adjacent;
  return adjacent;
}

/** The repeated blocks of a stage: its nodes (and the ones it removed) grouped by user source
 * line, keeping the lines that repeat enough. `of` maps a member's id to its block. */
export function blocksOf(inf) {
  if (inf.blocks) return inf.blocks;
  const bySource = new Map();
  const add = (n, gone) => {
    if (!n.source) return;
    let group = bySource.get(n.source);
    if (!group) bySource.set(n.source, (group = { present: [], removed: [] }));
    (gone ? group.removed : group.present).push(n);
  };
  for (const n of inf.stage.nodes) add(n, false);
  for (const n of inf.stage.removed) add(n, true);
  const list = [];
  const of = new Map();
  const count = (map, key) => map.set(key, (map.get(key) ?? 0) + 1);
  for (const [source, { present, removed }] of bySource) {
    const size = present.length + removed.length;
    const counted = present.length ? present : removed;
    const ops = new Map();
    for (const n of counted) count(ops, n.op);
    const reps = repeats([...ops.values()]);
    if (size < BLOCK_NODES || reps < BLOCK_REPS) continue;
    const statuses = new Map();
    for (const n of present) if (n.status !== "kept") count(statuses, n.status);
    let status = "kept";
    for (const [key, c] of statuses) if (status === "kept" || c > statuses.get(status)) status = key;
    if (removed.length) statuses.set("removed", removed.length);
    if (status === "kept" && removed.length) status = "removed";
    let changed = 0;
    for (const c of statuses.values()) changed += c;
    const block = {
      index: list.length, source, size, reps, status, changed, statuses,
      perRep: Math.max(1, Math.round(counted.length / reps)),
    };
    list.push(block);
    for (const n of present) of.set(n.id, block);
    for (const n of removed) if (!of.has(n.id)) of.set(n.id, block);
  }
  inf.blocks = { list, of };
  return inf.blocks;
}

/** How many times a source line ran, from how often each of its ops occurs: their greatest
 * common divisor (a line with mul ×1125 and add ×375 ran 375 times, 3 muls and an add each),
 * or where that is too small to be a loop (an op merged or folded away somewhere) the count
 * most ops share. */
function repeats(counts) {
  const gcd = (a, b) => (b ? gcd(b, a % b) : a);
  const divisor = counts.reduce(gcd, 0);
  if (divisor >= BLOCK_REPS) return divisor;
  const often = new Map();
  for (const c of counts) often.set(c, (often.get(c) ?? 0) + 1);
  let best = 0;
  for (const [c, k] of often) {
    if (!best || k > often.get(best) || (k === often.get(best) && c < best)) best = c;
  }
  return best;
}

/** Whether the learner opened `block`: by a click, or by selecting one of its nodes. */
function blockOpen(st, inf, block) {
  return st.openBlocks.has(block.source) || (st.node !== null && blocksOf(inf).of.get(st.node) === block);
}

/** The changes of a stage cut into pages, [first, end) each, whose neighbourhoods are drawn one
 * at a time in a big view: each page's changes touch about half of VIEW_LIMIT nodes. */
function pages(inf) {
  if (inf.pages) return inf.pages;
  const budget = Math.floor(VIEW_LIMIT / 2);
  const result = [];
  let start = 0;
  let size = 0;
  inf.stage.changes.forEach((c, k) => {
    const cost = focusOf(c).length;
    if (size + cost > budget && k > start) {
      result.push([start, k]);
      start = k;
      size = 0;
    }
    size += cost;
  });
  result.push([start, inf.stage.changes.length]);
  inf.pages = result;
  return result;
}

/** Which page of changes (see `pages`) holds change `k`. */
export function pageOf(inf, k) {
  return pages(inf).findIndex(([a, b]) => k >= a && k < b);
}

/** The nodes of a change a view centres on (a fused kernel, not its many members). */
function focusOf(c) {
  return c.kind === "fused" ? c.result : [...c.nodes, ...c.result];
}

/** Which node ids to draw: all of them, or for a big stage the changes on the selected page,
 * the selected node, and their neighbours, with fused members folded into their kernel, and
 * the members of repeated blocks not opened folded into their block. Of the stepper's state
 * `st` it reads the selection (`change`, `node`) and what the learner opened (`expandAll`,
 * `openBlocks`). */
export function view(st, inf) {
  const total = inf.stage.stats.nodes;
  const opened = st.openBoxes ?? new Set(); // the control-flow boxes the learner opened
  if (!inf.big || st.expandAll) {
    return { ids: null, page: -1, note: "", total, blocks: new Map(), opened };
  }
  const focus = [];
  let page = -1;
  const changes = inf.stage.changes;
  if (changes.length) {
    page = Math.max(pageOf(inf, Math.max(st.change, 0)), 0);
    const [a, b] = pages(inf)[page];
    for (let k = a; k < b; k++) focus.push(...focusOf(changes[k]));
  } else {
    const top = [...inf.stage.nodes].sort((p, q) => p.y - q.y || p.x - q.x);
    for (const n of top.slice(0, Math.floor(VIEW_LIMIT / 2))) focus.push(n.id);
  }
  if (st.node !== null) focus.push(st.node);
  const ids = new Set();
  const take = (id) => {
    id = outermost(inf, id); // (a node inside a box is seen through the box)
    if (ids.size < VIEW_LIMIT && !inf.memberOf.has(id) && nodeIn(inf, id)) ids.add(id);
  };
  for (const id of focus) take(id);
  if (st.node !== null) ids.add(outermost(inf, st.node));
  const adjacent = neighbours(inf);
  for (const id of [...ids]) {
    const y = nodeIn(inf, id).y;
    for (const m of adjacent.get(id) ?? []) {
      if (Math.abs((nodeIn(inf, m)?.y ?? Infinity) - y) <= NEAR_LAYERS) take(m);
    }
    if (ids.size >= VIEW_LIMIT) break;
  }
  // Repeated blocks: the members in view of a block the learner has not opened become one box.
  const blocks = new Map(); // block -> its members that the neighbourhood would have drawn
  const { of } = blocksOf(inf);
  for (const id of [...ids]) {
    const block = of.get(id);
    if (!block || blockOpen(st, inf, block)) continue;
    ids.delete(id);
    if (!blocks.has(block)) blocks.set(block, []);
    blocks.get(block).push(id);
  }
  let folded = "";
  if (blocks.size) {
    let members = 0;
    for (const block of blocks.keys()) members += block.size;
    folded = ` and ${plural(blocks.size, "repeated block")} (${members.toLocaleString("en")} ` +
      `nodes; click ${blocks.size === 1 ? "it" : "one"} to open it)`;
  }
  let shown = 0;
  let gone = 0;
  for (const id of ids) {
    if (!isOp(nodeIn(inf, id))) continue;
    if (inf.byId.has(id)) shown++;
    else gone++;
  }
  const counts = `Showing ${shown.toLocaleString("en")} of ${plural(total, "node")}` +
    (gone ? ` (and ${gone.toLocaleString("en")} removed)` : "") + folded;
  let note;
  if (changes.length) {
    const [a, b] = pages(inf)[page];
    const which = b - a === changes.length ? "all changes" : `changes ${a + 1}–${b} of ${changes.length}`;
    note = `${counts}: the neighbourhood of ${which}` +
      (inf.memberOf.size ? ", fused groups collapsed." : ".");
  } else {
    note = `${counts}: the top of the graph.`;
  }
  return { ids, page, note, total, blocks, opened };
}

/** Where a node is drawn, in pixels: where the layout put it, or for a removed node moved
 * aside (`ghostPlaces`) its new place. */
function position(inf, n) {
  const place = inf.removedById.get(n.id) === n ? inf.moved.get(n.id) : undefined;
  const [x, y] = place ?? [n.x, n.y];
  return [x * X_SCALE, y * Y_SCALE];
}

/** Where each box of view `v` is drawn, in pixels: `where` (node id -> [x, y]) for the nodes,
 * `blockAt` (block -> [x, y]) for the collapsed blocks, the drawn `removed` and `present` nodes,
 * the drawing's bounding `box`, whether it is `packed`, and `of` (member id -> block) when it
 * has collapsed blocks; for opened control-flow boxes, their geometry (`grown`, by node id) and
 * where the nodes inside them are (`inside`); and `toPx`, from a route point to pixels. */
export function place(inf, v) {
  const shown = (id) => v.ids === null || v.ids.has(id);
  const removed = inf.top.removed.filter((n) => shown(n.id));
  const present = inf.top.nodes.filter((n) => shown(n.id));
  const where = new Map();
  for (const n of [...removed, ...present]) where.set(n.id, position(inf, n));
  // A collapsed block stands where its top-most member in view would have been. Its members
  // may be spread far apart, so a view with blocks is packed: each layer drawn becomes one
  // row, its boxes side by side in their order (and edges are drawn as plain curves).
  const blockAt = new Map();
  for (const [block, members] of v.blocks) {
    let top = null;
    for (const id of members) {
      const p = position(inf, nodeIn(inf, id));
      if (!top || p[1] < top[1] || (p[1] === top[1] && p[0] < top[0])) top = p;
    }
    blockAt.set(block, top);
  }
  const packed = blockAt.size > 0;
  if (packed) {
    const rows = new Map();
    for (const map of [where, blockAt]) {
      for (const [key, p] of map) {
        if (!rows.has(p[1])) rows.set(p[1], []);
        rows.get(p[1]).push([map, key, p[0]]);
      }
    }
    [...rows.keys()].sort((a, b) => a - b).forEach((y, row) => {
      const items = rows.get(y).sort((a, b) => a[2] - b[2]);
      items.forEach(([map, key], col) => {
        map.set(key, [(col - (items.length - 1) / 2) * X_SCALE, row * Y_SCALE]);
      });
    });
  }
  // Opened control-flow boxes grow where they stand; the rest makes room (see boxes.js).
  const grown = new Map();
  for (const n of present) {
    if (isBox(n) && v.opened.has(n.id)) grown.set(n.id, boxGeometry(n, v.opened));
  }
  const shift = makeRoom([where, blockAt], grown);
  const toPx = ([x, y]) => shift([x * X_SCALE, y * Y_SCALE]);
  const inside = new Map();
  for (const [id, g] of grown) insidePlaces(g, where.get(id), inside);
  // The drawing's extent: every box, and the bends of the edges drawn along their routes (a
  // layer's dummy nodes can stand beyond its widest row of boxes).
  const all = new Map([...where, ...[...blockAt.values()].map((p, i) => [`block${i}`, p])]);
  if (!packed) {
    for (const e of inf.top.edges) {
      if (!where.has(e.from) || !where.has(e.to)) continue;
      e.route.slice(1, -1).forEach((p, i) => all.set(`${e.from}>${e.to}:${i}`, toPx(p)));
    }
  }
  const { x, y, w, h } = extent(all, grown);
  const box = { x: x - PAD, y: y - PAD, w: w + 2 * PAD, h: h + 2 * PAD };
  const { of } = v.blocks.size ? blocksOf(inf) : { of: null };
  return { removed, present, where, blockAt, packed, box, of, grown, toPx, inside };
}
