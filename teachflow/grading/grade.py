"""``teachflow grade``: a class of submissions, graded in parallel, written as Gradescope reads.

::

    teachflow grade submissions/*.ipynb --bundle build/grading --out results --jobs 2

grades each notebook (`teachflow.grading.judge`: the learner's code in a sandboxed worker, the
tests on the trusted side) in ``--jobs`` processes at once (or, with ``--scheduler``, as tasks
of a Dask cluster: `teachflow.grading.cluster`), shows a progress bar over the class, and
writes

- ``RESULTS/<submission>/results.json`` in Gradescope's format: ``score``,
  ``execution_time``, ``output`` (the notes on the submission, in words) and one entry per
  test function (``name`` "grade_id: test", ``score``, ``max_score``, ``status``,
  ``output``: why it failed, ``visibility``: "visible", or ``--hidden-visibility`` for a
  hidden test: by default "after_due_date", so learners see it once the due date is past);
- ``RESULTS/<submission>/feedback.html``: the same, for the learner to read
  (`teachflow.grading.feedback`);
- ``RESULTS/grades.csv``: one row per submission (``submission``, ``score``, ``max_score``,
  then one column per test cell's ``grade_id``), the file to paste into a grade book.

With ``--due`` (`teachflow.grading.deadlines`), each submission's time is checked against the
due date before anything is graded, grades.csv gains ``late_days``, ``penalty`` and
``final_score``, and results.json's ``score`` is the final score.

``<submission>`` is the file's stem; when two submissions share a stem (``alice/hw.ipynb``,
``bob/hw.ipynb``) their folders' names are joined in front (``alice-hw``, ``bob-hw``), and a
stem that is the name of something grading writes (``grades.csv.ipynb``) gets a number
(``grades.csv-2``): no learner's file name can collide with the class's files. A folder given
as a submission stands for every notebook inside it. Scores are computed and written by this
process alone, after the worker that ran the learner's code is gone.

A hidden test's entry says whether it passed, and, when it did not, only why in general (not
done yet, or failed) and what the learner's own code did (the error it raised, the deadline it
ran past): the test's line and the values it compared would show learners the expected answer
once grades are published. ``--hidden-details`` writes them in full.
"""

from __future__ import annotations

import csv
import json
import multiprocessing
import os
import sys
import time
from collections.abc import Iterable, Iterator, Sequence
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from teachflow.core.errors import GradingError
from teachflow.grading import cluster, sandbox
from teachflow.grading.bundle import Bundle, load_bundle
from teachflow.grading.deadlines import Late, deadline
from teachflow.grading.failures import PASSED
from teachflow.grading.feedback import VISIBILITIES, feedback_html
from teachflow.grading.judge import Judged, TestOutcome, grade_submission

WARNING = """\
**********************************************************************************
WARNING: grading WITHOUT isolation (--no-isolation). Learners' code runs as you, can
read and write your files (the hidden tests included) and reach the network. Only
CPU time, memory, processes and file size are limited. Grade code you trust only.
**********************************************************************************"""

ISOLATION_SAYS = {
    "bubblewrap": "each submission runs in bubblewrap: its own filesystem view (no bundle, "
                  "no other submissions), no network, its own processes{uid}",
    "user": "each submission runs as a user id of its own, with no network, in a scratch "
            "folder (bubblewrap is not available: {why})",
    "none": "submissions run WITHOUT isolation",
}


GRADES = "grades.csv"
#: What grading writes into RESULTS beside the submissions' folders (no submission's name).
WRITTEN = frozenset({GRADES})


@dataclass
class Graded:
    """What ``teachflow grade`` did: where the results are, and how long it took."""

    out: Path
    names: dict[Path, str]
    scores: dict[str, float]
    max_score: float
    seconds: float
    isolation: str

    def summary(self) -> str:
        count = len(self.names)
        mean = sum(self.scores.values()) / count if count else 0.0
        each = self.seconds / count if count else 0.0
        return (f"graded {count} submission{'s' * (count != 1)} in {self.seconds:.1f} s "
                f"({each:.2f} s each); mean score {mean:.2f} of {self.max_score:g}; "
                f"results in {self.out} (grades.csv, and results.json and feedback.html per "
                "submission)")


