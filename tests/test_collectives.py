"""The all-reduce as an op, and the bucketing pass, without starting processes (issue 31).

A world of one (``tfl.distributed.init(world_size=1)``) needs no engine: the all-reduce of one
array is the array, so the op, its rules, the passes around it and a data-parallel step's graph
are all checked here in this process; tests/test_distributed.py runs real jobs."""

from __future__ import annotations

import itertools
import subprocess
import sys
from collections.abc import Iterator

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core import collectives
from teachflow.passes import DEFAULT_PIPELINE, bucket_all_reduce
from teachflow.passes.bucket_all_reduce import buckets
from teachflow.viz.stepper_data import compilation_data

F = tfl.nn.functional


@pytest.fixture
def world_of_one() -> Iterator[None]:
    tfl.distributed.init(world_size=1)
    try:
        yield
    finally:
        tfl.distributed.shutdown()


def ops_of(graph: tfl.Graph) -> list[str]:
    return [n.op.name for n in graph.nodes]


# --- The op -------------------------------------------------------------------------------------


def test_without_a_job_a_collective_says_how_to_join_one() -> None:
    assert not tfl.distributed.is_initialized()
    with pytest.raises(tfl.TeachflowError, match="joined no job") as err:
        tfl.distributed.all_reduce(tfl.ones(3))
    assert "launch" in err.value.hint and "test_collectives.py" in str(err.value)
    with pytest.raises(tfl.TeachflowError, match="joined no job"):
        tfl.distributed.rank()
    with pytest.raises(tfl.TeachflowError, match="joined no job"):
        tfl.nn.parallel.DistributedDataParallel(tfl.nn.Linear(2, 2))


def test_init_without_the_environment_says_what_is_missing(monkeypatch) -> None:
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    with pytest.raises(tfl.TeachflowError, match="WORLD_SIZE is not set") as err:
        tfl.distributed.init()
    assert "torchrun" in err.value.hint


def test_in_a_world_of_one_each_reduction_is_the_tensor_itself(world_of_one) -> None:
    x = tfl.tensor([[1.0, -2.0], [3.0, 4.5]])
    assert (tfl.distributed.rank(), tfl.distributed.world_size()) == (0, 1)
    for op in ("sum", "mean", "max", "min"):
        y = tfl.distributed.all_reduce(x, op)
        np.testing.assert_array_equal(y.numpy(), x.numpy())
        assert y.numpy() is not x.numpy()  # a new tensor: x is left as it is


def test_a_bad_reduction_or_a_mean_of_integers_is_refused(world_of_one) -> None:
    with pytest.raises(tfl.ShapeError, match="'prod' is not a reduction"):
        tfl.distributed.all_reduce(tfl.ones(2), "prod")
    with pytest.raises(tfl.DTypeError, match="mean of int64"):
        tfl.distributed.all_reduce(tfl.tensor([1, 2]), "mean")


def test_the_gradient_of_an_all_reduce_is_an_all_reduce_of_the_cotangent(world_of_one) -> None:
    x = tfl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    (tfl.distributed.all_reduce(x, "mean") * tfl.tensor([1.0, 2.0, 3.0])).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [1.0, 2.0, 3.0])
    graph = tfl.compile(tfl.grad(lambda x: tfl.distributed.all_reduce(x * x).sum()),
                        tfl.ones(3)).snapshots[0].graph
    assert ops_of(graph).count("all_reduce") == 2  # forward, and backward's of the cotangent
    with pytest.raises(tfl.AutodiffError, match="only sum and mean are linear"):
        tfl.distributed.all_reduce(x, "max").sum().backward()


def test_its_tangent_and_its_batching_rule(world_of_one) -> None:
    x, dx = tfl.tensor([1.0, 2.0]), tfl.tensor([0.5, 0.25])
    _, dy = tfl.jvp(lambda x: tfl.distributed.all_reduce(x, "sum") * 3.0, (x,), (dx,))
    np.testing.assert_allclose(dy.numpy(), [1.5, 0.75])
    batch = tfl.tensor(np.arange(6.0).reshape(3, 2))
    out = tfl.vmap(lambda row: tfl.distributed.all_reduce(row, "sum"))(batch)
    np.testing.assert_array_equal(out.numpy(), batch.numpy())


