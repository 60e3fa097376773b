/**
 * Control flow as boxes. A node that owns graphs (a `cond`'s two branches, a loop's condition
 * and body) is drawn as a box. Closed, it is a node with a second outline, the names of its
 * graphs under its label, and a badge counting the changes a pass made inside it, so that a
 * closed box hides nothing a pass did. Opened (a click, Enter or Space), it grows to hold its
 * graphs side by side, one panel each, drawn as the stage is drawn: from the graph's own layout,
 * with each node's status and the nodes this pass removed from it. A box inside a box opens the
 * same way.
 *
 * An opened box takes room, and the graph around it makes that room (`makeRoom`): what stands to
 * its right moves right, what stands to its left moves left, and the rows below it move down, so
 * no box hides another and every edge keeps its route. A grown box keeps its *anchor*, where its
 * node stood: its top edge is where the node's was, so the edges into it end where they did.
 * Pure functions of the data and of the set of opened boxes (node ids).
 */

import {
  deviceFill, esc, fitLabel, NODE_H, NODE_W, plural, r1, STATUS, X_SCALE, Y_SCALE,
} from "./common.js";
import { ghostPlaces } from "./ghosts.js";
import { badgeSvg, edgePath, nodeSvg, stubPath, writesPill } from "./shapes.js";

/** An opened box's header (its label and ▾), the room around and between its panels, a
 * panel's title, and the room between a panel's edge and its nodes (their badges stick out). */
const HEAD = 30;
const GAP = 14;
const TITLE = 18;
const INSET = 16;

/** Whether node `n` owns graphs, and so is drawn as a box. */
export function isBox(n) {
  return Boolean(n?.subgraphs?.length);
}

/** The size of opened box `n` and its panels, one per graph it owns: each panel's place in the
 * box, and its `sheet` (where its nodes go) with the sheet's offset in the box. */
export function boxGeometry(n, opened) {
  let x = GAP;
  let tallest = 0;
  const panels = n.subgraphs.map((part) => {
    const sheet = sheetOf(part, opened);
    const title = panelTitle(part);
    const w = Math.max(sheet.w + 2 * INSET, title.length * 6.6 + 2 * INSET);
    const h = TITLE + sheet.h + 2 * INSET;
    const panel = { part, x, y: HEAD, w, h, sheet, dx: x + (w - sheet.w) / 2, dy: HEAD + TITLE + INSET };
    x += w + GAP;
    tallest = Math.max(tallest, h);
    return panel;
  });
  return { w: Math.max(x, NODE_W + 2 * GAP), h: HEAD + tallest + GAP, panels };
}

function panelTitle(part) {
  return `${part.key}: ${part.name}` + (part.changes ? ` · ${plural(part.changes, "change")}` : "");
}

/** Where the nodes of one graph part go, in pixels from the top left corner of what it draws:
 * from its layout, its removed nodes moved aside as a stage's are (`ghostPlaces`), its opened
 * boxes grown. `toPx` turns a route point of its layout into the same pixels. */
function sheetOf(part, opened) {
  const moved = ghostPlaces(part);
  const scale = ([x, y]) => [x * X_SCALE, y * Y_SCALE];
  const where = new Map();
  for (const n of part.removed) where.set(n.id, scale(moved.get(n.id) ?? [n.x, n.y]));
  for (const n of part.nodes) where.set(n.id, scale([n.x, n.y]));
  const grown = new Map();
  for (const n of part.nodes) if (isBox(n) && opened.has(n.id)) grown.set(n.id, boxGeometry(n, opened));
  const shift = makeRoom([where], grown);
  const bends = new Map(); // (a layer's dummy nodes can stand beyond its widest row of boxes)
  for (const e of part.edges) {
    e.route.slice(1, -1).forEach((p, i) => bends.set(`${e.from}>${e.to}:${i}`, shift(scale(p))));
  }
  const { x, y, w, h } = extent(new Map([...where, ...bends]), grown);
  for (const [id, [px, py]] of where) where.set(id, [px - x, py - y]);
  const toPx = (p) => {
    const [px, py] = shift(scale(p));
    return [px - x, py - y];
  };
  return { where, grown, toPx, w, h };
}

/** Grow each box of `grown` (id -> its geometry) where it stands in the first of `maps` (id ->
 * [x, y] in pixels, a node's centre), and move everything else in `maps` to make room. Returns
 * how any other point (a bend of an edge) moves. */
