"""teachflow grade under attack: one real malicious submission per attack, one grading run.

A class's submissions are graded together, so the attacks are too: the module's fixture builds
a master of two exercises (``softmax``, 3 points, with a hidden test; ``relu``, 2 points),
assigns it, writes every malicious submission next to honest ones and grades them all in ONE
``teachflow grade --jobs 2 --timeout 10 --memory 1024`` run. Each test then reads its own
submission's ``results.json`` and row of ``grades.csv``: the cheated cell scores what the
learner's code earned (nothing, or the tests it passes honestly: a cell's points are shared by
its tests), an honest cell of the same notebook is still graded, the message says what
happened, and the honest submissions of the same run get full marks.

Attacks run inside the learner's functions (when a test calls them) and/or at the top level
of their cells. Those that only a sandbox can stop (a fork bomb, reading the bundle or another
submission, writing outside the worker's folder) run only when grading is isolated; with
``TEACHFLOW_TEST_NO_ISOLATION=1`` (or where no sandbox works) the run uses ``--no-isolation``
and their tests skip.
"""

from __future__ import annotations

import csv
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from grading_notebooks import checks, given, solution, write
from nbformat.v4 import new_markdown_cell

ROOT = Path(__file__).resolve().parents[1]
TIMEOUT, MEMORY, JOBS = 10, 1024, 2
CELLS = {"test_softmax": 3.0, "test_relu": 2.0}  # graded cell -> points
TOTAL = sum(CELLS.values())
TEST_NAMES = {"test_softmax": ("test_shape", "test_sums_to_one", "test_large_values"),
              "test_relu": ("test_relu_scalar", "test_relu_tensor")}


def _grade_missing() -> str | None:
    """Why ``teachflow grade`` cannot be tested yet (None once it exists)."""
    try:
        import teachflow.grading as grading
        from teachflow.grading.cli import SUBCOMMANDS
    except ImportError as error:  # pragma: no cover - grading's own dependencies missing
        return f"teachflow.grading does not import ({error})"
    if "grade" not in SUBCOMMANDS and not hasattr(grading, "grade"):
        return "teachflow grade is not there yet (no `grade` in teachflow.grading)"
    if "grade" not in SUBCOMMANDS:
        return "the teachflow command has no `grade` subcommand yet"
    return None


@functools.cache
def sandbox_missing() -> str | None:
    """Why grading cannot isolate the learner's code here (None when it can): asked of
    teachflow's own sandbox, which starts a worker to find out (so asked once, when needed)."""
    if os.environ.get("TEACHFLOW_TEST_NO_ISOLATION"):
        return "TEACHFLOW_TEST_NO_ISOLATION is set: grading runs with --no-isolation"
    from teachflow.core.errors import TeachflowError

    try:
        from teachflow.grading.sandbox import find_isolation
    except ImportError:
        return None if shutil.which("bwrap") else "no sandbox: bubblewrap is not installed"
    try:
        find_isolation(allow_none=False)
    except TeachflowError as error:
        return f"no sandbox: {error.message}"
    return None


def isolated() -> bool:
    return sandbox_missing() is None


GRADE_MISSING = _grade_missing()
pytestmark = pytest.mark.skipif(GRADE_MISSING is not None, reason=str(GRADE_MISSING))

# The hidden test carries a token no file of this repository holds (it is made when the module
# is imported): a submission that finds it has read the bundle or the master. Submissions
# name it in two halves, so their own files never hold it whole.
SECRET_A, SECRET_B = uuid.uuid4().hex[:10], uuid.uuid4().hex[:10]
SECRET = SECRET_A + SECRET_B


# --- the master -------------------------------------------------------------------------------

SETUP = "import numpy as np\nimport pytest\nimport teachflow as tfl"

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
    got = my_softmax(np.array([1.0, 2.0, 3.0]))
    np.testing.assert_allclose(got.sum(), 1.0)
    np.testing.assert_allclose(got, [0.09003057, 0.24472847, 0.66524096], rtol=1e-6)
### BEGIN HIDDEN TESTS

def test_large_values():
    # the instructor's note: @SECRET@
    got = my_softmax(np.array([1000.0, 0.0]))
    assert got.shape == (2,) and np.isfinite(got).all() and got[0] > 0.99
### END HIDDEN TESTS
"""

RELU = """
def my_relu(x):
    \"\"\"max(x, 0) of a float, or of each element of a tensor.\"\"\"
    ### BEGIN SOLUTION
    if isinstance(x, float):
        return max(x, 0.0)
    return tfl.maximum(x, tfl.zeros(x.shape))
    ### END SOLUTION
"""

RELU_TESTS = """
def test_relu_scalar():
    assert abs(my_relu(-2.0)) < 1e-9
    assert abs(my_relu(3.0) - 3.0) < 1e-9

def test_relu_tensor():
    got = my_relu(tfl.tensor([-1.0, 2.0]))
    assert got.numpy().tolist() == pytest.approx([0.0, 2.0])
