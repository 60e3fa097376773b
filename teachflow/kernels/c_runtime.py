"""Fused kernels on the CPU in C, run: which kernel a group gets, and the call into it.

`c_renderer.py` writes a group's C; this module decides whether the C kernel runs at all, has
the system's compiler build it (`native.py`: once per machine, then from a cache), and calls it
with the arrays' addresses, as tinygrad's runtimes call what its renderers write.

`cpu_kernel` picks, and says in one sentence which kernel runs and why. A small group runs in
NumPy (`small_group`): a call into C costs microseconds of Python handing over the arrays, more
than a few NumPy calls on a small array. A group the C kernel declines (`c_renderer.check`),
or whose C does not build, runs its NumPy kernel too. The C kernel returns the floating-point
exceptions it raised (`c_renderer.EXCEPTIONS`): when NumPy would warn, the NumPy kernel runs
again to warn at the learner's line (a NaN compared with ``>`` raises the flag too, so data
with NaNs costs that second run); where the C's result may not be NumPy's at all
(`c_loops.NUMPY_DECIDES`), NumPy's kernel runs again whatever ``np.errstate`` says. An input
whose memory is not laid out row after row (a transposed view) gets a kernel of its own, with
its strides in the source, rather than being copied.
"""

from __future__ import annotations

import ctypes
import math
import sys
from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.kernels import native
from teachflow.kernels.c_loops import NUMPY_DECIDES, Declined, contiguous
from teachflow.kernels.c_renderer import EXCEPTIONS, CRenderer, check
from teachflow.kernels.group import FusedGroup
from teachflow.kernels.numpy_runtime import numpy_kernel

#: A group without a reduction runs in C when it has at least this many ops, or does at least
#: this much work: its elements times its ops and results (each op is a NumPy call over the
#: elements, each result an array written). Below both, its few NumPy calls cost less than the
#: one call into C, which spends microseconds of Python handing over the arrays (measured: 2
#: ops and a result break even at 8,192 to 16,384 float32 elements, 4 ops near 2,048, 6 ops at
#: a few). A reduction always runs in C: a NumPy reduction alone costs more than the call
#: (`bench/fusion.py` prints both).
C_MIN_OPS = 6
C_MIN_WORK = 1 << 15


def cpu_kernel(group: FusedGroup) -> tuple[Callable[..., Any], str]:
    """The kernel that runs `group` on the CPU, and a sentence saying which and why: the C
    kernel where a compiler is present and the group suits it and is big enough to pay for the
    call, else the NumPy kernel."""
    small = small_group(group)
    if small and not isinstance(native.compiler(), str):
        return numpy_kernel(group, np), f"NumPy: {small}"
    kernel, ran = c_kernel(group)
    return (kernel if kernel is not None else numpy_kernel(group, np)), ran


def without_history(ran: str) -> str:
    """`ran` without how the C library came (compiled now, or from the cache): that is this
    machine's history, not the program's, and a pass must say the same of a program twice."""
    for how in (" (compiled)", " (from the cache)"):
        ran = ran.removesuffix(how)
    return ran


def small_group(group: FusedGroup) -> str | None:
    """Why `group` is too small to run in C (see `C_MIN_OPS`), or None."""
    shape = group.elementwise_spec.shape
    if None in shape:  # known only at run time
        return None
    ops, elements = len(group.nodes), math.prod(shape)
    work = elements * (ops + len(group.outputs))
    if group.reduction is not None or ops >= C_MIN_OPS or work >= C_MIN_WORK:
        return None
    calls = f"{ops} NumPy call{'s' if ops > 1 else ''}"
    return (f"a small group ({ops} op{'s' if ops > 1 else ''} on {elements:,} elements), where "
            f"{calls} cost less than one call into C, whose Python hands over the arrays")


def c_kernel(group: FusedGroup) -> tuple[Callable[..., Any] | None, str]:
    """The compiled C kernel of `group`, called as the NumPy kernel is
    (``fn(in0, in1, ..., out=None)``), or None; and a sentence saying which CPU kernel runs and
    why: ``"C, compiled by cc -O3 -march=native -fopenmp (2 threads), from the cache"`` or
    ``"NumPy: no C compiler (cc not found on PATH)"``."""
    found = native.compiler()
    if isinstance(found, str):
        return None, f"NumPy: {found}"
    try:
        check(group)
        renderer = CRenderer(group, contiguous(group), found)
        function, how = _compiled(renderer)
    except Declined as declined:
        return None, f"NumPy: {declined}"
    except Exception as exc:  # a bug in this file must not stop a learner's program
        return None, f"NumPy: the C kernel could not be written ({type(exc).__name__}: {exc})"
    if function is None:
        return None, f"NumPy: the C kernel did not build ({how})"
    uses = f" with libmvec's {', '.join(renderer.declared)}" if renderer.declared else ""
    return _runner(group, function, found), f"C, compiled by {found.describe()}{uses} ({how})"


