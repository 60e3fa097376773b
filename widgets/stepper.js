/**
 * The pass stepper: watch a compilation, one pass at a time.
 *
 * An anywidget front-end, a plain ES module with no build step and no imports. Everything it
 * shows was computed once in Python (`teachflow.viz.data.compilation_data`) and arrives as the
 * synced trait `data`: every stage's nodes with their place in the layout and their change status,
 * the edges and their routes, the changes in plain words, the figures and the text of the IR.
 * The stage on show is the synced trait `stage`, so stepping needs no round trip to the kernel
 * and Python can read or set it. `teachflow.viz.html.to_html` runs this same file in a static page
 * with a small stand-in for anywidget's model.
 *
 * Speed: the page is rebuilt from strings (one innerHTML per panel), never node by node, and no
 * layout is read while drawing. Past BIG nodes only the neighbourhood of the changes is drawn, with
 * fused groups collapsed into their kernel and repeated blocks (the many nodes of one source line
 * of an unrolled loop) collapsed into one box each, until the learner opens a block or asks to
 * expand everything.
 */

/** Box size and spacing of the drawing, in pixels (the layout's unit is one grid step). */
const NODE_W = 124;
const NODE_H = 30;
const X_SCALE = 150;
const Y_SCALE = 70;
const PAD = 36;
/** A stage with more nodes than this (its own plus the ones drawn faded) opens on the
 * neighbourhood of what changed. */
const BIG = 300;
/** The most nodes drawn in a neighbourhood view; half of them are the changed nodes. */
const VIEW_LIMIT = 300;
/** A neighbour joins that view only this many layers above or below its changed node (farther
 * ones, such as a weight fed from the top of the graph, get a stub), so the view stays compact. */
const NEAR_LAYERS = 3;
/** In a big view, the nodes of one user source line are drawn as one collapsed block when that
 * line repeats (its most frequent op occurs) at least BLOCK_REPS times over BLOCK_NODES nodes. */
const BLOCK_REPS = 8;
const BLOCK_NODES = 16;
/** Milliseconds per stage when playing. */
const PLAY_MS = 1200;
/** Changes listed at once in the rule card (the arrows reach the rest). */
const LIST_LIMIT = 200;
/** Unchanged IR lines kept around each changed line before the rest is folded away. */
const IR_CONTEXT = 2;
/** IR lines drawn at once (a click shows them all). */
const IR_LINES = 400;
/** Line pairs up to which the IR diff is an exact longest-common-subsequence. */
const LCS_LIMIT = 2e6;

/** How each change status is told apart: a colour (Okabe–Ito, in the CSS), an outline (in the
 * CSS) and a word badge (here). */
const STATUS = {
  added: { badge: "+ new", words: "added by this pass" },
  removed: { badge: "− gone", words: "removed by this pass (drawn faded)" },
  replaced: { badge: "↻ replaced", words: "stands for what a rule rewrote" },
  merged: { badge: "⇉ merged", words: "a duplicate was merged into it" },
  fused: { badge: "⊕ fused", words: "a fused kernel" },
  kept: { badge: "", words: "unchanged" },
};

const FIGURES = [
  ["nodes", "nodes", "nodes: ops only (inputs and constants are not counted)"],
  ["kernels", "kernels", "kernels launched (views launch none)"],
  ["bytes_moved", "bytes moved", "bytes read and written by the kernels"],
  ["flops", "flops", "floating-point operations"],
];

/** What the stepper counts as a node, in every count it shows: an op, that is one line of the
 * text IR (what the compiler's `stats.nodes` counts). The inputs, captured tensors and
 * constants the ops read are drawn as boxes too, but are counted apart, never as nodes. */
function isOp(n) {
  return n.kind === "node";
}

/** "2 inputs and 1 constant": the boxes that are not nodes. */
function operandWords(nodes) {
  let inputs = 0;
  let constants = 0;
  for (const n of nodes) {
    if (n.kind === "const") constants++;
    else if (!isOp(n)) inputs++;
  }
  const words = [inputs && plural(inputs, "input"), constants && plural(constants, "constant")];
  return words.filter(Boolean).join(" and ") || "no inputs";
}

let instances = 0;

// --- Small helpers ------------------------------------------------------------------------------

function esc(text) {
  return String(text ?? "")
    .replace(/&/g, "&amp;")
    .replace(/</g, "&lt;")
    .replace(/>/g, "&gt;")
    .replace(/"/g, "&quot;");
}

function r1(v) {
  return Math.round(v * 10) / 10;
}

/** 1234567 -> "1.2 M": figures read at a glance. */
function human(n) {
  const a = Math.abs(n);
  if (a >= 1e9) return `${r1(n / 1e9)} G`;
  if (a >= 1e6) return `${r1(n / 1e6)} M`;
  if (a >= 1e4) return `${r1(n / 1e3)} k`;
  return String(n);
}

function plural(n, word) {
  return `${n.toLocaleString("en")} ${word}${n === 1 ? "" : "s"}`;
}

/** "%7 = add" -> "%7"; "%x (input)" -> "%x". */
function shortName(label) {
  return String(label).split(" ")[0];
}

function prettyRule(rule) {
  return String(rule).replace(/ -> /g, " → ");
}

// --- The line diff of the IR --------------------------------------------------------------------

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

// --- Removed nodes that would hide under new ones --------------------------------------------

/** Where to draw the removed nodes of a stage that would sit on one of its nodes (a fused
 * kernel takes the place of its last op): each moves aside, to the nearest place in its row that
 * no box and no edge bend takes, so both boxes and both badges stay readable. Returns node id ->
 * [x, y] in layout units, for the removed nodes that move. */
export function ghostPlaces(stage) {
  const rows = new Map(); // y -> the x of everything drawn in that row, sorted
  const row = (y) => rows.get(y) ?? rows.set(y, []).get(y);
  /** Where x goes in a sorted row: the index of the first entry not less than x. */
  const at = (xs, x) => {
    let lo = 0;
    let hi = xs.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (xs[mid] < x) lo = mid + 1;
      else hi = mid;
    }
    return lo;
  };
  const take = (x, y) => {
    const xs = row(y);
    xs.splice(at(xs, x), 0, x);
  };
  const free = (x, y) => {
    const xs = row(y);
    const i = at(xs, x);
    return (i === xs.length || xs[i] - x >= 1) && (i === 0 || x - xs[i - 1] >= 1);
  };
  for (const n of stage.nodes) take(n.x, n.y);
  for (const e of stage.edges) for (const [x, y] of e.route.slice(1, -1)) take(x, y);
  const hidden = stage.removed.filter((n) => !free(n.x, n.y));
  for (const n of stage.removed) if (free(n.x, n.y)) take(n.x, n.y);
  const moved = new Map();
  for (const n of hidden) {
    let x = n.x;
    for (let d = 1; !free(x, n.y); d++) {
      x = free(n.x + d, n.y) ? n.x + d : n.x - d;
    }
    take(x, n.y);
    moved.set(n.id, [x, n.y]);
  }
  return moved;
}

