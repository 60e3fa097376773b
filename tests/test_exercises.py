"""The exercises that ship (exercises/*.ipynb): each master assigns, passes its visible and its
hidden tests, hands out a stub that is not done yet, and fails a wrong answer, under `teachflow
check` (one process) and under `teachflow grade` (tests and learner code on two sides of the
sandbox's wall); and the committed notebooks are what exercises/build.py builds.
"""

from __future__ import annotations

import importlib.util
import json
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from teachflow.grading import assign, cells, check_notebook, sandbox
from teachflow.grading.failures import PASSED
from teachflow.grading.grade import grade
from teachflow.grading.notebook import cells_of, read_notebook
from teachflow.grading.regions import without_hidden_tests

ROOT = Path(__file__).resolve().parents[1]
EXERCISES = ROOT / "exercises"
MASTERS = sorted(EXERCISES.glob("*.ipynb"))
ISOLATION, _ = sandbox.find_isolation(allow_none=True)  # bubblewrap where it works

# Exercise 5 retraces on purpose, and its notebook shows the warning that says so.
pytestmark = pytest.mark.filterwarnings("ignore::teachflow.RetracingWarning")


@pytest.fixture(autouse=True)
def private_ipython(tmp_path: Path, monkeypatch) -> None:
    """IPython, where a check starts it, keeps its profile in the test's folder, not in ~."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))


def edited(master: Path, out: Path, answers: dict[str, str] | None = None,
           hidden: bool = True) -> Path:
    """A copy of `master` with the cells named by grade_id in `answers` replaced, and with its
    hidden tests made visible (their markers dropped) unless `hidden` is False."""
    notebook = json.loads(master.read_text(encoding="utf-8"))
    for cell in notebook["cells"]:
        if hidden:
            source = "".join(cell["source"])
            cell["source"] = "\n".join(line for line in source.splitlines()
                                       if "HIDDEN TESTS" not in line)
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if answers and grade_id in answers:
            cell["source"] = textwrap.dedent(answers[grade_id]).strip()
    out.write_text(json.dumps(notebook), encoding="utf-8")
    return out


def declared_tests(master: Path) -> tuple[list[str], list[str]]:
    """The test functions of the master's test cells: all of them, and those learners see."""
    every, visible = [], []
    for cell in cells_of(read_notebook(master)):
        if cell.role == "tests":
            every += cells.test_functions(cells.parse(cell.source))
            visible += cells.test_functions(cells.parse(without_hidden_tests(cell.source, "")))
    return every, visible