def notebooks(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """The notebooks named: files as given, folders as every .ipynb inside them."""
    found = []
    for item in paths:
        path = Path(item)
        if path.is_dir():
            found += sorted(p for p in path.rglob("*.ipynb")
                            if ".ipynb_checkpoints" not in p.parts)
        elif path.exists():
            found.append(path)
        else:
            raise GradingError(f"no such submission: {path}", op="grade",
                               hint="give notebooks (or folders of them) that exist")
    if not found:
        raise GradingError("no notebooks to grade", op="grade",
                           hint="teachflow grade SUBMISSION.ipynb... --bundle DIR/grading")
    return found


def submission_names(paths: Sequence[Path]) -> dict[Path, str]:
    """Each submission's name: its stem, its folder's name joined in front where stems meet."""
    stems: dict[str, int] = {}
    for path in paths:
        stems[path.stem] = stems.get(path.stem, 0) + 1
    names: dict[Path, str] = {}
    taken: set[str] = set()
    for path in paths:
        name = path.stem if stems[path.stem] == 1 else \
            f"{path.resolve().parent.name}-{path.stem}"
        base, count = name, 1
        while name.lower() in taken or name.lower() in WRITTEN or not name.strip(".") or \
                os.sep in name:
            count += 1
            name = f"{base}-{count}"
        taken.add(name.lower())
        names[path] = name
    return names


def results_json(judged: Judged, hidden_details: bool = False,
                 visibility: str = "after_due_date", late: Late | None = None,
                 percent: float = 0.0) -> dict[str, Any]:
    """A submission's result in Gradescope's autograder format (a hidden test's output in
    general terms, unless `hidden_details`: see the module's docstring; its visibility
    `visibility`); past the due date (`late`), the score is the final score."""
    tests = [{"name": f"{t.cell}: {t.name}", "score": round(t.score, 6),
              "max_score": round(t.max_score, 6),
              "status": "passed" if t.status == PASSED else "failed",
              "output": "\n".join(t.lines if hidden_details or not t.hidden
                                  else _hidden_output(t)),
              "visibility": visibility if t.hidden else "visible"}
             for t in judged.tests]
    passed = sum(t.status == PASSED for t in judged.tests)
    output = [f"{passed} of {len(judged.tests)} tests passed.",
              *([late.sentence(percent)] if late else []), *judged.notes]
    score = sum(t.score for t in judged.tests) if late is None else late.final
    return {"score": round(score, 6),
            "execution_time": round(judged.seconds, 3), "output": "\n".join(output),
            "tests": tests}


def _hidden_output(test: TestOutcome) -> list[str]:
    """A hidden test's output: that it failed, and what the learner's own code did (an error,
    a deadline run past), never the test's lines or the values it expected."""
    if test.status == PASSED:
        return []
    why = "not done yet" if test.lines[:1] == ["not done yet:"] else "failed"
    own = ["Your code:", *test.own] if test.own else []
    return [f"This hidden test {why}; what it checks is not shown.", *own]


def write_results(folder: Path, judged: Judged, hidden_details: bool = False,
                  visibility: str = "after_due_date", late: Late | None = None,
                  percent: float = 0.0) -> None:
    """Write results.json and feedback.html into `folder`."""
    folder.mkdir(parents=True, exist_ok=True)
    result = results_json(judged, hidden_details, visibility, late, percent)
    (folder / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (folder / "feedback.html").write_text(
        feedback_html(folder.name, judged, result, visibility, late, percent), encoding="utf-8")


def _check_placement(bundle: Bundle, submissions: list[Path], out: Path,
                     isolation: str) -> None:
    """Refuse a layout in which a worker could read what it must not."""
    if isolation == "bubblewrap":
        for path in (bundle.path, out, *submissions):
            for shown in sandbox.visible_paths():
                if path.resolve().is_relative_to(shown):
                    raise GradingError(
                        f"{path} is inside {shown}, which the sandbox shows learners' code",
                        op="grade", hint="keep bundles, submissions and results elsewhere")
    if isolation == "user":
        for path in (bundle.path / "manifest.json", *submissions):
            if sandbox.readable_by_others(path):
                raise GradingError(
                    f"{path} can be read by every user, so learners' code could read it",
                    op="grade", hint=f"chmod o-rwx {path.parent} (or install bubblewrap)")


def grade(submissions: Iterable[str | os.PathLike[str]], bundle: str | os.PathLike[str],
          out: str | os.PathLike[str], jobs: int | None = None, timeout: float = 30.0,
          memory_mb: int = 2048, isolation: str | None = None,
          progress: bool = True, budget: float | None = None,
          hidden_details: bool = False, due: str | datetime | None = None,
          late_penalty: float | None = None,
          submitted_at: str | os.PathLike[str] | dict[str, datetime] | None = None,
          hidden_visibility: str = "after_due_date", scheduler: str | None = None) -> Graded:
    """Grade `submissions` against the bundle at `bundle` into `out` (see the module's
    docstring), in `jobs` processes here (2 when None), or on the Dask cluster `scheduler`
    (``local:N`` or ``tcp://HOST:PORT``: `teachflow.grading.cluster`). `isolation`: one of
    `sandbox.ISOLATIONS`, or None for the strongest that works here (a `GradingError` when
    none does); `budget`: seconds for all of one submission's cells and calls
    (`sandbox.Limits.budget` when None); `due`, `late_penalty`, `submitted_at`:
    `teachflow.grading.deadlines`."""
    start = time.perf_counter()
    if scheduler is not None:
        if jobs is not None:
            raise GradingError(f"--jobs {jobs} and --scheduler {scheduler} both say where to "
                               f"grade", op="grade",
                               hint="--jobs N: N processes here; --scheduler: a Dask cluster")
        cluster.parse_scheduler(scheduler)
    jobs = 2 if jobs is None else jobs
    loaded = load_bundle(bundle)
    paths = notebooks(submissions)
    if jobs < 1 or timeout <= 0 or memory_mb < 256 or (budget is not None and budget <= 0):
        raise GradingError(f"--jobs {jobs}, --timeout {timeout:g}, --memory {memory_mb}, "
                           f"--budget {budget}: jobs, timeout and budget must be positive, "
                           f"memory at least 256 MB", op="grade")
    if hidden_visibility not in VISIBILITIES:
        raise GradingError(f"--hidden-visibility {hidden_visibility}: one of "
                           f"{', '.join(VISIBILITIES)}", op="grade")
    names = submission_names(paths)
    late_by = deadline(names, due, late_penalty, submitted_at)
    reasons: list[str] = []
    if isolation is None:
        isolation, reasons = sandbox.find_isolation(allow_none=False)
    _say(isolation, reasons)
    results = Path(out)
    _check_placement(loaded, paths, results, isolation)
    results.mkdir(parents=True, exist_ok=True)
    limits = sandbox.Limits(timeout=timeout, memory_mb=memory_mb, total=budget)
    scores: dict[str, dict[str, float]] = {}
    lateness: dict[str, Late] = {}
    judging = _graded(paths, loaded, isolation, limits, jobs) if scheduler is None else \
        cluster.graded_on_dask(paths, loaded, isolation, limits, scheduler)
    for path, judged in _progress(judging, len(paths), progress):
        scores[names[path]] = judged.cell_scores(loaded)
        late = None if late_by is None else late_by.late(
            names[path], sum(scores[names[path]].values()), loaded.total_points)
        if late is not None:
            lateness[names[path]] = late
        write_results(results / names[path], judged, hidden_details, hidden_visibility, late,
                      0.0 if late_by is None else late_by.percent)
    _write_csv(results / GRADES, [names[p] for p in paths], scores, loaded, lateness)
    totals = {name: lateness[name].final if name in lateness else sum(cells.values())
              for name, cells in scores.items()}
    return Graded(results, names, totals, loaded.total_points, time.perf_counter() - start,
                  isolation)


def _say(isolation: str, reasons: list[str]) -> None:
    if isolation == "none":
        print(WARNING, file=sys.stderr)
        return
    uid = (", as a user id of its own" if os.geteuid() == 0 else "")
    print("teachflow grade: " + ISOLATION_SAYS[isolation].format(
        uid=uid, why="; ".join(reasons)), file=sys.stderr)


def _graded(paths: list[Path], bundle: Bundle, isolation: str, limits: sandbox.Limits,
            jobs: int) -> Iterator[tuple[Path, Judged]]:
    """(path, judged) as each submission finishes, `jobs` at a time."""
    context = multiprocessing.get_context("fork")  # the judges start with teachflow loaded
    with ProcessPoolExecutor(max_workers=min(jobs, len(paths)), mp_context=context) as pool:
        futures: dict[Future[Judged], Path] = {
            pool.submit(grade_submission, path, bundle, isolation, limits): path
            for path in paths}
        for future in as_completed(futures):
            yield futures[future], future.result()


def _progress(items: Iterator[Any], total: int, show: bool) -> Iterator[Any]:
    if not show:
        yield from items
        return
    try:
        from tqdm.auto import tqdm
    except ImportError:  # the grading extra brings tqdm; without it, a line per submission
        for done, item in enumerate(items, 1):
            print(f"graded {done}/{total}", file=sys.stderr)
            yield item
        return
    yield from tqdm(items, total=total, unit="submission", desc="grading", file=sys.stderr)


def _write_csv(path: Path, names: list[str], scores: dict[str, dict[str, float]],
               bundle: Bundle, lateness: dict[str, Late] | None = None) -> None:
    """grades.csv (with ``late_days``, ``penalty`` and ``final_score`` when there is a due
    date: `lateness`)."""
    cells = list(bundle.points)
    late = ["late_days", "penalty", "final_score"] if lateness else []
    with path.open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(["submission", "score", "max_score", *cells, *late])
        for name in names:
            row = scores[name]
            after = [lateness[name].days, _number(lateness[name].penalty),
                     _number(lateness[name].final)] if lateness else []
            writer.writerow([name, _number(sum(row.values())), _number(bundle.total_points),
                             *(_number(row[c]) for c in cells), *after])


def _number(value: float) -> str:
    return f"{value:.6g}"
