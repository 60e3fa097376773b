"""Exercises in notebooks: instructors write them, learners check them, pytest grades them.

An exercise is a *master* notebook with the answers in it, marked as nbgrader marks cells
(otter reads the same marks): solution cells (the answer between ``### BEGIN SOLUTION`` and
``### END SOLUTION``), test cells (pytest functions and the points they share, instructor-only
tests between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``) and locked cells
(given code). Three commands make a course of it::

    teachflow assign softmax.ipynb --out build   # build/release/softmax.ipynb for learners,
                                                 # build/grading/ for the instructor only
    teachflow check softmax.ipynb                # a learner runs the visible tests
    teachflow grade submissions/ --bundle build/grading --out results --jobs 2
    teachflow gradescope build/grading --out autograder.zip
    teachflow export results --canvas roster.csv --column Softmax --out canvas.csv
    teachflow similarity submissions/ --bundle build/grading --out similarity.html

and, in the notebook, ``tfl.grading.check()``. Grading runs the learner's code in a sandboxed
worker and the instructor's tests in a trusted process; between them, only plain data. A check
takes the same route without the walls, so what it says is what grading gives.

The chapters, in reading order:

- `notebook`: a notebook file as JSON cells, and the role nbgrader's marks give each cell;
- `cells`: a code cell read without running it: its Python, the names it defines and uses;
- `regions`: the marked regions, and the stub that replaces an answer;
- `testcell`: a test cell's tests run by pytest itself (parametrize, fixtures, marks);
- `credit`: partial credit: a cell's points shared by its tests, ``@tfl.grading.points(n)``;
- `authoring`: the rules a master keeps, and the notebook learners get;
- `bundle`: the grading bundle's format (``manifest.json``), written and loaded;
- `explain`: values in plain words, and how two values differ;
- `asserts`: pytest's trick: asserts that keep their values when they fail;
- `failures`: why a test did not pass, in a sentence, with the line it came from;
- `shell`: IPython as a notebook's kernel sets it up (magics such as ``%matplotlib``);
- `runner`: the learner's cells run as a kernel would; each test cell's tests at its place;
- `seeds`: each test starts from fixed seeds, on both sides of the wall;
- `wire`: plain data across the sandbox's wall, and the messages that carry it;
- `sandbox`: how a worker is walled in (bubblewrap, a user id of its own, limits);
- `worker`: the learner's code, answering the tests' calls (gradients included);
- `submission`: the worker seen from the tests: started, timed, restarted, on a budget;
- `remote`: proxies for the learner's names; errors, warnings and gradients across the wall;
- `judge`: one notebook judged by the one route of check and grade;
- `check`: ``teachflow check`` and ``tfl.grading.check()``, and the report they print;
- `assign`: ``teachflow assign``, the master checked, graded, and both folders written;
- `deadlines`: due dates, submission times and late penalties;
- `feedback`: ``feedback.html``, the learner's own report of a grade;
- `grade`: ``teachflow grade``: a class in parallel, results.json and grades.csv;
- `cluster`: ``teachflow grade --scheduler``: the same grading as tasks of a Dask cluster;
- `gradescope`: ``teachflow gradescope``: the same grading as a Gradescope autograder;
- `canvas`: ``teachflow export``: the grades as a file Canvas's gradebook imports;
- `similarity`: ``teachflow similarity``: pairs of answers alike, by winnowed fingerprints;
- `sidebyside`: the similarity report, each pair's matching lines side by side;
- `cli`: the ``teachflow`` command and its subcommands.
"""

from teachflow.grading.assign import Assignment, assign
from teachflow.grading.bundle import Bundle, BundleCell, load_bundle
from teachflow.grading.check import Report, check, check_notebook
from teachflow.grading.credit import points
from teachflow.grading.grade import Graded, grade
from teachflow.grading.gradescope import autograder
from teachflow.grading.notebook import AuthoringError, NotebookError

__all__ = [
    "Assignment",
    "AuthoringError",
    "Bundle",
    "BundleCell",
    "Graded",
    "NotebookError",
    "Report",
    "assign",
    "autograder",
    "check",
    "check_notebook",
    "grade",
    "load_bundle",
    "points",
]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
