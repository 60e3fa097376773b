"""Hands out the exercises (``make lab``): each master notebook in exercises/ as learners get
it (answers stubbed, hidden tests left out, `teachflow assign`), in exercises/release/.

Each is handed out once: a notebook already in exercises/release/ is the learner's work and
stays as it is. One process for them all: assign's checks import nbformat's validator, which
takes seconds, once rather than once per notebook.
"""

from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from teachflow.grading import assign

EXERCISES = Path(__file__).resolve().parent.parent / "exercises"


def hand_out(exercises: Path = EXERCISES) -> list[Path]:
    """Write each master's release that is not there yet; returns those written."""
    release = exercises / "release"
    release.mkdir(exist_ok=True)
    written = []
    for master in sorted(exercises.glob("*.ipynb")):
        if (release / master.name).exists():
            continue
        with tempfile.TemporaryDirectory() as out:  # (the suite grades the shipped masters:
            #  verify=False skips grading each again here, seconds a learner would wait)
            shutil.copyfile(assign(master, out, verify=False).release, release / master.name)
        written.append(release / master.name)
    return written


if __name__ == "__main__":
    hand_out()
