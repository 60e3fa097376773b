"""Devices and backends: one kernel, two array modules.

A teachflow kernel is written once against an *array module* `xp`: NumPy on the CPU, CuPy on an
NVIDIA GPU. The two modules expose the same functions (`xp.exp`, `xp.matmul`, ...), so the same
line of kernel code runs on either device. A `Backend` pairs a device name with its array module and
caches each op's kernel for it.

CuPy is imported only when a GPU is first asked for, so `import teachflow` stays fast and works on
machines without CUDA. Asking for a GPU that cannot be used raises `DeviceError` saying why.
"""

from __future__ import annotations

import warnings
from functools import cache
from types import ModuleType
from typing import TYPE_CHECKING, Any

import numpy as np

from teachflow.core.errors import DeviceError, warn_at_user_line

if TYPE_CHECKING:
    from teachflow.ops.op import Op

_ALIASES = {"cpu": "cpu", "numpy": "cpu", "gpu": "gpu", "cuda": "gpu"}


class Backend:
    """A device and the array module that computes on it."""

    def __init__(self, name: str, xp: ModuleType) -> None:
        self.name = name
        self.xp = xp
        self.array_type = xp.ndarray
        # op -> the op's kernel bound to this array module, built on first use.
        self.kernels: dict[Op, Any] = _KernelCache(self)

    def asarray(self, data: Any, dtype: Any = None) -> Any:
        """An array of this backend holding `data` (copied across devices when needed)."""
        if self.name == "cpu" and _is_cupy_array(data):
            data = data.get()
        return self.xp.asarray(data, dtype=dtype)

    def to_numpy(self, array: Any) -> np.ndarray:
        """A NumPy array with the same values (a device-to-host copy on the GPU)."""
        return array.get() if self.name == "gpu" else np.asarray(array)

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
    """Does `name` spell a device (``"cpu"``, ``"gpu"``, ``"cuda:0"``), usable here or not?"""
    return name.lower().split(":")[0] in _ALIASES


def device_name(device: str) -> str:
    """teachflow's name for a device: ``"cpu"`` or ``"gpu"`` (``"cuda"``, ``"cuda:0"``: gpu)."""
    name = _ALIASES.get(device.lower().split(":")[0]) if isinstance(device, str) else None
    if name is None:
        raise DeviceError(
            f"unknown device {device!r}",
            hint='use "cpu" or "gpu" (alias "cuda"); tfl.devices() lists the usable ones',
        )
    return name


def get_backend(device: str | Backend) -> Backend:
    """The backend for a device name: ``"cpu"``, or ``"gpu"`` (alias ``"cuda"``)."""
    _keep_warning_filter()
    if isinstance(device, Backend):
        return device
    if device_name(device) == "cpu":
        return CPU
    gpu = _gpu_backend()
    if isinstance(gpu, str):
        raise DeviceError(f"the GPU is not usable here: {gpu}", hint='use device="cpu"')
    return gpu


def devices() -> list[str]:
    """The devices usable on this machine, e.g. ``["cpu"]`` or ``["cpu", "gpu"]``."""
    return ["cpu"] if isinstance(_gpu_backend(), str) else ["cpu", "gpu"]


def gpu_unavailable_reason() -> str | None:
    """Why there is no GPU backend here, or None when there is one."""
    gpu = _gpu_backend()
    return gpu if isinstance(gpu, str) else None


def backend_of_array(array: Any) -> Backend:
    """The backend an existing array lives on."""
    _keep_warning_filter()
    return get_backend("gpu") if _is_cupy_array(array) else CPU
