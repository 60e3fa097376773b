/**
 * The stepper's state and stepping through it. `stepperState` makes the one object every part
 * of the stepper is handed, `st`: the data, the stage on show, what is selected and opened, the
 * lookups built so far, what is drawn, and the page's elements (`st.ui`) and anywidget's model
 * (`st.model`). The stage on show is also the model's trait `stage`: `go` sets both, and
 * `showStage` redraws every part of the page for it.
 */

import { deviceFill, esc } from "./common.js";
import { namesOf } from "./data.js";
import {
  drawGraph, markMatches, markSelected, openBlock, scrollToNodes, toggleBox,
} from "./graph.js";
import { irPanel } from "./ir.js";
import { sourcesHtml } from "./kernel.js";
import { renderMemory } from "./memory.js";
import {
  detailsHtml, figuresHtml, figureValue, narration, ruleHtml, stageListHtml,
} from "./panels.js";
import { info, nodeIn } from "./stage.js";
import { pageOf } from "./view.js";

/** Milliseconds per stage when playing. */
const PLAY_MS = 1200;

/** The state of a new stepper on `model`, drawn in `root` (its elements `ui`, its id `uid`). */
export function stepperState(model, root, ui, uid) {
  return {
    model,
    root,
    ui,
    uid,
    data: { name: "", stages: [] },
    older: false, // the data is of an older format (a notebook saved by an older teachflow)
    stage: -1, // the stage on show
    change: -1, // the selected change of that stage
    node: null, // the selected node id
    hideUnchanged: false,
    expandAll: false,
    openBlocks: new Set(), // the source lines whose repeated block the learner opened
    openBoxes: new Set(), // the control-flow nodes whose box the learner opened (by node id)
    irFull: false,
    zoom: null, // null: fit the width when the graph is wider than the view
    scrolling: 0, // the frame request of a pending scroll
    size: { w: 0, h: 0 }, // of the graph's view, kept by a ResizeObserver (never read while drawing)
    timer: null,
    cache: new Map(), // per stage: lookups built on first use
    full: new Map(), // per stage: the stage put together (data.js)
    routes: null, // the edges' routes by their ends (data.js)
    kernels: new Map(), // per kernel: its data, and its sources once loaded (data.js)
    sourcesLoading: null, // the promise of the kernels' sources, once asked for
    sourcesOf: null, // the kernel whose sources are shown
    sourcesFull: new Set(), // its sources shown whole ("numpy", "c", "cuda")
    names: new Map(), // node id -> "%7" over all stages
    history: null, // node id -> the changes that made it and the ones it went into
    // what is on screen: node ids drawn one by one, where each is, the collapsed blocks and theirs
    drawn: { page: -1, ids: new Set(), box: null, zoom: 1, where: new Map(), blocks: new Map() },
  };
}

export function setData(st, data) {
  const { ui } = st;
  // (A notebook saved by an older teachflow keeps data of an older format: it is not drawn.)
  st.older = Boolean(data?.stages?.length) && data.format !== 2;
  st.data = data?.format === 2 ? data : { name: data?.name ?? "", stages: [], nodes: [], values: {} };
  st.cache = new Map();
  st.full = new Map();
  st.routes = null;
  st.kernels = new Map();
  st.sourcesLoading = null;
  st.history = null;
  st.names = namesOf(st.data);
  // (whether there are values at all; or, for a tape, why some are not there)
  st.hasValues = st.data.words?.unknown ?? Object.keys(st.data.values).length > 0;
  st.openBoxes = new Set();
  st.root.dataset.hasBoxes = String(st.data.nodes.some((e) => e.subgraphs) ||
    st.data.stages.some((s) => s.groups?.length));
  st.root.querySelector(".tf-legend-devices").innerHTML = devicesLegend(st.data.devices ?? []);
  ui.title.textContent = st.data.name ? `${st.data.name}` : "";
  st.root.setAttribute("aria-label", `Pass stepper for ${st.data.name || "a compilation"}: ` +
    "use the arrow keys or j and k to step through the passes");
  st.stage = -1;
  ui.stages.innerHTML = stageListHtml(st.data.stages);
  ui.figures.innerHTML = figuresHtml(st.data.stages);
  showStage(st, clampStage(st, st.model.get("stage")));
}

export function clampStage(st, i) {
  const n = st.data.stages.length;
  return Math.max(0, Math.min(n - 1, Number.isInteger(i) ? i : 0));
}

/** The stages the learner steps through: all, or those that changed something (and the first). */
function visibleStages(st) {
  return st.data.stages
    .map((s, i) => i)
    .filter((i) => !st.hideUnchanged || i === 0 || st.data.stages[i].changed);
}

