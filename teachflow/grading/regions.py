"""The marked regions of a cell: the instructor's answer, and the tests learners do not see.

nbgrader's convention, kept here line for line so its masters work unchanged::

    def my_softmax(x):
        ### BEGIN SOLUTION
        e = (x - x.max()).exp()
        return e / e.sum()
        ### END SOLUTION

A line that *contains* ``BEGIN SOLUTION`` opens a region and one that contains ``END SOLUTION``
closes it (nbgrader matches the words anywhere in the line, so a marker written
``# BEGIN SOLUTION (keep this short)`` still hides the answer: a loose match can only hide too
much, a strict one could hand the answer out). Handing a notebook out replaces each region by a
stub at the marker's indentation, and keeps everything outside it, the ``def`` line included::

    def my_softmax(x):
        # YOUR CODE HERE
        raise NotImplementedError()

Hidden tests are the same with ``BEGIN HIDDEN TESTS`` / ``END HIDDEN TESTS``, replaced by
nothing. A region that is never closed, an end with no beginning, and a region opened inside
another are refused, naming the cell and the line.
"""

from __future__ import annotations

from dataclasses import dataclass

from teachflow.grading.notebook import AuthoringError


@dataclass(frozen=True)
class Region:
    """A kind of marked region: what it is called, and the words that open and close it."""

    name: str
    begin: str
    end: str


SOLUTION = Region("solution region", "BEGIN SOLUTION", "END SOLUTION")
HIDDEN_TESTS = Region("hidden-test region", "BEGIN HIDDEN TESTS", "END HIDDEN TESTS")

CODE_STUB = ("# YOUR CODE HERE", "raise NotImplementedError()")  # nbgrader's stub
MARKDOWN_STUB = ("YOUR ANSWER HERE",)


def spans(source: str, region: Region, where: str) -> list[tuple[int, int]]:
    """The regions of `source` as ``(begin, end)`` line numbers (from 1) of their markers.

    `where` names the cell in the `AuthoringError` raised for a region left open, an end with no
    beginning, or a region opened inside another."""
    found, opened = [], None
    for lineno, line in enumerate(source.splitlines(), start=1):
        if region.begin in line:
            if opened is not None:
                raise _error(f"{where}: line {lineno} opens a {region.name} inside the one "
                             f"opened at line {opened}", region)
            opened = lineno
        elif region.end in line:
            if opened is None:
                raise _error(f"{where}: line {lineno} closes a {region.name} that no "
                             f"'### {region.begin}' opened", region)
            found.append((opened, lineno))
            opened = None
    if opened is not None:
        raise _error(f"{where}: the {region.name} opened at line {opened} is never closed",
                     region)
    return found


def _error(message: str, region: Region) -> AuthoringError:
    return AuthoringError(message, op="assign",
                          hint=f"each '### {region.begin}' needs its own '### {region.end}' "
                               f"after it, on a line of its own, with no region inside another")


def has_markers(source: str, region: Region) -> bool:
    return region.begin in source or region.end in source


def replace(source: str, region: Region, stub: tuple[str, ...], where: str) -> str:
    """`source` with each region (markers included) replaced by `stub`, indented as the marker
    that opened it."""
    lines = source.splitlines()
    for begin, end in reversed(spans(source, region, where)):
        marker = lines[begin - 1]
        indent = marker[:len(marker) - len(marker.lstrip())]
        lines[begin - 1:end] = [indent + line for line in stub]
    return "\n".join(lines) + ("\n" if source.endswith("\n") else "")


def hidden_lines(source: str, where: str) -> set[int]:
    """The line numbers (from 1) inside hidden-test regions, markers included."""
    return {n for begin, end in spans(source, HIDDEN_TESTS, where)
            for n in range(begin, end + 1)}


def without_hidden_tests(source: str, where: str) -> str:
    """What learners see of a test cell: its hidden-test regions removed."""
    return replace(source, HIDDEN_TESTS, (), where)
