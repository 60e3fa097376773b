"""Saved graphs: ``tfl.save`` and ``tfl.load`` round trips, what is refused when saving, the
loaded function as a function (its arguments, gradients, the stepper), and the schema against
the ops' declarations. Hostile files: test_saved_attacks.py; fuzzing: test_saved_fuzz.py."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
import textwrap
from pathlib import Path

import hypothesis.extra.numpy as hnp
import numpy as np
import pytest
import test_devices
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import teachflow as tfl
from teachflow.ops.op import OPS
from teachflow.saved.format import DTYPES
from teachflow.saved.schema import KINDS, arguments_of
from teachflow.viz.stepper import PassStepper

W = tfl.randn(3, 4)
gpu = test_devices.gpu  # a fixture: the device "gpu", simulated by NumPy, and (marked) CuPy's


def control_flow(x: tfl.Tensor) -> tuple:
    """Captured state, a constant, both branches of a cond, a fori loop, an index array."""
    h = x @ W + np.array([1.0, 2.0, 3.0, 4.0], dtype=np.float32)
    h = tfl.cond(h.sum() > 0, lambda h: h * 2, lambda h: -h, h)
    h = tfl.fori_loop(0, 3, lambda i, c: c * 0.5 + i.astype("float32"), h)
    return h[np.array([0, 1, 1]), 1:3].sum(axis=1), tfl.softmax(h, axis=-1)


def halve_until_small(x: tfl.Tensor) -> tfl.Tensor:
    return tfl.while_loop(lambda v: v.sum() > 1.0, lambda v: v * 0.5, x)


def close(a: object, b: object) -> bool:
    pairs = zip(a, b, strict=True) if isinstance(a, tuple) else [(a, b)]
    return all(np.allclose(p.numpy(), q.numpy(), rtol=1e-5, atol=1e-6) for p, q in pairs)


def test_a_compilation_saves_as_json_and_arrays_and_loads_with_the_same_results(
        tmp_path: Path) -> None:
    x = tfl.randn(2, 3)
    folder = tfl.save(tfl.compile(control_flow, x), tmp_path / "model")
    assert sorted(p.name for p in folder.iterdir()) == ["arrays.npz", "saved.json"]
    manifest = json.loads((folder / "saved.json").read_text())
    assert (manifest["format"], manifest["version"], manifest["kind"]) == \
        ("teachflow.saved", "1.0", "function")
    assert [n["op"] for n in manifest["graph"]["nodes"]][:4] == ["matmul", "add", "sum", "gt"]
    loaded = tfl.load(folder)
    assert isinstance(loaded, tfl.saved.SavedFunction)
    assert close(loaded(x), control_flow(x))
    assert close(loaded(x.numpy()), control_flow(x))  # NumPy arrays are inputs too
    assert list(loaded.state) == ["W"] and np.array_equal(loaded.state["W"].numpy(), W.numpy())


def test_the_saved_graph_is_the_traced_one_and_the_loader_runs_the_passes_again(
        tmp_path: Path) -> None:
    def f(x: tfl.Tensor) -> tfl.Tensor:
        return (x.tanh() + x.tanh()) * 1.0

    c = tfl.compile(f, tfl.randn(5))
    loaded = tfl.load(tfl.save(c, tmp_path / "f"))
    assert str(loaded.graph).count("tanh") == 2  # as traced: no pass ran yet
    stages = [s.pass_name for s in loaded.compilation.snapshots]
    assert stages == [s.pass_name for s in c.snapshots]
    assert [s.stats["nodes"] for s in loaded.compilation.snapshots] == \
        [s.stats["nodes"] for s in c.snapshots]
    assert "fused_k1" in loaded.source
    assert "fused" not in (tmp_path / "f" / "saved.json").read_text()  # no generated code saved


def test_a_concrete_function_and_a_function_called_once_save_their_one_trace(
        tmp_path: Path) -> None:
    x = tfl.randn(2, 3)
    staged = tfl.function(control_flow)
    tfl.save(staged.get_concrete_function(x), tmp_path / "concrete")
    assert close(tfl.load(tmp_path / "concrete")(x), control_flow(x))
    tfl.save(staged, tmp_path / "function")
    assert close(tfl.load(tmp_path / "function")(x), control_flow(x))


def test_a_function_traced_never_or_twice_says_which_trace_to_save(tmp_path: Path) -> None:
    staged = tfl.function(lambda x: x * 2)
    with pytest.raises(tfl.TeachflowError, match=r"(?s)0 concrete functions.*call it once"):
        tfl.save(staged, tmp_path / "none")
    staged(tfl.randn(2))
    staged(tfl.randn(3))
    with pytest.raises(tfl.TeachflowError, match="2 concrete functions") as info:
        tfl.save(staged, tmp_path / "two")
    assert "get_concrete_function" in str(info.value)


def test_saving_something_else_says_what_it_takes(tmp_path: Path) -> None:
    with pytest.raises(tfl.TeachflowError, match="takes a staged function or a state dict"):
        tfl.save(lambda x: x, tmp_path / "lambda")


def test_a_while_loop_and_an_input_of_unknown_size_load(tmp_path: Path) -> None:
    spec = tfl.TensorSpec((None,), "float32")
    staged = tfl.function(halve_until_small, input_signature=[spec])
    staged(tfl.ones(4))
    loaded = tfl.load(tfl.save(staged, tmp_path / "while"))
    for n in (3, 7):
        assert close(loaded(tfl.ones(n) * 5), halve_until_small(tfl.ones(n) * 5))
    manifest = json.loads((tmp_path / "while" / "saved.json").read_text())
    assert manifest["graph"]["inputs"][0]["shape"] == [None]


def test_floats_json_has_no_number_for_are_spelled_out(tmp_path: Path) -> None:
    def f(x: tfl.Tensor) -> tfl.Tensor:
        return tfl.maximum(x, tfl.full((), float("-inf"))) + tfl.full((3,), 0.25)

    x = tfl.randn(3)
    tfl.save(tfl.compile(f, x), tmp_path / "inf")
    assert '{"float": "-inf"}' in (tmp_path / "inf" / "saved.json").read_text()
    assert close(tfl.load(tmp_path / "inf")(x), f(x))


@settings(max_examples=150, deadline=None, database=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data(), kind=st.sampled_from(DTYPES), unknown=st.booleans())
def test_every_shape_and_dtype_the_format_allows_round_trips(
        tmp_path: Path, data: st.DataObject, kind: str, unknown: bool) -> None:
    """0-d values, empty sides, every dtype: as an input (of known or unknown sizes), a
    constant, captured state, an index array, an output, and a state dict entry, each loads as
    it was saved."""
    shape = data.draw(hnp.array_shapes(min_dims=0, max_dims=3, min_side=0, max_side=3))
    arrays = hnp.arrays(np.dtype(kind), shape)
    given_x, constant, state = data.draw(arrays), data.draw(arrays), tfl.tensor(data.draw(arrays))

    def f(x: tfl.Tensor) -> tuple:
        return x, tfl.tensor(constant), state, x.reshape(-1)[np.zeros(shape, dtype=np.int64)]

    x = tfl.tensor(given_x)
    spec = tfl.TensorSpec(tuple(None for _ in shape) if unknown else shape, kind)
    staged = tfl.function(f, input_signature=[spec])
    expected = staged(x)
    folder = tmp_path / f"{kind}-{len(list(tmp_path.iterdir()))}"
    results = tfl.load(tfl.save(staged, folder))(x)
    for result, wanted in zip(results, expected, strict=True):
        assert (result.shape, result.dtype) == (wanted.shape, wanted.dtype)
        np.testing.assert_array_equal(result.numpy(), wanted.numpy())
    loaded = tfl.load(tfl.save({"state": state}, folder / "state"))["state"]
    assert (loaded.shape, loaded.dtype) == (shape, np.dtype(kind))
    np.testing.assert_array_equal(loaded.numpy(), state.numpy())


def test_a_module_saves_its_state_dict_and_loads_it_into_another(tmp_path: Path) -> None:
    tfl.manual_seed(0)
    net = tfl.nn.Sequential(tfl.nn.Linear(4, 8), tfl.nn.ReLU(), tfl.nn.Linear(8, 2))
    tfl.save(net, tmp_path / "weights")
    state = tfl.load(tmp_path / "weights")
    assert list(state) == ["0.weight", "0.bias", "2.weight", "2.bias"]
    other = tfl.nn.Sequential(tfl.nn.Linear(4, 8), tfl.nn.ReLU(), tfl.nn.Linear(8, 2))
    other.load_state_dict(state)
    x = tfl.randn(5, 4)
    assert np.array_equal(other(x).numpy(), net(x).numpy())
    tfl.save(net.state_dict(), tmp_path / "dict")  # the dict itself, as torch.save takes it
    assert list(tfl.load(tmp_path / "dict")) == list(state)


def test_a_state_dict_holds_tensors_only(tmp_path: Path) -> None:
    with pytest.raises(tfl.TeachflowError, match="'lr' is float, not a tensor"):
        tfl.save({"w": tfl.ones(2), "lr": 0.1}, tmp_path / "bad")


def test_a_staged_model_loads_with_its_parameters_as_state(tmp_path: Path) -> None:
    tfl.manual_seed(0)
    net = tfl.nn.Sequential(tfl.nn.Linear(4, 8), tfl.nn.Tanh(), tfl.nn.Linear(8, 2))
    forward = tfl.function(net)
    x = tfl.randn(5, 4)
    expected = forward(x)
    loaded = tfl.load(tfl.save(forward, tmp_path / "net"))
    assert close(loaded(x), expected)
    assert len(loaded.state) == 4
    with tfl.no_grad():  # the loaded function reads its state at every call
        for t in loaded.state.values():
            t *= 0
    assert np.allclose(loaded(x).numpy(), 0)


def test_a_training_step_that_writes_state_is_refused_naming_the_state(tmp_path: Path) -> None:
    net = tfl.nn.Linear(3, 1)
    opt = tfl.optim.SGD(net.parameters(), lr=0.1)

    @tfl.function
    def step(x: tfl.Tensor) -> tfl.Tensor:
        opt.zero_grad()
        loss = net(x).sum()
        loss.backward()
        opt.step()
        return loss

    step(tfl.randn(4, 3))
    with pytest.raises(tfl.TeachflowError, match="writes state back") as info:
        tfl.save(step, tmp_path / "step")
    assert "weight.grad" in str(info.value) and "state dict" in info.value.hint
    assert not (tmp_path / "step" / "saved.json").exists()


def test_a_loaded_function_checks_its_arguments(tmp_path: Path) -> None:
    loaded = tfl.load(tfl.save(tfl.compile(control_flow, tfl.randn(2, 3)), tmp_path / "m"))
    with pytest.raises(tfl.ShapeError, match=r"takes 1 argument\(s\) \(%x: f32\[2,3\]\)"):
        loaded()
    with pytest.raises(tfl.ShapeError, match=r"has shape \(2, 3\), but was given shape \(3, 2\)"):
        loaded(tfl.randn(3, 2))
    with pytest.raises(tfl.DTypeError, match="float64 tensor"):
        loaded(tfl.randn(2, 3).astype("float64"))
    with pytest.raises(tfl.DTypeError, match="complex128 values"):
        loaded(np.ones((2, 3), dtype=complex))


def test_gradients_flow_through_a_loaded_function(tmp_path: Path) -> None:
    def f(x: tfl.Tensor) -> tfl.Tensor:
        return tfl.fori_loop(0, 2, lambda i, h: (h @ W.T).tanh() @ W, x).sum()

    loaded = tfl.load(tfl.save(tfl.compile(f, tfl.randn(2, 4)), tmp_path / "g"))
    x = tfl.randn(2, 4)
    assert np.allclose(tfl.grad(loaded)(x).numpy(), tfl.grad(f)(x).numpy(), atol=1e-5)


def test_a_loaded_function_shows_in_the_stepper(tmp_path: Path) -> None:
    loaded = tfl.load(tfl.save(tfl.compile(control_flow, tfl.randn(2, 3)), tmp_path / "m"))
    stepper = loaded.show()
    assert isinstance(stepper, PassStepper)
    assert stepper.data["stages"][0]["pass"] == "trace"
    page = loaded.to_html(tmp_path / "stepper.html").read_text()
    assert "teachflow-stepper-data" in page and "fori_loop" in page
    assert loaded.compilation(tfl.randn(2, 3))[0].shape == (3,)  # a Compilation calls it


def test_it_runs_in_a_fresh_process_that_never_imports_the_defining_module(
        tmp_path: Path) -> None:
    source = tmp_path / "defining_model.py"
    source.write_text(textwrap.dedent("""
        import numpy as np
        import teachflow as tfl

        tfl.manual_seed(1)
        W1, W2 = tfl.randn(3, 8), tfl.randn(8, 2)

        def model(x):
            h = tfl.cond(x.sum() > 0, lambda x: (x @ W1).relu(), lambda x: (x @ W1).tanh(), x)
            h = tfl.fori_loop(0, 2, lambda i, h: h * 0.9 + 0.1, h)
            return tfl.softmax(h @ W2 + np.float32(0.5), axis=-1)
        """))
    spec = importlib.util.spec_from_file_location("defining_model", source)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    x = tfl.randn(4, 3)
    tfl.save(tfl.compile(module.model, x), tmp_path / "saved")
    np.save(tmp_path / "x.npy", x.numpy())
    np.save(tmp_path / "expected.npy", module.model(x).numpy())
    other = tmp_path / "elsewhere"
    other.mkdir()
    script = textwrap.dedent(f"""
        import sys
        import numpy as np
        import teachflow as tfl
        model = tfl.load({str(tmp_path / 'saved')!r})
        out = model(np.load({str(tmp_path / 'x.npy')!r}))
        assert "defining_model" not in sys.modules
        np.testing.assert_allclose(out.numpy(), np.load({str(tmp_path / 'expected.npy')!r}),
                                   rtol=1e-5, atol=1e-6)
        print("ok", sorted(model.state))
        """)
    run = subprocess.run([sys.executable, "-c", script], cwd=other, capture_output=True,
                         text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["ok", "['W1',", "'W2']"]


def test_every_parameter_of_every_op_has_a_kind_in_the_schema() -> None:
    """A new op whose parameter has a new name fails here: give the name a kind in
    teachflow/saved/schema.py (how it is written as JSON and read back, checked)."""
    missing = {name: sorted(arguments_of(op).params - set(KINDS)) for name, op in OPS.items()
               if arguments_of(op).params - set(KINDS)}
    assert missing == {}


def test_the_schema_reads_what_each_op_takes_from_its_declaration() -> None:
    assert arguments_of(OPS["sum"]).params == {"axis", "keepdims"}
    assert arguments_of(OPS["max"]).required == {"axis", "keepdims"}  # initial is optional
    assert (arguments_of(OPS["tanh"]).least, arguments_of(OPS["tanh"]).most) == (1, 1)
    assert (arguments_of(OPS["where"]).least, arguments_of(OPS["where"]).most) == (3, 3)
    assert arguments_of(OPS["broadcast_to"]).params == {"shape"}
    assert arguments_of(OPS["cond"]).params == {"true_fn", "false_fn"}
    assert arguments_of(OPS["fori_loop"]).required == {"body_fn"}


def test_a_graph_traced_on_the_gpu_loads_and_runs_there(tmp_path: Path, gpu: str) -> None:
    w = tfl.randn(3, 4).to("gpu")

    def f(x: tfl.Tensor) -> tfl.Tensor:
        return tfl.cond(x.sum() > 0, lambda x: (x @ w).tanh(), lambda x: x @ w, x).sum(axis=1)

    x = tfl.randn(2, 3).to("gpu")
    loaded = tfl.load(tfl.save(tfl.compile(f, x), tmp_path / "gpu"))
    manifest = json.loads((tmp_path / "gpu" / "saved.json").read_text())
    assert {v["device"] for v in [*manifest["graph"]["inputs"], *manifest["graph"]["captures"]]} \
        == {"gpu"}
    assert loaded.state["w"].device == "gpu" and test_devices.on_device(loaded(x), gpu)
    assert np.allclose(loaded(x).numpy(), f(x).numpy(), atol=1e-5)