// --- The page's skeleton ------------------------------------------------------------------------

function skeleton(uid) {
  return `
<div class="tf-stepper" tabindex="0" data-lm-suppress-shortcuts="true" role="group"
     aria-label="Pass stepper: use the arrow keys or j and k to step through the passes">
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
      <div class="tf-legend">${legend()}<span class="tf-legend-note">node counts are ops only:
        inputs and constants are drawn but not counted</span></div>
    </div>
    <aside class="tf-side">
      <section class="tf-rule" aria-label="What this pass changed"></section>
      <section class="tf-details" aria-label="The selected node"></section>
    </aside>
  </div>
  <details class="tf-ir" open>
    <summary>Text IR of this stage <span class="tf-ir-summary"></span></summary>
    <pre class="tf-ir-text"></pre>
  </details>
</div>`;
}

function legend() {
  return Object.entries(STATUS)
    .map(
      ([status, { badge, words }]) =>
        `<span class="tf-legend-item" data-status="${status}" title="${esc(words)}">` +
        `<svg width="30" height="16" aria-hidden="true"><rect class="tf-box" x="2" y="2" ` +
        `width="26" height="12" rx="${status === "fused" ? 6 : 2}"/></svg>` +
        `${esc(badge || "kept")}</span>`,
    )
    .join("");
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
    rule: $(".tf-rule"),
    details: $(".tf-details"),
    ir: $(".tf-ir"),
    irSummary: $(".tf-ir-summary"),
    irText: $(".tf-ir-text"),
  };

  const st = {
    data: { name: "", stages: [] },
    stage: -1, // the stage on show
    change: -1, // the selected change of that stage
    node: null, // the selected node id
    hideUnchanged: false,
    expandAll: false,
    openBlocks: new Set(), // the source lines whose repeated block the learner opened
    irFull: false,
    zoom: null, // null: fit the width when the graph is wider than the view
    scrolling: 0, // the frame request of a pending scroll
    size: { w: 0, h: 0 }, // of the graph's view, kept by a ResizeObserver (never read while drawing)
    timer: null,
    cache: new Map(), // per stage: lookups built on first use
    names: new Map(), // node id -> "%7" over all stages
    history: null, // node id -> the changes that made it and the ones it went into
    // what is on screen: node ids drawn one by one, where each is, the collapsed blocks and theirs
    drawn: { page: -1, ids: new Set(), box: null, zoom: 1, where: new Map(), blocks: new Map() },
  };

  // --- Data and lookups -------------------------------------------------------------------------

  function setData(data) {
    st.data = data && Array.isArray(data.stages) ? data : { name: "", stages: [] };
    st.cache = new Map();
    st.history = null;
    st.names = new Map();
    st.hasValues = st.data.stages.some((stage) => stage.nodes.some((n) => n.value));
    for (const stage of st.data.stages) {
      for (const n of stage.nodes) st.names.set(n.id, shortName(n.label));
    }
    ui.title.textContent = st.data.name ? `${st.data.name}` : "";
    root.setAttribute("aria-label", `Pass stepper for ${st.data.name || "a compilation"}: ` +
      "use the arrow keys or j and k to step through the passes");
    st.stage = -1;
    renderStageList();
    renderFigures();
    showStage(clampStage(model.get("stage")));
  }

  function clampStage(i) {
    const n = st.data.stages.length;
    return Math.max(0, Math.min(n - 1, Number.isInteger(i) ? i : 0));
  }

  function info(i) {
    let found = st.cache.get(i);
    if (found) return found;
    const stage = st.data.stages[i];
    const previous = i > 0 ? st.data.stages[i - 1] : null;
    const byId = new Map(stage.nodes.map((n) => [n.id, n]));
    const removedById = new Map(stage.removed.map((n) => [n.id, n]));
    const removedEdges = previous
      ? previous.edges.filter((e) => removedById.has(e.from) || removedById.has(e.to))
      : [];
    const moved = ghostPlaces(stage);
    // Members of a fused group that this pass removed: collapsed into the kernel in big views.
    const memberOf = new Map();
    const groupSize = new Map();
    for (const c of stage.changes) {
      if (c.kind !== "fused") continue;
      for (const id of c.nodes) if (removedById.has(id)) memberOf.set(id, c.result[0]);
      for (const id of c.result) groupSize.set(id, c.nodes.length);
    }
    found = { stage, previous, byId, removedById, removedEdges, moved, memberOf, groupSize };
    found.big = stage.nodes.length + stage.removed.length > BIG;
    st.cache.set(i, found);
    return found;
  }

  function neighbours(inf) {
    if (inf.adjacent) return inf.adjacent;
    const adjacent = new Map();
    const link = (a, b) => {
      if (!adjacent.has(a)) adjacent.set(a, []);
      adjacent.get(a).push(b);
    };
    for (const e of inf.stage.edges) {
      link(e.from, e.to);
      link(e.to, e.from);
    }
    for (const e of inf.removedEdges) {
      link(e.from, e.to);
      link(e.to, e.from);
    }
    inf.adjacent = adjacent;
    return adjacent;
  }

  /** The repeated blocks of a stage: its nodes (and the ones it removed) grouped by user source
   * line, keeping the lines that repeat enough. `of` maps a member's id to its block. */
  function blocksOf(inf) {
    if (inf.blocks) return inf.blocks;
    const bySource = new Map();
    const add = (n, gone) => {
      if (!n.source) return;
      let group = bySource.get(n.source);
      if (!group) bySource.set(n.source, (group = { present: [], removed: [] }));
      (gone ? group.removed : group.present).push(n);
    };
    for (const n of inf.stage.nodes) add(n, false);
    for (const n of inf.stage.removed) add(n, true);
    const list = [];
    const of = new Map();
    const count = (map, key) => map.set(key, (map.get(key) ?? 0) + 1);
    for (const [source, { present, removed }] of bySource) {
      const size = present.length + removed.length;
      const counted = present.length ? present : removed;
      const ops = new Map();
      for (const n of counted) count(ops, n.op);
      const reps = repeats([...ops.values()]);
      if (size < BLOCK_NODES || reps < BLOCK_REPS) continue;
      const statuses = new Map();
      for (const n of present) if (n.status !== "kept") count(statuses, n.status);
      let status = "kept";
      for (const [key, c] of statuses) if (status === "kept" || c > statuses.get(status)) status = key;
      if (removed.length) statuses.set("removed", removed.length);
      if (status === "kept" && removed.length) status = "removed";
      let changed = 0;
      for (const c of statuses.values()) changed += c;
      const block = {
        index: list.length, source, size, reps, status, changed, statuses,
        perRep: Math.max(1, Math.round(counted.length / reps)),
      };
      list.push(block);
      for (const n of present) of.set(n.id, block);
      for (const n of removed) if (!of.has(n.id)) of.set(n.id, block);
    }
    inf.blocks = { list, of };
    return inf.blocks;
  }

  /** How many times a source line ran, from how often each of its ops occurs: their greatest
   * common divisor (a line with mul ×1125 and add ×375 ran 375 times, 3 muls and an add each),
   * or where that is too small to be a loop (an op merged or folded away somewhere) the count
   * most ops share. */
  function repeats(counts) {
    const gcd = (a, b) => (b ? gcd(b, a % b) : a);
    const divisor = counts.reduce(gcd, 0);
    if (divisor >= BLOCK_REPS) return divisor;
    const often = new Map();
    for (const c of counts) often.set(c, (often.get(c) ?? 0) + 1);
    let best = 0;
    for (const [c, k] of often) {
      if (!best || k > often.get(best) || (k === often.get(best) && c < best)) best = c;
    }
    return best;
  }

  function blockOpen(inf, block) {
    return st.openBlocks.has(block.source) || (st.node !== null && blocksOf(inf).of.get(st.node) === block);
  }

  function nodeIn(inf, id) {
    return inf.byId.get(id) ?? inf.removedById.get(id) ?? null;
  }

  /** For each node id: the changes whose result it is (how it was made) and the changes it was
   * one of the nodes of (what became of it). */
  function history() {
    if (st.history) return st.history;
    const made = new Map();
    const became = new Map();
    const add = (map, id, entry) => {
      if (!map.has(id)) map.set(id, []);
      map.get(id).push(entry);
    };
    st.data.stages.forEach((stage, s) => {
      stage.changes.forEach((c, k) => {
        for (const id of c.result) add(made, id, { s, k, c });
        for (const id of c.nodes) add(became, id, { s, k, c });
      });
    });
    st.history = { made, became };
    return st.history;
  }

  function visibleStages() {
    return st.data.stages
      .map((s, i) => i)
      .filter((i) => !st.hideUnchanged || i === 0 || st.data.stages[i].changed);
  }

  // --- Stepping ---------------------------------------------------------------------------------

  function go(i) {
    i = clampStage(i);
    if (i !== model.get("stage")) {
      model.set("stage", i);
      model.save_changes();
    }
    if (i !== st.stage) showStage(i);
  }

  function step(delta) {
    const visible = visibleStages();
    let at = visible.indexOf(st.stage);
    if (at < 0) at = visible.findIndex((i) => i > st.stage) - (delta > 0 ? 1 : 0);
    const target = visible[at + delta];
    if (target === undefined) return false;
    go(target);
    return true;
  }

  function togglePlay() {
    if (st.timer) {
      stopPlaying();
      return;
    }
    const visible = visibleStages();
    if (st.stage === visible[visible.length - 1]) go(visible[0]);
    st.timer = setInterval(() => {
      if (!step(1)) stopPlaying();
    }, PLAY_MS);
    ui.play.textContent = "❚❚ pause";
    ui.play.setAttribute("aria-pressed", "true");
  }

  function stopPlaying() {
    clearInterval(st.timer);
    st.timer = null;
    ui.play.textContent = "▶ play";
    ui.play.setAttribute("aria-pressed", "false");
  }

  function showStage(i) {
    if (!st.data.stages.length) {
      ui.graph.innerHTML = "";
      ui.narration.textContent = "This compilation has no stages to show.";
      return;
    }
    const started = performance.now();
    const previous = st.stage;
    st.stage = i;
    const inf = info(i);
    st.change = inf.stage.changes.length ? 0 : -1;
    if (st.node !== null && !nodeIn(inf, st.node)) st.node = null;
    if (previous !== i) st.irFull = false;
    updateToolbar();
    updateStageList();
    updateFigures();
    drawGraph(true);
    renderRule();
    renderDetails();
    renderIR();
    narrateStage();
    root.dataset.currentStage = String(i);
    root.dataset.renderMs = (performance.now() - started).toFixed(1);
  }

  function selectChange(k) {
    const inf = info(st.stage);
    const n = inf.stage.changes.length;
    if (!n) return;
    st.change = ((k % n) + n) % n;
    renderRule();
    const c = inf.stage.changes[st.change];
    if (inf.big && !st.expandAll && pageOf(inf, st.change) !== st.drawn.page) {
      drawGraph(true);
    } else {
      markMatches();
      scrollTo([...c.result, ...c.nodes]);
    }
    ui.narration.textContent = `Change ${st.change + 1} of ${n}: ${c.sentence}`;
  }

  function selectNode(id, scroll) {
    const inf = info(st.stage);
    if (!nodeIn(inf, id)) return;
    st.node = id;
    const block = st.drawn.of?.get(id);
    if (block && st.drawn.blocks.has(block)) st.openBlocks.add(block.source);
    if (!st.drawn.ids.has(id)) drawGraph(false);
    else markSelected();
    if (scroll) scrollTo([id]);
    renderDetails();
  }

  // --- Toolbar, stage list, figures -------------------------------------------------------------

  function updateToolbar() {
    const visible = visibleStages();
    const at = visible.indexOf(st.stage);
    const stage = st.data.stages[st.stage];
    ui.slider.max = String(Math.max(visible.length - 1, 0));
    ui.slider.value = String(Math.max(at, 0));
    ui.slider.setAttribute("aria-valuetext", `stage ${st.stage + 1}: ${stage.pass}`);
    ui.position.textContent = `stage ${st.stage + 1} of ${st.data.stages.length}: ${stage.pass}`;
    ui.prev.disabled = at <= 0;
    ui.next.disabled = at < 0 || at >= visible.length - 1;
  }

  function renderStageList() {
    ui.stages.innerHTML = st.data.stages
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

  function updateStageList() {
    for (const li of ui.stages.children) {
      const i = Number(li.dataset.stage);
      li.hidden = st.hideUnchanged && i !== 0 && li.dataset.changed !== "true";
      if (i === st.stage) li.setAttribute("aria-current", "step");
      else li.removeAttribute("aria-current");
    }
  }

  function renderFigures() {
    const stages = st.data.stages;
    const barW = 12;
    const height = 28;
    ui.figures.innerHTML = FIGURES.map(([key, name, words]) => {
      const values = stages.map((s) => s.stats[key] ?? 0);
      const top = Math.max(...values, 1);
      const bars = values
        .map((v, i) => {
          const h = Math.max(1, (v / top) * (height - 2));
          return (
            `<rect class="tf-bar" data-stage="${i}" x="${i * barW + 1}" y="${r1(height - h)}" ` +
            `width="${barW - 2}" height="${r1(h)}"><title>${esc(stages[i].pass)}: ` +
            `${v.toLocaleString("en")} ${name}</title></rect>`
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

  function updateFigures() {
    const stage = st.data.stages[st.stage];
    const before = st.stage > 0 ? st.data.stages[st.stage - 1] : null;
    for (const figure of ui.figures.children) {
      const key = figure.dataset.stat;
      for (const bar of figure.querySelectorAll(".tf-bar")) {
        bar.classList.toggle("tf-bar-current", Number(bar.dataset.stage) === st.stage);
      }
      const v = stage.stats[key] ?? 0;
      let text = human(v);
      if (before) {
        const d = v - (before.stats[key] ?? 0);
        if (d) text += ` (${d > 0 ? "+" : "−"}${human(Math.abs(d))})`;
      }
      figure.querySelector(".tf-figure-value").textContent = text;
    }
  }

  // --- The graph --------------------------------------------------------------------------------

  function pages(inf) {
    if (inf.pages) return inf.pages;
    const budget = Math.floor(VIEW_LIMIT / 2);
    const result = [];
    let start = 0;
    let size = 0;
    inf.stage.changes.forEach((c, k) => {
      const cost = focusOf(c).length;
      if (size + cost > budget && k > start) {
        result.push([start, k]);
        start = k;
        size = 0;
      }
      size += cost;
    });
    result.push([start, inf.stage.changes.length]);
    inf.pages = result;
    return result;
  }

  function pageOf(inf, k) {
    return pages(inf).findIndex(([a, b]) => k >= a && k < b);
  }

  function focusOf(c) {
    return c.kind === "fused" ? c.result : [...c.nodes, ...c.result];
  }

  /** Which node ids to draw: all of them, or for a big stage the changes on the selected page,
   * the selected node, and their neighbours, with fused members folded into their kernel. */
  function view(inf) {
    const total = inf.stage.stats.nodes;
    if (!inf.big || st.expandAll) {
      return { ids: null, page: -1, note: "", total, blocks: new Map() };
    }
    const focus = [];
    let page = -1;
    const changes = inf.stage.changes;
    if (changes.length) {
      page = Math.max(pageOf(inf, Math.max(st.change, 0)), 0);
      const [a, b] = pages(inf)[page];
      for (let k = a; k < b; k++) focus.push(...focusOf(changes[k]));
    } else {
      const top = [...inf.stage.nodes].sort((p, q) => p.y - q.y || p.x - q.x);
      for (const n of top.slice(0, Math.floor(VIEW_LIMIT / 2))) focus.push(n.id);
    }
    if (st.node !== null) focus.push(st.node);
    const ids = new Set();
    const take = (id) => {
      if (ids.size < VIEW_LIMIT && !inf.memberOf.has(id) && nodeIn(inf, id)) ids.add(id);
    };
    for (const id of focus) take(id);
    if (st.node !== null) ids.add(st.node);
    const adjacent = neighbours(inf);
    for (const id of [...ids]) {
      const y = nodeIn(inf, id).y;
      for (const m of adjacent.get(id) ?? []) {
        if (Math.abs((nodeIn(inf, m)?.y ?? Infinity) - y) <= NEAR_LAYERS) take(m);
      }
      if (ids.size >= VIEW_LIMIT) break;
    }
    // Repeated blocks: the members in view of a block the learner has not opened become one box.
    const blocks = new Map(); // block -> its members that the neighbourhood would have drawn
    const { of } = blocksOf(inf);
    for (const id of [...ids]) {
      const block = of.get(id);
      if (!block || blockOpen(inf, block)) continue;
      ids.delete(id);
      if (!blocks.has(block)) blocks.set(block, []);
      blocks.get(block).push(id);
    }
    let folded = "";
    if (blocks.size) {
      let members = 0;
      for (const block of blocks.keys()) members += block.size;
      folded = ` and ${plural(blocks.size, "repeated block")} (${members.toLocaleString("en")} ` +
        `nodes; click ${blocks.size === 1 ? "it" : "one"} to open it)`;
    }
    let shown = 0;
    let gone = 0;
    for (const id of ids) {
      if (!isOp(nodeIn(inf, id))) continue;
      if (inf.byId.has(id)) shown++;
      else gone++;
    }
    const counts = `Showing ${shown.toLocaleString("en")} of ${plural(total, "node")}` +
      (gone ? ` (and ${gone.toLocaleString("en")} removed)` : "") + folded;
    let note;
    if (changes.length) {
      const [a, b] = pages(inf)[page];
      const which = b - a === changes.length ? "all changes" : `changes ${a + 1}–${b} of ${changes.length}`;
      note = `${counts}: the neighbourhood of ${which}` +
        (inf.memberOf.size ? ", fused groups collapsed." : ".");
    } else {
      note = `${counts}: the top of the graph.`;
    }
    return { ids, page, note, total, blocks };
  }

  function position(inf, n) {
    const place = inf.removedById.get(n.id) === n ? inf.moved.get(n.id) : undefined;
    const [x, y] = place ?? [n.x, n.y];
    return [x * X_SCALE, y * Y_SCALE];
  }

  function drawGraph(scroll) {
    const inf = info(st.stage);
    const v = view(inf);
    const shown = (id) => v.ids === null || v.ids.has(id);
    const removed = inf.stage.removed.filter((n) => shown(n.id));
    const present = inf.stage.nodes.filter((n) => shown(n.id));
    const where = new Map();
    let minX = Infinity;
    let minY = Infinity;
    let maxX = -Infinity;
    let maxY = -Infinity;
    const extend = (p) => {
      minX = Math.min(minX, p[0]);
      maxX = Math.max(maxX, p[0]);
      minY = Math.min(minY, p[1]);
      maxY = Math.max(maxY, p[1]);
    };
    for (const n of [...removed, ...present]) where.set(n.id, position(inf, n));
    // A collapsed block stands where its top-most member in view would have been. Its members
    // may be spread far apart, so a view with blocks is packed: each layer drawn becomes one
    // row, its boxes side by side in their order (and edges are drawn as plain curves).
    const blockAt = new Map();
    for (const [block, members] of v.blocks) {
      let top = null;
      for (const id of members) {
        const p = position(inf, nodeIn(inf, id));
        if (!top || p[1] < top[1] || (p[1] === top[1] && p[0] < top[0])) top = p;
      }
      blockAt.set(block, top);
    }
    const packed = blockAt.size > 0;
    if (packed) {
      const rows = new Map();
      for (const map of [where, blockAt]) {
        for (const [key, p] of map) {
          if (!rows.has(p[1])) rows.set(p[1], []);
          rows.get(p[1]).push([map, key, p[0]]);
        }
      }
      [...rows.keys()].sort((a, b) => a - b).forEach((y, row) => {
        const items = rows.get(y).sort((a, b) => a[2] - b[2]);
        items.forEach(([map, key], col) => {
          map.set(key, [(col - (items.length - 1) / 2) * X_SCALE, row * Y_SCALE]);
        });
      });
    }
    for (const p of where.values()) extend(p);
    for (const p of blockAt.values()) extend(p);
    if (minX === Infinity) minX = minY = maxX = maxY = 0;
    const box = {
      x: minX - NODE_W / 2 - PAD,
      y: minY - NODE_H / 2 - PAD,
      w: maxX - minX + NODE_W + 2 * PAD,
      h: maxY - minY + NODE_H + 2 * PAD,
    };
    const zoom = st.zoom ?? autoZoom(box);

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
    const { of } = v.blocks.size ? blocksOf(inf) : { of: null };
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
    for (const e of inf.removedEdges) {
      const [a, b, route] = ends(e, "-");
      if (a && b) {
        parts.push(`<path class="tf-edge" data-from="${e.from}" data-to="${e.to}" d="` +
          `${edgePath(route, a, b)}"/>`);
      }
    }
    // A removed node that moved aside: a dotted line to the place it left.
    for (const n of removed) {
      if (!inf.moved.has(n.id) || packed) continue;
      const [x0, y0] = where.get(n.id);
      const [x1, y1] = [n.x * X_SCALE, n.y * Y_SCALE];
      const side = Math.sign(x1 - x0) * NODE_W / 2;
      parts.push(`<path class="tf-tie" data-from="${n.id}" d="M${r1(x0 + side)},${r1(y0)} ` +
        `L${r1(x1 - side)},${r1(y1)}"/>`);
    }
    parts.push(`</g><g class="tf-edges">`);
    const stubs = [];
    for (const e of inf.stage.edges) {
      const [a, b, route] = ends(e, "");
      if (a && b) {
        parts.push(`<path class="tf-edge" data-from="${e.from}" data-to="${e.to}" ${arrow} d="` +
          `${edgePath(route, a, b)}"/>`);
      } else if (a || b) {
        stubs.push(stubPath(a, b));
      }
    }
    if (stubs.length) parts.push(`<path class="tf-stub" d="${stubs.join(" ")}"/>`);
    parts.push(`</g><g class="tf-nodes tf-nodes-removed">`);
    for (const n of removed) parts.push(nodeSvg(n, "removed", where.get(n.id), 0));
    parts.push(`</g><g class="tf-nodes">`);
    const collapse = v.ids !== null;
    for (const n of present) {
      const folded = collapse ? inf.groupSize.get(n.id) ?? 0 : 0;
      parts.push(nodeSvg(n, n.status, where.get(n.id), folded));
    }
    for (const [block, p] of blockAt) parts.push(blockSvg(block, p));
    parts.push(`</g></svg>`);
    ui.graph.innerHTML = parts.join("");

    st.drawn = { page: v.page, ids: new Set(where.keys()), box, zoom, where, blocks: blockAt, of };
    ui.note.textContent = v.note;
    ui.expand.hidden = !inf.big;
    ui.expand.textContent = st.expandAll ? "show the neighbourhood only" : `expand all (${plural(v.total, "node")})`;
    markMatches();
    markSelected();
    if (scroll) scrollToFocus();
  }

  /** Bring the selected change (or else the selected node) into view. */
  function scrollToFocus() {
    const c = info(st.stage).stage.changes[st.change];
    scrollTo(c ? [...c.result, ...c.nodes] : st.node !== null ? [st.node] : []);
  }

  function nodeSvg(n, status, [x, y], folded) {
    const badge = STATUS[status]?.badge ?? "";
    const text = folded ? `${badge} ×${folded}` : badge;
    const label = n.label.length > 19 ? `${n.label.slice(0, 18)}…` : n.label;
    let out =
      `<g class="tf-node" data-node-id="${n.id}" data-status="${status}"` +
      `${n.is_output ? ' data-output="true"' : ""}${folded ? ` data-collapsed="${folded}"` : ""} ` +
      `transform="translate(${r1(x - NODE_W / 2)},${r1(y - NODE_H / 2)})">` +
      `<title>${esc(n.text)}${n.source ? `  (${esc(n.source)})` : ""}</title>` +
      `<rect class="tf-box" width="${NODE_W}" height="${NODE_H}" rx="${status === "fused" ? NODE_H / 2 : 4}"/>` +
      `<text class="tf-label" x="${NODE_W / 2}" y="${NODE_H / 2 + 4}">${esc(label)}</text>`;
    if (text) out += badgeSvg(text, 6, -9);
    // A value the call writes back into state (p -= lr * g): "→ w" under the box.
    if (n.updates?.length && status !== "removed") {
      out += badgeSvg(`→ ${n.updates.join(", ")}`, 6, NODE_H - 5, "tf-writes");
    }
    return `${out}</g>`;
  }

  /** A collapsed repeated block: a small stack of boxes, "×150 · 4 ops" over its source line,
   * with the status most of its changed members share (and how many changed) as its badge. */
  function blockSvg(b, [x, y]) {
    const badge = b.changed ? `${STATUS[b.status]?.badge || b.status} ${b.statuses.get(b.status)}` : "";
    const source = b.source.length > 19 ? `…${b.source.slice(-18)}` : b.source;
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

  /** A small pill with a word in it, at the box's top right corner (shifted by dx, dy). */
  function badgeSvg(text, dx, dy, extra = "") {
    const w = text.length * 6 + 8;
    return (
      `<g class="tf-badge ${extra}" transform="translate(${NODE_W - w + dx},${dy})">` +
      `<rect width="${w}" height="14" rx="7"/><text x="${w / 2}" y="10.5">${esc(text)}</text></g>`
    );
  }

  /** Open a collapsed block: draw its members (within the neighbourhood) one by one. */
  function openBlock(index) {
    const inf = info(st.stage);
    const block = blocksOf(inf).list[index];
    if (!block) return;
    const members = [];
    for (const [id, b] of st.drawn.of ?? []) if (b === block) members.push(id);
    st.openBlocks.add(block.source);
    drawGraph(false);
    const top = members.filter((id) => st.drawn.where.has(id))
      .sort((p, q) => st.drawn.where.get(p)[1] - st.drawn.where.get(q)[1]);
    scrollTo(top.slice(0, 1));
    ui.narration.textContent = `Opened the block of ${plural(block.size, "node")} from ` +
      `${block.source} (×${block.reps}).`;
  }

  /** Where a node is drawn: its own box, or the collapsed block it is in. */
  function drawnAt(id) {
    const { where, blocks, of } = st.drawn;
    return where.get(id) ?? (of && blocks.get(of.get(id)));
  }

  /** An edge from the bottom of its source to the top of its target, through the layout's
   * route points (a curve when the route has none). */
  function edgePath(route, [x0, y0], [x1, y1]) {
    const sy = y0 + NODE_H / 2;
    const ty = y1 - NODE_H / 2 - 2;
    const inner = route.slice(1, -1);
    if (!inner.length) {
      const bend = Math.max(24, Math.min(120, Math.abs(ty - sy) / 2));
      return `M${r1(x0)},${r1(sy)} C${r1(x0)},${r1(sy + bend)} ${r1(x1)},${r1(ty - bend)} ${r1(x1)},${r1(ty)}`;
    }
    const points = inner.map(([x, y]) => `L${r1(x * X_SCALE)},${r1(y * Y_SCALE)}`).join(" ");
    return `M${r1(x0)},${r1(sy)} ${points} L${r1(x1)},${r1(ty)}`;
  }

  /** A short line leaving a drawn node towards a neighbour that is not drawn. */
  function stubPath(a, b) {
    return a
      ? `M${r1(a[0])},${r1(a[1] + NODE_H / 2)} l0,16`
      : `M${r1(b[0])},${r1(b[1] - NODE_H / 2)} l0,-16`;
  }

  function markMatches() {
    for (const g of ui.graph.querySelectorAll(".tf-match-before, .tf-match-after")) {
      g.classList.remove("tf-match-before", "tf-match-after");
    }
    const c = info(st.stage).stage.changes[st.change];
    if (!c) return;
    for (const id of c.nodes) nodeElement(id)?.classList.add("tf-match-before");
    for (const id of c.result) nodeElement(id)?.classList.add("tf-match-after");
  }

  function markSelected() {
    ui.graph.querySelector(".tf-selected")?.classList.remove("tf-selected");
    if (st.node !== null) nodeElement(st.node)?.classList.add("tf-selected");
  }

  function nodeElement(id) {
    // Prefer the drawn-now node over a faded one with the same id (a result that is also kept),
    // and else the collapsed block it is in.
    const block = st.drawn.of?.get(id);
    return (
      ui.graph.querySelector(`.tf-nodes:not(.tf-nodes-removed) [data-node-id="${id}"]`) ??
      ui.graph.querySelector(`[data-node-id="${id}"]`) ??
      (block && st.drawn.blocks.has(block)
        ? ui.graph.querySelector(`.tf-block[data-block="${block.index}"]`) : null)
    );
  }

  /** Scroll the graph so the first of `ids` that is drawn sits in the middle of the view. The
   * scroll waits for the next frame, when the browser lays the page out anyway: scrolling now
   * would force a second layout in the middle of a redraw. */
  function scrollTo(ids) {
    const { box, zoom } = st.drawn;
    const p = ids.map(drawnAt).find(Boolean);
    if (!p || !box) return;
    cancelAnimationFrame(st.scrolling);
    st.scrolling = requestAnimationFrame(() => {
      ui.wrap.scrollLeft = (p[0] - box.x) * zoom - st.size.w / 2;
      ui.wrap.scrollTop = (p[1] - box.y) * zoom - st.size.h / 2;
    });
  }

  /** Until the learner zooms: the whole width if it fits, else as much as stays readable. */
  function autoZoom(box) {
    return st.size.w ? Math.max(0.35, Math.min(1, (st.size.w - 4) / box.w)) : 1;
  }

  function setZoom(zoom) {
    st.zoom = Math.max(0.05, Math.min(3, zoom));
    drawGraph(true);
  }

  function fit() {
    const { box } = st.drawn;
    if (!box) return;
    setZoom(Math.min((st.size.w - 4) / box.w, (st.size.h - 4) / box.h) || 1);
  }

  // --- The rule card ----------------------------------------------------------------------------

  function nodeLink(inf, id) {
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

  function renderRule() {
    const inf = info(st.stage);
    const { stage } = inf;
    const changes = stage.changes;
    if (st.stage === 0) {
      ui.rule.innerHTML =
        `<h3>The traced graph</h3><p>${plural(stage.stats.nodes, "node")} as traced from ` +
        `your code, reading ${operandWords(stage.nodes)} (drawn, but not counted as nodes). ` +
        "Step forward (→ or j) to watch each pass change it.</p>" + updatesWords(stage);
      return;
    }
    if (!changes.length) {
      ui.rule.innerHTML = `<h3>${esc(stage.pass)}</h3><p>This pass changed nothing.</p>`;
      return;
    }
    const c = changes[st.change];
    const texts = (ids, lookup) =>
      ids.map((id) => {
        const n = lookup(id);
        return `<li>${nodeLink(inf, id)} <code>${esc(n ? n.text : "")}</code></li>`;
      }).join("");
    const previous = st.stage > 0 ? info(st.stage - 1) : null;
    const before = texts(c.nodes, (id) => previous?.byId.get(id) ?? nodeIn(inf, id));
    const after = texts(c.result, (id) => inf.byId.get(id));
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
    ui.rule.innerHTML =
      `<div class="tf-rule-card" data-change="${st.change}" data-status="${c.kind}">` +
      `<div class="tf-rule-head"><button type="button" class="tf-change-prev" aria-label="Previous change">◀</button>` +
      `<span>change ${st.change + 1} of ${changes.length}</span>` +
      `<button type="button" class="tf-change-next" aria-label="Next change">▶</button></div>` +
      `<p class="tf-rule-words"><span class="tf-kind" data-status="${c.kind}">${esc(STATUS[c.kind]?.badge || c.kind)}</span> ` +
      `<strong>${esc(prettyRule(c.rule))}</strong></p>` +
      `<p class="tf-sentence">${esc(c.sentence)}</p>` +
      `<div class="tf-before-after"><div><h4>before</h4><ul>${before}</ul></div>` +
      `<div><h4>after</h4><ul>${after || "<li>(nothing: removed)</li>"}</ul></div></div></div>` +
      `<details class="tf-rules"><summary>${plural(changes.length, "change")} by ${plural(rules.size, "rule")}</summary>` +
      `<ul class="tf-rule-groups">${groups}</ul><ol class="tf-changes">${listed}</ol>${more}</details>`;
  }

  // --- The selected node ------------------------------------------------------------------------

  function renderDetails() {
    const inf = info(st.stage);
    const n = st.node === null ? null : nodeIn(inf, st.node);
    if (!n) {
      ui.details.innerHTML = `<p class="tf-hint">Click a node to see its op, type, source line, ` +
        "lineage, kernel and value.</p>";
      return;
    }
    const gone = !inf.byId.has(n.id);
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
    if (n.source) {
      rows.push(["source", `${esc(n.source)}${n.source_line ? `<pre class="tf-source-line">${esc(n.source_line)}</pre>` : ""}`]);
    }
    const table = rows.map(([k, v]) => `<tr><th scope="row">${k}</th><td>${v}</td></tr>`).join("");
    ui.details.innerHTML =
      `<h3 class="tf-details-title" data-node-id-shown="${n.id}"><code>${esc(n.text)}</code></h3>` +
      `<table class="tf-details-table">${table}</table>` +
      lineage(inf, n) + kernel(n) + valueOf(n);
  }

  function lineage(inf, n) {
    const items = [];
    const traced = n.lineage.filter((id) => id !== n.id);
    if (traced.length) {
      items.push(`<li>stands for traced ${traced.length === 1 ? "node" : "nodes"} ` +
        `${traced.map((id) => nodeLink(inf, id)).join(", ")}</li>`);
    }
    const { made, became } = history();
    const stageButton = (s) =>
      `<button type="button" class="tf-goto" data-goto="${s}" data-node-id-goto="${n.id}">` +
      `${esc(st.data.stages[s].pass)}</button>`;
    for (const { s, c } of made.get(n.id) ?? []) {
      if (c.nodes.length === 1 && c.nodes[0] === n.id) continue;
      const from = c.nodes.map((id) => esc(st.names.get(id) ?? `%${id}`)).join(", ");
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
      const kernelName = c.kind === "fused" ? fusedName(s, c.result[0]) : "";
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

  function fusedName(s, id) {
    const n = info(s).byId.get(id);
    return n?.kernel?.name ?? st.names.get(id) ?? "";
  }

  function kernel(n) {
    if (!n.kernel) return "";
    const k = n.kernel;
    return (
      `<h4>fused kernel ${esc(k.name)}</h4><p>${plural(k.members.length, "op")} in one kernel:</p>` +
      `<pre class="tf-members">${esc(k.members.join("\n"))}</pre>` +
      `<details class="tf-kernel" open><summary>generated NumPy</summary>` +
      `<pre class="tf-code" data-lang="numpy">${esc(k.numpy)}</pre></details>` +
      `<details class="tf-kernel"><summary>generated CUDA C</summary>` +
      `<pre class="tf-code" data-lang="cuda">${esc(k.cuda)}</pre></details>`
    );
  }

  function valueOf(n) {
    const v = n.value;
    if (!v) {
      const why = st.hasValues
        ? "Not computed: nothing uses this value (dead code, which dce removes)."
        : "No example inputs were given, so no values.";
      return `<h4>value</h4><p class="tf-hint">${why}</p>`;
    }
    const stats = ["min", "max", "mean"]
      .filter((key) => v[key] !== undefined)
      .map((key) => `${key} ${v[key] === null ? "not finite" : Number(v[key]).toPrecision(4)}`)
      .join(", ");
    return (
      `<h4>value on the example inputs</h4><p><code>${esc(v.dtype)}[${v.shape.join(",")}]</code>` +
      `${stats ? `: ${stats}` : ""}</p><pre class="tf-value">${esc(v.preview)}` +
      `${v.truncated ? "\n…" : ""}</pre>`
    );
  }

  // --- The text IR and its diff -----------------------------------------------------------------

  /** The IR diff against the stage before, worked out once per stage. */
  function irDiff(inf) {
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

  function renderIR() {
    if (!ui.ir.open) return;
    const inf = info(st.stage);
    if (!inf.previous) {
      ui.irSummary.textContent = "(as traced)";
      ui.irText.textContent = inf.stage.text;
      return;
    }
    const { lines, added, removed } = irDiff(inf);
    if (!added && !removed) {
      ui.irSummary.textContent = "(the same as the stage before)";
      ui.irText.textContent = inf.stage.text;
      return;
    }
    ui.irSummary.textContent = `(against ${inf.previous.pass}: +${added} −${removed} lines)`;
    if (!st.irFull && inf.irHtml) {
      ui.irText.innerHTML = inf.irHtml;
      return;
    }
    // Keep the changed lines and a little context; fold the rest (runs of 3 or more).
    const keep = new Uint8Array(lines.length).fill(st.irFull ? 1 : 0);
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
      if (!st.irFull && shown === IR_LINES) {
        more(`${(lines.length - i).toLocaleString("en")} more lines`);
        break;
      }
      const [mark, line] = lines[i];
      const diff = mark === "+" ? "add" : mark === "-" ? "del" : "same";
      out.push(`<span class="tf-line" data-diff="${diff}">${mark} ${esc(line)}</span>\n`);
      shown++;
    }
    if (skipped) more(plural(skipped, "unchanged line"));
    const html = out.join("");
    if (!st.irFull) inf.irHtml = html;
    ui.irText.innerHTML = html;
  }

  // --- Narration --------------------------------------------------------------------------------

  function narrateStage() {
    const stage = st.data.stages[st.stage];
    const total = st.data.stages.length;
    let text;
    if (st.stage === 0) {
      text = `Stage 1 of ${total}: the graph as traced, ${plural(stage.stats.nodes, "node")}.`;
    } else if (!stage.changes.length) {
      text = `Stage ${st.stage + 1} of ${total}: ${stage.pass} changed nothing.`;
    } else {
      const before = st.data.stages[st.stage - 1].stats.nodes;
      text = `Stage ${st.stage + 1} of ${total}: ${stage.pass} made ` +
        `${plural(stage.changes.length, "change")}, ${before} → ${stage.stats.nodes} nodes. ` +
        `Change 1: ${stage.changes[0].sentence}`;
    }
    ui.narration.textContent = text;
  }

  // --- Events -----------------------------------------------------------------------------------

  function onClick(event) {
    const t = event.target;
    const hit = (selector) => t.closest(selector);
    let found;
    if ((found = hit(".tf-prev"))) step(-1);
    else if ((found = hit(".tf-next"))) step(1);
    else if ((found = hit(".tf-play"))) togglePlay();
    else if ((found = hit(".tf-change-prev"))) selectChange(st.change - 1);
    else if ((found = hit(".tf-change-next"))) selectChange(st.change + 1);
    else if ((found = hit("[data-change]")) && found.tagName === "BUTTON") selectChange(Number(found.dataset.change));
    else if ((found = hit(".tf-goto"))) {
      go(Number(found.dataset.goto));
      selectNode(Number(found.dataset.nodeIdGoto), true);
    } else if ((found = hit(".tf-block"))) openBlock(Number(found.dataset.block));
    else if ((found = hit("[data-node-id]"))) {
      selectNode(Number(found.dataset.nodeId), !found.closest(".tf-graph"));
    } else if ((found = hit("[data-stage]"))) go(Number(found.dataset.stage));
    else if ((found = hit(".tf-expand"))) {
      st.expandAll = !st.expandAll;
      st.openBlocks.clear();
      drawGraph(true);
    } else if ((found = hit(".tf-zoom-in"))) setZoom(st.drawn.zoom * 1.25);
    else if ((found = hit(".tf-zoom-out"))) setZoom(st.drawn.zoom / 1.25);
    else if ((found = hit(".tf-fit"))) fit();
    else if ((found = hit(".tf-ir-skip"))) {
      st.irFull = true;
      renderIR();
    }
  }

  function onKey(event) {
    // Keys typed into a text field are the field's; on the checkbox and the slider they step
    // (the slider's own arrows are taken over: JupyterLab would swallow them, and a page would
    // step twice).
    const field = event.target.closest?.("input, textarea, select");
    if (event.defaultPrevented || (field && !["checkbox", "range"].includes(field.type))) return;
    const block = event.target.closest?.(".tf-block");
    if (block && (event.key === "Enter" || event.key === " ")) {
      event.preventDefault();
      openBlock(Number(block.dataset.block));
      return;
    }
    const moves = { ArrowRight: 1, j: 1, ArrowLeft: -1, k: -1 };
    const delta = moves[event.key];
    if (delta === undefined || event.altKey || event.ctrlKey || event.metaKey) return;
    event.preventDefault();
    event.stopPropagation(); // j and k must not also move the notebook's cell selection
    step(delta);
  }

  function onSlider() {
    const visible = visibleStages();
    go(visible[Number(ui.slider.value)] ?? 0);
  }

  function onHide() {
    st.hideUnchanged = ui.hide.checked;
    const visible = visibleStages();
    if (!visible.includes(st.stage)) go([...visible].reverse().find((i) => i < st.stage) ?? 0);
    updateToolbar();
    updateStageList();
  }

  const onStage = () => {
    const i = clampStage(model.get("stage"));
    if (i !== st.stage) showStage(i);
  };
  const onData = () => setData(model.get("data"));

  // Keys: inside a notebook only while the focus is in the stepper, so ←/→ and j/k do not
  // fight the notebook's own shortcuts; on a page that holds just this stepper (the static
  // page marks its element data-keys="page"), wherever the focus is.
  const keys = el.dataset?.keys === "page" ? el.ownerDocument : root;
  root.addEventListener("click", onClick);
  keys.addEventListener("keydown", onKey);
  ui.slider.addEventListener("input", onSlider);
  ui.hide.addEventListener("change", onHide);
  ui.ir.addEventListener("toggle", renderIR);
  ui.irText.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && event.target.closest(".tf-ir-skip")) {
      st.irFull = true;
      renderIR();
    }
  });
  // The view's size, watched rather than read, so drawing never forces a layout.
  const resized = new ResizeObserver(([entry]) => {
    const { width, height } = entry.contentRect;
    if (width === st.size.w && height === st.size.h) return;
    const first = !st.size.w;
    st.size = { w: width, h: height };
    if (!st.drawn.box) return;
    if (st.zoom === null && autoZoom(st.drawn.box) !== st.drawn.zoom) drawGraph(true);
    else if (first) scrollToFocus(); // the first scroll happened before the view had a size
  });
  resized.observe(ui.wrap);
  model.on("change:stage", onStage);
  model.on("change:data", onData);
  setData(model.get("data"));

  return () => {
    keys.removeEventListener("keydown", onKey);
    stopPlaying();
    resized.disconnect();
    model.off("change:stage", onStage);
    model.off("change:data", onData);
  };
}

export default { render };
