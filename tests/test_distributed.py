"""Real jobs of two processes on this machine, over gloo on the loopback interface (issue 31).

Few and short: each job is bounded by its `timeout` (a failure that hangs is itself a test), and
a job's processes are always ended. A process takes a few seconds to start (importing torch), so
one job checks several things where it can."""

from __future__ import annotations

import os
import time

import numpy as np
import pytest

import teachflow as tfl

pytest.importorskip("torch", reason="collectives run on torch.distributed: the distributed extra")
pytest.importorskip("cloudpickle", reason="launch sends functions with cloudpickle")

F = tfl.nn.functional
TIMEOUT = 90


def reductions() -> dict:
    r = tfl.distributed.rank()
    x = tfl.tensor([1.0, -2.0, 3.0]) * (r + 1)
    return {"rank": r, "size": tfl.distributed.world_size(),
            "threads": os.environ["OMP_NUM_THREADS"],
            **{op: tfl.distributed.all_reduce(x, op).numpy() for op in ("sum", "mean", "max",
                                                                         "min")}}


def test_launch_returns_every_rank_s_result_in_rank_order() -> None:
    first, second = tfl.distributed.launch(reductions, 2, timeout=TIMEOUT)
    assert (first["rank"], second["rank"]) == (0, 1) and first["size"] == 2
    assert first["threads"] == "1"
    for result in (first, second):
        np.testing.assert_array_equal(result["sum"], [3.0, -6.0, 9.0])
        np.testing.assert_array_equal(result["mean"], [1.5, -3.0, 4.5])
        np.testing.assert_array_equal(result["max"], [2.0, -2.0, 6.0])
        np.testing.assert_array_equal(result["min"], [1.0, -4.0, 3.0])


def raises_on_rank_1() -> None:
    if tfl.distributed.rank() == 1:
        raise ValueError("rank 1 cannot go on")
    tfl.distributed.all_reduce(tfl.ones(2))  # (rank 0 waits for rank 1 here)


def dies_on_rank_1() -> None:
    if tfl.distributed.rank() == 1:
        os._exit(7)
    tfl.distributed.all_reduce(tfl.ones(2))


def hangs_on_rank_1() -> None:
    if tfl.distributed.rank() == 1:
        time.sleep(600)
    tfl.distributed.all_reduce(tfl.ones(2))


@pytest.mark.parametrize(("fn", "timeout", "words"), [
    (raises_on_rank_1, TIMEOUT, r"rank 1 raised(.|\n)*ValueError: rank 1 cannot go on"),
    (dies_on_rank_1, TIMEOUT, "rank 1 died: it exited with code 7"),
    (hangs_on_rank_1, 5, r"ran out of time: rank\(s\) 0, 1 had not finished after 5 s"),
])
def test_a_rank_that_fails_ends_the_job_with_its_rank_and_why(fn, timeout, words) -> None:
    start = time.monotonic()
    with pytest.raises(tfl.distributed.CollectiveError, match=words):
        tfl.distributed.launch(fn, 2, timeout=timeout)
    assert time.monotonic() - start < timeout + 10  # (the processes ended: nothing waited for)


def train_both(steps: int = 3) -> dict:
    """Eager and staged training, one after the other, in one job (a job is slow to start)."""
    return {staged: train(staged, steps) for staged in (False, True)}


def train(staged: bool, steps: int = 3, batch: int = 32) -> list[list[np.ndarray]]:
    """A few SGD steps of a small MLP, each rank on its share of one batch; the parameters
    after each step."""
    r, n = tfl.distributed.rank(), tfl.distributed.world_size()
    rng = np.random.default_rng(0)
    x = rng.standard_normal((batch, 8)).astype(np.float32)
    y = rng.integers(0, 3, batch)
    tfl.manual_seed(10 + r)  # each rank starts elsewhere: DDP broadcasts rank 0's parameters
    model = tfl.nn.Sequential(tfl.nn.Linear(8, 16), tfl.nn.ReLU(), tfl.nn.Linear(16, 3))
    ddp = tfl.nn.parallel.DistributedDataParallel(model, bucket_mb=0.0005)
    opt = tfl.optim.SGD(ddp.parameters(), lr=0.5)
    share = slice(r * batch // n, (r + 1) * batch // n)
    xs, ys = tfl.tensor(x[share]), tfl.tensor(y[share])

    def step(xb, yb):
        opt.zero_grad()
        loss = F.cross_entropy(ddp(xb), yb)
        loss.backward()
        opt.step()
        return loss

    step = tfl.function(step) if staged else step
    after = []
    for _ in range(steps):
        step(xs, ys)
        after.append([p.numpy().copy() for p in model.parameters()])
    return after


def test_two_ranks_on_half_batches_take_one_process_s_steps_eager_and_staged() -> None:
    (rank0, rank1), (alone,) = [tfl.distributed.launch(train_both, n, timeout=TIMEOUT)
                                for n in (2, 1)]
    for staged in (False, True):
        for two, one, other in zip(rank0[staged], alone[staged], rank1[staged],
                                   strict=True):  # step by step
            for p, q, s in zip(two, one, other, strict=True):
                np.testing.assert_array_equal(p, s)  # the ranks agree exactly
                np.testing.assert_allclose(p, q, rtol=1e-5, atol=1e-6)
        assert not np.allclose(rank0[staged][0][0], rank0[staged][-1][0])  # (they did move)


JOB = """\
import teachflow as tfl
tfl.distributed.init()  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT: set by torchrun
r = tfl.distributed.rank()
total = tfl.distributed.all_reduce(tfl.tensor([float(r + 1), 10.0]), op="sum")
print(f"rank {r} of {tfl.distributed.world_size()}: {total.numpy().tolist()}", flush=True)
tfl.distributed.shutdown()
"""


def test_a_script_that_calls_init_runs_under_torchrun(tmp_path) -> None:
    """`init()` joins the job torchrun describes in the environment: the same script runs on
    many machines. Here torchrun starts two ranks on this one, every socket on 127.0.0.1."""
    import shutil
    import socket
    import subprocess
    import sys

    torchrun = shutil.which("torchrun", path=os.path.dirname(sys.executable))
    if torchrun is None:
        pytest.skip("torchrun is not beside this Python")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (tmp_path / "job.py").write_text(JOB)
    env = {**os.environ, "GLOO_SOCKET_IFNAME": "lo", "OMP_NUM_THREADS": "1"}
    done = subprocess.run([torchrun, "--nnodes=1", "--nproc-per-node=2", "--master-addr=127.0.0.1",
                           f"--master-port={port}", "job.py"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=TIMEOUT)
    assert done.returncode == 0, done.stderr[-2000:]
    lines = sorted(line for line in done.stdout.splitlines() if line.startswith("rank"))
    assert lines == ["rank 0 of 2: [3.0, 20.0]", "rank 1 of 2: [3.0, 20.0]"], done.stdout
