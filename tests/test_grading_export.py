"""teachflow export: grades.csv into the gradebook Canvas exported, through the real command.

The roster is laid out as Canvas's gradebook export is (``Student``, ``ID``, ``SIS User ID``,
``SIS Login ID``, ``Section``, an assignment already there, and the ``Points Possible`` row);
one test grades real submissions first, the others write ``grades.csv`` as grading does.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import grading_notebooks as notebooks
import pytest

from teachflow.grading import assign
from teachflow.grading.cli import CANNOT, OK, main

HEADER = ["Student", "ID", "SIS User ID", "SIS Login ID", "Section", "Lab 1 (1201)"]
POINTS = ["    Points Possible", "", "", "", "", "10.00"]
ROSTER = [
    ["Lovelace, Ada", "101", "s101", "ada", "Mon, lab", "9.00"],  # (a comma: quoted)
    ["Turing, Alan", "102", "s102", "alan", "Tue", "7.50"],
    ["Hopper, Grace", "103", "s103", "grace", "Tue", ""],         # no submission
    ["Student, Test", "104", "", "", "", ""],                    # Canvas's test student
]


def write_csv(path: Path, rows: list[list[str]], bom: bool = False) -> Path:
    with path.open("w", newline="", encoding="utf-8-sig" if bom else "utf-8") as file:
        csv.writer(file).writerows(rows)
    return path


def read_csv(path: Path) -> list[list[str]]:
    with path.open(newline="", encoding="utf-8") as file:
        return list(csv.reader(file))


def results(folder: Path, rows: list[list[str]],
            header: tuple[str, ...] = ("submission", "score", "max_score", "test_softmax")) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    write_csv(folder / "grades.csv", [list(header), *rows])
    return folder


def export(capsys, *args: str) -> tuple[int, str, str]:
    status = main(["export", *args])
    captured = capsys.readouterr()
    return status, captured.out, captured.err


def test_a_roster_gets_the_column_students_without_a_submission_an_empty_cell(
        tmp_path: Path, capsys) -> None:
    graded = results(tmp_path / "results", [["ada", "3", "3", "3"], ["alan", "1.5", "3", "1.5"],
                                            ["zed", "2", "3", "2"], ["ada-2", "0", "3", "0"]])
    roster = write_csv(tmp_path / "roster.csv", [HEADER, POINTS, *ROSTER], bom=True)
    status, out, err = export(capsys, str(graded), "--canvas", str(roster), "--column",
                              "Softmax", "--out", str(tmp_path / "canvas.csv"))
    assert status == OK, err
    rows = read_csv(tmp_path / "canvas.csv")
    assert rows[0] == [*HEADER, "Softmax"]
    assert rows[1] == [*POINTS, "3"]  # the Points Possible row, right under the header
    assert rows[2:] == [[*ROSTER[0], "3"], [*ROSTER[1], "1.5"], [*ROSTER[2], ""],
                        [*ROSTER[3], ""]]
    assert "column 'Softmax' holds score for 2 of 4 students (points possible 3)" in out
    # nothing dropped silently: both lists, on stderr
    assert "2 submissions with no roster row" in err and "  zed\n" in err and "  ada-2\n" in err
    assert "2 students with no submission" in err
    assert "Hopper, Grace (grace)" in err and "Student, Test (no SIS Login ID)" in err


def test_final_score_is_exported_where_grading_applied_late_penalties(
        tmp_path: Path, capsys) -> None:
    header = ("submission", "score", "max_score", "test_softmax", "late_days", "penalty",
              "final_score")
    graded = results(tmp_path / "results", [["ada", "3", "3", "3", "0", "0", "3"],
                                            ["alan", "3", "3", "3", "2", "20", "2.4"]], header)
    roster = write_csv(tmp_path / "roster.csv", [HEADER, POINTS, *ROSTER[:2]])
    status, out, err = export(capsys, str(graded), "--canvas", str(roster), "--column",
                              "Softmax", "--out", str(tmp_path / "canvas.csv"))
    assert status == OK and err == ""
    assert [row[-1] for row in read_csv(tmp_path / "canvas.csv")] == ["Softmax", "3", "3", "2.4"]
    assert "holds final_score for 2 of 2 students" in out


def test_a_roster_without_points_possible_gets_the_row_and_a_known_column_is_filled(
        tmp_path: Path, capsys) -> None:
    graded = results(tmp_path / "results", [["ada", "2", "3", "2"]])
    roster = write_csv(tmp_path / "roster.csv", [HEADER, ROSTER[0]])
    status, _, _ = export(capsys, str(graded), "--canvas", str(roster), "--column",
                          "Lab 1 (1201)", "--out", str(tmp_path / "canvas.csv"))
    assert status == OK
    rows = read_csv(tmp_path / "canvas.csv")
    assert rows[0] == HEADER  # the assignment's own column, filled in place
    assert rows[1] == ["    Points Possible", "", "", "", "", "3"]
    assert rows[2] == [*ROSTER[0][:5], "2"]


@pytest.mark.parametrize("case, roster_rows, grades_rows, message", [
    ("no login column", [HEADER[:3] + HEADER[4:], ["A", "1", "s1", "Tue", ""]],
     [["ada", "1", "3", "1"]], "roster.csv has no column 'SIS Login ID'"),
    ("duplicate login", [HEADER, POINTS, ROSTER[0], ROSTER[1], ROSTER[0]],
     [["ada", "1", "3", "1"]], "roster.csv, line 5: SIS Login ID 'ada' is also on line 3"),
    ("short row", [HEADER, ["A", "1"]], [["ada", "1", "3", "1"]],
     "roster.csv, line 2: 2 cells where the header has 6"),
    ("score not a number", [HEADER, ROSTER[0]], [["ada", "lots", "3", "1"]],
     "grades.csv, line 2 (submission 'ada'): score is 'lots', not a number"),
    ("graded twice", [HEADER, ROSTER[0]], [["ada", "1", "3", "1"], ["ada", "2", "3", "2"]],
     "grades.csv, line 3 (submission 'ada'): a second row for this submission"),
])
def test_bad_input_is_refused_naming_the_file_and_the_row(
        tmp_path: Path, capsys, case: str, roster_rows, grades_rows, message: str) -> None:
    graded = results(tmp_path / "results", grades_rows)
    roster = write_csv(tmp_path / "roster.csv", roster_rows)
    status, _, err = export(capsys, str(graded), "--canvas", str(roster), "--column", "S",
                            "--out", str(tmp_path / "canvas.csv"))
    assert status == CANNOT
    assert err.startswith("teachflow export: export: ") and message in err, err
    assert not (tmp_path / "canvas.csv").exists()


def test_results_without_grades_csv_are_refused(tmp_path: Path, capsys) -> None:
    (tmp_path / "results").mkdir()
    roster = write_csv(tmp_path / "roster.csv", [HEADER, ROSTER[0]])
    status, _, err = export(capsys, str(tmp_path / "results"), "--canvas", str(roster),
                            "--column", "S", "--out", str(tmp_path / "canvas.csv"))
    assert status == CANNOT
    assert f"no {tmp_path / 'results' / 'grades.csv'}: the grades are not there" in err


def test_a_class_graded_for_real_is_exported(tmp_path: Path, capsys) -> None:
    """teachflow assign, grade (trusted answers, so without the sandbox) and export, in turn."""
    done = assign(notebooks.master(tmp_path), tmp_path / "build", verify=False)
    subs = tmp_path / "subs"
    subs.mkdir()
    notebooks.answered(done.release, subs / "ada.ipynb",
                       softmax="def my_softmax(x):\n    e = np.exp(x - x.max())\n"
                               "    return e / e.sum()")
    notebooks.answered(done.release, subs / "alan.ipynb")  # the stub: 0 points
    assert main(["grade", str(subs), "--bundle", str(done.grading), "--out",
                 str(tmp_path / "results"), "--jobs", "1", "--no-isolation"]) == OK
    roster = write_csv(tmp_path / "roster.csv", [HEADER, POINTS, *ROSTER[:3]])
    status, _, err = export(capsys, str(tmp_path / "results"), "--canvas", str(roster),
                            "--column", "Softmax", "--out", str(tmp_path / "canvas.csv"))
    assert status == OK
    rows = read_csv(tmp_path / "canvas.csv")
    assert [row[-1] for row in rows] == ["Softmax", "3", "3", "0", ""]
    assert "Hopper, Grace (grace)" in err
    ada = json.loads((tmp_path / "results" / "ada" / "results.json").read_text())
    assert ada["score"] == 3