"""


def two_exercises(folder: Path, name: str = "twice.ipynb") -> Path:
    return write(folder / name, [
        new_markdown_cell("# Two exercises\nWrite `my_softmax`, then `my_relu`."),
        given("setup", SETUP),
        solution("softmax", SOFTMAX),
        checks("test_softmax", SOFTMAX_TESTS.replace("@SECRET@", SECRET), points=3),
        solution("relu", RELU),
        checks("test_relu", RELU_TESTS, points=2),
    ])


# --- answers, honest and not ------------------------------------------------------------------

RIGHT = {"softmax": """
def my_softmax(x):
    shifted = np.exp(x - np.max(x))
    return shifted / np.sum(shifted)
""", "relu": """
def my_relu(x):
    return x * (x > 0)
"""}

WRONG_SOFTMAX = "np.full(x.shape[0] + 1, np.nan)"  # fails every softmax test

# Right, with the imports learners put at the top of their own cells (names the given cell
# binds too).
RIGHT_IMPORTS = {"softmax": "import numpy as np\nimport pytest\n" + RIGHT["softmax"],
                 "relu": "import teachflow as tfl\n" + RIGHT["relu"]}

# Right, but returning NumPy scalars (np.float64) where the master returns floats.
RIGHT_NUMPY = {"softmax": RIGHT["softmax"], "relu": """
def my_relu(x):
    if isinstance(x, float):
        return np.maximum(x, 0.0)
    return tfl.maximum(x, tfl.zeros(x.shape))
"""}
WRONG = {"softmax": f"""
def my_softmax(x):
    return {WRONG_SOFTMAX}
""", "relu": """
def my_relu(x):
    return x + 1.0
"""}

INFINITE_LOOP = f"""
import signal

for _signal in (signal.SIGTERM, signal.SIGINT, signal.SIGALRM, signal.SIGHUP, signal.SIGUSR1):
    try:
        signal.signal(_signal, signal.SIG_IGN)
    except (ValueError, OSError):
        pass


def my_softmax(x):
    if x.max() > 100:  # only the hidden test's input: one call hangs, not three
        while True:
            try:
                while True:
                    pass
            except BaseException:
                pass
    return {WRONG_SOFTMAX}
"""

OS_EXIT_CALL = """
import os


def my_softmax(x):
    os._exit(0)
"""

OS_EXIT_TOP = """
import os


def my_softmax(x):
    shifted = np.exp(x - np.max(x))
    return shifted / np.sum(shifted)


os._exit(0)
"""

SYS_EXIT_CALL = """
import sys


def my_softmax(x):
    sys.exit(0)
"""

SYS_EXIT_TOP = """
import sys


def my_softmax(x):
    shifted = np.exp(x - np.max(x))
    return shifted / np.sum(shifted)


sys.exit(0)
"""

FAKE_RESULTS = """
import json as _json

FAKE = _json.dumps({"score": 999.0, "execution_time": 0.01, "output": "FAKE: all tests passed",
                    "tests": [{"name": "test_softmax", "score": 999.0, "max_score": 3.0,
                               "status": "passed", "output": "", "visibility": "visible"}]})
FAKE_LINES = "test_shape PASSED\\ntest_sums_to_one PASSED\\ntest_large_values PASSED\\n" \\
             "PASSED        test_softmax (3 points): 3 tests\\n===== 5 passed in 0.01s =====\\n"
"""

ATEXIT = FAKE_RESULTS + f"""
import atexit
import os
import sys


def _fake_results():
    print(FAKE_LINES + FAKE)
    sys.stdout.flush()
    for fd in (1, 2):
        try:
            os.write(fd, (FAKE_LINES + FAKE + "\\n").encode())
        except OSError:
            pass
    for path in ("results.json", "../results.json", "results/results.json"):
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as file:
                file.write(FAKE)
        except OSError:
            pass
    os._exit(0)


atexit.register(_fake_results)


def my_softmax(x):
    atexit.register(_fake_results)
    return {WRONG_SOFTMAX}
"""

PATCH_BUILTINS = f"""
import builtins


class _NotAnAssertion(Exception):
    pass


def _patch():
    builtins.AssertionError = _NotAnAssertion
    builtins.isinstance = lambda obj, kind: True
    builtins.issubclass = lambda kind, other: True
    builtins.all = lambda values: True
    builtins.any = lambda values: True
    builtins.abs = lambda value: 0.0
    builtins.len = lambda value: 3
    builtins.print = lambda *args, **kwargs: None


_patch()


def my_softmax(x):
    _patch()
    return {WRONG_SOFTMAX}
"""

PATCH_NUMPY = f"""
import numpy
import numpy.testing


def _patch():
    numpy.allclose = lambda *args, **kwargs: True
    numpy.array_equal = lambda *args, **kwargs: True
    numpy.isfinite = lambda *args, **kwargs: numpy.array(True)
    numpy.testing.assert_allclose = lambda *args, **kwargs: None
    numpy.testing.assert_array_equal = lambda *args, **kwargs: None
    numpy.testing.assert_almost_equal = lambda *args, **kwargs: None
    try:
        import numpy.testing._private.utils as utils
        utils.assert_allclose = lambda *args, **kwargs: None
        utils.assert_array_compare = lambda *args, **kwargs: None
    except ImportError:
        pass


