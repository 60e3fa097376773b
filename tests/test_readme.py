"""README.md's Python runs, and prints what the README shows (as doctest checks docstrings).

Each ```python block runs in turn, in one namespace (a later block uses what an earlier one
made), in a folder of its own; a block of notebook magics (``%load_ext``) is left out. A block
followed by a ```text block must print exactly that; a block followed by none must print
nothing. Each block runs as a file ``snippet.py`` of its own, so a node's source line reads
``snippet.py:3`` (the block's third line), whatever moves around it in the README.

What legitimately differs from run to run is made alike on both sides before comparing:
memory addresses and timings (and spaces at the ends of lines, blank lines at the end). In the
shown output, ``...`` stands for any text, as doctest's ELLIPSIS. Node numbers are compared as
they are, and a node number the prose quotes in backquotes (```%w <- %32```) must appear in a
shown output.
"""

from __future__ import annotations

import contextlib
import io
import re
from dataclasses import dataclass
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
FENCE = re.compile(r"^```(\w*)\n(.*?)^```\n", re.M | re.S)
#: What varies between runs, and what it becomes on both sides.
VARYING = [(re.compile(r"0x[0-9a-f]{6,}"), "0x…"),
           (re.compile(r"\b\d+(?:\.\d+)?(?:e-?\d+)? ?(?:ns|us|µs|ms|s)\b"), "… s")]


@dataclass
class Snippet:
    line: int  # where the block starts in README.md
    source: str
    shown: str | None  # the ```text block after it, if any


def snippets(text: str) -> list[Snippet]:
    """The README's ```python blocks, each with the ```text block right after it."""
    fences = list(FENCE.finditer(text))
    found = []
    for k, fence in enumerate(fences):
        if fence.group(1) != "python" or fence.group(2).lstrip().startswith("%"):
            continue
        after = fences[k + 1] if k + 1 < len(fences) else None
        shown = None
        if after is not None and after.group(1) == "text" and \
                not text[fence.end():after.start()].strip():
            shown = after.group(2)
        found.append(Snippet(text.count("\n", 0, fence.start()) + 1, fence.group(2), shown))
    return found


def alike(output: str) -> str:
    for pattern, replacement in VARYING:
        output = pattern.sub(replacement, output)
    return "\n".join(line.rstrip() for line in output.splitlines()).rstrip("\n")


def matches(printed: str, shown: str) -> bool:
    """`printed` is `shown`, where ``...`` in `shown` stands for any text (lines included)."""
    pattern = ".*?".join(re.escape(part) for part in alike(shown).split("..."))
    return re.fullmatch(pattern, alike(printed), re.S) is not None


def run_all(blocks: list[Snippet]) -> list[str]:
    namespace: dict = {"__name__": "__main__"}
    printed = []
    for block in blocks:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            exec(compile(block.source, "snippet.py", "exec"), namespace)
        printed.append(out.getvalue())
    return printed


@pytest.fixture(scope="module")
def readme_runs(tmp_path_factory) -> tuple[list[Snippet], list[str]]:
    blocks = snippets(README.read_text(encoding="utf-8"))
    with contextlib.chdir(tmp_path_factory.mktemp("readme")):  # tfl.save writes model/ here
        return blocks, run_all(blocks)


def test_the_readme_prints_what_it_shows(readme_runs) -> None:
    blocks, printed = readme_runs
    assert len(blocks) >= 4 and sum(b.shown is not None for b in blocks) >= 3
    for block, got in zip(blocks, printed, strict=True):
        want = block.shown if block.shown is not None else ""
        assert matches(got, want), (
            f"README.md line {block.line}: the block prints\n{got}\nbut the README shows\n{want}")


def test_node_numbers_the_prose_quotes_are_in_a_shown_output(readme_runs) -> None:
    blocks, _ = readme_runs
    text = FENCE.sub("", README.read_text(encoding="utf-8"))
    quoted = [q for q in re.findall(r"`([^`\n]+)`", text) if re.search(r"%\d", q)]
    assert quoted, "the prose quotes no node of a shown output"
    shown = "\n".join(b.shown for b in blocks if b.shown is not None)
    for q in quoted:
        assert q in shown, f"README.md quotes `{q}`, which no shown output has"


@pytest.mark.parametrize(("printed", "shown", "same"), [
    ("%w <- %32\n", "%w <- %32\n", True),
    ("%w <- %32\n", "%w <- %31\n", False),  # node numbers are compared as they are
    ("a\nb\nc\n", "a\n...\nc\n", True),
    ("a\nc\n", "a\n...c\n", True),
    ("a took 1.25 ms at 0x7f12ab34cd56\n", "a took 0.31 ms at 0x55aa11bb22cc\n", True),
    ("x\n", "", False),  # a block shown with no output prints nothing
    ("", "", True),
])
def test_the_comparison(printed: str, shown: str, same: bool) -> None:
    assert matches(printed, shown) is same
