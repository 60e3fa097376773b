"""The pass stepper without a browser: the widget's data and front-end, the static page, the
rich output (widget, SVG picture, text), and a 5,000-node compilation end to end."""

from __future__ import annotations

import itertools
import json
import re
import shutil
import subprocess
import sys
import textwrap
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from helpers import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from stepper_cases import CASES, chain

import teachflow as tfl
from teachflow.viz import side_by_side, side_by_side_html
from teachflow.viz.assets import bundle, stepper_module, widget_file, widgets_folder
from teachflow.viz.expand import expand, expand_stage
from teachflow.viz.html import page_html
from teachflow.viz.stepper import PassStepper
from teachflow.viz.stepper_data import compilation_data
from teachflow.viz.svg import graph_svg
from teachflow.viz.values import PREVIEW_ELEMENTS, preview, stage_values, summarize, summarize_many

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def loss(x, y):
    a = x * 1.0  # x*1 -> x   </script> or <!-- <script> in a line must not end the page's script
    b = (a + y).tanh() + (a + y).tanh()  # CSE, and f(x) + f(x) -> 2*f(x)
    return (b * 2.0).sum()  # fused with the rest


def compiled() -> tfl.Compilation:
    return tfl.compile(loss, tfl.randn(3, 4), tfl.randn(3, 4))


def embedded_data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="teachflow-stepper-data">(.*?)</script>',
                      page, re.S)
    assert found is not None
    return json.loads(found.group(1))


# --- The widget --------------------------------------------------------------------------------


def test_show_sends_every_stage_with_values_on_the_example_inputs() -> None:
    compilation = compiled()
    widget = compilation.show()
    assert isinstance(widget, PassStepper)
    stages = expand(widget.data)
    assert [s["pass"] for s in stages] == [s.pass_name for s in compilation.snapshots]
    for stage, snap in zip(stages, compilation.snapshots, strict=True):
        assert {n["id"] for n in stage["nodes"]} == set(snap.nx.nodes)
        assert all(n["value"] is not None for n in stage["nodes"] if n["is_output"])
    assert all(n["value"] is not None for n in stages[0]["nodes"])  # (later, dead code has none)
    assert widget.stage == 0
    assert "trace" in repr(widget)
    json.dumps(widget.data)  # what the browser gets is plain JSON


def test_the_data_says_which_values_a_call_writes_back() -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)

    def step(x):
        w.grad = None
        (w * x).sum().backward()
        with tfl.no_grad():
            w.__isub__(0.5 * w.grad)
        return x.sum()

    stages = expand(tfl.compile(step, tfl.ones(2)).show().data)
    for stage in stages:
        assert sorted(u["state"] for u in stage["updates"]) == ["w", "w.grad"]
        maker = {r["id"]: n for n in stage["nodes"] for r in n.get("results", [n])}
        for update in stage["updates"]:  # (the node that makes it: one result of a kernel, say)
            assert update["state"] in maker[update["value"]]["updates"]
    json.dumps(stages)


def test_compile_keeps_the_example_inputs_in_graph_order() -> None:
    x, y = tfl.randn(3, 4), tfl.randn(3, 4)
    compilation = tfl.compile(lambda x, scale, y: x * scale + y, x, 2.0, y=y)
    assert [t is s for t, s in zip(compilation.example_inputs, [x, y], strict=True)] == [True] * 2
    final = expand_stage(compilation.show().data, -1)
    output = next(n for n in final["nodes"] if n["is_output"])
    expected = x.numpy() * 2.0 + y.numpy()
    assert output["value"]["min"] == pytest.approx(float(expected.min()))
    assert output["value"]["max"] == pytest.approx(float(expected.max()))


MODULES = widgets_folder() / "stepper"  # the front-end's ES modules, joined by stepper_module


def node_or_skip() -> str:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the JavaScript is not run outside a browser")
    return node


def with_state(script: str) -> str:
    """`script` with ``${STATE}`` made the stepper's state object `st` over the compilation's
    data (`data`), as `stepping.js` starts it: first change, no node picked, blocks folded."""
    return script.replace("${STATE}", "const st = { data, cache: new Map(), full: new Map(), "
                          "kernels: new Map(), change: 0, node: null, expandAll: false, "
                          "openBlocks: new Set() };")


