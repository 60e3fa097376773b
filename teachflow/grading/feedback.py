"""``RESULTS/<submission>/feedback.html``: the learner's own report of their grade.

results.json is for Gradescope; this page is for the learner, who opens it in a browser, even
offline: one file, its style inline, no script. It says

- the score (and, past the due date, the late penalty and the final score: `deadlines`);
- each visible test, passed or failed, with its points and the plain-words explanation
  ``teachflow check`` gives (the line, the values expected and got, their shapes);
- the hidden tests as ``--hidden-visibility`` allows (`VISIBILITIES`): with ``hidden`` only
  how many there are; with ``after_due_date`` or ``after_published`` their names, and that
  they are shown later; with ``visible`` whether each passed, and why in general when not;
- notes on the submission itself (a cell that did not run, a cell missing), and the time
  grading took.

Everything that comes from the submission (an error's message, a value the learner's code
returned, a test's output) is escaped: a notebook that prints ``<script>`` shows the text.
"""

from __future__ import annotations

import html

from teachflow.grading.deadlines import Late
from teachflow.grading.judge import Judged

#: Gradescope's visibilities of a test, and what the learner's page says of a hidden one.
VISIBILITIES = {
    "hidden": "",
    "after_due_date": "shown after the due date",
    "after_published": "shown once grades are published",
    "visible": "",
}

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; color: #1d2330; max-width: 52rem;
       margin: 2rem auto; padding: 0 1rem; }
h1 { font-size: 1.4rem; margin-bottom: .2rem; }
.score { font-size: 2rem; font-weight: 600; margin: .6rem 0; }
.late, .on-time { border-left: 4px solid #e69500; padding: .5rem .8rem; background: #fff4e0; }
.on-time { border-color: #3a9a58; background: #eef6f0; }
.test { border: 1px solid #d6dae3; border-radius: 6px; margin: .6rem 0; padding: .5rem .8rem; }
.test header { display: flex; gap: .8rem; align-items: baseline; }
.badge { font-weight: 600; padding: .05rem .5rem; border-radius: 4px; font-size: .85rem; }
.passed .badge { background: #dff3e4; color: #17622c; }
.failed .badge { background: #fde2e1; color: #9b1c16; }
.after_due_date .badge, .after_published .badge { background: #e8eaf0; color: #4a5060; }
.points { margin-left: auto; color: #4a5060; }
pre { background: #f6f7f9; padding: .5rem; overflow-x: auto; white-space: pre-wrap;
      margin: .4rem 0 0; font-size: 13px; }
.notes, .meta { color: #4a5060; }
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _test(entry: dict, kind: str, lines: list[str], score: str = "") -> str:
    """One test's box: its name, a badge (passed, failed, or when it is shown), its points,
    and why it failed."""
    badge = VISIBILITIES.get(kind) or kind
    why = f"<pre>{_e(chr(10).join(lines))}</pre>" if lines else ""
    score = score or f"{entry['score']:g}"
    return (f'<section class="test {_e(kind)}"><header><span class="badge">{_e(badge)}</span>'
            f"<code>{_e(entry['name'])}</code><span class=\"points\">{score} / "
            f"{entry['max_score']:g}</span></header>{why}</section>")


def _shown(entry: dict) -> str:
    lines = entry["output"].splitlines() if entry["status"] != "passed" else []
    return _test(entry, entry["status"], lines)


def feedback_html(name: str, judged: Judged, result: dict, visibility: str,
                  late: Late | None = None, percent: float = 0.0) -> str:
    """The page for submission `name`: `judged` says which tests are hidden, `result` is its
    results.json data (whose hidden tests' outputs say only what may be shown already), and
    `late` the deadline's verdict (`percent`: the penalty per started day)."""
    pairs = list(zip(judged.tests, result["tests"], strict=True))
    shown = [entry for test, entry in pairs if not test.hidden]
    hidden = [entry for test, entry in pairs if test.hidden]
    max_score = sum(entry["max_score"] for entry in result["tests"])
    score = sum(entry["score"] for entry in result["tests"])
    parts = [f"<h1>Feedback: {_e(name)}</h1>",
             f'<p class="score">{result["score"]:g} / {max_score:g}</p>']
    if late is not None:
        parts.append(f'<p class="{"late" if late.days else "on-time"}">'
                     f"Tests: {score:g} / {max_score:g}. {_e(late.sentence(percent))}</p>")
    passed = sum(entry["status"] == "passed" for entry in shown)
    parts.append(f"<h2>Tests: {passed} of {len(shown)} passed</h2>")
    parts += [_shown(entry) for entry in shown]
    if hidden:
        count = f"{len(hidden)} hidden test{'s' * (len(hidden) != 1)}"
        parts.append(f"<h2>Hidden tests ({len(hidden)})</h2>")
        if visibility == "hidden":
            verbs = ("counts", "it is") if len(hidden) == 1 else ("count", "they are")
            parts.append(f"<p>{count} {verbs[0]} toward the score; {verbs[1]} not shown.</p>")
        elif visibility == "visible":
            parts += [_shown(entry) for entry in hidden]
        else:
            parts += [_test(entry, visibility, [], score="?") for entry in hidden]
    if judged.notes:
        parts.append('<h2>Notes on the notebook</h2><ul class="notes">' +
                     "".join(f"<li>{_e(note)}</li>" for note in judged.notes) + "</ul>")
    parts.append(f'<p class="meta">Graded in {judged.seconds:.1f} s.</p>')
    return ("<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
            f"<title>Feedback: {_e(name)}</title><style>{STYLE}</style></head><body>\n"
            + "\n".join(parts) + "\n</body></html>\n")
