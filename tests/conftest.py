"""Suite-wide settings: say up front which devices the run can use, and make every run of
`make test` give the same verdict.

- Property tests (hypothesis) draw their examples from a fixed seed (``derandomize``), read no
  database of earlier failures, and have no time limit per example (a loaded machine is slow,
  not wrong). `make explore` (TEACHFLOW_EXPLORE, tests/helpers.py) draws new examples, more of
  them, and keeps what fails in .hypothesis/ to try first next time.
- Each test starts from ``tfl.manual_seed(0)``: what ``tfl.randn`` draws does not depend on the
  run, nor on which tests ran before.
- A test file of staged functions may run each test twice, by both routes of a staged call
  (``pytestmark = pytest.mark.usefixtures("each_route")``): with the fast path, and by the plain
  route alone (`teachflow.staged.fast_path`).
"""

from __future__ import annotations

import pytest
from helpers import EXPLORE
from hypothesis import HealthCheck, settings

import teachflow as tfl
import teachflow.compiler
import teachflow.staged.function
from teachflow.core.backends import devices, gpu_unavailable_reason

# Every compilation in the tests checks that each pass preserves what the program computes.
teachflow.compiler.VERIFY_BY_DEFAULT = True

settings.register_profile("repeatable", derandomize=True, database=None, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", deadline=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("explore" if EXPLORE else "repeatable")


@pytest.fixture(autouse=True)
def _seeded() -> None:
    tfl.manual_seed(0)


@pytest.fixture(params=["fast path", "plain route"])
def each_route(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The test runs with calls of tfl.functions taking the fast path where they can, then
    again with every call taking the plain route."""
    monkeypatch.setattr(teachflow.staged.function, "TAKE_FAST_PATH",
                        request.param == "fast path")
    return request.param


def pytest_report_header() -> str:
    reason = gpu_unavailable_reason()
    gpu = "GPU tests run" if reason is None else f"GPU tests (marker `gpu`) skip: {reason}"
    hypothesis = (f"new examples, {EXPLORE} times as many (make explore)" if EXPLORE
                  else "the same examples every run")
    return (f"teachflow devices: {', '.join(devices())}; {gpu}\n"
            f"property tests (hypothesis): {hypothesis}")
