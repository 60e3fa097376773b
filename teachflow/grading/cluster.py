"""Grading on Dask: a class spread over this machine's cores, or over a department's cluster.

::

    teachflow grade submissions/ --bundle build/grading --out results --scheduler local:4
    teachflow grade submissions/ --bundle build/grading --out results --scheduler tcp://head:8786

``--jobs N`` grades in a pool of N processes of this machine (`teachflow.grading.grade`).
``--scheduler`` hands the same work to Dask distributed (the optional extra
``teachflow[dask]``): ``local:N`` starts a `LocalCluster` of N single-threaded worker
processes on 127.0.0.1, with no dashboard, and stops it at the end; ``tcp://HOST:PORT`` uses a
running Dask scheduler and its workers (``dask scheduler``, ``dask worker``, dask-jobqueue on
SLURM, dask-kubernetes), each of which needs teachflow and bubblewrap.

What runs where is what ``--jobs`` does, with the network in the middle:

- this process, the *client*, loads the bundle and reads each notebook's bytes;
- each submission is one Dask task, `judge_notebook`: on a worker, it writes the notebook into
  a folder of its own and judges it (`teachflow.grading.judge`), the learner's code in the
  sandbox the worker starts, the tests (hidden ones too) in the worker, outside the walls;
  it returns the `Judged`: plain data, scores and words;
- the client writes each result once, as it arrives. Workers write nothing of the class's.

A worker that dies while it grades (its machine lost, the kernel's out-of-memory killer) is
not the submission's fault: Dask runs the task again elsewhere. Dask counts such deaths per
task (the scheduler's ``allowed-failures``); the local cluster allows one, so a submission is
tried twice at most, and a second death leaves it "not graded", saying why. (A remote
scheduler keeps its own setting: Dask's default tries a task four times.)
"""

from __future__ import annotations

import contextlib
import functools
import gc
import re
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from teachflow.core.errors import GradingError
from teachflow.grading import sandbox
from teachflow.grading.bundle import Bundle
from teachflow.grading.judge import MAX_NOTEBOOK_BYTES, Judged, grade_submission, not_graded

INSTALL = 'pip install "teachflow[dask]"'
CONNECT_SECONDS = 10.0  # how long to try to reach a tcp:// scheduler
DEATHS = 1  # worker deaths a local cluster forgives each task: it is tried twice at most
_ONE_AT_A_TIME = threading.Lock()
FORMS = "local:N (N worker processes on this machine) or tcp://HOST:PORT (a Dask scheduler)"


def parse_scheduler(scheduler: str) -> tuple[str, Any]:
    """``("local", N)`` or ``("tcp", address)``; a `GradingError` for anything else, or
    when Dask is not installed."""
    local = re.fullmatch(r"local:(\d+)", scheduler.strip())
    remote = re.fullmatch(r"tcp://[^\s/:]+:\d+", scheduler.strip())
    if not (local and int(local.group(1)) >= 1) and not remote:
        raise GradingError(f"--scheduler {scheduler!r}: give {FORMS}", op="grade",
                           hint="e.g. --scheduler local:4")
    try:
        import distributed  # noqa: F401  (the extra: dask[distributed])
    except ImportError:
        raise GradingError("--scheduler needs Dask distributed, which is not installed",
                           op="grade", hint=INSTALL) from None
    return ("local", int(local.group(1))) if local else ("tcp", scheduler.strip())


def judge_notebook(name: str, data: bytes, bundle: Bundle, isolation: str,
                   limits: sandbox.Limits) -> Judged:
    """One Dask task, run by a worker: the notebook `data` (file name `name`) judged as
    ``--jobs`` judges it, from a folder only this worker's user may read. One at a time in a
    worker process, whatever its threads: a sandbox's user id is made from the process's id."""
    _freeze_once()
    with _ONE_AT_A_TIME, tempfile.TemporaryDirectory(prefix="teachflow-submission-") as folder:
        path = Path(folder) / name
        path.write_bytes(data)
        return grade_submission(path, bundle, isolation, limits)


@functools.cache
def _freeze_once() -> None:
    """Hide the worker's own objects (Dask's, teachflow's) from the garbage collector: pytest
    collects garbage whole after each test cell, and walking Dask's objects every time made a
    submission take twice as long in a Dask worker as in a process of the pool."""
    gc.freeze()


