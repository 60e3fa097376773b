"""Fused kernels on the CPU in NumPy, written: one generated function per fused group, run block
by block.

Eagerly, ``tanh(x * 2 + y)`` runs three NumPy calls, and each one reads a whole array from memory
and writes a whole new one back: for arrays bigger than the CPU's caches the time goes into
moving data, not into arithmetic. A fused kernel computes the same chain one *block* of rows at a
time: the block goes through every op while it is still in the cache, each op writing into a
scratch buffer of the block's size. Each input is then read from memory once and the output
written once, as in the fused GPU kernel of `cuda_fused.py`, where one thread computes the whole
chain for one element.

The generated source is that idea and little else: a function ``block`` that runs each node's
kernel once, into a buffer (``np.multiply(in0, in1, out=s0)``), and a call that hands it to the
runtime (`numpy_runtime.in_blocks`), which also compiles the source (`numpy_kernel`): this
module writes, that one runs, as tinygrad keeps its renderers apart from its runtimes. Each
node runs its op's own kernel (`Op.kernel`), called as NumPy spells it when it is a NumPy
function and by the op's name otherwise (``relu(v3, out=s0)``), on the same operands as
eagerly (Python literals stay weak scalars), into a buffer of the dtype the node's spec
records, which is the dtype the kernel would have chosen itself: the result is NumPy's, bit
for bit.

What makes it fast, in the source:

- buffers are recycled: a value's buffer holds the next value once its last reader has run, so a
  chain of any length needs a few buffers (`buffers.py`); a result the graph returns reuses the
  memory of the last call's result when the caller dropped it (``results.empty``);
- operands without the blocked rows (broadcast ones) are read whole by every block, and a node
  computed only from such values is computed once, before the blocks (loop-invariant code
  motion);
- a final reduction folds into the blocks: one that keeps the blocked axis reduces each block
  into its rows of the output; one over the blocked axis (or over everything) reduces each block
  to a partial result and combines it into the output, as the reduction's `Op.partials` says.

When the group's shapes are only known at run time (a placeholder's ``None`` dimension), the
kernel runs the eager kernels in sequence, in one block. `numpy_source` returns the generated
text, so learners can read it in the pass stepper.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from teachflow.graph import Node, Value, format_node
from teachflow.kernels.buffers import assign_buffers
from teachflow.kernels.group import FusedGroup
from teachflow.memory.writable import takes_out
from teachflow.ops.op import Op

#: About this many elements of the result are computed per block: a block's scratch buffers
#: (1 MiB per float64 buffer) stay in the CPU's L2 cache, and the per-block Python overhead of a
#: few microseconds per op stays small beside the work.
BLOCK_ELEMENTS = 1 << 17


def numpy_source(group: FusedGroup) -> str:
    """The Python source of the fused kernel ``def <group.name>(in0, in1, ..., out=None)``."""
    return NumpyRenderer(group).source()


def _blocking(group: FusedGroup) -> tuple[int, int] | None:
    """``(rows, rows_per_block)`` along the result's leading axis, or None for one block.

    The elementwise result (before any reduction) is what gets blocked: it is the biggest array
    of the chain, the one whose traffic fusion saves.
    """
    shape = group.elementwise_spec.shape
    if not shape or None in shape:
        return None
    rows, row_size = shape[0], math.prod(shape[1:])
    if row_size == 0:
        return None
    rows_per_block = max(1, BLOCK_ELEMENTS // row_size)
    return (rows, rows_per_block) if rows > rows_per_block else None


def _dynamic(group: FusedGroup) -> bool:
    """True when some shape is known only at run time (a ``None`` dimension)."""
    values = [*group.inputs, *(n.output for n in group.nodes), *group.outputs]
    return any(None in v.shape for v in values)


class NumpyRenderer:
    """Writes one fused kernel's source: the result, the nodes of one block, the blocks' run.

    Names in the generated code: ``in0, in1, ...`` are the inputs (inside ``block``, the rows of
    those cut into blocks), ``v7`` the value of node ``%7``, ``s0, s1, ...`` the scratch buffers,
    ``out`` the result (inside ``block``, its rows). `kernels` are the ops whose kernels the
    source calls by the op's name.
    """

    def __init__(self, group: FusedGroup) -> None:
        self.group = group
        self.dynamic = _dynamic(group)
        self.blocking = None if self.dynamic else _blocking(group)
        self.names: dict[Value, str] = {v: f"in{i}" for i, v in enumerate(group.inputs)}
        self.kernels: dict[str, Op] = {}
        # The arrays the kernel writes: ``out``, or ``out0, out1, ...`` for several results.
        single = len(group.outputs) == 1
        self.results = {v: "out" if single else f"out{k}" for k, v in enumerate(group.outputs)}
        # The recycler of each result handed to the caller (see `allocation`).
        self.recyclers = {v: "results" if single else f"results{k}"
                          for k, (v, returned) in enumerate(zip(group.outputs, group.returned,
                                                                strict=True)) if returned}

    def source(self) -> str:
        group = self.group
        args = [*self.names.values(), "out=None"]
        code = self.dynamic_code() if self.dynamic else self.static_code()
        lines = [f"def {group.name}({', '.join(args)}):", *_indent(self.docstring()),
                 *_aligned(_indent(code))]
        return "\n".join([*lines, ""])

    def docstring(self) -> list[str]:
        group = self.group
        what = f"{len(group.nodes)} elementwise op(s)"
        if group.reduction is not None:
            what += f" and a {group.reduction.op.name}"
        if self.dynamic:
            how = "Shapes are known only at run time: one block, NumPy allocates every result."
        elif self.blocking:
            rows, per_block = self.blocking
            how = (f"Runs in {-(-rows // per_block)} blocks of {per_block} row(s) of the "
                   f"{rows} rows of {group.elementwise_spec};\noperands without those rows are "
                   "read whole by every block.")
        else:
            how = "The result is small: it is computed in one block."
        lines = [f'"""Fused kernel {group.name}: {what}.', "", *how.split("\n"), ""]
        lines += [f"    in{i} = {v} : {v.spec}" for i, v in enumerate(group.inputs)]
        lines += [f"    {format_node(n)}" for n in self.members(group.nodes)]
        if len(group.outputs) > 1:
            lines += ["", f"It returns {len(group.outputs)} results, the values needed outside: "
                      + ", ".join(f"{name} = {v}" for v, name in self.results.items()) + "."]
        lines.append('"""')
        return [line.replace("\\", "\\\\") for line in lines]

    def members(self, nodes: list[Node] | tuple[Node, ...]) -> list[Node]:
        """`nodes`, then the group's reduction if it has one."""
        reduction = self.group.reduction
        return [*nodes, *([reduction] if reduction is not None else [])]

    # --- Static shapes ------------------------------------------------------------------------

    def allocation(self) -> list[str]:
        """The lines that make the result arrays when the caller gives no ``out``.

        A result handed to the caller, who may drop it before the next call, reuses the last
        call's array if nobody holds it any more (``results``); an intermediate of the graph is
        new, and freed when the call ends."""
        group = self.group
        made = []
        for v in group.outputs:
            made.append(f"{self.recyclers[v]}.empty({v.shape!r}, {_dtype(v.dtype)})"
                        if v in self.recyclers
                        else f"np.empty({v.shape!r}, dtype={_dtype(v.dtype)})")
        if len(made) == 1:
            comment = ("  # last call's result, if nobody holds it any more; else new"
                       if group.returned[0] else "")
            return [f"if out is None:{comment}", f"    out = {made[0]}"]
        return ["if out is None:  # a returned result reuses the last call's array if it can",
                f"    out = ({', '.join(made)})", f"{', '.join(self.results.values())} = out"]

    def static_code(self) -> list[str]:
        group = self.group
        lines = self.allocation()
        hoisted: list[str] = []
        nodes = self.members(self.hoist(into=hoisted) if self.blocking else group.nodes)
        writes = {v.producer: name for v, name in self.results.items()
                  if v.producer in nodes and v.producer is not group.reduction}
        own = {*writes, *([group.reduction] if group.reduction is not None else [])}
        buffer_of, kinds = assign_buffers(nodes, self.block_kind, own)
        scratch = [f"s{i}" for i in range(len(kinds))]
        body = [line for node in nodes if node is not group.reduction
                for line in self.node_code(node, writes.get(node) or (
                    scratch[buffer_of[node]] if node in buffer_of else None))]
        rows_of = [name for v, name in self.results.items() if v.producer is not group.reduction
                   and (not self.blocking or self.is_blocked(v))]
        parallel = True
        if group.reduction is not None:
            reduced_rows, before, last, after = self.reduction_code(group.reduction)
            body += last
            parallel = bool(reduced_rows)  # (blocks that combine parts go one after another)
            rows_of += reduced_rows
        else:
            before, after = [], []
        if not self.blocking:
            if scratch:
                lines.append("# Scratch for the intermediate results.")
            lines += [f"{name} = np.empty({shape!r}, dtype={_dtype(dtype)})"
                      for name, (shape, dtype) in zip(scratch, kinds, strict=True)]
            return [*lines, *before, *body, *after, "return out"]
        if hoisted:
            lines += ["# The same for every block: computed once.", *hoisted]
        blocks = self.blocks_code(body, scratch, kinds, rows_of, parallel)
        return [*lines, *before, *blocks, *after, "return out"]

    def blocks_code(self, body: list[str], scratch: list[str], kinds: list, rows_of: list[str],
                    parallel: bool = True) -> list[str]:
        """``def block(...)``, computing `body` for one block, and the runtime's call that runs
        it for every block. A block gets its rows of the blocked inputs and of `rows_of` (the
        arrays it writes rows of), and its `scratch` buffers. Blocks that each add their part
        into one result are not `parallel`: they run one after another."""
        rows, per_block = self.blocking
        sliced = [self.names[v] for v in self.group.inputs if self.is_blocked(v)]
        sliced += rows_of
        buffers = ", ".join(f"({shape!r}, {_dtype(dtype)})" for shape, dtype in kinds)
        what = f"its rows of {_listed(sliced)}" + (f"; scratch {_listed(scratch)}" if scratch
                                                    else "")
        if parallel:
            how, parallel = "sharing them between the CPU's cores", ""
        else:
            how, parallel = "one after another: each adds its part", ", parallel=False"
        return ["", f"def block({', '.join([*sliced, *scratch])}):  # one block: {what}",
                *_indent(body), "",
                f"# The runtime runs every block, {how}.",
                f"in_blocks(block, rows={rows}, per_block={per_block}, "
                f"sliced=[{', '.join(sliced)}],",
                f"          scratch=[{buffers}]{parallel})"]

    def is_blocked(self, value: Value) -> bool:
        """True if `value` differs from block to block (it spans the blocked axis)."""
        return (value.ndim == self.group.elementwise_spec.ndim
                and value.shape[0] == self.blocking[0])

    def block_kind(self, value: Value) -> tuple[tuple, np.dtype]:
        """The shape and dtype of a buffer holding one block of `value`."""
        shape = (self.blocking[1], *value.shape[1:]) if self.blocking else value.shape
        return shape, value.dtype

    def hoist(self, into: list[str]) -> list[Node]:
        """Write the nodes that are the same for every block into `into`; return the others."""
        blocked = []
        for node in self.group.nodes:
            if self.is_blocked(node.output):
                blocked.append(node)
            elif node.op.view and node.output not in self.results:
                self.names[node.output] = self.names[node.inputs[0]]
            else:
                into += self.node_code(node, target=self.results.get(node.output))
        return blocked

    def node_code(self, node: Node, target: str | None) -> list[str]:
        """The line computing `node` into `target` (an array), or into a new array (None)."""
        operand = [self.names[o] if isinstance(o, Value) else _literal(o) for o in node.inputs]
        if node.op.view:  # its operand's memory, unless it is the group's result (`target`)
            if target is None:
                self.names[node.output] = operand[0]
                return [f"# {_short(node)}: the same array, no copy"]
            return [_commented(f"np.copyto({target}, {operand[0]})", _short(node))]
        name = self.names[node.output] = f"v{node.id}"
        return [_commented(f"{name} = {self.call(node.op, operand, node.params, target)}",
                           _short(node))]

    def reduction_code(self, last: Node) -> tuple[list[str], list[str], list[str], list[str]]:
        """How the reduction makes the result: the array each block writes its rows of (none
        when the blocks combine parts into it), and lines before the blocks, in each block, and
        after them.

        A reduction that keeps the blocked axis reduces each block into its rows of the result.
        One over the blocked axis reduces each block into ``part`` and combines that into the
        result, which starts at the identity of the combining op. A mean is a sum, divided at
        the end by the count, exactly as NumPy computes it (in float64 for integers, float32
        for float16: then in ``acc``, cast to the result's dtype at the end). The mean of no
        elements is NumPy's own, NaN, with its warnings ("Mean of empty slice").
        """
        spec, element = last.spec, self.group.elementwise_spec
        partials = last.op.partials
        axis, keepdims = last.params["axis"], last.params["keepdims"]
        accumulator = partials.accumulate(spec.dtype) if partials.accumulate else spec.dtype
        value = self.names[last.inputs[0]]
        result = self.results[last.output]
        if partials.mean and self.group.reduced_count == 0:
            mean = self.call(last.op, [value], last.params, None)
            return [result], [], [_commented(f"np.copyto({result}, {mean})", _short(last))], []
        dtype = f", dtype={_dtype(accumulator)}" if accumulator != element.dtype else ""

        def reduce_into(target: str) -> str:
            return (f"{value}.{partials.method}(axis={axis!r}, keepdims={keepdims!r}{dtype}, "
                    f"out={target})")

        before, per_block, after = [], [], []
        acc = result if accumulator == spec.dtype else "acc"
        if acc == "acc":
            before.append(f"acc = np.empty({spec.shape!r}, dtype={_dtype(accumulator)})")
        if self.blocking and (axis is None or 0 in axis):
            combine = partials.combine
            before += [f"part = np.empty({spec.shape!r}, dtype={_dtype(accumulator)})",
                       f"{acc}[...] = {_literal(partials.identity(accumulator))}  # the identity "
                       f"of {combine.name}: each block combines its part into it"]
            per_block += [_commented(reduce_into("part"), f"{_short(last)}: this block's part"),
                          # (as a reduction too, so that NumPy's warnings say "in reduce")
                          f"np.stack(({acc}, part)).{partials.method}(axis=0, out={acc})"]
            acc_rows = []
        else:
            per_block.append(_commented(reduce_into(acc), _short(last)))
            acc_rows = [acc]
        if partials.mean:
            after.append(_commented(f"np.true_divide({acc}, np.intp({self.group.reduced_count}), "
                                    f'out={acc}, casting="unsafe")', "mean = sum / count"))
        if acc == "acc":
            after.append(f'np.copyto({result}, acc, casting="unsafe")')
        return acc_rows, before, per_block, after

    # --- Shapes known only at run time --------------------------------------------------------

    def dynamic_code(self) -> list[str]:
        """The eager kernels one after another, NumPy allocating each result."""
        lines: list[str] = []
        for node in self.members(self.group.nodes):
            lines += self.node_code(node, target=None)
        results = [self.names[v] for v in self.group.outputs]
        if len(results) == 1:
            return [*lines, "if out is None:", f"    return np.asarray({results[0]})",
                    f"np.copyto(out, {results[0]})", "return out"]
        return [*lines, "if out is None:",
                f"    return ({', '.join(f'np.asarray({r})' for r in results)})",
                *(f"np.copyto(out[{k}], {r})" for k, r in enumerate(results)), "return out"]

    # --- Calling a kernel -----------------------------------------------------------------------

    def call(self, op: Op, operands: list[str], params: dict, target: str | None) -> str:
        """``np.multiply(v3, 2, out=s0)``: `op`'s own kernel on `operands` (source text), into
        `target` (None: a new array). A kernel that is a NumPy function is called as NumPy
        spells it; any other by the op's name (`numpy_kernel` binds the name to the kernel)."""
        kernel = op.kernel(np)
        if getattr(np, getattr(kernel, "__name__", ""), None) is kernel:
            function = f"np.{kernel.__name__}"
        else:
            function = self.kernels.setdefault(op.name, op).name
        if target is not None and not takes_out(kernel):
            raise NotImplementedError(f"op {op.name!r} has no kernel taking out=: it cannot be "
                                      "fused on the CPU")
        arguments = [*operands, *(f"{k}={_parameter(v)}" for k, v in params.items()),
                     *([f"out={target}"] if target else [])]
        return f"{function}({', '.join(arguments)})"


