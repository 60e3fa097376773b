"""Every value of a compilation on the example inputs, summarised for the stepper's details.

A value's summary is its shape and dtype, a few numbers, and min, max and mean: a few hundred
bytes, however big the array. No array ever goes to the browser, only its summary.

The trace runs once on the example inputs, node by node (`executor.interpret`), and each result
is summarised (small ones together, a batch per shape and dtype: `summarize_many`). A node that
survives a pass keeps its id and computes the same value, so its summary serves every later
stage, and only what a pass made is new (`Values.add`):

- a constant (what `constant_fold` made) is summarised from its own data;
- a fused kernel's results are the values of its group's outputs, which the stage before had;
- any other new node is computed on its own, from the values it reads, kept from the runs
  before (while they fit in `KEEP_BYTES`). Where they are not kept, or what is new lies inside a
  graph a node owns, the stage runs whole again, as the trace did.

A control-flow node (`teachflow.execution.control`) has one result per value its branches or its
loop give, so it gets one summary per result. The values *inside* the graphs it owns are no results
of the graph around it: `interpret` runs those graphs within the node. So each graph it owns runs
once more here, on what it got the first time it ran: the branch of a ``cond`` that ran, on the
node's operands (the other branch did not run, so its nodes have no values); a loop's condition on
the carry the loop starts with, and its body in the first step (if the loop takes one); a function
called, in its first call (two calls share one graph). Each such graph gets a few words saying
which run its values are from.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from teachflow.autodiff.tape import no_grad
from teachflow.core.dispatch import bind
from teachflow.core.errors import TeachflowError, on_behalf_of
from teachflow.core.spec import short_dtype
from teachflow.execution.control.call import CALL
from teachflow.execution.control.cond import COND
from teachflow.execution.control.loops import FORI, WHILE
from teachflow.execution.executor import interpret
from teachflow.graph import Graph, Node, Value, subgraphs
from teachflow.tensor.tensor import Tensor, as_tensor

#: Values with more elements than this are summarised (shape, min, max, mean, a few numbers).
PREVIEW_ELEMENTS = 12
#: Values this small wait to be summarised together with others of their shape and dtype
#: (`summarize_many`), until this many bytes wait.
BATCH_ELEMENTS, BATCH_BYTES = 4096, 16 * 2**20
#: The computed tensors kept (by the bytes they hold) so that a later stage computes only its
#: new nodes; past this the cache is dropped, and each stage with new nodes runs whole.
KEEP_BYTES = 256 * 2**20

#: (id of the node that owns a graph, the graph's parameter name) -> what its values are from.
Notes = dict[tuple[int, str], str]


class Values:
    """The values of a compilation's stages on `inputs`, added stage by stage (`add`):
    `summaries` by value id, and `notes`, for each graph a node owns, which run its values are
    from."""

    def __init__(self, inputs: Sequence[Tensor]) -> None:
        self.inputs = list(inputs)
        self.summaries: dict[int, dict] = {}
        self.notes: Notes = {}
        self.seen: set[int] = set()  # the ids of every value of the stages added so far
        self.kept: dict[int, Tensor] | None = {}  # None: dropped (past KEEP_BYTES)
        self.kept_bytes = 0
        # Small values waiting to be summarised together, by (shape, dtype).
        self.waiting: dict[tuple, list[tuple[int, np.ndarray]]] = {}
        self.waiting_ids: set[int] = set()
        self.waiting_bytes = 0

    def add(self, graph: Graph) -> None:
        """Summarise each value of `graph` (a stage) that no stage before had."""
        new = [i for i in _value_ids(graph) if i not in self.seen]
        self.seen.update(new)
        if not new:
            return
        with np.errstate(all="ignore"), no_grad():
            on_top = {v.id for v in graph.values()}
            if not self.summaries or not on_top.issuperset(new) or not self._compute(graph):
                self._run(graph)
            self.summarize_waiting()

    def keep(self, value: Value, t: Tensor) -> None:
        """Summarise `t`, the value of `value`, unless it was (a small one waits to be
        summarised with others: `summarize_waiting`); keep it while there is room."""
        array = t.numpy()
        if value.id not in self.summaries and value.id not in self.waiting_ids:
            if array.size > BATCH_ELEMENTS:
                self.summaries[value.id] = summarize(array)
            else:
                self.waiting.setdefault((array.shape, array.dtype), []).append((value.id, array))
                self.waiting_ids.add(value.id)
                self.waiting_bytes += array.nbytes
                if self.waiting_bytes >= BATCH_BYTES:
                    self.summarize_waiting()
        if self.kept is not None and value.id not in self.kept:
            self.kept_bytes += array.nbytes
            if self.kept_bytes <= KEEP_BYTES:
                self.kept[value.id] = t
            else:
                self.kept = None

    def summarize_waiting(self) -> None:
        """Summarise the small values waiting, each batch of one shape and dtype together."""
        for batch in self.waiting.values():
            ids, arrays = zip(*batch, strict=True)
            self.summaries.update(zip(ids, summarize_many(arrays), strict=True))
        self.waiting.clear()
        self.waiting_ids.clear()
        self.waiting_bytes = 0

    def _compute(self, graph: Graph) -> bool:
        """Summarise the new values of `graph`, all of them results of its own nodes or
        constants, without running the stage whole: False if that cannot be done."""
        for v in graph.constants:
            if v.id not in self.summaries:
                self.keep(v, as_tensor(v.data))
        for node in graph.live()[0]:
            if all(v.id in self.summaries for v in node.outputs) or self._fused(node):
                continue
            if self.kept is None or subgraphs(node):
                return False
            args = [self.kept.get(o.id) if isinstance(o, Value) else o for o in node.inputs]
            if any(a is None for a in args):
                return False
            with on_behalf_of(node.source):
                result = bind(node.op, *args, **node.params)
            for v, t in zip(node.outputs, result if len(node.outputs) > 1 else (result,),
                            strict=True):
                self.keep(v, t)
        return True

    def _fused(self, node: Node) -> bool:
        """A fused kernel computes its group's outputs: give its results their summaries."""
        if self.waiting:
            self.summarize_waiting()
        group = getattr(node.op, "group", None)
        outputs = getattr(group, "outputs", ())
        if len(outputs) != len(node.outputs) or any(
                g.id not in self.summaries or g.spec != v.spec
                for v, g in zip(node.outputs, outputs, strict=True)):
            return False
        for v, g in zip(node.outputs, outputs, strict=True):
            self.summaries[v.id] = self.summaries[g.id]
            if self.kept is not None and g.id in self.kept:
                self.kept[v.id] = self.kept[g.id]
        return True

    def _run(self, graph: Graph) -> None:
        """Run the stage whole, as the trace runs."""
        # The state the graph reads, as it is now (a .grad that is None now reads as zeros).
        state = {v.data: v.data.read(self.inputs) for v in graph.captures}
        state = {slot: as_tensor(np.zeros(v.shape, v.dtype)) if t is None else t
                 for (slot, t), v in zip(state.items(), graph.captures, strict=True)}
        _run(graph, self.inputs, state, self)


