"""The %%compile cell magic, run in a real IPython shell."""

from __future__ import annotations

import numpy as np
import pytest

import teachflow as tfl

IPython = pytest.importorskip("IPython")
from IPython.testing.globalipapp import start_ipython  # noqa: E402 (after the skip)


@pytest.fixture
def ip():
    shell = start_ipython() or IPython.get_ipython()  # one shell, made on first use
    shell.run_line_magic("load_ext", "teachflow")
    shell.user_ns.update(tfl=tfl, x=tfl.tensor([[1.0, -2.0, 3.0], [0.5, 1.5, -1.0]]),
                         w=tfl.tensor([[1.0, 0.0], [0.5, -1.0], [2.0, 1.0]]))
    yield shell
    for name in ("x", "w", "h", "loss", "result", "compiled", "staged", "g"):
        shell.user_ns.pop(name, None)


CELL = "h = (x @ w).relu()\nloss = (h * h).mean()\nloss"


def test_the_cell_is_staged_run_and_its_variables_come_back(ip) -> None:
    x, w = ip.user_ns["x"], ip.user_ns["w"]
    returned = ip.run_cell_magic("compile", "--no-show", CELL)
    h = np.maximum(x.numpy() @ w.numpy(), 0)
    np.testing.assert_allclose(returned.numpy(), (h * h).mean(), rtol=1e-6)
    np.testing.assert_allclose(ip.user_ns["h"].numpy(), h, rtol=1e-6)
    assert ip.user_ns["result"] is returned and ip.user_ns["loss"].item() == returned.item()
    assert ip.user_ns["x"] is x and ip.user_ns["w"] is w  # inputs are not replaced
    compiled = ip.user_ns["compiled"]
    assert isinstance(compiled, tfl.Compilation)
    trace = compiled.snapshots[0].graph
    assert [v.name for v in trace.inputs] == ["x", "w"]  # the tensors the cell reads
    assert [n.op.name for n in trace.nodes] == ["matmul", "relu", "mul", "mean"]
    assert compiled.snapshots[-1].pass_name == "fuse"


def test_the_compiled_cell_runs_again_on_new_inputs(ip) -> None:
    ip.run_cell_magic("compile", "--no-show --name staged", CELL)
    staged = ip.user_ns["staged"]
    x2 = tfl.ones(2, 3)
    out = staged(x2, ip.user_ns["w"])
    want = np.maximum(np.ones((2, 3)) @ ip.user_ns["w"].numpy(), 0)
    np.testing.assert_allclose(out["loss"].numpy(), (want * want).mean(), rtol=1e-6)


def test_passes_option_picks_the_pipeline(ip) -> None:
    ip.run_cell_magic("compile", "--no-show --passes simplify,dce", "y = x * 1.0\ny")
    compiled = ip.user_ns["compiled"]
    assert [s.pass_name for s in compiled.snapshots] == ["trace", "simplify", "dce"]
    assert compiled.snapshots[1].changes[0].rule == "x*1 -> x"


def test_an_error_points_to_the_cells_own_line(ip) -> None:
    with pytest.raises(tfl.ShapeError) as info:
        ip.run_cell_magic("compile", "--no-show", "h = x @ w\ng = h @ w\ng")
    assert info.value.location.lineno == 2
    assert info.value.location.line == "g = h @ w"


def test_control_flow_on_a_tensor_value_is_a_trace_error_at_the_cell_line(ip) -> None:
    cell = "y = x * 2\nif y.sum() > 0:\n    y = -y\ny"
    with pytest.raises(tfl.TraceError) as info:
        ip.run_cell_magic("compile", "--no-show", cell)
    assert info.value.location.lineno == 2


def test_a_gpu_that_is_not_there_is_a_device_error(ip) -> None:
    if "gpu" in tfl.devices():
        pytest.skip("a GPU is usable here")
    with pytest.raises(tfl.DeviceError, match="GPU"):
        ip.run_cell_magic("compile", "--no-show --device gpu", CELL)


def test_unknown_options_are_refused(ip) -> None:
    with pytest.raises(tfl.TeachflowError, match="--frobnicate"):
        ip.run_cell_magic("compile", "--frobnicate", CELL)


def test_html_option_writes_the_stepper_page(ip, tmp_path) -> None:
    page = tmp_path / "cell.html"
    ip.run_cell_magic("compile", f"--no-show --html {page}", CELL)
    text = page.read_text()
    assert "<script" in text and "tf-stepper" in text and '"stages"' in text
