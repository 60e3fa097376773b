"""Every lesson runs from top to bottom in a fresh kernel, and is committed without outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")

LESSONS = sorted((Path(__file__).parent.parent / "lessons").glob("*.ipynb"))


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_is_committed_clean(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    for cell in nb.cells:
        if cell.cell_type == "code":
            assert cell.outputs == [] and cell.execution_count is None, f"{path.name} has outputs"
    assert "widgets" not in nb.metadata


@pytest.mark.parametrize("path", LESSONS, ids=[p.stem for p in LESSONS])
def test_lesson_runs(path: Path) -> None:
    nb = nbformat.read(path, as_version=4)
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3",
                                     resources={"metadata": {"path": str(path.parent)}})
    client.execute()
    errors = [o for c in nb.cells if c.cell_type == "code" for o in c.outputs
              if o.output_type == "error"]
    assert not errors
    for cell in nb.cells:  # a lesson that shows an error shows where in the notebook it came from
        if cell.cell_type == "code" and "except tfl." in cell.source:
            printed = "".join(o.get("text", "") for o in cell.outputs)
            assert "cell In[" in printed, printed