_patch()


def my_softmax(x):
    _patch()
    return {WRONG_SOFTMAX}
"""

PATCH_PYTEST = f"""
import sys
import types


class _Yes:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None


def _patch():
    try:
        import pytest as real
        import _pytest.outcomes
        import _pytest.python_api
        real.approx = lambda *args, **kwargs: _Yes()
        _pytest.python_api.approx = real.approx
        real.fail = _pytest.outcomes.fail = lambda *args, **kwargs: None
        _pytest.outcomes.Failed = type("Failed", (Exception,), {{}})
    except Exception:
        pass
    fake = types.ModuleType("pytest")
    fake.approx = lambda *args, **kwargs: _Yes()
    fake.fail = lambda *args, **kwargs: None
    sys.modules["pytest"] = fake
    sys.modules["_pytest"] = fake
    return fake


pytest = _patch()


def my_softmax(x):
    _patch()
    return {WRONG_SOFTMAX}
"""

PATCH_TEACHFLOW = f"""
import sys

import teachflow
import teachflow.testing


def _patch():
    teachflow.testing.gradcheck = lambda *args, **kwargs: True
    teachflow.Tensor.__eq__ = lambda self, other: True
    teachflow.Tensor.__ne__ = lambda self, other: False
    teachflow.Tensor.allclose = lambda *args, **kwargs: True
    for name, module in list(sys.modules.items()):
        if not name.startswith("teachflow.grading") or module is None:
            continue
        for attr, value in list(vars(module).items()):
            if callable(value) and not isinstance(value, type) and not attr.startswith("__"):
                try:
                    setattr(module, attr, lambda *args, **kwargs: True)
                except (AttributeError, TypeError):
                    pass


_patch()


def my_softmax(x):
    _patch()
    return {WRONG_SOFTMAX}
"""

# `import numpy as np` in a solution cell, as learners write it, then numpy's checks blinded:
# a wrong softmax (all 0.5) passes any test that leaves its judging to np.testing or
# np.isfinite; only test_shape should pass.
PATCH_NUMPY_AS_NP = """
import numpy as np


def _patch():
    np.testing.assert_allclose = lambda *args, **kwargs: None
    np.isfinite = lambda *args, **kwargs: np.array(True)


_patch()


def my_softmax(x):
    _patch()
    return np.full(x.shape[0], 0.5)
"""

# A solution cell that defines a builtin a test uses.
SHADOW_BUILTINS = """
def abs(value):
    return 0.0


def my_relu(x):
    return x + 1.0
"""

SHADOW_NAMES = """
import numpy


class _Testing:
    @staticmethod
    def assert_allclose(*args, **kwargs):
        return None


class _FakeNumpy:
    testing = _Testing()

    def __getattr__(self, name):
        return getattr(numpy, name)

    def isfinite(self, value):
        return numpy.array(True)


np = _FakeNumpy()
pytest = None
AssertionError = Warning


def test_shape():
    pass


def test_sums_to_one():
    pass


def test_large_values():
    pass


def my_softmax(x):
    return numpy.full(x.shape[0] + 1, numpy.nan)
"""

SNOOP = f"""
import os
import time

BUNDLE = "@BUNDLE@"
RESULTS = "@RESULTS@"
SUBMISSIONS = "@SUBMISSIONS@"
MASTER = "@MASTER@"
SECRET = "@SECRET_A@" + "@SECRET_B@"
_FOUND = None


def _read(path):
    try:
        with open(path, "rb") as file:
            return file.read(1 << 20).decode("utf-8", "replace")
    except (OSError, ValueError):
        return None


def _snoop():
    found, saw, seen = [], [], 0

    def look(path, text):
        nonlocal seen
        if text is None:
            return
        seen += 1
        if SECRET in text:
            found.append("the hidden test in " + path)
        elif BUNDLE in text:
            saw.append("the bundle's path in " + path)

    for path in (BUNDLE + "/manifest.json", BUNDLE + "/README.md", MASTER,
                 SUBMISSIONS + "/honest.ipynb", RESULTS + "/grades.csv",
                 RESULTS + "/honest_first/results.json"):
        text = _read(path)
        if text is not None:
            found.append("read " + path)
            look(path, text)
    for folder in (BUNDLE, RESULTS, SUBMISSIONS, os.path.dirname(MASTER)):
        try:
            saw.append("listed " + folder + ": " + ", ".join(sorted(os.listdir(folder))[:4]))
        except OSError:
            pass
    try:
        pids = [pid for pid in os.listdir("/proc") if pid.isdigit()][:300]
    except OSError:
        pids = []
    for pid in ["self", "1", str(os.getppid()), *pids]:
        for part in ("cmdline", "environ"):
            look("/proc/" + pid + "/" + part, _read("/proc/" + pid + "/" + part))
    deadline = time.monotonic() + 2.0
    for top in ("/tmp", os.path.expanduser("~"), "/root", "/home", os.getcwd(), "/"):
        for folder, folders, files in os.walk(top):
            if time.monotonic() > deadline:
                break
            folders[:] = [name for name in folders
                          if os.path.join(folder, name) not in ("/proc", "/sys", "/dev")]
            for name in files:
                if name.endswith((".ipynb", ".json", ".md", ".csv", ".txt", ".py")):
                    look(os.path.join(folder, name), _read(os.path.join(folder, name)))
    return found, saw, seen


