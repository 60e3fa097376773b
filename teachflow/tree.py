"""Nested containers of tensors (lists, tuples, dicts, dataclasses): flatten to a list and
rebuild.

`tfl.grad` uses this to differentiate with respect to, say, a list of weight tensors and to give
back a list of gradients of the same shape; `tfl.function` uses it for nested arguments.

A dict's entries are taken in the order of its keys, sorted (as JAX does), so ``{"a": x, "b": y}``
and ``{"b": y, "a": x}`` have one structure; it is rebuilt in its own order, and as the type it
was (a ``defaultdict`` with its default factory, a dict subclass with its methods).

The walks are plain recursive functions at module level: a nested function that calls itself would
form a reference cycle (function -> closure cell -> function) and keep the tensors it saw alive
until the garbage collector runs.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict, defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class TreeDef:
    """How a container was built: its type, its keys (a dict's, in leaf order; a dataclass's
    fields) or none (a sequence), and a definition per child (None for a leaf). `rebuild` is
    what rebuilding it needs besides, and is not part of the structure: a dict's own key order,
    a defaultdict's factory."""

    kind: type
    keys: tuple
    children: tuple
    rebuild: Any = field(default=None, compare=False)


def tree_flatten(tree: Any) -> tuple[list, TreeDef | None]:
    """``[x, (y, {"b": z})] -> ([x, y, z], treedef)``."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(node: Any, leaves: list) -> TreeDef | None:
    if isinstance(node, dict):
        keys = _key_order(node)
        factory = node.default_factory if isinstance(node, defaultdict) else None
        return TreeDef(type(node), keys, tuple(_flatten(node[k], leaves) for k in keys),
                       (tuple(node), factory))
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        names = tuple(f.name for f in dataclasses.fields(node) if f.init)
        return TreeDef(type(node), names,
                       tuple(_flatten(getattr(node, n), leaves) for n in names))
    if isinstance(node, list | tuple):
        return TreeDef(type(node), (), tuple(_flatten(child, leaves) for child in node))
    leaves.append(node)
    return None


def _key_order(d: dict) -> tuple:
    """A dict's keys sorted (so the order they were inserted in does not matter), unless it is
    an OrderedDict, whose order is part of what it is, or its keys do not sort."""
    if isinstance(d, OrderedDict):
        return tuple(d)
    try:
        return tuple(sorted(d, key=lambda k: (type(k).__name__, k)))
    except TypeError:
        return tuple(d)


def tree_paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """The path (keys and indices) to every leaf, in `tree_flatten`'s order."""
    if isinstance(tree, dict):
        return [p for k in _key_order(tree) for p in tree_paths(tree[k], (*prefix, k))]
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [p for f in dataclasses.fields(tree) if f.init
                for p in tree_paths(getattr(tree, f.name), (*prefix, f.name))]
    if isinstance(tree, list | tuple):
        return [p for i, child in enumerate(tree) for p in tree_paths(child, (*prefix, i))]
    return [prefix]


def tree_unflatten(treedef: TreeDef | None, leaves: list) -> Any:
    """The inverse of `tree_flatten`."""
    return _build(treedef, iter(leaves))


def _build(node: TreeDef | None, leaves: Iterator) -> Any:
    if node is None:
        return next(leaves)
    kind = node.kind
    values = [_build(c, leaves) for c in node.children]
    if issubclass(kind, dict):
        order, factory = node.rebuild
        entries = dict(zip(node.keys, values, strict=True))
        # A subclass is made without its __init__ (which may want arguments of its own) and
        # filled without its methods (which may do more than store).
        built = kind() if kind in (dict, OrderedDict) else kind.__new__(kind)
        if isinstance(built, defaultdict):
            built.default_factory = factory
        base = OrderedDict if isinstance(built, OrderedDict) else dict
        base.update(built, ((k, entries[k]) for k in order))
        return built
    if dataclasses.is_dataclass(kind):
        return kind(**dict(zip(node.keys, values, strict=True)))
    if kind is list:
        return values
    return kind(*values) if hasattr(kind, "_fields") else kind(values)  # namedtuples too