def stage_values(graph: Graph, inputs: list, known: dict[int, dict]) -> tuple[dict, Notes]:
    """Each value of `graph` (and of the graphs its nodes own) on `inputs`, summarised, by value
    id; and, for each graph a node owns, which run its values are from. `known` holds the
    summaries of earlier stages and gets this stage's new ones."""
    values = Values(inputs)
    values.summaries = known
    values.kept = None  # (one stage on its own: nothing computed before to read)
    values.add(graph)
    return {i: known[i] for i in _value_ids(graph) if i in known}, values.notes


def _run(graph: Graph, inputs: Sequence[Tensor], state: dict, values: Values) -> list[Tensor]:
    """Run `graph`, summarising every value it computes into `values`; each control-flow node's
    graphs run again as they first ran (see the module docstring). Returns the graph's
    outputs."""
    env: dict[Value, Tensor] = {}  # what a control-flow node's operands are

    def keep(value: Value, t: Tensor) -> None:
        env[value] = t
        values.keep(value, t)

    for v, t in zip(graph.inputs, inputs, strict=True):
        keep(v, t)
    for v in graph.captures:
        keep(v, state[v.data])
    for v in graph.constants:
        keep(v, as_tensor(v.data))

    def on_node(node: Node, result: Any) -> None:
        for v, t in zip(node.outputs, result if isinstance(result, tuple) else (result,),
                        strict=True):
            keep(v, t)
        owned = subgraphs(node)
        if owned:
            args = [env[o] if isinstance(o, Value) else o for o in node.inputs]

            def run(key: str, sub_inputs: list) -> list[Tensor]:
                return _run(owned[key], sub_inputs, state, values)

            try:
                said = _first_runs(node, args, run)
            except TeachflowError as err:  # (it ran inside the node, so this should not be)
                said = dict.fromkeys(owned, f"not computed: {err.message}")
            values.notes.update({(node.id, key): words for key, words in said.items()})

    return interpret(graph, inputs, on_node=on_node, state=state)


