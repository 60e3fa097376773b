"""The similarity report: one HTML page, each flagged pair's cells side by side, matches marked.

``teachflow similarity`` (`teachflow.grading.similarity`) writes it. The page stands alone: its
style is inline, it loads nothing and runs nothing (no script at all, and a Content Security
Policy that would refuse one), so it opens offline and can be mailed. Everything a learner
wrote, code, cell ids and file names alike, goes through `html.escape`: a submission that
holds ``</pre><script>`` shows those characters, it does not run them.

A pair's section shows, for each cell where they match, the first submission's cell on the
left and the second's on the right, line numbers in the margin and the lines that hold a
shared fingerprint highlighted; hovering a line says where the other submission has it.
"""

from __future__ import annotations

from collections import defaultdict
from html import escape
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from teachflow.grading.similarity import Alike, Answers, Compared

STYLE = """
body { font: 15px/1.45 system-ui, sans-serif; margin: 2em auto; max-width: 80em; padding: 0 1em;
       color: #1d1d1f; }
.flag { background: #fff6d6; border-left: 4px solid #d9a400; padding: .6em 1em; }
table.ranking { border-collapse: collapse; margin: 1em 0; }
table.ranking td, table.ranking th { padding: .25em .8em; border-bottom: 1px solid #ddd;
                                     text-align: left; }
.sbs { display: grid; grid-template-columns: minmax(0, 1fr) minmax(0, 1fr); gap: 1em;
       margin-bottom: 1.5em; }
.who { font-weight: 600; margin-bottom: .2em; overflow-wrap: anywhere; }
pre { background: #f6f8fa; padding: .6em; overflow-x: auto; margin: 0;
      font: 13px/1.4 ui-monospace, monospace; }
.ln { color: #8b949e; user-select: none; }
mark { background: #ffd8a8; display: inline-block; width: 100%; }
"""

CSP = "default-src 'none'; style-src 'unsafe-inline'"


def report(found: Compared, k: int, window: int, common: int) -> str:
    """The whole page for what `teachflow.grading.similarity.compare` found."""
    shown = found.pairs[:found.top]
    count = len(found.pairs)
    parts = [
        "<!doctype html>", '<html lang="en"><head><meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{CSP}">',
        f"<title>Similarity of {found.submissions} submissions</title>",
        f"<style>{STYLE}</style></head><body>",
        f"<h1>Similarity of {found.submissions} submissions</h1>",
        '<p class="flag"><strong>This report flags, it never grades.</strong> Each pair below '
        "shares more of its answers than the exercise's given code explains. Short "
        "exercises have few ways to be right, and people who studied together write alike: "
        "read the code, and talk with the learners, before you conclude anything.</p>",
        f"<p>Answers (solution cells and added code cells) compared after normalising names, "
        f"numbers, strings and layout; {k}-token k-grams winnowed in windows of {window} "
        f"(as MOSS); the master's code, and code found in more than {common} submissions, "
        f"ignored. Score: shared fingerprints over all of the pair's. {count} "
        f"pair{' shares' if count == 1 else 's share'} something; the {len(shown)} most "
        f"alike are shown.</p>",
    ]
    if found.skipped:
        parts.append("<p>Skipped (not notebooks):</p><ul>"
                     + "".join(f"<li>{escape(note)}</li>" for note in found.skipped) + "</ul>")
    parts.append(_ranking(shown))
    parts += [_pair(number, pair) for number, pair in enumerate(shown, 1)]
    parts.append("</body></html>\n")
    return "\n".join(parts)


def _ranking(pairs: list[Alike]) -> str:
    if not pairs:
        return "<p>No two submissions share code beyond the master's.</p>"
    rows = "".join(
        f'<tr><td><a href="#pair-{n}">{n}</a></td><td>{p.score:.0%}</td>'
        f"<td>{escape(p.first.name)}</td><td>{escape(p.second.name)}</td>"
        f"<td>{p.count}</td><td>{p.first_share:.0%} / {p.second_share:.0%}</td></tr>"
        for n, p in enumerate(pairs, 1))
    return ('<table class="ranking"><tr><th>#</th><th>score</th><th>first</th><th>second</th>'
            "<th>shared fingerprints</th><th>share of each</th></tr>" + rows + "</table>")


def _pair(number: int, pair: Alike) -> str:
    first, second = _marked(pair.first, pair.second, pair.shared), \
        _marked(pair.second, pair.first, pair.shared)
    labels = [*first, *(label for label in second if label not in first)]
    cells = "".join(
        f"<h3>{escape(label)}</h3>"
        f'<div class="sbs">{_side(pair.first, label, first.get(label, {}))}'
        f"{_side(pair.second, label, second.get(label, {}))}</div>" for label in labels)
    return (f'<section id="pair-{number}"><h2>{number}. {escape(pair.first.name)} ~ '
            f"{escape(pair.second.name)}: {pair.score:.0%}</h2>{cells}</section>")


def _marked(this: Answers, other: Answers,
            shared: frozenset[int]) -> dict[str, dict[int, str]]:
    """{cell label: {line: where `other` has the same code}} for `this`'s matching lines."""
    lines: dict[str, dict[int, dict[str, set[int]]]] = defaultdict(
        lambda: defaultdict(lambda: defaultdict(set)))
    for h in shared:
        for label, begin, end in this.prints[h]:
            for line in range(begin, end + 1):
                for other_label, other_begin, other_end in other.prints[h]:
                    lines[label][line][other_label].update(range(other_begin, other_end + 1))
    return {label: {line: "; ".join(f"{other.name}'s {other_label}, {_ranges(numbers)}"
                                    for other_label, numbers in sorted(where.items()))
                    for line, where in by_line.items()}
            for label, by_line in lines.items()}


def _ranges(numbers: set[int]) -> str:
    """Line numbers as a reader writes them: ``lines 1-4, 9``."""
    spans: list[list[int]] = []
    for number in sorted(numbers):
        if spans and number == spans[-1][1] + 1:
            spans[-1][1] = number
        else:
            spans.append([number, number])
    text = ", ".join(f"{a}-{b}" if a != b else f"{a}" for a, b in spans)
    return f"line{'s' * (len(numbers) > 1)} {text}"


def _side(answers: Answers, label: str, marked: dict[int, str]) -> str:
    source = answers.cells.get(label)
    if source is None:
        return f'<div><div class="who">{escape(answers.name)}</div><pre>(no such cell)</pre></div>'
    width = len(str(source.count("\n") + 1))
    lines = []
    for number, text in enumerate(source.splitlines() or [""], 1):
        code = f'<span class="ln">{number:>{width}}</span> {escape(text)}'
        if number in marked:
            code = f'<mark title="{escape(marked[number])}">{code}</mark>'
        lines.append(code)
    return (f'<div><div class="who">{escape(answers.name)}</div>'
            f'<pre>{chr(10).join(lines)}</pre></div>')