export function makeRoom(maps, grown) {
  const moves = [];
  for (const [id, g] of grown) {
    const [x0, y0] = maps[0].get(id);
    const dx = (g.w - NODE_W) / 2;
    const dy = g.h - NODE_H;
    const move = ([x, y]) => [x + (x > x0 + 0.5 ? dx : x < x0 - 0.5 ? -dx : 0),
      y + (y > y0 + 0.5 ? dy : 0)];
    for (const map of maps) for (const [key, p] of map) if (key !== id) map.set(key, move(p));
    moves.push(move);
  }
  return (p) => moves.reduce((q, move) => move(q), p);
}

/** The bounding box of the nodes at `where` (grown boxes at their full size): {x, y, w, h}. */
export function extent(where, grown) {
  let minX = Infinity;
  let minY = Infinity;
  let maxX = -Infinity;
  let maxY = -Infinity;
  for (const [id, [x, y]] of where) {
    const g = grown.get(id);
    const half = g ? g.w / 2 : NODE_W / 2;
    minX = Math.min(minX, x - half);
    maxX = Math.max(maxX, x + half);
    minY = Math.min(minY, y - NODE_H / 2);
    maxY = Math.max(maxY, y - NODE_H / 2 + (g ? g.h : NODE_H));
  }
  if (minX === Infinity) return { x: 0, y: 0, w: 0, h: 0 };
  return { x: minX, y: minY, w: maxX - minX, h: maxY - minY };
}

/** The panels of opened box `g` anchored at `at`, each with its corner (`left`, `top`) and its
 * sheet's offset (`ox`, `oy`) in the drawing's pixels. */
function panelsAt(g, [x, y]) {
  const left = x - g.w / 2;
  const top = y - NODE_H / 2;
  return g.panels.map((p) => ({ ...p, left: left + p.x, top: top + p.y, ox: left + p.dx, oy: top + p.dy }));
}

/** Where each node inside opened box `g` anchored at `at` is drawn, at any depth, added to
 * `out` (id -> [x, y]). */
export function insidePlaces(g, at, out) {
  for (const p of panelsAt(g, at)) {
    for (const [id, [sx, sy]] of p.sheet.where) {
      out.set(id, [sx + p.ox, sy + p.oy]);
      const inner = p.sheet.grown.get(id);
      if (inner) insidePlaces(inner, [sx + p.ox, sy + p.oy], out);
    }
  }
  return out;
}

/** What a box says of itself to a screen reader and in its tooltip (a module's box says what
 * it holds: `groups.js`). */
function boxWords(n, open) {
  const graphs = n.subgraphs.map((p) => `${p.key} (${p.name})`).join(" and ");
  const inside = n.changes_inside ? `; ${plural(n.changes_inside, "change")} inside` : "";
  const what = n.words ?? `${n.text}: a ${n.op} that owns ${graphs}${inside}.`;
  return `${what} ${open ? "Click or press Enter to close it." : "Click or press Enter to open it."}`;
}

/** The toggle's attributes, and the badge counting the changes inside. */
function toggle(n, status, open, left, top) {
  return `<g class="tf-node tf-cf tf-cf-toggle" data-node-id="${n.id}" data-box="${n.id}" ` +
    `data-status="${status}" data-open="${open}"${n.is_output ? ' data-output="true"' : ""} ` +
    `data-device="${esc(n.device)}" ` +
    (n.kind === "module" ? `data-group="${esc(n.scope)}" ` : "") +
    `data-changes-inside="${n.changes_inside ?? 0}" role="button" tabindex="0" ` +
    `aria-expanded="${open}" aria-label="${esc(boxWords(n, open))}" ` +
    `transform="translate(${r1(left)},${r1(top)})"><title>${esc(boxWords(n, open))}</title>`;
}

/** "2 changes inside", at the top left corner (or, beside a status badge, the bottom left),
 * clear of a closed box's two lines of text. */
function insideBadge(n, low) {
  if (!n.changes_inside) return "";
  return badgeSvg(`${plural(n.changes_inside, "change")} inside`, -6, low ? NODE_H - 2 : -12,
    "tf-inside", true);
}

/** A closed box: a node with a second outline, "▸ %6 = while" over its graphs' names, its
 * status badge, and the changes inside. */
