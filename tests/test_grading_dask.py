"""teachflow grade --scheduler: a class graded on Dask scores as ``--jobs`` scores it.

Real clusters, all on 127.0.0.1: a `LocalCluster` that ``--scheduler local:2`` starts and stops,
or one this file starts and hands over as ``tcp://127.0.0.1:PORT``. A worker killed mid-task
is killed by a submission itself, deterministically: graded without a sandbox, its code kills
its parent (the Dask worker) the first time it runs, or every time. The attack submissions of
tests/test_grading_attacks.py (a subset, and one that kills its parent) go through the
scheduler sandboxed, where a sandbox works here.
"""

from __future__ import annotations

import csv
import importlib
import json
import re
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import grading_notebooks as notebooks
import pytest
import test_grading_attacks as attacks

from teachflow.core.errors import GradingError
from teachflow.grading import assign, cluster, grade, sandbox

try:
    import distributed
except ImportError:  # pragma: no cover - the extra is not installed
    distributed = None
needs_dask = pytest.mark.skipif(distributed is None, reason='Dask distributed is not installed '
                                                            '(pip install "teachflow[dask]")')
grade_module = importlib.import_module("teachflow.grading.grade")  # (the name is the function's)
ISOLATION, WHY_NOT = sandbox.find_isolation(allow_none=True)
RIGHT = "def my_softmax(x):\n    e = np.exp(x - x.max())\n    return e / e.sum()"
WRONG = "def my_softmax(x):\n    return np.exp(x)"


def _answered(release: Path, out: Path, source: str | None) -> Path:
    notebook = json.loads(release.read_text())
    for cell in notebook["cells"]:
        if source is not None and \
                cell["metadata"].get("nbgrader", {}).get("grade_id") == "softmax":
            cell["source"] = source
    out.write_text(json.dumps(notebook))
    return out


@pytest.fixture(scope="module")
def softmax(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("softmax")
    assign(notebooks.master(folder), folder / "build")
    return folder


def _class(folder: Path, release: Path, answers: dict[str, str | None]) -> Path:
    folder.mkdir()
    for name, source in answers.items():
        _answered(release, folder / f"{name}.ipynb", source)
    return folder


def _teachflow(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "teachflow", *args], capture_output=True,
                          text=True, timeout=300)


def _without_times(results: Path) -> dict[str, dict]:
    found = {}
    for path in sorted(results.glob("*/results.json")):
        data = json.loads(path.read_text())
        data.pop("execution_time")
        found[path.parent.name] = data
    return found


@needs_dask
def test_a_local_cluster_grades_a_class_as_the_process_pool_does(softmax: Path,
                                                                   tmp_path: Path) -> None:
    release = softmax / "build" / "release" / "softmax.ipynb"
    subs = _class(tmp_path / "subs", release, {"alice": RIGHT, "bob": None, "carol": WRONG})
    (subs / "broken.ipynb").write_text("{not json")
    isolation = ["--no-isolation"] if ISOLATION == "none" else []
    common = [str(subs), "--bundle", str(softmax / "build" / "grading"), *isolation]
    pool = _teachflow("grade", *common, "--out", str(tmp_path / "pool"), "--jobs", "2")
    dask = _teachflow("grade", *common, "--out", str(tmp_path / "dask"), "--scheduler",
                      "local:2")
    assert pool.returncode == 0 and dask.returncode == 0, (pool.stderr, dask.stderr)
    assert "graded 4 submissions" in dask.stdout and "grading" in dask.stderr  # the bar
    assert (tmp_path / "dask" / "grades.csv").read_text() == \
        (tmp_path / "pool" / "grades.csv").read_text()
    assert _without_times(tmp_path / "dask") == _without_times(tmp_path / "pool")
    assert [json.loads((tmp_path / "dask" / n / "results.json").read_text())["score"]
            for n in ("alice", "bob", "broken", "carol")] == [3, 0, 0, 1]


KILLS_ITS_PARENT = """
import os
import signal

{right}

with open({runs!r}, "a") as _runs:
    _runs.write("ran\\n")
if {always} or not os.path.exists({mark!r}):
    open({mark!r}, "w").close()
    os.kill(os.getppid(), signal.SIGKILL)  # without a sandbox, the parent is the Dask worker
    os._exit(0)
"""


