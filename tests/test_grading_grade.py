"""teachflow grade and teachflow gradescope: real notebooks graded by a real sandboxed worker.

The wire format is tested value by value; the rest through whole grading runs, as an
instructor runs them (tests/test_grading_attacks.py holds the malicious submissions).
"""

from __future__ import annotations

import csv
import json
import os
import shutil
import socket
import subprocess
import sys
import zipfile
from pathlib import Path

import grading_notebooks as notebooks
import nbformat
import numpy as np
import pytest

import teachflow as tfl
from teachflow.core.errors import GradingError
from teachflow.grading import assign, grade, load_bundle, sandbox, wire
from teachflow.grading.failures import NOT_DONE, SubmissionFailure
from teachflow.grading.judge import worker_cells
from teachflow.grading.notebook import cells_of, read_notebook
from teachflow.grading.remote import remote_error

ROOT = Path(__file__).resolve().parent.parent
ISOLATION, WHY_NOT = sandbox.find_isolation(allow_none=True)
isolated = pytest.mark.skipif(ISOLATION == "none", reason=f"no sandbox here: {WHY_NOT}")


# -- the wire: plain data only -------------------------------------------------------------------


def round_trip(value, graphs: Path | None = None):
    encoder = wire.Encoder()
    tree = encoder.value(value)
    stream = _Pipe()
    wire.write_message(stream, {"value": tree}, encoder.arrays)
    header, arrays = wire.read_message(stream.read)
    return wire.Decoder(arrays, graphs=graphs).value(header["value"])


class _Pipe:
    def __init__(self, data: bytes = b"") -> None:
        self.data, self.at = bytearray(data), 0

    def write(self, data: bytes) -> None:
        self.data += data

    def flush(self) -> None:
        pass

    def read(self, size: int) -> bytes:
        if self.at + size > len(self.data):
            raise EOFError
        self.at += size
        return bytes(self.data[self.at - size:self.at])


def test_plain_values_cross_as_they_are() -> None:
    value = {"list": [1, 2.5, None, True, "s", complex(1, -2), float("inf")],
             ("tuple", 1): (np.float32(1.5), np.int64(-3)),
             "arrays": [np.arange(6, dtype=np.int16).reshape(2, 3), np.array(["a", "bc"]),
                        np.zeros((0, 4), np.complex64), np.array(True)]}
    back = round_trip(value)
    assert back.keys() == value.keys()
    assert back["list"][:5] == [1, 2.5, None, True, "s"] and back["list"][5] == complex(1, -2)
    assert type(back[("tuple", 1)]) is tuple
    assert type(back[("tuple", 1)][0]) is np.float32 and back[("tuple", 1)][1] == -3
    for got, sent in zip(back["arrays"], value["arrays"], strict=True):
        assert got.dtype == sent.dtype and got.shape == sent.shape
        np.testing.assert_array_equal(got, sent)
    assert np.isnan(round_trip(float("nan")))


def test_a_tensor_crosses_with_its_values_and_requires_grad_but_no_history() -> None:
    x = tfl.tensor([[1.0, 2.0]], requires_grad=True)
    y = x * 2
    back = round_trip([x, y])
    assert isinstance(back[0], tfl.Tensor) and back[0].requires_grad
    np.testing.assert_array_equal(back[1].numpy(), [[2.0, 4.0]])
    assert back[1].grad_fn is None if hasattr(back[1], "grad_fn") else True


def test_a_staged_function_crosses_as_a_saved_graph_that_runs(tmp_path: Path) -> None:
    concrete = tfl.function(lambda x: (x * 3.0).tanh()).get_concrete_function(
        tfl.tensor(np.ones(4, np.float32)))
    loaded = round_trip(concrete, graphs=tmp_path)
    x = tfl.tensor(np.linspace(-1, 1, 4).astype(np.float32))
    np.testing.assert_allclose(loaded(x).numpy(), np.tanh(3 * x.numpy()), rtol=1e-6)


