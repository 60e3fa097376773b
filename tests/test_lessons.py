"""Every lesson runs from top to bottom in a fresh kernel, and is committed without outputs; a
lesson shows nothing before the lesson that teaches it; the lessons' README tells what they hold."""

from __future__ import annotations

import json
import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

from teachflow.passes import DEFAULT_PIPELINE

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

FOLDER = Path(__file__).parent.parent / "lessons"
LESSONS = sorted(FOLDER.glob("*.ipynb"))
#: The passes that place work on devices: nothing to do where every tensor is on the CPU.
ON_DEVICES = ("place", "partition")
#: The passes a later lesson is about, which may have nothing to do in an earlier lesson's
#: examples: where devices, memory and collectives are not yet the subject.
LATER = (*ON_DEVICES, "plan_memory", "bucket_all_reduce")

#: Cells run after a lesson, to look at what it built (their output is read by the tests below).
PROBES = {
    # The timing experiment of lesson 2 stages many small ops, with staging alone (no passes).
    "02_tracing_and_staged_execution": """
import json as _json
_graph = staged_chain.concrete_functions[0].graph
print(_json.dumps({"ops": [n.op.name for n in _graph.nodes],
                   "elements": max(int(np.prod(v.shape)) for v in _graph.values())}))
""",
    # Lesson 3's compilations: what each pass did, and to which ops.
    "03_passes_purity_and_fusion": """
import json as _json
def _passes(c):
    ops = {n.id: n.op.name for s in c.snapshots for n in s.graph.nodes}
    return {s.pass_name: [[ch.kind, sorted(ops.get(i, "") for i in ch.nodes)]
                          for ch in s.changes] for s in c.snapshots[1:]}
print(_json.dumps({"f": _passes(c), "cell": _passes(compiled)}))
""",
    # Lesson 4 scripts f_dynamic into one loop node and shows it beside f_static.
    "04_control_flow_and_scripting": """
import json as _json
_row = side_by_side({"a": static, "b": dynamic})
def _ops(graph):
    return [n.op.name for n in graph.nodes]
def _removed(c, name):  # the ops a pass removed from the top level
    stage = next(k for k, s in enumerate(c.snapshots) if s.pass_name == name)
    before = {n.id: n.op.name for n in c.snapshots[stage - 1].graph.nodes}
    return sorted(before[i] for ch in c.snapshots[stage].changes for i in ch.nodes
                  if ch.kind == "removed" and i in before)
print(_json.dumps({
    "classes": list(_row._dom_classes),
    "dce_removes": _removed(dynamic, "dce"),
    "static_fused": [[ch.kind, len(ch.nodes)] for s in static.snapshots if s.pass_name == "fuse"
                     for ch in s.changes],
    "static_final": _ops(static.graph), "body": _ops(dynamic.graph.nodes[0].params["body_fn"]),
    "loops": [_ops(staged_grad.concrete_functions[0].graph).count("fori_loop"),
              _ops(tfl.trace(tfl.grad(looped, argnums=1), x64, w64)).count("fori_loop")],
    "scripted_ops": [n.op.name for n in scripted.concrete_functions[0].graph.nodes],
    "traces": scripted.trace_count,
    "results": [scripted(tfl.tensor(v)).numpy().tolist() for v in ([4.0, 4.0], [0.2, 0.2])],
    "static_ops": [n.op.name for n in static.snapshots[0].graph.nodes],
    "row": [type(w).__name__ for column in _row.children for w in column.children],
    "stages": [len(column.children[1].data["stages"]) for column in _row.children],
    "gradient": (staged_grad(x64, w64).numpy() - numeric(lambda w: looped(x64, w), w64)).tolist(),
}))
""",
    # Lesson 5 trains on the digits, staged, and compares eager and staged training.
    "05_modules_and_training": """
import json as _json
print(_json.dumps({
    "accuracy": accuracies[-1], "traces": staged_step.trace_count,
    "difference": float(np.abs(eager - staged).max()), "steps": len(eager),
    "updates": [u.slot.name for u in compiled.snapshots[-1].graph.updates],
    "captures": [v.data.name for v in forward.concrete_functions[0].graph.captures],
    "simplify_rules": [ch.rule for s in compiled.snapshots if s.pass_name == "simplify"
                       for ch in s.changes],
    "writers": {u.slot.name: compiled.graph.outputs[u.output].producer.op.name
                for u in compiled.graph.updates},
}))
""",
    # Lesson 6 calls a graph function, inlines it, and cuts a graph across cpu and cpu:1.
    "06_one_graph_many_devices": """
import json as _json
from teachflow.viz.stepper_data import compilation_data as _data
def _ops(graph):
    return [n.op.name for n in graph.nodes]
_x = tfl.tensor([0.3, -0.7, 0.9])
_traced = tfl.trace(model, _x)
_calls = [n for n in _traced.nodes if n.op.name == "call"]
_stepper = _data(placed, placed.example_inputs)
print(_json.dumps({
    "calls": len(_calls), "one_callee": len({id(n.params["callee"]) for n in _calls}),
    "inline": [ch.rule for s in inlined.snapshots if s.pass_name == "inline" for ch in s.changes],
    "inlined_final": _ops(inlined.graph), "kept_final": _ops(kept.graph),
    "kept_calls_layer": "layer(" in kept.source,
    "grad_calls": sorted(n.params["callee"].name for n in grad_graph.nodes if n.op.name == "call"),
    "differences": [abs(v.item() - eager_value.item()) for v in
                    (tfl.function(model, passes=p)(_x) for p in ("default", KEEP_CALLS))],
    "mixed": d.device,
    "place": [ch.rule for s in placed.snapshots if s.pass_name == "place" for ch in s.changes],
    "copies": [[n.output.id, n.params["src"], n.params["dst"]] for n in placed.graph.nodes
               if n.op.name == "copy"],
    "bytes": [s.stats["bytes_transferred"] for s in placed.snapshots],
    "pieces": placed.source.count("def two_branches_on_"),
    "stepper_devices": _stepper["devices"],
    "transfers": sorted(e["transfer"] for e in _stepper["nodes"] if e.get("transfer")),
    "programs_differ": float(np.abs(results[0] - results[1]).max()),
    "devices_in_programs": [sorted({n.spec.device for n in p.graph.nodes})
                            for p in programs.values()],
    "gpu": "gpu" in tfl.devices(),
}))
""",
    # Lesson 7 saves a training step, trains on it in another process, exports it as ONNX and
    # feeds the loader hostile files.
    "07_saved_graphs_and_language_independence": """
import json as _json
_changes = {s.pass_name: [ch.rule if s.pass_name == "simplify" else ch.kind for ch in s.changes]
            for s in loaded.compilation.snapshots[1:]}
_ops = {n.id: n.op.name for s in loaded.compilation.snapshots for n in s.graph.nodes}
print(_json.dumps({
    "files": sorted(p.name for p in (folder / "step").iterdir()),
    "steps": len(elsewhere["losses"]), "losses": [elsewhere["losses"][0], elsewhere["losses"][-1]],
    "difference": float(np.abs(np.array(here) - np.array(elsewhere["losses"])).max()),
    "other_process": elsewhere["pid"] != os.getpid(),
    "script_names": [name for name in ("loss_fn", "def step", "compiled")
                     if name in script.read_text()],
    "onnx": max(float(np.abs(a - t.numpy()).max()) for a, t in zip(from_onnx, from_teachflow)),
    "refused": {name: type(err).__name__ for name, err in refused.items()}, "changes": _changes,
    "fused": [sorted(_ops[i] for i in ch.nodes) for s in loaded.compilation.snapshots
              if s.pass_name == "fuse" for ch in s.changes],
}))
""",
    # Lesson 8 plans the memory of a small function and of a training step, and checkpoints it.
    "08_memory": """
import json as _json
_plan = steps["planned"].graph.memory_plan
_stages = {s.pass_name: s.stats["peak_bytes"] for s in compiled.snapshots}
print(_json.dumps({
    "changes": [c.kind for c in stage.changes], "plan": compiled.memory_plan,
    "peaks": [_stages["trace"], _stages["fuse"], _stages["plan_memory"]],
    "out": [compiled.source.count("out="), unplanned.source.count("out=")],
    "allocations": allocations, "intermediates": peak_bytes(graph) - held_throughout,
    "order": [traced_peak, chosen_peak], "moved": moved,
    "losses": list(first_losses.values()), "recomputed": len(recomputed), "figures": figures,
    "activations": ratio,
    "shared": [[a.slot, a.first_use, a.last_use, b.first_use, b.last_use]
               for a in _plan.buffers for b in _plan.buffers if a is not b and a.slot == b.slot
               and a.first_use <= b.last_use and b.first_use <= a.last_use
               and b.in_place_of != a.value and a.in_place_of != b.value],
}))
""",
    # Lesson 9 rewrites one graph three ways, composes them, and times Jacobians both ways.
    "09_transformations": """
import json as _json
def _notes(graph):
    return [[n.op.name, n.source.note if n.source else None] for n in graph.nodes]
_first = compiled.snapshots[0].graph
print(_json.dumps({
    "grad": _notes(tfl.trace(tfl.grad(f), x)), "jvp": _notes(tfl.trace(
        lambda x, t: tfl.jvp(f, (x,), (t,)), x, t)), "vmap": _notes(tfl.trace(tfl.vmap(f), xs)),
    "per_example": float(np.abs(per_example.numpy() - one_by_one).max()),
    "trace": _notes(_first), "stages": [s.pass_name for s in compiled.snapshots],
    "fused": [n.source.note for n in compiled.graph.nodes if n.op.name.startswith("fused")],
    "hessian": float(np.abs(H - np.diag(by_hand)).max()),
    "jacobians": {name: [list(tfl.jacrev(fn)(at).shape),
                         float(np.abs(tfl.jacfwd(fn)(at).numpy() - tfl.jacrev(fn)(at).numpy()
                                      ).max())] for name, (fn, at) in shapes.items()},
    "mlp": max(float(np.abs(from_vmap[k].numpy()[i] - from_loop[i][k].numpy()).max())
               for k in range(4) for i in range(64)),
    "batched_ops": [n.op.name for n in batched.concrete_functions[0].graph.nodes],
}))
""",
}
#: What a timing cell prints: how many times the other's time one took, and in words.
TIMED = re.compile(r"took (\d+\.\d\d)x [^:\n]*: (faster|slower|as fast) here")
#: Words that say which way a measurement went.
DIRECTION = re.compile(r"\b(faster|slower|quicker|wins?|speeds? up|speed-?ups?)\b", re.I)


