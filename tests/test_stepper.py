"""The pass stepper without a browser: the widget's data and front-end, the static page, the
rich output (widget, SVG picture, text), and a 5,000-node compilation end to end."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import textwrap
import time
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import teachflow as tfl
from teachflow.viz.assets import widget_file, widgets_folder
from teachflow.viz.data import compilation_data
from teachflow.viz.html import page_html
from teachflow.viz.stepper import PassStepper
from teachflow.viz.svg import graph_svg

WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"


def loss(x, y):
    a = x * 1.0  # x*1 -> x   </script> or <!-- <script> in a line must not end the page's script
    b = (a + y).tanh() + (a + y).tanh()  # CSE, and f(x) + f(x) -> 2*f(x)
    return (b * 2.0).sum()  # fused with the rest


def compiled() -> tfl.Compilation:
    return tfl.compile(loss, tfl.randn(3, 4), tfl.randn(3, 4))


def embedded_data(page: str) -> dict:
    found = re.search(r'<script type="application/json" id="teachflow-data">(.*?)</script>',
                      page, re.S)
    assert found is not None
    return json.loads(found.group(1))


# --- The widget --------------------------------------------------------------------------------


def test_show_sends_every_stage_with_values_on_the_example_inputs() -> None:
    compilation = compiled()
    widget = compilation.show()
    assert isinstance(widget, PassStepper)
    stages = widget.data["stages"]
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

    stages = tfl.compile(step, tfl.ones(2)).show().data["stages"]
    for stage in stages:
        assert sorted(u["state"] for u in stage["updates"]) == ["w", "w.grad"]
        by_id = {n["id"]: n for n in stage["nodes"]}
        for update in stage["updates"]:
            assert update["state"] in by_id[update["value"]]["updates"]
    json.dumps(stages)


def test_compile_keeps_the_example_inputs_in_graph_order() -> None:
    x, y = tfl.randn(3, 4), tfl.randn(3, 4)
    compilation = tfl.compile(lambda x, scale, y: x * scale + y, x, 2.0, y=y)
    assert [t is s for t, s in zip(compilation.example_inputs, [x, y], strict=True)] == [True] * 2
    final = compilation.show().data["stages"][-1]
    output = next(n for n in final["nodes"] if n["is_output"])
    expected = x.numpy() * 2.0 + y.numpy()
    assert output["value"]["min"] == pytest.approx(float(expected.min()))
    assert output["value"]["max"] == pytest.approx(float(expected.max()))


def test_front_end_is_an_es_module_with_a_default_render() -> None:
    esm = PassStepper._esm
    assert esm == widget_file("stepper.js") and esm.strip()
    assert re.search(r"^export default \{ render \};$", esm, re.M)
    assert re.search(r"^function render\(\{ model, el \}\)", esm, re.M)
    assert "import " not in esm  # no CDN, no bundler: one file
    assert ".tf-stepper" in PassStepper._css
    assert (widgets_folder() / "stepper.js").is_file()


def test_front_end_parses_and_its_diff_is_right_under_node(tmp_path: Path) -> None:
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the JavaScript is not parsed outside a browser")
    module = tmp_path / "stepper.mjs"
    module.write_text(widget_file("stepper.js"), encoding="utf-8")
    check = tmp_path / "check.mjs"
    check.write_text(textwrap.dedent("""
        import widget, { diffLines } from "./stepper.mjs";
        const diff = (a, b) => diffLines(a.split(""), b.split("")).map((p) => p.join("")).join(" ");
        console.log(JSON.stringify({
          render: typeof widget.render,
          small: diff("abcd", "abxd"),
          moved: diff("ab", "ba"),
        }));
    """), encoding="utf-8")
    out = subprocess.run([node, str(check)], capture_output=True, text=True, check=True)
    result = json.loads(out.stdout)
    assert result["render"] == "function"
    assert result["small"] == " a  b -c +x  d"
    assert result["moved"] == "-a  b +a"


def run_node(tmp_path: Path, script: str, data: dict) -> dict:
    """Run `script` (which sees the front-end's exports and `data`) under Node.js."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("Node.js is not installed: the JavaScript is not run outside a browser")
    (tmp_path / "stepper.mjs").write_text(widget_file("stepper.js"), encoding="utf-8")
    check = tmp_path / "check.mjs"
    check.write_text('import * as stepper from "./stepper.mjs";\n'
                     f"const data = {json.dumps(data)};\n{textwrap.dedent(script)}",
                     encoding="utf-8")
    out = subprocess.run([node, str(check)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def test_the_ir_diff_compares_code_not_the_alignment_of_comments(tmp_path: Path) -> None:
    def f(x):  # constant_fold removes the widest line (full), so the comment column moves left
        return (x * 2.0).tanh() + tfl.full((), 2.0, dtype="float32") * 3.0

    compilation = tfl.compile(f, tfl.randn(3, 4))
    texts = [str(s.graph).split("\n") for s in compilation.snapshots]
    realigned = [line for line in texts[2] if "tanh" in line]
    assert realigned and realigned[0] not in texts[1]  # (what the diff has to see through)
    diffs = run_node(tmp_path, """
        const out = [];
        for (let i = 1; i < data.length; i++) out.push(stepper.diffLines(data[i - 1], data[i]));
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
    stages = compiled().show().data["stages"]
    placed = run_node(tmp_path, """
        console.log(JSON.stringify(data.map((stage) => [...stepper.ghostPlaces(stage)])));
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


# --- The static page ---------------------------------------------------------------------------


def test_to_html_writes_one_self_contained_page(tmp_path: Path) -> None:
    compilation = compiled()
    path = compilation.to_html(tmp_path / "stepper.html")
    assert list(tmp_path.iterdir()) == [path]
    page = path.read_text(encoding="utf-8")
    assert "<script src=" not in page and "<link" not in page
    assert "http" not in page  # no URL at all: nothing is fetched
    assert widget_file("stepper.js") in page
    assert widget_file("stepper.css") in page
    assert page.count("</script>") == 2  # the user's "</script>" stayed inside the data
    # No "<" at all in the data: "<!--" followed by "<script" would change how the browser
    # reads the rest of the element, so every "<" is the JSON escape (the same string).
    assert "<" not in re.search(r'id="teachflow-data">(.*?)</script>', page, re.S).group(1)
    data = embedded_data(page)
    assert data == json.loads(json.dumps(
        compilation_data(compilation, compilation.example_inputs)))
    assert any("</script> or <!-- <script>" in n["source_line"]
               for n in data["stages"][0]["nodes"])


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
    data = compilation_data(compiled())
    seen = set()
    for stage in data["stages"]:
        svg = ET.fromstring(graph_svg(stage))
        groups = [g for g in svg.iter("{http://www.w3.org/2000/svg}g") if "data-status" in g.attrib]
        assert len(groups) == len(stage["nodes"])
        seen |= {g.attrib["data-status"] for g in groups}
    assert {"kept", "replaced", "merged", "fused"} <= seen


# --- A big compilation ---------------------------------------------------------------------------


def big_program(blocks: int):
    def f(x, w):
        h = x
        for i in range(blocks):
            a = (h * w + 1.0).tanh()
            b = (h * w + 1.0).tanh()
            h = (a + b) * 1 - h * 0.1
            if i % 4 == 3:
                h = h - h.mean(axis=1, keepdims=True)
        return h

    return f


def test_a_5000_node_compilation_gets_its_data_and_page(tmp_path: Path) -> None:
    start = time.perf_counter()
    compilation = tfl.compile(big_program(480), tfl.randn(16, 16), tfl.randn(16, 16),
                              verify=False)
    compiled_at = time.perf_counter()
    path = compilation.to_html(tmp_path / "big.html")
    done = time.perf_counter()
    nodes = len(compilation.snapshots[0].graph)
    print(f"\n{nodes}-node compilation: compile {compiled_at - start:.2f} s, data + page "
          f"{done - compiled_at:.2f} s, {path.stat().st_size / 1e6:.1f} MB")
    assert nodes >= 5000
    assert path.is_file()
