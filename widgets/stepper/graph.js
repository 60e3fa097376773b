/**
 * The graph on the page: draw the stage on show (`view` chooses, `place` places, `graphSvg`
 * draws), mark the selected change and node on what is drawn, scroll to them, zoom, open a
 * collapsed block, and open or close a control-flow box. Each function takes the stepper's state
 * `st` (with its page elements, `st.ui`) and keeps what is on screen in `st.drawn`. No layout is
 * read while drawing: the view's size comes from a ResizeObserver (`st.size`).
 */

import { isBox } from "./boxes.js";
import { plural } from "./common.js";
import { graphSvg } from "./draw.js";
import { info, nodeIn } from "./stage.js";
import { blocksOf, place, view } from "./view.js";

export function drawGraph(st, scroll) {
  const { ui } = st;
  const inf = info(st, st.stage);
  const v = view(st, inf);
  const placed = place(inf, v);
  const { where, blockAt, box, of, inside } = placed;
  const zoom = st.zoom ?? autoZoom(st, box);
  ui.graph.innerHTML = graphSvg(inf, v, placed, zoom, st.uid);

  st.drawn = {
    page: v.page, ids: new Set([...where.keys(), ...inside.keys()]), box, zoom, where,
    blocks: blockAt, of, inside,
  };
  ui.note.textContent = v.note;
  ui.expand.hidden = !inf.big;
  ui.expand.textContent = st.expandAll ? "show the neighbourhood only" : `expand all (${plural(v.total, "node")})`;
  markMatches(st);
  markSelected(st);
  if (scroll) scrollToFocus(st);
}

/** Bring the selected change (or else the selected node) into view. */
export function scrollToFocus(st) {
  const c = info(st, st.stage).stage.changes[st.change];
  scrollToNodes(st, c ? [...c.result, ...c.nodes] : st.node !== null ? [st.node] : []);
}

/** Open a collapsed block: draw its members (within the neighbourhood) one by one. */
export function openBlock(st, index) {
  const inf = info(st, st.stage);
  const block = blocksOf(inf).list[index];
  if (!block) return;
  const members = [];
  for (const [id, b] of st.drawn.of ?? []) if (b === block) members.push(id);
  st.openBlocks.add(block.source);
  drawGraph(st, false);
  const top = members.filter((id) => st.drawn.where.has(id))
    .sort((p, q) => st.drawn.where.get(p)[1] - st.drawn.where.get(q)[1]);
  scrollToNodes(st, top.slice(0, 1));
  st.ui.narration.textContent = `Opened the block of ${plural(block.size, "node")} from ` +
    `${block.source} (×${block.reps}).`;
}

/** Open or close control-flow box `id` (a node that owns graphs): its graphs are drawn inside
 * it, or folded away again. The focus stays on the box, for the keys. */
export function toggleBox(st, id) {
  const n = nodeIn(info(st, st.stage), id);
  if (!isBox(n)) return;
  const open = !st.openBoxes.has(id);
  if (open) st.openBoxes.add(id);
  else st.openBoxes.delete(id);
  drawGraph(st, false);
  scrollToNodes(st, [id]);
  const graphs = n.kind === "module" ? `${n.caption}`
    : n.subgraphs.map((p) => `${p.key} (${p.name})`).join(" and ");
  const name = n.kind === "module" ? n.scope : n.label;
  st.ui.narration.textContent = open
    ? `Opened ${name}: its ${graphs}, drawn inside it` +
      (n.changes_inside ? `, with ${plural(n.changes_inside, "change")} by this pass.` : ".")
    : `Closed ${name}.`;
  st.ui.graph.querySelector(`.tf-cf-toggle[data-box="${id}"]`)?.focus({ preventScroll: true });
}

/** Where a node is drawn: its own box, inside an opened box, or the closed box or collapsed
 * block it is in. */
function drawnAt(st, id) {
  const { where, blocks, of, inside } = st.drawn;
  const at = where.get(id) ?? inside?.get(id) ?? (of && blocks.get(of.get(id)));
  if (at) return at;
  const owner = drawnOwner(st, id);
  return owner === null ? undefined : where.get(owner) ?? inside?.get(owner);
}

/** The innermost drawn box that holds node `id` (closed, as it is drawn), or null. */
function drawnOwner(st, id) {
  const owners = info(st, st.stage).inner.get(id)?.owners ?? [];
  for (let k = owners.length - 1; k >= 0; k--) if (st.drawn.ids.has(owners[k])) return owners[k];
  return null;
}

/** Mark the nodes of the selected change: the ones it took (before) and the ones it made. */
export function markMatches(st) {
  for (const g of st.ui.graph.querySelectorAll(".tf-match-before, .tf-match-after")) {
    g.classList.remove("tf-match-before", "tf-match-after");
  }
  const c = info(st, st.stage).stage.changes[st.change];
  if (!c) return;
  for (const id of c.nodes) nodeElement(st, id)?.classList.add("tf-match-before");
  for (const id of c.result) nodeElement(st, id)?.classList.add("tf-match-after");
}

export function markSelected(st) {
  st.ui.graph.querySelector(".tf-selected")?.classList.remove("tf-selected");
  if (st.node !== null) nodeElement(st, st.node)?.classList.add("tf-selected");
}

function nodeElement(st, id) {
  // Prefer the drawn-now node over a faded one with the same id (a result that is also kept),
  // and else the collapsed block it is in.
  const { graph } = st.ui;
  const block = st.drawn.of?.get(id);
  const owner = drawnOwner(st, id);
  return (
    graph.querySelector(`.tf-nodes:not(.tf-nodes-removed) [data-node-id="${id}"]`) ??
    graph.querySelector(`[data-node-id="${id}"]`) ??
    (block && st.drawn.blocks.has(block)
      ? graph.querySelector(`.tf-block[data-block="${block.index}"]`) : null) ??
    (owner !== null ? graph.querySelector(`.tf-cf[data-node-id="${owner}"]`) : null)
  );
}

/** Scroll the graph so the first of `ids` that is drawn sits in the middle of the view. The
 * scroll waits for the next frame, when the browser lays the page out anyway: scrolling now
 * would force a second layout in the middle of a redraw. */
export function scrollToNodes(st, ids) {
  const { box, zoom } = st.drawn;
  const p = ids.map((id) => drawnAt(st, id)).find(Boolean);
  if (!p || !box) return;
  cancelAnimationFrame(st.scrolling);
  st.scrolling = requestAnimationFrame(() => {
    st.ui.wrap.scrollLeft = (p[0] - box.x) * zoom - st.size.w / 2;
    st.ui.wrap.scrollTop = (p[1] - box.y) * zoom - st.size.h / 2;
  });
}

/** The smallest zoom at which a whole graph is still drawn at first: below it, labels are too
 * small to read, and the graph is drawn as wide as the view and scrolls down. */
const READABLE = 0.6;

/** Until the learner zooms: the whole graph if it fits the view at a readable size (its last
 * node too, not just its width), else the whole width if that stays readable, else as much as
 * does. */
export function autoZoom(st, box) {
  if (!st.size.w) return 1;
  const wide = Math.min(1, (st.size.w - 4) / box.w);
  const whole = Math.min(wide, (st.size.h - 4) / box.h);
  return whole >= READABLE ? whole : Math.max(0.35, wide);
}

export function setZoom(st, zoom) {
  st.zoom = Math.max(0.05, Math.min(3, zoom));
  drawGraph(st, true);
}

export function fit(st) {
  const { box } = st.drawn;
  if (!box) return;
  setZoom(st, Math.min((st.size.w - 4) / box.w, (st.size.h - 4) / box.h) || 1);
}