@cache
def executed(path: Path) -> nbformat.NotebookNode:
    """The lesson run top to bottom in a fresh kernel (once per test session), then its probe."""
    nb = nbformat.read(path, as_version=4)
    if path.stem in PROBES:
        nb.cells.append(nbformat.v4.new_code_cell(PROBES[path.stem], metadata={"probe": True}))
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    return nb


def printed(cell: nbformat.NotebookNode) -> str:
    return "".join(o.get("text", "") + str(o.get("data", {}).get("text/plain", ""))
                   for o in cell.get("outputs", []))


def committed(path: Path) -> str:
    """The lesson as committed. A learner who works through it in `make lab` has outputs saved
    into their copy: that copy is theirs, and `make test` must not fail on it. (A lesson not
    committed yet is read as it is.)"""
    try:
        shown = subprocess.run(["git", "show", f"HEAD:./{path.name}"], cwd=path.parent,
                               capture_output=True, text=True, encoding="utf-8", check=True)
    except (OSError, subprocess.CalledProcessError):
        return path.read_text(encoding="utf-8")
    return shown.stdout


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_is_committed_clean(path: Path) -> None:
    text = committed(path)
    raw = json.loads(text)
    missing = [i for i, cell in enumerate(raw["cells"]) if "id" not in cell]
    assert not missing, f"{path.name}: cells {missing} have no id (nbformat 4.5 requires one)"
    nb = nbformat.reads(text, as_version=4)
    nbformat.validate(nb)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"
    assert "widgets" not in nb.metadata


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs(path: Path) -> None:
    nb = executed(path)
    errors = [o for c in nb.cells if c.cell_type == "code" and "probe" not in c.metadata
              for o in c.outputs if o.output_type == "error"]
    assert not errors
    for cell in nb.cells:  # a lesson that shows an error shows where in the notebook it came from
        if cell.cell_type == "code" and "except tfl." in cell.source:
            assert "cell In[" in printed(cell), printed(cell)