@needs_dask
def test_a_worker_killed_mid_task_is_retried_once_and_each_result_written_once(
        softmax: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    release = softmax / "build" / "release" / "softmax.ipynb"
    killers = {name: KILLS_ITS_PARENT.format(right=RIGHT, always=name == "always",
                                             runs=str(tmp_path / f"{name}.runs"),
                                             mark=str(tmp_path / f"{name}.mark"))
               for name in ("once", "always")}
    # (six tasks for two workers: Dask queues them, so each worker holds only the one it runs)
    subs = _class(tmp_path / "subs", release, {"a": RIGHT, "b": RIGHT, "c": WRONG, "d": RIGHT,
                                               **killers})
    written: list[str] = []
    write = grade_module.write_results
    monkeypatch.setattr(grade_module, "write_results",
                        lambda folder, *rest: (written.append(folder.name), write(folder, *rest)))
    done = grade([subs], softmax / "build" / "grading", tmp_path / "results", isolation="none",
                 scheduler="local:2", progress=False, timeout=20)
    assert sorted(written) == ["a", "always", "b", "c", "d", "once"]  # each once, by the client
    assert done.scores == {"a": 3, "b": 3, "c": 1, "d": 3, "once": 3, "always": 0}
    assert (tmp_path / "once.runs").read_text() == "ran\n" * 2    # died, then graded
    assert (tmp_path / "always.runs").read_text() == "ran\n" * 2  # died twice: no third try
    always = json.loads((tmp_path / "results" / "always" / "results.json").read_text())
    assert "each of the 2 Dask workers that graded it died" in always["output"]
    with (tmp_path / "results" / "grades.csv").open() as file:
        rows = {row["submission"]: float(row["score"]) for row in csv.DictReader(file)}
    assert rows == done.scores


KILL_PARENT = """
import os
import signal


def my_softmax(x):
    for pid in (os.getppid(), 1, -1):  # the parent, the namespace's first process, everyone
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    return np.full(x.shape[0] + 1, np.nan)
"""
#: The attacks on what Dask adds: the worker that runs the sandbox (killed, exited), the results
#: it sends back (faked, pickled), the files beside it (snooped), one submission's effect on
#: another's (victim). The sandbox's own limits (a loop, a fork bomb, a huge allocation) are
#: the same in a Dask worker as in the pool: tests/test_grading_attacks.py grades those.
ATTACKS = ["honest", "snoop", "fake_results", "victim", "os_exit_call", "pickle_trap",
           "kill_parent"]


@needs_dask
@pytest.mark.skipif(attacks.sandbox_missing() is not None,
                    reason=f"the attacks need a sandbox: {attacks.sandbox_missing()}")
def test_attack_submissions_are_scored_right_through_the_scheduler(tmp_path: Path) -> None:
    master = attacks.two_exercises(tmp_path)
    done = assign(master, tmp_path / "build")
    bundle, results, subs = Path(done.grading), tmp_path / "results", tmp_path / "subs"
    subs.mkdir()
    values = {"BUNDLE": str(bundle), "RESULTS": str(results), "SUBMISSIONS": str(subs),
              "MASTER": str(master), "SECRET_A": attacks.SECRET_A,
              "SECRET_B": attacks.SECRET_B, "MARKER": str(tmp_path / "unpickled")}
    release = json.loads(Path(done.release).read_text())
    expected = {**attacks.BY_NAME, "kill_parent": attacks.cheat("kill_parent", KILL_PARENT,
                                                                relu=None, at_most=2.0)}
    for name in ATTACKS:
        answers = {k: attacks._fill(textwrap.dedent(v), values)
                   for k, v in expected[name].answers.items()}
        notebook = attacks._notebook(release, attacks.Submission(name, answers))
        (subs / f"{name}.ipynb").write_text(json.dumps(notebook))
    ran = _teachflow("grade", str(subs), "--bundle", str(bundle), "--out", str(results),
                     "--scheduler", "local:2", "--timeout", str(attacks.TIMEOUT), "--memory",
                     str(attacks.MEMORY))
    assert ran.returncode == 0, ran.stderr[-3000:]
    with (results / "grades.csv").open() as file:
        rows = {row["submission"]: row for row in csv.DictReader(file)}
    assert sorted(rows) == sorted(ATTACKS)
    for name in ATTACKS:
        want, got = expected[name], rows[name]
        text = (results / name / "results.json").read_text()
        honest = name in attacks.HONEST
        for grade_id, points in want.scores.items():
            assert points is None or float(got[grade_id]) == points, (name, text)
        assert not honest or float(got["score"]) == attacks.TOTAL, (name, text)
        assert want.at_most is None or float(got["score"]) <= want.at_most, (name, text)
        assert want.message is None or re.search(want.message, text, re.IGNORECASE), text
        assert "SNOOP-FOUND" not in text and attacks.SECRET not in text, (name, text)
        assert "FAKE" not in text and "Dask worker" not in text, (name, text)  # none died
    assert not (tmp_path / "unpickled").exists()


@needs_dask
def test_a_running_cluster_is_used_by_its_tcp_address(softmax: Path, tmp_path: Path) -> None:
    release = softmax / "build" / "release" / "softmax.ipynb"
    subs = _class(tmp_path / "subs", release, {"alice": RIGHT, "carol": WRONG})
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, host="127.0.0.1",
                                  dashboard_address=None,
                                  scheduler_kwargs={"dashboard_address": "127.0.0.1:0"}
                                  ) as running:
        assert running.scheduler_address.startswith("tcp://127.0.0.1:")
        done = grade([subs], softmax / "build" / "grading", tmp_path / "results",
                     scheduler=running.scheduler_address, progress=False,
                     isolation="none" if ISOLATION == "none" else None)
        assert len(running.scheduler_info["workers"]) == 1  # still there: it is not ours
    assert done.scores == {"alice": 3, "carol": 1}