def _compiled(renderer: CRenderer) -> tuple[Callable[..., None] | None, str]:
    """Build `renderer`'s source; its function, with each argument a pointer."""
    source = renderer.source()
    library, how = native.build(source, renderer.compiler,
                                ("-lmvec",) if renderer.declared else ())
    if library is None:
        return None, how
    function = getattr(library, renderer.group.name)
    function.argtypes = [ctypes.c_void_p] * (len(renderer.group.inputs) + len(renderer.outputs))
    function.restype = ctypes.c_int  # the floating-point exceptions raised
    return function, how


# --- Calling the kernel -----------------------------------------------------------------------


def _runner(group: FusedGroup, function: Callable[..., None], found: native.Compiler
            ) -> Callable[..., Any]:
    """``fn(in0, in1, ..., out=None)``: the arrays' addresses handed to the C `function`.

    An input must have its spec's shape and dtype; one not laid out row after row, or not
    aligned, is read through a kernel built for its strides (or, failing that, copied). A
    result is written into ``out`` when that is a fresh, aligned, row-major array that no input
    overlaps, else into an array of the kernel's, copied to ``out``.

    A call costs microseconds of Python around the C: the quick path, taken by every call of a
    compiled function, checks each input with three comparisons, asks for its address once,
    and reuses the addresses of the results it keeps (or writes into the caller's ``out``, a
    planned buffer, when the kernel may); everything else goes the careful way.
    """
    quick = [(v.shape, v.dtype, _byte_strides(v.shape, v.dtype)) for v in group.inputs]
    specs = group.specs
    kept = [KeptResults(spec) if returned else None
            for spec, returned in zip(specs, group.returned, strict=True)]
    single = len(specs) == 1
    careful = CarefulCall(group, function, found, kept)
    address_of, buffer_of = ctypes.addressof, ctypes.c_char.from_buffer

    def run(*arrays: Any, out: Any = None) -> Any:
        if len(arrays) != len(quick):
            return careful(arrays, out)
        addresses = []
        for array, (shape, dtype, strides) in zip(arrays, quick, strict=True):
            if (type(array) is not np.ndarray or array.strides != strides
                    or array.shape != shape or array.dtype != dtype):
                return careful(arrays, out)
            try:  # (a read-only or empty array has no writable buffer)
                address = address_of(buffer_of(array))
            except (TypeError, ValueError, BufferError):
                return careful(arrays, out)
            if address % dtype.alignment:
                return careful(arrays, out)
            addresses.append(address)
        results = []
        given = None if out is None else (out,) if single else out
        for k, spec in enumerate(specs):
            if given is not None:  # (a planned buffer: `teachflow.memory`)
                result = given[k]
                address = _quick_target(result, spec, arrays, addresses)
                if address is None:
                    return careful(arrays, out)
            elif kept[k] is not None:
                result, address = kept[k].take()
            else:
                result = np.empty(spec.shape, spec.dtype)
                address = address_of(buffer_of(result)) if result.size else result.ctypes.data
            results.append(result)
            addresses.append(address)
        raised = function(*addresses)
        if raised and _numpy_again(raised):  # its kernel runs again, and says what NumPy says
            return careful.numpy(*arrays, out=out)  # at the learner's line
        if given is not None:
            return out
        return results[0] if single else tuple(results)

    run.__name__ = run.__qualname__ = group.name
    return run


class KeptResults:
    """A returned result's arrays, reused as `Recycler` reuses them, with their addresses."""

    def __init__(self, spec: Any) -> None:
        self.shape, self.dtype = spec.shape, spec.dtype
        self.pairs: list[tuple[np.ndarray, int]] = []  # the newest last

    def take(self) -> tuple[np.ndarray, int]:
        for pair in self.pairs:
            # Two references mean nobody else's: the pair, and getrefcount's argument.
            if sys.getrefcount(pair[0]) == 2:
                return pair
        array = np.empty(self.shape, self.dtype)
        pair = (array, array.ctypes.data)
        self.pairs = [*self.pairs[-1:], pair]
        return pair


