"""Nested containers of tensors (lists, tuples, dicts): flatten to a list and rebuild.

`tfl.grad` uses this to differentiate with respect to, say, a list of weight tensors and to give
back a list of gradients of the same shape; `tfl.function` uses it for nested arguments.
"""

from __future__ import annotations

from typing import Any

#: How a container was built: (type, keys or length, child definitions); None for a leaf.
TreeDef = tuple | None


def tree_flatten(tree: Any) -> tuple[list, TreeDef]:
    """``[x, (y, {"b": z})] -> ([x, y, z], treedef)``."""
    leaves: list = []

    def walk(node: Any) -> TreeDef:
        if isinstance(node, dict):
            keys = tuple(node)
            return (dict, keys, tuple(walk(node[k]) for k in keys))
        if isinstance(node, list | tuple):
            return (type(node), len(node), tuple(walk(child) for child in node))
        leaves.append(node)
        return None

    return leaves, walk(tree)


def tree_unflatten(treedef: TreeDef, leaves: list) -> Any:
    """The inverse of `tree_flatten`."""
    it = iter(leaves)

    def build(node: TreeDef) -> Any:
        if node is None:
            return next(it)
        kind, keys, children = node
        if kind is dict:
            return {k: build(c) for k, c in zip(keys, children, strict=True)}
        values = [build(c) for c in children]
        if kind is list:
            return values
        return kind(*values) if hasattr(kind, "_fields") else kind(values)  # namedtuples too

    return build(treedef)
