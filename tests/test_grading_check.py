"""teachflow check and tfl.grading.check(): a learner's visible tests, explained.

Each test starts from a real master, assigns it, and edits the released notebook the way a
learner would: leaving the stub, answering right, answering wrong, breaking a cell.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest
from grading_notebooks import (
    answered,
    checks,
    five_exercises,
    given,
    master,
    solution,
    write,
)
from nbformat.v4 import new_code_cell

import teachflow as tfl
from teachflow.grading import assign, check, check_notebook
from teachflow.grading.check import check_namespace, notebook_path

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def assigned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The master, assigned once (and verified: the sandbox gives it full marks); its path
    and its release's."""
    folder = tmp_path_factory.mktemp("assigned")
    path = master(folder)
    return path, assign(path, folder / "build").release


@pytest.fixture
def release(assigned: tuple[Path, Path], tmp_path: Path) -> Path:
    """The released notebook, a copy of its own for each test (tests write beside it), and
    the master beside the test's files (tmp_path / "softmax.ipynb")."""
    path, released = assigned
    shutil.copy(path, tmp_path / path.name)
    shutil.copytree(released.parent, tmp_path / "release")
    return tmp_path / "release" / released.name


@pytest.fixture(autouse=True)
def private_ipython(tmp_path: Path, monkeypatch) -> None:
    """IPython, where a test starts it, keeps its profile in the test's folder, not in ~."""
    monkeypatch.setenv("IPYTHONDIR", str(tmp_path / "ipython"))