def _first_lesson_teaching(word: str) -> int:
    for i, path in enumerate(LESSONS):
        nb = nbformat.read(path, as_version=4)
        if any(re.search(rf"^#+ .*\b{word}", c.source, re.M | re.I)
               for c in nb.cells if c.cell_type == "markdown"):
            return i
    raise AssertionError(f"no lesson has a section on {word}")


def test_no_lesson_shows_a_fused_kernel_before_the_lesson_on_fusion() -> None:
    fusion = _first_lesson_teaching("fusion")
    assert fusion > 0
    for path in LESSONS[:fusion]:
        for cell in executed(path).cells:
            assert "fused_" not in printed(cell), f"{path.name}: {cell.source}"


def test_lesson_2_times_staging_on_many_small_ops() -> None:
    path = FOLDER / "02_tracing_and_staged_execution.ipynb"
    probe = json.loads(printed(executed(path).cells[-1]))
    assert len(probe["ops"]) >= 40  # the per-op saving, many times over
    assert probe["elements"] <= 16  # small tensors: the dispatch, not the arithmetic, dominates
    assert not [op for op in probe["ops"] if op.startswith("fused")]  # staging alone, no passes


def test_a_timing_cell_says_which_way_its_own_numbers_went() -> None:
    """A claim about a measurement follows the measurement: every cell that times something
    prints how the times compare, and the word it prints (faster, slower) is what its numbers
    say, whichever way they went on this run."""
    timed = 0
    for path in LESSONS:
        for cell in executed(path).cells:
            if cell.cell_type != "code" or not re.search(r"perf_counter|timeit", cell.source):
                continue
            found = TIMED.findall(printed(cell))
            assert found, f"{path.name}: a timing cell says nothing of how the times compare"
            for ratio, word in found:
                said = "faster" if float(ratio) < 1 else "slower" if float(ratio) > 1 else "as fast"
                assert word == said, f"{path.name}: {ratio}x reported as {word}"
            timed += 1
    assert timed >= 9  # lessons 2, 3, 4, 5, 6 (twice), 7, 8 and 9 time something


