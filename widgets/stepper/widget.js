/**
 * The pass stepper: watch a compilation, one pass at a time.
 *
 * An anywidget front-end: this module's `render` draws the stepper in a notebook's output (and
 * `teachflow.viz.html.to_html` runs it in a static page, with a small stand-in for anywidget's
 * model). Everything it shows was computed once in Python (`teachflow.viz.stepper_data.compilation_data`)
 * and arrives as the synced trait `data`: every node once, with its place in the layout, and
 * each stage as the nodes it has, its changes in plain words and its figures; `data.js` puts a
 * stage back together (statuses, edges, removed nodes, the text of the IR) when it is first
 * shown. The stage on show is the synced trait `stage`, so stepping needs no round
 * trip to the kernel and Python can read or set it. A control-flow node (a `cond`, a loop) is
 * drawn as a box that the learner opens to see the graphs it owns, with what each pass changed
 * inside them (`boxes.js`).
 *
 * Speed: the page is rebuilt from strings (one innerHTML per panel), never node by node, and no
 * layout is read while drawing. Past BIG nodes (in stage.js) only the neighbourhood of the
 * changes is drawn, with fused groups collapsed into their kernel and repeated blocks (the many
 * nodes of one source line of an unrolled loop) collapsed into one box each, until the learner
 * opens a block or asks to expand everything.
 *
 * The stepper is a few ES modules, one idea each, read in this order:
 *   common.js    sizes, status words, text helpers
 *   data.js      the data as sent: a stage put back together, the kernels' sources inflated
 *   ir.js        the IR's line diff, and the IR panel
 *   ghosts.js    where removed nodes are drawn when a new node stands in their place
 *   stage.js     lookups into one stage's data, and across stages
 *   shapes.js    one node's box, a badge, an edge: the shapes the graph is drawn with
 *   boxes.js     control flow: a node that owns graphs, as a box that opens to show them
 *   groups.js    a model's modules: the nodes each made, as a box that opens the same way
 *   view.js      choosing what to draw for a big graph, and where each box goes
 *   draw.js      the graph's SVG, as one string
 *   kernel.js    a fused kernel: its ops, its results, what ran, its three sources side by side
 *   panels.js    the stage list, the figures, the rule card, the node's details, the narration
 *   memory.js    the memory timeline under the graph: bytes held per step, each value's range
 *   graph.js     the drawn graph on the page: draw, mark, scroll, zoom, open a block or a box
 *   stepping.js  the state `st`, stepping from stage to stage, keys and the slider
 *   widget.js    this file: the page's elements and its clicks, tied to the model
 * Every function is handed what it needs (the state `st`, or a stage's lookups `inf`): but for
 * the handlers `render` ties to the page, nothing is shared by closure. The modules import each
 * other with plain `import { ... } from "./x.js"`; `teachflow.viz.stepper.stepper_module` joins
 * them into the one module that anywidget and the static page load.
 */

import { esc, STATUS } from "./common.js";
import {
  autoZoom, drawGraph, fit, openBlock, scrollToFocus, setZoom, toggleBox,
} from "./graph.js";
import { clearMemoryMarks, onMemoryHover, renderMemory } from "./memory.js";
import {
  clampStage, go, onHide, onKey, onSlider, renderIR, renderSources, selectChange, selectNode,
  setData, showStage, step, stepperState, stopPlaying, togglePlay,
} from "./stepping.js";

let instances = 0;

// --- The page's skeleton ------------------------------------------------------------------------

