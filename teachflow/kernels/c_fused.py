"""Fused kernels on the CPU in C: one loop per fused group, compiled by the system's C compiler.

The NumPy kernel (`numpy_fused.py`) fuses by blocks: each op still runs as its own NumPy call,
on a block small enough to stay in the cache. A C compiler goes one step further, as the GPU
kernel does (`cuda_fused.py`): one loop over the elements, whose body computes every node for
one element in registers, each a typed local variable (`c_expr.py`)::

    #pragma omp simd
    for (long i0 = first; i0 < last; i0++) {
        const float v2 = (in0[i0] * in1[i0]);  // %2 = mul %x, %y
        const float v3 = tanhf(v2);             // %3 = tanh %2
        out0[i0] = v3;
    }

Each input is read once, each output written once, and nothing in between touches memory. What
makes the loop fast:

- vectors: ``#pragma omp simd`` has the compiler compute 8 floats at a time (AVX2). A maths
  function such as ``tanhf`` runs on 8 floats at a time too when glibc's libmvec has a vector
  version: the kernel declares it (``__attribute__((simd))``) and links ``-lmvec``. Without one
  the loop would call ``tanhf`` once per element, many times slower than NumPy's own SIMD
  ``tanh``, so such a group is left to the NumPy kernel;
- cores: a big loop is cut into blocks that ``#pragma omp parallel for`` shares between the
  cores; a small one runs on one core, as waking threads would cost more than they save;
- constants: shapes are known when the kernel is written, so sizes and strides are numbers in
  the source. Broadcasting is a stride of 0, and axes that follow one another in memory for
  every operand are one axis: the common cases (same shapes, scalars) are one flat loop.

A final reduction accumulates as the loop goes. Over trailing axes (a last-axis sum), each
output element has an accumulator, in double for floats; over everything, each block has one,
and the blocks' parts are combined in order afterwards, the same result on any number of cores;
over leading axes (a column sum), each row of the loop is combined into the output's row, in
row order as NumPy does. Partial results combine as the reduction's `Partials` say, and OpenMP
is told so (``#pragma omp declare reduction``) to vectorise the accumulation.

The C computes what NumPy computes: operands cast to NumPy's types, integers wrapping on
overflow, ``a*b + c`` rounded twice (see `native.py` for the flags). Where C cannot match NumPy
the group is *declined*, and its NumPy kernel runs: float16 and complex values, an integer power
whose exponent may be negative (NumPy raises), a maths function with no vector version here. A
small group runs in NumPy too (`small_group`): a call into C costs microseconds of Python
handing over the arrays, more than a few NumPy calls on a small array. `cpu_kernel` picks, and
says in one sentence which kernel runs and why. NumPy warns of a division by zero, an overflow
or an invalid operation (``log(-1)``) by reading the CPU's floating-point flags after each loop;
so does the C kernel, which returns them, and when NumPy would warn, the NumPy kernel runs again
to warn at the learner's line (a NaN compared with ``>`` raises the flag too, so data with NaNs
costs that second run). Where C's result may not be NumPy's at all, the kernel says so as well
(`NUMPY_DECIDES`), and NumPy's kernel runs again whatever ``np.errstate`` says: a float cast to an
integer type that cannot hold it (NaN, inf, out of range: undefined in C), a float sum whose
terms are big enough that NumPy's partial sums might overflow. The mean of no elements is left
to NumPy, whose mean warns of it.

`c_source` is the C translation unit, for reading; `c_kernel` compiles it (once per machine:
`native.py` caches it) and returns the function that calls it with the arrays. An input whose
memory is not laid out row after row (a transposed view) gets a kernel of its own, with its
strides in the source, rather than being copied.
"""

from __future__ import annotations

import ctypes
import math
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.graph import Node, Value, format_node
from teachflow.kernels import native
from teachflow.kernels.c_expr import (
    Dialect,
    aligned,
    c_literal,
    c_type,
    computed_type,
    function_calls,
    fusion_of,
    node_line,
)
from teachflow.kernels.group import FusedGroup
from teachflow.kernels.numpy_fused import numpy_kernel
from teachflow.ops.elementwise import add, astype

#: C as the system's compiler reads it: ``math.h`` names NaN and infinity.
C = Dialect(nan=("NAN", "NAN"), inf=("INFINITY", "INFINITY"))

#: A loop doing at least this much work (elements times ops) is shared between the cores.
PARALLEL_WORK = 1 << 19

#: A loop shared between the cores is cut into at most this many blocks (they are numbers in
#: the source, so the kernel does not depend on how many cores run it).
BLOCKS = 64

