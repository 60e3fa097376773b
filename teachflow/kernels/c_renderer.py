"""Fused kernels on the CPU in C, written: one C function per fused group.

The NumPy kernel (`numpy_renderer.py`) fuses by blocks: each op still runs as its own NumPy call,
on a block small enough to stay in the cache. A C compiler goes one step further, as the GPU
kernel does (`cuda_fused.py`): one loop over the elements (`c_loops.py`), whose body computes
every node for one element in registers, each a typed local variable (`c_expr.py`). This module
writes the translation unit around the loops: the headers, the maths functions the nodes call,
the helpers C lacks, the function's signature. Compiling it and calling it is the runtime's job
(`c_runtime.py`), as tinygrad keeps its renderers apart from its runtimes.

A maths function such as ``tanhf`` runs on 8 floats at a time when glibc's libmvec has a vector
version: the kernel declares it (``__attribute__((simd))``) and links ``-lmvec``. Without one the
loop would call ``tanhf`` once per element, many times slower than NumPy's own SIMD ``tanh``, so
such a group is left to the NumPy kernel.

The C computes what NumPy computes: operands cast to NumPy's types, integers wrapping on
overflow, ``a*b + c`` rounded twice (see `native.py` for the flags). Where C cannot match NumPy
the group is *declined* (`check`), and its NumPy kernel runs: float16 and complex values, an
integer power whose exponent may be negative (NumPy raises), a maths function with no vector
version here. NumPy warns of a division by zero, an overflow or an invalid operation
(``log(-1)``) by reading the CPU's floating-point flags after each loop; so does the C kernel,
which returns them (`EXCEPTIONS`). Where C's result may not be NumPy's at all, the kernel says
so as well (`NUMPY_DECIDES`): a float cast to an integer type that cannot hold it (NaN, inf, out
of range: undefined in C), a float sum whose terms are big enough that NumPy's partial sums
might overflow. The mean of no elements is left to NumPy, whose mean warns of it.

`c_source` is the translation unit, for reading. An input whose memory is not laid out row
after row (a transposed view) gets a kernel of its own, with its strides in the source.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

import numpy as np

from teachflow.graph import Node, Value, format_node
from teachflow.kernels import native
from teachflow.kernels.c_expr import (
    Dialect,
    c_literal,
    c_type,
    computed_type,
    function_calls,
    fusion_of,
    node_line,
)
from teachflow.kernels.c_loops import (
    NUMPY_DECIDES,
    C,
    Declined,
    LoopNest,
    contiguous,
    indent,
    row_major_strides,
)
from teachflow.kernels.group import FusedGroup
from teachflow.ops.elementwise import astype

#: The floating-point exceptions a kernel reports, as bits of the number it returns, by the
#: names `np.errstate` gives them.
EXCEPTIONS = {"divide": 1, "over": 2, "invalid": 4}

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
    # NumPy rounds an integer to itself, keeping its type.
    Helper("iub", "static inline {t} floor_{n}({t} x) {{ return x; }}"),
    Helper("iub", "static inline {t} ceil_{n}({t} x) {{ return x; }}"),
)


def c_source(group: FusedGroup) -> str:
    """The C translation unit computing `group`, with ``int <group.name>(in0, ..., out0, ...)``;
    or, for a group the C kernel declines, a C comment saying why."""
    found = native.compiler()
    try:
        check(group)
        return CRenderer(group, contiguous(group), found).source()
    except Declined as declined:
        return f"// {group.name}: no C kernel, NumPy runs this group: {declined}.\n"


class CRenderer:
    """Writes one kernel's C: ``int <name>(const T *restrict in0, ..., U *restrict out0, ...)``,
    which returns the floating-point exceptions raised.

    Names in the C: ``in0, in1, ...`` are the inputs, ``out0, out1, ...`` the outputs, ``v7``
    the value of node ``%7`` for one element; the loops name the rest (`LoopNest`). `maths`
    says how each C maths function called compiles (see `native.vector_function`); `declared`
    are those with a vector version.
    """

    def __init__(self, group: FusedGroup, strides: tuple, found: native.Compiler | str) -> None:
        self.group, self.compiler = group, found
        self.strides = strides
        self.outputs = list(group.outputs)
        self.maths: dict[str, tuple[str, int, str]] = {}  # tanhf: C type, arity, how it compiles
        self.helpers: dict[str, str] = {}  # abs_int32: its definition
        self.spelled: dict[tuple[str, np.dtype], str] = {}  # (tanh, float32): tanhf
        self.dialect = Dialect(C.nan, C.inf, lambda name, dtype: self.spelled[name, dtype])
        self.nest = LoopNest(group, strides)

    @property
    def declared(self) -> list[str]:
        """The maths functions called in their libmvec vector versions."""
        return [name for name, (_, _, kind) in self.maths.items() if kind == "libmvec"]

    def source(self) -> str:
        """The translation unit: what the kernel computes, the helpers its nodes call, and the
        function: a line of C per node, in the loops of `LoopNest`."""
        nest = self.nest
        names = {v: nest.at(f"in{i}") for i, v in enumerate(self.group.inputs)}
        body = []
        for node in self.group.nodes:
            for name, arity in function_calls(fusion_of(node)):
                self.spell(name, arity, node)
            body.append(node_line(node, names, self.dialect))
            if _casts_float_to_integer(node):
                body.append(_cast_check(node, names))
                nest.checks_casts = True
        loops = nest.code(names, body)
        start = ["int raised = 0;  // the exceptions raised, returned at the end",
                 *nest.declarations(), "feclearexcept(FE_ALL_EXCEPT);"]
        return "\n".join([*self.header(), "", *self.preamble(), *self.signature(),
                          *indent([*start, *loops, "return raised | exceptions();"]), "}", ""])

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
        if self.strides[i] == row_major_strides(value.shape):
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
        if self.nest.checks_casts:
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
        nest = self.nest
        if nest.openmp_reduction:
            combine = self.group.reduction.op.partials.combine.name
            dtype = nest.accumulator()
            lines += [f"// Two partial results combine as {combine} computes them, each starting "
                      f"at {nest.identity(dtype)}.",
                      f"#pragma omp declare reduction({combine} : {c_type(dtype)} : omp_out = "
                      f"{nest.combined('omp_out', 'omp_in', dtype)}) initializer(omp_priv = "
                      f"{nest.identity(dtype)})", ""]
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


def _element_type(dtype: np.dtype) -> str:
    """The C type of an array's elements. NumPy keeps a bool as one byte holding 0 or 1: read
    and written as ``unsigned char``, a loop storing comparisons is vectorised, where ``bool``
    stores keep it one element at a time (and 9 times slower). Locals stay ``bool``."""
    return "unsigned char" if dtype == np.bool_ else c_type(dtype)


def check(group: FusedGroup) -> None:
    """Raise `Declined` for a group the C kernel cannot compute as NumPy does (a node's maths
    function may decline it too, as it is spelled: `CRenderer.spell`)."""
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