/** The page's elements, empty: `render` fills them in. */
function skeleton(uid) {
  return `
<div class="tf-stepper" tabindex="0" data-lm-suppress-shortcuts="true" role="group"
     aria-label="Pass stepper: use the arrow keys or j and k to step through the passes">
  <div class="tf-head">
  <div class="tf-toolbar">
    <strong class="tf-title"></strong>
    <button type="button" class="tf-prev" aria-label="Previous stage (left arrow or k)"
            title="Previous stage (← or k)">◀</button>
    <button type="button" class="tf-play" aria-pressed="false" title="Play the passes">▶ play</button>
    <button type="button" class="tf-next" aria-label="Next stage (right arrow or j)"
            title="Next stage (→ or j)">▶</button>
    <input type="range" class="tf-slider" min="0" max="0" step="1" value="0" aria-label="Stage">
    <span class="tf-position"></span>
    <label class="tf-hide-label" title="Hide the passes that changed nothing">
      <input type="checkbox" class="tf-hide-unchanged"> hide passes that changed nothing
    </label>
  </div>
  <p class="tf-narration" role="status" aria-live="polite"></p>
  </div>
  <div class="tf-body">
    <nav class="tf-stage-nav" aria-label="Stages">
      <ol class="tf-stages"></ol>
      <div class="tf-figures" aria-label="Figures per stage"></div>
    </nav>
    <div class="tf-center">
      <div class="tf-graph-bar">
        <span class="tf-view-note"></span>
        <button type="button" class="tf-expand" hidden>expand all</button>
        <span class="tf-zoom">
          <button type="button" class="tf-zoom-out" aria-label="Zoom out">−</button>
          <button type="button" class="tf-fit" aria-label="Fit the graph">fit</button>
          <button type="button" class="tf-zoom-in" aria-label="Zoom in">+</button>
        </span>
      </div>
      <div class="tf-graph-wrap"><div class="tf-graph" data-uid="${uid}"></div></div>
      <div class="tf-legend">${legend()}<span class="tf-legend-devices"></span><span class="tf-legend-note">node counts are ops only:
        inputs and constants are drawn but not counted</span></div>
      <section class="tf-memory" aria-label="Memory held at each step of the schedule" hidden></section>
    </div>
    <aside class="tf-side">
      <section class="tf-rule" aria-label="What this pass changed"></section>
      <section class="tf-details" aria-label="The selected node"></section>
    </aside>
  </div>
  <section class="tf-kernel-sources" aria-label="The selected fused kernel's sources" hidden>
  </section>
  <details class="tf-ir" open>
    <summary>Text IR of this stage <span class="tf-ir-summary"></span></summary>
    <pre class="tf-ir-text"></pre>
  </details>
</div>`;
}

/** The key to the colours, outlines and badges of the change statuses, and (shown when the
 * compilation has one) to a control-flow box. */
function legend() {
  return Object.entries(STATUS)
    .map(
      ([status, { badge, words }]) =>
        `<span class="tf-legend-item" data-status="${status}" title="${esc(words)}">` +
        `<svg width="30" height="16" aria-hidden="true"><rect class="tf-box" x="2" y="2" ` +
        `width="26" height="12" rx="${status === "fused" ? 6 : 2}"/></svg>` +
        `${esc(badge || "kept")}</span>`,
    )
    .join("") +
    `<span class="tf-legend-item tf-legend-box" title="a node that owns graphs (a branch, a ` +
    `loop's body), or the nodes a module made"><svg width="30" height="16" aria-hidden="true"><rect class="tf-box" x="1" ` +
    `y="1" width="28" height="14" rx="3"/><rect class="tf-box" x="3" y="3" width="24" ` +
    `height="10" rx="2"/></svg>▸ cond, loop or module: click to open</span>`;
}

// --- The widget ---------------------------------------------------------------------------------