def graded_on_dask(paths: list[Path], bundle: Bundle, isolation: str, limits: sandbox.Limits,
                   scheduler: str) -> Iterator[tuple[Path, Judged]]:
    """(path, judged) as each submission finishes on the Dask cluster `scheduler`."""
    from distributed import as_completed
    from distributed.scheduler import KilledWorker

    kind, where = parse_scheduler(scheduler)
    contents = {path: _contents(path) for path in paths}
    sent = [path for path in paths if contents[path] is not None]
    with _client(kind, where) as client:
        if kind == "tcp":
            _check_workers(client, isolation)
        # (one call for the class: the scheduler sees a group of tasks and queues it)
        futures = dict(zip(client.map(judge_notebook, [p.name for p in sent],
                                      [contents[p] for p in sent], bundle=bundle,
                                      isolation=isolation, limits=limits, pure=False,
                                      retries=1), sent, strict=True))
        for path in paths:  # too large or unreadable: it fails here as it would there,
            if contents[path] is None:  # before any code runs
                yield path, grade_submission(path, bundle, isolation, limits)
        for future in as_completed(futures):
            path = futures[future]
            try:
                yield path, future.result()
            except KilledWorker as death:
                yield path, not_graded(bundle, f"each of the {death.allowed_failures + 1} "
                                               f"Dask workers that graded it died (out of "
                                               f"memory? a machine lost?); grade it again")
            except Exception as error:  # the grader's failure, not the learner's
                raise GradingError(f"a Dask worker could not grade {path.name}: "
                                   f"{type(error).__name__}: {error}", op="grade",
                                   hint="every worker needs teachflow (this version) and "
                                        "bubblewrap installed") from None


def _contents(path: Path) -> bytes | None:
    """The notebook's bytes to send to a worker; None when it is too large or unreadable."""
    try:
        return path.read_bytes() if path.stat().st_size <= MAX_NOTEBOOK_BYTES else None
    except OSError:
        return None


@contextlib.contextmanager
def _client(kind: str, where: Any) -> Iterator[Any]:
    """A Dask client: of a local cluster started (and stopped) here, or of a running one."""
    import dask
    from distributed import Client, LocalCluster

    if kind == "tcp":
        try:
            client = Client(where, timeout=CONNECT_SECONDS)
        except (OSError, TimeoutError) as error:
            raise GradingError(f"cannot reach the Dask scheduler at {where}: {error}",
                               op="grade", hint="start one (dask scheduler; dask worker "
                                                f"{where}) or give --scheduler local:N") from None
        with client:
            yield client
        return
    # One task per single-threaded worker at a time (saturation 1): a worker that dies takes
    # only the submission it was grading with it, never one that merely waited there.
    with dask.config.set({"distributed.scheduler.worker-saturation": 1.0}), \
            LocalCluster(n_workers=where, threads_per_worker=1, processes=True,
                         host="127.0.0.1", dashboard_address=None,
                         # (its web routes too, on a port of its own: none is fixed)
                         scheduler_kwargs={"allowed_failures": DEATHS,
                                           "dashboard_address": "127.0.0.1:0"}) as cluster, \
            Client(cluster) as client:
        yield client


def _check_workers(client: Any, isolation: str) -> None:
    """Refuse a cluster whose workers cannot wall learners' code in as this machine does, or
    would grade several submissions in one process."""
    try:
        answers = client.run(sandbox.works, isolation)
    except Exception as error:  # (a worker without teachflow cannot even unpickle the call)
        raise GradingError(f"the Dask workers cannot run teachflow: {error}", op="grade",
                           hint="install teachflow and bubblewrap on every worker") from None
    if not answers:
        raise GradingError("the Dask scheduler has no workers", op="grade",
                           hint="start some: dask worker tcp://HOST:PORT")
    threads = {address: worker["nthreads"]
               for address, worker in client.scheduler_info()["workers"].items()}
    if any(count > 1 for count in threads.values()):
        raise GradingError(f"Dask workers with more than one thread ({threads}): a worker "
                           f"grades one submission at a time", op="grade",
                           hint="start the workers with dask worker ... --nthreads 1")
    broken = {address: why for address, (ok, why) in answers.items() if not ok}
    if broken:
        raise GradingError(f"{len(broken)} Dask worker(s) cannot isolate learners' code "
                           f"under {isolation}: " + "; ".join(
                               f"{address}: {why}" for address, why in sorted(broken.items())),
                           op="grade", hint="install bubblewrap on every worker")
