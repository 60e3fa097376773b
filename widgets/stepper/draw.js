/**
 * Drawing the graph: the SVG of one view, as one string (the page sets it with one innerHTML,
 * never node by node). Pure functions: what to draw comes from `view` and where from `place`;
 * the shapes come from `shapes.js`, and control-flow boxes from `boxes.js`.
 */

import { nodeOrBox } from "./boxes.js";
import { clip, esc, LABEL_CHARS, NODE_H, NODE_W, plural, r1, STATUS } from "./common.js";
import { badgeSvg, edgePath, nodeSvg, stubPath } from "./shapes.js";

/** The SVG of stage `inf` as view `v` (`view`) placed as `placed` (`place`), at `zoom`. `uid`
 * keeps its arrow marker's id apart from those of other steppers on the page. */
export function graphSvg(inf, v, placed, zoom, uid) {
  const { removed, present, where, blockAt, packed, box, of, grown, toPx } = placed;
  const parts = [
    `<svg class="tf-svg" width="${r1(box.w * zoom)}" ` +
      `height="${r1(box.h * zoom)}" viewBox="${r1(box.x)} ${r1(box.y)} ${r1(box.w)} ${r1(box.h)}" ` +
      `role="img" aria-label="The graph after ${esc(inf.stage.pass)}">`,
    `<defs><marker id="${uid}-arrow" viewBox="0 0 8 8" refX="7" refY="4" markerWidth="7" ` +
      `markerHeight="7" orient="auto-start-reverse"><path d="M0,0 L8,4 L0,8 z" ` +
      `class="tf-arrow"/></marker></defs>`,
    `<g class="tf-edges tf-edges-removed">`,
  ];
  const arrow = `marker-end="url(#${uid}-arrow)"`;
  const drop = (id) => (grown.get(id)?.h ?? NODE_H) - NODE_H; // (an opened box is taller)
  const collapsedOf = (id) => {
    const block = of?.get(id);
    return block && v.blocks.has(block) ? block : null;
  };
  const seen = new Set(); // block edges and stubs, drawn once per pair of ends
  /** An edge's two ends as drawn (a collapsed member stands at its block), its route, and
   * whether it is to be drawn at all (not inside one block, not twice). */
  const ends = (e, tag) => {
    const ba = of && collapsedOf(e.from);
    const bb = of && collapsedOf(e.to);
    if (!ba && !bb) return [where.get(e.from), where.get(e.to), packed ? [] : e.route];
    if (ba && ba === bb) return [null, null, null];
    const a = ba ? blockAt.get(ba) : where.get(e.from);
    const b = bb ? blockAt.get(bb) : where.get(e.to);
    const key = `${tag}${ba ? `b${ba.index}` : a ? e.from : "-"}>${bb ? `b${bb.index}` : b ? e.to : "-"}`;
    if (seen.has(key)) return [null, null, null];
    seen.add(key);
    return [a, b, []];
  };
  for (const e of inf.top.removedEdges) {
    const [a, b, route] = ends(e, "-");
    if (a && b) {
      parts.push(`<path class="tf-edge" data-from="${e.from}" data-to="${e.to}" d="` +
        `${edgePath(route, a, b, toPx)}"/>`);
    }
  }
  // A removed node that moved aside: a dotted line to the place it left.
  for (const n of removed) {
    if (!inf.moved.has(n.id) || packed) continue;
    const [x0, y0] = where.get(n.id);
    const [x1, y1] = toPx([n.x, n.y]);
    const side = Math.sign(x1 - x0) * NODE_W / 2;
    parts.push(`<path class="tf-tie" data-from="${n.id}" d="M${r1(x0 + side)},${r1(y0)} ` +
      `L${r1(x1 - side)},${r1(y1)}"/>`);
  }
  parts.push(`</g><g class="tf-edges">`);
  const stubs = [];
  for (const e of inf.top.edges) {
    const [a, b, route] = ends(e, "");
    if (a && b) {
      parts.push(`<path class="tf-edge" data-from="${e.from}" data-to="${e.to}" ${arrow} d="` +
        `${edgePath(route, a, b, toPx, drop(e.from))}"/>`);
    } else if (a || b) {
      stubs.push(stubPath(a, b));
    }
  }
  if (stubs.length) parts.push(`<path class="tf-stub" d="${stubs.join(" ")}"/>`);
  parts.push(`</g><g class="tf-nodes tf-nodes-removed">`);
  for (const n of removed) parts.push(nodeOrBox(n, "removed", where.get(n.id), null, arrow));
  parts.push(`</g><g class="tf-nodes">`);
  const collapse = v.ids !== null;
  for (const n of present) {
    const folded = collapse ? inf.groupSize.get(n.id) ?? 0 : 0;
    parts.push(folded ? nodeSvg(n, n.status, where.get(n.id), folded)
      : nodeOrBox(n, n.status, where.get(n.id), grown.get(n.id), arrow));
  }
  for (const [block, p] of blockAt) parts.push(blockSvg(block, p));
  parts.push(`</g></svg>`);
  return parts.join("");
}

/** A collapsed repeated block: a small stack of boxes, "×150 · 4 ops" over its source line,
 * with the status most of its changed members share (and how many changed) as its badge. */
function blockSvg(b, [x, y]) {
  const badge = b.changed ? `${STATUS[b.status]?.badge || b.status} ${b.statuses.get(b.status)}` : "";
  const source = clip(b.source, LABEL_CHARS, true);
  const counts = [...b.statuses].map(([status, c]) => `${c} ${status}`).join(", ");
  const words = `${plural(b.size, "node")} from ${b.source}: the line repeats ×${b.reps}, ` +
    `${plural(b.perRep, "op")} each` + (counts ? `; ${counts}` : "; unchanged") +
    ". Click to open the block.";
  const rect = (dx, extra) =>
    `<rect class="tf-box${extra}" x="${dx}" y="${-dx}" width="${NODE_W}" height="${NODE_H}" rx="4"/>`;
  let out =
    `<g class="tf-node tf-block" data-block="${b.index}" data-block-size="${b.size}" ` +
    `data-block-reps="${b.reps}" data-block-source="${esc(b.source)}" data-status="${b.status}" ` +
    `data-changed="${b.changed > 0}" role="button" tabindex="0" aria-label="${esc(words)}" ` +
    `transform="translate(${r1(x - NODE_W / 2)},${r1(y - NODE_H / 2)})">` +
    `<title>${esc(words)}</title>${rect(8, " tf-block-back")}${rect(4, " tf-block-back")}${rect(0, "")}` +
    `<text class="tf-label" x="${NODE_W / 2}" y="12.5">×${b.reps} · ${plural(b.perRep, "op")}</text>` +
    `<text class="tf-label tf-block-source" x="${NODE_W / 2}" y="25">${esc(source)}</text>`;
  if (badge) out += badgeSvg(badge, 14, -17);
  return `${out}</g>`;
}