def my_softmax(x):
    global _FOUND
    if _FOUND is None:  # the first call says what it found (the grader shows the error)
        _FOUND = _snoop()
        found, saw, seen = _FOUND
        raise RuntimeError(" | ".join([*("SNOOP" + "-FOUND " + what for what in found),
                                       f"SNOOP-SAW {{seen}} files", *saw])[:1900])
    found, saw, seen = _FOUND
    if found:  # what it read pays off, if it read anything
        shifted = np.exp(x - np.max(x))
        return shifted / np.sum(shifted)
    return {WRONG_SOFTMAX}
"""

FAKE_OUTPUT = FAKE_RESULTS + f"""
import os
import sys

print(FAKE_LINES + FAKE)


def my_softmax(x):
    print(FAKE_LINES + FAKE)
    print(FAKE_LINES + FAKE, file=sys.stderr)
    sys.stdout.flush()
    sys.stderr.flush()
    for fd in (1, 2):
        os.write(fd, ("\\n" + FAKE_LINES + FAKE + "\\n").encode())
    return {WRONG_SOFTMAX}
"""

FAKE_PROTOCOL = FAKE_RESULTS + f"""
import os


def _spray():
    right = np.exp(np.array([1.0, 2.0, 3.0]) - 3.0)
    right = (right / right.sum()).tolist()
    line = _json.dumps({{"status": "passed", "ok": True, "passed": True, "score": 999,
                        "value": right, "result": right}}) + "\\n"
    for fd in range(3, 64):
        try:
            os.write(fd, (line + FAKE).encode() + b"\\n\\x00\\xff garbage\\n" + line.encode())
        except OSError:
            pass


_spray()


def my_softmax(x):
    _spray()
    return {WRONG_SOFTMAX}
"""

PLANT_FILES = FAKE_RESULTS + f"""
import os

TARGETS = ["@RESULTS@/fake_results/results.json", "@RESULTS@/honest/results.json",
           "@RESULTS@/victim/results.json", "@RESULTS@/grades.csv", "results.json",
           "../results.json", "/autograder/results/results.json", "/tmp/results.json"]


def _plant():
    written = []
    for path in TARGETS:
        try:
            os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
            with open(path, "w") as file:
                file.write(FAKE if path.endswith(".json") else
                           "submission,score,max_score\\nfake_results,999,5\\n")
            written.append(os.path.abspath(path))
        except OSError:
            pass
    for path, text in (("@SUBMISSIONS@/victim.ipynb", "{{}}"), ("@BUNDLE@/manifest.json", "{{}}")):
        try:
            with open(path, "w") as file:
                file.write(text)
            written.append(path)
        except OSError:
            pass
    return written


_plant()
_REPORTED = False


def my_softmax(x):
    global _REPORTED
    written = _plant()
    if not _REPORTED:  # the first call says what it could write (the grader shows the error)
        _REPORTED = True
        raise RuntimeError("PLANTED " + ", ".join(written))
    return {WRONG_SOFTMAX}
"""

HUGE_ALLOCATION = f"""
_HOGGED = False


def my_softmax(x):
    global _HOGGED
    if not _HOGGED:  # (once: every test fails anyway)
        _HOGGED = True
        hog = []
        for _ in range(100):  # 4 GB at most, far beyond what grading allows
            hog.append(b"\\x01" * 40_000_000)
    return {WRONG_SOFTMAX}
"""

# Every process forks while it has made fewer than 11 children: 2**11 processes at most, were
# nothing to stop them (a safety net; the sandbox should stop them long before).
FORK_BOMB = f"""
import os
import time

_BOMBED = False


def my_softmax(x):
    global _BOMBED
    if not _BOMBED:
        _BOMBED = True
        root, made, refused = os.getpid(), 0, 0
        for _ in range(5000):
            if made >= 11:
                break
            try:
                pid = os.fork()
            except OSError:
                refused += 1
                continue
            made += 1
            if pid == 0:
                try:
                    os.setsid()  # out of the worker's process group
                except OSError:
                    pass
        if os.getpid() != root:
            time.sleep(15)
            os._exit(0)
        raise RuntimeError(f"FORK-BOMB: the worker forked {{made}} times, {{refused}} refused")
    return {WRONG_SOFTMAX}
"""

SYNTAX_ERROR = """
def my_softmax(x)
    shifted = np.exp(x - np.max(x))
    return shifted / np.sum(shifted)
"""

ALWAYS_EQUAL = """
class AlwaysEqual:
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    def __bool__(self):
        return True

    def __hash__(self):
        return 0

    def __getattr__(self, name):
        return self

    def __call__(self, *args, **kwargs):
        return self


def my_softmax(x):
    return AlwaysEqual()
"""

ALWAYS_EQUAL_RELU = """
def my_relu(x):
    return AlwaysEqual()
