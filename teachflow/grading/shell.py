"""A notebook's shell without the notebook: IPython as a kernel sets it up, for check and grade.

A cell that starts with ``%matplotlib inline`` runs in a Jupyter kernel, whose shell knows how
to draw plots into the notebook. IPython's plain `InteractiveShell` does not: it refuses
``%matplotlib`` (``enable_gui`` is left to a subclass, which the kernel provides), so the same
cell would fail when checked or graded, and a learner lose points for a plot. `NotebookShell`
is the plain shell with what the kernel adds that a cell may count on:

- ``%matplotlib`` (any backend) selects a backend that draws into nothing: the figures are
  made as in the notebook, and no window opens where no one looks;
- ``%pip``, ``%conda`` and ``%mamba`` install nothing: packages come from the environment the
  notebook is checked or graded in, and a grader has no network to install with. The magic
  says so and the cell goes on;
- ``%store`` works, as the kernel loads its extension.
"""

from __future__ import annotations

from typing import Any

from IPython.core.interactiveshell import InteractiveShell

INSTALLERS = ("pip", "conda", "mamba", "micromamba")


class NotebookShell(InteractiveShell):
    """IPython's shell with what a notebook's kernel adds (see the module's docstring)."""

    def __init__(self, **options: Any) -> None:
        super().__init__(**options)
        for name in INSTALLERS:
            self.register_magic_function(_not_installed(name), "line", name)
        self.extension_manager.load_extension("storemagic")

    def enable_gui(self, gui: str | None = None) -> None:
        """No event loop to hand over to: nothing here is interactive."""

    def enable_matplotlib(self, gui: str | None = None) -> Any:
        return super().enable_matplotlib("agg")


def _not_installed(name: str) -> Any:
    def magic(line: str) -> None:
        print(f"%{name} {line}: not run when a notebook is checked or graded (packages come "
              f"from the environment it runs in)")

    magic.__name__ = name
    return magic
