"""The system's C compiler, driven from Python: find it, learn what it can do, build once.

A generated C kernel becomes machine code the way any C program does: ``cc`` compiles it into a
shared library, and Python loads the library with `ctypes` and calls its function with the
arrays' addresses. Three things make that practical:

- a cache: a library is stored under the SHA-256 of its source, the flags and the compiler, so
  a kernel is compiled once per machine, not once per run (`build`). A library is written under
  a name of its own and then renamed into place, so two processes building the same kernel never
  see half a file; each ends with the SHA-256 of its bytes, so a damaged one is built again. The
  cache keeps to a size, as ccache does (`prune`: the libraries used longest ago go first);
- probes: what this compiler can do is learned by building tiny programs (cached like kernels):
  whether it takes ``-march=native`` (this CPU's vector instructions), OpenMP (loops on every
  core), and which maths functions have vector versions (`vector_function`: glibc's libmvec
  computes ``tanhf`` of 8 floats at once);
- never failing loudly: no compiler, a failed build or no writable folder give None and a
  sentence saying why, and the caller runs its NumPy kernel instead.

The flags keep NumPy's results: ``-fwrapv`` makes signed overflow wrap, as NumPy's integers do
(in C it is undefined); ``-ffp-contract=off`` keeps ``a*b + c`` two roundings instead of one
fused multiply-add; ``-fno-math-errno`` lets ``sqrtf`` be one instruction, since nobody reads
``errno``; ``-fno-trapping-math`` lets a comparison (``relu``'s ``x > 0``) be computed 8 at a
time, in a vector select, though it may then raise a flag for a lane it did not need (a kernel
whose flags NumPy would warn about runs again as NumPy, which says what it says: see
`c_runtime.py`). There is no ``-ffast-math``, which would let the compiler reorder float arithmetic.

The compiler is ``cc`` on the PATH, or $TEACHFLOW_CC (empty turns C kernels off). The cache is
$TEACHFLOW_CACHE, else $XDG_CACHE_HOME/teachflow/kernels (by default ~/.cache/...), else a
folder of this user's in the temporary directory; it holds at most $TEACHFLOW_CACHE_MB
megabytes (`CACHE_MB` by default). Nothing is compiled until a kernel is needed.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import hashlib
import os
import platform
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

#: Every build: optimised, a shared library, and NumPy's arithmetic (see the module docstring).
BASE_FLAGS = ("-O3", "-std=c11", "-shared", "-fPIC", "-fwrapv", "-fno-math-errno",
              "-fno-trapping-math", "-ffp-contract=off")

#: A build that takes longer than this is given up (a kernel of thousands of ops takes seconds).
COMPILE_SECONDS = 600

#: What ends every cached library, before the SHA-256 of the bytes before it.
_SEAL = b"\nteachflow-sha256:"

#: The most the cache holds, in megabytes ($TEACHFLOW_CACHE_MB overrides it): past it, the
#: libraries used longest ago are removed until it holds three quarters of it (`prune`).
CACHE_MB = 512
#: The cache's size is looked at after the first build of a process, then after every this many
#: builds (a look reads every file's size and age: milliseconds for thousands).
PRUNE_EVERY = 64
#: A build's half-written file older than this (seconds) was left by a build that died.
STALE_SECONDS = 3600
_builds = 0  # (builds so far in this process)


@dataclass(frozen=True)
class Compiler:
    """A C compiler and what it can do here: the `flags` every kernel is built with (those it
    was found to take), how many `threads` an OpenMP loop runs on (1 without OpenMP), and its
    `identity` (version, path, CPU), part of every cache key."""

    command: str
    identity: str
    flags: tuple[str, ...]
    threads: int

    def describe(self) -> str:
        """``cc -O3 -march=native -fopenmp (2 threads)``."""
        shown = [f for f in self.flags if f in ("-O3", "-march=native", "-fopenmp",
                                                 "-fopenmp-simd")]
        described = f"{Path(self.command).name} {' '.join(shown)}"
        if "-fopenmp" not in self.flags:
            return described
        return f"{described} ({self.threads} thread{'' if self.threads == 1 else 's'})"


def compiler() -> Compiler | str:
    """The C compiler, probed once per process; or why there is none, in a sentence."""
    return _probe_compiler(os.environ.get("TEACHFLOW_CC"), os.environ.get("PATH", ""))


@functools.cache
def _probe_compiler(chosen: str | None, path: str) -> Compiler | str:
    """Find the compiler (`chosen`, else ``cc``, on `path`) and which flags it takes, each
    learned by building a probe with it."""
    if chosen == "":
        return "C kernels are turned off (TEACHFLOW_CC is empty)"
    command = shutil.which(chosen or "cc", path=path)
    if command is None:
        return f"no C compiler ({chosen or 'cc'} not found on PATH)" if chosen is None else \
            f"no C compiler (TEACHFLOW_CC={chosen} not found)"
    try:
        version = subprocess.run([command, "--version"], capture_output=True, text=True,
                                 timeout=60, check=True).stdout.partition("\n")[0]
    except (OSError, subprocess.SubprocessError) as exc:
        return f"no working C compiler ({command} --version failed: {exc})"
    identity = f"{version} | {os.path.realpath(command)} | {_cpu()}"
    found = Compiler(command, identity, BASE_FLAGS, 1)
    library, why = build("int teachflow_probe(void) { return 1; }\n", found)
    if library is None:
        return f"no working C compiler ({Path(command).name} cannot build a library: {why})"
    if build("int teachflow_probe(void) { return 2; }\n", _with(found, "-march=native"))[0]:
        found = _with(found, "-march=native")
    threaded = _with(found, "-fopenmp")
    library, _ = build(_OPENMP_PROBE, threaded)
    if library is not None:
        return Compiler(command, identity, threaded.flags, int(library.teachflow_threads()))
    if build(_SIMD_PROBE, _with(found, "-fopenmp-simd"))[0]:
        return _with(found, "-fopenmp-simd")
    return found


def _with(found: Compiler, flag: str) -> Compiler:
    return Compiler(found.command, found.identity, (*found.flags, flag), found.threads)


_OPENMP_PROBE = """#include <omp.h>
int teachflow_threads(void) { return omp_get_max_threads(); }
"""

_SIMD_PROBE = """void teachflow_probe(float *restrict x, long n) {
    #pragma omp simd
    for (long i = 0; i < n; i++) x[i] = x[i] * 2.0f;
}
"""


def _cpu() -> str:
    """This CPU, as -march=native sees it: its model and feature flags (hashed)."""
    try:
        info = Path("/proc/cpuinfo").read_text()
    except OSError:
        info = platform.processor()
    lines = [line for line in info.splitlines() if line.startswith(("model name", "flags"))]
    return hashlib.sha256("\n".join(lines[:2]).encode()).hexdigest()[:16]


# --- Building, with a cache on disk -----------------------------------------------------------


def build(source: str, with_compiler: Compiler, libraries: tuple[str, ...] = ()
          ) -> tuple[ctypes.CDLL | None, str]:
    """Compile `source` to a shared library and load it: ``(library, "from the cache")`` or
    ``(library, "compiled")``, or ``(None, why)``. Linked with `libraries` (``-lmvec``) and
    ``-lm``."""
    library, _, how = _build(source, with_compiler, libraries)
    return library, how


def _build(source: str, with_compiler: Compiler, libraries: tuple[str, ...]
           ) -> tuple[ctypes.CDLL | None, Path | None, str]:
    """`build`, also saying where the library lies."""
    folder = cache_dir()
    if isinstance(folder, str):
        return None, None, folder
    arguments = [*with_compiler.flags, "-x", "c", "-", "-o", "{library}", *libraries, "-lm"]
    key = hashlib.sha256("\0".join([source, *arguments, with_compiler.identity]).encode())
    path = folder / f"{key.hexdigest()}.so"
    library = _load(path)
    if library is not None:
        return library, path, "from the cache"
    temporary = path.with_name(f"{path.stem}.{os.getpid()}.{os.urandom(4).hex()}.tmp")
    try:
        done = subprocess.run([with_compiler.command,
                               *(str(temporary) if a == "{library}" else a for a in arguments)],
                              input=source, capture_output=True, text=True,
                              timeout=COMPILE_SECONDS, check=False)
        if done.returncode != 0:
            return None, None, _first_error(done.stderr)
        code = temporary.read_bytes()
        temporary.write_bytes(code + _SEAL + hashlib.sha256(code).hexdigest().encode())
        os.replace(temporary, path)  # atomic: another process sees the old file or the new
    except subprocess.TimeoutExpired:
        return None, None, f"the compiler took more than {COMPILE_SECONDS} s"
    except OSError as exc:
        return None, None, f"could not compile or store the library ({exc})"
    finally:
        temporary.unlink(missing_ok=True)
    library = _load(path)
    if library is None:
        return None, None, "the compiled library does not load"
    global _builds
    _builds += 1
    if (_builds - 1) % PRUNE_EVERY == 0:  # the first build, then every PRUNE_EVERY-th
        prune(folder, cache_limit(), keep=path)
    return library, path, "compiled"


def cache_limit() -> int:
    """The most bytes the cache holds: $TEACHFLOW_CACHE_MB megabytes, else `CACHE_MB`."""
    try:
        megabytes = float(os.environ.get("TEACHFLOW_CACHE_MB", CACHE_MB))
    except ValueError:
        megabytes = CACHE_MB
    return int(max(megabytes, 0) * 2**20)


def prune(folder: Path, limit: int, keep: Path | None = None) -> int:
    """Keep the cache in `folder` within `limit` bytes: past it, remove the libraries used
    longest ago (a library's time is when it was last built or loaded) until those left take
    three quarters of `limit`, never `keep`; and remove what builds that died left half written.
    Returns how many files it removed. (A process that loaded a removed library keeps it: the
    file's name goes, its pages stay while mapped.)"""
    libraries, total, removed, now = [], 0, 0, time.time()
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                status = entry.stat(follow_symlinks=False)
            except OSError:
                continue
            if entry.name.endswith(".tmp") and now - status.st_mtime > STALE_SECONDS:
                removed += _remove(entry.path)
            elif entry.name.endswith(".so") and entry.is_file(follow_symlinks=False):
                libraries.append((status.st_mtime, status.st_size, entry.path))
                total += status.st_size
    if total <= limit:
        return removed
    for _, size, path in sorted(libraries):
        if total <= limit * 3 // 4:
            break
        if keep is not None and path == str(keep):
            continue
        if _remove(path):
            removed += 1
            total -= size
    return removed


def _remove(path: str) -> bool:
    try:
        os.unlink(path)
    except OSError:  # (another process removed it first)
        return False
    return True


def _load(path: Path) -> ctypes.CDLL | None:
    """The library at `path` if it is whole (its seal matches its bytes) and loads; else None,
    and a damaged file is removed so that it is built again."""
    # OpenMP's threads spin, by default, for a while after a kernel's parallel loop, waiting for
    # the next one: on a busy core that steals the time of the BLAS threads of the matrix
    # product that follows (a 12-layer MLP's training step took 344 ms instead of 228 ms).
    # Passive threads sleep at once. The OpenMP runtime reads this when the first kernel loads
    # it; a user's own setting wins.
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    try:
        data = path.read_bytes()
    except OSError:
        return None
    code, seal, digest = data.rpartition(_SEAL)
    if seal and hashlib.sha256(code).hexdigest().encode() == digest:
        try:
            library = ctypes.CDLL(str(path))
        except OSError:
            pass
        else:
            with contextlib.suppress(OSError):  # used now: the last to go when pruning
                os.utime(path)
            return library
    path.unlink(missing_ok=True)
    return None


def _first_error(stderr: str) -> str:
    """The compiler's first error line, or its last line if none says error."""
    lines = [line for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line]
    return (errors or lines or ["the compiler failed without saying why"])[0][:300]


def cache_dir() -> Path | str:
    """The folder kernels are cached in: the first of $TEACHFLOW_CACHE,
    $XDG_CACHE_HOME/teachflow/kernels (~/.cache/teachflow/kernels) and a folder of this user's
    in the temporary directory that can be written; or why none can."""
    home = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    chosen = os.environ.get("TEACHFLOW_CACHE") or os.path.join(home, "teachflow", "kernels")
    for folder in (chosen, _private_temporary()):
        if folder is None:
            continue
        try:
            os.makedirs(folder, exist_ok=True)
        except OSError:
            continue
        if os.access(folder, os.W_OK | os.X_OK):
            return Path(folder)
    return "no folder to keep compiled kernels in can be written"


def _private_temporary() -> str | None:
    """``/tmp/teachflow-kernels-<uid>``, if it is this user's alone: a folder others could write
    to might hold a library planted there, which loading would run."""
    folder = os.path.join(tempfile.gettempdir(), f"teachflow-kernels-{os.getuid()}")
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        status = os.stat(folder)
    except OSError:
        return None
    return folder if status.st_uid == os.getuid() and not status.st_mode & 0o022 else None


# --- Maths functions on vectors ----------------------------------------------------------------


def vector_function(with_compiler: Compiler, name: str, c_type: str, arity: int) -> str:
    """How a loop calling the C maths function `name` (``tanhf``) on `c_type` arguments
    compiles: ``"libmvec"`` (a vector version from glibc's libmvec, declared as such in the
    kernel and linked with ``-lmvec``), ``"inline"`` (no call at all: ``sqrtf`` is an
    instruction) or ``"scalar"`` (one call per element, many times slower than NumPy's SIMD).

    Found by building a loop that calls it and reading which functions the library calls:
    without the function's own name it needs no call; a vector version has a name like
    ``_ZGVdN8v_tanhf`` (AVX2, 8 lanes, one vector argument).
    """
    return _vector_function(with_compiler, name, c_type, arity)


def simd_declaration(name: str, c_type: str, arity: int) -> str:
    """The declaration that lets the compiler call libmvec's vector version of `name`:
    ``__attribute__((simd("notinbranch"))) float tanhf(float);``."""
    return (f'__attribute__((simd("notinbranch"))) {c_type} {name}'
            f'({", ".join([c_type] * arity)});')


@functools.cache
def _vector_function(with_compiler: Compiler, name: str, c_type: str, arity: int) -> str:
    arguments = ", ".join(["x[i]"] * arity)
    loop = (f"void teachflow_probe(const {c_type} *restrict x, {c_type} *restrict y, long n) {{\n"
            "    #pragma omp simd\n"
            f"    for (long i = 0; i < n; i++) y[i] = {name}({arguments});\n}}\n")
    library, path, _ = _build(f"#include <math.h>\n{loop}", with_compiler, ())
    if library is not None and b"\0" + name.encode() + b"\0" not in path.read_bytes():
        return "inline"
    declared = f"#include <math.h>\n{simd_declaration(name, c_type, arity)}\n{loop}"
    library, path, _ = _build(declared, with_compiler, ("-lmvec",))
    if library is not None and re.search(rb"_ZGV\w+_" + name.encode() + rb"\0",
                                         path.read_bytes()):
        return "libmvec"
    return "scalar"