def test_no_lesson_prose_says_which_way_a_measurement_goes() -> None:
    """The text around the numbers does not say which way they go: only what is measured may
    (above). A sentence with "faster" or "slower" is a question, or says when it holds."""
    for path in LESSONS:
        for cell in nbformat.read(path, as_version=4).cells:
            if cell.cell_type != "markdown":
                continue
            for sentence in re.split(r"(?<=[.?!])\s+", cell.source):
                if DIRECTION.search(sentence) and not (
                        sentence.rstrip().endswith("?")
                        or re.search(r"\b(if|when|whether|depends?|may|might)\b", sentence)):
                    raise AssertionError(f"{path.name}: {sentence!r}")


def test_lesson_3_shows_every_pass_doing_what_its_text_says() -> None:
    path = FOLDER / "03_passes_purity_and_fusion.ipynb"
    probe = json.loads(printed(executed(path).cells[-1]))
    for name in ("f", "cell"):  # the first example's, and the stepper's
        assert list(probe[name]) == list(DEFAULT_PIPELINE)
        assert probe[name].pop("inline") == []  # (the lesson's functions call none: its text)
        # No pass with nothing to do, but those that place work on devices (all on the CPU here)
        # and plan memory (which the fused kernel leaves nothing to).
        assert all(v for k, v in probe[name].items() if k not in LATER), probe[name]
        assert not any(probe[name][k] for k in ON_DEVICES)
    cell = probe["cell"]
    assert ["removed", ["abs"]] in cell["dce"] and ["removed", ["mean"]] in cell["dce"]
    assert ["replaced", ["sqrt"]] in cell["constant_fold"]
    assert [kind for kind, _ in cell["cse"]] == ["merged"] * 3
    assert sorted(op for _, (op,) in cell["cse"]) == ["matmul", "matmul", "tanh"]
    assert cell["fuse"] == [["fused", ["mean", "mul", "mul", "tanh"]]]
    assert probe["f"]["dce"] == [["removed", ["exp"]]]