#: A block of the innermost axis has at least this many elements: whole vectors, whole cache
#: lines, and no core writing next to another's.
MIN_RUN = 1024

#: A group without a reduction runs in C when it has at least this many ops, or does at least
#: this much work: its elements times its ops and results (each op is a NumPy call over the
#: elements, each result an array written). Below both, its few NumPy calls cost less than the
#: one call into C, which spends microseconds of Python handing over the arrays (measured: 2
#: ops and a result break even at 8,192 to 16,384 float32 elements, 4 ops near 2,048, 6 ops at
#: a few). A reduction always runs in C: a NumPy reduction alone costs more than the call
#: (`bench/fusion.py` prints both).
C_MIN_OPS = 6
C_MIN_WORK = 1 << 15

#: The floating-point exceptions a kernel reports, as bits of the number it returns, by the
#: names `np.errstate` gives them.
EXCEPTIONS = {"divide": 1, "over": 2, "invalid": 4}

#: The bit a kernel returns beside them when its result may not be NumPy's, and NumPy's kernel
#: runs again, whatever `np.errstate` says: it cast a float to an integer type that cannot hold
#: it (NaN, an infinity, out of range), which C leaves undefined where NumPy gives what the
#: CPU's instructions give, warning or not as they flag it; or it summed floats so big that
#: NumPy's partial sums, in NumPy's order and the result's type, might overflow where the
#: kernel's, in its order and in double, did not (`SUM_BOUND`).
NUMPY_DECIDES = 8

#: A float sum of n terms whose greatest magnitude times n is below this fraction of the
#: result type's greatest value has no partial sum that overflows, in any order (the margin
#: covers rounding).
SUM_BOUND = 0.5

#: The dtypes the C kernel computes in.
C_DTYPES = {"bool", "int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64",
            "float32", "float64"}


@dataclass(frozen=True)
class Helper:
    """A function C's library lacks and NumPy has, for the dtype kinds in `kinds`: a template's
    ``abs({0})`` on an int32 calls ``abs_int32``. ``{t}`` in `text` is the C type, ``{n}`` the
    dtype, ``{f}`` the suffix of C's float functions (``fabsf``). `nonnegative` is an operand
    NumPy refuses to take negative (it raises): a group where it may be is declined, `why`."""

    kinds: str
    text: str
    nonnegative: int | None = None
    why: str = ""

    @property
    def function(self) -> str:
        return re.search(r"(\w+)_\{n\}\(", self.text)[1]


HELPERS = (
    # NumPy's abs of the most negative integer wraps to itself, as -x does here (-fwrapv).
    Helper("iub", "static inline {t} abs_{n}({t} x) {{ return x < 0 ? ({t})-x : x; }}"),
    Helper("f", "static inline {t} abs_{n}({t} x) {{ return fabs{f}(x); }}"),
    # NumPy's integer power: by repeated squaring, each product wrapping as NumPy's does.
    Helper("iu", "static inline {t} pow_{n}({t} x, {t} y) {{\n"
                 "    {t} result = 1;\n"
                 "    for (; y > 0; y >>= 1) {{\n"
                 "        if (y & 1) result *= x;\n"
                 "        x *= x;\n"
                 "    }}\n"
                 "    return result;\n"
                 "}}",
           nonnegative=1, why="an integer power whose exponent may be negative (NumPy raises "
                              "there, C cannot)"),
)


class Declined(Exception):
    """The group is left to the NumPy kernel, for the reason given."""


def c_source(group: FusedGroup) -> str:
    """The C translation unit computing `group`, with ``int <group.name>(in0, ..., out0, ...)``;
    or, for a group the C kernel declines, a C comment saying why."""
    found = native.compiler()
    try:
        _check(group)
        return _KernelWriter(group, _contiguous(group), found).source()
    except Declined as declined:
        return f"// {group.name}: no C kernel, NumPy runs this group: {declined}.\n"


def cpu_kernel(group: FusedGroup) -> tuple[Callable[..., Any], str]:
    """The kernel that runs `group` on the CPU, and a sentence saying which and why: the C
    kernel where a compiler is present and the group suits it and is big enough to pay for the
    call, else the NumPy kernel."""
    small = small_group(group)
    if small and not isinstance(native.compiler(), str):
        return numpy_kernel(group, np), f"NumPy: {small}"
    kernel, ran = c_kernel(group)
    return (kernel if kernel is not None else numpy_kernel(group, np)), ran


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
        _check(group)
        writer = _KernelWriter(group, _contiguous(group), found)
        function, how = _compiled(writer)
    except Declined as declined:
        return None, f"NumPy: {declined}"
    except Exception as exc:  # a bug in this file must not stop a learner's program
        return None, f"NumPy: the C kernel could not be written ({type(exc).__name__}: {exc})"
    if function is None:
        return None, f"NumPy: the C kernel did not build ({how})"
    uses = f" with libmvec's {', '.join(writer.declared)}" if writer.declared else ""
    return _runner(group, function, found), f"C, compiled by {found.describe()}{uses}, {how}"


