"""A staged function called from traced code: one ``call`` node, and recursion refused.

When the code being traced calls another `tfl.function` (or one of its concrete functions), the
callee's concrete function for those arguments is found as for any call (traced once for its
own signature, and kept in its cache), and the caller's trace gets one ``call`` node owning
the callee's graph (`teachflow.execution.control.call`). The callee's trace assumed things
about the world (a name still names the weight it read, a module is still training): the
caller's trace assumes them too, so a change retraces the caller.

A node's graph is closed: it cannot write state back. A callee that updates state (in place,
or ``.grad`` through ``backward()``), reads a ``.grad``, or is given a NumPy array, has its ops
join the caller's trace instead, as a ``jax.jit`` function called inside another is inlined
(`calls_as_node` says which).

A function that calls itself, directly or through others, would trace forever: each trace
needs the callee's graph before it exists. `tracing` keeps the traces under way and refuses
that with a `TraceError` naming the cycle (``@f calls @g calls @f``).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from teachflow.core import dispatch
from teachflow.core.errors import TraceError
from teachflow.execution.control import run_call
from teachflow.execution.control.control_op import graph_function
from teachflow.tensor.tensor import Tensor

#: The functions being traced now, outermost first, each with its name.
_UNDER_WAY: list[tuple[Callable, str]] = []


@contextmanager
def tracing(fn: Callable, name: str) -> Iterator[None]:
    """The body traces `fn`; a trace of `fn` already under way is a cycle of calls."""
    for k, (other, _) in enumerate(_UNDER_WAY):
        if other is fn:
            cycle = " calls ".join(f"@{n}" for _, n in [*_UNDER_WAY[k:], (fn, name)])
            raise TraceError(f"{cycle}: a staged function that calls itself would be traced "
                             "forever, each trace needing the callee's graph before it exists",
                             op="function",
                             hint="write the recursion as a loop (tfl.while_loop, "
                                  "tfl.fori_loop), or call the plain Python function, whose "
                                  "recursion unrolls while tracing")
    _UNDER_WAY.append((fn, name))
    try:
        yield
    finally:
        _UNDER_WAY.pop()


def calls_as_node(concrete: Any, arrays: list) -> bool:
    """Can a call of `concrete` be one node? Not if it writes state back, reads a ``.grad``
    (or an argument's state at the call), or is given NumPy arrays (see the module)."""
    graph = concrete.traced.graph
    return (not arrays and not graph.updates
            and all(v.data.attr == "data" and not isinstance(v.data.owner, int)
                    for v in graph.captures)
            and all(g.what in ("binding", "assumption") for g in concrete.guards))


def call_node(concrete: Any, tensors: list[Tensor]) -> Any:
    """The call as one node of the trace under way; its results in the function's structure."""
    builder = dispatch.current_interpreter()
    graph = concrete.traced.graph
    for guard in concrete.guards:  # (what the callee assumed, the caller assumes; neither
        # kind reads the arguments)
        about = guard.slot.name if guard.slot is not None else guard.place[1]
        builder.assume(lambda guard=guard: guard.holds(()),
                       f"what @{graph.name} assumed about {about}")
    results = run_call(graph_function(graph), tensors, key=graph,
                       names=[v.name for v in graph.inputs])
    return concrete.structured(tensors, results)
