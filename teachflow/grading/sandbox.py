"""The worker's walls: how a learner's code is started so that it can harm nothing but itself.

A submission's code runs in a *worker* process (`teachflow.grading.worker`), started here in
one of three ways, the strongest this machine allows (`find_isolation` tries them in order):

``bubblewrap``
    Debian's ``bwrap`` gives the worker its own mount, PID, network, IPC and UTS namespaces:
    a root of its own that shows only the Python interpreter, its installed packages and
    teachflow's own folder (read-only), an empty 64 MB ``/tmp`` to work in, and no network.
    The grading bundle, the other submissions and the results are simply not there. Run by
    root, the worker also drops to a user id of its own (one per grading slot) before any
    learner code runs, so the limit on processes counts its processes alone.
``user``
    Root without bubblewrap: the worker gets a network namespace of its own (none to reach
    the network with) and its own unprivileged user id, in a scratch folder only it can use.
    Files readable by every user stay readable, so grading refuses a bundle or submission
    that others may read.
``none``
    Only limits and a stripped environment: for a machine where neither works, and only
    when asked (``--no-isolation``), after a loud warning.

``teachflow check`` starts its worker a fourth way, ``local``: the learner's own code, as the
learner, in the notebook's folder and environment, under the same limits as when graded.

In every mode the worker is the leader of its own process group (killed whole, by
`WorkerProcess.kill`), its environment holds a few fixed variables and nothing of the grader's, and
before learner code runs it sets hard limits on CPU time, address space, processes and file
size (`Limits`), which it cannot raise again.
"""

from __future__ import annotations

import ast
import contextlib
import ctypes
import functools
import os
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import teachflow
from teachflow.core.errors import GradingError

ISOLATIONS = ("bubblewrap", "user", "none")
UID_BASE = 1_000_000_000  # worker user ids: UID_BASE + the grading process's pid
TMP_BYTES = 64 << 20

ENVIRONMENT = {
    "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8",
    "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
    "MPLBACKEND": "Agg", "MPLCONFIGDIR": "/tmp/matplotlib", "PYTHONDONTWRITEBYTECODE": "1",
}


@dataclass(frozen=True)
class Limits:
    """The worker's resource limits, set by the worker on itself before learner code runs."""

    timeout: float = 30.0     # seconds of wall time for each cell and each test's calls
    memory_mb: int = 2048     # address space
    processes: int = 64       # processes and threads the worker may start (see below)
    file_mb: int = 64         # the largest file it may write
    total: float | None = None  # seconds for all of a submission's cells and calls

    @property
    def budget(self) -> float:
        """Seconds for the whole submission: `total`, or ten deadlines (at least 5 minutes)."""
        return self.total if self.total is not None else max(300.0, 10 * self.timeout)

    def arguments(self, uid: int | None, local: bool = False) -> list[str]:
        cpu = int(max(60.0, 20 * self.timeout))  # a backstop: wall-clock deadlines come first
        # The kernel counts a limit on processes over all of a user's processes: a worker that
        # keeps a grader's (non-root) user id may start `processes` more than it has now. A
        # learner's own check leaves their processes alone (-1: no limit).
        processes = -1 if local else self.processes + (
            _tasks_of(os.getuid()) if uid is None and os.geteuid() != 0 else 0)
        arguments = ["--cpu", str(cpu), "--memory", str(self.memory_mb << 20),
                     "--processes", str(processes), "--file-size", str(self.file_mb << 20)]
        return arguments + (["--uid", str(uid)] if uid is not None else [])


def _tasks_of(uid: int) -> int:
    """How many processes and threads `uid` runs now (what RLIMIT_NPROC counts)."""
    count = 0
    for process in Path("/proc").glob("[0-9]*"):
        try:
            if process.stat().st_uid == uid:
                count += sum(1 for _ in (process / "task").iterdir())
        except OSError:  # gone while we looked
            continue
    return count


def worker_uid() -> int | None:
    """The user id this grading process gives its workers (None: not root, keep ours)."""
    return UID_BASE + os.getpid() if os.geteuid() == 0 else None


# -- what the worker may see ---------------------------------------------------------------------


def package_root() -> Path:
    """The folder teachflow is imported from (its parent): the worker imports it from there."""
    return Path(teachflow.__file__).resolve().parent.parent