class CarefulCall:
    """The careful way of calling a kernel: any input an array can be made of, in any layout,
    and results written into the caller's ``out``."""

    def __init__(self, group: FusedGroup, function: Callable[..., None],
                 found: native.Compiler, kept: list[KeptResults | None]) -> None:
        self.group, self.function, self.found, self.kept = group, function, found, kept
        self.inputs = [(v.shape, v.dtype) for v in group.inputs]
        self.variants: dict[tuple, Callable[..., None] | None] = {}  # one per input layout
        self._numpy: Callable[..., Any] | None = None

    def numpy(self, *arrays: Any, out: Any = None) -> Any:
        """The group's NumPy kernel, made the first time it is needed."""
        if self._numpy is None:
            self._numpy = numpy_kernel(self.group, np)
        return self._numpy(*arrays, out=out)

    def fresh(self, k: int) -> np.ndarray:
        if self.kept[k] is not None:  # returned: the last call's array, if nobody holds it
            return self.kept[k].take()[0]
        spec = self.group.specs[k]
        return np.empty(spec.shape, spec.dtype)

    def __call__(self, arrays: tuple, out: Any) -> Any:
        arrays, addresses, strides = list(arrays), [], []
        for i, (array, (shape, dtype)) in enumerate(zip(arrays, self.inputs, strict=True)):
            if type(array) is not np.ndarray or array.dtype != dtype or array.shape != shape:
                array = arrays[i] = _checked(array, shape, dtype)
            flags = array.flags
            layout = None if flags.c_contiguous and flags.aligned else _element_strides(array)
            if layout is False:  # not aligned, or not in whole elements: copied
                array = arrays[i] = array.copy()
                layout = None
            strides.append(layout)
            addresses.append(_address(array))
        kernel = self.function
        if strides.count(None) != len(strides):  # some input is read through its strides
            key = tuple(strides)
            if key not in self.variants:
                self.variants[key] = _variant(self.group, key, self.found)
            kernel = self.variants[key]
            if kernel is None:  # no kernel for these strides: copy the inputs instead
                kernel = self.function
                arrays = [a.copy() if s is not None else a for a, s in zip(arrays, strides,
                                                                           strict=True)]
                addresses = [_address(a) for a in arrays]
        specs = self.group.specs
        given = (out,) if len(specs) == 1 and out is not None else out
        targets = [self.fresh(k) for k in range(len(specs))] if given is None else [
            o if _writable_target(o, spec, arrays) else self.fresh(k)
            for k, (o, spec) in enumerate(zip(given, specs, strict=True))]
        raised = kernel(*addresses, *map(_address, targets))
        if raised and _numpy_again(raised):  # its kernel runs again, and says what NumPy says
            return self.numpy(*arrays, out=out)  # at the learner's line
        if given is None:
            return targets[0] if len(specs) == 1 else tuple(targets)
        for o, target in zip(given, targets, strict=True):
            if o is not target:
                np.copyto(o, target)
        return out


def _numpy_again(raised: int) -> bool:
    """True if the NumPy kernel must run again after the C kernel returned `raised`: a result
    that may not be NumPy's, or floating-point exceptions NumPy would act on (warn, raise, ...)
    under the caller's `np.errstate`."""
    if raised & NUMPY_DECIDES:
        return True
    errors = np.geterr()
    return any(raised & bit and errors[name] != "ignore" for name, bit in EXCEPTIONS.items())


def _variant(group: FusedGroup, strides: tuple, found: native.Compiler
             ) -> Callable[..., None] | None:
    """The kernel of `group` for inputs with these element strides (None: row-major)."""
    layout = tuple(s if s is not None else c for s, c in zip(strides, contiguous(group),
                                                              strict=True))
    try:
        return _compiled(CRenderer(group, layout, found))[0]
    except Declined:
        return None


def _checked(array: Any, shape: tuple, dtype: np.dtype) -> np.ndarray:
    """`array` as an array of `dtype`; an error if its shape is not `shape`."""
    array = np.asarray(array, dtype=dtype)
    if array.shape != shape:
        raise ValueError(f"the fused kernel takes {dtype}{list(shape)}, not "
                         f"{array.dtype}{list(array.shape)}")
    return array


def _element_strides(array: np.ndarray) -> tuple[int, ...] | bool:
    """The array's strides counted in elements (0 along axes of size 1); False when they are
    not whole elements, or the memory is not aligned: then the array is copied."""
    size = array.itemsize
    if not array.flags.aligned or any(s % size for s in array.strides):
        return False
    return tuple(s // size if n > 1 else 0 for n, s in zip(array.shape, array.strides,
                                                          strict=True))


def _quick_target(out: Any, spec: Any, arrays: tuple, addresses: list[int]) -> int | None:
    """The address of `out` if the kernel may write straight into it (`_writable_target`),
    found with the inputs' `addresses` at hand; else None."""
    if (type(out) is not np.ndarray or out.dtype != spec.dtype or out.shape != spec.shape
            or not out.flags.carray or not out.size):
        return None
    try:
        start = ctypes.addressof(ctypes.c_char.from_buffer(out))
    except (TypeError, ValueError, BufferError):  # (read-only)
        return None
    end = start + out.nbytes
    for array, address in zip(arrays, addresses, strict=False):
        if address < end and start < address + array.nbytes:
            return None
    return start


def _writable_target(out: Any, spec: Any, arrays: list[np.ndarray]) -> bool:
    """True if the kernel may write straight into `out`: a writable, aligned, row-major array
    of the result's spec (``flags.carray``) that no input overlaps."""
    return (type(out) is np.ndarray and out.dtype == spec.dtype and out.shape == spec.shape
            and out.flags.carray and not any(np.may_share_memory(out, a) for a in arrays))


def _address(array: np.ndarray) -> int:
    """Where the array's first element lies. (`ctypes.c_char.from_buffer` is the quick way, for
    a writable array of one element or more; ``array.ctypes.data`` works for all.)"""
    try:
        return ctypes.addressof(ctypes.c_char.from_buffer(array))
    except (TypeError, ValueError, BufferError):
        return array.ctypes.data


def _byte_strides(shape: tuple, dtype: np.dtype) -> tuple[int, ...]:
    """The strides NumPy gives a fresh row-major array of `shape` and `dtype`, in bytes (an
    axis of size 1 too has the stride of its place)."""
    strides, step = [], dtype.itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))
