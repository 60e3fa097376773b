"""Exercise notebooks for the grading tests, built with nbformat as an instructor's tools would.

`master` is a small exercise (a softmax and its tests, one hidden); `five_exercises` the
notebook of five exercises the speed goal of ``teachflow check`` is measured on.
"""

from __future__ import annotations

import json
import textwrap
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook


def marks(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = False,
          points: float = 0) -> dict:
    return {"nbgrader": {"grade_id": grade_id, "solution": solution, "grade": grade,
                         "locked": locked, "points": points, "schema_version": 3}}


def code(source: str) -> str:
    return textwrap.dedent(source).strip("\n")


def solution(grade_id: str, source: str) -> nbformat.NotebookNode:
    return new_code_cell(code(source), metadata=marks(grade_id, solution=True))


def checks(grade_id: str, source: str, points: float = 1) -> nbformat.NotebookNode:
    return new_code_cell(code(source), metadata=marks(grade_id, grade=True, locked=True,
                                                      points=points))


def given(grade_id: str, source: str) -> nbformat.NotebookNode:
    return new_code_cell(code(source), metadata=marks(grade_id, locked=True))


def answered(release: Path, out: Path, **answers: str) -> Path:
    """The released notebook with the solution cells named by grade_id answered, as a learner
    would (`answers` dedented), written to `out`."""
    notebook = json.loads(release.read_text())
    for cell in notebook["cells"]:
        grade_id = cell["metadata"].get("nbgrader", {}).get("grade_id")
        if grade_id in answers:
            cell["source"] = textwrap.dedent(answers[grade_id]).strip()
    out.write_text(json.dumps(notebook))
    return out


def write(path: Path, cells: list) -> Path:
    notebook = new_notebook(cells=cells)
    notebook.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                       "language": "python"}
    nbformat.write(notebook, path)
    return path


SOFTMAX = """
def my_softmax(x):
    \"\"\"Softmax of a 1-d array, stable for large values.\"\"\"
    ### BEGIN SOLUTION
    e = np.exp(x - x.max())
    return e / e.sum()
    ### END SOLUTION
"""

SOFTMAX_TESTS = """
def test_shape():
    assert my_softmax(np.array([1.0, 2.0, 3.0])).shape == (3,)

def test_sums_to_one():
    np.testing.assert_allclose(my_softmax(np.array([1.0, 2.0, 3.0])).sum(), 1.0)
### BEGIN HIDDEN TESTS

def test_large_values():
    assert np.isfinite(my_softmax(np.array([1000.0, 0.0]))).all()
### END HIDDEN TESTS
"""


def master_cells() -> list:
    return [
        new_markdown_cell("# Softmax\nWrite `my_softmax`."),
        given("setup", "import numpy as np"),
        solution("softmax", SOFTMAX),
        checks("test_softmax", SOFTMAX_TESTS, points=3),
    ]


def master(folder: Path, name: str = "softmax.ipynb") -> Path:
    return write(folder / name, master_cells())


EXERCISES = {
    "relu": ("""
        def my_relu(x):
            ### BEGIN SOLUTION
            return tfl.maximum(x, tfl.zeros(x.shape))
            ### END SOLUTION
        """, """
        def test_relu_values():
            got = my_relu(tfl.tensor([-1.0, 2.0])).numpy()
            np.testing.assert_allclose(got, [0.0, 2.0])

        def test_relu_shape():
            assert my_relu(tfl.zeros((2, 3))).shape == (2, 3)
        """),
    "tanh_grad": ("""
        def tanh_grad(x):
            ### BEGIN SOLUTION
            return 1 - x.tanh() ** 2
            ### END SOLUTION
        """, """
        def test_tanh_grad_matches_autodiff():
            x = tfl.tensor([0.5, -1.0, 2.0])
            expected = tfl.grad(lambda t: t.tanh().sum())(x)
            np.testing.assert_allclose(tanh_grad(x).numpy(), expected.numpy(), rtol=1e-5)
        """),
    "mse": ("""
        def mse(a, b):
            ### BEGIN SOLUTION
            return ((a - b) ** 2).mean()
            ### END SOLUTION
        """, """
        def test_mse_value():
            assert abs(mse(tfl.tensor([1.0, 3.0]), tfl.tensor([1.0, 1.0])).item() - 2.0) < 1e-6
        """),
    "staged": ("""
        @tfl.function
        def double_sum(x):
            ### BEGIN SOLUTION
            return (x * 2).sum()
            ### END SOLUTION
        """, """
        def test_staged_value():
            assert double_sum(tfl.ones((4,))).item() == 8.0

        def test_traced_once():
            double_sum(tfl.ones((5,)))
            double_sum(tfl.ones((5,)))
            assert double_sum.trace_count <= 2
        """),
    "softmax_rows": ("""
        def softmax_rows(x):
            ### BEGIN SOLUTION
            return tfl.softmax(x, axis=-1)
            ### END SOLUTION
        """, """
        def test_rows_sum_to_one():
            got = softmax_rows(tfl.randn(4, 3)).numpy().sum(axis=1)
            np.testing.assert_allclose(got, np.ones(4), rtol=1e-5)
        """),
}


def five_exercises(folder: Path, name: str = "five.ipynb") -> Path:
    cells = [given("setup", "import numpy as np\nimport teachflow as tfl")]
    for grade_id, (answer, tests_source) in EXERCISES.items():
        cells += [new_markdown_cell(f"## {grade_id}"), solution(grade_id, answer),
                  checks(f"test_{grade_id}", tests_source, points=2)]
    return write(folder / name, cells)