def _closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@pytest.mark.parametrize("scheduler, jobs, problem", [
    ("local:0", None, "'local:0': give local:N"), ("local:two", None, "give local:N"),
    ("tcp://127.0.0.1", None, "or tcp://HOST:PORT"), ("http://127.0.0.1:8786", None, "give"),
    ("local:2", 2, "--jobs 2 and --scheduler local:2 both say where to grade"),
])
def test_a_bad_scheduler_is_refused_before_anything_runs(softmax: Path, tmp_path: Path,
                                                         scheduler: str, jobs: int | None,
                                                         problem: str) -> None:
    with pytest.raises(GradingError, match=re.escape(problem)):
        grade([softmax / "softmax.ipynb"], softmax / "build" / "grading", tmp_path / "r",
              jobs=jobs, scheduler=scheduler, isolation="none")
    assert not (tmp_path / "r").exists()


def test_without_the_extra_the_error_says_what_to_install(monkeypatch: pytest.MonkeyPatch
                                                          ) -> None:
    monkeypatch.setitem(sys.modules, "distributed", None)  # (import distributed: ImportError)
    with pytest.raises(GradingError, match=re.escape('pip install "teachflow[dask]"')):
        cluster.parse_scheduler("local:2")


@needs_dask
def test_an_unreachable_scheduler_is_said_within_the_connect_timeout(
        softmax: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(cluster, "CONNECT_SECONDS", 2.0)
    address = f"tcp://127.0.0.1:{_closed_port()}"
    start = time.monotonic()
    with pytest.raises(GradingError, match=f"cannot reach the Dask scheduler at {address}"):
        grade([softmax / "softmax.ipynb"], softmax / "build" / "grading", tmp_path / "r",
              scheduler=address, isolation="none", progress=False)
    assert time.monotonic() - start < 30


class _Cluster:
    """What `cluster._check_workers` asks of a Dask client, answered as a cluster would."""

    def __init__(self, threads: int, works: tuple[bool, str]) -> None:
        self.threads, self.works = threads, works

    def run(self, function, *args):
        return {"tcp://127.0.0.1:1": self.works}

    def scheduler_info(self):
        return {"workers": {"tcp://127.0.0.1:1": {"nthreads": self.threads}}}


@pytest.mark.parametrize("threads, works, problem", [
    (4, (True, ""), "more than one thread"),
    (1, (False, "bubblewrap is not installed"), "tcp://127.0.0.1:1: bubblewrap is not"),
])
def test_workers_that_cannot_grade_as_this_machine_does_are_refused(
        threads: int, works: tuple[bool, str], problem: str) -> None:
    with pytest.raises(GradingError, match=re.escape(problem)):
        cluster._check_workers(_Cluster(threads, works), "bubblewrap")
    cluster._check_workers(_Cluster(1, (True, "")), "bubblewrap")  # (no error)