@pytest.mark.parametrize(("lesson", "call", "shown"), [
    ("01_tensors_and_the_tape", "tfl.viz.show_backward(loss)",
     "<PassStepper backward: stage 1 of 5 (tape)>"),  # the tape's 3 ops, then 4 gradients
    ("02_tracing_and_staged_execution", "tfl.viz.show_trace(layer, x, w, b)",
     "<PassStepper layer: stage 1 of 4 (arguments)>"),  # the arguments, then 3 ops
])
def test_lessons_1_and_2_step_through_the_tape_and_the_trace(lesson: str, call: str,
                                                            shown: str) -> None:
    cells = [c for c in executed(FOLDER / f"{lesson}.ipynb").cells if c.cell_type == "code"]
    (cell,) = [c for c in cells if c.source.strip() == call]
    assert shown in printed(cell)
    assert any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
               for o in cell.outputs)  # the stepper itself, in the notebook


def test_lesson_4_scripts_f_dynamic_and_shows_it_beside_f_static() -> None:
    path = FOLDER / "04_control_flow_and_scripting.ipynb"
    probe = json.loads(printed(executed(path).cells[-1]))
    assert probe["scripted_ops"] == ["while"]  # one loop node, whose body calls g
    assert probe["results"][0] == [0.5, 0.5] and probe["traces"] == 1
    assert probe["results"][1] == [pytest.approx(0.2)] * 2  # (float32)
    assert probe["static_ops"] == ["mul", "mul", "mul"]  # unrolled by tracing
    assert probe["row"] == ["HTML", "PassStepper", "HTML", "PassStepper"]
    assert probe["stages"] == [len(DEFAULT_PIPELINE) + 1] * 2  # the trace, then each pass
    assert max(abs(d) for d in probe["gradient"]) < 1e-6
    assert "tf-side-by-side" in probe["classes"]  # (each stepper then fits a screen)
    # What the text says the stepper shows: dce drops a sum and a gt of the scripted program;
    # fuse makes the three muls one kernel, while the loop's body is one mul.
    assert probe["dce_removes"] == ["gt", "sum"]
    assert probe["static_fused"] == [["fused", 3]] and len(probe["static_final"]) == 1
    assert probe["body"] == ["mul"]
    assert probe["loops"] == [2, 3]  # the gradient's two loops; the trace had a third


