"""What the benchmarks print, for any timing: a ratio of two timings reads ``1.23x`` or ``n/a``,
never ``nanx`` or ``infx``, whatever the machine's load made of the timings (a zero, a time
not taken, two equal ones). The timings here are made up: no test measures time."""

from __future__ import annotations

import itertools
import math
import re
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent.parent / "bench"))

import control_flow
import peers
import train_step

import timing

#: A printed ratio, as every benchmark prints one.
RATIO = r"(\d+\.\d+x|n/a)"
#: Timings a busy machine can produce, and some it should not.
TIMINGS = [0.0, -1e-6, 1e-9, 2.5e-6, 1.0, 3600.0, 1e308, 5e-324, math.nan, math.inf]


@pytest.mark.parametrize(("a", "b"), list(itertools.product(TIMINGS, TIMINGS)))
def test_a_ratio_of_any_two_timings_is_a_number_or_says_n_a(a: float, b: float) -> None:
    text = timing.ratio(a, b)
    assert re.fullmatch(RATIO, text), text
    measured = a > 0 and b > 0 and math.isfinite(a) and math.isfinite(b) and \
        math.isfinite(a / b) and a / b > 0
    assert (text != "n/a") == measured, (a, b, text)
    if measured:
        assert float(text[:-1]) == pytest.approx(a / b, rel=0.01, abs=0.005)


def test_equal_timings_are_1x_and_digits_are_kept() -> None:
    assert timing.ratio(2e-3, 2e-3) == "1.00x"
    assert timing.ratio(3.0, 2.0, digits=1) == "1.5x"
    assert timing.ratio_text(math.nan) == timing.ratio_text(-1.0) == "n/a"


def test_a_paired_ratio_leaves_out_rounds_not_measured() -> None:
    rounds = {"a": [2.0, 0.0, 3.0, math.nan], "b": [1.0, 1.0, 0.0, 1.0]}
    assert timing.paired_ratio(rounds, "a", "b") == 2.0  # only the first round counts
    assert math.isnan(timing.paired_ratio({"a": [0.0], "b": [0.0]}, "a", "b"))


def test_the_control_flow_table_prints_every_row_for_any_figures() -> None:
    keys = [key for _, key, _ in control_flow.ROWS]
    for a_time, b_time in itertools.product([0.0, 1e-3, math.nan], repeat=2):
        a = {key: a_time if unit else 12 for _, key, unit in control_flow.ROWS}
        b = {key: b_time if unit else 12 for _, key, unit in control_flow.ROWS}
        lines = control_flow.table(a, b)
        assert len(lines) == 1 + len(keys)
        for line in lines[1:]:
            assert re.search(rf"   +{RATIO}$", line), line
            assert "nan" not in line and "inf" not in line, line
        counts = [line for line in lines if "graph nodes" in line]
        assert all(line.endswith("1.00x") for line in counts)


@pytest.mark.parametrize("with_torch", [False, True])
def test_the_training_step_report_prints_every_row_for_any_timings(with_torch: bool) -> None:
    names = ["numpy", "eager", "staged"] + (["torch"] if with_torch else [])
    for times in ([0.0, 0.0], [1e-4, 1e-4], [math.nan, 2e-4], [0.0, 3e-4]):
        lines = train_step.report({name: list(times) for name in names})
        rows = [line for line in lines if line.endswith(" NumPy")]
        assert len(rows) == len(names)
        for row in rows:
            assert re.search(rf"(\d+\.\d|n/a) us +{RATIO} NumPy$", row), row
        paired = [line for line in lines if " / " in line]
        assert len(paired) == (3 if with_torch else 1)
        for line in paired:
            assert re.search(rf": +{RATIO}( \(goal [^)]*\))?$", line), line
        assert not any("nan" in line or "inf" in line for line in lines), lines


def test_a_goal_line_says_not_measured_rather_than_a_verdict_on_nothing() -> None:
    assert peers.ratio_line("x / y", 1.0, 2.0, 1.0).endswith("0.50x   (goal <= 1.00x: met)")
    assert "missed by 100%" in peers.ratio_line("x / y", 2.0, 1.0, 1.0)
    line = peers.ratio_line("x / y", 0.0, 0.0, 1.0)
    assert line.endswith("n/a   (goal <= 1.00x: not measured)"), line