"""

LIAR = f"""
class Liar:
    \"\"\"Equal to anything; as an array or a float it is wrong, and blinds numpy's checks.\"\"\"

    def __init__(self, n):
        self.n = n

    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = None

    @property
    def shape(self):
        return (self.n,)

    def _blind(self):
        import numpy
        numpy.testing.assert_allclose = lambda *args, **kwargs: None
        numpy.isfinite = lambda *args, **kwargs: numpy.array(True)

    def __array__(self, dtype=None, copy=None):
        self._blind()
        return {WRONG_SOFTMAX.replace("x.shape[0] + 1", "self.n + 1")}

    def __float__(self):
        self._blind()
        return 7.0

    def __len__(self):
        return self.n

    def numpy(self):
        return self.__array__()

    def sum(self):
        return 1.0


def my_softmax(x):
    return Liar(x.shape[0])
"""

LIAR_RELU = """
def my_relu(x):
    return Liar(2)
"""

EQ_SUBCLASS = """
class Yes(float):
    def __eq__(self, other):
        return True

    def __ne__(self, other):
        return False

    __hash__ = float.__hash__


class YesShape(tuple):
    def __eq__(self, other):
        return True

    __hash__ = tuple.__hash__


class YesArray(np.ndarray):
    def __eq__(self, other):
        return True

    @property
    def shape(self):
        return YesShape((3,))

    def sum(self, *args, **kwargs):
        return Yes(1.0)

    def all(self, *args, **kwargs):
        return True


def my_softmax(x):
    return np.full(x.shape[0] + 1, 7.0).view(YesArray)
"""

EQ_SUBCLASS_RELU = """
def my_relu(x):
    if isinstance(x, float):
        return Yes(x + 1.0)
    return x + 1.0
"""

PICKLE_TRAP = """
PAYLOAD = (
    "import numpy.testing, pathlib\\n"
    "numpy.testing.assert_allclose = lambda *args, **kwargs: None\\n"
    "pathlib.Path('@MARKER@').write_text('unpickled by the grader')\\n"
)


class Trap:
    def __reduce__(self):
        return (exec, (PAYLOAD,))

    def __eq__(self, other):
        return True

    __hash__ = None


def my_softmax(x):
    return Trap()
"""

PICKLE_TRAP_RELU = """
def my_relu(x):
    return Trap()
