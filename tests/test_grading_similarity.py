"""teachflow similarity: copies found through renames, new literals and new layout; the given
code nobody's copy; the report safe to open whatever learners wrote. Through the real command.
"""

from __future__ import annotations

import json
import random
import re
from pathlib import Path

import pytest
from grading_notebooks import checks, code, given, solution, write
from nbformat.v4 import new_markdown_cell

from teachflow.grading import assign
from teachflow.grading.cli import OK, main
from teachflow.grading.similarity import WINDOW, K, kgram_hashes, normalised, winnow

STANDARDISE = '''
def standardise(rows):
    """Each row shifted to mean 0 and scaled to standard deviation 1."""
    ### BEGIN SOLUTION
    x = np.asarray(rows, dtype=float)
    return (x - x.mean(axis=1, keepdims=True)) / x.std(axis=1, keepdims=True)
    ### END SOLUTION
'''

TESTS = '''
def test_rows_have_mean_zero():
    got = standardise(np.array([[1.0, 2.0, 3.0], [2.0, 4.0, 9.0]]))
    np.testing.assert_allclose(got.mean(axis=1), 0.0, atol=1e-12)
'''

#: A learner's own answer: loops where the master has NumPy.
ORIGINAL = '''
def standardise(rows):
    """Each row shifted to mean 0 and scaled to standard deviation 1."""
    out = []
    for row in rows:
        total = 0.0
        for value in row:
            total += value
        mean = total / len(row)
        spread = 0.0
        for value in row:
            spread += (value - mean) ** 2
        spread = (spread / len(row)) ** 0.5
        out.append([(value - mean) / spread for value in row])
    return np.array(out)
'''

#: The same, every name changed, other literals, other layout, comments added.
DISGUISED = '''
def standardise(rows):
    """Each row shifted to mean 0 and scaled to standard deviation 1."""
    result = []  # my own idea
    for r in rows:
        s = 0
        for v in r: s += v
        m = s / len(r)

        d = 0
        for v in r:
            d += (v - m) ** 2.0   # squared
        d = (d / len(r)) ** .5
        result.append([(v - m) / d
                       for v in r])
    return np.array(result)
'''

INDEPENDENT = {
    "bob": '''
def standardise(rows):
    """Each row shifted to mean 0 and scaled to standard deviation 1."""
    centred = rows - rows.mean(axis=-1)[:, None]
    return centred / np.sqrt((centred ** 2).mean(axis=-1))[:, None]
''',
    "carol": '''
def standardise(rows):
    """Each row shifted to mean 0 and scaled to standard deviation 1."""
    import statistics
    return np.array([[(v - statistics.fmean(r)) / statistics.pstdev(r) for v in r]
                     for r in rows])
''',
}


@pytest.fixture(scope="module")
def exercise(tmp_path_factory) -> tuple[Path, Path]:
    """(the released notebook, the grading bundle) of a one-function exercise."""
    folder = tmp_path_factory.mktemp("standardise")
    master = write(folder / "standardise.ipynb", [
        new_markdown_cell("# Standardise rows"), given("setup", "import numpy as np"),
        solution("standardise", STANDARDISE), checks("test_standardise", TESTS, points=2)])
    done = assign(master, folder / "build", verify=False)
    return done.release, done.grading


def submit(release: Path, path: Path, answer: str | None) -> Path:
    """The released notebook, its solution cell answered (None: left as handed out)."""
    notebook = json.loads(release.read_text())
    for cell in notebook["cells"]:
        if answer is not None and cell["metadata"].get("nbgrader", {}).get("solution"):
            cell["source"] = code(answer)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(notebook))
    return path


def similarity(capsys, subs: Path, bundle: Path, out: Path, *more: str) -> str:
    assert main(["similarity", str(subs), "--bundle", str(bundle), "--out", str(out),
                 *more]) == OK
    return capsys.readouterr().out


def ranked(stdout: str) -> list[tuple[int, str, str]]:
    """The printed pairs as (percent, first, second)."""
    return [(int(p), a, b) for p, a, b in re.findall(r"^\s+(\d+)%\s+(\S+) ~ (\S+)", stdout, re.M)]


def test_names_literals_comments_and_layout_are_normalised_away() -> None:
    one = normalised("total = 0.0  # start\nfor value in row:\n    total += value * 2\n")
    other = normalised("s=1\n\n\nfor v in r: s += v*3\n")
    expected = ["V", "=", "0", "for", "V", "in", "V", ":", "V", "+=", "V", "*", "0"]
    assert [t for t, _, _ in one] == [t for t, _, _ in other] == expected
    assert one[-1] == ("0", 3, 3) and other[-1] == ("0", 4, 4)  # (line numbers kept)
    assert [t for t, _, _ in normalised("name = 'a'")] == \
        [t for t, _, _ in normalised('n = """b\nc"""  # two lines')] == ["V", "=", "S"]
    assert [t for t, _, _ in normalised("%timeit f(x)\nif (x:\n")] == ["if", "(", "V", ":"]


