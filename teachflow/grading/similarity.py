"""``teachflow similarity``: which submissions are alike enough for a person to read side by side.

::

    teachflow similarity submissions/ --bundle build/grading --out similarity.html

ranks every pair of submissions by how much of their answers they share, as MOSS does
(Schleimer, Wilkerson & Aiken, *Winnowing: local algorithms for document fingerprinting*,
SIGMOD 2003), in four steps:

1. **Normalise.** Each answer cell (a solution cell, or a code cell the learner added) is read
   by Python's own `tokenize`: every identifier becomes ``V`` (keywords stay themselves), every
   number ``0``, every string ``S``; comments, blank lines and indentation are dropped. Renaming
   variables, changing constants or re-flowing lines changes nothing that is left.
2. **Hash k-grams.** Every run of `K` consecutive tokens is hashed.
3. **Winnow.** Of each `WINDOW` consecutive hashes the smallest is kept (the rightmost of equal
   ones, once per run): a few fingerprints per line, and any passage of ``K + WINDOW - 1``
   tokens two answers share gives them a fingerprint in common, wherever it sits.
4. **Index.** An inverted index maps each fingerprint to the submissions that have it, so only
   pairs that share something are ever counted: 300 submissions take seconds, not the 44,850
   comparisons of every pair's text.

What nobody copied is left out: every k-gram of the master's cells (given code, the stubs of
solution cells, the tests; the bundle holds them) and any fingerprint found in more than
`common` submissions (MOSS's ``-m``: what most of a class writes is the exercise's idiom).
A pair's score is the Jaccard index of its fingerprints, shared over either's; the report
(`teachflow.grading.sidebyside`) shows each pair's cells side by side with the matching
lines marked. It flags, it never grades: short exercises have few ways to be right, and
similar code is a reason to look, not a verdict.
"""

from __future__ import annotations

import hashlib
import io
import keyword
import os
import time
import tokenize
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import combinations
from pathlib import Path

from teachflow.core.errors import GradingError
from teachflow.grading.bundle import Bundle, load_bundle
from teachflow.grading.grade import notebooks, submission_names
from teachflow.grading.notebook import NotebookError, cells_of, read_notebook

K = 10       # tokens in a k-gram: shorter matches are noise (every `V = V ( V )` looks alike)
WINDOW = 5   # hashes in a window: a match of K + WINDOW - 1 tokens is always found

#: (cell's label, first line, last line): where in a submission a fingerprint's k-gram is.
Place = tuple[str, int, int]

_DROPPED = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT,
            tokenize.ENCODING, tokenize.ENDMARKER}


def normalised(source: str) -> list[tuple[str, int, int]]:
    """The cell's tokens as (normalised text, first line, last line); see the module's
    docstring. IPython's lines (``%magic``, ``!shell``) are skipped, keeping line numbers; code
    that stops tokenizing (a bracket never closed) gives the tokens before the trouble."""
    lines = ["" if line.lstrip().startswith(("%", "!")) else line
             for line in source.splitlines(keepends=True)]
    found: list[tuple[str, int, int]] = []
    in_fstring = 0  # (Python 3.12+ tokenizes an f-string's parts: it stays one string here)
    try:
        for token in tokenize.generate_tokens(io.StringIO("".join(lines)).readline):
            kind = tokenize.tok_name[token.type]
            if kind == "FSTRING_START":
                in_fstring += 1
                if in_fstring == 1:
                    found.append(("S", token.start[0], token.end[0]))
            elif kind == "FSTRING_END":
                in_fstring -= 1
            elif not in_fstring and token.type not in _DROPPED:
                found.append((_normal(token), token.start[0], token.end[0]))
    except (tokenize.TokenError, SyntaxError):
        pass
    return found


def _normal(token: tokenize.TokenInfo) -> str:
    if token.type == tokenize.NAME:
        return token.string if keyword.iskeyword(token.string) else "V"
    if token.type == tokenize.NUMBER:
        return "0"
    if token.type == tokenize.STRING:
        return "S"
    return token.string


def kgram_hashes(tokens: list[tuple[str, int, int]], k: int = K) -> list[int]:
    """The hash of each run of `k` tokens (a stable one: the same in every process)."""
    texts = [text for text, _, _ in tokens]
    return [int.from_bytes(hashlib.blake2b(" ".join(texts[i:i + k]).encode(),
                                           digest_size=8).digest(), "big")
            for i in range(len(texts) - k + 1)]


def winnow(hashes: list[int], window: int = WINDOW) -> list[int]:
    """The positions of the fingerprints winnowing keeps: in each `window` of consecutive
    hashes the smallest, the rightmost of equal ones, each position once (Schleimer et al.'s
    robust winnowing). Fewer hashes than a window: their smallest."""
    kept: list[int] = []
    for start in range(max(1, len(hashes) - window + 1)):
        span = hashes[start:start + window]
        if not span:
            break
        at = start + len(span) - 1 - span[::-1].index(min(span))
        if not kept or kept[-1] != at:
            kept.append(at)
    return kept


def fingerprints(source: str, label: str, k: int = K,
                 window: int = WINDOW) -> dict[int, list[Place]]:
    """The winnowed fingerprints of one cell, each with where its k-gram is."""
    tokens = normalised(source)
    hashes = kgram_hashes(tokens, k)
    found: dict[int, list[Place]] = defaultdict(list)
    for at in winnow(hashes, window):
        found[hashes[at]].append((label, tokens[at][1], tokens[at + k - 1][2]))
    return found