export function closedBoxSvg(n, status, [x, y]) {
  const label = `▸ ${n.label}`;
  const names = n.caption ?? n.subgraphs.map((p) => p.key).join(" · ");
  const badge = STATUS[status]?.badge ?? "";
  return toggle(n, status, false, x - NODE_W / 2, y - NODE_H / 2) +
    `<rect class="tf-box tf-cf-back" x="-3" y="-3" width="${NODE_W + 6}" height="${NODE_H + 6}" rx="6"/>` +
    `<rect class="tf-box" width="${NODE_W}" height="${NODE_H}" rx="4"` +
    `${deviceFill(n.device) ? ` style="fill: ${deviceFill(n.device)}"` : ""}/>` +  // (its device)
    `<text class="tf-label" x="${NODE_W / 2}" y="12.5">${esc(fitLabel(label))}</text>` +
    `<text class="tf-label tf-cf-graphs" x="${NODE_W / 2}" y="25">${esc(names)}</text>` +
    (badge ? badgeSvg(badge, 6, -12) : "") + `${insideBadge(n, Boolean(badge))}` +
    `${status === "removed" ? "" : writesPill(n, NODE_H + 1)}</g>`;  // (under its two lines)
}

/** An opened box anchored at `at`, and all it holds: its outline and header, then per graph a
 * panel with its title, its edges and its nodes (boxes in it closed or opened in turn). `arrow`
 * is the marker the edges end with. */
export function openBoxSvg(n, status, g, at, arrow) {
  const left = at[0] - g.w / 2;
  const top = at[1] - NODE_H / 2;
  const badge = STATUS[status]?.badge ?? "";
  const out = [
    toggle(n, status, true, left, top) +
    `<rect class="tf-box tf-cf-outline" width="${r1(g.w)}" height="${r1(g.h)}" rx="8"/>` +
    `<rect class="tf-cf-head" width="${r1(g.w)}" height="${HEAD}" rx="8"/>` +
    `<text class="tf-label tf-cf-title" x="10" y="19">▾ ${esc(n.label)}</text>` +
    (badge ? badgeSvg(badge, g.w - badge.length * 6 - 2, -9, "", true) : "") +
    `${insideBadge(n, false)}</g>`,
  ];
  for (const p of panelsAt(g, at)) out.push(panelSvg(p, arrow));
  return out.join("");
}

/** One graph of an opened box: its panel, title, edges and nodes. */
function panelSvg(p, arrow) {
  const { part, sheet } = p;
  const at = (id) => {
    const [x, y] = sheet.where.get(id);
    return [x + p.ox, y + p.oy];
  };
  const toPx = (q) => {
    const [x, y] = sheet.toPx(q);
    return [x + p.ox, y + p.oy];
  };
  const drop = (id) => (sheet.grown.get(id)?.h ?? NODE_H) - NODE_H;
  const edge = (e, marker) => {  // (an edge that goes on outside the panel: a stub)
    const [a, b] = [e.from, e.to].map((id) => (sheet.where.has(id) ? at(id) : null));
    if (a && b) {
      return `<path class="tf-edge" data-from="${e.from}" data-to="${e.to}" ${marker}d="` +
        `${edgePath(e.route, a, b, toPx, drop(e.from))}"/>`;
    }
    return a || b ? `<path class="tf-stub" d="${stubPath(a, b)}"/>` : "";
  };
  const out = [
    `<g class="tf-cf-panel" data-graph="${esc(part.key)}"><title>${esc(part.values_from ? `values: ${part.values_from}` : part.name)}</title>` +
    `<rect class="tf-cf-panel-box" x="${r1(p.left)}" y="${r1(p.top)}" width="${r1(p.w)}" height="${r1(p.h)}" rx="4"/>` +
    `<text class="tf-cf-panel-title" x="${r1(p.left + 8)}" y="${r1(p.top + 14)}">${esc(panelTitle(part))}</text></g>`,
    `<g class="tf-edges tf-edges-removed">${(part.removed_edges ?? []).map((e) => edge(e, "")).join("")}</g>`,
    `<g class="tf-edges">${part.edges.map((e) => edge(e, `${arrow} `)).join("")}</g>`,
    `<g class="tf-nodes-removed">${part.removed.map((n) => nodeOrBox(n, "removed", at(n.id), null, arrow)).join("")}</g>`,
  ];
  for (const n of part.nodes) out.push(nodeOrBox(n, n.status, at(n.id), sheet.grown.get(n.id), arrow));
  return out.join("");
}

/** A node as it is drawn: a plain node, a closed box, or (given its geometry) an opened one. */
export function nodeOrBox(n, status, at, g, arrow) {
  if (!isBox(n)) return nodeSvg(n, status, at, 0);
  return g ? openBoxSvg(n, status, g, at, arrow) : closedBoxSvg(n, status, at);
}