function render({ model, el }) {
  const uid = `tf${++instances}`;
  el.innerHTML = skeleton(uid);
  const root = el.querySelector(".tf-stepper");
  const $ = (selector) => root.querySelector(selector);
  const ui = {
    title: $(".tf-title"),
    prev: $(".tf-prev"),
    next: $(".tf-next"),
    play: $(".tf-play"),
    slider: $(".tf-slider"),
    position: $(".tf-position"),
    hide: $(".tf-hide-unchanged"),
    narration: $(".tf-narration"),
    stages: $(".tf-stages"),
    figures: $(".tf-figures"),
    note: $(".tf-view-note"),
    expand: $(".tf-expand"),
    wrap: $(".tf-graph-wrap"),
    graph: $(".tf-graph"),
    memory: $(".tf-memory"),
    rule: $(".tf-rule"),
    details: $(".tf-details"),
    sources: $(".tf-kernel-sources"),
    ir: $(".tf-ir"),
    irSummary: $(".tf-ir-summary"),
    irText: $(".tf-ir-text"),
  };
  const st = stepperState(model, root, ui, uid);

  function onClick(event) {
    const t = event.target;
    const hit = (selector) => t.closest(selector);
    let found;
    if ((found = hit(".tf-prev"))) step(st, -1);
    else if ((found = hit(".tf-next"))) step(st, 1);
    else if ((found = hit(".tf-play"))) togglePlay(st);
    else if ((found = hit(".tf-change-prev"))) selectChange(st, st.change - 1);
    else if ((found = hit(".tf-change-next"))) selectChange(st, st.change + 1);
    else if ((found = hit("[data-change]")) && found.tagName === "BUTTON") selectChange(st, Number(found.dataset.change));
    else if ((found = hit(".tf-goto"))) {
      go(st, Number(found.dataset.goto));
      selectNode(st, Number(found.dataset.nodeIdGoto), true);
    } else if ((found = hit(".tf-block"))) openBlock(st, Number(found.dataset.block));
    else if ((found = hit(".tf-cf-toggle"))) {
      toggleBox(st, Number(found.dataset.box)); // open or close it, and show its details
      selectNode(st, Number(found.dataset.box), false);
    } else if ((found = hit("[data-node-id]"))) {
      selectNode(st, Number(found.dataset.nodeId), !found.closest(".tf-graph"));
    } else if ((found = hit("[data-stage]"))) go(st, Number(found.dataset.stage));
    else if ((found = hit(".tf-expand"))) {
      st.expandAll = !st.expandAll;
      st.openBlocks.clear();
      drawGraph(st, true);
    } else if ((found = hit(".tf-zoom-in"))) setZoom(st, st.drawn.zoom * 1.25);
    else if ((found = hit(".tf-zoom-out"))) setZoom(st, st.drawn.zoom / 1.25);
    else if ((found = hit(".tf-fit"))) fit(st);
    else if ((found = hit(".tf-source-all"))) {
      st.sourcesFull.add(found.dataset.lang);
      renderSources(st);
    } else if ((found = hit(".tf-ir-skip"))) {
      st.irFull = true;
      renderIR(st);
    }
  }

  const onKeyDown = (event) => onKey(st, event);
  const onStage = () => {
    const i = clampStage(st, model.get("stage"));
    if (i !== st.stage) showStage(st, i);
  };
  const onData = () => setData(st, model.get("data"));

  // Keys: inside a notebook only while the focus is in the stepper, so ←/→ and j/k do not
  // fight the notebook's own shortcuts; on a page that holds just this stepper (the static
  // page marks its element data-keys="page"), wherever the focus is.
  const keys = el.dataset?.keys === "page" ? el.ownerDocument : root;
  root.addEventListener("click", onClick);
  // Hovering the timeline, or a node of the graph, marks what is held there (memory.js).
  for (const part of [ui.memory, ui.graph]) {
    part.addEventListener("mouseover", (event) => onMemoryHover(st, event.target));
    part.addEventListener("mouseleave", () => clearMemoryMarks(st));
  }
  keys.addEventListener("keydown", onKeyDown);
  ui.slider.addEventListener("input", () => onSlider(st));
  ui.hide.addEventListener("change", () => onHide(st));
  ui.ir.addEventListener("toggle", () => renderIR(st));
  ui.irText.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target.closest(".tf-ir-skip")) {
      st.irFull = true;
      renderIR(st);
    }
  });
  // The view's size, watched rather than read, so drawing never forces a layout.
  const resized = new ResizeObserver(([entry]) => {
    const { width, height } = entry.contentRect;
    if (width === st.size.w && height === st.size.h) return;
    const first = !st.size.w;
    const wider = width !== st.size.w;
    st.size = { w: width, h: height };
    if (wider) renderMemory(st); // (its steps are as wide as the view allows)
    if (!st.drawn.box) return;
    if (st.zoom === null && autoZoom(st, st.drawn.box) !== st.drawn.zoom) drawGraph(st, true);
    else if (first) scrollToFocus(st); // the first scroll happened before the view had a size
  });
  resized.observe(ui.wrap);
  model.on("change:stage", onStage);
  model.on("change:data", onData);
  setData(st, model.get("data"));

  return () => {
    keys.removeEventListener("keydown", onKeyDown);
    stopPlaying(st);
    resized.disconnect();
    model.off("change:stage", onStage);
    model.off("change:data", onData);
  };
}

export default { render };
