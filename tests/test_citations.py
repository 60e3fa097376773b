"""Every path the course cites exists: a learner who follows a lesson, an exercise, the README or
the docs to ``teachflow/passes/cse.py`` (or ``teachflow.tracing.builder``) finds it there."""

from __future__ import annotations

import importlib
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
#: A path in the repository: a folder of it, then names, ending in a file's suffix or a slash.
PATH = re.compile(r"(?<![\w./-])((?:teachflow|widgets|bench|tests|lessons|exercises|docs|binder|"
                  r"tools|lab-settings)/[\w./-]*[\w/])")
#: A module of teachflow named with dots: ``teachflow.passes.cse``.
MODULE = re.compile(r"(?<![\w.])(teachflow(?:\.[a-z_]\w*)+)")


def texts() -> dict[str, str]:
    """The prose and code a learner reads, by where it is."""
    found = {}
    for path in [ROOT / "README.md", *ROOT.glob("docs/*.md"), ROOT / "widgets" / "README.md",
                 ROOT / "lessons" / "README.md", ROOT / "exercises" / "README.md",
                 ROOT / "exercises" / "build.py"]:
        if path.exists():
            found[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for notebook in [*ROOT.glob("lessons/*.ipynb"), *ROOT.glob("exercises/*.ipynb")]:
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        found[str(notebook.relative_to(ROOT))] = "\n".join("".join(c["source"]) for c in cells)
    return found


def test_the_course_is_read_from_these_places() -> None:
    assert {"README.md", "lessons/03_passes_purity_and_fusion.ipynb",
            "exercises/03_cse_pass.ipynb"} <= set(texts())


@pytest.mark.parametrize("where", sorted(texts()))
def test_every_path_cited_exists(where: str) -> None:
    text = texts()[where]
    missing = sorted({p for p in PATH.findall(text)
                      if not (ROOT / p.rstrip(".")).exists() and "release" not in p})
    assert missing == [], f"{where} cites paths that are not there: {missing}"


@pytest.mark.parametrize("where", sorted(texts()))
def test_every_module_named_exists(where: str) -> None:
    missing = []
    for name in sorted(set(MODULE.findall(texts()[where]))):
        module, attributes = name, []
        while module:  # the longest importable prefix, then its attributes
            try:
                found = importlib.import_module(module)
                break
            except ImportError:
                module, _, last = module.rpartition(".")
                attributes.insert(0, last)
        for attribute in attributes:
            found = getattr(found, attribute, None)
        if found is None:
            missing.append(name)
    assert missing == [], f"{where} names modules that are not there: {missing}"
