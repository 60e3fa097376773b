"""A test cell's tests, run by pytest itself: parametrize, fixtures and marks work as in a file.

A test cell is pytest code, so pytest runs it, in this process, once per cell: what an
instructor writes in a test file works in a test cell (``@pytest.mark.parametrize``, stacked
too; ``tmp_path``, ``monkeypatch``, ``capsys`` and the other built-in fixtures; a
``@pytest.fixture`` of the notebook's own; ``pytest.raises``, ``pytest.warns``,
``pytest.approx``; ``skip`` and ``xfail``).

pytest collects tests from files it imports. Here the cell's code has run already, with its
asserts rewritten (`teachflow.grading.asserts`), so a collector hands pytest a module made of
that namespace instead of importing a file: the tests of this cell, and every fixture the
notebook defined. pytest then collects, sets up fixtures, runs, and reports each test (each
case of a parametrized one); a hook keeps each report's exception for
`teachflow.grading.failures` to put in words, and what the test printed.

A test *function* passes when each of its cases does; its points are the function's
(`teachflow.grading.credit`). Each test starts from fixed seeds (`before`, which grading gives
`teachflow.grading.seeds`' seeding of both sides).
"""

from __future__ import annotations

import contextlib
import os
import tempfile
import types
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from teachflow.core.errors import GradingError

#: The built-in fixtures a test cell may ask for (pytest's own, less those about files of
#: tests and their cache, which a notebook has not).
BUILTIN_FIXTURES = frozenset({
    "tmp_path", "tmp_path_factory", "tmpdir", "tmpdir_factory", "monkeypatch", "capsys",
    "capsysbinary", "capfd", "capfdbinary", "caplog", "recwarn", "request", "pytestconfig",
    "record_property", "record_testsuite_property", "doctest_namespace"})

#: pytest's plugins a cell needs none of (its reports are read by a hook, not printed).
_UNUSED_PLUGINS = ("cacheprovider", "warnings", "faulthandler", "doctest", "junitxml",
                   "pastebin", "terminal", "legacypath", "stepwise", "lsof", "setuponly",
                   "setupplan")


@dataclass
class Case:
    """One test as pytest ran it: its function, its id (``test_x[2-3]``), how it ended."""

    function: str
    name: str
    outcome: str                     # "passed", "failed" or "skipped"
    error: BaseException | None = None
    when: str = "call"               # where it failed: "setup", "call" or "teardown"
    text: str = ""                   # pytest's own account of a failure outside the call
    printed: str = ""
    reason: str = ""                 # why a skipped or xfailed test was


@dataclass
class _Reports:
    cases: list[Case] = field(default_factory=list)
    interrupted: bool = False
    collection: str = ""  # why collecting the cell's tests failed


def run_cell_tests(namespace: dict[str, Any], tests: list[str], filename: str,
                   before: Callable[[], None] | None = None) -> list[Case]:
    """Run the test functions `tests` of the namespace a cell ran in, with pytest; `before`
    is called as each test starts, before its fixtures are set up."""
    import pytest

    module = types.ModuleType(filename)
    module.__file__ = filename
    module.__dict__.update({name: namespace[name] for name in tests if name in namespace})
    module.__dict__.update({name: value for name, value in namespace.items()
                            if _is_fixture(value)})
    reports = _Reports()
    with tempfile.TemporaryDirectory(prefix="teachflow-tests-",
                                     ignore_cleanup_errors=True) as scratch:
        folder = Path(scratch)
        (folder / "cell").write_text("")  # (pytest wants a file to collect: an empty one,
        #  not named .py, which pytest would import)
        (folder / "pytest.ini").write_text("[pytest]\n")
        arguments = ["-c", str(folder / "pytest.ini"), "--rootdir", str(folder),
                     "--basetemp", str(folder / "tmp"), "--capture=sys",
                     *(f"-p no:{name}" for name in _UNUSED_PLUGINS), str(folder / "cell")]
        arguments = [part for argument in arguments for part in argument.split(" ", 1)]
        with _no_plugin_autoload():
            code = pytest.main(arguments, plugins=[_Plugin(module, reports, before)])
    if reports.interrupted:
        raise KeyboardInterrupt
    if code in (pytest.ExitCode.INTERNAL_ERROR, pytest.ExitCode.USAGE_ERROR):
        raise GradingError(f"pytest could not run the tests of {filename} (exit status "
                           f"{int(code)})", op="test cell")
    return reports.cases


def _is_fixture(value: Any) -> bool:
    import pytest

    definition = getattr(pytest, "FixtureDefinition", None)  # (pytest >= 8.4 wraps them)
    return bool(getattr(value, "_pytestfixturefunction", None)) or (
        definition is not None and isinstance(value, definition)) or \
        type(value).__name__ == "FixtureFunctionDefinition"


@contextlib.contextmanager
def _no_plugin_autoload() -> Iterator[None]:
    """pytest's own plugins only: those installed beside it load in no test cell."""
    previous = os.environ.get("PYTEST_DISABLE_PLUGIN_AUTOLOAD")
    os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PYTEST_DISABLE_PLUGIN_AUTOLOAD", None)
        else:
            os.environ["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = previous


class _Plugin:
    """Collects the cell's module, and keeps each test's report and exception."""

    def __init__(self, module: types.ModuleType, reports: _Reports,
                 before: Callable[[], None] | None = None) -> None:
        self.module, self.reports = module, reports
        self.errors: dict[tuple[str, str], BaseException] = {}
        if before is not None:  # (first of the setup hooks: fixtures draw from seeds too)
            self.pytest_runtest_setup = _first(lambda item: before())

    def pytest_collect_file(self, file_path: Path, parent: Any) -> Any:
        return _module_collector(self.module).from_parent(parent, path=file_path)

    def pytest_runtest_makereport(self, item: Any, call: Any) -> None:
        if call.excinfo is not None:  # (the report, made next, keeps only its text)
            self.errors[(item.nodeid, call.when)] = call.excinfo.value
            if isinstance(call.excinfo.value, KeyboardInterrupt):
                self.reports.interrupted = True

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when != "call" and report.outcome == "passed":
            return
        name = report.nodeid.split("::")[-1]
        case = Case(name.split("[")[0], name, report.outcome, when=report.when,
                    printed=report.capstdout + report.capstderr,
                    error=self.errors.get((report.nodeid, report.when)))
        if report.outcome == "skipped":
            case.reason = _skip_reason(report)
        elif report.when != "call":
            case.text = report.longreprtext
        self.reports.cases.append(case)

    def pytest_collectreport(self, report: Any) -> None:
        if report.failed:
            self.reports.collection = report.longreprtext

    def pytest_keyboard_interrupt(self, excinfo: Any) -> None:
        if isinstance(excinfo.value, KeyboardInterrupt):  # (not pytest's Interrupted)
            self.reports.interrupted = True


def _first(hook: Callable[..., None]) -> Callable[..., None]:
    import pytest

    return pytest.hookimpl(tryfirst=True)(hook)


def _skip_reason(report: Any) -> str:
    if hasattr(report, "wasxfail"):
        return f"expected to fail: {report.wasxfail}".rstrip(": ")
    longrepr = report.longrepr
    return str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else ""


def _module_collector(module: types.ModuleType) -> Callable[..., Any]:
    import pytest

    class CellModule(pytest.Module):
        """The cell's namespace as the module pytest collects from (no file is imported)."""

        def _getobj(self) -> types.ModuleType:
            return module

    return CellModule