def teachflow_command(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teachflow", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=60)


def test_the_released_stub_is_not_done_yet(release: Path) -> None:
    report = check_notebook(release)
    (result,) = report.results
    assert not report.passed and result.status == "not done yet"
    assert [t.name for t in result.tests] == ["test_shape", "test_sums_to_one"]  # not hidden
    text = report.text()
    assert "NOT DONE YET  test_softmax (3 points)" in text
    assert "my_softmax still raises NotImplementedError" in text
    assert "cell 3 (grade_id 'softmax'), line 4:  raise NotImplementedError()" in text
    assert "1 is not done yet" in text


def test_a_right_answer_passes_and_so_does_the_master(release: Path, tmp_path: Path) -> None:
    learner = answered(release, tmp_path / "learner.ipynb", softmax="""
        def my_softmax(x):
            return np.exp(x) / np.exp(x).sum()
        """)
    report = check_notebook(learner)
    assert report.passed and report.results[0].status == "passed"
    assert "PASSED        test_softmax (3 points): 2 tests" in report.text()
    assert check_notebook(tmp_path / "softmax.ipynb").passed  # the master, with its answer


def test_a_failing_assert_says_what_was_expected_and_what_was_got(release: Path,
                                                                  tmp_path: Path) -> None:
    learner = answered(release, tmp_path / "learner.ipynb", softmax="""
        def my_softmax(x):
            print("computing", len(x))
            return np.exp(x).reshape(-1, 1)
        """)
    report = check_notebook(learner)
    assert report.results[0].status == "failed"
    shape, total = report.results[0].tests
    assert shape.lines == ["cell 4 (grade_id 'test_softmax'), line 2:  "
                           "assert my_softmax(np.array([1.0, 2.0, 3.0])).shape == (3,)",
                           "got:      my_softmax(np.array([1.0, 2.0, 3.0])).shape = (3, 1)",
                           "expected: (3,)",
                           "got 2 items where 1 was expected"]
    assert shape.output == "computing 3\n"
    # np.testing's own message, its two sides named for what they are
    assert total.lines[0].startswith("at cell 4 (grade_id 'test_softmax'), line 5:  "
                                     "np.testing.assert_allclose(")
    joined = "\n".join(total.lines)
    assert "got:      array(30.19" in joined and "expected: array(1.)" in joined
    text = report.text()
    assert "it printed:\n      computing 3" in text and "0 of 1 test cell passes" in text


def test_a_broken_cell_fails_only_the_tests_that_need_it(tmp_path: Path) -> None:
    cells = [given("setup", "import numpy as np"),
             solution("double", "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n"
                                "    ### END SOLUTION"),
             checks("test_double", "def test_double():\n    assert double(2) == 4"),
             solution("square", "def square(x):\n    ### BEGIN SOLUTION\n    return x * x\n"
                                "    ### END SOLUTION"),
             checks("test_square", "def test_square():\n    assert square(3) == 9"),
             solution("table", "### BEGIN SOLUTION\nTABLE = {1: 1}\n### END SOLUTION"),
             checks("test_table", "def test_table():\n    assert TABLE[1] == 1")]
    release = assign(write(tmp_path / "m.ipynb", cells), tmp_path / "out", verify=False).release
    learner = answered(release, tmp_path / "learner.ipynb",
                       double="def double(x):\n    return 2 * x +",  # a syntax error
                       square="def square(x):\n    return x * x",
                       table="TABLE = {}\nTABLE[0] = 1 / 0")
    report = check_notebook(learner)
    status = {r.cell.grade_id: r for r in report.results}
    assert status["test_square"].status == "passed"
    assert status["test_double"].status == "failed"
    assert status["test_double"].tests[0].lines[0] == (
        "needs double: cell 2 (grade_id 'double') did not run: SyntaxError: invalid syntax "
        "(line 2)")
    assert status["test_double"].tests[0].lines[1].strip() == "return 2 * x +"
    # A cell that raised after it bound a name: the test runs against what it bound, as in a
    # kernel, and its failure says what the cell raised
    (table,) = status["test_table"].tests
    assert table.status == "failed"
    assert "KeyError: 1" in table.lines[0]
    assert any("note: cell 6 (grade_id 'table') raised an error when it ran, after it bound "
               "what the test uses: ZeroDivisionError: division by zero" in line
               for line in table.lines)
    assert any("cell 6 (grade_id 'table'), line 2:  TABLE[0] = 1 / 0" in line
               for line in table.lines)
    # the released stub of a top-level answer raises at once: that cell's tests are not done
    stub = check_notebook(release)
    assert {r.cell.grade_id: r.status for r in stub.results}["test_table"] == "not done yet"


def test_an_exit_unrun_names_and_fixtures_are_reported_not_raised(tmp_path: Path) -> None:
    cells = [given("setup", "import numpy as np"),
             new_code_cell("import sys\nsys.exit(0)"),  # a learner's scratch cell
             solution("f", "def f(x):\n    ### BEGIN SOLUTION\n    return x\n"
                           "    ### END SOLUTION"),
             checks("test_f", "def test_f():\n    assert f(np.ones(3)).sum() == 3\n\n"
                              "def test_g():\n    assert g(1) == 1\n\n"
                              "def test_fixture(tmp_path):\n    assert tmp_path.is_dir()\n\n"
                              "def test_unknown_fixture(nothing):\n    pass"),
             solution("g", "def g(x):\n    ### BEGIN SOLUTION\n    return x\n"
                           "    ### END SOLUTION")]
    path = write(tmp_path / "m.ipynb", cells)
    (result,) = check_notebook(path).results
    f, g, fixture, unknown = result.tests
    assert f.status == "passed" and g.status == "failed"
    assert g.lines == ["NameError: name 'g' is not defined",
                       "raised at cell 4 (grade_id 'test_f'), line 5:  assert g(1) == 1",
                       "g is defined only after this test cell, in cell 5 (grade_id 'g')"]
    assert fixture.status == "passed"  # pytest's own fixtures work in a test cell
    assert unknown.status == "failed"
    assert "pytest could not set it up: fixture 'nothing' not found" in unknown.lines[0]


def test_a_learner_error_names_the_learners_line_and_the_tests(tmp_path: Path) -> None:
    cells = [given("setup", "import teachflow as tfl"),
             solution("f", "def f(x):\n    ### BEGIN SOLUTION\n    return x\n"
                           "    ### END SOLUTION"),
             checks("test_f", "def test_f():\n    x = tfl.ones((3,))\n    assert f(x).shape == "
                              "(3,)")]
    release = assign(write(tmp_path / "m.ipynb", cells), tmp_path / "out", verify=False).release
    learner = answered(release, tmp_path / "learner.ipynb",
                       f="def f(x):\n    return x @ tfl.ones((2, 2))")
    (test,) = check_notebook(learner).results[0].tests
    assert test.lines[0].startswith("ShapeError: ")
    assert "raised at cell 2 (grade_id 'f'), line 2:  return x @ tfl.ones((2, 2))" in test.lines
    assert "called from the test at cell 3 (grade_id 'test_f'), line 3:  assert f(x).shape == " \
           "(3,)" in test.lines


def test_in_a_kernel_the_tests_run_against_the_functions_as_last_run(release: Path) -> None:
    namespace = {"np": np, "__name__": "__main__"}
    undone = check_namespace(release, namespace)  # the saved stub, never run: not done yet
    assert undone.results[0].status == "not done yet"
    assert undone.results[0].tests[0].lines == [
        "needs my_softmax: cell 3 (grade_id 'softmax') is not done yet (it raises "
        "NotImplementedError)"]
    answered_file = answered(release, release.parent / "answered.ipynb",
                             softmax="def my_softmax(x):\n    return x")
    unrun = check_namespace(answered_file, namespace)  # an answer saved, but not run
    assert unrun.results[0].status == "not done yet"
    assert unrun.results[0].tests[0].lines == [
        "needs my_softmax: cell 3 (grade_id 'softmax') is not done yet (it has not run in "
        "this kernel yet: run it first)"]
    assert "HIDDEN" not in unrun.text() and "not done yet" in unrun.summary()
    namespace["my_softmax"] = lambda x: np.exp(x) / np.exp(x).sum()
    assert check_namespace(release, namespace).passed
    assert "test_shape" not in namespace  # the tests ran in a copy


def test_in_a_kernel_a_stub_or_a_syntax_error_in_the_saved_file_is_reported(
        tmp_path: Path) -> None:
    cells = [solution("answer", "### BEGIN SOLUTION\nANSWER = 42\n### END SOLUTION"),
             checks("test_answer", "def test_answer():\n    assert ANSWER == 42"),
             solution("f", "def f():\n    ### BEGIN SOLUTION\n    return 1\n"
                           "    ### END SOLUTION"),
             checks("test_f", "def test_f():\n    assert f() == 1")]
    release = assign(write(tmp_path / "m.ipynb", cells), tmp_path / "out", verify=False).release
    learner = answered(release, tmp_path / "learner.ipynb", f="def f(:\n    return 1")
    report = check_namespace(learner, {"f": lambda: 1})  # an older f, run before the typo
    answer, f = report.results
    assert answer.status == "not done yet" and answer.tests[0].lines == [
        "needs ANSWER: cell 1 (grade_id 'answer') is not done yet (it raises "
        "NotImplementedError)"]
    assert f.status == "failed" and f.tests[0].lines[0].startswith(
        "needs f: cell 3 (grade_id 'f') is broken in the saved file: SyntaxError:")


def test_a_helper_of_one_test_cell_serves_the_next_as_in_a_kernel(tmp_path: Path) -> None:
    cells = [given("setup", "import numpy as np\nimport teachflow as tfl"),
             checks("test_one", "def close(a, b):\n    return abs(a - b) < 1e-9\n\n"
                                "def test_one():\n    assert close(np.float64(1), 1)"),
             checks("test_two", "def test_two():\n    assert close(2, 2.0)"),
             new_code_cell("inner = tfl.grading.check()"),  # the notebook's own check cell ...
             checks("test_three", "def test_three():\n    assert inner is None")]  # ... skipped
    assert check_notebook(write(tmp_path / "m.ipynb", cells)).passed


def test_check_outside_a_notebook_needs_a_path(release: Path, capsys, monkeypatch) -> None:
    monkeypatch.delitem(sys.modules, "IPython", raising=False)  # no shell, whatever ran before
    with pytest.raises(tfl.GradingError, match="needs the notebook's path"):
        check()
    report = check(release)
    assert not report.passed and "NOT DONE YET" in capsys.readouterr().out
    assert repr(report) == "<check of softmax.ipynb: 0 of 1 test cell passes, 1 is not done " \
                           "yet.>"


def test_the_notebooks_file_is_found_from_the_kernels_surroundings(tmp_path: Path,
                                                                   monkeypatch) -> None:
    folder = tmp_path / "course" / "week1"
    folder.mkdir(parents=True)
    one, two = master(folder, "one.ipynb"), master(folder, "two.ipynb")
    monkeypatch.chdir(folder)
    monkeypatch.delenv("JPY_SESSION_NAME", raising=False)
    assert notebook_path({"__vsc_ipynb_file__": str(two)}) == two
    monkeypatch.setenv("JPY_SESSION_NAME", "course/week1/one.ipynb")  # from the server's root
    assert notebook_path({}) == tmp_path / "course/week1/one.ipynb"
    monkeypatch.delenv("JPY_SESSION_NAME")
    with pytest.raises(tfl.GradingError, match="cannot tell which notebook") as unknown:
        notebook_path({})
    assert "tfl.grading.check('my_exercise.ipynb')" in unknown.value.hint
    two.unlink()
    assert notebook_path({}) == one


def test_check_in_a_real_ipython_shell(release: Path, tmp_path: Path) -> None:
    script = textwrap.dedent("""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("import numpy as np\\nimport teachflow as tfl")
        shell.run_cell("def my_softmax(x):\\n    return np.exp(x) / np.exp(x).sum()")
        result = shell.run_cell("report = tfl.grading.check()")
        result.raise_error()
        print("passed:", shell.user_ns["report"].passed)
        # (store_history: each cell counts, as in a kernel)
        shell.run_cell("tfl.grading.check()", store_history=True).raise_error()  # shown once
        shell.run_cell("report", store_history=True).raise_error()  # and again when asked
    """)
    env = {**os.environ, "JPY_SESSION_NAME": release.name}  # (IPYTHONDIR: the fixture's)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=release.parent, env=env, timeout=60)
    assert run.returncode == 0, run.stderr
    assert "PASSED        test_softmax" in run.stdout and "passed: True" in run.stdout
    assert run.stdout.count("PASSED        test_softmax") == 3
    assert "<check of" not in run.stdout


def test_in_a_kernel_a_cell_is_named_by_its_place_in_the_notebook(release: Path,
                                                                   tmp_path: Path) -> None:
    wrong = "def my_softmax(x):\n    return x[5]"  # an IndexError, raised in the kernel's cell
    learner = answered(release, tmp_path / "learner.ipynb", softmax=wrong)
    script = textwrap.dedent(f"""
        from IPython.core.interactiveshell import InteractiveShell
        shell = InteractiveShell.instance()
        shell.run_cell("import numpy as np\\nimport teachflow as tfl", store_history=True)
        shell.run_cell({wrong!r}, store_history=True)
        shell.run_cell("tfl.grading.check({str(learner)!r})", store_history=True)
    """)
    run = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=tmp_path, timeout=60)
    assert "raised at cell 3 (grade_id 'softmax'), line 2:  return x[5]" in run.stdout, \
        run.stdout + run.stderr
    assert "In[" not in run.stdout  # (the kernel's count for the same cell: never both)


