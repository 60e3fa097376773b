/**
 * The compilation's data as Python sends it (`teachflow/viz/stepper_data.py` says the format): every
 * node once, in a table of entries, and each stage as the list of the entries it has. `stageAt`
 * puts a stage back together the first time it is shown, step for step as
 * `teachflow.viz.expand` does in Python: each node with its status in this stage (from the
 * stage's changes), its value, its kernel and its source line; the edges, from each node's
 * operands; the nodes the stage removed, as the stage before had them; the text form, from
 * each node's line. The kernels' generated sources come compressed, and are inflated only when
 * a learner first opens a fused kernel (`loadSources`). Functions of the stepper's state `st`
 * (they read `st.data` and keep what they build in `st.full` and `st.kernels`).
 */

/** What an entry that leaves a key out has there (`lineage` leaves out its own id). */
const DEFAULTS = {
  kind: "node", device: "cpu", source: "", inputs: [], is_output: false, updates: [], scope: "",
};

/** Stage `i`, full: what every other part of the stepper reads (`stage.nodes`, `stage.edges`,
 * `stage.removed`, `stage.text`, ...). */
export function stageAt(st, i) {
  let full = st.full.get(i);
  if (!full) {
    full = fullStage(context(st, i, false));
    st.full.set(i, full);
  }
  return full;
}

/** The entries named by `spans`: runs of indices into the table, each [first, how many]. */
export function entriesOf(data, spans) {
  const out = [];
  for (let k = 0; k < spans.length; k += 2) {
    for (let i = spans[k]; i < spans[k] + spans[k + 1]; i++) out.push(data.nodes[i]);
  }
  return out;
}

/** What an entry's text says of its op, label and type ("%7 = mul %5, 2.0 : f32[3]": mul,
 * "%7 = mul", f32[3]); the entry leaves out those it agrees with. */
export function derived(entry) {
  const at = entry.text.indexOf(" = ");
  const name = at < 0 ? entry.text : entry.text.slice(0, at);
  const rest = at < 0 ? "" : entry.text.slice(at + 3);
  const kind = entry.kind ?? "node";
  if (kind !== "node") return { op: kind, label: `${name} (${kind})` };
  const op = rest.split(" ", 1)[0];
  const colon = rest.lastIndexOf(" : ");
  return { op, label: `${name} = ${op}`, type: colon < 0 ? rest : rest.slice(colon + 3) };
}

/** "f32[16,3]" -> {dtype: "f32", shape: [16, 3]} (nothing for a shape not known in full): what
 * a value's summary leaves out when its type says it. */
function valueType(type) {
  const open = type.indexOf("[");
  const dims = open < 0 ? "" : type.slice(open + 1);
  const inner = dims.replace(/\]+$/, "");
  const sizes = inner ? inner.split(",") : [];
  if (!dims.endsWith("]") || !sizes.every((d) => /^\d+$/.test(d))) return {};
  return { dtype: type.slice(0, open), shape: sizes.map(Number) };
}

/** The name of every node of every stage, by id ("%7"; "%5, %6" for a node with two results),
 * without putting a stage together. */
export function namesOf(data) {
  const names = new Map();
  for (const e of data.nodes) {
    const at = e.text.indexOf(" = ");
    names.set(e.id, at < 0 ? e.text : e.text.slice(0, at));
  }
  return names;
}

/** Inflate the kernels' sources (once; a promise): then each kernel has its `numpy`, `c` and
 * `cuda` source (null where none was generated). */
export function loadSources(st) {
  if (!st.sourcesLoading) {
    st.sourcesLoading = inflate(st.data.sources ?? "").then((list) => {
      list.forEach((sources, k) => Object.assign(kernelOf(st, k), sources));
      st.sourcesLoaded = true;
    });
  }
  return st.sourcesLoading;
}

async function inflate(base64) {
  if (!base64) return [];
  const bytes = Uint8Array.from(atob(base64), (c) => c.charCodeAt(0));
  const stream = new Blob([bytes]).stream().pipeThrough(new DecompressionStream("gzip"));
  return JSON.parse(await new Response(stream).text());
}

/** Kernel `k`, one object shared by every node that runs it (its sources join it once
 * loaded). */
function kernelOf(st, k) {
  let kernel = st.kernels.get(k);
  if (!kernel) {
    kernel = { ...st.data.kernels[k] };
    st.kernels.set(k, kernel);
  }
  return kernel;
}

// --- Putting a stage together -------------------------------------------------------------------

/** What putting stage `i` together needs. `shallow`: it stands for the stage before another, so
 * the graphs its nodes own are put together without what it removed from them. */
function context(st, i, shallow) {
  const stage = st.data.stages[i];
  if (!st.routes) st.routes = routesByEnds(st.data.routes);
  const status = new Map();
  for (const c of stage.changes) for (const id of c.result) status.set(id, c.kind);
  const ctx = { st, data: st.data, routes: st.routes, stage, status, before: null, partsBefore: new Map() };
  if (i > 0 && !shallow) {
    ctx.before = context(st, i - 1, true);
    partsOf(st.data, entriesOf(st.data, ctx.before.stage.nodes), ctx.partsBefore);
  }
  return ctx;
}

function fullStage(ctx) {
  const { data, stage, before } = ctx;
  const listed = entriesOf(data, stage.nodes);
  const nodes = listed.map((e) => fullNode(ctx, e));
  const present = new Set(nodes.map((n) => n.id));
  return {
    index: stage.index,
    pass: stage.pass,
    changed: stage.changed,
    nodes,
    edges: edgesOf(nodes, ctx.routes),
    removed: before
      ? entriesOf(data, before.stage.nodes).filter((e) => !present.has(e.id)).map((e) => fullNode(before, e))
      : [],
    changes: stage.changes,
    stats: stage.stats,
    memory: memoryOf(data, stage),
    text: textOf(data, stage, listed),
    updates: stage.updates,
    groups: stage.groups ?? [],
  };
}

