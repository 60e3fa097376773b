/**
 * The memory timeline under the graph (lesson 8): the bytes the stage's schedule holds at each
 * step, as bars, the peak marked and labelled; under them each value's live range, one bar
 * from the step that makes it to the last step that holds it (coloured by how it is held, or,
 * when the stage has a memory plan, by the slot it is written into). Hovering a step, a range
 * or a node of the graph says what is live there and marks it, in the chart and in the graph.
 * The data is the stage's `memory` (`teachflow/viz/memory.py` says its format); the counting is
 * `teachflow.memory.liveness`'s.
 */

import { bytesText, COUNTING, esc, plural, r1 } from "./common.js";
import { info, nodeIn } from "./stage.js";


const AXIS = 66; // the y axis's labels, left of the bars
const TOP = 20; // room above the bars for the peak's label
const BARS_H = 64;
const STEPS_H = 16; // the step numbers under the bars
const RANGES_MAX = 150; // the ranges' rows together at most (rows get thinner, down to 3 px)
const NAMES_LISTED = 8;
const LABEL_CHAR = 6.8; // px: a character of the peak's label (bold, 11px), a little over
/** Colours of the slots of a memory plan (Paul Tol's muted scheme). */
const SLOT_FILLS = ["#332288", "#88ccee", "#44aa99", "#117733", "#999933", "#ddcc77", "#cc6677",
  "#882255", "#aa4499"];

/** How a value is held, by its index in a value's row (`HELD` in `teachflow/viz/memory.py`). */
const HELD = ["argument", "state", "constant", "intermediate", "output", "view"];

/** Each value's name and the node drawn for it (a kernel's several results are one node), by
 * value id, over the stage's nodes. */
function valueNames(nodes, names) {
  const found = new Map();
  for (const n of nodes) {
    found.set(n.id, { name: names.get(n.id)?.split(", ")[0] ?? `%${n.id}`, node: n.id });
    for (const r of n.results ?? []) found.set(r.id, { name: r.name, node: n.id });
  }
  return found;
}

/** The stage's memory worked out once (per stage): its values (those with bytes are drawn as
 * ranges, each in a row), the step of each node, the peak. */
export function memoryView(st) {
  if (!st.data.stages[st.stage]) return null;
  const inf = info(st, st.stage);
  if (inf.memoryView !== undefined) return inf.memoryView;
  const mem = inf.stage.memory;
  if (!mem) return (inf.memoryView = null);
  const known = valueNames(inf.stage.nodes, st.names);
  const values = mem.values.map(([id, size, first, last, held, slot]) => ({
    name: known.get(id)?.name ?? `%${id}`, node: known.get(id)?.node ?? id,
    size, first, last, held: HELD[held], slot: slot ?? null,
  }));
  const drawn = values.filter((v) => v.size > 0);
  const rows = rowsOf(drawn);
  inf.memoryView = {
    mem, values, drawn, rows,
    count: Math.max(1, ...[...rows.values()].map((r) => r + 1)),
    n: Math.max(1, mem.live.length),
    stepOf: new Map(mem.steps.map((id, k) => [id, k])),
    peak: Math.max(0, ...mem.live),
  };
  return inf.memoryView;
}

/** The drawing's sizes: a step's width (as the view is wide; the chart scrolls past 3 px a
 * step) and a range's height (thinner as the rows grow many). */
function sizes(st, mv) {
  return {
    stepW: Math.max(3, Math.min(32, ((st.size.w || 720) - AXIS - 20) / mv.n)),
    rowH: Math.max(3, Math.min(10, Math.floor(RANGES_MAX / mv.count) - 1)),
  };
}

/** Each drawn value's row: the unplanned ones packed first (a range takes the first row free
 * at its first step), then one row per slot of the plan. */
function rowsOf(drawn) {
  const rows = new Map();
  const ends = [];
  for (const v of drawn.filter((d) => d.slot === null)) {
    let r = ends.findIndex((end) => end < v.first);
    if (r < 0) r = ends.push(0) - 1;
    ends[r] = v.last;
    rows.set(v, r);
  }
  for (const v of drawn.filter((d) => d.slot !== null)) rows.set(v, ends.length + v.slot);
  return rows;
}

