"""Fused kernels on the CPU: one generated NumPy function per fused group, run block by block.

Eagerly, ``tanh(x * 2 + y)`` runs three NumPy calls, and each one reads a whole array from memory
and writes a whole new one back: for arrays bigger than the CPU's caches the time goes into
moving data, not into arithmetic. A fused kernel computes the same chain one *block* at a time:
a block of rows of the result (about `BLOCK_ELEMENTS` elements) goes through every op while it
is still in the cache, in scratch buffers that are allocated once per call and reused by every
block. Each input is then read from memory once and the output written once, as in the fused
GPU kernel of `cuda_fused.py`, where one thread computes the whole chain for one element.

The generated function keeps NumPy's exact semantics because it calls the very ufuncs the eager
kernels call (or NumPy functions that take ``out=`` as ufuncs do, such as ``np.clip``), in the
same order, with the same operands (Python literals stay weak scalars), and only adds ``out=``:
each scratch buffer has the dtype the node's spec records, which is the dtype the ufunc would
have chosen itself. Three ops need more than one call: `sigmoid` repeats its eager
formula step by step in its buffer, `where` (which has no ``out=``) becomes two `np.copyto`, and
`astype` is a `np.copyto` with unsafe casting, as ``x.astype`` does.

Three more ideas make the blocks cheap:

- *Broadcast operands are not blocked.* An input with fewer dimensions than the result, or size
  1 along the blocked (leading) axis, is the same for every block, so every block reads it whole;
  a node computed only from such values is computed once, before the loop (loop-invariant code
  motion).
- *Buffers are recycled.* Once a value's last use has run, its buffer holds the next value of the
  same shape and dtype, often in place (``np.tanh(v3, out=v3)``): a chain of any length needs a
  few buffers, not one per op.
- *A final reduction folds into the loop.* A reduction that keeps the blocked axis reduces each
  block into its own slice of the output; one over the blocked axis (or over everything) reduces
  each block to a partial result and combines it into an accumulator that starts at the
  reduction's identity (0 for a sum, the smallest value for a max).

Independent blocks are shared between the CPU's cores, and the memory of a result the caller
dropped is handed back for the next call (`runtime.py` says why both matter). Only a result
the graph returns is kept for that: an intermediate of the graph is freed when the call ends.

When the group's shapes are only known at run time (a placeholder's ``None`` dimension), the
kernel runs the eager kernels in sequence, in one block. `numpy_source` returns the generated
text, so learners can read it in the pass stepper; `numpy_kernel` compiles it.
"""

from __future__ import annotations

import inspect
import math
import re
from collections.abc import Callable
from types import ModuleType
from typing import Any

import numpy as np

from teachflow.errors import compile_at_user_lines
from teachflow.graph import Node, Value, format_node
from teachflow.kernels.group import FusedGroup
from teachflow.kernels.runtime import Recycler, in_parallel

#: About this many elements of the result are computed per block: a block's scratch buffers
#: (1 MiB per float64 buffer) stay in the CPU's L2 cache, and the per-block Python overhead of a
#: few microseconds per op stays small beside the work.
BLOCK_ELEMENTS = 1 << 17

#: Ops that only pass their operand on: their value is their operand's, with no copy.
_ALIASES = ("identity", "stop_gradient")


def numpy_source(group: FusedGroup) -> str:
    """The Python source of the fused kernel ``def <group.name>(in0, in1, ..., out=None)``."""
    return _KernelWriter(group).source()


def numpy_kernel(group: FusedGroup, xp: ModuleType = np) -> Callable[..., Any]:
    """Compile `numpy_source(group)` against the array module `xp` (NumPy, or CuPy) and return the
    function. It takes the arrays of ``group.inputs`` in order and an optional ``out`` array of the
    group's result spec to fill in place; it returns the result."""
    source = numpy_source(group)
    namespace: dict[str, Any] = {"np": xp, "in_parallel": in_parallel, "results": Recycler(xp),
                                 "__name__": "teachflow.generated"}
    # Each line that computes a node runs as the user's line of that node (its comment names
    # it: ``# %3 = mul ...``), so a NumPy warning in the kernel is shown there.
    sources = {n.id: n.source for n in group.nodes}
    places = {}
    for number, line in enumerate(source.splitlines(), start=1):
        found = re.search(r"# %(\d+)\b", line)
        if found:
            places[number] = sources.get(int(found.group(1)))
    code = compile_at_user_lines(source, places, f"<teachflow fused kernel: {group.name}>")
    exec(code, namespace)  # the source was generated from the group's own nodes, not user text
    return namespace[group.name]


