/**
 * The panels around the graph, as HTML strings: the stage list and the figures on the left, the
 * rule card (what the pass changed, and why) and the selected node's details on the right (a
 * fused kernel's part of them comes from `kernel.js`), and the narration line. Pure functions of the stepper's state `st` (the data, the stage on show,
 * the selected change and node); the page sets each with one innerHTML.
 */

import {
  bytesText, COUNTING, esc, human, isOp, operandWords, plural, prettyRule, r1, STATUS,
} from "./common.js";
import { kernelHtml, resultsHtml } from "./kernel.js";
import { info, nodeHistory, nodeIn, presentIn } from "./stage.js";

/** The figures per stage: [key in `stats`, name, what it measures, how its value reads]. */
const FIGURES = [
  ["nodes", "nodes", "nodes: ops only (inputs and constants are not counted)", human],
  ["kernels", "kernels", "kernels launched (views launch none)", human],
  ["bytes_moved", "bytes moved", "bytes read and written by the kernels", human],
  ["flops", "flops", "floating-point operations", human],
  ["bytes_transferred", "bytes transferred", "bytes copied from one device to another", human],
  ["peak_bytes", "peak memory", `the most bytes held at once: ${COUNTING}`, bytesText],
];
/** Changes listed at once in the rule card (the arrows reach the rest). */
const LIST_LIMIT = 200;
/** Nodes named in a line of a node's lineage (a kernel may stand for thousands). */
const LINEAGE_NAMES = 8;
/** Nodes listed before and after a change (a fusion may take thousands). */
const CHANGE_NODES = 40;

// --- Stages and figures -------------------------------------------------------------------------

/** The list of stages, each with what it did in a few words. */
export function stageListHtml(stages) {
  return stages
    .map((s, i) => {
      const what = i === 0 ? plural(s.stats.nodes, "node") : s.changed
        ? plural(s.changes.length, "change") : "changed nothing";
      return (
        `<li class="tf-stage" data-stage="${i}" data-changed="${s.changed}">` +
        `<button type="button" data-stage="${i}">` +
        `<span class="tf-stage-name">${i + 1}. ${esc(s.pass)}</span>` +
        `<span class="tf-stage-what">${esc(what)}</span></button></li>`
      );
    })
    .join("");
}

/** The figures (FIGURES), each a sparkline over the stages, with a place for its value. */
export function figuresHtml(stages) {
  const barW = 12;
  const height = 28;
  // (a stepper that watches a trace or a backward pass counts nodes only)
  return FIGURES.filter(([key]) => key in (stages[0]?.stats ?? {})).map(([key, name, words, format]) => {
    const values = stages.map((s) => s.stats[key] ?? 0);
    const top = Math.max(...values, 1);
    const bars = values
      .map((v, i) => {
        const h = Math.max(1, (v / top) * (height - 2));
        return (
          `<rect class="tf-bar" data-stage="${i}" x="${i * barW + 1}" y="${r1(height - h)}" ` +
          `width="${barW - 2}" height="${r1(h)}"><title>${esc(stages[i].pass)}: ` +
          `${format === human ? v.toLocaleString("en") : format(v)} ${name}</title></rect>`
        );
      })
      .join("");
    return (
      `<div class="tf-figure" data-stat="${key}" title="${esc(words)}">` +
      `<span class="tf-figure-name">${name}</span>` +
      `<svg class="tf-spark" width="${values.length * barW}" height="${height}" ` +
      `role="img" aria-label="${name} per stage">${bars}</svg>` +
      `<span class="tf-figure-value"></span></div>`
    );
  }).join("");
}

/** A figure of stage `i` as shown beside its sparkline, with its change from the stage before:
 * "1.2 k (−40)". */
export function figureValue(stages, i, key) {
  const v = stages[i].stats[key] ?? 0;
  const format = FIGURES.find(([k]) => k === key)?.[3] ?? human;
  let text = format(v);
  if (i > 0) {
    const d = v - (stages[i - 1].stats[key] ?? 0);
    if (d) text += ` (${d > 0 ? "+" : "−"}${format(Math.abs(d))})`;
  }
  return text;
}