/** The fill of a value's range: its slot's colour when planned, else by how it is held. */
function fillOf(v) {
  return v.slot === null ? "" : ` style="fill: ${SLOT_FILLS[v.slot % SLOT_FILLS.length]}"`;
}

/** The whole timeline of the stage on show, as one HTML string ("" without memory data). */
export function memoryHtml(st) {
  const mv = memoryView(st);
  if (!mv) return "";
  const { mem, n, count, peak } = mv;
  const { stepW, rowH } = sizes(st, mv);
  const x = (k) => AXIS + k * stepW;
  const rangesTop = TOP + BARS_H + STEPS_H;
  const height = rangesTop + count * (rowH + 1) + 4;
  const label = peakSvg(mv, x, stepW);
  const width = Math.max(x(n), label.end) + 12;
  const barH = (b) => (peak ? (b / peak) * BARS_H : 0);
  const hits = mem.live.map((b, k) =>
    `<rect class="tf-mem-hit" data-step="${k}" x="${r1(x(k))}" y="0" width="${r1(stepW)}" ` +
    `height="${height}"/>`).join("");
  const bars = mem.live.map((b, k) =>
    `<rect class="tf-mem-bar${k === mem.peak_step ? " tf-mem-peak" : ""}" data-step="${k}" ` +
    `x="${r1(x(k) + (stepW > 4 ? 0.5 : 0))}" y="${r1(TOP + BARS_H - barH(b))}" ` +
    `width="${r1(Math.max(1, stepW - (stepW > 4 ? 1 : 0)))}" height="${r1(barH(b))}">` +
    `<title>${esc(stepTitle(st, mv, k))}</title></rect>`).join("");
  const ranges = mv.drawn.map((v, i) =>
    `<rect class="tf-mem-range" data-mem-row="${i}" data-held="${v.held}"${fillOf(v)} ` +
    `x="${r1(x(v.first) + 0.5)}" y="${r1(rangesTop + mv.rows.get(v) * (rowH + 1))}" ` +
    `width="${r1(Math.max(1, (v.last - v.first + 1) * stepW - 1))}" height="${rowH}">` +
    `<title>${esc(rangeWords(v))}</title></rect>`).join("");
  const svg =
    `<svg class="tf-mem-chart" width="${r1(width)}" height="${r1(height)}" role="img" ` +
    `aria-label="Bytes held at each step; the peak is ${esc(bytesText(peak))}">` +
    hits + axisSvg(mv, x, stepW, rangesTop) + bars + label.svg + ranges + "</svg>";
  return (
    `<div class="tf-mem-head"><strong>memory</strong> <span class="tf-mem-summary">` +
    `${esc(summary(st, mv))}</span></div>` +
    `<div class="tf-mem-scroll">${svg}</div>` +
    `<p class="tf-mem-info" aria-live="polite">${esc(HINT)}</p>` +
    `<div class="tf-mem-legend">${legendHtml(mv)}</div>`
  );
}

const HINT = "Hover a step, a range or a node of the graph: what is held there.";

/** "peak 12.0 KiB at step 3 (%5 = mul), 9 steps" and the plan's arena. */
function summary(st, mv) {
  const { mem, peak } = mv;
  const words = `peak ${bytesText(peak)} at step ${mem.peak_step}` +
    `${mem.steps.length ? ` (${stepNode(st, mv, mem.peak_step)})` : ""}, ` +
    `${plural(mem.steps.length, "step")}`;
  return mem.arena === null ? words
    : `${words}; the memory plan's slots hold ${bytesText(mem.arena)}`;
}