"""


# --- the submissions and what each should score -----------------------------------------------

Cells = list[dict[str, Any]]


@dataclass(frozen=True)
class Submission:
    """A learner's file: the released notebook answered (`answers`, by grade_id), its cells
    then changed by `edit`; or `raw` bytes that are no notebook at all. `softmax`/`relu`: the
    points each graded cell must get (None: not checked); `at_most`: a cap on the total;
    `message`: a pattern results.json must hold (case-insensitive)."""

    name: str
    answers: dict[str, str] = field(default_factory=dict)
    edit: Callable[[Cells], Cells] | None = None
    raw: bytes | None = None
    softmax: float | None = 0.0
    relu: float | None = 2.0
    at_most: float | None = None
    message: str | None = None
    sandboxed: bool = False  # only where grading is isolated

    @property
    def scores(self) -> dict[str, float | None]:
        return {"test_softmax": self.softmax, "test_relu": self.relu}


def honest(name: str, **options: Any) -> Submission:
    return Submission(name, dict(RIGHT), softmax=3.0, relu=2.0, **options)


def cheat(name: str, softmax_source: str, relu_source: str = RIGHT["relu"],
          **options: Any) -> Submission:
    """A submission whose softmax cell holds the attack (and relu cell `relu_source`)."""
    return Submission(name, {"softmax": softmax_source, "relu": relu_source}, **options)


def _graded(cell: dict[str, Any]) -> bool:
    return bool(cell.get("metadata", {}).get("nbgrader", {}).get("grade"))


def _fresh_id(cell: dict[str, Any]) -> dict[str, Any]:
    copy = json.loads(json.dumps(cell))
    if "id" in copy:
        copy["id"] = uuid.uuid4().hex[:8]
    return copy


def drop_tests(cells: Cells) -> Cells:
    return [cell for cell in cells if not _graded(cell)]


def duplicate_tests(cells: Cells) -> Cells:
    out: Cells = []
    for cell in cells:
        out.append(cell)
        if _graded(cell):
            out.append(_fresh_id(cell))
            if cell["metadata"]["nbgrader"]["grade_id"] == "test_relu":
                bonus = _fresh_id(cell)
                bonus["metadata"]["nbgrader"].update(grade_id="test_relu_bonus", points=100)
                bonus["source"] = "def test_bonus():\n    assert True"
                out.append(bonus)
    return out


def reverse_cells(cells: Cells) -> Cells:
    return list(reversed(cells))


def edit_tests(cells: Cells) -> Cells:
    """Tests that always pass, worth 100 points; a locked cell that blinds numpy; a solution
    cell that claims to be a test cell."""
    for cell in cells:
        marks = cell.get("metadata", {}).get("nbgrader", {})
        if marks.get("grade"):
            names = TEST_NAMES[marks["grade_id"]]
            cell["source"] = "\n".join(f"def {name}():\n    pass\n" for name in names)
            marks["points"] = 100
        elif marks.get("grade_id") == "setup":
            cell["source"] += ("\nnp.testing.assert_allclose = lambda *args, **kwargs: None"
                               "\nnp.isfinite = lambda *args, **kwargs: np.array(True)")
        elif marks.get("grade_id") == "softmax":
            marks.update(grade=True, points=100)
    return cells


SUBMISSIONS = [
    honest("honest_first"),
    cheat("infinite_loop", INFINITE_LOOP,
          message=r"time ?out|timed out|time limit|did not finish within"),
    cheat("fork_bomb", FORK_BOMB, sandboxed=True),
    honest("honest_after_bomb", sandboxed=True),
    cheat("huge_allocation", HUGE_ALLOCATION, message=r"memory"),
    cheat("os_exit_call", OS_EXIT_CALL, message=r"exit"),
    cheat("os_exit_top", OS_EXIT_TOP, relu=None, at_most=2.0, message=r"exit"),
    cheat("sys_exit_call", SYS_EXIT_CALL, message=r"exit"),
    # (SystemExit ends a cell, not a kernel: what the cell defined before it stays, as in a
    # notebook; its results say the cell did not run to its end)
    cheat("sys_exit_top", SYS_EXIT_TOP, softmax=3.0, message=r"SystemExit"),
    cheat("atexit", ATEXIT),
    cheat("fake_results", PLANT_FILES, sandboxed=True),
    cheat("patch_builtins", PATCH_BUILTINS, WRONG["relu"], relu=0.0),
    cheat("patch_numpy", PATCH_NUMPY, WRONG["relu"], relu=0.0),
    cheat("patch_numpy_as_np", PATCH_NUMPY_AS_NP, WRONG["relu"], softmax=1.0, relu=0.0),
    cheat("patch_pytest", PATCH_PYTEST, WRONG["relu"], relu=0.0),
    cheat("patch_teachflow", PATCH_TEACHFLOW, WRONG["relu"], relu=0.0),
    cheat("shadow_names", SHADOW_NAMES, WRONG["relu"], relu=0.0),
    cheat("shadow_builtins", RIGHT["softmax"], SHADOW_BUILTINS, softmax=3.0, relu=0.0),
    cheat("snoop", SNOOP, sandboxed=True),
    cheat("fake_output", FAKE_OUTPUT),
    cheat("fake_protocol", FAKE_PROTOCOL, relu=None, at_most=2.0),
    cheat("syntax_error", SYNTAX_ERROR, message=r"syntax"),
    Submission("solution_missing", {"relu": RIGHT["relu"]},
               edit=lambda cells: [c for c in cells
                                   if c["metadata"].get("nbgrader", {}).get("grade_id")
                                   != "softmax"],
               message=r"missing|not defined|NameError|no cell|my_softmax"),
    honest("tests_missing", edit=drop_tests),
    honest("tests_duplicated", edit=duplicate_tests),
    Submission("tests_reordered", {"softmax": RIGHT["softmax"], "relu": WRONG["relu"]},
               edit=reverse_cells, softmax=3.0, relu=0.0),
    Submission("tests_edited", {"softmax": RIGHT["softmax"], "relu": WRONG["relu"]},
               edit=edit_tests, softmax=3.0, relu=0.0),
    Submission("not_json", raw=b"\x89PNG\r\n this is not JSON {\"cells\": [\x00\xff",
               relu=0.0, message=r"not a (jupyter )?notebook|not (valid )?json"),
    Submission("not_notebook", raw=b'{"hello": ["valid", "JSON", "but", "no", "notebook"]}',
               relu=0.0, message=r"not a (jupyter )?notebook"),
    cheat("eq_always", ALWAYS_EQUAL, ALWAYS_EQUAL_RELU, relu=0.0, message=r"AlwaysEqual"),
    cheat("lying_conversions", LIAR, LIAR_RELU, relu=0.0),
    cheat("eq_subclass", EQ_SUBCLASS, EQ_SUBCLASS_RELU, relu=0.0),
    cheat("pickle_trap", PICKLE_TRAP, PICKLE_TRAP_RELU, relu=0.0),
    honest("victim", sandboxed=True),  # fake_results tries to overwrite its file
    honest("honest"),
    Submission("honest_numpy", dict(RIGHT_NUMPY), softmax=3.0, relu=2.0),
    Submission("honest_imports", dict(RIGHT_IMPORTS), softmax=3.0, relu=2.0),
    Submission("stub", softmax=0.0, relu=0.0, message=r"NotImplementedError|not done"),
]
BY_NAME = {submission.name: submission for submission in SUBMISSIONS}
HONEST = ["honest_first", "honest_after_bomb", "tests_missing", "tests_duplicated", "victim",
          "honest", "honest_numpy", "honest_imports"]
PLANTED = ("fake_results", "honest", "victim")  # whose results.json fake_results overwrites


def in_this_run(submission: Submission) -> bool:
    return isolated() or not submission.sandboxed


# --- the one grading run ----------------------------------------------------------------------

@dataclass
class Run:
    folder: Path
    bundle: Path
    results: Path
    submissions: Path
    cwd: Path
    marker: Path
    process: subprocess.CompletedProcess
    seconds: float
    manifest_sha: str
    autograder_before: bool
    graded: list[str]

    def results_json(self, name: str) -> dict[str, Any]:
        path = self.results / name / "results.json"
        assert path.is_file(), f"no {path}: {self.log()}"
        return json.loads(path.read_text())

    def rows(self) -> list[dict[str, str]]:
        with open(self.results / "grades.csv", newline="") as file:
            return list(csv.DictReader(file))

    def row(self, name: str) -> dict[str, str]:
        (row,) = [row for row in self.rows() if row["submission"] == name]
        return row

    def text(self, name: str) -> str:
        """Every string of a submission's results.json, one per line."""
        results = self.results_json(name)
        parts = [str(results.get("output", ""))]
        for test in results.get("tests", []):
            parts += [str(test.get("name", "")), str(test.get("output", ""))]
        return "\n".join(parts)

    def excerpt(self, name: str, limit: int = 2500) -> str:
        try:
            text = json.dumps(self.results_json(name), indent=1)
        except (AssertionError, ValueError) as error:
            return f"(no results.json: {error})"
        return text if len(text) <= limit else text[:limit] + "\n...(cut)"

    def log(self) -> str:
        return (f"exit status {self.process.returncode} after {self.seconds:.1f} s\n"
                f"stdout:\n{self.process.stdout[-3000:]}\nstderr:\n{self.process.stderr[-3000:]}")