# --- Deciding how to block --------------------------------------------------------------------


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
    values = [*group.inputs, *(n.output for n in group.nodes), group.output]
    return any(None in v.shape for v in values)


# --- Writing the source -----------------------------------------------------------------------


class _KernelWriter:
    """Writes one fused kernel's source: the header, the scratch buffers, then the block loop.

    Names in the generated code: ``in0, in1, ...`` are the inputs, ``in0_blk`` an input's rows of
    the current block, ``v7`` the value of node ``%7``, ``s0, s1, ...`` the scratch buffers.
    """

    def __init__(self, group: FusedGroup) -> None:
        self.group = group
        self.dynamic = _dynamic(group)
        self.blocking = None if self.dynamic else _blocking(group)
        self.names: dict[int, str] = {}  # id(Value) -> its name in the generated code
        self.buffers: list[tuple[str, tuple, np.dtype]] = []  # (name, shape, dtype)
        self.hoisted: list[str] = []  # lines before the loop: nodes the same for every block
        self.body: list[str] = []  # lines run for every block

    # --- Values, blocks and buffers -----------------------------------------------------------

    def is_blocked(self, value: Value) -> bool:
        """True if `value` differs from block to block (it spans the blocked axis)."""
        rows = self.blocking[0]
        return value.ndim == self.group.elementwise_spec.ndim and value.shape[0] == rows

    def operand(self, o: Any) -> str:
        return self.names[id(o)] if isinstance(o, Value) else _literal(o)

    def view(self, buffer: str) -> str:
        """A buffer as this block sees it: the last block may have fewer rows."""
        return f"{buffer}[:rows]" if self.blocking else buffer

    def new_buffer(self, shape: tuple, dtype: np.dtype) -> str:
        name = f"s{len(self.buffers)}"
        self.buffers.append((name, shape, dtype))
        return name

    # --- The whole function -------------------------------------------------------------------

    def source(self) -> str:
        group = self.group
        args = [f"in{i}" for i in range(len(group.inputs))]
        for value, name in zip(group.inputs, args, strict=True):
            self.names[id(value)] = name
        code = self.dynamic_code() if self.dynamic else self.static_code()
        header = f"def {group.name}({', '.join([*args, 'out=None'])}):"
        lines = [header, *_indent(self.docstring()), *_aligned(_indent(code))]
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
        lines += [f"    {format_node(n)}" for n in self.all_nodes()]
        lines.append('"""')
        return [line.replace("\\", "\\\\") for line in lines]

    def all_nodes(self) -> list[Node]:
        reduction = self.group.reduction
        return [*self.group.nodes, *([reduction] if reduction is not None else [])]

    # --- Static shapes: scratch buffers, blocks --------------------------------------------

    def static_code(self) -> list[str]:
        group = self.group
        blocked_nodes = self.plan_nodes()
        loop: list[str] = []
        if self.blocking:
            rows, per_block = self.blocking
            loop.append(f"stop = min(start + {per_block}, {rows})")
            loop.append("rows = stop - start")
            for i, value in enumerate(group.inputs):
                if self.is_blocked(value):
                    loop.append(f"in{i}_blk = in{i}[start:stop]")
                    self.names[id(value)] = f"in{i}_blk"
        out_rows = "out[start:stop]" if self.blocking else "out"
        self.write_nodes(blocked_nodes, None if group.reduction else out_rows)
        before, per_block_reduce, after = self.reduction_code()
        loop += self.body + per_block_reduce

        spec = group.spec
        if group.returned:  # handed to the caller, who may drop it before the next call
            lines = ["if out is None:  # last call's result, if nobody holds it any more; else new",
                     f"    out = results.empty({spec.shape!r}, {_dtype(spec.dtype)})"]
        else:  # an intermediate of the graph: freed when the call ends
            lines = ["if out is None:",
                     f"    out = np.empty({spec.shape!r}, dtype={_dtype(spec.dtype)})"]
        scratch = [f"{name} = np.empty({shape!r}, dtype={_dtype(dtype)})"
                   for name, shape, dtype in self.buffers]
        if self.blocking and not before:
            # Blocks are independent: the CPU's cores share them out, each with its own scratch
            # (NumPy releases the GIL inside ufuncs, so the threads really run in parallel).
            if self.hoisted:
                lines += ["# The same for every block: computed once.", *self.hoisted]
            rows, per_block = self.blocking
            lines += ["def blocks(first, last):  # one thread's share of the blocks",
                      *_indent(["# Scratch: allocated once, reused by each of its blocks.",
                                *scratch,
                                f"for start in range(first, last, {per_block}):",
                                *_indent(loop)]),
                      f"in_parallel(blocks, {rows}, {per_block})"]
            return [*lines, *after, "return out"]
        if scratch or before:
            lines.append("# Scratch: allocated once, reused by every block." if self.blocking
                         else "# Scratch for the intermediate results.")
        lines += scratch
        lines += before
        if self.hoisted:
            lines.append("# The same for every block: computed once.")
            lines += self.hoisted
        if self.blocking:
            rows, per_block = self.blocking
            lines.append(f"for start in range(0, {rows}, {per_block}):")
            lines += _indent(loop)
        else:
            lines += loop
        return [*lines, *after, "return out"]

    def plan_nodes(self) -> list[Node]:
        """Name the nodes; write the loop-invariant ones into `hoisted` and return the others."""
        blocked = []
        for node in self.group.nodes:
            if self.blocking and not self.is_blocked(node.output):
                if _is_alias(node):
                    self.names[id(node.output)] = self.operand(node.inputs[0])
                else:
                    self.write_node(node, target=None, into=self.hoisted)
            else:
                blocked.append(node)
        return blocked

    def write_nodes(self, nodes: list[Node], final_target: str | None) -> None:
        """Write the per-block nodes, each into a scratch buffer that is free at that point.

        A buffer is free once every value stored in it has had its last use. An op that may
        write over its own operand (any ufunc may) takes the buffer of an operand it reads for
        the last time. The last node writes into `final_target` (the output's rows) when there
        is no reduction.
        """
        root: dict[int, int] = {}  # id(value) -> id(the value whose storage it shares)
        last_use: dict[int, int] = {}  # id(storage value) -> index of the last node reading it
        for i, node in enumerate(nodes):
            for o in node.inputs:
                if isinstance(o, Value):
                    last_use[root.get(id(o), id(o))] = i
            if _is_alias(node):
                source = node.inputs[0]
                root[id(node.output)] = root.get(id(source), id(source))
        if nodes and self.group.reduction is not None:  # the reduction reads the last value
            last = nodes[-1].output
            last_use[root.get(id(last), id(last))] = len(nodes)

        holder: dict[int, tuple[str, tuple]] = {}  # id(storage value) -> its buffer and key
        free: dict[tuple, list[str]] = {}  # (shape, dtype) -> buffers free for reuse

        def release(upto: int) -> None:
            for storage, (buffer, key) in list(holder.items()):
                if last_use.get(storage, -1) <= upto:
                    free.setdefault(key, []).append(buffer)
                    del holder[storage]

        for i, node in enumerate(nodes):
            if i == len(nodes) - 1 and final_target is not None:
                self.write_node(node, target=final_target, into=self.body)
            elif _is_alias(node):
                self.names[id(node.output)] = self.operand(node.inputs[0])
                self.body.append(f"# {_short(node)}: the same array, no copy")
            else:
                # where and astype write their result before reading all operands: no reuse.
                release(i if node.op.name not in ("where", "astype") else i - 1)
                key = (self.block_shape(node.output), node.output.dtype)
                buffer = free[key].pop() if free.get(key) else self.new_buffer(*key)
                holder[id(node.output)] = (buffer, key)
                self.write_node(node, target=self.view(buffer), into=self.body)
            release(i)

    def block_shape(self, value: Value) -> tuple:
        return (self.blocking[1], *value.shape[1:]) if self.blocking else value.shape

    def write_node(self, node: Node, target: str | None, into: list[str]) -> None:
        """Append the lines computing `node` into `target` (an array expression), or into a new
        array when `target` is None."""
        name = f"v{node.id}"
        self.names[id(node.output)] = name
        args = [self.operand(o) for o in node.inputs]
        lines = _node_code(node, name, args, target)
        into.append(_commented(lines[0], _short(node)))
        into += lines[1:]

    # --- The reduction --------------------------------------------------------------------------

    def reduction_code(self) -> tuple[list[str], list[str], list[str]]:
        """The reduction's lines: before the loop, in every block, after the loop.

        A reduction that keeps the blocked axis reduces each block into its rows of the output.
        One over the blocked axis reduces each block into ``part`` and combines that into the
        output, which starts at the reduction's identity. A mean is a sum, divided at the end
        by the count, exactly as NumPy computes it (in float64 for integers, float32 for
        float16: then in ``acc``, cast to the result's dtype at the end).
        """
        node = self.group.reduction
        if node is None:
            return [], [], []
        name, spec = node.op.name, node.spec
        axis, keepdims = node.params["axis"], node.params["keepdims"]
        accumulator = _mean_accumulator(spec.dtype) if name == "mean" else spec.dtype
        value = self.names[id(self.group.nodes[-1].output)]
        method, dtype = ("sum", f", dtype={_dtype(accumulator)}") if name == "mean" else (name, "")

        def reduce_into(target: str) -> str:
            return f"{value}.{method}(axis={axis!r}, keepdims={keepdims!r}{dtype}, out={target})"

        before, per_block, after = [], [], []
        acc = "out" if accumulator == spec.dtype else "acc"
        if acc == "acc":
            before.append(f"acc = np.empty({spec.shape!r}, dtype={_dtype(accumulator)})")
        if self.blocking and (axis is None or 0 in axis):
            before.append(f"part = np.empty({spec.shape!r}, dtype={_dtype(accumulator)})")
            combine = "maximum" if name == "max" else "add"
            before.append(f"{acc}[...] = {_identity(name, accumulator)}  # the identity of "
                          f"{combine}: each block combines its part into it")
            per_block.append(_commented(reduce_into("part"), f"{_short(node)}: this block's part"))
            per_block.append(f"np.{combine}({acc}, part, out={acc})")
        else:
            target = f"{acc}[start:stop]" if self.blocking else acc
            per_block.append(_commented(reduce_into(target), _short(node)))
        if name == "mean":
            count = _count(self.group.elementwise_spec.shape, axis)
            after.append(_commented(f"np.true_divide({acc}, np.intp({count}), out={acc}, "
                                    'casting="unsafe")', "mean = sum / count"))
            if acc == "acc":
                after.append('np.copyto(out, acc, casting="unsafe")')
        return before, per_block, after

    # --- Shapes known only at run time --------------------------------------------------------

    def dynamic_code(self) -> list[str]:
        """The eager kernels one after another, NumPy allocating each result."""
        lines: list[str] = []
        for node in self.group.nodes:
            if _is_alias(node):
                self.names[id(node.output)] = self.operand(node.inputs[0])
            else:
                self.write_node(node, target=None, into=lines)
        result = self.names[id(self.group.nodes[-1].output)]
        node = self.group.reduction
        if node is not None:
            axis, keepdims = node.params["axis"], node.params["keepdims"]
            call = f"{result}.{node.op.name}(axis={axis!r}, keepdims={keepdims!r})"
            lines.append(_commented(f"result = {call}", _short(node)))
            result = "result"
        return [*lines, "if out is None:", f"    return np.asarray({result})",
                f"np.copyto(out, {result})", "return out"]