@functools.cache
def visible_paths() -> tuple[Path, ...]:
    """The folders a bubblewrapped worker sees: the interpreter's, its packages', teachflow's.

    They are the folders on the import path of ``python -I`` (no current folder, no
    PYTHONPATH), as the worker starts; a source tree teachflow is installed from in
    editable mode shows its ``teachflow/`` and ``widgets/`` folders alone, not the
    repository around them."""
    package = Path(teachflow.__file__).resolve().parent
    found = subprocess.run([sys.executable, "-I", "-c", "import sys; print(repr(sys.path))"],
                           capture_output=True, text=True, check=True, env=ENVIRONMENT)
    prefixes = {Path(sys.base_prefix).resolve(), Path(sys.prefix).resolve()}
    paths = {*prefixes, package}
    checkout_widgets = package.parent / "widgets"  # a checkout's front-end files (the stepper)
    if checkout_widgets.is_dir():
        paths.add(checkout_widgets)
    for entry in ast.literal_eval(found.stdout):
        path = Path(entry).resolve()
        source_tree = package.parent == path and not any(path.is_relative_to(p)
                                                         for p in prefixes)
        if path.is_dir() and not source_tree:
            paths.add(path)
    roots: list[Path] = []
    for path in sorted(paths, key=lambda p: len(p.parts)):
        if not any(path.is_relative_to(root) for root in roots) and str(path) != "/":
            roots.append(path)
    return tuple(roots)


def _bubblewrap(executable: str, uid: int | None) -> list[str]:
    command = [executable, "--unshare-ipc", "--unshare-pid", "--unshare-net", "--unshare-uts",
               "--unshare-cgroup-try", "--die-with-parent", "--new-session", "--clearenv"]
    if uid is not None:  # root: no user namespace, so the worker may drop to its own uid
        command += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        command += ["--unshare-user"]
    # /tmp first: a tmpfs mounted after the binds would hide those under /tmp (a checkout there)
    command += ["--size", str(TMP_BYTES), "--perms", "1777", "--tmpfs", "/tmp",
                "--ro-bind", "/usr", "/usr"]
    for name in ("bin", "lib", "lib32", "lib64", "sbin"):
        target = Path("/", name)
        if target.is_symlink():
            command += ["--symlink", os.readlink(target), str(target)]
        elif target.is_dir():
            command += ["--ro-bind", str(target), str(target)]
    made = {Path("/"), Path("/usr"), Path("/tmp")}
    for path in visible_paths():
        for parent in reversed(path.parents):  # bwrap would make them 0700: the worker's
            if parent not in made:               # user could not walk through them
                command += ["--perms", "0755", "--dir", str(parent)]
                made.add(parent)
        command += ["--ro-bind", str(path), str(path)]
        made.add(path)
    command += ["--proc", "/proc", "--dev", "/dev", "--chdir", "/tmp"]
    for name, value in ENVIRONMENT.items():
        command += ["--setenv", name, value]
    return command


def _python(limits: Limits, uid: int | None, probe: bool = False,
            local: bool = False) -> list[str]:
    start = (f"import sys; sys.path.insert(0, {str(package_root())!r}); "
             "from teachflow.grading.worker import main; main()")
    isolated = [] if local else ["-I"]  # (a learner's check imports what their kernel would)
    return [sys.executable, *isolated, "-c", start, *limits.arguments(uid, local),
            *(["--probe"] if probe else [])]


# -- starting and stopping ------------------------------------------------------------------------