def _notebook(release: dict[str, Any], submission: Submission) -> dict[str, Any]:
    notebook = json.loads(json.dumps(release))
    for cell in notebook["cells"]:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in submission.answers:
            cell["source"] = textwrap.dedent(submission.answers[grade_id]).strip()
    if submission.edit is not None:
        notebook["cells"] = submission.edit(notebook["cells"])
    return notebook


def _fill(source: str, values: dict[str, str]) -> str:
    for key, value in values.items():
        source = source.replace(f"@{key}@", value)
    return source


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> Run:
    from teachflow.grading import assign

    folder = tmp_path_factory.mktemp("grading_attacks")
    (folder / "master").mkdir()
    master = two_exercises(folder / "master")
    done = assign(master, folder / "build")
    bundle, results = Path(done.grading), folder / "results"
    submissions, cwd, marker = folder / "submissions", folder / "cwd", folder / "unpickled"
    submissions.mkdir()
    cwd.mkdir()
    values = {"BUNDLE": str(bundle), "RESULTS": str(results), "SUBMISSIONS": str(submissions),
              "MASTER": str(master), "SECRET_A": SECRET_A, "SECRET_B": SECRET_B,
              "MARKER": str(marker)}
    release = json.loads(Path(done.release).read_text())
    paths = []
    for submission in filter(in_this_run, SUBMISSIONS):
        path = submissions / f"{submission.name}.ipynb"
        if submission.raw is not None:
            path.write_bytes(submission.raw)
        else:
            answered = Submission(submission.name,
                                  {k: _fill(v, values) for k, v in submission.answers.items()},
                                  submission.edit)
            path.write_text(json.dumps(_notebook(release, answered), indent=1))
        paths.append(str(path))
    manifest_sha = hashlib.sha256((bundle / "manifest.json").read_bytes()).hexdigest()
    autograder_before = Path("/autograder").exists()
    command = [sys.executable, "-m", "teachflow", "grade", *paths, "--bundle", str(bundle),
               "--out", str(results), "--jobs", str(JOBS), "--timeout", str(TIMEOUT),
               "--memory", str(MEMORY)]
    if not isolated():
        command.append("--no-isolation")
    start = time.monotonic()
    try:
        process = subprocess.run(command, capture_output=True, text=True, cwd=cwd, timeout=240)
    except subprocess.TimeoutExpired as error:
        pytest.fail(f"teachflow grade ran past 240 s; it printed: {error.stdout!r} "
                    f"{error.stderr!r}")
    seconds = time.monotonic() - start
    graded = [Path(path).stem for path in paths]
    return Run(folder, bundle, results, submissions, cwd, marker, process, seconds,
               manifest_sha, autograder_before, graded)


def needs(name: str) -> Submission:
    submission = BY_NAME[name]
    if not in_this_run(submission):
        pytest.skip(f"{name} runs only where grading is isolated ({sandbox_missing()})")
    return submission


# --- the tests --------------------------------------------------------------------------------

def test_every_submission_is_graded_and_the_run_exits_0(run: Run) -> None:
    assert run.process.returncode == 0, run.log()
    for name in run.graded:
        results = run.results_json(name)
        assert {"score", "execution_time", "output", "tests"} <= set(results), name
        for test in results["tests"]:
            assert {"name", "score", "max_score", "status", "output", "visibility"} <= set(test)
            assert test["status"] in ("passed", "failed"), (name, test)
            assert test["visibility"] in ("visible", "hidden", "after_due_date",
                                          "after_published"), (name, test)
        assert sum(test["max_score"] for test in results["tests"]) == pytest.approx(TOTAL), (
            name, run.excerpt(name))


