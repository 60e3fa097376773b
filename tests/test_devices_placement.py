"""One graph, many devices: logical CPU devices, pins, placement, partitioning, and pieces that
run at the same time.

The CPU is split into logical devices here (`two_cpus`), as TensorFlow's: ``cpu`` and ``cpu:1``
share the memory, and each has its own worker thread. A GPU piece is checked twice, as in
`test_devices`: on a simulated GPU everywhere, and (marked ``gpu``) on CuPy, skipped saying why
where there is none. No test here measures time: that pieces run at the same time is shown by a
barrier that both must reach (``bench/devices.py`` measures the speed).
"""

from __future__ import annotations

import os
import select
import signal
import threading
from typing import Any

import numpy as np
import pytest
import test_devices

import teachflow as tfl
from teachflow.core import backends
from teachflow.core.dispatch import bind
from teachflow.ops.op import Op
from teachflow.passes import DEFAULT_PIPELINE
from teachflow.passes.partition import partition, pieces
from teachflow.viz.devices import device_fill
from teachflow.viz.expand import expand_stage
from teachflow.viz.stepper_data import compilation_data
from teachflow.viz.svg import graph_svg

HERE = os.path.basename(__file__)
gpu = test_devices.gpu  # a fixture: "gpu", simulated by NumPy, and (marked) CuPy's


@pytest.fixture(autouse=True)
def two_cpus() -> Any:
    """The CPU as two logical devices, ``cpu`` and ``cpu:1`` (one again afterwards)."""
    tfl.set_logical_devices("cpu", 2)
    yield
    tfl.set_logical_devices("cpu", 1)


def two_branches(x, y):
    """Two independent matrix products, one pinned to cpu:1, joined on the CPU."""
    with tfl.device("cpu:1"):
        a = (x @ x).tanh()
    b = (y @ y).tanh()
    return a.to("cpu") + b


def rand(*shape: int) -> tfl.Tensor:
    return tfl.tensor(np.random.default_rng(len(shape)).standard_normal(shape).astype("float32"))


# --- Devices ----------------------------------------------------------------------------------


def test_logical_devices_are_listed_and_named_as_the_api_says() -> None:
    assert tfl.devices()[:2] == ["cpu", "cpu:1"]
    assert tfl.set_logical_devices("cpu", 3)[:3] == ["cpu", "cpu:1", "cpu:2"]
    assert tfl.zeros(2, device="cpu:0").device == "cpu"  # cpu:0 is the CPU itself
    assert tfl.zeros(2, device="cpu:2").device == "cpu:2"
    assert backends.get_backend("cpu:1").xp is np  # the same memory: NumPy arrays


def test_asking_for_a_device_that_is_not_there_says_why() -> None:
    with pytest.raises(tfl.DeviceError) as err:
        tfl.ones(2, device="cpu:7")
    assert "cpu:7" in str(err.value) and "set_logical_devices('cpu', 8)" in str(err.value)
    assert f"{HERE}:" in str(err.value)  # the learner's line
    with pytest.raises(tfl.DeviceError, match="only the CPU"):
        tfl.set_logical_devices("gpu", 2)
    with pytest.raises(tfl.ArgumentError):
        tfl.set_logical_devices("cpu", 0)
    with pytest.raises(tfl.DeviceError, match="tpu"):
        tfl.device("tpu").__enter__()


def test_tensors_made_before_the_devices_change_stay_where_they_are() -> None:
    t = tfl.ones(3, device="cpu:1")
    tfl.set_logical_devices("cpu", 1)
    assert t.device == "cpu:1" and "cpu:1" not in tfl.devices()
    assert (t * 2).device == "cpu:1" and (t * 2).numpy().tolist() == [2.0, 2.0, 2.0]
    with pytest.raises(tfl.DeviceError, match="no device 'cpu:1'"):
        tfl.ones(3, device="cpu:1")
    tfl.set_logical_devices("cpu", 2)
    assert (t + tfl.ones(3, device="cpu:1")).device == "cpu:1"  # the same device again


def test_to_copies_to_another_device() -> None:
    t = tfl.tensor([1.0, 2.0])
    moved = t.to("cpu:1")
    assert moved.device == "cpu:1" and t.device == "cpu"
    moved[0] = 5.0  # a copy: the original keeps its values
    assert t.numpy().tolist() == [1.0, 2.0] and moved.numpy().tolist() == [5.0, 2.0]
    assert t.to("cpu") is t and moved.to("cpu:1") is moved


