"""Suite-wide settings: say up front which devices the run can use."""

from __future__ import annotations

import teachflow.compiler
from teachflow.backends import devices, gpu_unavailable_reason

# Every compilation in the tests checks that each pass preserves what the program computes.
teachflow.compiler.VERIFY_BY_DEFAULT = True


def pytest_report_header() -> str:
    reason = gpu_unavailable_reason()
    gpu = "GPU tests run" if reason is None else f"GPU tests (marker `gpu`) skip: {reason}"
    return f"teachflow devices: {', '.join(devices())}; {gpu}"
