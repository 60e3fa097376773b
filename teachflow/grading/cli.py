"""The ``teachflow`` command: one subcommand per step of an exercise's life.

    teachflow assign MASTER.ipynb --out DIR     the instructor: release/ and grading/
    teachflow check NOTEBOOK.ipynb              the learner: run the visible tests
    teachflow grade SUBMISSION... --bundle DIR/grading --out RESULTS
                                                the instructor: grade a class, sandboxed
    teachflow gradescope DIR/grading --out autograder.zip
                                                the same grading on Gradescope's machines
    teachflow export RESULTS --canvas ROSTER.csv --column NAME --out FILE.csv
                                                the grades as a Canvas gradebook import
    teachflow similarity SUBMISSION... --bundle DIR/grading --out REPORT.html
                                                pairs of submissions alike enough to read

(``python -m teachflow ...`` is the same command.) Each subcommand is a function that takes
the parsed arguments and returns the exit status, registered in `SUBCOMMANDS` with its
arguments: adding one is one function and one entry.

Exit status: 0 when the command did what it was asked (``check``: every visible test passed;
``grade``: every submission was graded, whatever the scores),
1 when ``check`` ran and some test did not pass, 2 when the command could not do its work (a
file that is not a notebook, a master that breaks a rule): the message says why on stderr.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

from teachflow.core.errors import TeachflowError

OK, TESTS_FAILED, CANNOT = 0, 1, 2


def assign_command(args: argparse.Namespace) -> int:
    from teachflow.grading.assign import assign

    done = assign(args.master, args.out, verify=not args.no_verify)
    cells = f"{done.test_cells} test cell{'s' * (done.test_cells != 1)}"
    graded = "" if args.no_verify else "; the master, graded, gets full marks"
    print(f"released {done.release}\ngrading bundle {done.grading} ({cells}, "
          f"{done.total_points:g} points{graded}): never hand it out")
    return OK


def check_command(args: argparse.Namespace) -> int:
    from teachflow.grading.check import check_notebook

    report = check_notebook(args.notebook)
    print(report.text())
    return OK if report.passed else TESTS_FAILED


def grade_command(args: argparse.Namespace) -> int:
    from teachflow.grading.grade import grade

    done = grade(args.submissions, args.bundle, args.out, jobs=args.jobs, timeout=args.timeout,
                 memory_mb=args.memory, isolation="none" if args.no_isolation else None,
                 budget=args.budget, hidden_details=args.hidden_details,
                 due=args.due, late_penalty=args.late_penalty, submitted_at=args.submitted_at,
                 hidden_visibility=args.hidden_visibility,
                 scheduler=args.scheduler)
    print(done.summary())
    return OK


def gradescope_command(args: argparse.Namespace) -> int:
    from teachflow.grading.gradescope import BASE_IMAGE, autograder

    path = autograder(args.bundle, args.out, due=args.due, late_penalty=args.late_penalty,
                      hidden_visibility=args.hidden_visibility)
    print(f"wrote {path}: upload it as the assignment's autograder (a Gradescope "
          f"\"Programming Assignment\"; base image: {BASE_IMAGE}; README.md inside says more)")
    return OK


def export_command(args: argparse.Namespace) -> int:
    from teachflow.grading.canvas import export_canvas

    done = export_canvas(args.results, args.canvas, args.column, args.out)
    for line in done.unmatched():
        print(f"teachflow export: {line}", file=sys.stderr)
    print(done.summary())
    return OK


def similarity_command(args: argparse.Namespace) -> int:
    from teachflow.grading.similarity import compare

    found = compare(args.submissions, args.bundle, args.out, top=args.top, common=args.common)
    print(found.summary())
    return OK


#: The options for a whole course, of both grade and gradescope (`teachflow.grading.deadlines`).
DEADLINE: list[tuple[tuple[str, ...], dict[str, object]]] = [
    (("--due",), {"metavar": "ISO8601",
                  "help": "the due date, with its time zone (2026-03-01T23:59:00-05:00); on "
                          "Gradescope, the assignment's due date when not given"}),
    (("--late-penalty",), {"type": float, "metavar": "PERCENT",
                           "help": "percent of the points taken off per started day late "
                                   "(never below 0); grades.csv gains late_days, penalty, "
                                   "final_score"}),
]
VISIBILITY: tuple[tuple[str, ...], dict[str, object]] = (
    ("--hidden-visibility",), {"default": "after_due_date",
                               "choices": ["hidden", "after_due_date", "after_published",
                                           "visible"],
                               "help": "Gradescope's visibility of hidden tests' entries "
                                       "(default after_due_date); visible tests stay visible"})

#: name -> (function, help, [(argument names, keyword arguments for add_argument)])
SUBCOMMANDS: dict[str, tuple[Callable[[argparse.Namespace], int], str,
                             list[tuple[tuple[str, ...], dict[str, object]]]]] = {
    "assign": (assign_command, "write the learner's notebook and the grading bundle", [
        (("master",), {"help": "the master notebook, with solutions and all tests"}),
        (("--out",), {"required": True, "metavar": "DIR",
                      "help": "writes DIR/release/MASTER.ipynb and DIR/grading/"}),
        (("--no-verify",), {"action": "store_true",
                            "help": "do not grade the master itself first (by default a "
                                    "master whose own answers do not get full marks is "
                                    "refused)"}),
    ]),
    "check": (check_command, "run a notebook's visible tests (exit status 0: all pass)", [
        (("notebook",), {"help": "the exercise notebook"}),
    ]),
    "grade": (grade_command, "grade submissions, learners' code sandboxed", [
        (("submissions",), {"nargs": "+", "metavar": "SUBMISSION",
                            "help": "learners' notebooks (a folder: every notebook in it)"}),
        (("--bundle",), {"required": True, "metavar": "DIR/grading",
                         "help": "the grading bundle teachflow assign wrote"}),
        (("--out",), {"required": True, "metavar": "RESULTS",
                      "help": "writes RESULTS/<submission>/results.json and grades.csv"}),
        (("--jobs",), {"type": int, "default": None, "metavar": "N",
                       "help": "submissions graded at once, in processes of this machine "
                               "(default 2)"}),
        (("--scheduler",), {"default": None, "metavar": "local:N|tcp://HOST:PORT",
                            "help": "grade on Dask instead (pip install \"teachflow[dask]\"):"
                                    " local:N starts N worker processes here, tcp://HOST:PORT "
                                    "uses a running Dask scheduler, whose workers need "
                                    "teachflow and bubblewrap; not with --jobs"}),
        (("--timeout",), {"type": float, "default": 30.0, "metavar": "S",
                          "help": "seconds each cell and each call of a learner's function "
                                  "may take (default 30); a function whose call ran past it "
                                  "is not called again"}),
        (("--budget",), {"type": float, "default": None, "metavar": "S",
                         "help": "seconds for all of one submission's cells and calls "
                                 "(default: 10 timeouts, at least 300)"}),
        (("--hidden-details",), {"action": "store_true",
                                 "help": "write why a hidden test failed in full, its line "
                                         "and the values it compared (learners see them when "
                                         "--hidden-visibility shows the test, the expected "
                                         "answer included); by default only 'failed' or 'not "
                                         "done yet'"}),
        (("--memory",), {"type": int, "default": 2048, "metavar": "MB",
                         "help": "memory of a learner's process (default 2048)"}),
        (("--no-isolation",), {"action": "store_true",
                               "help": "run learners' code without a sandbox (trusted code "
                                       "only: it can read your files)"}),
        *DEADLINE,
        (("--submitted-at",), {"metavar": "TIMES.csv",
                               "help": "when each submission was made: columns submission "
                                       "(its name, file name or path) and submitted_at (ISO "
                                       "8601 with a time zone); needed with --due"}),
        VISIBILITY,
    ]),
    "gradescope": (gradescope_command, "write a Gradescope autograder for a bundle", [
        (("bundle",), {"metavar": "DIR/grading", "help": "the grading bundle"}),
        (("--out",), {"required": True, "metavar": "autograder.zip",
                      "help": "the autograder to upload"}),
        *DEADLINE, VISIBILITY,
    ]),
    "export": (export_command, "write the grades as a Canvas gradebook import", [
        (("results",), {"metavar": "RESULTS", "help": "the folder teachflow grade wrote"}),
        (("--canvas",), {"required": True, "metavar": "ROSTER.csv",
                         "help": "the gradebook Canvas exported (a submission matches the "
                                 "row whose SIS Login ID is its name)"}),
        (("--column",), {"required": True, "metavar": "NAME",
                         "help": "the assignment's column, as Canvas shows it: grades.csv's "
                                 "final_score (its score where there is none)"}),
        (("--out",), {"required": True, "metavar": "FILE.csv", "help": "the file to import"}),
    ]),
    "similarity": (similarity_command, "rank pairs of submissions by how alike their "
                                       "answers are (it flags, never grades)", [
        (("submissions",), {"nargs": "+", "metavar": "SUBMISSION",
                            "help": "learners' notebooks (a folder: every notebook in it)"}),
        (("--bundle",), {"required": True, "metavar": "DIR/grading",
                         "help": "the grading bundle: its given code is nobody's copy"}),
        (("--out",), {"required": True, "metavar": "REPORT.html",
                      "help": "the report: each pair's matching lines side by side"}),
        (("--top",), {"type": int, "default": 20, "metavar": "N",
                      "help": "pairs printed and shown (default 20)"}),
        (("--common",), {"type": int, "default": 10, "metavar": "N",
                         "help": "code found in more than N submissions is common, not "
                                 "copied, and ignored (default 10, as MOSS's -m)"}),
    ]),
}


def parser() -> argparse.ArgumentParser:
    main_parser = argparse.ArgumentParser(
        prog="teachflow", description="Exercises in notebooks: author, check and grade them.")
    commands = main_parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name, (function, help_text, arguments) in SUBCOMMANDS.items():
        command = commands.add_parser(name, help=help_text, description=help_text)
        for names, options in arguments:
            command.add_argument(*names, **options)  # type: ignore[arg-type]
        command.set_defaults(run=function)
    return main_parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``teachflow`` with `argv` (the command line's arguments when None)."""
    args = parser().parse_args(argv)
    try:
        return args.run(args)
    except TeachflowError as error:
        # (no "at <line>": on the command line that would be this script's own line)
        what = f"{error.op}: {error.message}" if error.op else error.message
        hint = f"\n  hint: {error.hint}" if error.hint else ""
        print(f"teachflow {args.command}: {what}{hint}", file=sys.stderr)
        return CANNOT


if __name__ == "__main__":
    sys.exit(main())