def _no_network() -> None:
    """In the child, before exec (as root): a network namespace of its own, with no way out."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.unshare(0x40000000) != 0:  # CLONE_NEWNET
        os.write(2, b"teachflow worker: cannot make a network namespace\n")
        os._exit(70)


@dataclass
class WorkerProcess:
    """A started worker: its process, its pipes, and how to stop all it started."""

    process: subprocess.Popen[bytes]
    isolation: str
    uid: int | None
    scratch: Path | None
    limits: Limits

    def death(self, what: str) -> str:
        """Why the worker's pipe closed while it did `what`, in words."""
        try:
            status = self.process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            return f"{what} closed the worker's connection to the grader"
        if self.isolation == "bubblewrap" and status > 128:
            status = -(status - 128)  # bwrap reports a signal as 128 + its number
        if status >= 0:
            return (f"{what} ended the worker process (exit status {status}): code must not "
                    f"exit (os._exit, sys.exit at the top level of a process)")
        signals = {signal.SIGXCPU: "used more than its CPU time",
                   signal.SIGXFSZ: f"wrote a file larger than {self.limits.file_mb} MB",
                   signal.SIGKILL: "was killed (out of memory?)",
                   signal.SIGSEGV: "crashed (segmentation fault)"}
        why = signals.get(-status, f"was killed by signal {-status}")
        return f"{what} {why}; limits: {self.limits.memory_mb} MB of memory"

    def kill(self) -> None:
        """Stop the worker and every process it started, whatever state they are in."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.process.pid, signal.SIGKILL)
        if self.isolation == "user" and self.uid is not None:
            _kill_user(self.uid)  # children that left the process group
        with contextlib.suppress(subprocess.TimeoutExpired):  # a kernel that will not reap
            self.process.wait(timeout=10)
        for stream in (self.process.stdin, self.process.stdout):
            if stream is not None:
                stream.close()
        if self.scratch is not None:
            shutil.rmtree(self.scratch, ignore_errors=True)
            self.scratch = None


def _kill_user(uid: int) -> None:
    """Kill every process of `uid` (a worker's own user id): fork, become it, kill(-1)."""
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        try:
            os.setgid(uid)
            os.setuid(uid)
            os.kill(-1, signal.SIGKILL)
        finally:
            os._exit(0)
    os.waitpid(pid, 0)


def start(isolation: str, limits: Limits, probe: bool = False,
          cwd: str | None = None) -> WorkerProcess:
    """Start a worker under `isolation` (one of `ISOLATIONS`, or ``local`` in folder `cwd`);
    its stdin and stdout are the pipes of `teachflow.grading.wire`, its stderr is thrown
    away."""
    uid = worker_uid()
    scratch = None
    preexec = None
    if isolation == "local":
        command = _python(limits, None, probe, local=True)
        env = dict(os.environ, MPLBACKEND="Agg", PYTHONDONTWRITEBYTECODE="1")
        process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL, cwd=cwd, env=env,
                                   start_new_session=True)
        return WorkerProcess(process, isolation, None, None, limits)
    if isolation == "bubblewrap":
        command = _bubblewrap(shutil.which("bwrap") or "bwrap", uid) + _python(limits, uid, probe)
        cwd, env = "/", None
    else:
        scratch = Path(tempfile.mkdtemp(prefix="teachflow-worker-"))
        if isolation == "user":
            os.chown(scratch, uid or 0, uid or 0)
            preexec = _no_network
        else:
            uid = None
        command, cwd = _python(limits, uid if isolation == "user" else None, probe), scratch
        env = dict(ENVIRONMENT, HOME=str(scratch), MPLCONFIGDIR=str(scratch / "matplotlib"))
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                               stderr=subprocess.DEVNULL, cwd=cwd, env=env,
                               start_new_session=True, preexec_fn=preexec)
    return WorkerProcess(process, isolation, uid, scratch, limits)


def works(isolation: str) -> tuple[bool, str]:
    """Can a worker start under `isolation` here? (and, when not, why not)."""
    if isolation == "bubblewrap" and shutil.which("bwrap") is None:
        return False, "bubblewrap is not installed (Debian: apt-get install bubblewrap)"
    if isolation == "user" and os.geteuid() != 0:
        return False, "switching to another user needs root"
    worker = start(isolation, Limits(timeout=30), probe=True)
    try:
        out, _ = worker.process.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        out = b""
    finally:
        worker.kill()
    if worker.process.returncode == 0 and out.strip() == b"ok":
        return True, ""
    reason = out.decode(errors="replace").strip()[-300:] or \
        f"exit status {worker.process.returncode}"
    return False, f"a worker under {isolation} did not start ({reason})"


def find_isolation(allow_none: bool) -> tuple[str, list[str]]:
    """The strongest isolation that works here, and why each stronger one did not."""
    reasons = []
    for isolation in ISOLATIONS[:-1]:
        ok, why = works(isolation)
        if ok:
            return isolation, reasons
        reasons.append(why)
    if allow_none:
        return "none", reasons
    raise GradingError(
        "cannot isolate learners' code on this machine: " + "; ".join(reasons), op="grade",
        hint="install bubblewrap (Debian: apt-get install bubblewrap) or grade as root; "
             "--no-isolation grades without walls, only for code you trust")


def readable_by_others(path: Path) -> bool:
    """May a user other than its owner (and not in its group) read `path`?"""
    path = path.resolve()
    for folder in path.parents:
        if not folder.stat().st_mode & stat.S_IXOTH:
            return False
    return bool(path.stat().st_mode & stat.S_IROTH)