def given_hashes(bundle: Bundle, k: int = K) -> set[int]:
    """Every k-gram hash of the master's code cells as the bundle keeps them (given code,
    solution stubs, tests): what a learner had before writing anything."""
    return {h for cell in bundle.cells if cell.cell_type == "code"
            for h in kgram_hashes(normalised(cell.source), k)}


@dataclass
class Answers:
    """One submission's answer cells (by label) and their fingerprints."""

    name: str
    path: Path
    cells: dict[str, str]
    prints: dict[int, list[Place]] = field(default_factory=dict, repr=False)


def answers_of(path: Path, name: str, bundle: Bundle, k: int = K,
               window: int = WINDOW) -> Answers:
    """The submission's answer cells: its solution cells that the master has (by grade_id, the
    last of two), labelled by grade_id, and the code cells it added, labelled "added cell N".
    Markdown answers are prose, not code: they are left out."""
    solutions = {c.grade_id for c in bundle.cells if c.role == "solution"}
    master_free = {c.source.strip() for c in bundle.cells if c.role == "free"}
    cells: dict[str, str] = {}
    for cell in cells_of(read_notebook(path)):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        if cell.role == "solution" and cell.grade_id in solutions:
            cells[cell.grade_id] = cell.source
        elif cell.role == "free" and cell.source.strip() not in master_free:
            cells[f"added cell {cell.index + 1}"] = cell.source
    prints: dict[int, list[Place]] = defaultdict(list)
    for label, source in cells.items():
        for h, places in fingerprints(source, label, k, window).items():
            prints[h] += places
    return Answers(name, path, cells, dict(prints))


@dataclass
class Alike:
    """Two submissions and what they share: `count` fingerprints, `score` (Jaccard), each
    one's share, and (for the pairs a report shows) the `shared` fingerprints themselves."""

    first: Answers
    second: Answers
    count: int
    score: float
    first_share: float
    second_share: float
    shared: frozenset[int] = frozenset()

    def line(self) -> str:
        return (f"{self.score:5.0%}  {self.first.name} ~ {self.second.name}  "
                f"({self.count} fingerprints: {self.first_share:.0%} of "
                f"{self.first.name}'s, {self.second_share:.0%} of {self.second.name}'s)")


def rank(answers: list[Answers], ignored: set[int], common: int = 10,
         detail: int = 20) -> list[Alike]:
    """Every pair that shares a fingerprint, most alike first (`ignored`: the master's; a
    fingerprint in more than `common` submissions is ignored too). The first `detail` pairs
    get their `shared` fingerprints, for the report; the rest, only how many."""
    index: dict[int, list[int]] = defaultdict(list)
    for number, answer in enumerate(answers):
        for h in answer.prints:
            if h not in ignored:
                index[h].append(number)
    counted = {h for h, who in index.items() if len(who) <= common}
    sizes = [sum(h in counted for h in answer.prints) for answer in answers]
    pairs: Counter[tuple[int, int]] = Counter()
    for h in counted:
        pairs.update(combinations(index[h], 2))
    found = sorted((Alike(answers[i], answers[j], shared, shared / (sizes[i] + sizes[j] - shared),
                          shared / sizes[i], shared / sizes[j])
                    for (i, j), shared in pairs.items()),
                   key=lambda p: (-p.score, -p.count, p.first.name, p.second.name))
    for pair in found[:detail]:
        pair.shared = frozenset(h for h in pair.first.prints
                                if h in counted and h in pair.second.prints)
    return found


@dataclass
class Compared:
    """What ``teachflow similarity`` found: the pairs, most alike first, and where the report is."""

    out: Path
    pairs: list[Alike]
    submissions: int
    skipped: list[str]
    seconds: float
    top: int

    def summary(self) -> str:
        shown, count = self.pairs[:self.top], len(self.pairs)
        lines = [f"compared {self.submissions} submissions in {self.seconds:.1f} s: {count} "
                 f"pair{' shares' if count == 1 else 's share'} code beyond the master's"
                 + (f"; the {len(shown)} most alike:" if shown else ".")]
        lines += [f"  {pair.line()}" for pair in shown]
        lines += [f"skipped {note}" for note in self.skipped]
        lines.append(f"report: {self.out} (it flags pairs to read; it does not grade)")
        return "\n".join(lines)


def compare(submissions: Iterable[str | os.PathLike[str]], bundle: str | os.PathLike[str],
            out: str | os.PathLike[str], top: int = 20, common: int = 10, k: int = K,
            window: int = WINDOW) -> Compared:
    """Rank the pairs of `submissions` (notebooks, or folders of them) and write the report to
    `out` (see the module's docstring). A file that is not a notebook is skipped, and said so."""
    from teachflow.grading.sidebyside import report

    start = time.perf_counter()
    if top < 1 or common < 2 or k < 1 or window < 1:
        raise GradingError(f"--top {top}, --common {common}: top must be positive and common "
                           f"at least 2", op="similarity")
    loaded = load_bundle(bundle)
    try:
        paths = notebooks(submissions)
    except GradingError as error:
        raise GradingError(error.message, op="similarity", hint=error.hint) from None
    answers, skipped = [], []
    for path, name in submission_names(paths).items():
        try:
            answers.append(answers_of(path, name, loaded, k, window))
        except NotebookError as error:
            skipped.append(f"{path}: {error.message}")
    pairs = rank(answers, given_hashes(loaded, k), common, detail=top)
    found = Compared(Path(out), pairs, len(answers), skipped, 0.0, top)
    found.seconds = time.perf_counter() - start
    Path(out).write_text(report(found, k=k, window=window, common=common), encoding="utf-8")
    return found