# --- One node's code ------------------------------------------------------------------------


def _node_code(node: Node, name: str, args: list[str], target: str | None) -> list[str]:
    """The lines computing `node` from `args` into `target`, naming the result `name`.

    With ``target=None`` the lines are the eager kernel itself (NumPy allocates the result).
    """
    op = node.op.name
    out = f", out={target}" if target else ""
    if _is_alias(node):  # written only as the last node: copy into the output's rows
        return [f"np.copyto({target}, {args[0]})"]
    if op == "relu":
        return [f"{name} = np.maximum({args[0]}, 0{out})"]
    if op == "sigmoid":  # exp(-log(1 + e^-x)): 1 / (1 + e^-x) without overflow, as eagerly
        x = args[0]
        if target is None:
            return [f"{name} = np.exp(-np.logaddexp(0, -{x}))"]
        return [f"{name} = np.negative({x}{out})", f"np.logaddexp(0, {name}, out={name})",
                f"np.negative({name}, out={name})", f"np.exp({name}, out={name})"]
    if op == "where":
        cond, x, y = args
        if target is None:
            return [f"{name} = np.where({cond}, {x}, {y})"]
        if isinstance(node.inputs[0], Value) and node.inputs[0].dtype != np.bool_:
            cond = f"({cond} != 0)"  # copyto's mask must be boolean; np.where takes truthiness
        elif not isinstance(node.inputs[0], Value):
            cond = repr(bool(node.inputs[0]))
        lines = [f"{name} = {target}"]
        for operand, text, mask in ((node.inputs[2], y, ""), (node.inputs[1], x, cond)):
            mask = f", where={mask}" if mask else ""
            if isinstance(operand, Value):
                lines.append(f"np.copyto({name}, {text}{mask})")
            else:  # np.where makes an array of a literal, then casts it: -3 is 253 in uint8
                lines.append(f'np.copyto({name}, np.asarray({text}){mask}, casting="unsafe")')
        return lines
    if op == "astype":
        if target is None:
            return [f"{name} = {args[0]}.astype({_dtype(node.spec.dtype)})"]
        return [f"{name} = {target}", f'np.copyto({name}, {args[0]}, casting="unsafe")']
    kernel = node.op.kernel(np)
    if not _writes_into_out(kernel):
        raise NotImplementedError(f"no NumPy fusion rule for op {op!r}")
    return [f"{name} = np.{kernel.__name__}({', '.join(args)}{out})"]