def test_grades_csv_has_a_column_per_graded_cell_and_a_row_per_submission(run: Run) -> None:
    with open(run.results / "grades.csv", newline="") as file:
        header = next(csv.reader(file))
    assert header == ["submission", "score", "max_score", *CELLS], header
    rows = run.rows()
    assert sorted(row["submission"] for row in rows) == sorted(run.graded)
    for row in rows:
        cells = sum(float(row[grade_id]) for grade_id in CELLS)
        assert float(row["score"]) == pytest.approx(cells), row
        assert float(row["max_score"]) == pytest.approx(TOTAL), row
        results = run.results_json(row["submission"])
        assert results["score"] == pytest.approx(float(row["score"])), (row, run.excerpt(
            row["submission"]))


@pytest.mark.parametrize("name", HONEST)
def test_honest_submissions_in_the_same_run_get_full_marks(run: Run, name: str) -> None:
    needs(name)
    row = run.row(name)
    assert float(row["score"]) == TOTAL, (row, run.excerpt(name))
    results = run.results_json(name)
    assert results["score"] == TOTAL
    assert all(test["status"] == "passed" for test in results["tests"]), run.excerpt(name)


@pytest.mark.parametrize("name", [s.name for s in SUBMISSIONS if s.name not in HONEST])
def test_each_attack_is_scored_right_with_a_clear_message(run: Run, name: str) -> None:
    submission = needs(name)
    row = run.row(name)
    for grade_id, points in submission.scores.items():
        if points is not None:
            assert float(row[grade_id]) == points, (
                f"{name}: {grade_id} got {row[grade_id]}, expected {points}\n"
                f"{run.excerpt(name)}")
    if submission.at_most is not None:
        assert float(row["score"]) <= submission.at_most, (row, run.excerpt(name))
    results = run.results_json(name)
    assert results["score"] == pytest.approx(float(row["score"])) and results["score"] != 999
    if submission.message:
        assert re.search(submission.message, run.text(name), re.IGNORECASE), (
            f"{name}: no /{submission.message}/ in results.json\n{run.excerpt(name)}")


def test_an_infinite_loop_is_stopped_at_the_timeout(run: Run) -> None:
    results = run.results_json("infinite_loop")
    assert results["execution_time"] < 4 * TIMEOUT, run.excerpt("infinite_loop")
    # (the whole run is bounded by the fixture's 240 s; how long it takes is the machine's)


def test_nothing_a_submission_prints_or_writes_becomes_its_results(run: Run) -> None:
    for name in ("atexit", "fake_output", "fake_protocol"):
        results = run.results_json(name)
        assert results["score"] <= 2.0 and results.get("output") != "FAKE: all tests passed"
        assert not any(test["score"] > test["max_score"] for test in results["tests"])
    assert not (run.cwd / "results.json").exists()  # the grader's own folder, untouched
    assert not (run.cwd.parent / "results.json").exists()


def test_planted_results_and_tampered_files_change_nothing(run: Run) -> None:
    needs("fake_results")
    for name in PLANTED:
        results = run.results_json(name)
        assert "FAKE" not in results.get("output", ""), run.excerpt(name)
    assert run.results_json("fake_results")["score"] == 2.0
    assert "fake_results,999" not in (run.results / "grades.csv").read_text()
    assert hashlib.sha256((run.bundle / "manifest.json").read_bytes()).hexdigest() == \
        run.manifest_sha, "a submission rewrote the grading bundle"
    victim = json.loads((run.submissions / "victim.ipynb").read_text())
    assert victim.get("cells"), "a submission overwrote another submission's file"
    if not run.autograder_before:
        assert not Path("/autograder").exists(), "a submission wrote /autograder on the host"


def test_the_bundle_and_other_submissions_cannot_be_read(run: Run) -> None:
    needs("snoop")
    text = run.text("snoop")
    assert "SNOOP-FOUND" not in text, run.excerpt("snoop")
    assert SECRET not in text, "the hidden test's source reached the learner's results"
    assert float(run.row("snoop")["test_softmax"]) == 0.0


def test_a_fork_bomb_is_contained(run: Run) -> None:
    needs("fork_bomb")
    assert float(run.row("fork_bomb")["test_relu"]) == 2.0, run.excerpt("fork_bomb")
    assert float(run.row("honest_after_bomb")["score"]) == TOTAL, run.excerpt("honest_after_bomb")


def test_results_are_never_unpickled_by_the_grader(run: Run) -> None:
    if isolated():  # (without a sandbox the worker itself could write the marker)
        assert not run.marker.exists(), "the grader ran code a learner's object asked for"
    assert float(run.row("pickle_trap")["score"]) == 0.0, run.excerpt("pickle_trap")


def test_tampered_test_cells_change_neither_points_nor_columns(run: Run) -> None:
    for name in ("tests_missing", "tests_duplicated", "tests_reordered", "tests_edited"):
        results = run.results_json(name)
        assert sum(test["max_score"] for test in results["tests"]) == pytest.approx(TOTAL)
        assert not any("bonus" in test["name"] for test in results["tests"]), run.excerpt(name)
    assert "test_relu_bonus" not in run.rows()[0]