def _first_runs(node: Node, args: list, run: Callable[[str, list], list]) -> dict[str, str]:
    """Run each graph `node` owns as it first ran when the node did, with `run(key, inputs)`;
    say what the values of each are from. An op this does not know gets no values inside."""
    if node.op is COND:
        taken, other = ("true_fn", "false_fn") if _true(args[0]) else ("false_fn", "true_fn")
        run(taken, args[1:])
        return {taken: "in the branch that ran on the example inputs",
                other: "none: this branch did not run on the example inputs (the other did)"}
    if node.op is WHILE:  # the condition and the body read the carry, then what else they read
        (holds,) = run("cond_fn", args)
        said = {"cond_fn": "when the loop starts, before its first step"}
        if _true(holds):
            run("body_fn", args)
            said["body_fn"] = "in the loop's first step on the example inputs"
        else:
            said["body_fn"] = "none: the loop took no step on the example inputs"
        return said
    if node.op is CALL:  # (one graph however often it is called: its first call's values)
        run("callee", args)
        return {"callee": "in the first call of this function on the example inputs"}
    if node.op is FORI:  # the body reads the step index, the carry, then what else it reads
        lower, upper = (int(a.numpy()) if isinstance(a, Tensor) else a for a in args[:2])
        if lower >= upper:
            return {"body_fn": "none: the loop takes no step (its range is empty)"}
        run("body_fn", [as_tensor(np.asarray(lower, dtype=np.int64)), *args[2:]])
        return {"body_fn": f"in the loop's first step (i = {lower}) on the example inputs"}
    return {}


def _true(t: Tensor) -> bool:
    return bool(t.numpy())


def _value_ids(graph: Graph) -> Iterator[int]:
    """The id of every value of `graph` and of the graphs its nodes own."""
    for v in graph.values():
        yield v.id
    for node in graph.nodes:
        for sub in subgraphs(node).values():
            yield from _value_ids(sub)


def summarize(array: Any) -> dict:
    """Shape, dtype, a few numbers, and for a number array min/max/mean (each to 7 significant
    digits: the stepper shows 4)."""
    array = np.asarray(array)
    shown = array if array.size <= PREVIEW_ELEMENTS else array.reshape(-1)[:PREVIEW_ELEMENTS]
    summary: dict[str, Any] = {
        "shape": list(array.shape), "dtype": _short_dtype(array.dtype),
        "preview": preview(shown), "truncated": bool(array.size > PREVIEW_ELEMENTS)}
    if array.size and array.dtype.kind in "fiu":
        with np.errstate(all="ignore"):
            low, high = array.min(), array.max()
            # (in row-major order, however the array lies in memory: as `summarize_many` adds)
            mean = np.add.reduce(array.reshape(-1), dtype=np.float64) / array.size
            if array.dtype.kind == "f" and np.isnan(low):  # (NaN wins min and max: skip it)
                with warnings.catch_warnings():  # (all NaN: "All-NaN slice", and no figures)
                    warnings.simplefilter("ignore", RuntimeWarning)
                    low, high, mean = np.nanmin(array), np.nanmax(array), np.nanmean(array)
        summary.update(min=_number(low), max=_number(high), mean=_number(mean))
    return summary


