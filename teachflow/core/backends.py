"""Devices and backends: one kernel, two array modules, any number of devices.

A teachflow kernel is written once against an *array module* `xp`: NumPy on the CPU, CuPy on an
NVIDIA GPU. The two modules expose the same functions (`xp.exp`, `xp.matmul`, ...), so the same
line of kernel code runs on either device. A `Backend` is one device: its name, its array module,
each op's kernel for it, and its own worker thread, which runs its piece of a graph cut across
devices (`teachflow.execution.pieces`).

Devices are named ``"cpu"`` (also ``"cpu:0"``) and ``"gpu"`` (also ``"cuda"``, ``"cuda:0"``).
``tfl.set_logical_devices("cpu", n)`` splits the CPU into `n` *logical* devices, ``"cpu"``,
``"cpu:1"``, ..., as TensorFlow's logical devices: they share the memory and the kernels, each
has its own worker, so a graph's pieces on two of them run at the same time (NumPy lets go of
Python's lock inside big kernels). ``with tfl.device(name):`` pins what is made inside to a
device (see `device`). `tfl.devices()` lists what is usable; asking for anything else raises
`DeviceError` saying why.

CuPy is imported only when a GPU is first asked for, so `import teachflow` stays fast and works on
machines without CUDA.
"""

from __future__ import annotations

import os
import threading
import warnings
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.core.errors import ArgumentError, DeviceError, warn_at_user_line

if TYPE_CHECKING:
    from teachflow.ops.op import Op

_ALIASES = {"cpu": "cpu", "numpy": "cpu", "gpu": "gpu", "cuda": "gpu"}


class DeviceName(str):
    """A device's name as the user reads it (``t.device``, `devices`): it equals every spelling of
    the device, so ``t.device == "cpu:0"`` holds for a tensor on ``"cpu"``, as
    ``torch.device("cuda") == torch.device("cuda:0")`` does not but users expect. It prints as
    teachflow's own name. (Hashing is the name's own: a set or a dict keyed by one spelling does
    not find another; compare with ``==``.)"""

    __slots__ = ()

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, str):
            return NotImplemented
        if str.__eq__(self, other):  # (the common case, spelled as teachflow spells it)
            return True
        return is_device_name(other) and str.__eq__(self, device_name(other))

    def __ne__(self, other: object) -> bool:
        equal = self.__eq__(other)
        return equal if equal is NotImplemented else not equal

    __hash__ = str.__hash__


class Backend:
    """A device (`name`: ``"cpu"``, ``"cpu:1"``, ``"gpu"``; `kind`: ``"cpu"`` or ``"gpu"``)
    and the array module that computes on it."""

    def __init__(self, name: str, xp: ModuleType, kernels: dict | None = None) -> None:
        self.name = name
        self.public_name = DeviceName(name)  # (what ``t.device`` answers)
        self.kind = name.split(":")[0]
        self.xp = xp
        self.array_type = xp.ndarray
        # op -> the op's kernel bound to this array module, built on first use (shared by the
        # logical devices of one CPU: one array module, one kernel).
        self.kernels: dict[Op, Any] = _KernelCache(self) if kernels is None else kernels
        self._worker: ThreadPoolExecutor | None = None

    def asarray(self, data: Any, dtype: Any = None) -> Any:
        """An array of this backend holding `data` (copied across devices when needed)."""
        if self.kind == "cpu" and _is_cupy_array(data):
            data = data.get()
        return self.xp.asarray(data, dtype=dtype)

    def copy(self, array: Any) -> Any:
        """A new array of this backend with `array`'s values: a transfer from another device
        (on the CPU's logical devices, which share memory, a plain copy)."""
        if self.kind == "cpu" and _is_cupy_array(array):
            return array.get()
        return self.xp.array(array, copy=True)

    def to_numpy(self, array: Any) -> np.ndarray:
        """A NumPy array with the same values (a device-to-host copy on the GPU)."""
        return array.get() if self.kind == "gpu" else np.asarray(array)

    @property
    def worker(self) -> ThreadPoolExecutor:
        """This device's own thread, made on first use: it runs the device's piece of a graph
        while the other devices run theirs."""
        with _WORKERS_MADE:
            if self._worker is None:
                self._worker = ThreadPoolExecutor(1, thread_name_prefix=f"teachflow {self.name}")
        return self._worker

    def __repr__(self) -> str:
        return f"Backend({self.name!r}, {self.xp.__name__})"


# NumPy warns about a kernel's floating-point trouble (``invalid value encountered in log``) at
# the line that called the kernel. For staged code that line runs as the user's (see
# `errors.compile_at_user_lines`); eagerly it is a line of teachflow, which means nothing to a
# learner. There, and only there (the learner's own NumPy code warns as ever), such a warning is
# raised instead; `eager` catches it and calls `rerun_warning_at_user_line`, which computes the
# result again and warns at the learner's line. The hot path pays nothing: a filter is consulted
# only when NumPy warns.
_KERNEL_CALLERS = r"teachflow\.(tensor\.eager|passes\.constant_fold)$"
_FLOATING_POINT = r".* encountered in "  # (NumPy's floating-point warnings, not ComplexWarning)
_filters_with_ours: list | None = None


