"""The containers around a trace, as they were before it: what a trace leaked is found here.

A Python assignment inside traced code (``self.w = ...``, ``d["m"] = ...``, ``Counter.total =
...``) runs once, while tracing. If it stores a tensor of the trace, that place would keep a
symbolic tensor with no values. So before a trace, `contents_of` takes the contents of every
mutable container reachable from the traced code's roots; afterwards, its `Contents` say what
`changed`, and can `put_back` what was there.
"""

from __future__ import annotations

import collections
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

from teachflow.tracing.python_state.places import Place, opaque, places_in, walk


@dataclass(eq=False)
class Contents:
    """A mutable container's contents before the trace, so that what the trace left in it can
    be found and put back."""

    name: str | Place
    container: Any
    before: dict  # key or attribute (or, for a set, member) -> its value then

    def changed(self) -> Iterator[tuple[Any, str, Any]]:
        """``(key, name, value)`` for each entry whose value is not what it was, `GONE` for
        one that is not there any more."""
        now = set()
        for place in places_in(self.name, self.container):
            try:
                value = place.get()
            except Exception:
                continue
            now.add(place.key)
            if place.key not in self.before or self.before[place.key] is not value:
                yield place.key, place.name, value
        for key in self.before:
            if key not in now:
                kind = "member" if isinstance(self.container, set | frozenset) else "attr" \
                    if not isinstance(self.container, dict | list | collections.deque) \
                    else "item"
                yield key, Place(self.container, key, kind, self.name).name, GONE

    def put_back(self, key: Any) -> None:
        container = self.container
        if isinstance(container, list | collections.deque):
            kept = [self.before[i] for i in sorted(self.before)]
            container.clear()
            container.extend(kept)
        elif isinstance(container, set):
            container.discard(key)
        elif isinstance(container, dict):
            if key in self.before:
                container[key] = self.before[key]
            else:
                del container[key]
        else:
            # A class's attributes are set through type's own __setattr__, an object's through
            # object's (no __setattr__ of the user's runs).
            setter = type if isinstance(container, type) else object
            if key in self.before:
                setter.__setattr__(container, key, self.before[key])
            else:
                setter.__delattr__(container, key)

    def replace(self, key: Any, value: Any) -> None:
        """Make the entry (a dict's, a list's) or attribute `key` hold `value` instead."""
        if isinstance(self.container, dict | list | collections.deque):
            self.container[key] = value
        else:
            setter = type if isinstance(self.container, type) else object
            setter.__setattr__(self.container, key, value)


#: The value of an entry that a change took away (``d.pop(k)``, ``del obj.attr``).
GONE = object()


def contents_of(roots: list[tuple[str, Any]], skip: tuple = ()) -> list[Contents]:
    """The mutable containers reachable from `roots` (dicts, lists, deques, sets, objects,
    classes and modules of the user's), each with its contents now."""
    taken: list[Contents] = []
    seen: set[int] = set()

    def take(name: str | Place, container: Any) -> None:
        if id(container) in seen or opaque(container, skip + (tuple, frozenset)):
            return
        seen.add(id(container))
        before = {}
        for place in places_in(name, container):
            try:
                before[place.key] = place.get()
            except Exception:
                continue
        taken.append(Contents(name, container, before))

    for name, root in roots:
        take(name, root)
    for place, value in walk([(name, root, None) for name, root in roots], skip):
        take(place, value)
    return taken