// --- The rule card ------------------------------------------------------------------------------

/** A node's name, as a button that selects it when the stage holds it. */
function nodeLink(st, inf, id) {
  const name = esc(st.names.get(id) ?? `%${id}`);
  return nodeIn(inf, id)
    ? `<button type="button" class="tf-node-link" data-node-id="${id}">${name}</button>`
    : `<span class="tf-node-name">${name}</span>`;
}

/** The state a call updates, in words: "This function updates w, w.grad: ...". */
function updatesWords(stage) {
  if (!stage.updates?.length) return "";
  const names = stage.updates.map((u) => `<code>${esc(u.state)}</code>`).join(", ");
  return `<p class="tf-updates">This function updates ${names}: the graph computes the new ` +
    "values (marked → on the nodes), and each call writes them back after the graph runs.</p>";
}

/** The rule card: the traced graph's summary, or the selected change of the stage in words, its
 * nodes before and after, and every change of the stage grouped by rule. */
export function ruleHtml(st) {
  const inf = info(st, st.stage);
  const { stage } = inf;
  const changes = stage.changes;
  const { words } = st.data;
  if (st.stage === 0 && words) return `<h3>${esc(words.title)}</h3><p>${esc(words.card)}</p>`;
  if (st.stage === 0) {
    return (
      `<h3>The traced graph</h3><p>${plural(stage.stats.nodes, "node")} as traced from ` +
      `your code, reading ${operandWords(stage.nodes)} (drawn, but not counted as nodes). ` +
      "Step forward (→ or j) to watch each pass change it.</p>" + updatesWords(stage) +
      (stage.groups.length ? "<p>Each box ▸ holds the nodes one module made (its forward, " +
        "or its gradient): click a box to open it.</p>" : "")
    );
  }
  if (!changes.length) {
    return `<h3>${esc(stage.pass)}</h3><p>This pass changed nothing.</p>`;
  }
  const c = changes[st.change];
  const texts = (ids, lookup) =>
    ids.slice(0, CHANGE_NODES).map((id) => {
      const n = lookup(id);
      return `<li>${nodeLink(st, inf, id)} <code>${esc(n ? n.text : "")}</code></li>`;
    }).join("") + (ids.length > CHANGE_NODES
      ? `<li class="tf-more">and ${(ids.length - CHANGE_NODES).toLocaleString("en")} more</li>` : "");
  const previous = st.stage > 0 ? info(st, st.stage - 1) : null;
  const before = texts(c.nodes, (id) => (previous && presentIn(previous, id)) ?? nodeIn(inf, id));
  const after = texts(c.result, (id) => presentIn(inf, id));
  const rules = new Map();
  changes.forEach((ch, k) => {
    const entry = rules.get(ch.rule) ?? { first: k, count: 0, kind: ch.kind };
    entry.count++;
    rules.set(ch.rule, entry);
  });
  const groups = [...rules].map(([rule, { first, count, kind }]) =>
    `<li><button type="button" class="tf-rule-group" data-change="${first}" data-status="${kind}">` +
    `${esc(prettyRule(rule))} <span class="tf-count">×${count}</span></button></li>`).join("");
  const listed = changes.slice(0, LIST_LIMIT).map((ch, k) =>
    `<li><button type="button" class="tf-change${k === st.change ? " tf-change-current" : ""}" ` +
    `data-change="${k}" data-status="${ch.kind}">${k + 1}. ${esc(prettyRule(ch.rule))}: ` +
    `${ch.nodes.map((id) => esc(st.names.get(id) ?? `%${id}`)).join(", ")}</button></li>`).join("");
  const more = changes.length > LIST_LIMIT
    ? `<p class="tf-more">and ${(changes.length - LIST_LIMIT).toLocaleString("en")} more: ` +
      "the arrows above reach them.</p>" : "";
  return (
    `<div class="tf-rule-card" data-change="${st.change}" data-status="${c.kind}">` +
    `<div class="tf-rule-head"><button type="button" class="tf-change-prev" aria-label="Previous change">◀</button>` +
    `<span>change ${st.change + 1} of ${changes.length}</span>` +
    `<button type="button" class="tf-change-next" aria-label="Next change">▶</button></div>` +
    `<p class="tf-rule-words"><span class="tf-kind" data-status="${c.kind}">${esc(STATUS[c.kind]?.badge || c.kind)}</span> ` +
    `<strong>${esc(prettyRule(c.rule))}</strong></p>` +
    `<p class="tf-sentence">${esc(c.sentence)}</p>${withinHtml(st, inf, c)}` +
    `<div class="tf-before-after"><div><h4>before</h4><ul>${before}</ul></div>` +
    `<div><h4>after</h4><ul>${after || "<li>(nothing: removed)</li>"}</ul></div></div></div>` +
    `<details class="tf-rules"><summary>${plural(changes.length, "change")} by ${plural(rules.size, "rule")}</summary>` +
    `<ul class="tf-rule-groups">${groups}</ul><ol class="tf-changes">${listed}</ol>${more}</details>`
  );
}