# --- Small helpers for the generated text ------------------------------------------------------


def _short(node: Node) -> str:
    """``%3 = add %1, %2``: the node without its spec, for the comment beside its line."""
    return format_node(node).rsplit(" : ", 1)[0]


def _literal(x: Any) -> str:
    """A Python literal operand as source. It stays a Python scalar: NumPy treats it as *weak*."""
    if isinstance(x, float) and not math.isfinite(x):
        return "np.nan" if math.isnan(x) else ("np.inf" if x > 0 else "-np.inf")
    return repr(x)


def _parameter(x: Any) -> str:
    """An op's parameter as source: ``np.float32`` for a dtype."""
    return _dtype(x) if isinstance(x, np.dtype) else _literal(x)


def _dtype(dtype: np.dtype) -> str:
    """``np.float32``: a dtype as NumPy (and CuPy) spell it."""
    dtype = np.dtype(dtype)
    return "np.bool_" if dtype == np.bool_ else f"np.{dtype.name}"


def _listed(names: list[str]) -> str:
    """``in0, in1 and out``."""
    return " and ".join([", ".join(names[:-1]), names[-1]] if len(names) > 1 else names)


#: Separates a line's code from its comment until `_aligned` lines the comments up.
_COMMENT = "\0"


def _commented(code: str, comment: str) -> str:
    return f"{code}{_COMMENT}{comment}"


def _aligned(lines: list[str]) -> list[str]:
    """The lines with their node comments lined up in one column."""
    width = max((line.index(_COMMENT) for line in lines if _COMMENT in line), default=0)
    return [f"{line[:line.index(_COMMENT)]:<{width}}  # {line[line.index(_COMMENT) + 1:]}"
            if _COMMENT in line else line for line in lines]


def _indent(lines: list[str]) -> list[str]:
    return [f"    {line}" if line else line for line in lines]
