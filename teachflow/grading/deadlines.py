"""Due dates and late penalties: when each submission came in, and what lateness costs.

::

    teachflow grade subs/ --bundle build/grading --out results \\
        --due 2026-03-01T23:59:00-05:00 --late-penalty 10 --submitted-at times.csv

- ``--due``: the due date, ISO 8601 *with* its time zone (``2026-03-01T23:59:00-05:00``,
  ``...Z`` for UTC). A time without a zone is refused, not guessed: the same clock time is
  hours apart in two zones, and a learner's grade would depend on where grading ran.
- ``--submitted-at TIMES.csv``: when each submission came in, columns ``submission`` (its
  name in the results, its file name, or its path as given) and ``submitted_at`` (ISO 8601
  with its zone). On Gradescope the time is the ``created_at`` of the
  ``submission_metadata.json`` Gradescope writes beside the submission, whose
  ``assignment.due_date`` is the due date when ``--due`` is not given (`gradescope_times`).
- ``--late-penalty PERCENT``: per *started* day late (a minute late is one day), that percent
  of the assignment's points is taken off, as Canvas's late policy does; never below 0.

A submission whose time is unknown when a due date is given is an error that names it, before
anything is graded: never a silent "on time". grades.csv then gains ``late_days``,
``penalty`` (the points taken off) and ``final_score``; results.json's ``score`` is the final
score, and its ``output`` says the penalty.
"""

from __future__ import annotations

import csv
import json
import math
import os
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from teachflow.core.errors import GradingError

DAY = timedelta(days=1)


def parse_time(text: object, what: str) -> datetime:
    """`text` as an aware datetime; a `GradingError` naming `what` when it is not ISO 8601
    with a time zone."""
    try:
        when = datetime.fromisoformat(str(text).strip())
    except ValueError:
        raise GradingError(f"{what} is {text!r}, not an ISO 8601 time", op="grade",
                           hint="e.g. 2026-03-01T23:59:00-05:00 (or ...Z for UTC)") from None
    if when.tzinfo is None or when.utcoffset() is None:
        raise GradingError(f"{what} is {text!r}, a time without its time zone", op="grade",
                           hint=f"say which zone: {when.isoformat()}Z (UTC) or "
                                f"{when.isoformat()}-05:00") from None
    return when


@dataclass(frozen=True)
class Late:
    """One submission against the due date: how late, and what it costs."""

    submitted: datetime
    days: int
    penalty: float  # points taken off
    final: float

    def sentence(self, percent: float) -> str:
        if self.days == 0:
            return f"Submitted on time ({self.submitted.isoformat()})."
        return (f"Submitted {self.days} day{'s' * (self.days != 1)} late "
                f"({self.submitted.isoformat()}): late penalty {percent:g}% of the points per "
                f"started day, -{self.penalty:g} points; final score {self.final:g}.")


@dataclass(frozen=True)
class Deadline:
    """The due date, the penalty per started day late (a percent of the assignment's points)
    and each submission's time, by its name."""

    due: datetime
    percent: float
    times: dict[str, datetime]

    def late(self, name: str, score: float, max_score: float) -> Late:
        submitted = self.times[name]
        days = max(0, math.ceil((submitted - self.due) / DAY))
        penalty = min(score, max_score * self.percent / 100 * days)
        return Late(submitted, days, round(penalty, 6), round(score - penalty, 6))


def deadline(names: dict[Path, str], due: str | datetime | None, late_penalty: float | None,
             submitted_at: str | os.PathLike[str] | dict[str, datetime] | None,
             ) -> Deadline | None:
    """The `Deadline` of ``--due``, ``--late-penalty`` and ``--submitted-at`` for the
    submissions `names` (path -> name), or None when no due date is given. `submitted_at`:
    TIMES.csv, or the times by submission name already."""
    if due is None:
        if late_penalty is not None:
            raise GradingError(f"--late-penalty {late_penalty:g} without --due: late after "
                               f"what?", op="grade", hint="give --due ISO8601 as well")
        return None
    when = due if isinstance(due, datetime) else parse_time(due, "--due")
    if when.tzinfo is None:
        raise GradingError(f"the due date {when} has no time zone", op="grade")
    percent = 0.0 if late_penalty is None else float(late_penalty)
    if not 0 <= percent <= 100:
        raise GradingError(f"--late-penalty {percent:g}: a percent, from 0 to 100", op="grade")
    if submitted_at is None:
        raise GradingError(f"--due is given, but not when {next(iter(names.values()))} was "
                           f"submitted", op="grade",
                           hint="--submitted-at TIMES.csv (columns submission, submitted_at)")
    known = submitted_at if isinstance(submitted_at, dict) else read_times(submitted_at)
    times = {}
    for path, name in names.items():
        found = [known[key] for key in dict.fromkeys((name, str(path), path.name, path.stem))
                 if key in known]
        if not found:
            raise GradingError(f"no submission time for {name} ({path}): it would be graded as "
                               f"on time", op="grade",
                               hint="add a row for it to --submitted-at's file (submission, "
                                    "submitted_at)")
        times[name] = found[0]
    return Deadline(when, percent, times)


def read_times(path: str | os.PathLike[str]) -> dict[str, datetime]:
    """TIMES.csv's rows: submission -> when it was submitted (a repeated one is an error)."""
    try:
        with open(path, newline="", encoding="utf-8-sig") as file:
            rows = list(csv.DictReader(file))
            columns = rows[0].keys() if rows else []
    except OSError as error:
        raise GradingError(f"cannot read --submitted-at {path}: {error.strerror}",
                           op="grade") from None
    if not {"submission", "submitted_at"} <= set(columns):
        raise GradingError(f"{path} needs the columns submission and submitted_at (it has: "
                           f"{', '.join(c for c in columns if c) or 'no rows'})", op="grade")
    times: dict[str, datetime] = {}
    for number, row in enumerate(rows, 2):
        name = (row["submission"] or "").strip()
        if name in times:
            raise GradingError(f"{path}, line {number}: a second time for {name}", op="grade",
                               hint="keep one row per submission: the time of the one graded")
        times[name] = parse_time(row["submitted_at"], f"{path}, line {number}: submitted_at")
    return times


def gradescope_times(metadata: Path) -> tuple[datetime, datetime | None]:
    """From Gradescope's ``submission_metadata.json``: when the submission was made
    (``created_at``) and the assignment's due date (``assignment.due_date``, None if unset)."""
    try:
        data = json.loads(metadata.read_text(encoding="utf-8"))
        created, due = data["created_at"], (data.get("assignment") or {}).get("due_date")
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as error:
        raise GradingError(f"{metadata} has no created_at ({type(error).__name__}: {error})",
                           op="grade") from None
    return (parse_time(created, f"{metadata.name}'s created_at"),
            None if due is None else parse_time(due, f"{metadata.name}'s assignment.due_date"))