@pytest.mark.parametrize("value, kind", [
    (lambda x: x, "a function (<lambda>)"),
    (np.array([object()]), "dtype object"),
    (type("Always", (), {"__eq__": lambda self, other: True})(), "Always object"),
    (iter([1]), "list_iterator object"),
    ({1, 2}, "a set object"),
    (tfl.Tensor, "a class (Tensor)"),
])
def test_anything_else_is_refused_by_name(value, kind: str) -> None:
    with pytest.raises(wire.CannotCross, match=kind.replace("(", r"\(").replace(")", r"\)")):
        wire.Encoder().value(value)


def test_a_value_nested_too_deep_is_refused_both_ways() -> None:
    deep: list = []
    for _ in range(200):
        deep = [deep]
    with pytest.raises(wire.CannotCross, match="nested deeper"):
        wire.Encoder().value(deep)
    tree: object = 1
    for _ in range(200):
        tree = {"list": [tree]}
    with pytest.raises(wire.BadMessage, match="nested deeper"):
        wire.Decoder({}).value(tree)


@pytest.mark.parametrize("header, payload, problem", [
    (b"not json", b"", "not JSON"),
    (b"[1, 2]", b"", "not a JSON object"),
    (b"{}", b"not a zip", "not an .npz"),
])
def test_a_malformed_message_is_refused(header: bytes, payload: bytes, problem: str) -> None:
    pipe = _Pipe(wire.LENGTH.pack(len(header)) + header + wire.LENGTH.pack(len(payload)) +
                 payload)
    with pytest.raises(wire.BadMessage, match=problem):
        wire.read_message(pipe.read)


def test_sizes_are_checked_before_anything_is_read() -> None:
    pipe = _Pipe(wire.LENGTH.pack(1 << 40))
    with pytest.raises(wire.BadMessage, match="header of 1099511627776 bytes"):
        wire.read_message(pipe.read)
    stream = _Pipe()
    wire.write_message(stream, {"value": {"array": "a0"}}, {"a0": np.zeros(1000)})
    with pytest.raises(wire.BadMessage, match="payload"):
        wire.read_message(stream.read, wire.MessageLimits(payload=500))


@pytest.mark.parametrize("tree, problem", [
    ({"array": "a9"}, "does not hold"),
    ({"eval": "__import__('os')"}, "unknown value"),
    ({"ref": ["secret"]}, "unknown value"),           # the grader resolves no names
    ({"graph": "g0"}, "a graph where none may be"),
    ({"dict": [[{"list": []}, 1]]}, "cannot be a key"),
])
def test_the_trusted_side_decodes_nothing_but_plain_data(tree, problem: str) -> None:
    with pytest.raises(wire.BadMessage, match=problem):
        wire.Decoder({}).value(tree)


def test_an_error_from_the_submission_keeps_its_kind_for_the_test() -> None:
    error = remote_error({"type": "ShapeMismatch", "bases": ["ValueError", "Exception"],
                          "status": "failed", "lines": ["ShapeMismatch: (2,) vs (3,)"]}, "f")
    assert isinstance(error, ValueError) and isinstance(error, SubmissionFailure)
    assert error.lines == ["ShapeMismatch: (2,) vs (3,)"]
    stub = remote_error({"type": "NotImplementedError", "bases": ["NotImplementedError"],
                         "status": NOT_DONE, "lines": ["f still raises"]}, "f")
    assert isinstance(stub, NotImplementedError) and stub.status == NOT_DONE
    memory = remote_error({"type": "MemoryError", "bases": ["MemoryError"], "lines": []}, "f")
    assert isinstance(memory, MemoryError) and "memory" in memory.lines[-1]
    assert not isinstance(remote_error("junk", "f"), RuntimeError | ValueError)


# -- the programs: which cells run where --------------------------------------------------------