def test_lesson_5_trains_the_digits_staged_as_eagerly() -> None:
    path = FOLDER / "05_modules_and_training.ipynb"
    probe = json.loads(printed(executed(path).cells[-1]))
    assert probe["accuracy"] >= 0.97 and probe["traces"] == 1
    assert probe["steps"] == 2 * (1348 // 64) and probe["difference"] < 1e-5
    # The staged step writes back every parameter, its momentum buffer and its gradient.
    assert len(probe["updates"]) == 12 and "model.0.weight" in probe["updates"]
    assert "opt.state[0]['momentum_buffer']" in probe["updates"]
    assert probe["captures"] == ["self.hidden.weight", "self.hidden.bias", "self.out.weight",
                                 "self.out.bias"]  # read at each call, never constants
    # What the text says the stepper shows: simplify turns transpose(x.T @ g) into g.T @ x,
    # and fuse makes each parameter's update (its momentum and its new value) one kernel.
    assert "transpose(a @ b) -> b.T @ a.T (the product made in the layout it is read in)" \
        in probe["simplify_rules"]
    writers = probe["writers"]
    for k, name in enumerate(["model.0.weight", "model.0.bias", "model.3.weight",
                              "model.3.bias"]):
        kernel = writers[name]
        assert kernel.startswith("fused") and writers[f"opt.state[{k}]['momentum_buffer']"] \
            == kernel
    assert len({writers[name] for name in writers if "momentum" in name}) == 4


def test_the_lessons_readme_tells_what_each_lesson_holds() -> None:
    readme = (FOLDER / "README.md").read_text(encoding="utf-8")
    entries = re.split(r"\n(?=\d+\. `)", readme)
    to_come = re.search(r"More follow[^.]*\.", readme)
    for path in LESSONS:
        entry = next((e for e in entries if e.split("\n")[0].find(f"`{path.name}`") >= 0), None)
        assert entry is not None, f"{path.name} is not listed"
        code = "\n".join(c.source for c in nbformat.read(path, as_version=4).cells
                         if c.cell_type == "code")
        if "%%compile" in code:  # a lesson with the stepper says so, and it is not "to come"
            assert "%%compile" in entry and "stepper" in entry, entry
            assert to_come is None or "stepper" not in to_come.group(0), to_come.group(0)


def test_lesson_6_calls_inlines_and_cuts_a_graph_across_two_devices() -> None:
    path = FOLDER / "06_one_graph_many_devices.ipynb"
    nb = executed(path)
    probe = json.loads(printed(nb.cells[-1]))
    # Two calls of one callee graph; inline replaces both, and fuse makes the program one
    # kernel; without inline the calls stay, run by the callee's generated function.
    assert probe["calls"] == 2 and probe["one_callee"] == 1
    assert probe["inline"] == ["call f(x) -> body of f"] * 2
    assert len(probe["inlined_final"]) == 1 and probe["inlined_final"][0].startswith("fused")
    assert probe["kept_final"].count("call") == 2 and probe["kept_calls_layer"]
    assert probe["grad_calls"] == ["grad_layer", "grad_layer", "layer", "layer"]
    assert max(probe["differences"]) < 1e-5
    # The eager pin copies b to cpu:1; mixing devices is an error naming them.
    assert probe["mixed"] == "cpu:1"
    code = [c for c in nb.cells if c.cell_type == "code"]
    (mixing,) = [c for c in code if c.source.startswith("try:\n    a + b")]
    assert "operands are on different devices" in printed(mixing)
    # What the text says place and partition do: x copied to cpu:1 (%9), the result back
    # (%10), two 256x256 float32 matrices sent, one generated function per piece.
    assert probe["place"] == ["pinned"] * 3 + ["operands", "operands", "asked for", "operands"]
    assert probe["copies"] == [[9, "cpu", "cpu:1"], [10, "cpu:1", "cpu"]]
    assert probe["bytes"][-1] == 2 * 256 * 256 * 4 and probe["pieces"] == 2
    assert probe["stepper_devices"] == ["cpu", "cpu:1"]
    assert probe["transfers"] == [["cpu", "cpu:1"], ["cpu:1", "cpu"]]
    (shown,) = [c for c in code if c.source.strip() == "placed.show()"]
    stages = len(DEFAULT_PIPELINE) + 1  # the trace, then each pass
    assert f"<PassStepper two_branches: stage 1 of {stages} (trace)>" in printed(shown)
    assert any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
               for o in shown.outputs)
    # The timed programs compute the same, one on cpu alone, one on both devices.
    assert probe["programs_differ"] < 1e-4
    assert probe["devices_in_programs"] == [["cpu"], ["cpu", "cpu:1"]]
    (gpu,) = [c for c in code if c.source.startswith('if "gpu" in tfl.devices()')]
    assert probe["gpu"] or "no GPU here" in printed(gpu)


def test_lesson_7_runs_a_saved_step_elsewhere_and_refuses_hostile_files() -> None:
    path = FOLDER / "07_saved_graphs_and_language_independence.ipynb"
    nb = executed(path)
    probe = json.loads(printed(nb.cells[-1]))
    assert probe["files"] == ["arrays.npz", "saved.json"]
    # Another process, with none of the notebook's code, trained as the notebook did.
    assert probe["other_process"] and probe["script_names"] == []
    assert probe["steps"] == 50 and probe["difference"] < 1e-6
    assert probe["losses"][1] < probe["losses"][0] / 10
    assert probe["onnx"] < 1e-6  # onnxruntime computes the step teachflow computes
    assert probe["refused"] == dict.fromkeys(
        ["pickled", "code_as_op", "cycle", "huge", "from_the_future"], "SavedGraphError")
    code = [c for c in nb.cells if c.cell_type == "code"]
    (in_place,) = [c for c in code if "in_place_step" in c.source]
    assert "writes state back" in printed(in_place)
    (hostile,) = [c for c in code if "for path in hostile" in c.source]
    assert "code inside the file" not in printed(hostile)  # the pickle never ran while loading
    (pickled,) = [c for c in code if "allow_pickle=True" in c.source]
    assert "code inside the file" in printed(pickled)  # (where NumPy was told to unpickle)
    # The stepper over the loaded graph, and what the text says each pass does in it.
    (shown,) = [c for c in code if c.source.strip().endswith("loaded.show()")]
    stages = len(DEFAULT_PIPELINE) + 1  # the trace, then each pass
    assert f"<PassStepper step: stage 1 of {stages} (trace)>" in printed(shown)
    assert any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
               for o in shown.outputs)
    changes = probe["changes"]
    assert changes["simplify"][0] == "x**1 -> x" and \
        changes["simplify"][1].startswith("stop_gradient(x) -> x")
    assert changes["constant_fold"] == ["replaced"] * 5
    assert changes["cse"] == changes["dce"] == []
    assert not any(changes[name] for name in ("inline", *ON_DEVICES))  # no calls; one device
    assert len(probe["fused"]) == 3 and {"tanh", "mean"} <= set(probe["fused"][0])
    assert probe["fused"][1:] == [["mul", "sub"], ["mul", "sub"]]