// --- Stepping -----------------------------------------------------------------------------------

export function go(st, i) {
  i = clampStage(st, i);
  if (i !== st.model.get("stage")) {
    st.model.set("stage", i);
    st.model.save_changes();
  }
  if (i !== st.stage) showStage(st, i);
}

/** Step `delta` visible stages on; false at either end. */
export function step(st, delta) {
  const visible = visibleStages(st);
  let at = visible.indexOf(st.stage);
  if (at < 0) at = visible.findIndex((i) => i > st.stage) - (delta > 0 ? 1 : 0);
  const target = visible[at + delta];
  if (target === undefined) return false;
  go(st, target);
  return true;
}

export function togglePlay(st) {
  if (st.timer) {
    stopPlaying(st);
    return;
  }
  const visible = visibleStages(st);
  if (st.stage === visible[visible.length - 1]) go(st, visible[0]);
  st.timer = setInterval(() => {
    if (!step(st, 1)) stopPlaying(st);
  }, PLAY_MS);
  st.ui.play.textContent = "❚❚ pause";
  st.ui.play.setAttribute("aria-pressed", "true");
}

export function stopPlaying(st) {
  clearInterval(st.timer);
  st.timer = null;
  st.ui.play.textContent = "▶ play";
  st.ui.play.setAttribute("aria-pressed", "false");
}

export function showStage(st, i) {
  const { ui } = st;
  if (!st.data.stages.length) {
    ui.graph.innerHTML = "";
    ui.narration.textContent = st.older
      ? "This stepper was saved by an older teachflow: run its cell again to draw it."
      : "This compilation has no stages to show.";
    return;
  }
  const started = performance.now();
  const previous = st.stage;
  st.stage = i;
  const inf = info(st, i);
  st.change = inf.stage.changes.length ? 0 : -1;
  if (st.node !== null && !nodeIn(inf, st.node)) st.node = null;
  if (previous !== i) st.irFull = false;
  updateToolbar(st);
  updateStageList(st);
  updateFigures(st);
  drawGraph(st, true);
  renderMemory(st);
  renderRule(st);
  renderDetails(st);
  renderIR(st);
  ui.narration.textContent = narration(st);
  st.root.dataset.currentStage = String(i);
  st.root.dataset.renderMs = (performance.now() - started).toFixed(1);
  // While the learner reads, put the next stage together, so that stepping on is quick.
  const idle = globalThis.requestIdleCallback ?? ((f) => setTimeout(f, 50));
  const { data } = st;
  idle(() => {
    if (st.data === data && i + 1 < data.stages.length) info(st, i + 1);
  });
}

export function selectChange(st, k) {
  const inf = info(st, st.stage);
  const n = inf.stage.changes.length;
  if (!n) return;
  st.change = ((k % n) + n) % n;
  renderRule(st);
  const c = inf.stage.changes[st.change];
  // A change inside boxes (of control flow, of modules): open them, to show it where it
  // happened.
  const owners = inf.inner.get(c.result[0] ?? c.nodes[0])?.owners ?? [];
  const closed = [...new Set([...owners, ...(c.within ?? [])])].filter((id) => !st.openBoxes.has(id));
  for (const id of closed) st.openBoxes.add(id);
  if (closed.length || (inf.big && !st.expandAll && pageOf(inf, st.change) !== st.drawn.page)) {
    drawGraph(st, true);
  } else {
    markMatches(st);
    scrollToNodes(st, [...c.result, ...c.nodes]);
  }
  st.ui.narration.textContent = `Change ${st.change + 1} of ${n}: ${c.sentence}`;
}

export function selectNode(st, id, scroll) {
  const inf = info(st, st.stage);
  if (!nodeIn(inf, id)) return;
  st.node = id;
  const block = st.drawn.of?.get(id);
  if (block && st.drawn.blocks.has(block)) st.openBlocks.add(block.source);
  for (const owner of inf.inner.get(id)?.owners ?? []) st.openBoxes.add(owner);
  if (!st.drawn.ids.has(id)) drawGraph(st, false);
  else markSelected(st);
  if (scroll) scrollToNodes(st, [id]);
  renderDetails(st);
}

// --- The parts of the page that follow the stage ------------------------------------------------

