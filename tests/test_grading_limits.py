"""What one submission may cost, and what it may never touch.

A call that runs past its deadline stops that function for the rest of the run (one endless loop
costs one timeout, not one per test); a submission has a budget over all its cells and calls; a
staged function a learner returns runs in the worker under those limits, never in the grader;
a learner's file name never collides with what grading writes; a hidden test's entry does not
show its expected answer.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from grading_notebooks import answered, checks, given, solution, write

from teachflow.grading import assign, load_bundle, sandbox
from teachflow.grading.grade import grade, submission_names
from teachflow.grading.judge import grade_submission

ISOLATION, _ = sandbox.find_isolation(allow_none=True)

SLOW_TESTS = "\n\n".join(f"def test_{n}():\n    assert slow({n}) == {n}" for n in range(4))


@pytest.fixture(scope="module")
def exercise(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    folder = tmp_path_factory.mktemp("limits")
    master = write(folder / "limits.ipynb", [
        given("setup", "import numpy as np\nimport teachflow as tfl"),
        solution("slow", "def slow(n):\n    ### BEGIN SOLUTION\n    return n\n"
                         "    ### END SOLUTION"),
        checks("test_slow", SLOW_TESTS, points=4),
        solution("fast", "def fast(n):\n    ### BEGIN SOLUTION\n    return n\n"
                         "    ### END SOLUTION"),
        checks("test_fast", "def test_fast():\n    assert fast(2) == 2"),
        solution("staged", "def staged():\n    ### BEGIN SOLUTION\n"
                           "    f = tfl.function(lambda x: x * 2)\n"
                           "    return f.get_concrete_function(tfl.ones(3))\n"
                           "    ### END SOLUTION"),
        checks("test_staged", "def test_staged_graph():\n"
                              "    assert [n.op.name for n in staged().graph.nodes] == ['mul']\n"
                              "\n\ndef test_staged_runs():\n"
                              "    assert staged()(tfl.ones(3)).numpy().tolist() == [2.0] * 3\n"
                              "### BEGIN HIDDEN TESTS\n"
                              "def test_hidden():\n    assert fast(3) == 3\n"
                              "### END HIDDEN TESTS"),
    ])
    done = assign(master, folder / "build")
    return done.release, done.grading


RIGHT = {"slow": "def slow(n):\n    return n", "fast": "def fast(n):\n    return n",
         "staged": "def staged():\n    f = tfl.function(lambda x: x * 2)\n"
                   "    return f.get_concrete_function(tfl.ones(3))"}
ENDLESS = "def slow(n):\n    while True:\n        pass"


def outcomes(path: Path, bundle: Path, **limits: float) -> dict[str, list[str]]:
    """Each test's lines when graded (empty: passed)."""
    judged = grade_submission(Path(path), load_bundle(bundle), ISOLATION,
                              sandbox.Limits(**limits))
    return {test.name: test.lines for test in judged.tests}


def test_a_function_that_timed_out_is_not_called_again(exercise, tmp_path: Path) -> None:
    release, bundle = exercise
    learner = answered(release, tmp_path / "loop.ipynb", **{**RIGHT, "slow": ENDLESS})
    lines = outcomes(learner, bundle, timeout=2)
    timed_out = [name for name, why in lines.items() if any(
        "slow(...) did not finish within 2 s" in line for line in why)]
    assert timed_out == ["test_0"]  # one call ran into the deadline ...
    for name in ("test_1", "test_2", "test_3"):  # ... the others failed at once, saying why
        assert any("slow(...) was not called: an earlier call of slow did not finish within "
                   "2 s" in line for line in lines[name]), lines[name]
    assert lines["test_fast"] == [] and lines["test_staged_runs"] == []  # the rest is graded


