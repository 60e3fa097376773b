"""Grading a whole course: due dates and late penalties, hidden tests' visibility, feedback.html,
fixed seeds and partial credit, through the real ``teachflow`` command on real notebooks (and
Gradescope's layout, with its submission_metadata.json)."""

from __future__ import annotations

import csv
import json
import os
import random
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import grading_notebooks as notebooks
import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.errors import GradingError
from teachflow.grading import assign, credit, deadlines, grade, judge, sandbox, seeds
from teachflow.grading.check import check_namespace
from teachflow.grading.failures import PASSED
from teachflow.grading.feedback import VISIBILITIES, feedback_html
from teachflow.grading.grade import results_json
from teachflow.grading.judge import Judged
from teachflow.grading.notebook import AuthoringError

ROOT = Path(__file__).resolve().parent.parent
ISOLATION, WHY_NOT = sandbox.find_isolation(allow_none=True)
NO_SANDBOX = ["--no-isolation"] if ISOLATION == "none" else []
isolated = pytest.mark.skipif(ISOLATION == "none", reason=f"no sandbox here: {WHY_NOT}")

SCALE = """
def scale(x, k):
    ### BEGIN SOLUTION
    return x * k
    ### END SOLUTION
"""

# 5 points: test_doubles asks for 2 of them, the three others share the 3 left (1 each).
SCALE_TESTS = """
@tfl.grading.points(2)
def test_doubles():
    assert scale(3, 2) == 6

def test_triples():
    assert scale(2, 3) == 6

def test_zero():
    assert scale(5, 0) == 0
### BEGIN HIDDEN TESTS

def test_negative():
    assert scale(-1, 4) == -4
### END HIDDEN TESTS
"""

DRAWS = """
def coin():
    ### BEGIN SOLUTION
    return random.random()
    ### END SOLUTION

def init(n):
    ### BEGIN SOLUTION
    return tfl.randn(n)
    ### END SOLUTION
"""

# Random inputs drawn on both sides: the learner's code in the worker, the tests here.
DRAWS_TESTS = """
def test_same_draws_on_both_sides():
    assert coin() == random.random()
    np.testing.assert_allclose(init(3).numpy(), tfl.randn(3).numpy())

def test_coin_beats_numpy():
    assert coin() > np.random.rand()  # (seed 0: 0.84 > 0.55; seed 1: 0.13 > 0.42 fails)
"""

RIGHT = """
def scale(x, k):
    return x * k
"""

RIGHT_DRAWS = """
def coin():
    return random.random()

def init(n):
    return tfl.randn(n)
"""

WRONG = """
def scale(x, k):
    print("<script>alert('printed')</script>")
    raise ValueError("<img src=x onerror=alert(1)>")
"""

HALF = """
def scale(x, k):
    return x * k if k != 0 else 1
"""

DUE = "2026-03-01T23:59:00+00:00"


def master(folder: Path) -> Path:
    return notebooks.write(folder / "scale.ipynb", [
        notebooks.given("setup", "import random\nimport numpy as np\nimport teachflow as tfl"),
        notebooks.solution("scale", SCALE),
        notebooks.checks("test_scale", SCALE_TESTS, points=5),
        notebooks.solution("draws", DRAWS),
        notebooks.checks("test_draws", DRAWS_TESTS, points=2),
    ])