def test_an_eager_op_mixing_devices_names_both_the_op_shapes_and_the_line() -> None:
    x, y = tfl.ones((2, 3)), tfl.ones((2, 3), device="cpu:1")
    with pytest.raises(tfl.DeviceError) as err:
        x * y
    text = str(err.value)
    assert "mul" in text and "cpu and cpu:1" in text and "float32[2, 3]" in text
    assert f"{HERE}:" in text and "x * y" in text
    assert "tfl.device" in text  # what to do about it


# --- Pins ---------------------------------------------------------------------------------------


def test_a_pin_places_what_is_made_and_run_inside_eagerly() -> None:
    x = tfl.ones(3, requires_grad=True)
    with tfl.device("cpu:1") as where:
        made = tfl.zeros(3)
        run = x * 2  # its operand is copied to cpu:1 first
        asked = tfl.zeros(3, device="cpu")  # an explicit device still wins
        with tfl.device("cpu"):
            inner = tfl.ones(1)
    assert where == "cpu:1"
    assert (made.device, run.device, asked.device, inner.device) == ("cpu:1", "cpu:1", "cpu",
                                                                      "cpu")
    assert tfl.zeros(1).device == "cpu"  # the pin ends with the block
    run.sum().backward()
    assert x.grad.device == "cpu" and x.grad.numpy().tolist() == [2.0, 2.0, 2.0]


def test_a_pin_places_the_nodes_built_inside_while_tracing() -> None:
    graph = tfl.trace(two_branches, rand(4, 4), rand(4, 4))
    pinned = [n for n in graph.nodes if n.pin == "cpu:1"]
    assert [n.op.name for n in pinned] == ["to_device", "matmul", "tanh"]
    assert all(n.spec.device == "cpu:1" for n in pinned)
    assert all(n.pin is None for n in graph.nodes if n not in pinned)
    assert "= matmul %2, %2 : f32[4,4] on cpu:1" in str(graph)
    eager = two_branches(rand(4, 4), rand(4, 4))
    assert tfl.function(two_branches)(rand(4, 4), rand(4, 4)).device == eager.device == "cpu"


# --- The passes ---------------------------------------------------------------------------------


def test_place_gives_every_node_its_device_and_the_reason() -> None:
    compiled = tfl.compile(two_branches, rand(4, 4), rand(4, 4))
    placed = next(s for s in compiled.snapshots if s.pass_name == "place")
    graph = placed.graph
    assert {c.nodes[0] for c in placed.changes} == {n.id for n in graph.nodes}
    assert all(c.kind == "placed" for c in placed.changes)
    rule = {next(n for n in graph.nodes if n.id == c.nodes[0]).op.name + "@" + str(c.nodes[0]):
            c.rule for c in placed.changes}
    by_op: dict[str, set[str]] = {}
    for key, why in rule.items():
        by_op.setdefault(key.split("@")[0], set()).add(why)
    assert by_op["matmul"] == {"pinned", "operands"}  # cpu:1's by its pin, the CPU's by x
    assert by_op["add"] == {"operands"}
    assert "asked for" in by_op["to_device"]  # a.to("cpu"): its parameter says so
    sentence = next(c.sentence for c in placed.changes if c.rule == "pinned")
    assert "runs on cpu:1" in sentence and "with tfl.device('cpu:1')" in sentence


def test_partition_joins_the_pieces_by_copy_nodes_and_counts_the_bytes() -> None:
    compiled = tfl.compile(two_branches, rand(32, 32), rand(32, 32))
    cut = next(s for s in compiled.snapshots if s.pass_name == "partition")
    copies = [n for n in cut.graph.nodes if n.op.name == "copy"]
    assert [(n.params["src"], n.params["dst"]) for n in copies] == [("cpu", "cpu:1"),
                                                                   ("cpu:1", "cpu")]
    assert not any(n.op.name == "to_device" for n in cut.graph.nodes)
    assert all(c.kind == "replaced" and c.rule == "transfer -> copy" for c in cut.changes)
    assert cut.stats["bytes_transferred"] == 2 * 32 * 32 * 4  # x there, and its product back
    assert set(pieces(cut.graph)) == {"cpu", "cpu:1"}
    for node in cut.graph.nodes:  # every node reads its operands on its own device
        assert all(o.spec.device == node.spec.device for o in node.inputs
                   if hasattr(o, "spec")) or node.op.name == "copy"
    nx_graph = cut.nx
    assert {d["device"] for _, d in nx_graph.nodes(data=True)} == {"cpu", "cpu:1"}
    assert compiled.snapshots[-1].stats["bytes_transferred"] == cut.stats["bytes_transferred"]