def test_winnowing_keeps_a_fingerprint_in_every_window() -> None:
    hashes = kgram_hashes(normalised(ORIGINAL))
    kept = winnow(hashes)
    assert kept == sorted(set(kept))
    assert all(any(start <= at < start + WINDOW for at in kept)
               for start in range(len(hashes) - WINDOW + 1))
    assert len(kept) < len(hashes) / 2  # (a few per line, not every k-gram)
    assert len(hashes) == len(normalised(ORIGINAL)) - K + 1


def test_a_disguised_copy_ranks_first_above_independent_answers(
        exercise: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    release, bundle = exercise
    subs = tmp_path / "subs"
    submit(release, subs / "alice.ipynb", ORIGINAL)
    submit(release, subs / "mallet.ipynb", DISGUISED)
    for name, answer in INDEPENDENT.items():
        submit(release, subs / f"{name}.ipynb", answer)
    submit(release, subs / "dora.ipynb", None)  # handed in as handed out: given code only
    submit(release, subs / "eve.ipynb", None)
    stdout = similarity(capsys, subs, bundle, tmp_path / "report.html")
    pairs = ranked(stdout)
    assert pairs[0][1:] == ("alice", "mallet") and pairs[0][0] >= 80, stdout
    assert all(score < 30 for score, _, _ in pairs[1:]), stdout
    assert not any({"dora", "eve"} & {a, b} for _, a, b in pairs), stdout  # given code alone
    assert "compared 6 submissions" in stdout and "it does not grade" in stdout
    html = (tmp_path / "report.html").read_text()
    assert "This report flags, it never grades." in html
    assert "<mark" in html and html.count('<section id="pair-') == len(pairs)
    # the matching lines, side by side: alice's accumulating loop and mallet's, marked
    assert re.search(r"<mark[^>]*>.*total \+= value</mark>", html)
    assert re.search(r"<mark[^>]*>.*d \+= \(v - m\) \*\* 2\.0   # squared</mark>", html)


def test_the_given_code_alone_matches_nothing(exercise: tuple[Path, Path], tmp_path: Path,
                                              capsys) -> None:
    release, bundle = exercise
    for name in ("a", "b", "c"):
        submit(release, tmp_path / "subs" / f"{name}.ipynb", None)
    stdout = similarity(capsys, tmp_path / "subs", bundle, tmp_path / "report.html")
    assert ranked(stdout) == [] and "0 pairs share code beyond the master's." in stdout
    assert "No two submissions share code" in (tmp_path / "report.html").read_text()


def test_a_hostile_submission_cannot_put_markup_into_the_report(
        exercise: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    release, bundle = exercise
    hostile = ORIGINAL.replace("out = []", 'out = []\n    "</pre><script>alert(1)</script>"')
    submit(release, tmp_path / "subs" / "alice.ipynb", ORIGINAL)
    submit(release, tmp_path / "subs" / "<img src=x onerror=alert(2)>.ipynb", hostile)
    (tmp_path / "subs" / "broken.ipynb").write_text("{not json")  # skipped, and said so
    stdout = similarity(capsys, tmp_path / "subs", bundle, tmp_path / "report.html")
    assert "1 pair shares code" in stdout and "<img src=x onerror=alert(2)> ~ alice" in stdout
    assert "skipped" in stdout and "broken.ipynb" in stdout
    html = (tmp_path / "report.html").read_text()
    assert "<script" not in html.lower() and "<img" not in html.lower()
    assert "&lt;/pre&gt;&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "Content-Security-Policy" in html and "http" not in html.replace("http-equiv", "")


def _variant(rng: random.Random, template: str) -> str:
    """`template` with its local names renamed at random: the same after normalising."""
    names = {"x": rng.choice("abcxyz"), "centred": rng.choice(["c", "d", "centred", "dev"])}
    return re.sub(r"\b(x|centred)\b", lambda m: names[m.group(1)], template)


def test_three_hundred_submissions_flag_the_copies_and_ignore_what_most_write(
        exercise: tuple[Path, Path], tmp_path: Path, capsys) -> None:
    """300 learners: most write one of the usual answers (shared by dozens: common code, not
    copying), two copy the loop answer. Only pairs that share a fingerprint are counted; the
    time it takes is bench/similarity.py's business."""
    release, bundle = exercise
    rng = random.Random(0)
    usual = [STANDARDISE.replace("### BEGIN SOLUTION\n", "").replace("### END SOLUTION\n", ""),
             INDEPENDENT["bob"], INDEPENDENT["carol"]]
    for number in range(298):
        submit(release, tmp_path / "subs" / f"s{number:03}.ipynb",
               _variant(rng, usual[number % len(usual)]))
    submit(release, tmp_path / "subs" / "alice.ipynb", ORIGINAL)
    submit(release, tmp_path / "subs" / "mallet.ipynb", DISGUISED)
    stdout = similarity(capsys, tmp_path / "subs", bundle, tmp_path / "report.html",
                        "--top", "5")
    pairs = ranked(stdout)
    assert "compared 300 submissions" in stdout
    assert pairs[0][1:] == ("alice", "mallet"), stdout
    assert all({"alice", "mallet"} & {a, b} for _, a, b in pairs), stdout
