"""bench/transforms_peer.py, teachflow's transformations against torch.func's: its table names
every op case of tests/op_cases.py (a PyTorch counterpart or the reason there is none), and
without PyTorch the script says so and succeeds. No test here runs PyTorch (tests never use it
as an oracle)."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

import pytest
from op_cases import DIFFERENTIABLE_CASES

SCRIPT = Path(__file__).parent.parent / "bench" / "transforms_peer.py"


def table_entries() -> dict[str, ast.expr]:
    """PEERS's entries, read from the script's source (importing it would import PyTorch)."""
    for node in ast.parse(SCRIPT.read_text()).body:
        if isinstance(node, ast.AnnAssign) and getattr(node.target, "id", None) == "PEERS":
            assert isinstance(node.value, ast.Dict)
            assert all(isinstance(key, ast.Constant) for key in node.value.keys), \
                "PEERS's keys are written out, one per op case"
            return {key.value: value for key, value in zip(node.value.keys, node.value.values,
                                                            strict=True)}
    raise AssertionError("bench/transforms_peer.py has no PEERS table")


def test_the_table_names_every_op_case_once() -> None:
    entries = table_entries()
    cases = [case.name for case in DIFFERENTIABLE_CASES]
    assert sorted(entries) == sorted(cases), (
        f"missing: {sorted(set(cases) - set(entries))}, "
        f"not an op case: {sorted(set(entries) - set(cases))}")


def test_an_op_with_no_counterpart_says_why() -> None:
    skipped = {name: value for name, value in table_entries().items()
               if isinstance(value, ast.Call) and getattr(value.func, "id", None) == "Skip"}
    assert skipped, "t[t>0] has no counterpart that either side can trace"
    for name, call in skipped.items():
        reason = call.args[0]
        assert isinstance(reason, ast.Constant) and len(reason.value) > 20, name


def test_without_pytorch_the_script_says_so_and_succeeds(monkeypatch: pytest.MonkeyPatch,
                                                         capsys: pytest.CaptureFixture) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # `import torch` raises ImportError
    monkeypatch.setitem(sys.modules, "torch.func", None)
    monkeypatch.setattr(sys, "argv", ["transforms_peer.py"])
    spec = importlib.util.spec_from_file_location("transforms_peer_without_torch", SCRIPT)
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.torch is None
    assert script.main() == 0
    assert "skipped (PyTorch is not installed" in capsys.readouterr().out