def test_a_submission_has_a_budget_for_all_its_calls(exercise, tmp_path: Path) -> None:
    release, bundle = exercise
    learner = answered(release, tmp_path / "loop.ipynb", **{**RIGHT, "slow": ENDLESS})
    lines = outcomes(learner, bundle, timeout=30, total=2)
    assert any("did not finish before the submission used up its 2 s in all" in line
               for line in lines["test_0"]), lines["test_0"]
    assert any("the submission used up its 2 s in all" in line
               for line in lines["test_fast"]), lines["test_fast"]


def test_a_staged_function_returned_runs_in_the_worker_under_its_limits(
        exercise, tmp_path: Path) -> None:
    release, bundle = exercise
    endless_graph = ("def staged():\n"
                     "    f = tfl.function(lambda x: tfl.while_loop(\n"
                     "        lambda c: c.sum() > -1.0, lambda c: c + 1.0, x))\n"
                     "    return f.get_concrete_function(tfl.ones(3))")
    learner = answered(release, tmp_path / "graph.ipynb", **{**RIGHT, "staged": endless_graph})
    script = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
              "from test_grading_limits import outcomes\n"
              f"print(outcomes({str(learner)!r}, {str(bundle)!r}, timeout=3))")
    # (a grader that ran the graph itself would hang: in a process of its own, bounded)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr
    lines = eval(done.stdout)  # (the dict printed above)
    assert any("the staged function(...) did not finish within 3 s" in line
               for line in lines["test_staged_runs"]), lines["test_staged_runs"]
    assert lines["test_fast"] == []


def test_no_submission_is_named_as_what_grading_writes(exercise, tmp_path: Path) -> None:
    release, bundle = exercise
    names = submission_names([Path("a/grades.csv.ipynb"), Path("b/GRADES.CSV.ipynb")])
    # (names differing only in case would collide on some file systems: they differ more)
    assert sorted(names.values()) == ["GRADES.CSV-3", "grades.csv-2"]
    learner = answered(release, tmp_path / "grades.csv.ipynb", **RIGHT)
    done = grade([learner], bundle, tmp_path / "results", jobs=1, isolation=ISOLATION,
                 progress=False)
    assert (tmp_path / "results" / "grades.csv").is_file()
    assert done.names[learner] == "grades.csv-2"
    results = json.loads((tmp_path / "results" / "grades.csv-2" / "results.json").read_text())
    assert results["score"] == 6  # (full marks)


def test_a_hidden_test_does_not_show_what_it_expects(exercise, tmp_path: Path) -> None:
    release, bundle = exercise
    learner = answered(release, tmp_path / "wrong.ipynb", **{**RIGHT, "fast": "def fast(n):\n"
                                                                          "    return 41"})
    grade([learner], bundle, tmp_path / "plain", jobs=1, isolation=ISOLATION, progress=False)
    grade([learner], bundle, tmp_path / "full", jobs=1, isolation=ISOLATION, progress=False,
          hidden_details=True)

    def hidden(folder: Path) -> dict:
        tests = json.loads((folder / "wrong" / "results.json").read_text())["tests"]
        return next(t for t in tests if t["name"] == "test_staged: test_hidden")

    plain, full = hidden(tmp_path / "plain"), hidden(tmp_path / "full")
    assert plain["status"] == full["status"] == "failed"
    assert plain["output"] == "This hidden test failed; what it checks is not shown."
    assert "assert fast(3) == 3" in full["output"] and "41" in full["output"]
    # What the learner's own code did is theirs to see: its error, and where
    raising = answered(release, tmp_path / "raising.ipynb",
                       **{**RIGHT, "fast": "def fast(n):\n    return n / (n - 3) * (n - 3)"})
    grade([raising], bundle, tmp_path / "raising", jobs=1, isolation=ISOLATION, progress=False)
    tests = json.loads((tmp_path / "raising" / "raising" / "results.json").read_text())["tests"]
    output = next(t for t in tests if t["name"] == "test_staged: test_hidden")["output"]
    assert output.startswith("This hidden test failed; what it checks is not shown.\nYour code:")
    assert "ZeroDivisionError: division by zero" in output and "fast(3)" not in output