# --- Passes never fold, merge or drop a collective -----------------------------------------------


def test_no_pass_folds_merges_or_drops_an_all_reduce(world_of_one) -> None:
    def f(x):
        c = tfl.distributed.all_reduce(tfl.ones(3) * 2.0)  # constant operands: not folded
        a = tfl.distributed.all_reduce(x)
        b = tfl.distributed.all_reduce(x)  # the same op on the same operand: not merged
        tfl.distributed.all_reduce(x * 3.0)  # nothing reads it: still run
        return a + b + c

    compiled = tfl.compile(f, tfl.tensor([1.0, 2.0, 3.0]), passes=["constant_fold", "cse",
                                                                   "dce"])
    assert ops_of(compiled.graph).count("all_reduce") == 4
    np.testing.assert_allclose(compiled(tfl.tensor([1.0, 2.0, 3.0])).numpy(), [4.0, 6.0, 8.0])


# --- A data-parallel step, staged, and the bucketing pass ---------------------------------------


def ddp_step(bucket_mb: float = 25, sizes: tuple = (8, 16, 16, 3)):
    tfl.manual_seed(0)
    layers = []
    for a, b in itertools.pairwise(sizes):
        layers += [tfl.nn.Linear(a, b), tfl.nn.ReLU()]
    model = tfl.nn.parallel.DistributedDataParallel(tfl.nn.Sequential(*layers[:-1]),
                                                    bucket_mb=bucket_mb)
    opt = tfl.optim.SGD(model.parameters(), lr=0.1)

    def step(x, y):
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        opt.step()
        return loss

    return model, step


def data(n: int = 16) -> tuple[tfl.Tensor, tfl.Tensor]:
    rng = np.random.default_rng(1)
    return (tfl.tensor(rng.standard_normal((n, 8)).astype(np.float32)),
            tfl.tensor(rng.integers(0, 3, n)))


def test_a_staged_ddp_step_all_reduces_each_gradient_as_it_is_made(world_of_one) -> None:
    model, step = ddp_step()
    graph = tfl.compile(step, *data()).snapshots[0].graph
    reduces = [n for n in graph.nodes if n.op.name == "all_reduce"]
    assert len(reduces) == len(list(model.parameters())) == 6
    assert all(n.params["reduction"] == "mean" for n in reduces)
    # Each stands right after its gradient is made, before the next layer's backward: not all
    # at the end of the backward pass.
    place = {n: k for k, n in enumerate(graph.nodes)}
    between = ops_of(graph)[place[reduces[0]]:place[reduces[-1]]]
    assert between.count("matmul") >= 3  # the backward pass goes on between them
    for node in reduces:
        assert place[node] == place[node.inputs[0].producer] + 1


def test_the_pass_merges_small_all_reduces_into_buckets_in_order(world_of_one) -> None:
    _, step = ddp_step(bucket_mb=0.001)  # 1,048 bytes: a 16x16 weight (1,024) fills one
    compiled = tfl.compile(step, *data())
    stage = next(s for s in compiled.snapshots if s.pass_name == "bucket_all_reduce")
    before = compiled.snapshots[[s.pass_name for s in compiled.snapshots].index(
        "bucket_all_reduce") - 1].graph
    grouped = [[n.inputs[0].spec.shape for n in b] for b in buckets(before.nodes)]
    assert grouped == [[(3,), (3, 16), (16,)], [(16, 16)], [(16,), (16, 8)]]
    assert [c.kind for c in stage.changes] == ["bucketed", "bucketed"]
    assert all("become one" in c.sentence for c in stage.changes)
    assert all(f"%{i}" in c.sentence for c in stage.changes for i in c.nodes)
    assert ops_of(stage.graph).count("all_reduce") == 3
    assert ops_of(stage.graph).count("concatenate") == 2
    one = ops_of(bucket_all_reduce(before, bucket_mb=25)[0])
    assert one.count("all_reduce") == 1  # everything fits in one bucket of 25 MB


def test_bucketing_changes_no_value(world_of_one) -> None:
    x, y = data()
    results = []
    for passes in (["bucket_all_reduce"], []):
        model, step = ddp_step(bucket_mb=0.001)
        compiled = tfl.compile(step, x, y, passes=passes)
        losses = [compiled(x, y).item() for _ in range(3)]
        results.append((losses, [p.numpy() for p in model.parameters()]))
    (losses_a, params_a), (losses_b, params_b) = results
    np.testing.assert_allclose(losses_a, losses_b, rtol=1e-6)
    for a, b in zip(params_a, params_b, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-7)