def _writes_into_out(kernel: Any) -> bool:
    """True for a ufunc, or a function of NumPy's namespace that takes ``out=`` (``np.clip``):
    the generated code can call it as ``np.<name>(..., out=buffer)``."""
    if isinstance(kernel, np.ufunc):
        return True
    if getattr(np, getattr(kernel, "__name__", ""), None) is not kernel:
        return False
    try:
        return "out" in inspect.signature(kernel).parameters
    except (TypeError, ValueError):  # no signature to read
        return False


def _is_alias(node: Node) -> bool:
    """True for ops that pass their operand on unchanged (a cast to its own dtype included)."""
    if node.op.name in _ALIASES:
        return True
    source = node.inputs[0]
    return node.op.name == "astype" and isinstance(source, Value) and \
        source.dtype == node.spec.dtype


# --- Small helpers for the generated text ------------------------------------------------------


def _short(node: Node) -> str:
    """``%3 = add %1, %2``: the node without its spec, for the comment beside its line."""
    return format_node(node).rsplit(" : ", 1)[0]


def _literal(x: Any) -> str:
    """A Python literal operand as source. It stays a Python scalar: NumPy treats it as *weak*."""
    if isinstance(x, float) and not math.isfinite(x):
        return "np.nan" if math.isnan(x) else ("np.inf" if x > 0 else "-np.inf")
    return repr(x)


def _dtype(dtype: np.dtype) -> str:
    """``np.float32``: a dtype as NumPy (and CuPy) spell it."""
    dtype = np.dtype(dtype)
    return "np.bool_" if dtype == np.bool_ else f"np.{dtype.name}"


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


def _mean_accumulator(dtype: np.dtype) -> np.dtype:
    """The dtype NumPy's mean adds up in, given the mean's result dtype: float32 for float16
    results, else the result's own dtype (float64 for the mean of integers)."""
    return np.dtype(np.float32) if dtype == np.float16 else np.dtype(dtype)


def _identity(name: str, dtype: np.dtype) -> str:
    """The value a reduction starts from: it changes nothing when combined with any element."""
    if name != "max":
        return "0"
    if dtype.kind == "f":
        return "-np.inf"
    if dtype.kind == "b":
        return "False"
    return repr(int(np.iinfo(dtype).min))


def _count(shape: tuple, axis: tuple | None) -> int:
    """How many elements each result element of a reduction over `axis` reduces."""
    return math.prod(shape[a] for a in (range(len(shape)) if axis is None else axis))
