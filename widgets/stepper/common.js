/**
 * What every part of the stepper shares: the drawing's sizes, the words for each change status,
 * what counts as a node, and small text helpers. No state, no page: plain values and functions.
 */

/** Box size and spacing of the drawing, in pixels (the layout's unit is one grid step). */
export const NODE_W = 124;
export const NODE_H = 30;
export const X_SCALE = 150;
export const Y_SCALE = 70;
export const PAD = 36;
/** The most characters a node's label shows in its box: the box's width, less a margin, over
 * the width of a character of its monospace font (0.6em at 11px). A longer label is shortened
 * (`fitLabel`), and its box's tooltip says it in full. */
export const LABEL_CHARS = Math.floor((NODE_W - 8) / (11 * 0.6));

/** How each change status is told apart: a colour (Okabe–Ito, in the CSS), an outline (in the
 * CSS) and a word badge (here). */
export const STATUS = {
  added: { badge: "+ new", words: "added by this pass" },
  removed: { badge: "− gone", words: "removed by this pass (drawn faded)" },
  replaced: { badge: "↻ replaced", words: "stands for what a rule rewrote" },
  merged: { badge: "⇉ merged", words: "a duplicate was merged into it" },
  fused: { badge: "⊕ fused", words: "a fused kernel" },
  placed: { badge: "⊙ placed", words: "this pass chose its device (its fill says which)" },
  moved: { badge: "⇅ moved", words: "run earlier, to free memory sooner" },
  new_slot: { badge: "▭ slot", words: "its value has a slot of memory of its own" },
  reused: { badge: "♻ reused", words: "its value reuses the slot of a value now dead" },
  in_place: { badge: "✎ in place", words: "its value is written over an operand that dies here" },
  recomputed: { badge: "⟲ again", words: "computed again in backward (tfl.checkpoint), not kept" },
  bucketed: { badge: "▤ bucket", words: "one all-reduce for a bucket of gradients, not one each" },
  kept: { badge: "", words: "unchanged" },
};

/** The fill of a box by the device its node runs on, as `teachflow/viz/devices.py` has it (Paul
 * Tol's pale colours; the CPU's own device plain): cpu:1, cpu:2, ... in turn, the GPU's the
 * fourth. */
const DEVICE_FILLS = ["#bbccee", "#eeeebb", "#ccddaa", "#ffcccc", "#cceeff", "#dddddd"];

export function deviceFill(device) {
  if (!device || device === "cpu") return "";
  const [kind, index] = device.split(":");
  const at = (kind === "gpu" ? 3 : -1) + Number(index || 0);
  return DEVICE_FILLS[((at % DEVICE_FILLS.length) + DEVICE_FILLS.length) % DEVICE_FILLS.length];
}

/** What the stepper counts as a node, in every count it shows: an op, that is one line of the
 * text IR (what the compiler's `stats.nodes` counts). The inputs, captured tensors and
 * constants the ops read are drawn as boxes too, but are counted apart, never as nodes. */
export function isOp(n) {
  return n.kind === "node";
}

/** "2 inputs and 1 constant": the boxes that are not nodes. */
export function operandWords(nodes) {
  let inputs = 0;
  let constants = 0;
  for (const n of nodes) {
    if (n.kind === "const") constants++;
    else if (!isOp(n)) inputs++;
  }
  const words = [inputs && plural(inputs, "input"), constants && plural(constants, "constant")];
  return words.filter(Boolean).join(" and ") || "no inputs";
}

export function esc(text) {
  return String(text ?? "")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

export function r1(v) {
  return Math.round(v * 10) / 10;
}

/** 1234567 -> "1.2 M": figures read at a glance. */
export function human(n) {
  const a = Math.abs(n);
  if (a >= 1e9) return `${r1(n / 1e9)} G`;
  if (a >= 1e6) return `${r1(n / 1e6)} M`;
  if (a >= 1e4) return `${r1(n / 1e3)} k`;
  return String(n);
}

/** 12345 -> "12.1 KiB": bytes, read at a glance. */
export function bytesText(n) {
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let v = n;
  let u = 0;
  while (Math.abs(v) >= 1024 && u < units.length - 1) {
    v /= 1024;
    u++;
  }
  return u ? `${v.toFixed(1)} ${units[u]}` : `${v} B`;
}

/** How memory is counted (`teachflow/figures.py`, `teachflow.memory.liveness`), for the peak's
 * figure and the memory timeline's legend. */
export const COUNTING = "arguments, state and constants are held throughout; an intermediate " +
  "from the step that makes it to its last read; an output to the end; a view owns no bytes";

export function plural(n, word) {
  return `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
}

/** `text`, at most `max` characters: cut at the end with "…" (or, `fromEnd`, at the start). */
export function clip(text, max, fromEnd = false) {
  if (text.length <= max) return text;
  return fromEnd ? `…${text.slice(text.length - max + 1)}` : `${text.slice(0, max - 1)}…`;
}

/** A node's label ("%98, %99, %100 = fused_k1") made to fit `max` characters: the op keeps its
 * name, and the results' names give way first ("%98,… = fused_k1"). */
export function fitLabel(label, max = LABEL_CHARS) {
  if (label.length <= max) return label;
  const at = label.lastIndexOf(" = ");
  const op = at < 0 ? "" : label.slice(at);
  const room = max - op.length;
  if (at < 0 || room < 4) return clip(label, max);
  const first = label.slice(0, at).split(", ")[0];
  const names = first.length + 2 <= room ? `${first},…` : clip(first, room);
  return `${names}${op}`;
}

export function prettyRule(rule) {
  return String(rule).replace(/ -> /g, " → ");
}
