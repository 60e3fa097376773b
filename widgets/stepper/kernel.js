/**
 * A fused kernel, as the node's details show it: the ops it computes in one pass over memory,
 * the results it writes (a kernel may write several: each named, with the nodes that read it),
 * which kernel ran on the CPU and why, and its three versions side by side in a panel under the
 * graph: the NumPy, C and CUDA sources generated for the same ops. The sources arrive
 * compressed and are inflated when the first kernel is opened (`loadSources`), so the panel may
 * say "inflating" for a moment. Pure functions of the stepper's state `st` and a stage's
 * lookups `inf`, returning HTML.
 */

import { esc, plural } from "./common.js";
import { loadSources } from "./data.js";

/** Lines of a source shown at once (a click shows them all). */
const SOURCE_LINES = 300;

/** The three versions of a kernel: [key in the data, title, where it runs]. */
const VERSIONS = [
  ["numpy", "NumPy", "runs on the CPU, block by block, where C does not"],
  ["c", "C", "compiled to machine code for the CPU, one loop over the elements"],
  ["cuda", "CUDA C", "runs on the GPU through CuPy, one thread per element"],
];

/** Which of the versions ran on the CPU, from the kernel's sentence ("C, compiled by cc ...",
 * "NumPy: no C compiler ..."); "" before it has run. */
export function ranVersion(kernel) {
  const ran = String(kernel?.ran ?? "");
  if (/^C\b/.test(ran)) return "c";
  if (/^NumPy\b/.test(ran)) return "numpy";
  return "";
}

/** Each value's readers in a stage: value id -> the ids of the nodes that read it. */
function readersOf(inf) {
  if (!inf.readers) {
    inf.readers = new Map();
    for (const n of inf.stage.nodes) {
      for (const value of n.inputs) {
        if (value === null) continue;
        if (!inf.readers.has(value)) inf.readers.set(value, []);
        const list = inf.readers.get(value);
        if (list[list.length - 1] !== n.id) list.push(n.id);
      }
    }
  }
  return inf.readers;
}

/** The results of a node with several (a kernel's, a loop's), each with its type (for a kernel,
 * which of its ops' values it is) and the nodes that read it: the edges that leave the node.
 * `link` names a node as a button. */
export function resultsHtml(inf, n, link) {
  if (!n.results) return "";
  const readers = readersOf(inf);
  const items = n.results.map((r) => {
    const by = readers.get(r.id) ?? [];
    const read = by.length ? `read by ${by.slice(0, 6).map(link).join(", ")}` +
      (by.length > 6 ? ` and ${(by.length - 6).toLocaleString("en")} more` : "")
      : n.is_output ? "returned" : "read by no node";
    const writes = r.writes ? ` (the value of its <code>${esc(r.writes)}</code>)` : "";
    return `<li><code>${esc(r.name)}</code> <code>${esc(r.type)}</code>${writes}: ${read}</li>`;
  });
  return `<h4>${plural(n.results.length, "result")}</h4><ul class="tf-results">${items.join("")}</ul>`;
}

/** The kernel in the details column: what it computes, what ran, where its sources are. */
export function kernelHtml(n) {
  if (!n.kernel) return "";
  const k = n.kernel;
  const ops = n.body.length;
  const writes = n.results ? `${plural(n.results.length, "result")}` : "one result";
  return (
    `<h4>fused kernel ${esc(k.name)}</h4>` +
    `<p>${plural(ops, "op")} in one kernel: it reads its inputs once and writes ${writes}, ` +
    "with no temporaries in memory between the ops.</p>" +
    `<p class="tf-ran"><strong>On the CPU:</strong> ${esc(k.ran ?? "not known")}</p>` +
    "<p>Its NumPy, C and CUDA versions are side by side under the graph.</p>" +
    `<details class="tf-kernel-ops"${ops <= 12 ? " open" : ""}><summary>its ops, as the IR ` +
    `prints them</summary><pre class="tf-members">${esc(n.body.join("\n"))}</pre></details>`
  );
}

/** The panel under the graph: the kernel's three sources side by side, the one that ran on
 * the CPU marked. `full`: the sources whose every line the learner asked for. Starts inflating
 * the sources if they have not come yet (`rerender` draws the panel again once they have). */
export function sourcesHtml(st, n, full, rerender) {
  const k = n.kernel;
  if (!st.sourcesLoaded) {
    loadSources(st).then(rerender);
    return `<h3>${esc(k.name)}: its sources</h3><p class="tf-hint">Inflating the sources…</p>`;
  }
  const ran = ranVersion(k);
  const columns = VERSIONS.map(([key, title, where]) => {
    const source = k[key];
    const why = k.missing?.[key];
    const badge = key === ran ? ' <span class="tf-ran-badge">ran on the CPU</span>' : "";
    return (
      `<figure class="tf-source" data-lang="${key}" data-ran="${key === ran}">` +
      `<figcaption><strong>${title}</strong>${badge}<br><span class="tf-where">${where}</span>` +
      `</figcaption>${source == null
        ? `<p class="tf-hint">Not generated${why ? `: ${esc(why)}` : ""}.</p>`
        : codeHtml(key, source, full.has(key))}</figure>`
    );
  });
  return (
    `<h3>${esc(k.name)}: one kernel, three versions <span class="tf-where">(the same ` +
    `${plural(n.body.length, "op")}, generated as NumPy, C and CUDA)</span></h3>` +
    `<div class="tf-sources">${columns.join("")}</div>`
  );
}

/** A source's text, its first SOURCE_LINES lines unless `all`. */
function codeHtml(key, source, all) {
  const lines = source.split("\n");
  const shown = all ? lines : lines.slice(0, SOURCE_LINES);
  const more = lines.length - shown.length;
  return `<pre class="tf-code" data-lang="${key}">${esc(shown.join("\n"))}</pre>` +
    (more ? `<button type="button" class="tf-source-all" data-lang="${key}">show all ` +
      `${lines.length.toLocaleString("en")} lines (${more.toLocaleString("en")} more)</button>` : "");
}