def test_the_command_exits_0_only_when_every_visible_test_passes(release: Path,
                                                                 tmp_path: Path) -> None:
    master_run = teachflow_command("check", str(tmp_path / "softmax.ipynb"))
    assert master_run.returncode == 0, master_run.stdout + master_run.stderr
    stub_run = teachflow_command("check", str(release))
    assert stub_run.returncode == 1 and "NOT DONE YET" in stub_run.stdout
    (tmp_path / "not.ipynb").write_text("{")
    broken = teachflow_command("check", str(tmp_path / "not.ipynb"))
    assert broken.returncode == 2 and "not.ipynb is not valid JSON" in broken.stderr
    assert teachflow_command("check").returncode == 2  # argparse: a notebook is needed
    script = Path(sys.executable).with_name("teachflow")
    if script.exists():  # the console script, where the package is installed with it
        run = subprocess.run([str(script), "check", str(release)], capture_output=True,
                             text=True, timeout=60)
        assert run.returncode == 1 and "NOT DONE YET" in run.stdout


def test_a_notebook_with_magics_is_checked_as_a_kernel_runs_it(tmp_path: Path) -> None:
    cells = [given("setup", "%load_ext teachflow\nimport teachflow as tfl\n"
                            "x = tfl.tensor([1.0, -2.0])"),
             solution("relu", "%%compile --no-show\n### BEGIN SOLUTION\nh = x.relu()\n"
                              "### END SOLUTION"),
             checks("test_relu", "def test_relu():\n    assert h.numpy().tolist() == [1.0, 0.0]")]
    path = write(tmp_path / "magic.ipynb", cells)
    run = teachflow_command("check", str(path))
    assert run.returncode == 0, run.stdout + run.stderr


def test_five_exercises_are_checked_from_a_terminal(tmp_path: Path) -> None:
    # (bench/check.py times it)
    notebook = five_exercises(tmp_path)
    run = teachflow_command("check", str(notebook))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "All 5 test cells pass their visible tests" in run.stdout


def test_a_cell_of_hidden_tests_only_is_not_called_passed(tmp_path: Path) -> None:
    cells = [solution("answer", "### BEGIN SOLUTION\nANSWER = 42\n### END SOLUTION"),
             checks("test_answer", "def test_seen():\n    assert isinstance(ANSWER, int)"),
             checks("test_exact", "### BEGIN HIDDEN TESTS\ndef test_exact():\n"
                                  "    assert ANSWER == 42\n### END HIDDEN TESTS")]
    release = assign(write(tmp_path / "m.ipynb", cells), tmp_path / "out", verify=False).release
    learner = answered(release, tmp_path / "learner.ipynb", answer="ANSWER = 41")
    text = check_notebook(learner).text()
    assert "PASSED        test_answer (1 point): 1 test" in text
    assert "HIDDEN        test_exact (1 point): no visible tests; grading runs hidden ones" in text
