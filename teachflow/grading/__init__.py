"""Exercises in notebooks: instructors write them, learners check them, pytest grades them.

An exercise is a *master* notebook with the answers in it, marked as nbgrader marks cells
(otter reads the same marks): solution cells (the answer between ``### BEGIN SOLUTION`` and
``### END SOLUTION``), test cells (pytest functions and the points they share, instructor-only
tests between ``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``) and locked cells
(given code). Three commands make a course of it::

    teachflow assign softmax.ipynb --out build   # build/release/softmax.ipynb for learners,
                                                 # build/grading/ for the instructor only
    teachflow check softmax.ipynb                # a learner runs the visible tests

and, in the notebook, ``tfl.grading.check()``.

The chapters, in reading order:

- `notebook`: a notebook file as JSON cells, and the role nbgrader's marks give each cell;
- `cells`: a code cell read without running it: its Python, the names it defines and uses;
- `regions`: the marked regions, and the stub that replaces an answer;
- `authoring`: the rules a master keeps, and the notebook learners get;
- `bundle`: the grading bundle's format (``manifest.json``), written and loaded;
- `assign`: ``teachflow assign``, the master checked and both folders written;
- `explain`: values in plain words, and how two values differ;
- `rewrite`: pytest's trick: asserts that keep their values when they fail;
- `failures`: why a test did not pass, in a sentence, with the line it came from;
- `runner`: the learner's cells run as a fresh kernel would, then each test cell's tests;
- `check`: ``teachflow check`` and ``tfl.grading.check()``, and the report they print;
- `cli`: the ``teachflow`` command and its subcommands.
"""

from teachflow.grading.assign import Assignment, assign
from teachflow.grading.bundle import Bundle, BundleCell, load_bundle
from teachflow.grading.check import Report, check, check_notebook
from teachflow.grading.notebook import AuthoringError, NotebookError

__all__ = [
    "Assignment",
    "AuthoringError",
    "Bundle",
    "BundleCell",
    "NotebookError",
    "Report",
    "assign",
    "check",
    "check_notebook",
    "load_bundle",
]
