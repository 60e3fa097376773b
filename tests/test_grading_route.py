"""What a learner's check says is what grading gives: one route for both.

`teachflow check`, `tfl.grading.check()` in a kernel and `teachflow grade` run the tests the
same way (the learner's code in a worker, the tests beside it through proxies), so for every
test master (and every shipped exercise: tests/test_exercises.py) they give the same verdict
per test, on the answers and on the stubs. The idioms that once meant one thing beside the
learner's code and another across the wall are checked one by one: gradients through the
learner's functions, warnings, parametrize and fixtures, a cell that raises after it defined
the answer, magics.
"""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import pytest
from grading_notebooks import answered, checks, five_exercises, given, master, solution, write

from teachflow.grading import assign, check_notebook, load_bundle, sandbox
from teachflow.grading.check import check_namespace
from teachflow.grading.failures import PASSED
from teachflow.grading.judge import grade_submission
from teachflow.grading.notebook import AuthoringError, cells_of, read_notebook

ISOLATION, _ = sandbox.find_isolation(allow_none=True)  # bubblewrap where it works

pytestmark = pytest.mark.filterwarnings("ignore::teachflow.RetracingWarning")

IDIOMS = {
    "softplus": ("""
        def softplus(x):
            ### BEGIN SOLUTION
            return tfl.log(1 + tfl.exp(x))
            ### END SOLUTION
        """, """
        def sigmoid(x):
            return 1 / (1 + np.exp(-x))

        def test_a_gradient_flows_through_the_learners_function():
            x = tfl.tensor([-1.0, 0.0, 2.0])
            g = tfl.grad(lambda t: softplus(t).sum())(x)
            np.testing.assert_allclose(g.numpy(), sigmoid(x.numpy()), rtol=1e-6)

        def test_a_gradient_of_a_gradient_too():
            x = tfl.tensor([0.5, -1.0])
            gg = tfl.grad(lambda t: tfl.grad(lambda u: softplus(u).sum())(t).sum())(x)
            s = sigmoid(x.numpy())
            np.testing.assert_allclose(gg.numpy(), s * (1 - s), rtol=1e-5)

        def test_backward_fills_grad_through_it():
            x = tfl.tensor([1.0, 2.0], requires_grad=True)
            softplus(x * 2).sum().backward()
            np.testing.assert_allclose(x.grad.numpy(), 2 * sigmoid(np.array([2.0, 4.0])),
                                       rtol=1e-6)

        @pytest.mark.parametrize("value", [-3.0, 0.0, 3.0])
        def test_parametrized(value):
            got = softplus(tfl.tensor([value])).numpy()[0]
            assert got == pytest.approx(np.log1p(np.exp(value)), rel=1e-5)

        @pytest.fixture
        def inputs():
            return tfl.tensor([0.0, 1.0])

        def test_fixtures(tmp_path, inputs):
            np.save(tmp_path / "x.npy", softplus(inputs).numpy())
            assert np.load(tmp_path / "x.npy")[0] == pytest.approx(np.log(2), rel=1e-6)
        """),
    "noisy": ("""
        import warnings

        def noisy(x):
            ### BEGIN SOLUTION
            warnings.warn("careful: big numbers", RuntimeWarning)
            return x
            ### END SOLUTION
        """, """
        def test_a_warning_crosses():
            with pytest.warns(RuntimeWarning, match="careful"):
                assert noisy(1) == 1

        def test_an_error_keeps_its_kind():
            with pytest.raises(TypeError):
                noisy()
        """),
    "double": ("""
        def double(x):
            ### BEGIN SOLUTION
            return 2 * x
            ### END SOLUTION
        """, """
        def test_double():
            assert double(3) == 6
        """),
}

#: The learner's answers: right, with a magic first and scratch work that raises last.
LEARNER = {
    "softplus": "def softplus(x):\n    return tfl.log(1 + tfl.exp(x))",
    "noisy": "import warnings\n\ndef noisy(x):\n    warnings.warn('careful: big numbers', "
             "RuntimeWarning)\n    return x",
    "double": "%matplotlib inline\n%pip install numpy\nimport matplotlib.pyplot as plt\n\n"
              "def double(x):\n    return 2 * x\n\nplt.plot([1, 2])\n"
              "print(double(undefined_name))  # scratch work that raises",
}


def idioms_master(folder: Path) -> Path:
    cells = [given("setup", "import numpy as np\nimport pytest\nimport teachflow as tfl")]
    for grade_id, (answer, tests) in IDIOMS.items():
        cells += [solution(grade_id, answer), checks(f"test_{grade_id}", tests, points=2)]
    return write(folder / "idioms.ipynb", cells)


def checked(path: Path) -> dict[tuple[str, str], str]:
    """Each visible test's verdict by `teachflow check` ("passed" or "failed")."""
    return {(result.cell.grade_id, test.name): _verdict(test.status)
            for result in check_notebook(path).results for test in result.tests}