def _compiled(writer: _KernelWriter) -> tuple[Callable[..., None] | None, str]:
    """Build `writer`'s source; its function, with each argument a pointer."""
    source = writer.source()
    library, how = native.build(source, writer.compiler, ("-lmvec",) if writer.declared else ())
    if library is None:
        return None, how
    function = getattr(library, writer.group.name)
    function.argtypes = [ctypes.c_void_p] * (len(writer.group.inputs) + len(writer.outputs))
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
    and reuses the addresses of the results it keeps; everything else goes the careful way.
    """
    quick = [(v.shape, v.dtype, _byte_strides(v.shape, v.dtype)) for v in group.inputs]
    specs = group.specs
    kept = [_Kept(spec) if returned else None
            for spec, returned in zip(specs, group.returned, strict=True)]
    single = len(specs) == 1
    careful = _careful(group, function, found, kept)
    address_of, buffer_of = ctypes.addressof, ctypes.c_char.from_buffer

    def run(*arrays: Any, out: Any = None) -> Any:
        if out is not None or len(arrays) != len(quick):
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
        for k, spec in enumerate(specs):
            if kept[k] is not None:
                result, address = kept[k].take()
            else:
                result = np.empty(spec.shape, spec.dtype)
                address = address_of(buffer_of(result)) if result.size else result.ctypes.data
            results.append(result)
            addresses.append(address)
        raised = function(*addresses)
        if raised and _numpy_again(raised):  # its kernel runs again, and says what NumPy says
            return careful.numpy(*arrays)  # at the learner's line
        return results[0] if single else tuple(results)

    run.__name__ = run.__qualname__ = group.name
    return run


class _Kept:
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


class _careful:
    """The careful way of calling a kernel: any input an array can be made of, in any layout,
    and results written into the caller's ``out``."""

    def __init__(self, group: FusedGroup, function: Callable[..., None],
                 found: native.Compiler, kept: list[_Kept | None]) -> None:
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
    layout = tuple(s if s is not None else c for s, c in zip(strides, _contiguous(group),
                                                              strict=True))
    try:
        return _compiled(_KernelWriter(group, layout, found))[0]
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


# --- Shapes and strides -----------------------------------------------------------------------


def _byte_strides(shape: tuple, dtype: np.dtype) -> tuple[int, ...]:
    """The strides NumPy gives a fresh row-major array of `shape` and `dtype`, in bytes (an
    axis of size 1 too has the stride of its place)."""
    strides, step = [], dtype.itemsize
    for n in reversed(shape):
        strides.append(step)
        step *= n
    return tuple(reversed(strides))


def _contiguous(group: FusedGroup) -> tuple[tuple[int, ...], ...]:
    """Each input's strides, in elements, when it is laid out row after row."""
    return tuple(_row_major_strides(v.shape) for v in group.inputs)


def _row_major_strides(shape: tuple) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step if n > 1 else 0)
        step *= n
    return tuple(reversed(strides))


def _broadcast(shape: tuple, strides: tuple, to: tuple) -> list[int]:
    """Strides over the axes of `to` of an operand broadcast to it: 0 along a stretched axis."""
    pad = len(to) - len(shape)
    return [0] * pad + [0 if n == 1 else s for n, s in zip(shape, strides, strict=True)]