def test_lesson_8_plans_memory_and_checkpoints_as_its_text_says() -> None:
    path = FOLDER / "08_memory.ipynb"
    nb = executed(path)
    probe = json.loads(printed(nb.cells[-1]))
    # Three layers: five matrices in two slots, in place where a tanh's operand dies, a slot
    # reused; the peak is the same before and after fuse (two matrices and the arguments).
    assert probe["changes"] == ["new_slot", "in_place", "new_slot", "in_place", "reused"]
    assert len(probe["plan"]) == 5 and {b["slot"] for b in probe["plan"]} == {0, 1}
    assert probe["peaks"] == [4 * 256 * 256 * 4] * 3
    assert probe["out"] == [5, 0]  # every planned kernel writes out=, the unplanned one none
    # A planned call allocates next to nothing; an unplanned one its intermediates' peak.
    allocations = probe["allocations"]
    assert allocations["planned"] < allocations["unplanned"] / 50
    assert abs(allocations["unplanned"] / probe["intermediates"] - 1) < 0.02
    # The branches: plan_memory's order holds at most half of the traced order's peak.
    traced, chosen = probe["order"]
    assert chosen <= traced / 2 and probe["moved"] and all(
        m.startswith("moved %") and " net " in m for m in probe["moved"])
    # The training steps: the same loss; the plan's figure less what is held throughout is
    # what tracemalloc sees (plain); planned, a warm call allocates little, and the arena is
    # about the peak less what is held throughout; a plan never raises the peak, checkpoints
    # lower it and add about a forward pass of FLOPs.
    assert max(probe["losses"]) - min(probe["losses"]) < 1e-7 and probe["recomputed"] > 0
    f = probe["figures"]
    plain, planned, ck = f["plain"], f["planned"], f["checkpointed"]
    assert abs(plain["traced"] / (plain["peak"] - plain["held"]) - 1) < 0.02
    assert plain["arena"] is None and planned["traced"] < plain["traced"] / 5
    assert 0.8 <= planned["arena"] / (planned["peak"] - planned["held"]) <= 1.1
    assert plain["peak"] >= planned["peak"] > ck["peak"]
    assert plain["flops"] == planned["flops"] and 1.25 < ck["flops"] / planned["flops"] < 1.45
    assert probe["shared"] == []  # no two live values of the step's plan share a slot
    # Pairs of ReLU layers stay above 9/14 of plain (the floor the text proves); GELU layers
    # keep three values more each, and checkpointing them saves far more.
    relu, gelu = probe["activations"]["ReLU"], probe["activations"]["GELU"]
    assert relu == ck["peak"] / planned["peak"] and 9 / 14 < relu < 1
    assert gelu < 0.6 * relu
    code = [c for c in nb.cells if c.cell_type == "code"]
    for call, name in [("compiled.show()", "layers"), ("ordered.show()", "branches")]:
        (shown,) = [c for c in code if c.source.strip() == call]
        stages = len(DEFAULT_PIPELINE) + 1  # the trace, then each pass
        assert f"<PassStepper {name}: stage 1 of {stages} (trace)>" in printed(shown)
        assert any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
                   for o in shown.outputs)
    (trade,) = [c for c in code if c.source.startswith("def change(")]
    assert re.search(r"peak down by \d+%.*FLOPs up by \d+%.*time per step (up|down) by",
                     printed(trade))