/** The y axis (0 and the peak), the peak's dashed line, the step numbers, the ranges' label. */
function axisSvg(mv, x, stepW, rangesTop) {
  const { n, peak } = mv;
  const every = [1, 2, 5, 10, 20, 50, 100, 200, 500, 1000].find((e) => e * stepW >= 28) ?? 2000;
  let out =
    `<line class="tf-mem-axis" x1="${AXIS}" y1="${TOP + BARS_H}" x2="${r1(x(n))}" y2="${TOP + BARS_H}"/>` +
    `<line class="tf-mem-peak-line" x1="${AXIS}" y1="${TOP}" x2="${r1(x(n))}" y2="${TOP}"/>` +
    `<text class="tf-mem-tick" x="${AXIS - 4}" y="${TOP + 4}" text-anchor="end">${esc(bytesText(peak))}</text>` +
    `<text class="tf-mem-tick" x="${AXIS - 4}" y="${TOP + BARS_H}" text-anchor="end">0 B</text>` +
    `<text class="tf-mem-tick" x="${AXIS - 4}" y="${TOP + BARS_H + 12}" text-anchor="end">step</text>` +
    `<text class="tf-mem-tick" x="${AXIS - 4}" y="${rangesTop + 8}" text-anchor="end">ranges</text>`;
  for (let k = 0; k < n; k += every) {
    out += `<text class="tf-mem-tick" x="${r1(x(k) + stepW / 2)}" y="${TOP + BARS_H + 12}" ` +
      `text-anchor="middle">${k}</text>`;
  }
  return out;
}

/** The peak's label above its bar, reaching left or right of it, whichever side has room;
 * and where its right end is (the chart is made as wide). */
function peakSvg(mv, x, stepW) {
  const { mem, peak } = mv;
  const k = mem.peak_step;
  const cx = x(k) + stepW / 2;
  const text = `▼ peak ${bytesText(peak)} at step ${k}`;
  const w = text.length * LABEL_CHAR;
  const rightward = cx - 6 + w <= x(mv.n) || cx + 6 - w < AXIS;
  const svg = `<line class="tf-mem-peak-mark" x1="${r1(cx)}" y1="${TOP - 5}" x2="${r1(cx)}" y2="${TOP}"/>` +
    `<text class="tf-mem-peak-label" x="${r1(rightward ? cx - 6 : cx + 6)}" y="${TOP - 7}" ` +
    `text-anchor="${rightward ? "start" : "end"}">${esc(text)}</text>`;
  return { svg, end: rightward ? cx - 6 + w : cx + 6 };
}

/** The key to the ranges' colours and what the figures count. */
function legendHtml(mv) {
  const swatch = (held, words) => `<span class="tf-mem-key"><svg width="14" height="10" ` +
    `aria-hidden="true"><rect class="tf-mem-range" data-held="${held}" width="14" height="10"/>` +
    `</svg>${words}</span>`;
  const planned = mv.mem.arena !== null;
  return swatch("argument", "argument, state, constant: held throughout") +
    swatch("intermediate", "intermediate: to its last read") +
    swatch("output", "output: to the end") +
    (planned ? `<span class="tf-mem-key">${SLOT_FILLS.slice(0, 4).map((f) =>
      `<svg width="6" height="10" aria-hidden="true"><rect width="6" height="10" style="fill: ${f}"/></svg>`)
      .join("")} a slot of the memory plan (one row each)</span>` : "") +
    `<span class="tf-mem-key tf-mem-note" title="${esc(COUNTING)}">views own no bytes of their own (not drawn)</span>`;
}

/** "%5 = mul" for step k's node. */
function stepNode(st, mv, k) {
  const id = mv.mem.steps[k];
  const n = nodeIn(info(st, st.stage), id);
  return n?.label ?? st.names.get(id) ?? `%${id}`;
}

/** The values live at step k. */
export function liveAt(mv, k) {
  return mv.values.filter((v) => v.first <= k && k <= v.last);
}

function stepTitle(st, mv, k) {
  return `step ${k}${mv.mem.steps.length ? `, ${stepNode(st, mv, k)}` : ""}: ` +
    `${bytesText(mv.mem.live[k])} held`;
}

/** A step in words: what runs, what is held, by which values, and what a node that owns
 * graphs holds inside them. */