def _keep_warning_filter() -> None:
    """Put the filter in place, again if needed: a ``warnings.catch_warnings()`` block (pytest
    collects tests in one) restores the filters it found when it ends, taking the filter out
    if teachflow was imported inside it. Checked where tensors are made (cheap there)."""
    global _filters_with_ours
    if warnings.filters is _filters_with_ours:
        return
    if not any(f[0] == "error" and f[2] is RuntimeWarning and f[3] is not None
               and f[3].pattern == _KERNEL_CALLERS for f in warnings.filters):
        warnings.filterwarnings("error", message=_FLOATING_POINT, category=RuntimeWarning,
                                module=_KERNEL_CALLERS)
    _filters_with_ours = warnings.filters


_keep_warning_filter()


def rerun_warning_at_user_line(kernel: Any, arrays: list, params: dict,
                               warning: RuntimeWarning) -> Any:
    """`kernel` ran into `warning`: its result after all, and every warning it gives (as
    ``np.errstate`` asks: a learner may ignore some) at the user's line."""
    asked = np.geterr()
    kinds: list[str] = []
    with np.errstate(**{k: "call" if v == "warn" else v for k, v in asked.items()},
                     call=lambda kind, flag: kinds.append(kind)):
        out = kernel(*arrays, **params)
    where = str(warning).partition(" encountered in ")[2]
    for kind in dict.fromkeys(kinds) or [None]:
        warn_at_user_line(f"{kind} encountered in {where}" if kind else str(warning))
    return out


class _KernelCache(dict):
    """`backend.kernels[op]`: the op's kernel for this backend, made once and then looked up."""

    def __init__(self, backend: Backend) -> None:
        super().__init__()
        self.backend = backend

    def __missing__(self, op: Op) -> Any:
        kernel = op.kernel(self.backend.xp)
        if op.primitive:  # kernels the compiler generates live with their graph, not here
            self[op] = kernel
        return kernel


def _is_cupy_array(data: Any) -> bool:
    return type(data).__module__.startswith("cupy")


CPU = Backend("cpu", np)
_WORKERS_MADE = threading.Lock()


@cache
def _gpu_backend() -> Backend | str:
    """The GPU backend, or a sentence saying why there is none (computed once)."""
    try:
        import cupy
    except ImportError as exc:
        return f"CuPy is not installed ({exc}); install it with `pip install 'teachflow[gpu]'`"
    try:
        count = cupy.cuda.runtime.getDeviceCount()
    except Exception as exc:  # CUDA driver or runtime missing: CuPy raises its own error types
        return f"CuPy is installed but CUDA is not usable: {exc}"
    if count == 0:
        return "CuPy is installed but no CUDA device was found"
    return Backend("gpu", cupy)


def is_device_name(name: str) -> bool:
    """Does `name` spell a device (``"cpu"``, ``"cpu:1"``, ``"gpu"``, ``"cuda:0"``), usable
    here or not?"""
    kind, _, index = name.lower().partition(":")
    return kind in _ALIASES and (index == "" or index.isdigit())


def device_name(device: str) -> str:
    """teachflow's name for a device: ``"cpu"`` for the CPU (``"cpu:0"``), ``"cpu:1"``, ...
    for its logical devices, ``"gpu"`` for the GPU (``"cuda"``, ``"cuda:0"``)."""
    if not isinstance(device, str) or not is_device_name(device):
        raise DeviceError(
            f"unknown device {device!r}",
            hint='use "cpu", "cpu:1", ... or "gpu" (alias "cuda"); tfl.devices() lists the '
                 "usable ones",
        )
    kind, _, index = device.lower().partition(":")
    return _ALIASES[kind] if int(index or 0) == 0 else f"{_ALIASES[kind]}:{int(index)}"


#: The CPU's logical devices (`set_logical_devices`), by name; the first `_cpu_count` usable.
_LOGICAL: dict[str, Backend] = {"cpu": CPU}
_cpu_count = 1
#: Every spelling of a CPU device asked for so far, and its backend (cleared when the devices
#: change).
_FOUND: dict[str, Backend] = {"cpu": CPU}


def get_backend(device: str | Backend) -> Backend:
    """The backend for a device name (``"cpu"``, ``"cpu:1"``, ``"gpu"``, or a spelling of
    one); `DeviceError` saying why for a device that is not usable here."""
    _keep_warning_filter()
    if isinstance(device, Backend):
        return device
    backend = _FOUND.get(device)
    if backend is None:
        backend = _find(device_name(device))
        if backend.kind == "cpu":  # (the GPU's own lookup is kept by `_gpu_backend`)
            _FOUND[device] = backend
    return backend


