/**
 * The text IR and its diff against the stage before. `diffLines` is a line diff (an exact
 * longest common subsequence, or a linear greedy one for big texts) that compares code, not the
 * alignment of comments; `irPanel` is what the IR panel shows for a stage: the changed lines with
 * a little context, the rest folded away. Pure functions (the panel's HTML is cached on the
 * stage's lookups, `inf`, as every per-stage lookup is).
 */

import { esc, plural } from "./common.js";

/** Unchanged IR lines kept around each changed line before the rest is folded away. */
const IR_CONTEXT = 2;
/** IR lines drawn at once (a click shows them all). */
const IR_LINES = 400;
/** Line pairs up to which the IR diff is an exact longest-common-subsequence. */
const LCS_LIMIT = 2e6;

/** A line of the text IR without its alignment: `str(graph)` pads every line's code to the
 * widest one before the `# file:line` column, so one wider (or narrower) line moves every
 * comment. Lines are compared by this, so that only code that changed is marked. */
export function codeOf(line) {
  return line.replace(/\s+(#[^#]*)?$/, (_, comment) => (comment ? `  ${comment}` : ""));
}

/** Lines of `a` and `b` as [mark, line] pairs: " " same, "-" only in a, "+" only in b. Lines are
 * compared by their code (`codeOf`) and shown as printed: a kept line as `b` prints it. */
export function diffLines(a, b) {
  const ka = a.map(codeOf);
  const kb = b.map(codeOf);
  let start = 0;
  while (start < a.length && start < b.length && ka[start] === kb[start]) start++;
  let endA = a.length;
  let endB = b.length;
  while (endA > start && endB > start && ka[endA - 1] === kb[endB - 1]) {
    endA--;
    endB--;
  }
  const midA = ka.slice(start, endA);
  const midB = kb.slice(start, endB);
  const middle =
    midA.length * midB.length <= LCS_LIMIT ? lcsDiff(midA, midB) : greedyDiff(midA, midB);
  return [
    ...b.slice(0, start).map((line) => [" ", line]),
    ...middle.map(([mark, i]) => [mark, mark === "-" ? a[start + i] : b[start + i]]),
    ...b.slice(endB).map((line) => [" ", line]),
  ];
}

/** The exact diff: a longest common subsequence, by dynamic programming. Each step is [mark,
 * index]: the index is into `a` for "-" and into `b` for " " and "+". */
function lcsDiff(a, b) {
  const n = a.length;
  const m = b.length;
  const width = m + 1;
  const table = new Uint32Array((n + 1) * width); // table[i, j]: LCS of a[i:] and b[j:]
  for (let i = n - 1; i >= 0; i--) {
    for (let j = m - 1; j >= 0; j--) {
      table[i * width + j] =
        a[i] === b[j]
          ? table[(i + 1) * width + j + 1] + 1
          : Math.max(table[(i + 1) * width + j], table[i * width + j + 1]);
    }
  }
  const out = [];
  let i = 0;
  let j = 0;
  while (i < n && j < m) {
    if (a[i] === b[j]) {
      out.push([" ", j]);
      i++;
      j++;
    } else if (table[(i + 1) * width + j] >= table[i * width + j + 1]) {
      out.push(["-", i++]);
    } else {
      out.push(["+", j++]);
    }
  }
  while (i < n) out.push(["-", i++]);
  while (j < m) out.push(["+", j++]);
  return out;
}

/** A linear-time diff for big texts: IR lines name their node, so they are nearly all unique,
 * and a line found on both sides is simply kept. Steps as in `lcsDiff`. */
function greedyDiff(a, b) {
  const inA = new Set(a);
  const inB = new Set(b);
  const out = [];
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    if (i < a.length && j < b.length && a[i] === b[j]) {
      out.push([" ", j]);
      i++;
      j++;
    } else if (i < a.length && (!inB.has(a[i]) || j >= b.length)) {
      out.push(["-", i++]);
    } else if (j < b.length && (!inA.has(b[j]) || i >= a.length)) {
      out.push(["+", j++]);
    } else {
      out.push(["-", i++]); // a line that moved: shown removed here, added where it went
    }
  }
  return out;
}

/** The IR diff against the stage before, worked out once per stage. */
export function irDiff(inf) {
  if (!inf.diff) {
    const lines = diffLines(inf.previous.text.split("\n"), inf.stage.text.split("\n"));
    let added = 0;
    let removed = 0;
    for (const [mark] of lines) {
      if (mark === "+") added++;
      else if (mark === "-") removed++;
    }
    inf.diff = { lines, added, removed };
  }
  return inf.diff;
}

/** What the IR panel shows for a stage: a `summary`, and either the plain `text` of its IR or
 * the `html` of its diff against the stage before (every line when `full`). */
export function irPanel(inf, full) {
  if (!inf.previous) return plainPanel("(as traced)", inf.stage.text, full);
  const { lines, added, removed } = irDiff(inf);
  if (!added && !removed) return plainPanel("(the same as the stage before)", inf.stage.text, full);
  const summary = `(against ${inf.previous.pass}: +${added} −${removed} lines)`;
  if (full) return { summary, html: diffHtml(lines, true) };
  if (!inf.irHtml) inf.irHtml = diffHtml(lines, false);
  return { summary, html: inf.irHtml };
}

/** A stage's text as it is, its first IR_LINES lines unless `full` (a click shows them all). */
function plainPanel(summary, text, full) {
  const lines = text.split("\n");
  if (full || lines.length <= IR_LINES) return { summary, text };
  const more = (lines.length - IR_LINES).toLocaleString("en");
  return {
    summary,
    html: `${esc(lines.slice(0, IR_LINES).join("\n"))}\n` +
      `<span class="tf-ir-skip" role="button" tabindex="0">… ${more} more lines (show all)</span>\n`,
  };
}

/** The diff's lines as HTML: the changed lines and a little context, the rest folded (runs of 3
 * or more) behind a "show all" mark; every line when `full`. */
export function diffHtml(lines, full) {
  const keep = new Uint8Array(lines.length).fill(full ? 1 : 0);
  lines.forEach(([mark], i) => {
    if (mark === " ") return;
    const last = Math.min(lines.length - 1, i + IR_CONTEXT);
    for (let j = Math.max(0, i - IR_CONTEXT); j <= last; j++) keep[j] = 1;
  });
  for (let i = 0; i < lines.length; ) {
    let j = i;
    while (j < lines.length && !keep[j]) j++;
    if (j - i < 3) keep.fill(1, i, j);
    i = j + 1;
  }
  const out = [];
  const more = (text) =>
    out.push(`<span class="tf-ir-skip" role="button" tabindex="0">… ${text} (show all)</span>\n`);
  let skipped = 0;
  let shown = 0;
  for (let i = 0; i < lines.length; i++) {
    if (!keep[i]) {
      skipped++;
      continue;
    }
    if (skipped) more(plural(skipped, "unchanged line"));
    skipped = 0;
    if (!full && shown === IR_LINES) {
      more(`${(lines.length - i).toLocaleString("en")} more lines`);
      break;
    }
    const [mark, line] = lines[i];
    const diff = mark === "+" ? "add" : mark === "-" ? "del" : "same";
    out.push(`<span class="tf-line" data-diff="${diff}">${mark} ${esc(line)}</span>\n`);
    shown++;
  }
  if (skipped) more(plural(skipped, "unchanged line"));
  return out.join("");
}