/** Where a change inside control-flow boxes happened: "inside %6 (while) › body_fn". */
function withinHtml(st, inf, c) {
  if (!c.within?.length) return "";
  const id = c.result[0] ?? c.nodes[0];
  const part = inf.inner.get(id)?.part;
  const boxes = c.within.map((owner) => `${nodeLink(st, inf, owner)} (${esc(nodeIn(inf, owner)?.op ?? "")})`);
  return `<p class="tf-within">inside ${boxes.join(" › ")}${part ? ` › <code>${esc(part.key)}</code>` : ""}</p>`;
}

// --- The selected node --------------------------------------------------------------------------

/** The selected node: its op, type, status and source line, its lineage across the passes,
 * its fused kernel's generated code, and its value on the example inputs. */
export function detailsHtml(st) {
  const inf = info(st, st.stage);
  const n = st.node === null ? null : nodeIn(inf, st.node);
  if (!n) {
    return `<p class="tf-hint">Click a node to see its op, type, source line, ` +
      "lineage, kernel and value.</p>";
  }
  if (n.kind === "module") return moduleHtml(st, inf, n);
  const gone = !presentIn(inf, n.id);
  const inside = inf.inner.get(n.id);
  const status = gone ? "removed" : n.status;
  const rows = [
    ["op", esc(n.op)],
    ["type", `<code>${esc(n.type)}</code> on ${esc(n.device)}`],
    ["kind", esc(n.kind) + (n.is_output ? " (an output)" : "")],
    ...(n.updates?.length ? [["updates", `after each call, ${n.updates.map((u) => `<code>${esc(u)}</code>`).join(" and ")} ` +
      `${n.updates.length > 1 ? "take" : "takes"} this value (an update in your code, ` +
      "written back when the graph has run)"]] : []),
    ["status", `<span class="tf-kind" data-status="${status}">${esc(STATUS[status]?.badge || "kept")}</span> ${esc(STATUS[status]?.words ?? "")}`],
  ];
  if (n.scope) rows.push(["module", `<code>${esc(n.scope)}</code>`]);
  const owner = inside?.owners[inside.owners.length - 1];
  if (owner !== undefined && nodeIn(inf, owner)?.kind !== "module") {
    rows.push(["in", `<code>${esc(inside.part.key)}</code> (${esc(inside.part.name)}) of ` +
      `${nodeLink(st, inf, owner)} ${esc(nodeIn(inf, owner)?.op ?? "")}`]);
  }
  if (n.subgraphs?.length) {
    rows.push(["graphs", n.subgraphs.map((p) => `<code>${esc(p.key)}</code> (${esc(p.name)}, ` +
      `${plural(p.nodes.filter(isOp).length, "node")}${p.changes ? `, ${plural(p.changes, "change")}` : ""})`)
      .join(", ") + `: ${st.openBoxes.has(n.id) ? "drawn in its box" : "click its box to open it"}`]);
  }
  if (n.rule) rows.push(["made by", esc(n.rule)]);
  if (n.source) {
    rows.push(["source", `${esc(n.source)}${n.source_line ? `<pre class="tf-source-line">${esc(n.source_line)}</pre>` : ""}`]);
  }
  const table = rows.map(([k, v]) => `<tr><th scope="row">${k}</th><td>${v}</td></tr>`).join("");
  return (
    `<h3 class="tf-details-title" data-node-id-shown="${n.id}"><code>${esc(n.text)}</code></h3>` +
    `<table class="tf-details-table">${table}</table>` +
    resultsHtml(inf, n, (id) => `${nodeLink(st, inf, id)} ${esc(nodeIn(inf, id)?.op ?? "")}`) +
    kernelHtml(n) + lineage(st, inf, n) +
    valuesHtml(n, inside?.part, st.hasValues)
  );
}