export function stepWords(st, mv, k) {
  const live = liveAt(mv, k).filter((v) => v.size > 0);
  const own = live.reduce((s, v) => s + v.size, 0);
  const inside = mv.mem.live[k] - own;
  const names = live.slice(0, NAMES_LISTED).map((v) => `${v.name} (${v.held}, ${bytesText(v.size)})`);
  const more = live.length - names.length;
  return `${stepTitle(st, mv, k)} by ${plural(live.length, "value")}: ${names.join(", ")}` +
    `${more > 0 ? ` and ${more} more` : ""}` +
    `${inside > 0 ? `, and ${bytesText(inside)} inside the graphs its node runs` : ""}.`;
}

/** A value's range in words: "%3: steps 1..4, 4.0 KiB, held as intermediate, slot 2". */
export function rangeWords(v) {
  return `${v.name}: steps ${v.first}..${v.last}, ${bytesText(v.size)}, held as ${v.held}` +
    `${v.slot === null ? "" : `, slot ${v.slot}`}`;
}

// --- On the page --------------------------------------------------------------------------------

/** Draw the timeline of the stage on show (hidden when the stage has no memory data). */
export function renderMemory(st) {
  const html = memoryHtml(st);
  st.ui.memory.hidden = !html;
  st.ui.memory.innerHTML = html;
}

/** Mark step k: its column, the ranges live there, their nodes in the graph; say it in words. */
export function showStep(st, k) {
  const mv = memoryView(st);
  if (!mv || k === undefined || k < 0 || k >= mv.mem.live.length) return;
  const live = new Set(liveAt(mv, k));
  mark(st, mv, (v) => live.has(v), [k], mv.mem.steps[k] ?? null);
  st.ui.memory.querySelector(".tf-mem-info").textContent = stepWords(st, mv, k);
}

/** Mark the range of drawn value i and its steps; say it in words. */
export function showRange(st, i) {
  const mv = memoryView(st);
  const v = mv?.drawn[i];
  if (!v) return;
  const steps = Array.from({ length: v.last - v.first + 1 }, (_, j) => v.first + j);
  mark(st, mv, (u) => u === v, steps, null);
  st.ui.memory.querySelector(".tf-mem-info").textContent = rangeWords(v);
}

/** What is under the pointer in the timeline, or in the graph (a node: its step). */
export function onMemoryHover(st, target) {
  const mv = memoryView(st);
  if (!mv) return;
  const range = target.closest?.("[data-mem-row]");
  const stepAt = target.closest?.("[data-step]");
  const node = target.closest?.(".tf-graph [data-node-id]");
  if (range) showRange(st, Number(range.dataset.memRow));
  else if (stepAt && st.ui.memory.contains(stepAt)) showStep(st, Number(stepAt.dataset.step));
  else if (node && mv.stepOf.has(Number(node.dataset.nodeId))) {
    showStep(st, mv.stepOf.get(Number(node.dataset.nodeId)));
  } else clearMemoryMarks(st);
}

function mark(st, mv, isLive, steps, running) {
  clearMemoryMarks(st);
  const chart = st.ui.memory.querySelector(".tf-mem-chart");
  if (!chart) return;
  chart.classList.add("tf-mem-marking");
  for (const k of steps) {
    for (const el of chart.querySelectorAll(`[data-step="${k}"]`)) el.classList.add("tf-mem-on");
  }
  const nodes = new Set();
  mv.drawn.forEach((v, i) => {
    if (!isLive(v)) return;
    chart.querySelector(`[data-mem-row="${i}"]`)?.classList.add("tf-mem-on");
  });
  for (const v of mv.values) if (isLive(v)) nodes.add(v.node);
  for (const id of nodes) graphNode(st, id)?.classList.add("tf-live");
  if (running !== null) graphNode(st, running)?.classList.add("tf-live-step");
}

function graphNode(st, id) {
  return st.ui.graph.querySelector(`.tf-nodes:not(.tf-nodes-removed) [data-node-id="${id}"]`);
}

export function clearMemoryMarks(st) {
  for (const el of st.root.querySelectorAll(".tf-mem-on, .tf-live, .tf-live-step, .tf-mem-marking")) {
    el.classList.remove("tf-mem-on", "tf-live", "tf-live-step", "tf-mem-marking");
  }
  const infoLine = st.ui.memory.querySelector(".tf-mem-info");
  if (infoLine) infoLine.textContent = HINT;
}