def _submission(release: Path, out: Path, edit) -> Path:
    notebook = nbformat.read(release, as_version=4)
    edit(notebook.cells)
    nbformat.write(notebook, out)
    return out


@pytest.fixture(scope="module")
def softmax(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("softmax")
    assign(notebooks.master(folder), folder / "build")
    return folder


def _answer(cells, grade_id: str, source: str) -> None:
    for cell in cells:
        if cell.metadata.get("nbgrader", {}).get("grade_id") == grade_id:
            cell.source = notebooks.code(source)


RIGHT = """
def my_softmax(x):
    e = np.exp(x - x.max())
    return e / e.sum()
"""


def test_solutions_are_matched_by_grade_id_and_given_cells_come_from_the_bundle(
        softmax: Path, tmp_path: Path) -> None:
    release = softmax / "build" / "release" / "softmax.ipynb"

    def edit(cells):
        _answer(cells, "softmax", RIGHT)
        cells[1].source = "import os; os._exit(3)"                # the given cell, edited
        cells.insert(0, nbformat.v4.new_code_cell("def helper(): return 1"))   # a helper
        cells.append(cells.pop(3))                                # the solution moved last
        copy = nbformat.from_dict(dict(cells[-1]))
        copy.source, copy.id = "def my_softmax(x): return x", "an-older-copy"
        cells.insert(2, copy)                                     # and an older copy
        del cells[4]                                              # the test cell deleted
    submission = _submission(release, tmp_path / "s.ipynb", edit)
    program, notes = worker_cells(load_bundle(softmax / "build" / "grading"),
                                  cells_of(read_notebook(submission)))
    sources = [cell.source for _, cell in program]
    # (the helper runs where the learner put it: before the master's first cell)
    assert sources == ["def helper(): return 1", "import numpy as np", notebooks.code(RIGHT)]
    assert program[0][1].describe() == "cell 1"  # the helper, named where the learner put it
    assert any("two cells have grade_id 'softmax'" in note for note in notes)


def test_a_deleted_solution_cell_is_noted(softmax: Path, tmp_path: Path) -> None:
    release = softmax / "build" / "release" / "softmax.ipynb"
    submission = _submission(release, tmp_path / "s.ipynb", lambda cells: cells.pop(2))
    program, notes = worker_cells(load_bundle(softmax / "build" / "grading"),
                                  cells_of(read_notebook(submission)))
    assert [c.source for _, c in program] == ["import numpy as np"]
    assert notes == ["the notebook has no solution cell with grade_id 'softmax' (deleted, "
                     "or its metadata changed?)"]


# -- grading a class ----------------------------------------------------------------------------


def teachflow_command(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teachflow", *args], cwd=cwd,
                          capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def graded(softmax: Path) -> Path:
    release = softmax / "build" / "release" / "softmax.ipynb"
    subs = softmax / "subs"
    for name in ("alice", "bob"):
        (subs / name).mkdir(parents=True)
    _submission(release, subs / "alice" / "softmax.ipynb", lambda c: _answer(c, "softmax", RIGHT))
    _submission(release, subs / "bob" / "softmax.ipynb", lambda c: None)
    _submission(release, subs / "wrong.ipynb",
                lambda c: _answer(c, "softmax", "def my_softmax(x):\n    return np.exp(x)"))
    (subs / "broken.ipynb").write_text("{not json")
    (subs / "list.ipynb").write_text("[1, 2, 3]")
    args = ["--jobs", "2", "--timeout", "20"] + (["--no-isolation"] if ISOLATION == "none"
                                                 else [])
    done = teachflow_command("grade", str(subs), "--bundle", str(softmax / "build" / "grading"),
                             "--out", str(softmax / "results"), *args)
    assert done.returncode == 0, done.stderr
    assert "graded 5 submissions" in done.stdout and "grading" in done.stderr
    return softmax / "results"


def _results(folder: Path, name: str) -> dict:
    return json.loads((folder / name / "results.json").read_text())


def test_results_are_in_gradescopes_format(graded: Path) -> None:
    right = _results(graded, "alice-softmax")
    assert right["score"] == 3 and right["execution_time"] > 0
    assert [t["name"] for t in right["tests"]] == [
        "test_softmax: test_shape", "test_softmax: test_sums_to_one",
        "test_softmax: test_large_values"]
    assert all(t.keys() == {"name", "score", "max_score", "status", "output", "visibility"}
               for t in right["tests"])
    assert [t["visibility"] for t in right["tests"]] == ["visible", "visible",
                                                         "after_due_date"]
    assert {t["status"] for t in right["tests"]} == {"passed"}


def test_a_wrong_answer_is_explained_and_a_stub_is_not_done(graded: Path) -> None:
    wrong = _results(graded, "wrong")
    assert wrong["score"] == 1  # the shape is right; it neither sums to one nor stays finite
    sums = next(t for t in wrong["tests"] if t["name"].endswith("test_sums_to_one"))
    assert sums["status"] == "failed" and sums["score"] == 0
    assert "got:" in sums["output"] and "expected:" in sums["output"]
    stub = _results(graded, "bob-softmax")
    assert stub["score"] == 0
    assert all("not done yet" in t["output"] for t in stub["tests"])


def test_files_that_are_not_notebooks_get_zero_and_say_why(graded: Path) -> None:
    broken, listed = _results(graded, "broken"), _results(graded, "list")
    assert broken["score"] == listed["score"] == 0
    assert "not valid JSON (line 1, column 2" in broken["output"]
    assert "JSON but not a Jupyter notebook" in listed["output"]


def test_grades_csv_has_a_row_per_submission_and_a_column_per_test_cell(graded: Path) -> None:
    with (graded / "grades.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert list(rows[0]) == ["submission", "score", "max_score", "test_softmax"]
    scores = {row["submission"]: (row["score"], row["max_score"], row["test_softmax"])
              for row in rows}
    assert scores == {"alice-softmax": ("3", "3", "3"), "bob-softmax": ("0", "3", "0"),
                      "wrong": ("1", "3", "1"), "broken": ("0", "3", "0"),
                      "list": ("0", "3", "0")}


# -- what crosses: proxies, values, errors, graphs ------------------------------------------------


ANSWERS = """
ANSWER = 42

def scale(x, k=2.0):
    ### BEGIN SOLUTION
    return x * k
    ### END SOLUTION

def check_positive(x):
    ### BEGIN SOLUTION
    if (np.asarray(x) < 0).any():
        raise ValueError("negative values")
    return True
    ### END SOLUTION

def staged():
    ### BEGIN SOLUTION
    return tfl.function(lambda x: x * 2).get_concrete_function(tfl.ones((3,)))
    ### END SOLUTION

def describe(t, scaled=None):
    ### BEGIN SOLUTION
    return {"shape": tuple(t.shape), "grad": t.requires_grad, "env": sorted(os.environ),
            "scaled": None if scaled is None else float(np.asarray(scaled).sum())}
    ### END SOLUTION

class Model:
    def __init__(self):
        self.weight = np.ones(2)

    def forward(self, x):
        return x @ self.weight

model = Model()
"""

PROXY_TESTS = """
import pytest

def test_calls_and_keywords():
    np.testing.assert_allclose(scale(np.arange(3.0), k=3.0), [0.0, 3.0, 6.0])

def test_an_error_keeps_its_kind():
    with pytest.raises(ValueError, match="negative"):
        check_positive(-np.ones(2))
    assert check_positive(np.ones(2)) is True

def test_plain_values_and_given_code_that_uses_the_learners():
    assert ANSWER == 42
    np.testing.assert_allclose(doubled, [0.0, 2.0, 4.0])

def test_a_graph_comes_back_and_runs_here():
    f = staged()
    np.testing.assert_allclose(f(tfl.ones((3,))).numpy(), [2.0, 2.0, 2.0])

def test_tensors_and_the_submissions_own_objects():
    got = describe(tfl.ones((2, 3), requires_grad=True), scaled=doubled)
    assert got["shape"] == (2, 3) and got["grad"] is True and got["scaled"] == 6.0
    assert "GRADER_SECRET" not in got["env"]
    np.testing.assert_allclose(model.weight, [1.0, 1.0])
    np.testing.assert_allclose(model.forward(np.array([1.0, 2.0])), 3.0)
    assert (model == 42) is False and not isinstance(model, np.ndarray)
"""


@pytest.fixture(scope="module")
def proxies(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("proxies")
    master = notebooks.write(folder / "proxies.ipynb", [
        notebooks.given("setup", "import os\nimport numpy as np\nimport teachflow as tfl"),
        notebooks.solution("answers", ANSWERS),
        notebooks.given("uses_answers", "doubled = scale(np.arange(3.0))"),
        notebooks.checks("test_answers", PROXY_TESTS, points=5),
    ])
    assign(master, folder / "build")
    return master


def test_what_crosses_between_the_tests_and_the_submission(proxies: Path, tmp_path: Path,
                                                          monkeypatch) -> None:
    monkeypatch.setenv("GRADER_SECRET", "hidden")
    done = grade([proxies], proxies.parent / "build" / "grading", tmp_path / "results",
                 jobs=1, isolation=ISOLATION, progress=False)
    result = _results(tmp_path / "results", "proxies")
    failed = {t["name"]: t["output"] for t in result["tests"] if t["status"] != "passed"}
    assert failed == {} and done.scores == {"proxies": 5.0}


# -- walls -----------------------------------------------------------------------------------------


@isolated
def test_the_worker_sees_neither_the_bundle_nor_the_submissions(softmax: Path,
                                                                tmp_path: Path) -> None:
    release = softmax / "build" / "release" / "softmax.ipynb"
    listening = socket.create_server(("127.0.0.1", 0))  # the grader's machine, listening
    looks = f"""
import os, socket
def my_softmax(x):
    seen = [p for p in {[str(softmax), str(softmax / 'build' / 'grading' / 'manifest.json'),
                         str(ROOT / 'tests'), str(ROOT / 'exercises')]!r} if os.path.exists(p)]
    assert not seen, seen
    from teachflow.viz.assets import widgets_folder  # the stepper's files are there
    assert (widgets_folder() / "stepper" / "widget.js").is_file()
    try:
        socket.create_connection(("127.0.0.1", {listening.getsockname()[1]}), timeout=2)
        raise AssertionError("reached the grader's machine")
    except OSError:
        pass
    e = np.exp(x - x.max())
    return e / e.sum()
"""
    submission = _submission(release, tmp_path / "looks.ipynb",
                             lambda c: _answer(c, "softmax", looks))
    with listening:
        grade([submission], softmax / "build" / "grading", tmp_path / "results", jobs=1,
              isolation=ISOLATION, progress=False)
    result = _results(tmp_path / "results", "looks")
    assert result["score"] == 3, result["tests"][0]["output"]


def test_without_a_sandbox_grade_refuses_unless_told(softmax: Path, tmp_path: Path,
                                                     monkeypatch) -> None:
    monkeypatch.setattr(sandbox.shutil, "which", lambda name: None)
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    with pytest.raises(GradingError, match="cannot isolate") as refused:
        grade([softmax / "softmax.ipynb"], softmax / "build" / "grading", tmp_path / "r")
    assert "bubblewrap is not installed" in refused.value.message
    assert "--no-isolation" in refused.value.hint
    assert not (tmp_path / "r").exists()


def test_no_isolation_is_said_loudly(softmax: Path, tmp_path: Path) -> None:
    done = teachflow_command("grade", str(softmax / "softmax.ipynb"), "--bundle",
                             str(softmax / "build" / "grading"), "--out",
                             str(tmp_path / "r"), "--no-isolation", "--jobs", "1")
    assert done.returncode == 0 and "WARNING: grading WITHOUT isolation" in done.stderr
    assert _results(tmp_path / "r", "softmax")["score"] == 3


@pytest.mark.skipif(os.geteuid() != 0 or sandbox.readable_by_others(Path(sys.executable)) is
                    False, reason="the user mode needs root and an interpreter others can run")
def test_the_user_mode_grades_as_a_user_of_its_own(softmax: Path, tmp_path: Path) -> None:
    private = tmp_path / "private"
    shutil.copytree(softmax / "build", private)
    os.chmod(private, 0o700)
    grade([softmax / "softmax.ipynb"], private / "grading", tmp_path / "r", jobs=1,
          isolation="user", progress=False)
    assert _results(tmp_path / "r", "softmax")["score"] == 3


def test_bad_settings_and_missing_files_are_refused(softmax: Path, tmp_path: Path) -> None:
    bundle = softmax / "build" / "grading"
    missing = teachflow_command("grade", str(tmp_path / "nope.ipynb"), "--bundle", str(bundle),
                                "--out", str(tmp_path / "r"))
    assert missing.returncode == 2 and "no such submission" in missing.stderr
    with pytest.raises(GradingError, match="jobs, timeout and budget must be positive"):
        grade([softmax / "softmax.ipynb"], bundle, tmp_path / "r", jobs=0, isolation="none")
    with pytest.raises(GradingError, match="--budget 0"):
        grade([softmax / "softmax.ipynb"], bundle, tmp_path / "r", budget=0, isolation="none")


# -- Gradescope ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def autograder(softmax: Path) -> Path:
    done = teachflow_command("gradescope", str(softmax / "build" / "grading"), "--out",
                             str(softmax / "autograder.zip"))
    assert done.returncode == 0, done.stderr
    return softmax / "autograder.zip"


def test_the_autograder_holds_setup_run_bundle_and_wheel(autograder: Path) -> None:
    with zipfile.ZipFile(autograder) as archive:
        names = set(archive.namelist())
        modes = {info.filename: info.external_attr >> 16 for info in archive.infolist()}
        setup = archive.read("setup.sh").decode()
    wheel = next(n for n in names if n.endswith(".whl"))
    assert {"README.md", "setup.sh", "run_autograder", "grading/manifest.json"} <= names
    with zipfile.ZipFile(autograder) as archive:
        readme = archive.read("README.md").decode()
    assert "Base image**: Ubuntu 24.04 (or 22.04)" in readme
    assert modes["run_autograder"] & 0o111 and modes["setup.sh"] & 0o111
    assert "bubblewrap" in setup and wheel in setup
    with zipfile.ZipFile(autograder) as archive, \
            zipfile.ZipFile(__import__("io").BytesIO(archive.read(wheel))) as built:
        inside = set(built.namelist())
    assert "teachflow/grading/worker.py" in inside
    assert any(n.endswith(".dist-info/RECORD") for n in inside)


SHIM = """#!/bin/sh
# A stand-in for {name}: says what it was asked, in the log, and acts as the image would.
echo "{name} $*" >> "$SHIMS/log"
{body}
"""

#: What a command does on an image with `python3` of version `version` (and which packages
#: apt-get can install: with the deadsnakes archive added, python3.12 too).
PYTHON_SHIM = """case "$1" in
  -c) exit {too_old} ;;
  --version) echo "Python {version}" ;;
  -m) mkdir -p "$3/bin"; printf '#!/bin/sh\\necho "pip $*" >> "$SHIMS/log"\\n' > "$3/bin/pip"
      chmod +x "$3/bin/pip" ;;
esac"""
APT_SHIM = """case "$*" in
  *python3.12*)
    if [ -e "$SHIMS/deadsnakes" ] || [ "{archive_has_312}" = yes ]; then
      sed "s/{{version}}/3.12/; s/{{too_old}}/0/" "$SHIMS/python.in" > "$SHIMS/python3.12"
      sed -i "s/^echo \\"[^ ]* /echo \\"python3.12 /" "$SHIMS/python3.12"
      chmod +x "$SHIMS/python3.12"
    else
      exit 100
    fi ;;
esac"""


def _setup_on(autograder: Path, tmp_path: Path, python3: str, archive_has_312: bool = False,
              ppa: bool = True) -> tuple[subprocess.CompletedProcess, str]:
    """Run setup.sh on a stand-in image: `python3` of version `python3`, apt-get and
    add-apt-repository that log what they are asked (and install python3.12 where the image's
    archives have it), a few of the machine's own commands, and no other Python."""
    shims = tmp_path / "shims"
    shims.mkdir(parents=True)
    too_old = int(tuple(map(int, python3.split("."))) < (3, 11))
    python = SHIM.format(name="python3", body=PYTHON_SHIM.format(version="{version}",
                                                                   too_old="{too_old}"))
    (shims / "python.in").write_text(python)
    (shims / "python3").write_text(python.replace("{version}", python3)
                                   .replace("{too_old}", str(too_old)))
    (shims / "apt-get").write_text(SHIM.format(name="apt-get", body=APT_SHIM.format(
        archive_has_312="yes" if archive_has_312 else "no")))
    (shims / "add-apt-repository").write_text(SHIM.format(
        name="add-apt-repository", body='touch "$SHIMS/deadsnakes"' if ppa else "exit 1"))
    for shim in ("python3", "apt-get", "add-apt-repository"):
        os.chmod(shims / shim, 0o755)
    with zipfile.ZipFile(autograder) as archive:
        archive.extractall(tmp_path / "autograder" / "source")
    tools = tmp_path / "tools"  # (the machine's commands the scripts use, and no Python)
    tools.mkdir()
    for tool in ("mkdir", "chmod", "sed", "touch"):
        (tools / tool).symlink_to(shutil.which(tool))
    environment = {"PATH": f"{shims}:{tools}", "SHIMS": str(shims),
                   "AUTOGRADER_ROOT": str(tmp_path / "autograder"),
                   "TEACHFLOW_PREFIX": str(tmp_path / "opt")}
    setup = tmp_path / "autograder" / "source" / "setup.sh"
    done = subprocess.run([shutil.which("bash"), str(setup)], env=environment,
                          capture_output=True, text=True, timeout=60)
    log = (shims / "log").read_text() if (shims / "log").exists() else ""
    return done, log


@pytest.mark.parametrize(("python3", "archive_has_312", "chosen", "deadsnakes"), [
    ("3.12.3", False, "python3", False),    # Ubuntu 24.04: its own python3
    ("3.10.12", False, "python3.12", True),  # Ubuntu 22.04: 3.12 from deadsnakes
    ("3.10.12", True, "python3.12", False),  # an archive that has 3.12 itself
])
def test_setup_installs_a_python_teachflow_runs_on(autograder: Path, tmp_path: Path,
                                                   python3: str, archive_has_312: bool,
                                                   chosen: str, deadsnakes: bool) -> None:
    done, log = _setup_on(autograder, tmp_path, python3, archive_has_312)
    assert done.returncode == 0, done.stdout + done.stderr + log
    assert "apt-get install -y --no-install-recommends bubblewrap" in log
    assert f"{chosen} -m venv {tmp_path / 'opt'}" in log
    assert ("add-apt-repository -y ppa:deadsnakes/ppa" in log) == deadsnakes
    venv = "python3-venv" if chosen == "python3" else f"{chosen}-venv"
    assert f"install -y --no-install-recommends {venv}" in log
    wheel = next(n for n in zipfile.ZipFile(autograder).namelist() if n.endswith(".whl"))
    assert f"pip install --no-cache-dir {tmp_path / 'autograder' / 'source' / wheel}[grading]" \
        in log


def test_setup_says_which_image_to_choose_when_no_python_can_be_had(autograder: Path,
                                                                    tmp_path: Path) -> None:
    done, _ = _setup_on(autograder, tmp_path, "3.8.10", ppa=False)  # not an Ubuntu image
    assert done.returncode == 1
    assert "no Python 3.11+ on this image" in done.stdout
    assert "could not install Python 3.11+; choose the Ubuntu 24.04" in done.stderr
    done, _ = _setup_on(autograder, tmp_path / "no-3.12", "3.8.10", ppa=True)
    assert done.returncode == 0  # (deadsnakes has 3.12 for it)


def _gradescope_layout(autograder: Path, root: Path, files: dict[str, Path]) -> Path:
    (root / "source").mkdir(parents=True)
    (root / "submission").mkdir()
    with zipfile.ZipFile(autograder) as archive:
        archive.extractall(root / "source")
    for name, path in files.items():
        shutil.copyfile(path, root / "submission" / name)
    os.chmod(root / "source" / "run_autograder", 0o755)
    environment = dict(os.environ, AUTOGRADER_ROOT=str(root), TEACHFLOW_PYTHON=sys.executable)
    done = subprocess.run(["bash", str(root / "source" / "run_autograder")], env=environment,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "Warning" not in done.stderr, done.stderr  # (runpy's, once: it starts clean)
    return root / "results" / "results.json"


@isolated
def test_run_autograder_grades_a_submission_laid_out_as_gradescope_does(
        autograder: Path, softmax: Path, tmp_path: Path) -> None:
    right = _submission(softmax / "build" / "release" / "softmax.ipynb", tmp_path / "r.ipynb",
                        lambda c: _answer(c, "softmax", RIGHT))
    results = json.loads(_gradescope_layout(autograder, tmp_path / "autograder",
                                            {"my work.ipynb": right}).read_text())
    assert results["score"] == 3 and len(results["tests"]) == 3
    assert not os.stat(tmp_path / "autograder" / "source" / "grading").st_mode & 0o077
    empty = json.loads(_gradescope_layout(autograder, tmp_path / "empty", {}).read_text())
    assert empty["score"] == 0 and "Submit the notebook softmax.ipynb" in empty["output"]


def test_the_wheel_installs_and_imports_without_a_network(autograder: Path,
                                                           tmp_path: Path) -> None:
    with zipfile.ZipFile(autograder) as archive:
        wheel = next(n for n in archive.namelist() if n.endswith(".whl"))
        archive.extract(wheel, tmp_path)
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                    "--no-index", "--target", str(target), str(tmp_path / wheel)], check=True,
                   timeout=300)
    shown = subprocess.run(
        [sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(target)!r}); "
         "import teachflow.grading.gradescope as g; print(g.__file__)"],
        capture_output=True, text=True, check=True)
    assert shown.stdout.startswith(str(target))
    assert (target / "bin" / "teachflow").exists()


def test_the_sandbox_mounts_its_tmp_before_the_folders_it_shows() -> None:
    # (a tmpfs mounted later would hide a checkout or venv under /tmp from the worker)
    command = sandbox._bubblewrap("bwrap", None)
    tmp = command.index("--tmpfs")
    binds = [command[i + 2] for i, word in enumerate(command) if word == "--ro-bind"]
    assert command[tmp + 1] == "/tmp" and command.index("--ro-bind") > tmp
    assert {str(path) for path in sandbox.visible_paths()} <= set(binds)


def test_a_worker_that_keeps_the_graders_user_id_may_start_processes_beyond_its_own(
        monkeypatch) -> None:
    monkeypatch.setattr(sandbox.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(sandbox, "_tasks_of", lambda uid: 300)  # the instructor's own
    arguments = sandbox.Limits(processes=64).arguments(uid=None)
    assert arguments[arguments.index("--processes") + 1] == "364"
    assert sandbox.Limits(processes=64).arguments(uid=1_000_000_123)[5] == "64"