def test_the_stepper_shows_a_bucket_as_a_change_of_its_own(world_of_one) -> None:
    _, step = ddp_step(bucket_mb=0.001)
    compiled = tfl.compile(step, *data())
    stages = {s["pass"]: s for s in compilation_data(compiled)["stages"]}
    stage = stages["bucket_all_reduce"]
    assert [c["kind"] for c in stage["changes"]] == ["bucketed", "bucketed"]
    assert "bucketed" in DEFAULT_PIPELINE or "bucket_all_reduce" in DEFAULT_PIPELINE
    from pathlib import Path

    widgets = Path(tfl.__file__).parent.parent / "widgets"
    assert "bucketed" in (widgets / "stepper.css").read_text("utf-8")
    assert "bucketed" in (widgets / "stepper" / "common.js").read_text("utf-8")


# --- Saved graphs and ONNX ----------------------------------------------------------------------


def reduce_twice(x):
    return tfl.distributed.all_reduce(x * 2.0, "mean") + 1.0


def test_a_saved_graph_keeps_the_all_reduce_and_its_reduction(world_of_one, tmp_path) -> None:
    x = tfl.tensor([1.0, 2.0])
    tfl.save(tfl.compile(reduce_twice, x), tmp_path / "f")
    loaded = tfl.load(tmp_path / "f")
    text = str(loaded.graph)
    assert "all_reduce" in text and "reduction='mean'" in text
    np.testing.assert_allclose(loaded(x).numpy(), [3.0, 5.0])


def test_onnx_export_refuses_an_all_reduce(world_of_one, tmp_path) -> None:
    pytest.importorskip("onnx")
    with pytest.raises(tfl.TeachflowError, match=r"all_reduce.*cannot be exported.*other "
                                                 r"processes"):
        tfl.export_onnx(tfl.compile(reduce_twice, tfl.ones(2)), tmp_path / "f.onnx")


def test_import_teachflow_does_not_load_torch() -> None:
    code = "import sys, teachflow; print('torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_joining_twice_is_refused(world_of_one) -> None:
    with pytest.raises(tfl.TeachflowError, match="joined a job already"):
        collectives.join(0, 1)


def test_without_the_extra_a_job_of_several_says_how_to_install_it(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # (import torch now raises ImportError)
    monkeypatch.setitem(sys.modules, "torch.distributed", None)
    with pytest.raises(tfl.TeachflowError, match="torch is not installed") as err:
        collectives.join(0, 2, port=1)
    assert err.value.hint == 'pip install "teachflow[distributed]"'
    assert not collectives.joined()
    monkeypatch.setitem(sys.modules, "cloudpickle", None)
    with pytest.raises(tfl.TeachflowError, match="cloudpickle, which is not installed"):
        tfl.distributed.launch(print, 2)


class HalfUsed(tfl.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.used, self.unused = tfl.nn.Linear(2, 2), tfl.nn.Linear(2, 2)

    def forward(self, x):
        return self.used(x)


def test_eager_ddp_averages_in_buckets_and_names_parameters_left_without_a_gradient(
        world_of_one) -> None:
    tfl.manual_seed(0)
    plain = tfl.nn.Linear(3, 2)
    model = tfl.nn.parallel.DistributedDataParallel(tfl.nn.Linear(3, 2), bucket_mb=1e-5)
    model.module.load_state_dict(plain.state_dict())
    assert "buckets of" in repr(model) and len(model._buckets) == 2  # (24 and 8 bytes)
    x = tfl.tensor([[1.0, 2.0, 3.0]])
    model(x).sum().backward()
    plain(x).sum().backward()
    for p, q in zip(model.parameters(), plain.parameters(), strict=True):
        np.testing.assert_array_equal(p.grad.numpy(), q.grad.numpy())
    half = tfl.nn.parallel.DistributedDataParallel(HalfUsed())
    half(tfl.ones(1, 2)).sum().backward()
    with pytest.raises(tfl.AutodiffError, match="gave no gradient to 2 parameter"):
        half(tfl.ones(1, 2))