/** A module's box: what it holds, what this pass changed in it, and whether it is open. */
function moduleHtml(st, inf, n) {
  const [part] = n.subgraphs;
  const boxes = part.nodes.filter((m) => m.kind === "module").map((m) => `<code>${esc(m.label)}</code>`);
  const rows = [
    ["holds", esc(n.caption) + (boxes.length ? `, in the boxes of ${boxes.join(", ")}` : "")],
    ["changes", n.changes_inside ? `${plural(n.changes_inside, "change")} by this pass` : "none by this pass"],
    ["box", st.openBoxes.has(n.id) ? "open: click its header to close it" : "closed: click it to open it"],
  ];
  const table = rows.map(([k, v]) => `<tr><th scope="row">${k}</th><td>${v}</td></tr>`).join("");
  return `<h3 class="tf-details-title" data-node-id-shown="${n.id}"><code>${esc(n.scope)}</code></h3>` +
    `<p>${esc(n.words)}</p><table class="tf-details-table">${table}</table>`;
}

/** How a node came to be and what became of it, pass by pass (each pass a button to go there). */
function lineage(st, inf, n) {
  const items = [];
  const traced = n.lineage.filter((id) => id !== n.id);
  if (traced.length) {
    const more = traced.length - LINEAGE_NAMES;
    items.push(`<li>stands for traced ${traced.length === 1 ? "node" : "nodes"} ` +
      `${traced.slice(0, LINEAGE_NAMES).map((id) => nodeLink(st, inf, id)).join(", ")}` +
      `${more > 0 ? ` and ${more.toLocaleString("en")} more` : ""}</li>`);
  }
  const { made, became } = nodeHistory(st);
  const stageButton = (s) =>
    `<button type="button" class="tf-goto" data-goto="${s}" data-node-id-goto="${n.id}">` +
    `${esc(st.data.stages[s].pass)}</button>`;
  for (const { s, c } of made.get(n.id) ?? []) {
    if (c.nodes.length === 1 && c.nodes[0] === n.id) continue;
    const from = namesList(st, c.nodes);
    const what = {
      merged: `${from} merged into it by`,
      fused: `made from ${from} by`,
      replaced: `took the place of ${from} in`,
      added: "added by",
    }[c.kind] ?? `${c.kind} by`;
    items.push(`<li>${what} ${stageButton(s)} (${esc(prettyRule(c.rule))})</li>`);
  }
  for (const { s, c } of became.get(n.id) ?? []) {
    const into = c.result.map((id) => esc(st.names.get(id) ?? `%${id}`)).join(", ");
    const kernelName = c.kind === "fused" ? fusedName(st, s, c.result[0]) : "";
    const what = {
      merged: `merged into ${into}`,
      fused: `part of fused kernel ${esc(kernelName)} (${into})`,
      replaced: into ? `replaced by ${into}` : "replaced",
      removed: "removed",
      added: `added with ${into}`,
    }[c.kind] ?? c.kind;
    items.push(`<li>${what} by ${stageButton(s)} (${esc(prettyRule(c.rule))})</li>`);
  }
  if (!items.length) items.push("<li>traced from your code; no pass has touched it</li>");
  return `<h4>lineage</h4><ul class="tf-lineage">${items.join("")}</ul>`;
}