def test_a_node_reading_across_devices_gets_a_copy_in_front_of_it() -> None:
    graph = tfl.trace(lambda x: x.exp() + 1.0, rand(3))
    graph.inputs[0].spec = tfl.TensorSpec((3,), "float32", "cpu:1")  # (as if made there)
    cut, changes = partition(graph)
    copy = cut.nodes[0]
    assert copy.op.name == "copy" and copy.params == {"src": "cpu:1", "dst": "cpu"}
    assert changes[0].kind == "added" and "reads %x from cpu:1" in changes[0].sentence


def test_place_and_partition_do_nothing_on_one_device() -> None:
    compiled = tfl.compile(lambda x: (x @ x).tanh(), rand(4, 4))
    names = [s.pass_name for s in compiled.snapshots]
    assert names == ["trace", *DEFAULT_PIPELINE]
    for name in ("place", "partition"):
        snap = compiled.snapshots[names.index(name)]
        assert snap.changes == [] and snap.graph is compiled.snapshots[names.index(name) - 1].graph
        assert snap.stats["bytes_transferred"] == 0
    assert compiled.concrete.executor.pieces is None  # one function, no threads


# --- Running the pieces ---------------------------------------------------------------------------


def test_a_graph_on_two_devices_computes_what_it_does_on_one() -> None:
    x, y = rand(16, 16), rand(16, 16)
    expected = (x @ x).tanh() + (y @ y).tanh()
    compiled = tfl.compile(two_branches, x, y)
    out = compiled(x, y)
    assert out.device == "cpu"
    np.testing.assert_allclose(out.numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    staged = tfl.function(two_branches)
    for _ in range(3):  # the first call traces; the rest take the fast path
        np.testing.assert_allclose(staged(x, y).numpy(), expected.numpy(), rtol=1e-5, atol=1e-6)
    grads = tfl.grad(lambda a, b: tfl.function(two_branches)(a, b).sum(), argnums=(0, 1))(x, y)
    eager = tfl.grad(lambda a, b: ((a @ a).tanh() + (b @ b).tanh()).sum(), argnums=(0, 1))(x, y)
    for got, want in zip(grads, eager, strict=True):
        assert got.device == "cpu"
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-4, atol=1e-5)


def meeting_op(barrier: threading.Barrier, seen: dict[str, str]) -> Op:
    """An op whose kernel waits at `barrier` and notes which thread ran it, by device of the
    thread: two pieces that each run one pass only if they run at the same time."""

    def kernel(xp):
        def meet(x):
            seen[threading.current_thread().name] = "met"
            barrier.wait(timeout=20)  # (reached at once when both run; 20 s only on failure)
            return x + 1

        return meet

    return Op("meet", kernel, lambda x: x, primitive=False, arg_names=("x",))


def test_pieces_on_two_devices_run_at_the_same_time() -> None:
    barrier, seen = threading.Barrier(2), {}
    meet = meeting_op(barrier, seen)

    def f(x, y):
        with tfl.device("cpu:1"):
            a = bind(meet, x)
        b = bind(meet, y)
        return a.to("cpu") + b

    compiled = tfl.compile(f, rand(3), rand(3), verify=False)  # (verifying runs op by op)
    out = compiled(rand(3), rand(3))
    np.testing.assert_allclose(out.numpy(), rand(3).numpy() * 2 + 2, rtol=1e-6)
    ran = compiled.concrete.executor.pieces.ran
    assert ran["cpu"] == threading.current_thread().name
    assert ran["cpu:1"].startswith("teachflow cpu:1")
    assert set(seen) == {ran["cpu"], ran["cpu:1"]}
    assert "def f_on_cpu_1(mail" in compiled.source and "mail.take(" in compiled.source


def test_a_piece_that_fails_stops_the_call_and_says_why() -> None:
    def f(x, y):
        with tfl.device("cpu:1"):
            a = x @ x
        return a.to("cpu") + y

    compiled = tfl.compile(f, rand(3, 3), rand(3, 3), verify=False)
    executor = compiled.concrete.executor  # (given arrays its graph was not traced for)
    with pytest.raises(ValueError, match="matmul"):
        executor(np.ones((3, 4), "float32"), np.ones((3, 4), "float32"))
    np.testing.assert_allclose(compiled(rand(3, 3), rand(3, 3)).numpy(),
                               f(rand(3, 3), rand(3, 3)).numpy(), rtol=1e-5)