def test_the_exercises_ship_and_build_py_builds_them_as_committed() -> None:
    assert [m.name for m in MASTERS] == ["01_gradient_rule.ipynb", "02_simplification_rule.ipynb",
                                         "03_cse_pass.ipynb", "04_fusion_grouping.ipynb",
                                         "05_predict_retraces.ipynb",
                                         "06_predict_placement.ipynb",
                                         "07_run_a_saved_graph.ipynb",
                                         "08_predict_the_peak.ipynb",
                                         "09_jvp_and_batching_rules.ipynb",
                                         "10_loops_as_nodes.ipynb",
                                         "11_a_module_of_your_own.ipynb",
                                         "12_bucket_and_average_gradients.ipynb"]
    spec = importlib.util.spec_from_file_location("exercises_build", EXERCISES / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    assert sorted(build.NOTEBOOKS) == [m.name for m in MASTERS]
    for master in MASTERS:  # committed as built: without outputs, and up to date
        assert master.read_text(encoding="utf-8") == build.text(master.name), master.name
        cells = json.loads(master.read_text(encoding="utf-8"))["cells"]
        assert all(not c.get("outputs") and c.get("execution_count") is None
                   for c in cells if c["cell_type"] == "code")


#: The lesson each exercise goes with: every lesson from 4 on has one at least.
LESSON_OF = {"06_predict_placement": "06_one_graph_many_devices",
             "07_run_a_saved_graph": "07_saved_graphs_and_language_independence",
             "08_predict_the_peak": "08_memory", "09_jvp_and_batching_rules": "09_transformations",
             "10_loops_as_nodes": "04_control_flow_and_scripting",
             "11_a_module_of_your_own": "05_modules_and_training",
             "12_bucket_and_average_gradients": "10_data_parallelism"}


def test_every_lesson_from_4_links_its_exercise_and_the_readmes_list_them() -> None:
    lessons = sorted(p.stem for p in (ROOT / "lessons").glob("*.ipynb"))
    assert sorted(set(LESSON_OF.values())) == [name for name in lessons if name >= "04"]
    table = (EXERCISES / "README.md").read_text(encoding="utf-8")
    listed = (ROOT / "lessons" / "README.md").read_text(encoding="utf-8")
    for master in MASTERS:
        assert f"| `{master.stem}` |" in table, master.stem
    for exercise, lesson in LESSON_OF.items():
        words = "".join(c["source"] if isinstance(c["source"], str) else "".join(c["source"])
                        for c in json.loads((ROOT / "lessons" / f"{lesson}.ipynb").read_text(
                            encoding="utf-8"))["cells"] if c["cell_type"] == "markdown")
        assert f"exercises/{exercise}.ipynb" in words, (lesson, exercise)
        entry = listed[listed.index(f"`{lesson}.ipynb`"):]
        entry = entry[:entry.find("\n\n")]
        assert f"`exercises/{exercise}.ipynb`" in entry, (lesson, exercise)


class Runs:
    """Each master's assignment, its three checks and its grading, each run once and shared by
    the tests below (a master runs in about a second to a minute: running it once per test
    would make this file the slowest of the suite).

    Graded together, in one `grade` call (sandboxed where this machine allows): the master, its
    stub (the release as handed out) and a wrong answer (`WRONG`). Checked one by one, as a
    learner runs `teachflow check`: the same three notebooks."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self._made: dict[tuple[str, ...], Any] = {}

    def _once(self, key: tuple[str, ...], make: Callable[[], Any]) -> Any:
        if key not in self._made:
            self._made[key] = make()
        return self._made[key]

    def assignment(self, master: Path):
        # (not verified by assign, which would grade the master once more: it is graded
        # below, as a submission)
        return self._once(("assign", master.stem), lambda: assign(
            master, self.folder / master.stem / "build", verify=False))

    def submissions(self, master: Path) -> Path:
        """The folder of the master, its stub and its wrong answer, as learners' notebooks."""
        def write() -> Path:
            folder = self.folder / master.stem / "submissions"
            folder.mkdir(parents=True)
            (folder / "master.ipynb").write_bytes(master.read_bytes())
            (folder / "stub.ipynb").write_bytes(self.assignment(master).release.read_bytes())
            edited(master, folder / "wrong.ipynb", WRONG[master.stem][1], hidden=False)
            return folder
        return self._once(("submissions", master.stem), write)

    def checked(self, master: Path, kind: str):
        """`teachflow check`'s report on the master, its stub or its wrong answer (this one
        with its hidden tests made visible: the cell it fails may have hidden tests only)."""
        def check():
            if kind == "wrong":
                return check_notebook(edited(master, self.folder / master.stem / "wrong.ipynb",
                                             WRONG[master.stem][1]))
            return check_notebook(self.submissions(master) / f"{kind}.ipynb")
        return self._once(("check", master.stem, kind), check)

    def graded(self, master: Path) -> tuple[Any, Path]:
        """`grade` of the three notebooks: what it returned, and its results folder."""
        results = self.folder / master.stem / "results"
        return self._once(("grade", master.stem), lambda: (grade(
            [self.submissions(master)], self.assignment(master).grading, results, jobs=3,
            isolation=ISOLATION, progress=False), results))

    def verdicts(self, master: Path, kind: str) -> dict[tuple[str, str], str]:
        """Grading's verdict on each test of one of the three, by (cell, test)."""
        _, results = self.graded(master)
        tests = json.loads((results / kind / "results.json").read_text())["tests"]
        return {tuple(t["name"].split(": ", 1)): t["status"] for t in tests}


KINDS = ("master", "stub", "wrong")


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Runs:
    return Runs(tmp_path_factory.mktemp("exercises"))


@pytest.mark.parametrize("master", MASTERS, ids=lambda m: m.stem)
def test_the_master_passes_its_visible_tests_and_its_stub_is_not_done(master: Path,
                                                                      runs: Runs) -> None:
    every, visible = declared_tests(master)
    assert len(visible) < len(every)  # every exercise keeps some tests hidden

    assignment = runs.assignment(master)
    assert assignment.test_cells >= 2 and assignment.total_points >= 5
    released = assignment.release.read_text(encoding="utf-8")
    assert "BEGIN SOLUTION" not in released and "HIDDEN TESTS" not in released
    assert not [name for name in set(every) - set(visible) if name in released]

    report = runs.checked(master, "master")
    assert report.passed, report.text()
    assert sorted(t.name for r in report.results for t in r.tests) == sorted(visible)

    report = runs.checked(master, "stub")
    assert {r.status for r in report.results} == {"not done yet"}, report.text()


#: One wrong answer per exercise, and the test cell that must fail it.
WRONG = {
    "01_gradient_rule": ("test_silu_grad", {"silu_grad": """
        def silu_grad(g, x):
            return g * tfl.sigmoid(x)  # the product rule forgotten
        """}),
    "02_simplification_rule": ("test_minus_negative", {"minus_negative": """
        minus_negative = Rule("x - (-y) -> x + y", Pattern(ew.sub, X, Pattern(ew.neg, Y)),
                              lambda m, emit: emit(ew.sub, m.x, m.y))
        """}),
    "03_cse_pass": ("test_my_cse_purity", {"my_cse": """
        def my_cse(graph):  # purity forgotten: the two draws look alike, and are merged
            def decide_for(g):
                first = {}

                def decide(node, rewriter):
                    key = (node.op.name, repr(sorted(node.params.items())),
                           tuple(o if isinstance(o, Value) else repr(o) for o in node.inputs))
                    if key in first:
                        return first[key]
                    first[key] = node.output
                    return None

                return decide

            return rewrite(graph, decide_for)
        """}),
    "04_fusion_grouping": ("test_my_groups", {"my_groups": "my_groups = [[5, 6, 7]]"}),
    "05_predict_retraces": ("test_second_prediction", {
        "second_prediction": "predicted_results = [2.0, 101.0, 11.0, 100.0]"}),
    "06_predict_placement": ("test_places", {"places": """
        predicted_places = [("cpu:1", "pinned")] * 5 + [  # w.sum read the copy of w on cpu:1
            ("cpu", "asked for"), ("cpu", "operands"), ("cpu:1", "pinned"), ("cpu", "operands")]
        """}),
    "08_predict_the_peak": ("test_lean", {"lean": """
        def lean(x):  # the same order as greedy: all three held at once
            a, b, c = (x * 1.0).exp(), (x * 2.0).exp(), (x * 3.0).exp()
            return a.sum() + b.sum() + c.sum()
        """}),
    "09_jvp_and_batching_rules": ("test_hypot_batch", {"hypot_batch": """
        def hypot_batch(op, args, dims, params, size):  # batch axes first, ranks not lined up
            moved = [a if d is None else a.permute(d, *[k for k in range(a.ndim) if k != d])
                     for a, d in zip(args, dims)]
            return bind(op, *moved), 0
        """}),
    "07_run_a_saved_graph": ("test_run_saved_refuses", {"run_saved": """
        def run_saved(manifest, arrays, inputs):  # runs what it is given: trusts the file
            graph = json.loads(manifest)["graph"]
            values = {v["id"]: np.asarray(a) for v, a in zip(graph["inputs"], inputs)}
            for entry in graph.get("captures", []) + graph["constants"]:
                values[entry["id"]] = arrays[entry["array"]]

            def operand(item):
                if isinstance(item, dict):
                    return values[item["value"]] if "value" in item else float(item["float"])
                return item

            for node in graph["nodes"]:
                op = NUMPY_OPS.get(node["op"]) or getattr(np, node["op"])
                result = op(*[operand(item) for item in node["inputs"]], **node["params"])
                values[node["outputs"][0]["id"]] = np.asarray(result)
            return [values[i] for i in graph["outputs"]]
        """}),
    "10_loops_as_nodes": ("test_newton_sqrt", {"newton_sqrt": """
        def newton_sqrt(a):  # a Python loop: the right numbers, traced into six steps
            x = (a + 1.0) * 0.5
            for _ in range(6):
                x = (x + a / x) * 0.5
            return x
        """}),
    "11_a_module_of_your_own": ("test_state_prediction", {"state_prediction": """
        predicted_state = {  # the weights the wrong way round, (in, out)
            "0.weight": (8, 16), "0.bias": (16,), "2.norm.weight": (16,), "2.norm.bias": (16,),
            "2.proj.weight": (16, 16), "2.proj.bias": (16,), "2.gain": (16,),
            "4.weight": (16, 3), "4.bias": (3,)}
        """}),
    "12_bucket_and_average_gradients": ("test_bucket", {"bucket": """
        def bucket(sizes, bucket_mb):  # a bucket filled exactly is closed too soon
            result, held = [], 0
            for k, size in enumerate(sizes):
                if result and held + size < bucket_mb * 2**20:
                    result[-1].append(k)
                    held += size
                else:
                    result.append([k])
                    held = size
            return result
        """}),
}


@pytest.mark.parametrize("master", MASTERS, ids=lambda m: m.stem)
def test_a_wrong_answer_fails_only_its_cell(master: Path, runs: Runs) -> None:
    report = runs.checked(master, "wrong")
    statuses = {r.cell.grade_id: r.status for r in report.results}
    assert statuses.pop(WRONG[master.stem][0]) == "failed", report.text()
    assert set(statuses.values()) == {"passed"}, report.text()


@pytest.mark.parametrize("master", MASTERS, ids=lambda m: m.stem)
def test_grading_gives_the_master_full_marks_the_stub_none_and_a_wrong_answer_less(
        master: Path, runs: Runs) -> None:
    graded, results = runs.graded(master)
    total = runs.assignment(master).total_points
    assert graded.scores["master"] == total, _failures(results / "master")
    assert graded.scores["stub"] == 0
    assert 0 < graded.scores["wrong"] < total
    every, _ = declared_tests(master)  # the hidden tests ran too, and passed
    assert sorted(name for _, name in runs.verdicts(master, "master")) == sorted(every)
    assert {cell for (cell, _), status in runs.verdicts(master, "wrong").items()
            if status != "passed"} == {WRONG[master.stem][0]}


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("master", MASTERS, ids=lambda m: m.stem)
def test_check_and_grade_agree_test_by_test(master: Path, kind: str, runs: Runs) -> None:
    """What a learner's check says of each test it runs is what grading gives it (the route
    test, tests/test_grading_route.py, does the same for the test masters and the idioms); the
    wrong answer's check runs its hidden tests too."""
    checked = {(r.cell.grade_id, t.name): "passed" if t.status == PASSED else "failed"
               for r in runs.checked(master, kind).results for t in r.tests}
    assert checked, "no visible tests were checked"
    graded = runs.verdicts(master, kind)
    assert {test: graded[test] for test in checked} == checked


def _failures(results: Path) -> str:
    tests = json.loads((results / "results.json").read_text())["tests"]
    return "\n".join(f"{t['name']}: {t['output']}" for t in tests if t["status"] != "passed")
