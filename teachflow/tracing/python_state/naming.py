"""The name a trace gives a tensor from outside it: the name the user's code reaches it by.

A captured tensor shows in the graph, in errors and in the stepper by that name (``w``,
``self.w``, ``model.layers[0].w``, ``opt.state[0]``), not by a number. `CaptureNames` looks for
it first in the traced function's world (`World.roots`: the globals and closure cells its code
reaches, through what they hold, and its instance), where a name lasts beyond the call: its
`Path` is followed again at every call (see `guards.Guard`). Else in the innermost user frame,
by a local name (which lasts only for now) or inside a local's value. `tensor_places` indexes
where each tensor is reached from some roots, once per trace and once per frame.
"""

from __future__ import annotations

from typing import Any

from teachflow.core.errors import user_frame
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.python_state.places import Path, Place, walk


class CaptureNames:
    """The names one trace gives the outside tensors it captures, and the `Path` to each whose
    name lasts beyond the call."""

    def __init__(self) -> None:
        self.names: dict[Tensor, str] = {}  # an outside tensor -> its name in the graph
        self.paths: dict[Tensor, Path] = {}  # ... how that name lasts
        self._reach: dict[int, tuple[Any, dict]] = {}  # id(namespace) -> (it, tensor places)
        self._rooted: dict[Tensor, list[Place]] | None = None  # indexed once: see `find`

    def name(self, tensor: Tensor, roots: list, taken: set, fallback: str) -> str:
        """`tensor`'s name, found from `roots` (the traced function's world) or the user's
        frame, or `fallback`; made unique among `taken` and the names given before."""
        name = self.names.get(tensor)
        if name is None:
            taken = {*taken, *self.names.values()}
            found, lasting = self.find(tensor, roots)
            if lasting is not None:
                self.paths[tensor] = lasting
            base = found or fallback
            name, i = base, 1
            while name in taken:
                name, i = f"{base}_{i}", i + 1
            self.names[tensor] = name
        return name

    def find(self, tensor: Tensor, roots: list) -> tuple[str | None, Path | None]:
        """The name the code reaches `tensor` by, and the `Path` to it when that lasts beyond
        the call. First from the traced function's own world (`roots`): a global or closure
        variable of its code (or of the code it calls), and what they hold
        (``model.layers[0].w``), every link followed again at each call, so that
        ``model = Model()`` run again is seen; or inside its instance (``self.w``). Else as the
        innermost user frame reaches it: inside an object (a path from that object), or by a
        local name (no path: a loop variable may hold it only for now). A name the user gave
        (a global ``w``) is preferred to ``params[0]``."""
        if self._rooted is None:
            self._rooted = tensor_places(roots)
        found = [p for p in self._rooted.get(tensor, ()) if p.holds(tensor)]
        if found:
            best = min(found, key=lambda p: p.parent is not None)  # a name first, then BFS
            return best.name, best.path()
        frame = user_frame()
        if frame is None:
            return None, None
        known = self._reach.get(id(frame.f_locals))
        if known is None or known[0] is not frame.f_locals:  # (indexed once per frame)
            locals_ = frame.f_locals  # paths inside a local's value start at that value
            index = tensor_places([(n, v, None) for n, v in locals_.items()])
            for n, v in locals_.items():
                if isinstance(v, Tensor):
                    index.setdefault(v, []).append(Place(locals_, n, "item", ""))
            known = self._reach[id(locals_)] = (locals_, index)
        found = [p for p in known[1].get(tensor, ()) if p.holds(tensor)]
        if not found:
            return None, None
        best = min(found, key=lambda p: p.parent is None and p.container is frame.f_locals)
        if best.parent is None and best.container is frame.f_locals:
            return best.name, None  # a local name: no path that lasts
        # A path from a local's value (an object the code made, say, holding the tensor):
        # that object is kept, as later calls would make it again.
        return best.name, best.path(weak=False)


def tensor_places(roots: list[tuple[str, Any, Place | None]]) -> dict[Tensor, list[Place]]:
    """Where each tensor is reached from `roots` (``(name, value, the place holding it)``):
    the roots themselves, then places inside them, paths of attributes first (the model's
    ``model.0.weight`` before the optimizer's ``opt.params[0]``), then shortest first."""
    found: dict[Tensor, list[Place]] = {}
    for _, value, place in roots:
        if isinstance(value, Tensor) and place is not None:
            found.setdefault(value, []).append(place)
    for place, value in walk(roots, skip=(Tensor,)):
        if isinstance(value, Tensor):
            found.setdefault(value, []).append(place)
    for places in found.values():
        places.sort(key=_entries_on_the_way)
    return found


def _entries_on_the_way(place: Place) -> int:
    """How many entries of lists and dicts the way to `place` goes through, below its root."""
    count = 0
    while place.parent is not None:
        count += place.kind == "item"
        place = place.parent
    return count
