"""``teachflow export``: a class's grades as a file Canvas's gradebook imports.

::

    teachflow export results --canvas roster.csv --column "Softmax" --out canvas.csv

The roster is the CSV Canvas's gradebook exports (Grades, Export): one row per student, with
the columns ``Student``, ``ID``, ``SIS User ID``, ``SIS Login ID``, ``Section`` (then the
course's assignments), and right under the header a row whose ``Student`` cell says
``Points Possible``. The file written is that roster with every row and column kept as given,
plus one column, ``NAME``, for this assignment:

- on a student's row, the score of the submission whose name (``grades.csv``'s
  ``submission``, the notebook's stem) equals the row's ``SIS Login ID``: ``final_score`` when
  grading applied late penalties, ``score`` otherwise;
- on the ``Points Possible`` row, the assignment's ``max_score`` (the row is added, right
  under the header, when the roster has none: Canvas reads a new assignment's points there).

A roster that already has a column ``NAME`` (exported again after a first import) gets it
filled in place. Nothing is dropped silently: a roster row with no submission keeps an empty
cell, and both lists, submissions with no roster row and students with no submission, are
printed (to stderr) for the instructor to resolve, a file renamed or a student who joined late.
"""

from __future__ import annotations

import csv
import math
import os
from dataclasses import dataclass, field
from pathlib import Path

from teachflow.core.errors import GradingError

GRADES = "grades.csv"  # what ``teachflow grade`` writes into RESULTS
LOGIN = "SIS Login ID"
STUDENT = "Student"
POINTS_POSSIBLE = "Points Possible"


@dataclass
class Exported:
    """What ``teachflow export`` wrote, and what it could not match."""

    out: Path
    column: str
    score_column: str       # grades.csv's column the scores came from
    max_score: str
    matched: int
    students: int
    no_roster_row: list[str] = field(default_factory=list)   # submissions
    no_submission: list[str] = field(default_factory=list)   # students, as "Name (login)"

    def summary(self) -> str:
        return (f"wrote {self.out}: column {self.column!r} holds {self.score_column} for "
                f"{self.matched} of {self.students} students (points possible "
                f"{self.max_score}); import it in Canvas under Grades, Import")

    def unmatched(self) -> list[str]:
        """The lines that say what was not matched (none when everything was)."""
        lines = []
        if self.no_roster_row:
            lines.append(f"{len(self.no_roster_row)} submission"
                         f"{'s' * (len(self.no_roster_row) != 1)} with no roster row whose "
                         f"{LOGIN} is its name (not in the file written):")
            lines += [f"  {name}" for name in self.no_roster_row]
        if self.no_submission:
            lines.append(f"{len(self.no_submission)} student"
                         f"{'s' * (len(self.no_submission) != 1)} with no submission "
                         f"(their cell left empty):")
            lines += [f"  {student}" for student in self.no_submission]
        return lines


def read_grades(results: Path) -> tuple[dict[str, str], str, str]:
    """``RESULTS/grades.csv`` as ({submission: score}, the column read, max_score): the score
    is ``final_score`` when the file has it, ``score`` otherwise, kept as written."""
    path = results / GRADES
    header, rows = _read_csv(path, "the grades")
    wanted = "final_score" if "final_score" in header else "score"
    _require(path, header, ["submission", wanted, "max_score"],
              "give the RESULTS folder `teachflow grade ... --out RESULTS` wrote")
    at = {name: header.index(name) for name in ("submission", wanted, "max_score")}
    scores: dict[str, str] = {}
    maxima: set[str] = set()
    for line, row in rows:
        name = row[at["submission"]]
        where = f"{path}, line {line} (submission {name!r})"
        if name in scores:
            raise GradingError(f"{where}: a second row for this submission", op="export",
                               hint="grade each submission once into one RESULTS folder")
        scores[name] = _score(row[at[wanted]], where, wanted)
        maxima.add(_score(row[at["max_score"]], where, "max_score"))
    if len(maxima) > 1:
        raise GradingError(f"{path}: its rows disagree on max_score ({', '.join(sorted(maxima))})",
                           op="export", hint="one RESULTS folder holds one assignment's grades")
    return scores, wanted, maxima.pop() if maxima else ""