def checked_in_a_kernel(path: Path) -> dict[tuple[str, str], str]:
    """The same by ``tfl.grading.check()``, in an IPython shell that ran the notebook's cells
    as a kernel runs them (one after the other, an error stopping only its cell)."""
    from teachflow.grading.shell import NotebookShell

    shell = NotebookShell.instance()
    try:
        for cell in cells_of(read_notebook(path)):
            if cell.cell_type == "code" and cell.role != "tests":
                with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(
                        io.StringIO()):
                    shell.run_cell(cell.source)
        return {(result.cell.grade_id, test.name): _verdict(test.status)
                for result in check_namespace(path, shell.user_ns).results
                for test in result.tests}
    finally:
        NotebookShell.clear_instance()


def graded(path: Path, bundle: Path) -> dict[tuple[str, str], str]:
    """Each test's verdict when graded (sandboxed where this machine allows)."""
    judged = grade_submission(path, load_bundle(bundle), ISOLATION, sandbox.Limits())
    return {(test.cell, test.name): _verdict(test.status) for test in judged.tests}


def _verdict(status: str) -> str:
    return "passed" if status == PASSED else "failed"


def agree(path: Path, bundle: Path) -> dict[tuple[str, str], str]:
    """Check and grade's verdicts on `path`, asserted equal test by test (the visible ones)."""
    check, grade = checked(path), graded(path, bundle)
    assert check, "no visible tests were checked"
    assert {test: grade[test] for test in check} == check
    return grade


@pytest.fixture(scope="module")
def idioms(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    folder = tmp_path_factory.mktemp("idioms")
    done = assign(idioms_master(folder), folder / "build")
    learner = answered(done.release, folder / "learner.ipynb", **LEARNER)
    return done.release, done.grading, learner


def test_every_idiom_passes_for_a_right_answer_checked_and_graded(idioms) -> None:
    _, bundle, learner = idioms
    grade = agree(learner, bundle)
    assert set(grade.values()) == {"passed"}, grade
    assert len(grade) == 8
    assert set(checked_in_a_kernel(learner).values()) == {"passed"}


def test_the_stubs_get_the_same_verdicts_checked_and_graded(idioms) -> None:
    release, bundle, _ = idioms
    grade = agree(release, bundle)
    # a stub raises NotImplementedError: only the test of the missing argument passes
    assert [test for test, verdict in grade.items() if verdict == "passed"] == [
        ("test_noisy", "test_an_error_keeps_its_kind")]


def test_assign_grades_the_master_and_refuses_one_without_full_marks(tmp_path: Path) -> None:
    wrong = {"double": (IDIOMS["double"][0], "def test_double():\n"
                        "    assert double(3) == 6\n### BEGIN HIDDEN TESTS\n"
                        "def test_double_twice():\n    assert double(double(1)) == 5\n"
                        "### END HIDDEN TESTS")}
    cells = [given("setup", "import numpy as np")]
    for grade_id, (answer, tests) in wrong.items():
        cells += [solution(grade_id, answer), checks(f"test_{grade_id}", tests)]
    path = write(tmp_path / "wrong.ipynb", cells)
    with pytest.raises(AuthoringError, match=r"does not get full marks.*test_double_twice "
                                             r"\(hidden\).*assert double\(double\(1\)\) == 5"):
        assign(path, tmp_path / "out")
    assert not (tmp_path / "out" / "grading").exists()  # nothing written
    assert assign(path, tmp_path / "unchecked", verify=False).test_cells == 1


@pytest.mark.parametrize(("source", "refused"), [
    ("def test_x(model):\n    pass", r"test_x\(model\): no fixture provides 'model'"),
    ("class TestSoftmax:\n    def test_x(self):\n        pass", r"a test class, TestSoftmax"),
])
def test_assign_refuses_what_grading_cannot_run_by_name(tmp_path: Path, source: str,
                                                        refused: str) -> None:
    cells = [solution("double", IDIOMS["double"][0]), checks("test_double", source)]
    with pytest.raises(AuthoringError, match=refused):
        assign(write(tmp_path / "m.ipynb", cells), tmp_path / "out")


def test_check_and_grade_agree_on_every_test_master_answered_and_stubbed(tmp_path: Path) -> None:
    """The test masters of the grading tests (tests/grading_notebooks.py) and the idioms; the
    shipped exercises are compared the same way in tests/test_exercises.py, which runs each
    once for all its tests."""
    for path in (master(tmp_path), five_exercises(tmp_path), idioms_master(tmp_path)):
        out = tmp_path / "build" / path.stem
        done = assign(path, out, verify=False)
        grade = agree(path, done.grading)  # the master: its own answers
        assert set(grade.values()) == {"passed"}, (path.name, grade)
        stub = agree(done.release, done.grading)
        assert "failed" in stub.values(), path.name