/** A stage's memory in full: its own, or the earlier stage's it refers to (`as_stage`), as
 * `teachflow/viz/memory.py` sends it. */
function memoryOf(data, stage) {
  const memory = stage.memory ?? null;
  return memory?.as_stage !== undefined ? data.stages[memory.as_stage].memory : memory;
}

function fullNode(ctx, entry) {
  const { data, st } = ctx;
  const id = entry.id;
  const n = { ...DEFAULTS, lineage: [id], ...derived(entry), ...entry };
  n.status = ctx.status.get(id) ?? "kept";
  n.source_line = data.lines[n.source] ?? "";
  n.value = summaryOf(data, id, entry.results ? entry.results[0].type : n.type);
  n.kernel = entry.kernel === undefined ? null : kernelOf(st, entry.kernel);
  n.body = bodyOf(data, entry);
  if (entry.results) n.results = entry.results.map((r) => ({ ...r, value: summaryOf(data, r.id, r.type) }));
  if (entry.subgraphs) n.subgraphs = entry.subgraphs.map((p) => fullPart(ctx, id, p));
  return n;
}

/** Value `id`'s summary, with the shape and dtype its type gives, and whether its preview is
 * cut short, where it leaves them out. */
function summaryOf(data, id, type) {
  const summary = data.values[String(id)];
  if (summary === undefined) return null;
  const value = { ...valueType(type), ...summary };
  if (value.truncated === undefined) {
    value.truncated = value.shape.reduce((a, b) => a * b, 1) > data.preview_elements;
  }
  return value;
}

/** A graph node `owner` owns, put together as a stage is, with the nodes it lost since the
 * stage before and their edges. */
function fullPart(ctx, owner, part) {
  const { data, before } = ctx;
  const nodes = entriesOf(data, part.nodes).map((e) => fullNode(ctx, e));
  const full = { ...part, nodes, edges: edgesOf(nodes, ctx.routes), removed: [], removed_edges: [] };
  const old = ctx.partsBefore.get(`${owner}/${part.key}`);
  if (old) {
    const present = new Set(nodes.map((n) => n.id));
    const oldNodes = entriesOf(data, old.nodes).map((e) => fullNode(before, e));
    full.removed = oldNodes.filter((n) => !present.has(n.id));
    const gone = new Set(full.removed.map((n) => n.id));
    full.removed_edges = edgesOf(oldNodes, ctx.routes).filter((e) => gone.has(e.from) || gone.has(e.to));
  }
  return full;
}

/** The data's routes ({"3>7": bends}) as maps: to -> from -> bends. */
function routesByEnds(routes) {
  const byEnds = new Map();
  for (const key of Object.keys(routes)) {
    const [from, to] = key.split(">").map(Number);
    if (!byEnds.has(to)) byEnds.set(to, new Map());
    byEnds.get(to).set(from, routes[key]);
  }
  return byEnds;
}

/** Every part the entries own, at any depth, by "owner/key". */
function partsOf(data, entries, out) {
  for (const e of entries) {
    for (const part of e.subgraphs ?? []) {
      out.set(`${e.id}/${part.key}`, part);
      partsOf(data, entriesOf(data, part.nodes), out);
    }
  }
}

/** The edges between `nodes` (full nodes of one graph), from their operands: from the node
 * that makes each operand to the node that reads it, sorted; each through its route (`routes`:
 * the bends of each edge, by the node it goes to and the node it comes from). */
function edgesOf(nodes, routes) {
  const maker = new Map(); // value id -> the node that makes it
  for (const n of nodes) {
    maker.set(n.id, n);
    if (n.results) for (const r of n.results) maker.set(r.id, n);
  }
  const edges = [];
  for (const n of nodes) {
    const first = edges.length; // this node's edges: one per node it reads
    for (let index = 0; index < n.inputs.length; index++) {
      const value = n.inputs[index];
      if (value === null) continue;
      const source = maker.get(value);
      const from = source ? source.id : value;
      let k = first;
      while (k < edges.length && edges[k].from !== from) k++;
      if (k < edges.length) {
        edges[k].indices.push(index);
        continue;
      }
      const bends = routes.get(n.id)?.get(from);
      const ends = [[source.x, source.y], [n.x, n.y]];
      const route = bends ? [ends[0], ...bends, ends[1]] : ends;
      edges.push({ from, to: n.id, index, indices: [index], route });
    }
  }
  return edges.sort((a, b) => a.from - b.from || a.to - b.to);
}

/** The lines printed under a node (a fused kernel's ops), as text. */
function bodyOf(data, entry) {
  return (entry.body ?? []).map((b) => (typeof b === "number" ? `  ${data.nodes[b].text}` : b));
}

/** The stage's text form, as `Graph.__str__` prints it: each node's line, the lines under it,
 * and the source it came from in a column of its own, aligned past the widest line. */
function textOf(data, stage, listed) {
  const lines = []; // [code, source; null: not aligned]
  for (const e of listed) {
    if (e.kind === "input") continue; // (in the head)
    lines.push([e.line ?? e.text, e.source ?? ""]);
    for (const b of bodyOf(data, e)) lines.push([b, ""]);
    for (const o of e.owned ?? []) lines.push([o, null]);
  }
  let width = 0;
  for (const [code, source] of lines) if (source !== null) width = Math.max(width, code.length);
  const body = lines.map(([code, source]) => (source ? `  ${code.padEnd(width)}   # ${source}` : `  ${code}`));
  return [stage.head, ...body, ...stage.tail].join("\n");
}
