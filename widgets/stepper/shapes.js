/**
 * The shapes a graph is drawn with, each one SVG string: a node's box with its label and badges,
 * a small badge, an edge, and a stub towards a neighbour that is not drawn. Pure functions of
 * where things are; `draw.js` and `boxes.js` put them together.
 */

import { clip, deviceFill, esc, fitLabel, NODE_H, NODE_W, r1, STATUS } from "./common.js";

/** The most characters of a pill under a box ("→ opt.state[0]['momentum_buffer']"): as wide as
 * the box (the box's tooltip and the node's details say it in full). */
const PILL_CHARS = Math.floor((NODE_W - 8) / 6);

/** One node's box, with its label, its status badge (and how many fused ops it stands for when
 * `folded`), a pill for the state it writes back, and one saying how many results it has when
 * it has several. */
export function nodeSvg(n, status, [x, y], folded) {
  const badge = STATUS[status]?.badge ?? "";
  const text = folded ? `${badge} ×${folded}` : badge;
  const label = fitLabel(n.label);
  let out =
    `<g class="tf-node" data-node-id="${n.id}" data-status="${status}"` +
    `${n.is_output ? ' data-output="true"' : ""}${folded ? ` data-collapsed="${folded}"` : ""} ` +
    `data-device="${esc(n.device)}" ` +
    `transform="translate(${r1(x - NODE_W / 2)},${r1(y - NODE_H / 2)})">` +
    `<title>${esc(n.text)}${n.source ? `  (${esc(n.source)})` : ""}</title>` +
    `<rect class="tf-box" width="${NODE_W}" height="${NODE_H}" rx="${status === "fused" ? NODE_H / 2 : 4}"` +
    `${deviceFill(n.device) ? ` style="fill: ${deviceFill(n.device)}"` : ""}/>` +
    `<text class="tf-label" x="${NODE_W / 2}" y="${NODE_H / 2 + 4}">${esc(label)}</text>`;
  if (text) out += badgeSvg(text, 6, -9);
  if (status !== "removed") out += writesPill(n);
  // A transfer between devices: a box of its own, saying from where to where.
  if (n.transfer) out += badgeSvg(`⇢ ${n.transfer[0]} → ${n.transfer[1]}`, 6, NODE_H - 5, "tf-transfer");
  // A kernel that writes several results: so many edges leave it, one per result read.
  if (n.results?.length > 1 && status !== "removed") {
    out += badgeSvg(`${n.results.length} results`, -6, NODE_H - 5, "tf-results-pill", true);
  }
  return `${out}</g>`;
}

/** A value the call writes back into state (p -= lr * g): "→ w" under the box (a closed
 * box's: the values its nodes write). */
export function writesPill(n, dy = NODE_H - 5) {
  if (!n.updates?.length) return "";
  return badgeSvg(clip(`→ ${n.updates.join(", ")}`, PILL_CHARS), 6, dy, "tf-writes");
}

/** A small pill with a word in it, at the box's top right corner (shifted by dx, dy), or at its
 * top left corner when `left`. */
export function badgeSvg(text, dx, dy, extra = "", left = false) {
  const w = text.length * 6 + 8;
  return (
    `<g class="tf-badge ${extra}" transform="translate(${left ? dx : NODE_W - w + dx},${dy})">` +
    `<rect width="${w}" height="14" rx="7"/><text x="${w / 2}" y="10.5">${esc(text)}</text></g>`
  );
}

/** An edge from the bottom of its source to the top of its target, through the layout's
 * route points (a curve when the route has none). `toPx` turns a route point (in layout units)
 * into pixels; `drop` is how much taller than a node the source is drawn (an opened box). */
export function edgePath(route, [x0, y0], [x1, y1], toPx, drop = 0) {
  const sy = y0 + NODE_H / 2 + drop;
  const ty = y1 - NODE_H / 2 - 2;
  const inner = route.slice(1, -1);
  if (!inner.length) {
    const bend = Math.max(24, Math.min(120, Math.abs(ty - sy) / 2));
    return `M${r1(x0)},${r1(sy)} C${r1(x0)},${r1(sy + bend)} ${r1(x1)},${r1(ty - bend)} ${r1(x1)},${r1(ty)}`;
  }
  const points = inner.map((p) => {
    const [x, y] = toPx(p);
    return `L${r1(x)},${r1(y)}`;
  }).join(" ");
  return `M${r1(x0)},${r1(sy)} ${points} L${r1(x1)},${r1(ty)}`;
}

/** A short line leaving a drawn node towards a neighbour that is not drawn. */
export function stubPath(a, b) {
  return a
    ? `M${r1(a[0])},${r1(a[1] + NODE_H / 2)} l0,16`
    : `M${r1(b[0])},${r1(b[1] - NODE_H / 2)} l0,-16`;
}
