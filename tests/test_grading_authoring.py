"""teachflow assign: a master notebook checked, the learner's copy and the grading bundle.

Real notebooks, written with nbformat into temporary folders: the release keeps what learners
need (signatures, visible tests, nbgrader's marks) and nothing they must not see (answers,
hidden tests, outputs); the bundle holds what grading needs; a master that breaks a rule is
refused with the cell named, and nothing is written.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest
from grading_notebooks import SOFTMAX_TESTS, checks, given, master, master_cells, solution, write
from nbformat.v4 import new_code_cell, new_markdown_cell, new_output

import teachflow as tfl
from teachflow.grading import AuthoringError, NotebookError, assign, load_bundle

ROOT = Path(__file__).resolve().parents[1]
ANSWER = "e = np.exp(x - x.max())"


@pytest.fixture
def assigned(tmp_path: Path):
    cells = master_cells()
    cells[2].outputs = [new_output("stream", text="an answer's output\n")]
    cells[2].execution_count = 4
    notebook_path = write(tmp_path / "softmax.ipynb", cells)
    notebook = nbformat.read(notebook_path, as_version=4)
    notebook.metadata["widgets"] = {"state": "a stepper's saved state"}
    nbformat.write(notebook, notebook_path)
    return assign(notebook_path, tmp_path / "build")


def test_the_release_stubs_answers_keeping_signatures_and_drops_hidden_tests(assigned) -> None:
    assert assigned.release.name == "softmax.ipynb" and assigned.release.parent.name == "release"
    release = nbformat.read(assigned.release, as_version=4)
    nbformat.validate(release)
    stub = release.cells[2].source
    assert stub == ('def my_softmax(x):\n'
                    '    """Softmax of a 1-d array, stable for large values."""\n'
                    '    # YOUR CODE HERE\n'
                    '    raise NotImplementedError()')
    visible = release.cells[3].source
    assert "def test_shape" in visible and "def test_sums_to_one" in visible
    assert "test_large_values" not in visible and "HIDDEN" not in visible
    text = assigned.release.read_text()
    assert ANSWER not in text and "an answer's output" not in text and "stepper" not in text
    assert all(cell.get("outputs", []) == [] and cell.get("execution_count") is None
               for cell in release.cells if cell.cell_type == "code")


def test_the_release_keeps_the_marks_and_locks_given_and_test_cells(assigned) -> None:
    cells = nbformat.read(assigned.release, as_version=4).cells
    marks = [cell.metadata.get("nbgrader", {}) for cell in cells]
    assert [m.get("grade_id") for m in marks] == [None, "setup", "softmax", "test_softmax"]
    assert all(m["schema_version"] == 3 for m in marks[1:])
    assert marks[2]["solution"] and not marks[2]["locked"] and marks[3]["points"] == 3
    assert cells[1].metadata.editable is False and cells[3].metadata.editable is False
    assert "editable" not in cells[2].metadata and cells[2].metadata.deletable is False


def test_the_bundle_holds_every_test_and_the_points_but_no_answer(assigned) -> None:
    files = sorted(p.name for p in assigned.grading.iterdir())
    assert files == ["README.md", "manifest.json"]
    assert ANSWER not in (assigned.grading / "manifest.json").read_text()
    bundle = load_bundle(assigned.grading)
    assert bundle.notebook == "softmax.ipynb" and bundle.points == {"test_softmax": 3.0}
    assert bundle.total_points == 3.0 == assigned.total_points
    (cell,) = bundle.test_cells
    assert cell.index == 3 and cell.source.strip() == SOFTMAX_TESTS.strip()
    assert cell.tests == ("test_shape", "test_sums_to_one", "test_large_values")
    assert cell.hidden_tests == ("test_large_values",)
    assert cell.uses == ("my_softmax", "np")
    roles = {c.grade_id: (c.role, c.defines) for c in bundle.cells}
    assert roles["setup"] == ("locked", ("np",))
    assert roles["softmax"] == ("solution", ("my_softmax",))
    assert "raise NotImplementedError()" in bundle.cells[2].source


def test_a_solution_cell_without_markers_is_all_answer_and_markdown_answers_too(
        tmp_path: Path) -> None:
    cells = [solution("answer", "x = 42"),
             new_markdown_cell("Because ...", metadata={"nbgrader": {
                 "grade_id": "why", "solution": True, "grade": False, "locked": False,
                 "schema_version": 3}}),
             checks("test_answer", "def test_x():\n    assert x == 42")]
    done = assign(write(tmp_path / "m.ipynb", cells), tmp_path / "out")
    release = nbformat.read(done.release, as_version=4).cells
    assert release[0].source == "# YOUR CODE HERE\nraise NotImplementedError()"
    assert release[1].source == "YOUR ANSWER HERE"


def test_assigning_again_replaces_the_bundle_but_not_another_masters(tmp_path: Path) -> None:
    path = master(tmp_path)
    assign(path, tmp_path / "out")
    assign(path, tmp_path / "out")  # the same master: its bundle is written again
    other = master(tmp_path, "other.ipynb")
    with pytest.raises(tfl.GradingError, match=r"bundle of softmax\.ipynb"):
        assign(other, tmp_path / "out")
    (tmp_path / "mine").mkdir()
    (tmp_path / "mine" / "grading").mkdir()
    (tmp_path / "mine" / "grading" / "notes.txt").write_text("mine")
    with pytest.raises(tfl.GradingError, match="not a grading bundle"):
        assign(path, tmp_path / "mine")


def _with(cells_change) -> list:
    cells = master_cells()
    cells_change(cells)
    return cells


def _source(index: int, source: str):
    def change(cells: list) -> None:
        cells[index].source = source
    return change


def _marks(index: int, **marks):
    def change(cells: list) -> None:
        for key, value in marks.items():
            if value is None:
                cells[index].metadata.nbgrader.pop(key, None)
            else:
                cells[index].metadata.nbgrader[key] = value
    return change


REFUSED = {
    "duplicate grade_id": (_marks(3, grade_id="softmax"),
                           r"cell 4 \(grade_id 'softmax'\) has the same grade_id as cell 3"),
    "missing grade_id": (_marks(2, grade_id=None), r"cell 3 is marked as a solution cell but "
                                                   r"has no grade_id"),
    "grade_id with a space": (_marks(2, grade_id="my answer"), r"cell 3 .* not letters"),
    "solution region not closed": (
        _source(2, "def f(x):\n    ### BEGIN SOLUTION\n    return x\n"),
        r"cell 3 \(grade_id 'softmax'\): the solution region opened at line 2 is never closed"),
    "end without begin": (
        _source(2, "def f(x):\n    return x\n    ### END SOLUTION\n"),
        r"cell 3 \(grade_id 'softmax'\): line 3 closes a solution region that no"),
    "nested begin": (
        _source(2, "### BEGIN SOLUTION\nx = 1\n### BEGIN SOLUTION\ny = 2\n### END SOLUTION\n"),
        r"cell 3 \(grade_id 'softmax'\): line 3 opens a solution region inside the one opened"
        r" at line 1"),
    "hidden tests not closed": (
        _source(3, "def test_a():\n    assert True\n### BEGIN HIDDEN TESTS\ndef test_b():\n"
                   "    assert True\n"),
        r"cell 4 \(grade_id 'test_softmax'\): the hidden-test region opened at line 3 is "
        r"never closed"),
    "test cell with no test": (_source(3, "assert my_softmax(np.ones(3)).shape == (3,)"),
                               r"cell 4 \(grade_id 'test_softmax'\) is a test cell with no test"),
    "test cell without points": (_marks(3, points=None), r"cell 4 .* with points None"),
    "answer in a cell that is no solution": (
        _source(1, "import numpy as np\n### BEGIN SOLUTION\nsecret = 1\n### END SOLUTION"),
        r"cell 2 \(grade_id 'setup'\) has a '### BEGIN SOLUTION' region but is not a solution"),
    "hidden tests in a cell that is no test": (
        _source(2, "### BEGIN HIDDEN TESTS\nx = 1\n### END HIDDEN TESTS"),
        r"cell 3 \(grade_id 'softmax'\) has a hidden-test region but is not a test cell"),
    "a master that does not parse": (_source(1, "import numpy as np)"),
                                     r"cell 2 \(grade_id 'setup'\) does not parse"),
    "a test left empty by removing the hidden ones": (
        _source(3, "def test_a():\n    ### BEGIN HIDDEN TESTS\n    assert True\n"
                   "    ### END HIDDEN TESTS\n"),
        r"cell 4 .* does not parse once its hidden tests are removed"),
    "nbgrader's older schema": (_marks(2, schema_version=1), r"cell 3 .* schema_version 1"),
}


@pytest.mark.parametrize("case", list(REFUSED))
def test_a_master_that_breaks_a_rule_is_refused_naming_the_cell(case: str,
                                                                tmp_path: Path) -> None:
    change, message = REFUSED[case]
    path = write(tmp_path / "master.ipynb", _with(change))
    with pytest.raises(AuthoringError, match=message) as refused:
        assign(path, tmp_path / "out")
    assert isinstance(refused.value, tfl.TeachflowError)
    assert refused.value.op == "assign" and refused.value.hint
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("text", "message"), [
    ('{"cells": [', r"not valid JSON \(line 1, column 12"),
    ("[1, 2, 3]", "JSON but not a Jupyter notebook: the file holds a list"),
    ('{"nbformat": 4, "metadata": {}}', "JSON but not a Jupyter notebook: it has no list of"),
    ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code"}]}',
     "cell 1 has no text"),
    ('{"nbformat": 4, "nbformat_minor": 5, "metadata": {}, "cells": [{"cell_type": "code", '
     '"source": "", "metadata": {}}]}', "not a valid notebook"),  # no outputs: the schema says
])
def test_a_file_that_is_not_a_notebook_is_refused(text: str, message: str,
                                                  tmp_path: Path) -> None:
    path = tmp_path / "broken.ipynb"
    path.write_text(text)
    with pytest.raises(NotebookError, match=message) as refused:
        assign(path, tmp_path / "out")
    assert refused.value.hint and not (tmp_path / "out").exists()


def test_a_bundle_that_is_not_one_is_refused(tmp_path: Path) -> None:
    with pytest.raises(tfl.GradingError, match=r"no readable manifest\.json"):
        load_bundle(tmp_path)
    (tmp_path / "manifest.json").write_text('{"format": "teachflow-grading-bundle", '
                                            '"version": 99}')
    with pytest.raises(tfl.GradingError, match="version 99"):
        load_bundle(tmp_path)
    (tmp_path / "manifest.json").write_text(json.dumps({
        "format": "teachflow-grading-bundle", "version": 1, "notebook": "a.ipynb",
        "cells": [{"index": 0, "cell_type": "code", "role": "tests", "grade_id": "t",
                   "source": "", "points": "many"}]}))
    with pytest.raises(tfl.GradingError, match="cell 1 of its manifest has a bad 'points'"):
        load_bundle(tmp_path)


def test_the_command_line_assigns_and_refuses_with_exit_status_2(tmp_path: Path) -> None:
    broken = write(tmp_path / "broken.ipynb", [given("setup", "x = 1"), given("setup", "y = 2")])
    run = subprocess.run([sys.executable, "-m", "teachflow", "assign", str(broken), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert run.returncode == 2, run.stderr
    assert "teachflow assign: assign: cell 2 (grade_id 'setup') has the same grade_id as cell 1"\
        in run.stderr
    assert "hint:" in run.stderr and not (tmp_path / "out").exists()
    assert "  at " not in run.stderr  # (the command line has no source line of the user's)
    cells = [*master_cells(), new_code_cell("print('scratch')")]
    run = subprocess.run([sys.executable, "-m", "teachflow", "assign",
                          str(write(tmp_path / "ok.ipynb", cells)), "--out",
                          str(tmp_path / "out")], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert run.returncode == 0, run.stderr
    assert (tmp_path / "out" / "release" / "ok.ipynb").is_file()
    assert "1 test cell, 3 points" in run.stdout
