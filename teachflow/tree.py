"""Nested containers of tensors (lists, tuples, dicts, dataclasses): flatten to a list and
rebuild.

`tfl.grad` uses this to differentiate with respect to, say, a list of weight tensors and to give
back a list of gradients of the same shape; `tfl.function` uses it for nested arguments.

The walks are plain recursive functions at module level: a nested function that calls itself would
form a reference cycle (function -> closure cell -> function) and keep the tensors it saw alive
until the garbage collector runs.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from collections.abc import Iterator
from typing import Any

#: How a container was built: (type, keys or length, child definitions); None for a leaf.
TreeDef = tuple | None


def tree_flatten(tree: Any) -> tuple[list, TreeDef]:
    """``[x, (y, {"b": z})] -> ([x, y, z], treedef)``."""
    leaves: list = []
    return leaves, _flatten(tree, leaves)


def _flatten(node: Any, leaves: list) -> TreeDef:
    if isinstance(node, dict):
        keys = tuple(node)
        kind = OrderedDict if isinstance(node, OrderedDict) else dict
        return (kind, keys, tuple(_flatten(node[k], leaves) for k in keys))
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        names = tuple(f.name for f in dataclasses.fields(node) if f.init)
        return (type(node), names, tuple(_flatten(getattr(node, n), leaves) for n in names))
    if isinstance(node, list | tuple):
        return (type(node), len(node), tuple(_flatten(child, leaves) for child in node))
    leaves.append(node)
    return None


def tree_paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """The path (keys and indices) to every leaf, in `tree_flatten`'s order."""
    if isinstance(tree, dict):
        return [p for k in tree for p in tree_paths(tree[k], (*prefix, k))]
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [p for f in dataclasses.fields(tree) if f.init
                for p in tree_paths(getattr(tree, f.name), (*prefix, f.name))]
    if isinstance(tree, list | tuple):
        return [p for i, child in enumerate(tree) for p in tree_paths(child, (*prefix, i))]
    return [prefix]


def tree_unflatten(treedef: TreeDef, leaves: list) -> Any:
    """The inverse of `tree_flatten`."""
    return _build(treedef, iter(leaves))


def _build(node: TreeDef, leaves: Iterator) -> Any:
    if node is None:
        return next(leaves)
    kind, keys, children = node
    if issubclass(kind, dict):
        return kind((k, _build(c, leaves)) for k, c in zip(keys, children, strict=True))
    if dataclasses.is_dataclass(kind):
        return kind(**{k: _build(c, leaves) for k, c in zip(keys, children, strict=True)})
    values = [_build(c, leaves) for c in children]
    if kind is list:
        return values
    return kind(*values) if hasattr(kind, "_fields") else kind(values)  # namedtuples too
