"""The loops of a C kernel: one loop nest over the elements of a fused group, and reductions in it.

The C kernel (`c_renderer.py`) computes every node of a group for one element in registers, each
a typed local variable (`c_expr.py`); this module writes the loops around those lines::

    #pragma omp simd
    for (long i0 = first; i0 < last; i0++) {
        const float v2 = (in0[i0] * in1[i0]);  // %2 = mul %x, %y
        const float v3 = tanhf(v2);             // %3 = tanh %2
        out0[i0] = v3;
    }

Each input is read once, each output written once, and nothing in between touches memory. What
makes the loops fast:

- vectors: ``#pragma omp simd`` has the compiler compute 8 floats at a time (AVX2);
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
is told so (``#pragma omp declare reduction``) to vectorise the accumulation. A float sum whose
terms are big enough that NumPy's partial sums might overflow says so (`NUMPY_DECIDES`), and
NumPy's kernel runs again.
"""

from __future__ import annotations

import math
import re

import numpy as np

from teachflow.graph import Value, format_node
from teachflow.kernels.c_expr import Dialect, aligned, c_literal, c_type
from teachflow.kernels.group import FusedGroup
from teachflow.ops.elementwise import add

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

#: The bit a kernel returns beside the floating-point exceptions it raised when its result may
#: not be NumPy's, and NumPy's kernel runs again, whatever `np.errstate` says: it cast a float
#: to an integer type that cannot hold it (NaN, an infinity, out of range), which C leaves
#: undefined where NumPy gives what the CPU's instructions give, warning or not as they flag
#: it; or it summed floats so big that NumPy's partial sums, in NumPy's order and the result's
#: type, might overflow where the kernel's, in its order and in double, did not (`SUM_BOUND`).
NUMPY_DECIDES = 8

#: A float sum of n terms whose greatest magnitude times n is below this fraction of the
#: result type's greatest value has no partial sum that overflows, in any order (the margin
#: covers rounding).
SUM_BOUND = 0.5


class Declined(Exception):
    """The group is left to the NumPy kernel, for the reason given."""

class LoopNest:
    """Writes the loops of one kernel over the elements of `group`, whose inputs are laid out
    with these `strides` (in elements). ``in0, in1, ...`` are the inputs, ``out0, out1, ...``
    the outputs, ``i0, i1, ...`` the loop's axes (after collapsing), ``acc`` a reduction's
    running result. The flags say what the kernel around the loops must declare."""

    def __init__(self, group: FusedGroup, strides: tuple) -> None:
        self.group = group
        self.outputs = list(group.outputs)
        element = group.elementwise_spec.shape
        operands = [broadcast(v.shape, s, element) for v, s in zip(group.inputs, strides,
                                                                    strict=True)]
        shapes = [element] * len(self.outputs)
        if group.reduction is not None:  # (the reduction's output last, its reduced axes kept)
            shapes[-1] = self.kept_shape()
        operands += [broadcast(shape, row_major_strides(shape), element) for shape in shapes]
        # The output a reduction writes: the last.
        self.reduced = f"out{len(self.outputs) - 1}"
        self.sizes, steps = collapsed(element, operands)
        self.steps = dict(zip([*(f"in{i}" for i in range(len(group.inputs))),
                               *(f"out{k}" for k in range(len(self.outputs)))], steps,
                              strict=True))
        self.openmp_reduction = False  # an inner loop reduces with the combining op
        self.checks_casts = False  # a loop flags floats cast to an integer type that lacks them
        self.bounds_sum = False  # a float sum finds its terms' greatest magnitude (`SUM_BOUND`)

    def code(self, names: dict[Value, str], body: list[tuple[str, str]]) -> list[str]:
        """The loops that compute `body` (each node's line of C, and its comment) for every
        element, and write the outputs; `names` are the inputs' elements (`at`)."""
        group = self.group
        if math.prod(group.elementwise_spec.shape) == 0:
            return self.no_elements()
        if group.reduction is None:
            return self.elementwise_loops(names, body)
        stores = [(f"{self.at(f'out{k}')} = {names[v]};", "")  # (needed outside: on the way)
                  for k, v in enumerate(self.outputs[:-1])]
        loops = self.reduction_loops(names, [*body, *stores])
        return [*loops, *self.bound_check()] if self.bounds_sum else loops

    def declarations(self) -> list[str]:
        """What the loops use beyond the exceptions raised: a float sum's bound."""
        if not self.bounds_sum:
            return []
        bound = self.bound_type()
        return [f"{c_type(bound)} bound = {c_literal(0.0, bound, C)};  // the greatest "
                "magnitude of a term summed"]

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
            lines = [*head, *indent(lines), "}"]
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
                *indent(inner), "    raised |= exceptions();", "}"]

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



# --- Shapes and strides -----------------------------------------------------------------------


def contiguous(group: FusedGroup) -> tuple[tuple[int, ...], ...]:
    """Each input's strides, in elements, when it is laid out row after row."""
    return tuple(row_major_strides(v.shape) for v in group.inputs)


def row_major_strides(shape: tuple) -> tuple[int, ...]:
    strides, step = [], 1
    for n in reversed(shape):
        strides.append(step if n > 1 else 0)
        step *= n
    return tuple(reversed(strides))


def broadcast(shape: tuple, strides: tuple, to: tuple) -> list[int]:
    """Strides over the axes of `to` of an operand broadcast to it: 0 along a stretched axis."""
    pad = len(to) - len(shape)
    return [0] * pad + [0 if n == 1 else s for n, s in zip(shape, strides, strict=True)]


def collapsed(sizes: tuple, strides: list[list[int]]) -> tuple[list[int], list[list[int]]]:
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



def _cast(value: str, dtype: np.dtype, to: np.dtype) -> str:
    return value if dtype == to else f"({c_type(to)}){value}"


def indent(lines: list[str]) -> list[str]:
    return [f"    {line}" if line else line for line in lines]