def _find(name: str) -> Backend:
    kind, _, index = name.partition(":")
    if kind == "cpu":
        if int(index or 0) >= _cpu_count:
            raise DeviceError(
                f"there is no device {name!r} here: the CPU is split into {_cpu_count} logical "
                f"device{'s' if _cpu_count > 1 else ''} ({', '.join(devices())})",
                hint=f"tfl.set_logical_devices('cpu', {int(index) + 1}) makes cpu:0 to {name}")
        return _LOGICAL[name]
    gpu = _gpu_backend()
    if isinstance(gpu, str):
        raise DeviceError(f"the GPU is not usable here: {gpu}", hint='use device="cpu"')
    if index:
        raise DeviceError(f"there is no device {name!r} here: teachflow uses one GPU, cuda:0",
                          hint='use device="gpu" (alias "cuda:0")')
    return gpu


def set_logical_devices(kind: str, count: int) -> list[str]:
    """Split the CPU into `count` logical devices, ``"cpu"`` (``"cpu:0"``), ``"cpu:1"``, ...
    ``"cpu:{count-1}"``, as TensorFlow's logical devices: one memory, one worker thread each.
    Callable at any time: tensors already made stay where they are. Returns `devices()`."""
    global _cpu_count
    if device_name(kind) != "cpu":
        raise DeviceError(f"only the CPU can be split into logical devices, not {kind!r}",
                          hint='tfl.set_logical_devices("cpu", 2)')
    if isinstance(count, bool) or not isinstance(count, int) or count < 1:
        raise ArgumentError(f"set_logical_devices: count must be a whole number >= 1, not "
                            f"{count!r}", op="set_logical_devices",
                            hint='tfl.set_logical_devices("cpu", 2) makes cpu:0 and cpu:1')
    for i in range(1, count):  # a device made before keeps its backend (and its tensors)
        _LOGICAL.setdefault(f"cpu:{i}", Backend(f"cpu:{i}", np, CPU.kernels))
    _cpu_count = count
    _FOUND.clear()
    _FOUND["cpu"] = CPU
    return devices()


def _forget_workers() -> None:
    """In a child process made by ``fork``: none of the parent's threads came along, so each
    device makes its worker anew when it needs one."""
    global _WORKERS_MADE
    _WORKERS_MADE = threading.Lock()
    for backend in _LOGICAL.values():
        backend._worker = None


os.register_at_fork(after_in_child=_forget_workers)


def devices() -> list[str]:
    """The devices usable here, e.g. ``["cpu"]``, ``["cpu", "gpu"]`` or, after
    ``tfl.set_logical_devices("cpu", 2)``, ``["cpu", "cpu:1"]``; each equals its other
    spellings (``"cpu:0" in tfl.devices()``)."""
    cpus = ["cpu", *(f"cpu:{i}" for i in range(1, _cpu_count))]
    names = cpus if isinstance(_gpu_backend(), str) else [*cpus, "gpu"]
    return [DeviceName(name) for name in names]


class _Pin(threading.local):
    """The device ``with tfl.device(...)`` pins this thread's work to (None: no pin)."""

    backend: Backend | None = None


PIN = _Pin()
#: How many pins are open, in any thread: eager dispatch, on every op, reads this one number
#: before it looks for its thread's pin (which costs more).
PINS_OPEN = [0]
_PINS_COUNTED = threading.Lock()


@contextmanager
def device(name: str) -> Iterator[str]:
    """``with tfl.device("cpu:1"):`` pins what is made inside to that device: eagerly, the
    tensors made and the ops run inside live there (an operand elsewhere is copied there first,
    as TensorFlow does); while tracing, the nodes built inside are placed there (see the pass
    `place`). An explicit ``device=`` still wins. Pins nest; the innermost holds."""
    backend = get_backend(name)
    previous, PIN.backend = PIN.backend, backend
    with _PINS_COUNTED:
        PINS_OPEN[0] += 1
    try:
        yield backend.name
    finally:
        PIN.backend = previous
        with _PINS_COUNTED:
            PINS_OPEN[0] -= 1


def default_device(device: str | None) -> str:
    """The device a tensor made with ``device=device`` lives on: that one, else the pinned
    one, else the CPU."""
    if device is not None:
        return get_backend(device).name
    return PIN.backend.name if PIN.backend is not None else "cpu"


def gpu_unavailable_reason() -> str | None:
    """Why there is no GPU backend here, or None when there is one."""
    gpu = _gpu_backend()
    return gpu if isinstance(gpu, str) else None


def backend_of_array(array: Any) -> Backend:
    """The backend an existing array lives on."""
    _keep_warning_filter()
    return get_backend("gpu") if _is_cupy_array(array) else CPU