def summarize_many(arrays: Sequence[np.ndarray]) -> list[dict]:
    """`summarize` of each of `arrays`, which share one shape and one dtype: the same summaries,
    each figure computed for all of them in one NumPy call on the arrays stacked as rows.

    (A compilation has thousands of small values; one at a time, the Python around a dozen NumPy
    calls costs far more than the arithmetic: together, a summary costs little more than writing
    its numbers.)"""
    first = arrays[0]
    shape, dtype, size = first.shape, first.dtype, first.size
    if size == 0 or dtype.kind not in "biuf" or len(arrays) == 1:
        return [summarize(a) for a in arrays]
    rows = np.stack([a.reshape(-1) for a in arrays])  # (row-major: as `summarize` reads)
    shown = rows[:, :PREVIEW_ELEMENTS] if size > PREVIEW_ELEMENTS else rows
    shown_shape = (PREVIEW_ELEMENTS,) if size > PREVIEW_ELEMENTS else shape
    kind = dtype.kind
    same = {"shape": list(shape), "dtype": _short_dtype(dtype),
            "truncated": bool(size > PREVIEW_ELEMENTS)}
    summaries = [{**same, "preview": _nested(_words(numbers, kind), shown_shape)}
                 for numbers in shown.tolist()]
    if kind == "b":
        return summaries
    with np.errstate(all="ignore"):
        low, high = rows.min(axis=1), rows.max(axis=1)
        mean = np.add.reduce(rows, axis=1, dtype=np.float64) / size
        nan = np.isnan(low).tolist() if kind == "f" else ()
    for i, (summary, lo, hi, mu) in enumerate(zip(summaries, low.tolist(), high.tolist(),
                                                  mean.tolist(), strict=True)):
        if nan and nan[i]:  # (NaN wins min and max: `summarize` skips it)
            summaries[i] = summarize(arrays[i])
        else:
            summary.update(min=_number(lo), max=_number(hi), mean=_number(mu))
    return summaries


def preview(array: np.ndarray) -> str:
    """A few numbers as NumPy prints them (``[0.5, 2., -1.0213]``, ``True``), on one line.

    (`np.array2string` aligns columns and wraps lines, and takes a thousand times as long as a
    number takes to write: for every value of a big compilation, that is seconds.)"""
    if array.dtype.kind not in "biuf":
        return np.array2string(array, precision=4, separator=", ")
    return _nested(_words(array.reshape(-1).tolist(), array.dtype.kind), array.shape)


def _words(numbers: list, kind: str) -> list[str]:
    """Numbers of a dtype of `kind` (``"b"``, ``"i"``, ``"u"`` or ``"f"``) as NumPy prints them."""
    if kind == "b":
        return ["True" if x else "False" for x in numbers]
    if kind in "iu":
        return [str(x) for x in numbers]
    return _floats(numbers)


def _floats(numbers: list[float]) -> list[str]:
    """Floats as NumPy prints them at precision 4: ``2.``, ``0.5``, ``-1.0213``, and all in
    scientific notation (``1.e-07``) when they span more than NumPy writes positionally."""
    sizes = [abs(x) for x in numbers if x and x - x == 0]  # (x - x is nan for inf and nan)
    if sizes and (max(sizes) >= 1e8 or min(sizes) < 1e-4 or max(sizes) / min(sizes) > 1e3):
        return [_scientific(x) if x - x == 0 else str(x) for x in numbers]
    return [f"{x:.4f}".rstrip("0") if x - x == 0 else str(x) for x in numbers]


def _scientific(x: float) -> str:
    digits, exponent = f"{x:.4e}".split("e")
    return f"{digits.rstrip('0')}e{exponent}"


def _nested(words: list[str], shape: tuple[int, ...]) -> str:
    """Numbers in rows, as a nested list of `shape` prints."""
    if not shape:
        return words[0]
    if len(shape) == 1:
        return f"[{', '.join(words)}]"
    step = len(words) // shape[0] if shape[0] else 0
    rows = (_nested(words[k * step:(k + 1) * step], shape[1:]) for k in range(shape[0]))
    return f"[{', '.join(rows)}]"


_SHORT_DTYPES: dict[Any, str] = {}


def _short_dtype(dtype: np.dtype) -> str:
    """`short_dtype`, remembered (it is asked for every value of a compilation)."""
    name = _SHORT_DTYPES.get(dtype)
    if name is None:
        name = _SHORT_DTYPES[dtype] = short_dtype(dtype)
    return name


def _number(x: Any) -> float | None:
    x = float(x)
    return float(f"{x:.7g}") if math.isfinite(x) else None