def _collapsed(sizes: tuple, strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
    """The loop's axes: without axes of size 1, and with an axis merged into the one before it
    where every operand steps over both as over one (``stride_before == stride * size``)."""
    axes: list[tuple[int, list[int]]] = []
    for axis, size in enumerate(sizes):
        steps = [s[axis] for s in strides]
        if size == 1:
            continue
        if axes and all(before == step * size for before, step in zip(axes[-1][1], steps,
                                                                        strict=True)):
            axes[-1] = (axes[-1][0] * size, steps)
        else:
            axes.append((size, steps))
    return [size for size, _ in axes], [[steps[k] for _, steps in axes]
                                        for k in range(len(strides))]


# --- Writing the source -----------------------------------------------------------------------


class _KernelWriter:
    """Writes one kernel's C: ``int <name>(const T *restrict in0, ..., U *restrict out0, ...)``,
    which returns the floating-point exceptions raised.

    Names in the C: ``in0, in1, ...`` are the inputs, ``out0, out1, ...`` the outputs, ``v7``
    the value of node ``%7`` for one element, ``i0, i1, ...`` the loop's axes (after collapsing),
    ``acc`` a reduction's running result. `maths` says how each C maths function called
    compiles (see `native.vector_function`); `declared` are those with a vector version.
    """

    def __init__(self, group: FusedGroup, strides: tuple, found: native.Compiler | str) -> None:
        self.group, self.compiler = group, found
        self.strides = strides
        self.outputs = list(group.outputs)
        self.maths: dict[str, tuple[str, int, str]] = {}  # tanhf: C type, arity, how it compiles
        self.helpers: dict[str, str] = {}  # abs_int32: its definition
        self.spelled: dict[tuple[str, np.dtype], str] = {}  # (tanh, float32): tanhf
        self.dialect = Dialect(C.nan, C.inf, lambda name, dtype: self.spelled[name, dtype])
        self.openmp_reduction = False  # an inner loop reduces with the combining op
        self.checks_casts = False  # a loop flags floats cast to an integer type that lacks them
        self.bounds_sum = False  # a float sum finds its terms' greatest magnitude (`SUM_BOUND`)

    @property
    def declared(self) -> list[str]:
        """The maths functions called in their libmvec vector versions."""
        return [name for name, (_, _, kind) in self.maths.items() if kind == "libmvec"]

    def source(self) -> str:
        group = self.group
        element = group.elementwise_spec.shape
        operands = [_broadcast(v.shape, s, element) for v, s in zip(group.inputs, self.strides,
                                                                     strict=True)]
        shapes = [element] * len(self.outputs)
        if group.reduction is not None:  # (the reduction's output last, its reduced axes kept)
            shapes[-1] = self.kept_shape()
        operands += [_broadcast(shape, _row_major_strides(shape), element) for shape in shapes]
        # The output a reduction writes: the last.
        self.reduced = f"out{len(self.outputs) - 1}"
        self.sizes, steps = _collapsed(element, operands)
        self.steps = dict(zip([*(f"in{i}" for i in range(len(group.inputs))),
                               *(f"out{k}" for k in range(len(self.outputs)))], steps,
                              strict=True))
        names = {v: self.at(f"in{i}") for i, v in enumerate(group.inputs)}
        body = []
        for node in group.nodes:
            for name, arity in function_calls(fusion_of(node)):
                self.spell(name, arity, node)
            body.append(node_line(node, names, self.dialect))
            if _casts_float_to_integer(node):
                body.append(_cast_check(node, names))
                self.checks_casts = True
        if math.prod(element) == 0:
            loops = self.no_elements()
        elif group.reduction is not None:  # (the values needed outside, written on the way)
            stores = [(f"{self.at(f'out{k}')} = {names[v]};", "")
                      for k, v in enumerate(self.outputs[:-1])]
            loops = self.reduction_loops(names, [*body, *stores])
        else:
            loops = self.elementwise_loops(names, body)
        start = ["int raised = 0;  // the exceptions raised, returned at the end",
                 "feclearexcept(FE_ALL_EXCEPT);"]
        if self.bounds_sum:
            bound = self.bound_type()
            start.insert(1, f"{c_type(bound)} bound = {c_literal(0.0, bound, C)};  // the "
                            "greatest magnitude of a term summed")
            loops = [*loops, *self.bound_check()]
        return "\n".join([*self.header(), "", *self.preamble(), *self.signature(),
                          *_indent([*start, *loops, "return raised | exceptions();"]), "}", ""])

    def kept_shape(self) -> tuple:
        """The output's shape with the reduced axes kept as size 1 (the elementwise shape when
        there is no reduction)."""
        element = self.group.elementwise_spec.shape
        reduction = self.group.reduction
        if reduction is None:
            return element
        axis = reduction.params["axis"]
        return tuple(1 if axis is None or a in axis else n for a, n in enumerate(element))

    # --- Text around the loops ----------------------------------------------------------------

    def header(self) -> list[str]:
        group = self.group
        what = f"{len(group.nodes)} elementwise op(s)"
        if group.reduction is not None:
            what += f" and a {group.reduction.op.name}"
        lines = [f"// {group.name}: {what} in one C loop, for the CPU."]
        lines += [f"//   in{i} = {v} : {v.spec}" + self.layout_note(i)
                  for i, v in enumerate(group.inputs)]
        lines += [f"//   {format_node(n)}" for n in group.members]
        lines += [f"//   out{k} = {v}" for k, v in enumerate(self.outputs)]
        return lines

    def layout_note(self, i: int) -> str:
        value = self.group.inputs[i]
        if self.strides[i] == _row_major_strides(value.shape):
            return ""
        return f", read with strides {list(self.strides[i])} (elements)"

    def preamble(self) -> list[str]:
        lines = ["#include <fenv.h>", "#include <math.h>", "#include <stdbool.h>", "",
                 "// The floating-point exceptions NumPy warns about, as the CPU flagged them: "
                 "1 a division", "// by zero, 2 an overflow, 4 an invalid operation (log(-1), "
                 "0/0, a NaN compared).",
                 "static inline int exceptions(void)", "{",
                 "    return (fetestexcept(FE_DIVBYZERO) ? 1 : 0) | "
                 "(fetestexcept(FE_OVERFLOW) ? 2 : 0) |",
                 "           (fetestexcept(FE_INVALID) ? 4 : 0);", "}", ""]
        if self.checks_casts:
            lines[6:6] = [f"// The loop adds {NUMPY_DECIDES} for a float cast to an integer type "
                          "that cannot hold it (NaN, inf, out of", "// range): C leaves that "
                          "undefined, and NumPy's kernel runs again."]
        if self.declared:
            lines += ["// Vector versions from glibc's libmvec (-lmvec): in a vectorised loop, "
                      "each call computes", "// several elements at once."]
            lines += [native.simd_declaration(name, self.maths[name][0], self.maths[name][1])
                      for name in self.declared]
            lines.append("")
        if self.helpers:
            lines.append("// What C's library lacks and NumPy has.")
            lines += [*self.helpers.values(), ""]
        reduction = self.group.reduction
        if self.openmp_reduction:
            combine = reduction.op.partials.combine.name
            dtype = self.accumulator()
            lines += [f"// Two partial results combine as {combine} computes them, each starting "
                      f"at {self.identity(dtype)}.",
                      f"#pragma omp declare reduction({combine} : {c_type(dtype)} : omp_out = "
                      f"{self.combined('omp_out', 'omp_in', dtype)}) initializer(omp_priv = "
                      f"{self.identity(dtype)})", ""]
        return lines

    def signature(self) -> list[str]:
        params = [f"const {_element_type(v.dtype)} *restrict in{i}"
                  for i, v in enumerate(self.group.inputs)]
        params += [f"{_element_type(v.dtype)} *restrict out{k}"
                   for k, v in enumerate(self.outputs)]
        lines = [f"int {self.group.name}("]
        for k, param in enumerate(params):
            param += ")" if k == len(params) - 1 else ","
            if len(lines[-1]) + len(param) > 99 and not lines[-1].endswith("("):
                lines.append(" " * len(f"int {self.group.name}("))
            lines[-1] += param if lines[-1].endswith(("(", " ")) else f" {param}"
        return [*lines, "{"]

    # --- One node: spelling its maths functions -----------------------------------------------

    def spell(self, name: str, arity: int, node: Node) -> None:
        """Choose the C function computing the template's `name` in `node`: a helper
        (``abs_int32``) or C's library function of the type (``tanhf`` for float, ``tanh`` for
        double), probing how that compiles."""
        dtype = computed_type(node)
        for helper in HELPERS:
            if helper.function == name and dtype.kind in helper.kinds:
                if helper.nonnegative is not None and _may_be_negative(
                        node.inputs[helper.nonnegative]):
                    raise Declined(f"{format_node(node).rsplit(' : ', 1)[0]} is {helper.why}")
                spelled = self.spelled[name, dtype] = f"{name}_{dtype.name}"
                self.helpers[spelled] = helper.text.format(
                    t=c_type(dtype), n=dtype.name, f="f" if dtype == np.float32 else "")
                return
        if dtype.kind != "f":
            raise Declined(f"C has no {name} of {dtype.name} written here")
        spelled = self.spelled[name, dtype] = name + ("f" if dtype == np.float32 else "")
        if spelled not in self.maths:
            kind = "inline"  # (with no compiler to ask, the source is for reading only)
            if not isinstance(self.compiler, str):
                kind = native.vector_function(self.compiler, spelled, c_type(dtype), arity)
            if kind == "scalar":
                raise Declined(f"{spelled} has no vector version here (not in libmvec), and a C "
                               f"loop calling it per element is far slower than NumPy's SIMD")
            self.maths[spelled] = (c_type(dtype), arity, kind)

    # --- Loops --------------------------------------------------------------------------------

    def at(self, array: str) -> str:
        """``in0[i0 * 500 + i1]``: the element of `array` that the loop is at."""
        terms = [f"i{axis}" if step == 1 else f"i{axis} * {step}"
                 for axis, step in enumerate(self.steps[array]) if step]
        return f"{array}[{' + '.join(terms) or '0'}]"

    def work(self) -> int:
        return math.prod(self.sizes) * (len(self.group.nodes) + 1)

    def split(self, candidates: list[int], innermost: int | None) -> tuple[int, int] | None:
        """The axis whose blocks the cores share, and how many blocks: the outermost of
        `candidates` that cuts into enough blocks, else the one that gives the most. A block of
        the `innermost` axis keeps at least `MIN_RUN` elements, so that each is a run of
        vectors in memory of its own. None for a loop too small to share."""
        if self.work() < PARALLEL_WORK:
            return None
        blocks = {a: min(BLOCKS, self.sizes[a] // (MIN_RUN if a == innermost else 1))
                  for a in candidates}
        enough = [a for a in candidates if blocks[a] == BLOCKS]
        axis = enough[0] if enough else max(candidates, key=blocks.get, default=None)
        return None if axis is None or blocks[axis] < 2 else (axis, blocks[axis])

    def loops(self, axes: list[int], body: list[str], split: tuple | None,
              simd: str = "#pragma omp simd") -> list[str]:
        """Nested loops over `axes` around `body`, the innermost vectorised by `simd`; the
        loop over the `split` axis covers only the block's part, ``first`` to ``last``."""
        lines = body
        if simd and self.checks_casts:  # (each vector lane flags into a copy, or'ed at the end)
            simd += " reduction(|:raised)"
        if simd and self.bounds_sum:
            simd += " reduction(max:bound)"
        for depth, axis in reversed(list(enumerate(axes))):
            start, stop = ("first", "last") if split and axis == split[0] else \
                ("0", str(self.sizes[axis]))
            head = [f"for (long i{axis} = {start}; i{axis} < {stop}; i{axis}++) {{"]
            if depth == len(axes) - 1 and simd:
                head.insert(0, simd)
            lines = [*head, *_indent(lines), "}"]
        return lines

    def in_blocks(self, split: tuple[int, int] | None, inner: list[str], what: str
                  ) -> list[str]:
        """`inner` run for every block of the `split` axis, the blocks shared between the
        cores; or once, on one core, when `split` is None."""
        if split is None:
            why = "too little work to share" if self.work() < PARALLEL_WORK else \
                "no axis to cut into blocks"
            return [f"// {what}, on one core: {why}.", *inner]
        axis, blocks = split
        size = self.sizes[axis]
        return [f"// {what}, in {blocks} blocks shared between the cores.",
                "#pragma omp parallel for schedule(static) reduction(|:raised)"
                + (" reduction(max:bound)" if self.bounds_sum else ""),
                f"for (long block = 0; block < {blocks}; block++) {{",
                f"    const long first = block * {size}L / {blocks}, "
                f"last = (block + 1) * {size}L / {blocks};",
                "    feclearexcept(FE_ALL_EXCEPT);  // this core's flags, for this block",
                *_indent(inner), "    raised |= exceptions();", "}"]

    def elementwise_loops(self, names: dict[Value, str], body: list[tuple[str, str]]
                          ) -> list[str]:
        axes = list(range(len(self.sizes)))
        stores = [(f"{self.at(f'out{k}')} = {names[v]};", "") for k, v in enumerate(self.outputs)]
        split = self.split(axes, axes[-1] if axes else None)
        what = f"Every element of {self.group.elementwise_spec}"
        return self.in_blocks(split, self.loops(axes, aligned([*body, *stores]), split), what)

    # --- Reductions ---------------------------------------------------------------------------

    def accumulator(self) -> np.dtype:
        """The dtype a reduction accumulates in: the result's, or double for floats (a sum in
        double loses less than NumPy's pairwise float32 sum; a max in double is exact)."""
        result = self.group.reduction.spec.dtype
        return np.dtype(np.float64) if result.kind == "f" else result

    def combined(self, a: str, b: str, dtype: np.dtype) -> str:
        """Partial results `a` and `b` of `dtype`, combined: ``(a + b)`` for a sum."""
        return self.group.reduction.op.partials.combine.fusion.format(a, b, dtype=c_type(dtype))

    def identity(self, dtype: np.dtype) -> str:
        """Where a partial result of `dtype` starts: ``0.0`` for a sum, ``-INFINITY`` for a max."""
        return c_literal(self.group.reduction.op.partials.identity(dtype), dtype, C)

    def finished(self, total: str, dtype: np.dtype) -> str:
        """The output element made from a reduction's `total` of `dtype`: divided by the count
        for a mean, combined with the ``initial`` value if the reduction has one, in the
        result's type."""
        node = self.group.reduction
        if node.op.partials.mean:
            total = f"{total} / {self.group.reduced_count}.0"
        initial = node.params.get("initial")
        if initial is not None:
            total = self.combined(total, c_literal(initial, dtype, C), dtype)
        if node.spec.dtype == dtype and not node.op.partials.mean:
            return total
        return f"({c_type(node.spec.dtype)})" + (total if re.fullmatch(r"[\w\[\]]+", total)
                                                 else f"({total})")

    def no_elements(self) -> list[str]:
        """No element to compute: a reduction's output is what it starts from (finished: the
        mean of nothing is 0 / 0)."""
        if self.group.reduction is None:
            return [f"// {self.group.elementwise_spec} has no elements: nothing to compute."]
        dtype = self.accumulator()
        return [f"// {self.group.elementwise_spec} has no elements: each output element is "
                "where a reduction starts.",
                f"for (long i = 0; i < {self.group.reduction.spec.size}; i++) "
                f"{self.reduced}[i] = {self.finished(self.identity(dtype), dtype)};"]

    def reduction_loops(self, names: dict[Value, str], body: list[str]) -> list[str]:
        node = self.group.reduction
        reduced = [step == 0 for step in self.steps[self.reduced]]
        kept = [a for a, r in enumerate(reduced) if not r]
        dropped = [a for a, r in enumerate(reduced) if r]
        short = format_node(node).rsplit(" : ", 1)[0]
        element = (names[node.inputs[0]], node.inputs[0].dtype)
        if reduced == sorted(reduced):  # kept axes, then reduced ones (or only one kind)
            return self.trailing(kept, dropped, element, body, short)
        if reduced == sorted(reduced, reverse=True):
            return self.leading(kept, dropped, element, body, short)
        raise Declined(f"{short} leaves kept axes on both sides of a reduced one; the C kernel "
                       "reduces leading or trailing axes")

    def trailing(self, kept: list[int], dropped: list[int], element: tuple[str, np.dtype],
                 body: list[str], short: str) -> list[str]:
        """Reduced axes innermost: one accumulator per output element, or for a reduction of
        everything one per block, the blocks' parts combined in order after them."""
        dtype = self.accumulator()
        acc, identity, out = c_type(dtype), self.identity(dtype), self.at(self.reduced)
        combine = self.group.reduction.op.partials.combine.name
        simd = f"#pragma omp simd reduction({combine}:acc)" if dropped else "#pragma omp simd"
        self.openmp_reduction = bool(dropped)
        steps = [(f"acc = {self.combined('acc', _cast(*element, dtype), dtype)};", short)]
        if self.group.reduction.op.partials.combine is add and dtype.kind == "f":
            self.bounds_sum = True
            size = _cast(*element, self.bound_type())
            size = f"fabs{'f' if self.bound_type() == np.float32 else ''}({size})"
            steps.append((f"bound = {size} > bound ? {size} : bound;", "(a NaN is not greater)"))
        accumulate = aligned([*body, *steps])
        start, finish = f"{acc} acc = {identity};", f"{out} = {self.finished('acc', dtype)};"
        if kept:
            split = self.split(kept, None if dropped else kept[-1])
            inner = [start, *self.loops(dropped, accumulate, None, simd), finish]
            return self.in_blocks(split, self.loops(kept, inner, split, "" if dropped else simd),
                                  f"Each element of {self.group.reduction.spec}")
        split = self.split(dropped, dropped[-1] if dropped else None)
        everything = f"All of {self.group.elementwise_spec} into one value"
        if split is None:
            return self.in_blocks(None, [start, *self.loops(dropped, accumulate, None, simd),
                                         finish], everything)
        blocks = split[1]
        inner = [start, *self.loops(dropped, accumulate, split, simd), "part[block] = acc;"]
        return [f"{acc} part[{blocks}];  // each block's part, combined in order below: the "
                "same result however many cores", *self.in_blocks(split, inner, everything),
                start, f"for (long block = 0; block < {blocks}; block++) "
                       f"acc = {self.combined('acc', 'part[block]', dtype)};", finish]

    def bound_type(self) -> np.dtype:
        """The dtype a sum's `bound` is found in: its terms', if floats (comparing them costs
        less than converting them), else double."""
        element = self.group.elementwise_spec.dtype
        return element if element.kind == "f" else np.dtype(np.float64)

    def bound_check(self) -> list[str]:
        """The lines after a float sum that leave the result to NumPy where its partial sums
        might overflow (`SUM_BOUND`), an infinite term too."""
        result, count = self.group.reduction.spec.dtype, self.group.reduced_count
        limit = c_literal(float(np.finfo(result).max) * SUM_BOUND / count, self.bound_type(), C)
        return [f"// NumPy adds in {result.name}, in its own order: where a partial sum might "
                "overflow there, NumPy decides.",
                f"if (!(bound < {limit})) raised |= {NUMPY_DECIDES};"]

    def leading(self, kept: list[int], dropped: list[int], element: tuple[str, np.dtype],
                body: list[str], short: str) -> list[str]:
        """Reduced axes outermost: each row of the loop combines into the output's row, which
        starts at the identity, in the result's type and in row order, as NumPy adds; the
        blocks are of the kept axes."""
        dtype = self.group.reduction.spec.dtype
        out, size = self.at(self.reduced), self.group.reduction.spec.size
        combine = self.combined(out, _cast(*element, dtype), dtype)
        split = self.split(kept, kept[-1] if kept else None)
        inner = self.loops([*dropped, *kept], aligned([*body, (f"{out} = {combine};", short)]),
                           split)
        red = self.reduced
        lines = [f"for (long i = 0; i < {size}; i++) {red}[i] = {self.identity(dtype)};"
                 "  // where each output element starts",
                 *self.in_blocks(split, inner, f"Every element of {self.group.elementwise_spec}"
                                 ", into its output element")]
        finish = self.finished(f"{red}[i]", dtype)
        if finish != f"{red}[i]":
            lines.append(f"for (long i = 0; i < {size}; i++) {red}[i] = {finish};")
        return lines


def _element_type(dtype: np.dtype) -> str:
    """The C type of an array's elements. NumPy keeps a bool as one byte holding 0 or 1: read
    and written as ``unsigned char``, a loop storing comparisons is vectorised, where ``bool``
    stores keep it one element at a time (and 9 times slower). Locals stay ``bool``."""
    return "unsigned char" if dtype == np.bool_ else c_type(dtype)


def _cast(value: str, dtype: np.dtype, to: np.dtype) -> str:
    return value if dtype == to else f"({c_type(to)}){value}"


def _check(group: FusedGroup) -> None:
    """Raise `Declined` for a group the C kernel cannot compute as NumPy does."""
    values = [*group.inputs, *(n.output for n in group.members)]
    if any(None in v.shape for v in values):
        raise Declined("its shapes are known only at run time, and the C kernel is compiled "
                       "for fixed ones")
    for dtype in {v.dtype for v in values}:
        if dtype.name not in C_DTYPES:
            raise Declined(f"{dtype.name} values are left to NumPy (the C kernel computes "
                           "bool, integers, float32 and float64)")
    for node in group.members:
        for o in node.inputs:
            if not isinstance(o, Value) and not isinstance(o, bool | int | float):
                raise Declined(f"the literal {o!r} is not written in C here")
    if group.reduction is not None and group.reduction.op.partials is None:
        raise Declined(f"{group.reduction.op.name} does not say how to reduce in parts")
    if group.reduction is not None and group.reduction.op.partials.mean and \
            group.reduced_count == 0:
        raise Declined("the mean of no elements is NaN, and NumPy's warnings about it (\"Mean "
                       "of empty slice\") come from NumPy's own mean")


def _casts_float_to_integer(node: Node) -> bool:
    x = node.inputs[0]
    return node.op is astype and isinstance(x, Value) and x.dtype.kind == "f" and \
        node.spec.dtype.kind in "iu"


def _cast_check(node: Node, names: dict[Value, str]) -> tuple[str, str]:
    """The line after a float cast to an integer type that flags `NUMPY_DECIDES` where the
    value is not one the type holds once truncated (NaN fails both comparisons), and its
    comment."""
    x, to = node.inputs[0], node.spec.dtype
    low, high = _holdable(x.dtype, to)
    value = names[x]
    return (f"raised |= ({value} >= {c_literal(low, x.dtype, C)} && {value} <= "
            f"{c_literal(high, x.dtype, C)}) ? 0 : {NUMPY_DECIDES};",
            f"does {to.name} hold {x}? (else C's cast is undefined: NumPy's kernel runs)")


def _holdable(source: np.dtype, to: np.dtype) -> tuple[float, float]:
    """The least and greatest values of the float dtype `source` that, truncated, the integer
    dtype `to` holds."""
    info = np.iinfo(to)
    below, above = source.type(info.min - 1), source.type(info.max + 1)  # (rounded)
    low = below if int(below) > info.min - 1 else np.nextafter(below, source.type(math.inf))
    high = above if int(above) < info.max + 1 else np.nextafter(above, source.type(-math.inf))
    return float(low), float(high)


def _may_be_negative(operand: Any) -> bool:
    if isinstance(operand, Value):
        return operand.dtype.kind == "i"
    return operand < 0


def _indent(lines: list[str]) -> list[str]:
    return [f"    {line}" if line else line for line in lines]