def test_a_piece_on_the_gpu_computes_what_the_cpu_does(gpu: str) -> None:
    def f(x):
        with tfl.device("cuda:0"):
            a = (x * 2.0).exp()
        return a.to("cpu").sum()

    x = rand(5)
    compiled = tfl.compile(f, x)
    devices = {n.spec.device for n in compiled.graph.nodes}
    assert devices == {"cpu", "gpu"}
    np.testing.assert_allclose(compiled(x).numpy(), (x * 2.0).exp().sum().numpy(), rtol=1e-5)


# --- The stepper --------------------------------------------------------------------------------


def test_the_stepper_fills_each_node_by_its_device_with_a_legend() -> None:
    compiled = tfl.compile(two_branches, rand(4, 4), rand(4, 4))
    data = compilation_data(compiled, compiled.example_inputs)
    assert data["devices"] == ["cpu", "cpu:1"]
    copies = [e for e in data["nodes"] if e.get("transfer")]
    assert {tuple(e["transfer"]) for e in copies} == {("cpu", "cpu:1"), ("cpu:1", "cpu")}
    assert all(e.get("device", "cpu") == e["transfer"][1] for e in copies)  # the receiver's
    last = expand_stage(data, len(data["stages"]) - 1)
    assert last["stats"]["bytes_transferred"] > 0
    picture = graph_svg(last)
    assert picture.count(f'fill="{device_fill("cpu:1")}"') == 1 + sum(  # (and its swatch)
        n["device"] == "cpu:1" for n in last["nodes"])
    assert "⇢ cpu → cpu:1" in picture and ">cpu:1</text>" in picture  # and the legend
    one = tfl.compile(lambda x: x.exp(), rand(3))
    assert compilation_data(one, one.example_inputs)["devices"] == []  # no legend needed


def test_device_fills_are_distinct_and_the_cpu_stays_plain() -> None:
    fills = [device_fill(d) for d in ("cpu", "cpu:1", "cpu:2", "cpu:3", "gpu")]
    assert fills[0] == "#ffffff" and len(set(fills)) == len(fills)


def test_a_graph_on_two_devices_is_saved_and_loaded_with_its_pieces(tmp_path) -> None:
    x, y = rand(4, 4), rand(4, 4)
    compiled = tfl.compile(two_branches, x, y)
    tfl.save(compiled, tmp_path / "two")
    loaded = tfl.load(tmp_path / "two")
    assert "copy" in {n.op.name for n in loaded.compilation.graph.nodes}  # (compiled again)
    np.testing.assert_allclose(loaded(x, y).numpy(), compiled(x, y).numpy(), rtol=1e-6)
    tfl.set_logical_devices("cpu", 1)
    with pytest.raises(tfl.SavedGraphError, match="no device 'cpu:1' here") as err:
        tfl.load(tmp_path / "two")
    assert "set_logical_devices('cpu', 2)" in str(err.value)


def test_arguments_on_two_devices_and_a_cond_under_a_pin() -> None:
    tfl.set_logical_devices("cpu", 3)
    x, y = rand(3, 3), rand(3, 3).to("cpu:1")

    def f(x, y):
        with tfl.device("cpu:2"):
            z = tfl.cond(x.sum() > -100.0, lambda a, b: a @ b, lambda a, b: a - b, x, y)
        return z.to("cpu:1") + y

    staged = tfl.function(f)
    for _ in range(2):
        out = staged(x, y)
    assert out.device == "cpu:1" == f(x, y).device
    np.testing.assert_allclose(out.numpy(), f(x, y).numpy(), rtol=1e-5)
    graph = staged.get_concrete_function(x, y).graph
    assert {n.spec.device for n in graph.nodes if n.op.name == "cond"} == {"cpu:2"}


