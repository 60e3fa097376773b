"""Running a hand-built graph: ``tfl.Session(graph).run(fetches, feed={...})``.

This is TensorFlow 1's define-and-run interface. Building the graph computed nothing; `run`
computes the *fetched* tensors from the *fed* placeholders, and only the part of the graph the
fetches need (deferred execution). Each distinct set of fetches is compiled once, like a
`tfl.function`, and reused.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.core.backends import get_backend
from teachflow.core.errors import DTypeError, ShapeError, TeachflowError
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.executor import Executor, explain_failure
from teachflow.execution.pieces import executor_for
from teachflow.graph import Graph, Value
from teachflow.tensor.tensor import Tensor


class Session:
    """Runs fetches of one graph, feeding its placeholders."""

    def __init__(self, graph: Graph) -> None:
        if not isinstance(graph, Graph):
            raise TeachflowError(f"a Session runs a Graph, not {type(graph).__name__}",
                                 op="Session", hint="build one with `with tfl.Graph() as g:` "
                                                    "and pass it: tfl.Session(g)")
        self.graph = graph
        self._executors: dict[tuple[Value, ...], Executor] = {}

    def run(self, fetches: Any, feed: dict | None = None) -> Any:
        """Compute `fetches` (a tensor, or a list/tuple/dict of them) with `feed` giving a value
        for every placeholder they depend on. Returns NumPy arrays in the same structure."""
        leaves, treedef = tree_flatten(fetches)
        outputs = [self._fetch_value(t) for t in leaves]
        needed = _placeholders_needed(self.graph, outputs)
        values = self._feed_values(feed or {}, needed)
        key = tuple(outputs)
        executor = self._executors.get(key)
        if executor is None:
            device = needed[0].spec.device if needed else "cpu"
            executor = executor_for(self.graph, get_backend(device), outputs, needed)
            self._executors[key] = executor
        fed = [Tensor._make(values[v], get_backend(v.spec.device), None) for v in needed]
        try:
            arrays = executor(*[values[v] for v in needed],
                              *[c.data.read()._data for c in executor.captures])
        except Exception as exc:  # sizes left open (None) may still disagree when fed
            raise explain_failure(self.graph, fed, outputs, input_values=needed) from exc
        backend = get_backend(needed[0].spec.device if needed else "cpu")
        fed = [values[v] for v in needed]
        return tree_unflatten(treedef, [_own(backend.to_numpy(a), fed) for a in arrays])

    def _fetch_value(self, fetch: Any) -> Value:
        data = fetch._data if isinstance(fetch, Tensor) else None
        if not isinstance(data, Value) or not self.graph.owns(data):
            raise TeachflowError(f"cannot fetch {fetch!r}: it is not a tensor of this graph",
                                 op="Session.run",
                                 hint="fetch tensors that were built inside `with graph:`")
        return data

    def _feed_values(self, feed: dict, needed: list[Value]) -> dict[Value, Any]:
        if not isinstance(feed, dict):
            raise TeachflowError(f"feed is a dict from placeholders to values, not "
                                 f"{type(feed).__name__}", op="Session.run",
                                 hint="feed={x: np.ones((2, 3))}")
        placeholders = set(self.graph.inputs)
        given: dict[int, Any] = {}
        for key, value in feed.items():
            data = key._data if isinstance(key, Tensor) else None
            if not isinstance(data, Value) or data not in placeholders:
                raise TeachflowError(f"feed key {key!r} is not a placeholder of this graph",
                                     op="Session.run",
                                     hint="feed the tensors that tfl.placeholder returned")
            given[data] = _check_feed(data, value)
        missing = [str(v) for v in needed if v not in given]
        if missing:
            raise TeachflowError(f"the fetches need placeholder(s) {', '.join(missing)}, "
                                 "which were not fed", op="Session.run",
                                 hint="add them to feed={placeholder: value, ...}")
        return given


def _own(result: np.ndarray, fed: list) -> np.ndarray:
    """A fetched array of its own: a copy where it is (a view of) what was fed (fetching a
    placeholder, or a reshape of one), so writing to the feed later cannot change it."""
    shared = any(isinstance(f, np.ndarray) and np.shares_memory(result, f) for f in fed)
    return result.copy() if shared else result


def _placeholders_needed(graph: Graph, outputs: list[Value]) -> list[Value]:
    used = graph.live(outputs)[1]
    return [v for v in graph.inputs if v in used]


def _check_feed(placeholder: Value, value: Any) -> Any:
    """The fed value as an array of the placeholder's dtype, if its shape and kind fit."""
    spec = placeholder.spec
    try:
        array = value.numpy() if isinstance(value, Tensor) else np.asarray(value)
    except ValueError as exc:  # a ragged list
        raise ShapeError(f"the value fed to placeholder {placeholder} is not an array: {exc}",
                         op="Session.run", hint="feed a NumPy array, or nested lists whose rows "
                                                "have equal lengths") from None
    if not np.can_cast(array.dtype, spec.dtype, casting="same_kind"):
        raise DTypeError(f"placeholder {placeholder} is {spec.dtype.name} but was fed "
                         f"{array.dtype.name} values", op="Session.run",
                         hint=f"feed {spec.dtype.name} data, or build the placeholder with the "
                              "dtype you have")
    if len(array.shape) != len(spec.shape) or any(
            d is not None and d != s for d, s in zip(spec.shape, array.shape, strict=True)):
        raise ShapeError(f"placeholder {placeholder} has shape {spec.shape} but was fed shape "
                         f"{array.shape}", op="Session.run",
                         hint="None in a placeholder's shape accepts any size there")
    return get_backend(spec.device).asarray(array, dtype=spec.dtype)