def export_canvas(results: str | os.PathLike[str], roster: str | os.PathLike[str],
                  column: str, out: str | os.PathLike[str]) -> Exported:
    """Write `out`: the Canvas `roster` with the grades in `results` as column `column` (see
    the module's docstring)."""
    if not column.strip():
        raise GradingError("--column is empty", op="export",
                           hint="name the assignment's column, as Canvas will show it")
    scores, score_column, max_score = read_grades(Path(results))
    roster_path = Path(roster)
    header, rows = _read_csv(roster_path, "the Canvas roster")
    _require(roster_path, header, [STUDENT, LOGIN],
             "give the CSV Canvas's gradebook exports (Grades, Export)")
    student, login = header.index(STUDENT), header.index(LOGIN)
    if column in header:
        at = header.index(column)
    else:
        header, at = [*header, column], len(header)
        rows = [(line, [*row, ""]) for line, row in rows]
    if not any(_is_points_row(row, student) for _, row in rows):
        points = [""] * len(header)
        points[student] = "    " + POINTS_POSSIBLE  # as Canvas writes it
        rows.insert(0, (0, points))
    seen: dict[str, int] = {}
    done = Exported(Path(out), column, score_column, max_score, 0, 0)
    for line, row in rows:
        if _is_points_row(row, student):
            row[at] = max_score
            continue
        done.students += 1
        key = row[login].strip()
        if key and key in seen:
            raise GradingError(f"{roster_path}, line {line}: {LOGIN} {key!r} is also on line "
                               f"{seen[key]}", op="export",
                               hint="each student once in the roster: export it from Canvas "
                                    "again")
        seen[key] = line
        if key and key in scores:
            row[at] = scores[key]
            done.matched += 1
        else:
            row[at] = ""
            done.no_submission.append(f"{row[student].strip() or '(no name)'} "
                                      f"({key or f'no {LOGIN}'})")
    done.no_roster_row = [name for name in scores if name not in seen]
    with Path(out).open("w", newline="", encoding="utf-8") as file:
        writer = csv.writer(file)
        writer.writerow(header)
        writer.writerows(row for _, row in rows)
    return done


def _read_csv(path: Path, what: str) -> tuple[list[str], list[tuple[int, list[str]]]]:
    """The header and the (line number, cells) of each non-empty row; every row as long as the
    header, or a `GradingError` naming the row. Canvas's exports start with a BOM: it is read."""
    try:
        with path.open(newline="", encoding="utf-8-sig") as file:
            reader = csv.reader(file)
            header = next(reader, None)
            rows = [(reader.line_num, row) for row in reader if any(cell.strip() for cell in row)]
    except FileNotFoundError:
        raise GradingError(f"no {path}: {what} are not there", op="export",
                           hint="teachflow export RESULTS --canvas ROSTER.csv --column NAME "
                                "--out FILE.csv") from None
    except (OSError, UnicodeDecodeError, csv.Error) as error:
        raise GradingError(f"cannot read {path} ({what}) as CSV: {error}", op="export") from None
    if not header:
        raise GradingError(f"{path} ({what}) is empty", op="export")
    header = [name.strip() for name in header]
    for line, row in rows:
        if len(row) != len(header):
            raise GradingError(f"{path}, line {line}: {len(row)} cells where the header has "
                               f"{len(header)}", op="export",
                               hint="a cell with a comma needs quotes; save the file as CSV again")
    return header, rows


def _require(path: Path, header: list[str], names: list[str], hint: str) -> None:
    missing = [name for name in names if name not in header]
    if missing:
        raise GradingError(f"{path} has no column {', '.join(map(repr, missing))} (its "
                           f"columns: {', '.join(header)})", op="export", hint=hint)


def _score(text: str, where: str, column: str) -> str:
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise GradingError(f"{where}: {column} is {text!r}, not a number", op="export",
                           hint="grade again, or correct the file by hand")
    return text.strip()


def _is_points_row(row: list[str], student: int) -> bool:
    return row[student].strip() == POINTS_POSSIBLE