@pytest.mark.skipif(not hasattr(os, "fork"), reason="fork: POSIX only")
def test_a_forked_child_runs_the_pieces_on_workers_of_its_own() -> None:
    x = rand(3, 3)
    compiled = tfl.compile(two_branches, x, x)
    expected = compiled(x, x).numpy()  # (the parent's worker for cpu:1 exists now)
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its worker threads did not come along
        os.write(write, compiled(x, x).numpy().tobytes())
        os._exit(0)
    os.close(write)
    answered = select.select([read], [], [], 60)[0]  # (a child left without workers hangs)
    if not answered:
        os.kill(pid, signal.SIGKILL)
    os.waitpid(pid, 0)
    assert answered, "the child's call never returned"
    got = np.frombuffer(os.read(read, expected.nbytes), dtype=expected.dtype)
    np.testing.assert_array_equal(got.reshape(expected.shape), expected)


def test_a_cond_whose_branches_move_its_operand_is_cut_inside_its_branches() -> None:
    def f(x):
        y = x * 2
        return tfl.cond(x.sum() > 0, lambda a: a.to("cpu:1") * 2, lambda a: a.to("cpu:1") - 1, y)

    x = rand(3)
    compiled = tfl.compile(f, x)  # (verified: every stage well formed and computing the same)
    cond = next(n for n in compiled.graph.nodes if n.op.name == "cond")
    assert cond.spec.device == "cpu:1" and cond.inputs[1].spec.device == "cpu"
    for branch in ("true_fn", "false_fn"):
        assert cond.params[branch].nodes[0].op.name == "copy"
    out = compiled(x)
    assert out.device == "cpu:1"
    np.testing.assert_allclose(out.numpy(), f(x).numpy(), rtol=1e-6)


def test_a_piece_computes_what_it_can_before_it_waits_for_another() -> None:
    def late(x, y):  # the transfer back is traced before the CPU's own branch
        with tfl.device("cpu:1"):
            a = x @ x
        return a.to("cpu") + y @ y

    compiled = tfl.compile(late, rand(4, 4), rand(4, 4))
    piece = compiled.source.split("def late_on_cpu(")[1].split("\ndef ")[0]
    assert piece.index("matmul(y, y)") < piece.index("mail.take(")
    np.testing.assert_allclose(compiled(rand(4, 4), rand(4, 4)).numpy(),
                               late(rand(4, 4), rand(4, 4)).numpy(), rtol=1e-5)


def _pinned_callers() -> dict:
    """Functions that, under a pin, call a graph function or a ``cond`` whose graphs read a
    tensor from another device (W, captured on cpu)."""
    w = rand(3)

    @tfl.function
    def layer(x):
        return (x * w).tanh() * x

    def calls(x):
        with tfl.device("cpu:1"):
            a = layer(x)
        return (a.to("cpu") * x).sum()

    def branches(x):
        with tfl.device("cpu:1"):
            a = tfl.cond(x.sum() > -100.0, lambda a: (a * w).tanh(), lambda a: a - w, x)
        return (a.to("cpu") * x).sum()

    return {"calls": calls, "branches": branches}


@pytest.mark.parametrize("name", ["calls", "branches"])
@pytest.mark.parametrize("passes", ["default", [p for p in DEFAULT_PIPELINE if p != "inline"]],
                         ids=["inlined", "kept"])
def test_a_node_owning_graphs_under_a_pin_reads_a_tensor_from_another_device(name, passes):
    """The node's operands stay where they live (the graph it owns was traced on them so) and
    the graph moves what it reads inside: values and gradients as eagerly."""
    f = _pinned_callers()[name]
    x = rand(3)
    staged = tfl.function(f, passes=passes)
    np.testing.assert_allclose(staged(x).numpy(), f(x).numpy(), rtol=1e-6)
    np.testing.assert_allclose(tfl.function(tfl.grad(f), passes=passes)(x).numpy(),
                               tfl.grad(f)(x).numpy(), rtol=1e-5)
    traced = tfl.trace(f, x)
    (node,) = [n for n in traced.nodes if n.op.name in ("call", "cond")]
    assert node.spec.device == "cpu:1"
    assert [v.spec.device for v in node.inputs if getattr(v, "kind", None) == "capture"] \
        == ["cpu"]  # w, read where it lives


def test_a_graph_given_an_operand_on_another_device_says_which() -> None:
    from teachflow.execution.control.control_op import check_inputs
    from teachflow.ops.op import RuleError

    graph = tfl.trace(lambda x: x * 2, rand(3))
    with pytest.raises(RuleError, match=r"is f32\[3\] on cpu, the node gives f32\[3\] on cpu:1"):
        check_inputs(graph, [tfl.TensorSpec((3,), "float32", "cpu:1")], "@f")