function updateToolbar(st) {
  const { ui } = st;
  const visible = visibleStages(st);
  const at = visible.indexOf(st.stage);
  const stage = st.data.stages[st.stage];
  ui.slider.max = String(Math.max(visible.length - 1, 0));
  ui.slider.value = String(Math.max(at, 0));
  ui.slider.setAttribute("aria-valuetext", `stage ${st.stage + 1}: ${stage.pass}`);
  ui.position.textContent = `stage ${st.stage + 1} of ${st.data.stages.length}: ${stage.pass}`;
  ui.prev.disabled = at <= 0;
  ui.next.disabled = at < 0 || at >= visible.length - 1;
}

function updateStageList(st) {
  for (const li of st.ui.stages.children) {
    const i = Number(li.dataset.stage);
    li.hidden = st.hideUnchanged && i !== 0 && li.dataset.changed !== "true";
    if (i === st.stage) li.setAttribute("aria-current", "step");
    else li.removeAttribute("aria-current");
  }
}

function updateFigures(st) {
  for (const figure of st.ui.figures.children) {
    for (const bar of figure.querySelectorAll(".tf-bar")) {
      bar.classList.toggle("tf-bar-current", Number(bar.dataset.stage) === st.stage);
    }
    const value = figureValue(st.data.stages, st.stage, figure.dataset.stat);
    figure.querySelector(".tf-figure-value").textContent = value;
  }
}

function renderRule(st) {
  st.ui.rule.innerHTML = ruleHtml(st);
}

function renderDetails(st) {
  st.ui.details.innerHTML = detailsHtml(st);
  renderSources(st);
}

/** The panel of the selected fused kernel's sources, under the graph (hidden for any other
 * node). */
export function renderSources(st) {
  const n = st.node === null ? null : nodeIn(info(st, st.stage), st.node);
  const panel = st.ui.sources;
  if (!n?.kernel) {
    panel.hidden = true;
    panel.innerHTML = "";
    return;
  }
  if (st.sourcesOf !== n.kernel) st.sourcesFull = new Set(); // (each kernel opens short)
  st.sourcesOf = n.kernel;
  panel.hidden = false;
  panel.innerHTML = sourcesHtml(st, n, st.sourcesFull, () => {
    if (st.node === n.id) renderSources(st);
  });
}

/** The IR panel, drawn only while it is open (it is drawn again when opened). */
export function renderIR(st) {
  const { ui } = st;
  if (!ui.ir.open || st.stage < 0) return;
  const { summary, text, html } = irPanel(info(st, st.stage), st.irFull);
  ui.irSummary.textContent = summary;
  if (html === undefined) ui.irText.textContent = text;
  else ui.irText.innerHTML = html;
}

// --- Keys, the slider and the checkbox ----------------------------------------------------------

export function onKey(st, event) {
  // Keys typed into a text field are the field's; on the checkbox and the slider they step
  // (the slider's own arrows are taken over: JupyterLab would swallow them, and a page would
  // step twice).
  const field = event.target.closest?.("input, textarea, select");
  if (event.defaultPrevented || (field && !["checkbox", "range"].includes(field.type))) return;
  const block = event.target.closest?.(".tf-block");
  if (block && (event.key === "Enter" || event.key === " ")) {
    event.preventDefault();
    openBlock(st, Number(block.dataset.block));
    return;
  }
  const box = event.target.closest?.(".tf-cf-toggle");
  if (box && (event.key === "Enter" || event.key === " ")) {
    event.preventDefault();
    toggleBox(st, Number(box.dataset.box));
    return;
  }
  const moves = { ArrowRight: 1, j: 1, ArrowLeft: -1, k: -1 };
  const delta = moves[event.key];
  if (delta === undefined || event.altKey || event.ctrlKey || event.metaKey) return;
  event.preventDefault();
  event.stopPropagation(); // j and k must not also move the notebook's cell selection
  step(st, delta);
}

export function onSlider(st) {
  const visible = visibleStages(st);
  go(st, visible[Number(st.ui.slider.value)] ?? 0);
}

export function onHide(st) {
  st.hideUnchanged = st.ui.hide.checked;
  const visible = visibleStages(st);
  if (!visible.includes(st.stage)) go(st, [...visible].reverse().find((i) => i < st.stage) ?? 0);
  updateToolbar(st);
  updateStageList(st);
}

/** The key to the fills of the devices the nodes run on (none when all run on one). */
export function devicesLegend(devices) {
  return devices.map((d) =>
    `<span class="tf-legend-item tf-legend-device" data-device="${esc(d)}" title="runs on ${esc(d)}">` +
    `<svg width="30" height="16" aria-hidden="true"><rect class="tf-box" x="2" y="2" width="26" ` +
    `height="12" rx="2" style="fill: ${deviceFill(d) || "var(--tf-node-fill)"}"/></svg>${esc(d)}</span>`).join("");
}