/** "%2, %3, %4" (the first LINEAGE_NAMES names, and how many more). */
function namesList(st, ids) {
  const names = ids.slice(0, LINEAGE_NAMES).map((id) => esc(st.names.get(id) ?? `%${id}`));
  const more = ids.length - names.length;
  return names.join(", ") + (more ? ` and ${more.toLocaleString("en")} more` : "");
}

function fusedName(st, s, id) {
  const n = presentIn(info(st, s), id);
  return n?.kernel?.name ?? st.names.get(id) ?? "";
}

/** A node's value on the example inputs (one per result for a node with several), and for a
 * node inside a control-flow box, which run of its graph (`part`) the value is from. */
function valuesHtml(n, part, hasValues) {
  const from = part?.values_from ?? "";
  if (!n.value && from.startsWith("none")) {
    return `<h4>value</h4><p class="tf-hint">${esc(from.replace(/^none: /, "None: "))}.</p>`;
  }
  const heading = from ? `value ${esc(from)}` : "value on the example inputs";
  if (!n.results || !n.value) return valueHtml(n.value, heading, hasValues);
  return n.results.map((r) => valueHtml(r.value, `${heading}: ${esc(r.name)}`, hasValues)).join("");
}

/** A value: its dtype and shape, min, max and mean, and a preview, under `heading`.
 * `hasValues`: whether the compilation has values at all (none without example inputs), or
 * the words that say why one is missing (a tape keeps only some: `data.words.unknown`). */
function valueHtml(v, heading, hasValues) {
  if (!v) {
    const why = typeof hasValues === "string" ? hasValues : hasValues
      ? "Not computed: nothing uses this value (dead code, which dce removes)."
      : "No example inputs were given, so no values.";
    return `<h4>value</h4><p class="tf-hint">${why}</p>`;
  }
  const stats = ["min", "max", "mean"]
    .filter((key) => v[key] !== undefined)
    .map((key) => `${key} ${v[key] === null ? "not finite" : Number(v[key]).toPrecision(4)}`)
    .join(", ");
  return (
    `<h4>${heading}</h4><p><code>${esc(v.dtype)}[${v.shape.join(",")}]</code>` +
    `${stats ? `: ${stats}` : ""}</p><pre class="tf-value">${esc(v.preview)}` +
    `${v.truncated ? "\n…" : ""}</pre>`
  );
}

// --- Narration ----------------------------------------------------------------------------------

/** What the narration says on arriving at a stage. */
export function narration(st) {
  const stage = st.data.stages[st.stage];
  const total = st.data.stages.length;
  let text;
  if (st.data.words) {  // (a trace or a backward pass, watched step by step)
    text = st.stage === 0 ? st.data.words.first
      : `Step ${st.stage + 1} of ${total}: ${stage.changes[0]?.sentence ?? ""}`;
  } else if (st.stage === 0) {
    text = `Stage 1 of ${total}: the graph as traced, ${plural(stage.stats.nodes, "node")}.`;
  } else if (!stage.changes.length) {
    text = `Stage ${st.stage + 1} of ${total}: ${stage.pass} changed nothing.`;
  } else {
    const before = st.data.stages[st.stage - 1].stats.nodes;
    text = `Stage ${st.stage + 1} of ${total}: ${stage.pass} made ` +
      `${plural(stage.changes.length, "change")}, ${before} → ${stage.stats.nodes} nodes. ` +
      `Change 1: ${stage.changes[0].sentence}`;
  }
  return text;
}