def run_node(tmp_path: Path, script: str, data: Any = None) -> Any:
    """Run `script` under Node.js beside a copy of the front-end's modules (it imports what it
    tests from them: ``import { diffLines } from "./ir.js";``) with `data` as the constant
    ``data``; returns what it prints, read as JSON."""
    node = node_or_skip()
    for module in MODULES.iterdir():
        (tmp_path / module.name).write_text(module.read_text(encoding="utf-8"), encoding="utf-8")
    (tmp_path / "package.json").write_text('{"type": "module"}')  # (.js files are ES modules)
    check = tmp_path / "check.mjs"
    check.write_text(f"const data = {json.dumps(data)};\n{textwrap.dedent(script)}",
                     encoding="utf-8")
    out = subprocess.run([node, str(check)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_front_end_is_one_es_module_with_a_default_render() -> None:
    esm = PassStepper._esm
    assert esm == stepper_module() and esm.strip()
    assert re.findall(r"^export .*", esm, re.M) == ["export default { render };"]
    assert re.search(r"^function render\(\{ model, el \}\)", esm, re.M)
    assert not re.search(r"^import ", esm, re.M)  # no CDN, no file to fetch: one module
    assert ".tf-stepper" in PassStepper._css
    assert (MODULES / "widget.js").is_file()


def test_each_front_end_module_is_a_short_chapter() -> None:
    modules = [m for m in MODULES.iterdir() if m.name.endswith(".js")]
    assert len(modules) >= 8
    for module in modules:
        text = module.read_text(encoding="utf-8")
        assert len(text.splitlines()) < 400, module.name
        assert text.startswith("/**\n"), module.name  # a header that says what it is for


def test_the_bundle_holds_each_module_once_after_the_modules_it_imports() -> None:
    esm = stepper_module()
    names = sorted(m.name for m in MODULES.iterdir() if m.name.endswith(".js"))
    order = re.findall(r"^// === (\S+) ===$", esm, re.M)
    assert sorted(order) == names  # each module once (none is left out: widget.js uses all)
    for name in names:
        text = (MODULES / name).read_text(encoding="utf-8")
        for imported in re.findall(r'^import \{[^}]*\} from "\./(\S+)";', text, re.M):
            assert order.index(imported) < order.index(name), (imported, name)
        body = re.sub(r'^import \{[^}]*\} from "[^"]+";\n', "", text, flags=re.M)
        if name != "widget.js":  # (the entry keeps its exports)
            body = re.sub(r"^export (?=function|const)", "", body, flags=re.M)
        assert esm.count(body) == 1, name  # the rest of the module, as written


def test_the_bundle_and_the_page_parse_under_node(tmp_path: Path) -> None:
    node = node_or_skip()
    (tmp_path / "bundle.mjs").write_text(stepper_module(), encoding="utf-8")
    check = tmp_path / "check.mjs"
    check.write_text('import widget from "./bundle.mjs";\n'
                     "console.log(JSON.stringify(typeof widget.render));", encoding="utf-8")
    out = subprocess.run([node, str(check)], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == "function"
    page = page_html(compilation_data(compiled()))
    script = re.search(r'<script type="module">(.*?)</script>', page, re.S).group(1)
    (tmp_path / "page.mjs").write_text(script, encoding="utf-8")
    subprocess.run([node, "--check", str(tmp_path / "page.mjs")], check=True)


@pytest.mark.parametrize(("modules", "error"), [
    ({"a.js": 'import { b } from "./b.js";\nexport function a() {}\n',
      "b.js": 'import { a } from "./a.js";\nexport function b() {}\n'},
     "in a circle: a.js -> b.js -> a.js"),
    ({"a.js": 'import { b } from "./b.js";\n', "b.js": "export default b;\n"},
     "b.js: bundle cannot"),
    ({"a.js": 'import b from "./b.js";\n', "b.js": "const b = 1;\n"}, "a.js: bundle cannot"),
    ({"a.js": 'import { b } from "./b.js";\nconst c = 1;\n',
      "b.js": "export const b = 1;\nconst c = 2;\n"}, "more than one module: c"),
])
def test_bundle_refuses_modules_it_cannot_join_into_one(tmp_path: Path, modules: dict,
                                                        error: str) -> None:
    for name, text in modules.items():
        (tmp_path / name).write_text(text, encoding="utf-8")
    with pytest.raises(ValueError, match=re.escape(error)):
        bundle(tmp_path, "a.js")


def test_bundle_joins_modules_in_the_order_they_run(tmp_path: Path) -> None:
    (tmp_path / "a.js").write_text('import { b, c } from "./b.js";\n'
                                   'import {\n  d,\n} from "./d.js";\n'
                                   "export default { a: b + c + d };\n")
    (tmp_path / "b.js").write_text('import { d } from "./d.js";\nexport const b = d;\n'
                                   "export function c() {}\n")
    (tmp_path / "d.js").write_text("export const d = 1;\n")
    assert bundle(tmp_path, "a.js") == (
        "// === d.js ===\n\nconst d = 1;\n\n// === b.js ===\n\nconst b = d;\nfunction c() {}\n\n"
        "// === a.js ===\n\nexport default { a: b + c + d };\n")


def test_the_ir_diff_under_node(tmp_path: Path) -> None:
    result = run_node(tmp_path, """
        import { diffLines } from "./ir.js";
        const diff = (a, b) => diffLines(a.split(""), b.split("")).map((p) => p.join("")).join(" ");
        console.log(JSON.stringify({ small: diff("abcd", "abxd"), moved: diff("ab", "ba") }));
    """)
    assert result == {"small": " a  b -c +x  d", "moved": "-a  b +a"}


def test_the_ir_diff_compares_code_not_the_alignment_of_comments(tmp_path: Path) -> None:
    def f(x):  # constant_fold removes the widest line (full), so the comment column moves left
        return (x * 2.0).tanh() + tfl.full((), 2.0, dtype="float32") * 3.0

    compilation = tfl.compile(f, tfl.randn(3, 4))
    texts = [str(s.graph).split("\n") for s in compilation.snapshots]
    folded = [s.pass_name for s in compilation.snapshots].index("constant_fold")
    realigned = [line for line in texts[folded] if "tanh" in line]
    assert realigned and realigned[0] not in texts[folded - 1]  # (what the diff sees through)
    diffs = run_node(tmp_path, """
        import { diffLines } from "./ir.js";
        const out = [];
        for (let i = 1; i < data.length; i++) out.push(diffLines(data[i - 1], data[i]));
        console.log(JSON.stringify(out));
    """, texts)
    code = re.compile(r"\s+#[^#]*$")
    for before, after, diff in zip(texts, texts[1:], diffs, strict=False):
        # Every line is there once, as printed: kept and added lines as the new stage prints
        # them, removed ones as the old one did.
        assert [line for mark, line in diff if mark != "-"] == after
        assert all(line in before for mark, line in diff if mark == "-")
        # A line is marked only when its code changed: not when only its padding did.
        removed = {code.sub("", line) for mark, line in diff if mark == "-"}
        added = {code.sub("", line) for mark, line in diff if mark == "+"}
        assert not removed & added
        assert removed == {code.sub("", b) for b in before} - {code.sub("", a) for a in after}


def test_removed_nodes_move_aside_from_the_nodes_that_took_their_place(tmp_path: Path) -> None:
    stages = expand(compiled().show().data)
    placed = run_node(tmp_path, """
        import { ghostPlaces } from "./ghosts.js";
        console.log(JSON.stringify(data.map((stage) => [...ghostPlaces(stage)])));
    """, stages)
    moved_any = False
    for stage, moved in zip(stages, placed, strict=True):
        moved = {node_id: tuple(xy) for node_id, xy in moved}
        moved_any = moved_any or bool(moved)
        boxes = [(n["x"], n["y"]) for n in stage["nodes"]]
        boxes += [moved.get(n["id"], (n["x"], n["y"])) for n in stage["removed"]]
        for i, (x, y) in enumerate(boxes):  # no two boxes of one row closer than a column
            assert all(abs(x - x2) >= 1 for x2, y2 in boxes[i + 1:] if y2 == y), stage["pass"]
        for node_id, (_, y) in moved.items():  # a moved node keeps its row
            assert next(n["y"] for n in stage["removed"] if n["id"] == node_id) == y
    assert moved_any  # (fuse puts the kernel where its last op stood)


def test_a_big_stage_opens_on_its_changes_with_repeated_blocks_folded(tmp_path: Path) -> None:
    """view.js on its own: what a big stage draws is a function of the stage's lookups and of
    the selection, passed in as a plain object."""
    def long(x):
        for i in range(150):
            x = (x * 1.001 + 0.5).tanh() - float(i % 3)
        return x

    data = compilation_data(tfl.compile(long, tfl.ones(4, 4), verify=False))
    stages = expand(data)
    views = run_node(tmp_path, with_state("""
        import { info } from "./stage.js";
        import { view } from "./view.js";
        ${STATE}
        console.log(JSON.stringify(data.stages.map((stage, i) => {
          const inf = info(st, i);
          const v = view(st, inf);
          const sources = [...v.blocks.keys()].map((b) => b.source);
          const opened = view({ ...st, openBlocks: new Set(sources) }, inf);
          return { big: inf.big, drawn: v.ids?.size, note: v.note, opened: opened.ids?.size,
                   blocks: [...v.blocks.keys()].map((b) => [b.size, b.reps]),
                   all: view({ ...st, expandAll: true }, inf).ids };
        })));
    """), data)
    first = views[0]
    assert first["big"] and first["drawn"] < 20  # the loop's nodes are folded away ...
    assert any(size >= 150 and reps == 150 for size, reps in first["blocks"])  # ... into a block
    assert f"of {len(stages[0]['nodes']) - 1:,} nodes" in first["note"]  # (ops: not the input)
    assert first["opened"] > 100  # opening the block draws its members
    for v in views:
        assert v["all"] is None  # "expand all": every node
        assert not v["big"] or v["drawn"] <= 300


def test_every_stage_draws_as_well_formed_svg_under_node(tmp_path: Path) -> None:
    """draw.js on its own: the SVG of each stage, from `view` and `place`, is well-formed."""
    data = compilation_data(compiled())
    stages = expand(data)
    svgs = run_node(tmp_path, with_state("""
        import { graphSvg } from "./draw.js";
        import { info } from "./stage.js";
        import { place, view } from "./view.js";
        ${STATE}
        console.log(JSON.stringify(data.stages.map((stage, i) => {
          const inf = info(st, i);
          const v = view(st, inf);
          return graphSvg(inf, v, place(inf, v), 1, "t1");
        })));
    """), data)
    for stage, svg in zip(stages, svgs, strict=True):
        root = ET.fromstring(svg)  # (no xmlns: inside HTML, an <svg> is SVG without one)
        drawn = [int(g.attrib["data-node-id"]) for g in root.iter("g")
                 if "data-node-id" in g.attrib]
        assert sorted(drawn) == sorted(n["id"] for n in stage["nodes"] + stage["removed"])
        assert stage["pass"] in root.attrib["aria-label"]


# --- Control flow: a node that owns graphs is a box ---------------------------------------------


def halve(x):
    return x * 0.5


def f_dynamic(x):
    return tfl.while_loop(lambda x: x.sum() > 1, halve, x)


def f_branch(x, p):  # CSE merges x*2 and x*2 inside the true branch; fuse fuses there
    return tfl.cond(p.sum() > 0, lambda x: x * 2 + x * 2, lambda x: x - 1.0, x) * 3.0 + x


def f_nested(x):
    def body(i, c):
        return tfl.cond(c.sum() > 0, lambda c: c * 0.99 + 0.01, lambda c: c + c, c)

    return tfl.fori_loop(0, 10, body, x).tanh()


def owned(node: dict, key: str) -> dict:
    return next(part for part in node["subgraphs"] if part["key"] == key)


def box_of(stage: dict, op: str) -> dict:
    return next(n for n in stage["nodes"] if n["op"] == op)


def test_a_loop_node_carries_its_graphs_laid_out_with_their_values() -> None:
    compilation = tfl.compile(f_dynamic, tfl.tensor([4.0, 4.0]))
    stages = expand(compilation.show().data)
    json.dumps(stages)
    loop = box_of(stages[0], "while")
    assert [part["key"] for part in loop["subgraphs"]] == ["cond_fn", "body_fn"]
    assert loop["changes_inside"] == 0 and loop["value"]["preview"] == "[0.5, 0.5]"
    body, test = owned(loop, "body_fn"), owned(loop, "cond_fn")
    assert body["name"] == "halve"
    assert sorted(n["op"] for n in body["nodes"]) == ["input", "mul"]
    assert sorted(n["op"] for n in test["nodes"]) == ["gt", "input", "sum"]
    for part in (body, test):  # laid out on its own: one place per node, edges between them
        ids = {n["id"] for n in part["nodes"]}
        assert len({(n["x"], n["y"]) for n in part["nodes"]}) == len(ids)
        assert {(e["from"], e["to"]) for e in part["edges"]} <= {(a, b) for a in ids for b in ids}
        assert part["outputs"] and set(part["outputs"]) <= ids and part["inputs"]
    # The values inside: the condition as the loop starts, the body in its first step.
    mul = box_of(body, "mul")
    assert mul["value"]["preview"] == "[2., 2.]" and "first step" in body["values_from"]
    assert box_of(test, "gt")["value"]["preview"] == "True"
    assert all(n["status"] == "kept" for s in stages for n in owned(box_of(s, "while"),
                                                                     "body_fn")["nodes"])


def test_changes_inside_a_branch_get_statuses_a_count_and_their_box() -> None:
    compilation = tfl.compile(f_branch, tfl.tensor([4.0, 4.0]), tfl.tensor([1.0]))
    stages = {s["pass"]: s for s in expand(compilation_data(compilation,
                                                            compilation.example_inputs))}
    snaps = {s.pass_name: s for s in compilation.snapshots}
    assert box_of(stages["trace"], "cond")["changes_inside"] == 0
    cse = stages["cse"]
    branch = box_of(cse, "cond")
    (merge,) = snaps["cse"].changes
    true_fn, false_fn = owned(branch, "true_fn"), owned(branch, "false_fn")
    assert {n["id"]: n["status"] for n in true_fn["nodes"]}[merge.result[0]] == "merged"
    assert [n["id"] for n in true_fn["removed"]] == list(merge.nodes)  # drawn faded
    assert {e["from"] for e in true_fn["removed_edges"]} | {e["to"] for e in true_fn[
        "removed_edges"]} >= set(merge.nodes)
    assert (branch["changes_inside"], true_fn["changes"], false_fn["changes"]) == (1, 1, 0)
    assert cse["changes"][0]["within"] == [branch["id"]]  # the change list says where it was
    fuse = stages["fuse"]
    inner = [c for c in fuse["changes"] if c["within"]]
    assert [c["kind"] for c in inner] == ["fused"]
    kernel = box_of(owned(box_of(fuse, "cond"), "true_fn"), "fused_k1")
    assert kernel["id"] == inner[0]["result"][0] and kernel["status"] == "fused"
    assert box_of(fuse, "cond")["changes_inside"] == 1  # (the other fusion is outside it)
    # The branch that did not run has no values, and says why.
    assert all(n["value"] is None for n in false_fn["nodes"])
    assert false_fn["values_from"].startswith("none: this branch did not run")
    result = next(n for n in true_fn["nodes"] if n["id"] == true_fn["outputs"][0])
    assert result["value"]["preview"] == "[16., 16.]"
    # The static picture draws the box closed, with its graphs and the changes inside.
    svg = graph_svg(cse)
    ET.fromstring(svg)
    assert "true_fn · false_fn" in svg and "1 change inside" in svg


def test_boxes_nest_and_every_result_of_a_node_has_its_value() -> None:
    stages = {s["pass"]: s for s in expand(tfl.compile(f_nested, tfl.ones(4)).show().data)}
    loop = box_of(stages["fuse"], "fori_loop")
    branch = box_of(owned(loop, "body_fn"), "cond")
    assert "first step (i = 0)" in owned(loop, "body_fn")["values_from"]
    inner = [c for c in stages["fuse"]["changes"] if c["kind"] == "fused"]
    assert [c["within"] for c in inner] == [[loop["id"], branch["id"]]]
    assert loop["changes_inside"] == 1 and branch["changes_inside"] == 1

    def two(x, n):
        return tfl.while_loop(lambda c: c[1] < 3, lambda c: (c[0] * 2.0, c[1] + 1), (x, n))

    loop = box_of(expand_stage(tfl.compile(two, tfl.tensor([1.0, 1.0]), tfl.tensor(0))
                               .show().data, 0), "while")
    assert loop["type"] == "f32[2], i64[]"
    assert [(r["name"], r["value"]["preview"]) for r in loop["results"]] == [
        (loop["label"].split(",")[0], "[8., 8.]"), (loop["label"].split(" ")[1], "3")]


def test_an_opened_box_draws_its_graphs_and_the_graph_around_makes_room(tmp_path: Path) -> None:
    """boxes.js with view.js and draw.js: closed, a box hides its graphs; opened, it draws them
    inside it, and the nodes around it move out of its way."""
    compilation = tfl.compile(f_branch, tfl.tensor([4.0, 4.0]), tfl.tensor([1.0]))
    data = compilation_data(compilation)
    stages = expand(data)
    cse = [s["pass"] for s in stages].index("cse")
    branch = box_of(stages[cse], "cond")
    drawn = run_node(tmp_path, with_state("""
        import { graphSvg } from "./draw.js";
        import { info } from "./stage.js";
        import { place, view } from "./view.js";
        ${STATE}
        const draw = (opened) => {
          st.openBoxes = new Set(opened);
          const inf = info(st, STAGE);
          const v = view(st, inf);
          const placed = place(inf, v);
          return { svg: graphSvg(inf, v, placed, 1, "t1"), where: [...placed.where],
                   inside: [...placed.inside],
                   grown: [...placed.grown].map(([id, g]) => [g.w, g.h]) };
        };
        console.log(JSON.stringify({ closed: draw([]), open: draw([BOX]) }));
    """).replace("STAGE", str(cse)).replace("BOX", str(branch["id"])), data)
    inner = {n["id"] for part in branch["subgraphs"] for n in part["nodes"] + part["removed"]}
    for state, opened in (("closed", False), ("open", True)):
        root = ET.fromstring(drawn[state]["svg"])
        ids = {int(g.attrib["data-node-id"]) for g in root.iter("g") if "data-node-id" in g.attrib}
        assert (inner <= ids) is opened and bool(inner & ids) is opened
        box = next(g for g in root.iter("g") if g.attrib.get("data-box") == str(branch["id"]))
        assert box.attrib["aria-expanded"] == str(opened).lower() and box.attrib["tabindex"] == "0"
    assert "1 change inside" in drawn["closed"]["svg"]
    (w, h), = drawn["open"]["grown"]
    where = dict(drawn["open"]["where"])
    x, y = where[branch["id"]]
    left, right, top, bottom = x - w / 2, x + w / 2, y - 15, y - 15 + h
    for node_id, (nx, ny) in where.items():  # the nodes around stay clear of the opened box
        if node_id != branch["id"]:
            assert nx + 62 <= left or nx - 62 >= right or ny + 15 <= top or ny - 15 >= bottom
    for nx, ny in dict(drawn["open"]["inside"]).values():  # and the nodes inside, within it
        assert left < nx - 62 and nx + 62 < right and top < ny - 15 and ny + 15 < bottom


# --- The static page ---------------------------------------------------------------------------


def test_to_html_writes_one_self_contained_page(tmp_path: Path) -> None:
    compilation = compiled()
    path = compilation.to_html(tmp_path / "stepper.html")
    assert list(tmp_path.iterdir()) == [path]
    page = path.read_text(encoding="utf-8")
    assert "<script src=" not in page and "<link" not in page
    assert "http" not in page  # no URL at all: nothing is fetched
    assert stepper_module() in page
    assert widget_file("stepper.css") in page
    assert page.count("</script>") == 2  # the user's "</script>" stayed inside the data
    # No "<" at all in the data: "<!--" followed by "<script" would change how the browser
    # reads the rest of the element, so every "<" is the JSON escape (the same string).
    assert "<" not in re.search(r'id="teachflow-stepper-data">(.*?)</script>', page, re.S).group(1)
    data = embedded_data(page)
    assert data == json.loads(json.dumps(
        compilation_data(compilation, compilation.example_inputs)))
    assert any("</script> or <!-- <script>" in line for line in data["lines"].values())


def test_a_page_is_written_without_loading_the_widget_libraries(tmp_path: Path) -> None:
    """The static page needs no widget: anywidget, ipywidgets and IPython (a third of a second
    to import) are not loaded to write one."""
    code = textwrap.dedent(f"""
        import sys
        import teachflow as tfl
        compilation = tfl.compile(lambda x: (x * 2).tanh(), tfl.randn(4, 4))
        compilation.to_html({str(tmp_path / "page.html")!r})
        print(sorted(m for m in ("anywidget", "ipywidgets", "IPython") if m in sys.modules))
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["[]"]
    assert (tmp_path / "page.html").stat().st_size > 10_000


def test_side_by_side_html_holds_one_stepper_per_compilation(tmp_path: Path) -> None:
    def f_static(x):
        for _ in range(3):
            x = x * 0.5
        return x

    @tfl.script
    def f_dynamic(x):
        while x.sum() > 1:
            x = x * 0.5
        return x

    x = tfl.tensor([4.0, 4.0])
    pair = {"unrolled <by tracing>": tfl.compile(f_static, x),
            "scripted": tfl.compile(f_dynamic, x)}
    path = side_by_side_html(pair, tmp_path / "pair.html")
    page = path.read_text(encoding="utf-8")
    panels = re.findall(r'<div id="teachflow-stepper-\d" class="teachflow-panel"[^>]*>', page)
    assert len(panels) == 2 and not [p for p in panels if "data-keys" in p]  # keys: per stepper
    assert "<h2>unrolled &lt;by tracing&gt;</h2>" in page  # titles are text, not markup
    for k, compilation in enumerate(pair.values()):
        found = re.search(rf'id="teachflow-stepper-{k}-data">(.*?)</script>', page, re.S)
        assert json.loads(found.group(1)) == json.loads(json.dumps(
            compilation_data(compilation, compilation.example_inputs)))
    assert stepper_module() in page and page.count(stepper_module()) == 1


def test_side_by_side_puts_a_titled_stepper_per_compilation_in_one_row() -> None:
    a, b = compiled(), tfl.compile(lambda x: x * 2.0, tfl.randn(3))
    row = side_by_side({"first": a, "second": b})
    assert [column.children[0].value for column in row.children] == ["<b>first</b>",
                                                                      "<b>second</b>"]
    steppers = [column.children[1] for column in row.children]
    assert all(isinstance(s, PassStepper) for s in steppers)
    assert [s.data for s in steppers] == [compilation_data(c, c.example_inputs) for c in (a, b)]


@pytest.mark.parametrize("bad", [{}, [], None, {"f": "not a compilation"},
                                 {"f": tfl.function(lambda x: x)}])
def test_side_by_side_refuses_what_is_not_a_dict_of_compilations(bad: Any, tmp_path) -> None:
    for show in (side_by_side, lambda c: side_by_side_html(c, tmp_path / "page.html")):
        with pytest.raises(tfl.TeachflowError, match="compilation") as info:
            show(bad)
        assert "tfl.compile" in info.value.hint
    assert not list(tmp_path.iterdir())  # nothing written


def test_page_html_runs_the_same_render_with_a_stand_in_model() -> None:
    page = page_html({"name": "f", "stages": []})
    for method in ("get", "set(", "on(", "off(", "save_changes("):
        assert method in page
    assert "render({ model, el:" in page


# --- Rich output ---------------------------------------------------------------------------------


def test_mimebundle_has_the_widget_an_svg_picture_and_text() -> None:
    compilation = compiled()
    data, metadata = compilation._repr_mimebundle_()
    assert isinstance(metadata, dict)
    assert data[WIDGET_VIEW]["model_id"]
    assert data["text/plain"] == repr(compilation)
    svg = ET.fromstring(data["image/svg+xml"])
    assert svg.tag == "{http://www.w3.org/2000/svg}svg"
    boxes = [e for e in svg.iter("{http://www.w3.org/2000/svg}rect") if "data-node-id" in e.attrib]
    final = compilation.snapshots[-1].nx
    assert sorted(int(b.attrib["data-node-id"]) for b in boxes) == sorted(final.nodes)


def test_every_stage_draws_as_valid_svg_with_its_statuses() -> None:
    seen = set()
    for stage in expand(compilation_data(compiled())):
        svg = ET.fromstring(graph_svg(stage))
        groups = [g for g in svg.iter("{http://www.w3.org/2000/svg}g") if "data-status" in g.attrib]
        assert len(groups) == len(stage["nodes"])
        seen |= {g.attrib["data-status"] for g in groups}
    assert {"kept", "replaced", "merged", "fused"} <= seen


def test_the_picture_marks_a_kernel_with_several_results() -> None:
    compilation = CASES["two results"]()
    svg = graph_svg(expand_stage(compilation_data(compilation), -1))
    root = ET.fromstring(svg)
    (kernel,) = [n for n in compilation.graph.nodes if n.op.name.startswith("fused")]
    box = next(g for g in root.iter("{http://www.w3.org/2000/svg}g")
               if g.attrib.get("data-node-id") == str(kernel.id))
    assert "2 results" in ET.tostring(box, encoding="unicode")


# --- The data's format: each node once, each stage put back together -------------------------


def walk(nodes: list[dict]) -> Any:
    """Every node of a full stage's list, and those inside the graphs they own."""
    for n in nodes:
        yield n
        for part in n.get("subgraphs", []):
            yield from walk(part["nodes"])


def numbers(preview: str) -> list[float]:
    return [float(x) for x in re.findall(r"-?(?:\d+\.?\d*(?:e[-+]\d+)?|inf|nan)", preview)]


def same_summary(got: dict, want: dict) -> bool:
    """Two summaries of one value, made by two runs (a fused kernel's last digits may differ from
    the ops one by one)."""
    return (got["shape"] == want["shape"] and got["dtype"] == want["dtype"]
            and got["truncated"] == want["truncated"]
            and all(got.get(k) == want.get(k) if None in (got.get(k), want.get(k))
                    else got[k] == pytest.approx(want[k], rel=1e-4, abs=1e-6)
                    for k in ("min", "max", "mean"))
            and numbers(got["preview"]) == pytest.approx(numbers(want["preview"]), rel=1e-3,
                                                          abs=1e-4))


@pytest.mark.parametrize("case", sorted(CASES))
def test_expand_rebuilds_each_stage_as_the_compilation_has_it(case: str) -> None:
    """`expand` (what the front-end does, in Python) against the compilation itself: the text
    form, the nodes, their statuses, the edges, the removed nodes, the values and the kernels."""
    compilation = CASES[case]()
    data = compilation_data(compilation, compilation.example_inputs)
    assert data == json.loads(json.dumps(data))  # plain JSON
    before: set[int] = set()
    for snap, stage in zip(compilation.snapshots, expand(data), strict=True):
        g = snap.nx
        assert stage["text"] == str(snap.graph)
        assert stage["pass"] == snap.pass_name and stage["stats"] == snap.stats
        nodes = {n["id"]: n for n in stage["nodes"]}
        assert set(nodes) == set(g.nodes)
        for i, n in nodes.items():
            a = g.nodes[i]
            assert (n["label"], n["op"], n["source"], tuple(n["lineage"]), n["status"],
                    n["is_output"]) == (a["label"], a["op"], a["source"], tuple(a["lineage"]),
                                        a["status"], a["is_output"]), i
            assert set(a["updates"]) <= set(n["updates"])  # (networkx's: the first result's)
        assert {(e["from"], e["to"]): (e["index"], tuple(e["indices"])) for e in stage["edges"]} \
            == {(u, v): (d["index"], tuple(d["indices"])) for u, v, d in g.edges(data=True)}
        assert [n["id"] for n in stage["removed"]] == [i for i in before if i not in nodes]
        before = [n["id"] for n in stage["nodes"]]
        # Each value is what the stage's graph computes, run on its own.
        values, _ = stage_values(snap.graph, compilation.example_inputs, {})
        for n in walk(stage["nodes"]):
            for result in n.get("results") or [n]:
                if result["id"] in values:
                    assert same_summary(result["value"], values[result["id"]]), result["id"]
        ops = {node.id: node.op for node in snap.graph.nodes}
        for n in stage["nodes"]:
            if n["kernel"]:
                assert n["kernel"]["name"] == ops[n["id"]].group.name
                assert n["kernel"]["numpy"] == ops[n["id"]].numpy_source
                assert n["kernel"]["cuda"] == ops[n["id"]].cuda_source
                assert all(f"  {line}" in stage["text"] for line in n["body"])


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_front_end_rebuilds_each_stage_as_python_does(tmp_path: Path, case: str) -> None:
    """data.js under Node.js: every stage it puts together (once the kernels' sources are
    inflated) is the stage `expand` makes."""
    compilation = CASES[case]()
    data = compilation_data(compilation, compilation.example_inputs)
    rebuilt = run_node(tmp_path, """
        import { loadSources, stageAt } from "./data.js";
        const st = { data, full: new Map(), kernels: new Map() };
        await loadSources(st);
        console.log(JSON.stringify(data.stages.map((_, i) => stageAt(st, i))));
    """, data)
    assert rebuilt == json.loads(json.dumps(expand(data)))


def test_a_node_that_survives_a_pass_is_sent_once() -> None:
    compilation = tfl.compile(chain, tfl.randn(4, 4), 50)
    data = compilation_data(compilation, compilation.example_inputs)
    traced = len(compilation.snapshots[0].nx)
    (kernel,) = compilation.graph.nodes
    # Each node once: those of the trace (the input too), and the kernel that stands for them.
    assert [e["id"] for e in data["nodes"]] == [*sorted(compilation.snapshots[0].nx), kernel.id]
    fuse = [s["pass"] for s in data["stages"]].index("fuse")
    for stage in data["stages"][:fuse]:  # no pass before fuse changes a node: one run of entries
        assert stage["nodes"] == [0, traced]
    for stage in data["stages"][fuse:]:  # (plan_memory has nothing to plan: one kernel)
        assert stage["nodes"] == [0, 1, traced, 1]  # the input, then the kernel
    text = json.dumps(data)
    assert all(text.count(json.dumps(e["text"])) == 1 for e in data["nodes"])
    # CSE rewires the readers of what it merges: they get a second entry, the rest do not.
    compilation = compiled()
    data = compilation_data(compilation)
    ids = [e["id"] for e in data["nodes"]]
    for i in set(ids):
        versions = [e for e in data["nodes"] if e["id"] == i]
        assert all(a != b for a, b in itertools.pairwise(versions))
    assert len(ids) < sum(len(s.nx) for s in compilation.snapshots) / 2


def test_no_array_is_sent_only_a_summary_of_a_few_numbers() -> None:
    x = tfl.randn(512, 512)
    compilation = tfl.compile(lambda x: (x @ np.full((512, 512), 0.01, dtype=np.float32)
                                         + x.mean()).tanh(), x)
    data = compilation_data(compilation, compilation.example_inputs)
    assert len(json.dumps(data)) < 12_000  # (the arrays hold 3 MB)
    for summary in data["values"].values():
        assert len(numbers(summary["preview"])) <= PREVIEW_ELEMENTS
    final = expand_stage(data, -1)
    output = next(n for n in final["nodes"] if n["is_output"])
    value = output["value"]
    assert (value["shape"], value["dtype"], value["truncated"]) == ([512, 512], "f32", True)
    assert value["max"] <= 1.0 and value["min"] >= -1.0


def test_a_preview_writes_numbers_as_numpy_prints_them() -> None:
    for array in (np.array([0.5, 2.0, -1.02134], np.float32), np.array([1e-7, 1.0]),
                  np.array([[1.5, 2.0], [3.0, 4.0]]), np.arange(5), np.array(True),
                  np.array([np.nan, 1.0, -np.inf]), np.array(3.25)):
        want = re.sub(r"\s+", " ", np.array2string(array, precision=4, separator=", "))
        assert preview(array).replace(" ", "") == want.replace(" ", "")


@settings(max_examples=examples(60), deadline=None)
@given(dtype=st.sampled_from(["float32", "float64", "float16", "int8", "uint8", "int64",
                              "bool", "complex64"]),
       shape=st.lists(st.integers(0, 5), max_size=3).map(tuple), count=st.integers(1, 6),
       seed=st.integers(0, 2**16), transposed=st.booleans(), special=st.booleans())
def test_summaries_made_together_equal_those_made_one_by_one(dtype, shape, count, seed,
                                                             transposed, special) -> None:
    """`summarize_many` (a stage's small values, a batch per shape and dtype) writes exactly
    what `summarize` writes for each: the preview, min, max and mean, with NaN skipped, an
    array of NaN alone, infinities, empty and 0-d arrays, and arrays laid out transposed."""
    rng = np.random.default_rng(seed)
    arrays = []
    for _ in range(count):
        with np.errstate(all="ignore"):  # (float16 and ints overflow: inf, wrapped)
            a = np.asarray(rng.normal(size=shape) * 10.0 ** rng.integers(-6, 9)).astype(dtype)
        if transposed:
            a = a.T  # (the shape is reversed too: all of the batch share one)
        if special and dtype.startswith("float") and a.size:
            a = a.copy()
            a.reshape(-1)[rng.integers(a.size)] = rng.choice([np.nan, np.inf, -np.inf])
            if rng.random() < 0.3:
                a[...] = np.nan
        arrays.append(a)
    assert summarize_many(arrays) == [summarize(a) for a in arrays]


def test_a_stages_values_are_summarised_as_each_would_be_alone() -> None:
    """The stepper's values, summarised in batches, are each value's own summary."""
    def f(x, y):
        h = (x * 2 + y).tanh()
        return h.sum(axis=0), h.astype("int32") * 3, (h > 0), x.mean()

    x, y = tfl.randn(4, 3), tfl.randn(4, 3)
    compilation = tfl.compile(f, x, y)
    summaries, _ = stage_values(compilation.snapshots[0].graph, [x, y], {})
    with tfl.no_grad():
        h = (x * 2 + y).tanh()
        expected = [h.sum(axis=0), h.astype("int32") * 3, h > 0, x.mean()]
    outputs = compilation.snapshots[0].graph.outputs
    assert len(summaries) >= 8
    for value, tensor in zip(outputs, expected, strict=True):
        assert summaries[value.id] == summarize(tensor.numpy())


def test_a_stage_that_changed_nothing_sends_the_stage_before_again() -> None:
    compilation = tfl.compile(chain, tfl.randn(4, 4), verify=False)
    data = compilation_data(compilation, compilation.example_inputs)
    stages = data["stages"]
    fused = [s["pass"] for s in stages].index("fuse")  # (the only pass with work here)
    assert [s["changed"] for s in stages] == [False] * fused + [True] + [False] * (
        len(stages) - fused - 1)
    assert all(s["nodes"] == stages[0]["nodes"] for s in stages[1:fused])
    assert stages[fused]["nodes"] != stages[0]["nodes"]
    assert all(s["stats"] == stages[0]["stats"] for s in stages[1:fused])
    assert len(data["nodes"]) <= len(compilation.snapshots[0].graph) + 10


def test_values_wait_to_be_summarised_within_a_bound(monkeypatch) -> None:
    """Small values wait for their batch only until `BATCH_BYTES` wait: a big graph of small
    values of many shapes holds a bounded amount of memory, and loses none of its summaries."""
    from teachflow.viz import values as values_module

    monkeypatch.setattr(values_module, "BATCH_BYTES", 4096)
    flushed: list[int] = []
    real = values_module.Values.summarize_waiting

    def recorded(self) -> None:
        flushed.append(self.waiting_bytes)
        real(self)

    monkeypatch.setattr(values_module.Values, "summarize_waiting", recorded)

    def f(x):
        for n in range(1, 41):  # values of forty shapes, and of x's (400 float32, 1,600 bytes)
            x = (x[:n] * 2 + 1).tanh().sum() + x
        return x

    compilation = tfl.compile(f, tfl.randn(400), verify=False)
    graph = compilation.snapshots[0].graph
    summaries, _ = stage_values(graph, compilation.example_inputs, {})
    assert len(flushed) > 10 and max(flushed) < 4096 + 1600  # (at most one array past it)
    for v in graph.values():
        assert v.id in summaries
    output = graph.outputs[0]
    assert summaries[output.id] == summarize(compilation(*compilation.example_inputs).numpy())


def big_program(blocks: int):
    def f(x, w):
        h = x
        for i in range(blocks):
            a = (h * w + 1.0).tanh()
            b = (h * w + 1.0).tanh()
            scale = tfl.full((), 2.0) * 0.5
            h = (a + b) * 1 * scale - h * 0.1
            if i % 4 == 3:
                h = h - h.mean(axis=1, keepdims=True)
        return h

    return f


def test_a_5000_node_compilation_is_a_page_of_at_most_4_mb(tmp_path: Path) -> None:
    """Issue 13's goal for the page's size (its time is bench/stepper.py's)."""
    for compilation in (tfl.compile(chain, tfl.randn(16, 16), verify=False),
                        tfl.compile(big_program(375), tfl.randn(16, 16), tfl.randn(16, 16),
                                    verify=False)):
        assert len(compilation.snapshots[0].graph) >= 5000
        path = compilation.to_html(tmp_path / "big.html")
        assert path.stat().st_size <= 4e6, path.stat().st_size
