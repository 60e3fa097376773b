"""``teachflow assign MASTER.ipynb --out DIR``: one master in, two folders out.

- ``DIR/release/MASTER.ipynb``: the learner's notebook (`authoring.released_notebook`);
- ``DIR/grading/``: the grading bundle, which never leaves the instructor (`bundle`).

Nothing is written until the whole master is checked (`authoring.read_master`), then
against the notebook format's JSON schema too (with ``nbformat``, the format's reference
implementation: ``pip install 'teachflow[grading]'``), and then graded: the master, as a
submission, by the route every submission takes (`teachflow.grading.judge`: its code in a
worker, every test, hidden ones included, through the proxies). A master that does not get
full marks is refused, with each failing test explained: a test that cannot pass for the
instructor's own answer would fail for every learner. (``verify=False`` skips this, for
masters verified elsewhere, such as the shipped exercises, which the test suite grades.)
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from teachflow.core.errors import GradingError
from teachflow.grading.authoring import read_master, released_notebook
from teachflow.grading.bundle import (
    MANIFEST,
    Bundle,
    bundle_of,
    is_bundle,
    load_bundle,
    manifest,
    write_bundle,
)
from teachflow.grading.failures import PASSED
from teachflow.grading.notebook import AuthoringError, NotebookError, read_notebook
from teachflow.grading.sandbox import Limits


@dataclass(frozen=True)
class Assignment:
    """What `assign` wrote: the learner's notebook and the grading bundle's folder."""

    release: Path
    grading: Path
    total_points: float
    test_cells: int


def assign(master: str | os.PathLike[str], out: str | os.PathLike[str],
           verify: bool = True) -> Assignment:
    """Check the master notebook `master` (and grade it, unless not to `verify`), then write
    ``out/release/`` and ``out/grading/``."""
    master, out = Path(master), Path(out)
    notebook = read_notebook(master)
    cells = read_master(notebook)
    _validate(notebook, master.name)
    release, grading = out / "release" / master.name, out / "grading"
    if release.resolve() == master.resolve():
        raise GradingError(f"assign would write the release over the master {master}",
                           op="assign", hint="choose another --out folder")
    _check_grading_folder(grading, master.name)
    data = manifest(master.name, cells)
    if verify:
        _full_marks(master, bundle_of(grading, data))
    release.parent.mkdir(parents=True, exist_ok=True)
    nbformat = _nbformat()
    release.write_text(nbformat.writes(nbformat.from_dict(released_notebook(notebook, cells))),
                       encoding="utf-8")
    write_bundle(grading, data)
    tests = sum(1 for entry in data["cells"] if entry["role"] == "tests")
    return Assignment(release, grading, data["total_points"], tests)


def _full_marks(master: Path, bundle: Bundle) -> None:
    """Grade the master as a submission (its own code: no sandbox) and refuse it unless every
    test passes."""
    from teachflow.grading.judge import grade_submission

    judged = grade_submission(master, bundle, "local", Limits())
    failed = [test for test in judged.tests if test.status != PASSED]
    if failed:
        lines = [f"{test.cell}: {test.name}{' (hidden)' * test.hidden}: "
                 f"{'; '.join(test.lines[:3]) or 'failed'}" for test in failed[:5]]
        raise AuthoringError(
            f"{master.name} does not get full marks for its own answers when graded "
            f"({len(failed)} of {len(judged.tests)} tests fail): " + " | ".join(lines),
            op="assign", hint="a test the master's answers cannot pass would fail for every "
                              "learner: fix the test or the answer, then assign again")


def _check_grading_folder(grading: Path, notebook: str) -> None:
    """Write into `grading` only when it is empty or holds this notebook's bundle."""
    if not grading.exists() or not any(grading.iterdir()):
        return
    if not is_bundle(grading):
        raise GradingError(f"{grading} exists and is not a grading bundle: assign will not "
                           f"write into it", op="assign", hint="choose another --out folder")
    try:
        other = load_bundle(grading).notebook
    except GradingError:  # an older version's bundle: this master's replaces it
        return
    if other != notebook:
        raise GradingError(f"{grading / MANIFEST} is the bundle of {other}", op="assign",
                           hint="give each master notebook its own --out folder")


def _nbformat() -> Any:
    try:
        import nbformat
    except ImportError as error:
        raise GradingError("teachflow assign needs nbformat", op="assign",
                           hint="pip install 'teachflow[grading]'") from error
    return nbformat


def _validate(notebook: dict[str, Any], name: str) -> None:
    """Refuse a notebook that breaks the notebook format's schema, as Jupyter would."""
    nbformat = _nbformat()
    if notebook.get("nbformat_minor", 0) >= 5:  # cells have ids since 4.5: give those without
        taken = {cell.get("id") for cell in notebook["cells"]}
        for index, cell in enumerate(notebook["cells"]):
            if "id" not in cell and f"cell-{index}" not in taken:
                cell["id"] = f"cell-{index}"
    try:
        nbformat.validate(nbformat.from_dict(notebook))
    except nbformat.ValidationError as error:
        raise NotebookError(f"{name} is not a valid notebook: {error.message}",
                            op="read notebook", hint="open and save it in Jupyter, which "
                            "repairs what it can, or fix the part named") from None