def test_lesson_9_rewrites_one_graph_three_ways_and_composes_them() -> None:
    path = FOLDER / "09_transformations.ipynb"
    nb = executed(path)
    probe = json.loads(printed(nb.cells[-1]))
    # Each rewrite's nodes say which rule made them: grad's the gradient rules after a seed,
    # jvp's the JVP rules beside the values, vmap's the batching rules (sum's on axis 1).
    assert [note for _, note in probe["grad"]][3:] == [
        "seed: d(out)/d(out) = 1", "grad of sum", "grad of sum", *["grad of tanh"] * 3,
        *["grad of mul"] * 3]
    assert [op for op, note in probe["jvp"] if not note] == ["mul", "tanh", "sum"]
    assert {note for _, note in probe["jvp"] if note} == {
        f"tangent of {op} by its JVP rule" for op in ("mul", "tanh", "sum")}
    assert all(note.startswith(f"batched by {op}'s rule: ") for op, note in probe["vmap"])
    # Per-example gradients equal one grad call per example; compiled, the first stage is
    # the transformed graph, whose backward nodes say both rules and whose seed stays
    # unbatched; fuse then makes kernels of it, and the batched MLP gradient has no loop.
    assert probe["per_example"] < 1e-6 and probe["mlp"] < 1e-5
    trace = probe["trace"]
    assert ["full", "seed: d(out)/d(out) = 1"] in trace
    assert ["mul", "grad of tanh; batched by mul's rule: moved the batch axes to the front and "
            "lined the ranks up"] in trace
    assert all(note.startswith("batched by ") for _, note in trace[:6])
    assert probe["stages"] == ["trace", *DEFAULT_PIPELINE]
    assert probe["fused"] and all("batched by" in note for note in probe["fused"])
    assert not {"fori_loop", "while", "call"} & set(probe["batched_ops"])
    assert probe["hessian"] < 1e-12
    # The wide and the tall Jacobian, the same both ways.
    assert probe["jacobians"]["wide"][0] == [4, 2000]
    assert probe["jacobians"]["tall"][0] == [2000, 4]
    assert max(d for _, d in probe["jacobians"].values()) < 1e-12
    code = [c for c in nb.cells if c.cell_type == "code"]
    (shown,) = [c for c in code if c.source.strip().endswith("compiled.show()")]
    stages = len(DEFAULT_PIPELINE) + 1  # the trace, then each pass
    assert f"<PassStepper loss: stage 1 of {stages} (trace)>" in printed(shown)
    assert any(o.get("data", {}).get("application/vnd.jupyter.widget-view+json")
               for o in shown.outputs)
    # Both timing cells say which way their own numbers went (one calls the other's timer).
    timing = [c for c in code if "took {ratio:.2f}x" in c.source]
    assert len(timing) == 2
    found = [m for c in timing for m in TIMED.findall(printed(c))]
    assert len(found) == 3
    for ratio, word in found:
        assert word == ("faster" if float(ratio) < 1 else "slower" if float(ratio) > 1
                        else "as fast")
    assert "exercises/09_jvp_and_batching_rules.ipynb" in "".join(
        c.source for c in nb.cells if c.cell_type == "markdown")


def test_lesson_10_shows_the_all_reduces_buckets_them_and_trains_on_two_processes() -> None:
    path = FOLDER / "10_data_parallelism.ipynb"
    out = "\n".join(printed(c) for c in executed(path).cells)
    assert out.count("all_reduce %") == 6  # one per gradient, in the traced step
    assert re.search(r"all_reduce nodes: 6 -> [2-5]", out)
    assert "bucketed - " in out
    if "collective engine installed: True" in out:  # (else the lesson says how to install it)
        assert "the two ranks hold equal weights after every step: True" in out
        difference = float(re.search(r"largest difference over 20 steps: (\S+)", out)[1])
        assert difference < 1e-5
        assert re.search(r"\d+\.\d\d ms per MB", out)
    else:
        assert 'pip install "teachflow[distributed]"' in out