def teachflow_command(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teachflow", *map(str, args)], cwd=ROOT,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """The exercise assigned, and a class: right on time, right but late, half right, and a
    hostile wrong answer very late; with the times they were submitted."""
    folder = tmp_path_factory.mktemp("course")
    assign(master(folder), folder / "build")
    release = folder / "build" / "release" / "scale.ipynb"
    subs = folder / "subs"
    subs.mkdir()
    answers = {"early": RIGHT, "late": RIGHT, "half": HALF, "wrong": WRONG}
    for name, answer in answers.items():
        notebooks.answered(release, subs / f"{name}.ipynb", scale=answer, draws=RIGHT_DRAWS)
    (folder / "times.csv").write_text(
        "submission,submitted_at\n"
        "early,2026-03-01T20:00:00-05:00\n"           # 01:00 UTC on the 2nd: one day late
        "late.ipynb,2026-03-03T00:00:30Z\n"            # 1 day and 1.5 minutes: two days
        f"{subs / 'half.ipynb'},2026-02-28T10:00:00Z\n"
        "wrong,2026-03-07T00:00:00Z\n")                # six days late
    return folder


@pytest.fixture(scope="module")
def graded(course: Path) -> Path:
    done = teachflow_command("grade", course / "subs", "--bundle", course / "build" / "grading",
                             "--out", course / "results", "--due", DUE, "--late-penalty", "10",
                             "--submitted-at", course / "times.csv", "--jobs", "2", *NO_SANDBOX)
    assert done.returncode == 0, done.stderr
    return course / "results"


def results(folder: Path, name: str) -> dict:
    return json.loads((folder / name / "results.json").read_text())


def rows(folder: Path) -> dict[str, dict[str, str]]:
    with (folder / "grades.csv").open(newline="") as file:
        return {row["submission"]: row for row in csv.DictReader(file)}


# -- due dates and late penalties ---------------------------------------------------------------


def test_grades_csv_gains_late_days_penalty_and_final_score(graded: Path) -> None:
    table = rows(graded)
    assert list(next(iter(table.values()))) == [
        "submission", "score", "max_score", "test_scale", "test_draws", "late_days", "penalty",
        "final_score"]
    # 10% of 7 points per started day late; never below 0
    assert {name: (row["score"], row["late_days"], row["penalty"], row["final_score"])
            for name, row in table.items()} == {
        "early": ("7", "1", "0.7", "6.3"), "late": ("7", "2", "1.4", "5.6"),
        "half": ("6", "0", "0", "6"), "wrong": ("2", "6", "2", "0")}


def test_results_json_says_the_penalty_and_scores_the_final_score(graded: Path) -> None:
    late = results(graded, "late")
    assert late["score"] == pytest.approx(5.6)
    assert sum(t["score"] for t in late["tests"]) == 7
    assert "Submitted 2 days late (2026-03-03T00:00:30+00:00): late penalty 10% of the " \
           "points per started day, -1.4 points; final score 5.6." in late["output"]
    assert "Submitted on time" in results(graded, "half")["output"]


def test_a_submission_without_a_time_is_an_error_naming_it(course: Path, tmp_path: Path) -> None:
    times = tmp_path / "times.csv"
    times.write_text("submission,submitted_at\nearly,2026-03-01T20:00:00Z\n")
    done = teachflow_command("grade", course / "subs", "--bundle", course / "build" / "grading",
                             "--out", tmp_path / "r", "--due", DUE, "--submitted-at", times,
                             *NO_SANDBOX)
    assert done.returncode == 2
    assert "no submission time for half" in done.stderr and "on time" in done.stderr
    assert not (tmp_path / "r").exists()  # refused before anything was graded
    no_file = teachflow_command("grade", course / "subs", "--bundle",
                                course / "build" / "grading", "--out", tmp_path / "r", "--due",
                                DUE, *NO_SANDBOX)
    assert no_file.returncode == 2 and "--submitted-at TIMES.csv" in no_file.stderr


@pytest.mark.parametrize(("args", "says"), [
    (["--late-penalty", "10"], "--late-penalty 10 without --due"),
    (["--due", "2026-03-01T23:59:00"], "a time without its time zone"),
    (["--due", "next friday"], "not an ISO 8601 time"),
    (["--due", DUE, "--late-penalty", "150", "--submitted-at", "x.csv"], "from 0 to 100"),
])
def test_bad_deadlines_are_refused(course: Path, tmp_path: Path, args: list[str],
                                   says: str) -> None:
    done = teachflow_command("grade", course / "subs" / "early.ipynb", "--bundle",
                             course / "build" / "grading", "--out", tmp_path / "r", *args,
                             *NO_SANDBOX)
    assert done.returncode == 2 and says in done.stderr, done.stderr


def test_times_files_are_read_strictly(tmp_path: Path) -> None:
    naive = tmp_path / "naive.csv"
    naive.write_text("submission,submitted_at\nalice,2026-03-01 12:00\n")
    with pytest.raises(GradingError, match=r"line 2: submitted_at is .* without its time zone"):
        deadlines.read_times(naive)
    twice = tmp_path / "twice.csv"
    twice.write_text("submission,submitted_at\nbob,2026-03-01T12:00Z\nbob,2026-03-02T12:00Z\n")
    with pytest.raises(GradingError, match="line 3: a second time for bob"):
        deadlines.read_times(twice)
    columns = tmp_path / "columns.csv"
    columns.write_text("name,time\nbob,2026-03-01T12:00Z\n")
    with pytest.raises(GradingError, match="needs the columns submission and submitted_at"):
        deadlines.read_times(columns)


def test_a_started_day_counts_whole() -> None:
    due = deadlines.parse_time(DUE, "due")
    times = {"a": due, "b": deadlines.parse_time("2026-03-02T00:00:00Z", "b"),
             "c": deadlines.parse_time("2026-03-03T23:59:00Z", "c")}
    rule = deadlines.Deadline(due, 25, times)
    assert [rule.late(n, 8, 10).days for n in "abc"] == [0, 1, 2]
    assert rule.late("c", 8, 10).final == 3 and rule.late("c", 4, 10).final == 0


# -- visibility and feedback.html ------------------------------------------------------------------


def test_hidden_tests_are_shown_after_the_due_date_by_default(graded: Path) -> None:
    tests = {t["name"]: t["visibility"] for t in results(graded, "early")["tests"]}
    assert tests.pop("test_scale: test_negative") == "after_due_date"
    assert set(tests.values()) == {"visible"}
    page = (graded / "early" / "feedback.html").read_text()
    assert "test_scale: test_negative" in page and "shown after the due date" in page


def test_feedback_explains_each_test_as_check_does_and_escapes_the_learners_text(
        graded: Path) -> None:
    page = (graded / "wrong" / "feedback.html").read_text()
    assert "<script" not in page and "<img" not in page  # no markup of the learner's
    assert "ValueError: &lt;img src=x onerror=alert(1)&gt;" in page
    assert "&lt;script&gt;alert(&#x27;printed&#x27;)&lt;/script&gt;" in page
    assert "called from the test at" in page and "scale(3, 2) == 6" in page
    assert "Submitted 6 days late" in page and "0 / 7" in page
    assert "Graded in" in page
    half = (graded / "half" / "feedback.html").read_text()
    assert "6 / 7" in half and "Tests: 4 of 5 passed" in half
    assert "got:      scale(5, 0) = 1" in half and "expected: 0" in half


def test_hidden_visibility_hidden_counts_them_only(course: Path, tmp_path: Path) -> None:
    done = teachflow_command("grade", course / "subs" / "half.ipynb", "--bundle",
                             course / "build" / "grading", "--out", tmp_path / "r",
                             "--hidden-visibility", "hidden", *NO_SANDBOX)
    assert done.returncode == 0, done.stderr
    half = results(tmp_path / "r", "half")
    assert [t["visibility"] for t in half["tests"]].count("hidden") == 1
    page = (tmp_path / "r" / "half" / "feedback.html").read_text()
    assert "test_negative" not in page
    assert "1 hidden test counts toward the score; it is not shown" in page
    assert "late_days" not in (tmp_path / "r" / "grades.csv").read_text()  # (no --due)
    bad = teachflow_command("grade", course / "subs" / "half.ipynb", "--bundle",
                            course / "build" / "grading", "--out", tmp_path / "r",
                            "--hidden-visibility", "later")
    assert bad.returncode == 2 and "invalid choice: 'later'" in bad.stderr


def test_each_visibility_shows_hidden_tests_as_it_says() -> None:
    judged = Judged([judge.TestOutcome("cell", "test_seen", PASSED, 1, False),
                     judge.TestOutcome("cell", "test_secret", "failed", 2, True,
                                       ["assert answer() == 42"])], ["a note <b>"], 1.5)
    pages = {visibility: feedback_html("x", judged, results_json(judged, False, visibility),
                                       visibility) for visibility in VISIBILITIES}
    assert "test_secret" not in pages["hidden"] and "1 hidden test count" in pages["hidden"]
    assert "shown once grades are published" in pages["after_published"]
    for visibility in VISIBILITIES:
        assert "== 42" not in pages[visibility]  # (a hidden test's line: --hidden-details)
        assert "a note &lt;b&gt;" in pages[visibility] and "Graded in 1.5 s" in pages[visibility]
    assert "This hidden test failed; what it checks is not shown." in pages["visible"]
    assert "1 / 3" in pages["visible"] and "0 / 2" in pages["visible"]


# -- partial credit ------------------------------------------------------------------------------


def test_a_cells_points_are_shared_and_decorated_tests_take_their_own(graded: Path) -> None:
    half = {t["name"].split(": ")[1]: (t["score"], t["max_score"], t["status"])
            for t in results(graded, "half")["tests"]}
    assert half == {"test_doubles": (2, 2, "passed"), "test_triples": (1, 1, "passed"),
                    "test_zero": (0, 1, "failed"), "test_negative": (1, 1, "passed"),
                    "test_same_draws_on_both_sides": (1, 1, "passed"),
                    "test_coin_beats_numpy": (1, 1, "passed")}
    zero = next(t for t in results(graded, "half")["tests"] if t["name"].endswith("test_zero"))
    assert "got:" in zero["output"] and "expected: 0" in zero["output"]
    assert rows(graded)["half"]["test_scale"] == "4"


def test_points_shares_are_read_from_the_cells_text() -> None:
    tests = ("test_a", "test_b", "test_c")
    source = "@tfl.grading.points(3)\ndef test_a(): pass\ndef test_b(): pass\ndef test_c(): pass"
    assert credit.test_points(5, tests, source) == {"test_a": 3, "test_b": 1, "test_c": 1}
    assert credit.test_points(3, tests, source.replace("@tfl.grading.points(3)\n", "")) == \
        {"test_a": 1, "test_b": 1, "test_c": 1}
    assert credit.problem(2, tests, source) == "has 2 points, but its tests ask for 3 with " \
                                               "@tfl.grading.points"
    assert "not a number" in credit.problem(5, tests, source.replace("(3)", "(n)"))
    every = "@points(1)\ndef test_a(): pass\n@points(1)\ndef test_b(): pass"
    assert "together they ask for 2" in credit.problem(3, ("test_a", "test_b"), every)
    assert credit.problem(2, ("test_a", "test_b"), every) is None
    assert tfl.grading.points(2)(lambda: None).points == 2
    with pytest.raises(GradingError, match="a number, 0 or more"):
        tfl.grading.points(-1)


def test_assign_refuses_points_that_do_not_add_up(tmp_path: Path) -> None:
    path = notebooks.write(tmp_path / "m.ipynb", [
        notebooks.given("setup", "import teachflow as tfl"),
        notebooks.solution("scale", SCALE),
        notebooks.checks("test_scale", SCALE_TESTS, points=1)])
    with pytest.raises(AuthoringError, match="has 1 points, but its tests ask for 2"):
        assign(path, tmp_path / "build")


# -- seeds ---------------------------------------------------------------------------------------


def test_random_inputs_grade_the_same_twice(graded: Path, course: Path, tmp_path: Path) -> None:
    again = teachflow_command("grade", course / "subs" / "early.ipynb", "--bundle",
                              course / "build" / "grading", "--out", tmp_path / "again",
                              *NO_SANDBOX)
    assert again.returncode == 0, again.stderr
    first, second = results(graded, "early"), results(tmp_path / "again", "early")
    assert [(t["name"], t["status"]) for t in first["tests"]] == \
        [(t["name"], t["status"]) for t in second["tests"]]
    assert {t["status"] for t in first["tests"]} == {"passed"}  # both sides drew alike


def test_another_seed_would_have_graded_otherwise(course: Path, tmp_path: Path,
                                                  monkeypatch) -> None:
    monkeypatch.setattr(seeds, "SEED", 1)  # (the judges are forked: they see it too)
    grade([course / "subs" / "early.ipynb"], course / "build" / "grading", tmp_path / "r",
          isolation=ISOLATION, progress=False, jobs=1)
    status = {t["name"]: t["status"] for t in results(tmp_path / "r", "early")["tests"]}
    assert status["test_draws: test_coin_beats_numpy"] == "failed"
    assert status["test_draws: test_same_draws_on_both_sides"] == "passed"


def test_a_check_in_the_kernel_gives_it_its_generators_back(course: Path) -> None:
    namespace = {"__name__": "__main__", "random": random, "np": np, "tfl": tfl,
                 "scale": lambda x, k: x * k, "coin": random.random, "init": tfl.randn}
    random.seed(123)
    np.random.seed(123)
    tfl.manual_seed(123)
    expected = (random.random(), np.random.rand(), tfl.randn(2).numpy().tolist())
    random.seed(123)
    np.random.seed(123)
    tfl.manual_seed(123)
    report = check_namespace(course / "subs" / "early.ipynb", namespace)
    coin = next(t for r in report.results for t in r.tests if t.name == "test_coin_beats_numpy")
    assert coin.status == PASSED  # (seeded: 0.84 > 0.55)
    assert (random.random(), np.random.rand(), tfl.randn(2).numpy().tolist()) == expected


# -- Gradescope ----------------------------------------------------------------------------------


def _gradescope(autograder: Path, root: Path, notebook: Path, metadata: dict | None) -> tuple:
    (root / "source").mkdir(parents=True)
    (root / "submission").mkdir()
    with zipfile.ZipFile(autograder) as archive:
        archive.extractall(root / "source")
    shutil.copyfile(notebook, root / "submission" / "scale.ipynb")
    if metadata is not None:
        (root / "submission_metadata.json").write_text(json.dumps(metadata))
    os.chmod(root / "source" / "run_autograder", 0o755)
    environment = dict(os.environ, AUTOGRADER_ROOT=str(root), TEACHFLOW_PYTHON=sys.executable)
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=environment,
                          capture_output=True, text=True, timeout=300)
    return done, json.loads((root / "results" / "results.json").read_text())


def _metadata(created_at: str) -> dict:
    """submission_metadata.json as Gradescope writes it (the fields teachflow reads, and some
    it does not)."""
    return {"id": 123456, "created_at": created_at, "submission_method": "upload",
            "assignment": {"due_date": "2026-03-01T23:00:00.000000-08:00", "group_size": None,
                           "late_due_date": None, "title": "Scale", "total_points": "7.0"},
            "users": [{"email": "learner@example.com", "id": 1, "name": "A Learner"}],
            "previous_submissions": []}


@isolated
def test_gradescope_reads_the_time_and_due_date_from_submission_metadata(
        course: Path, tmp_path: Path) -> None:
    autograder = tmp_path / "autograder.zip"
    done = teachflow_command("gradescope", course / "build" / "grading", "--out", autograder,
                             "--late-penalty", "10", "--hidden-visibility", "after_published")
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(autograder) as archive:
        assert json.loads(archive.read("course.json")) == {
            "due": None, "late_penalty": 10, "hidden_visibility": "after_published"}
        assert "late penalty 10% per started day" in archive.read("README.md").decode()
    right = course / "subs" / "early.ipynb"
    ran, late = _gradescope(autograder, tmp_path / "late", right,
                            _metadata("2026-03-02T23:30:00.123456-08:00"))  # 1 day 30 min late
    assert ran.returncode == 0, ran.stderr
    assert late["score"] == pytest.approx(7 - 1.4)  # Gradescope's score: the final one
    assert "Submitted 2 days late" in late["output"]
    assert {t["visibility"] for t in late["tests"]} == {"visible", "after_published"}
    ran, on_time = _gradescope(autograder, tmp_path / "on-time", right,
                               _metadata("2026-03-01T22:00:00-08:00"))
    assert on_time["score"] == 7 and "Submitted on time" in on_time["output"]
    ran, unknown = _gradescope(autograder, tmp_path / "unknown", right, None)
    assert ran.returncode == 1 and unknown["score"] == 0
    assert "--late-penalty 10 without --due" in unknown["output"]
