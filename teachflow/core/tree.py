"""Nested containers of tensors (lists, tuples, dicts, dataclasses): flatten to a list and
rebuild.

`tfl.grad` uses this to differentiate with respect to, say, a list of weight tensors and to give
back a list of gradients of the same shape; `tfl.function` uses it for nested arguments.

A dict's entries are taken in its own order, which is part of its structure (``for k in d``
and ``d.values()`` see it), and it is rebuilt as the type it was (a ``defaultdict`` with its
default factory, a dict subclass with its methods).

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
    """How a container was built: its type, its keys (a dict's, in order; a dataclass's fields)
    or none (a sequence), and a definition per child (None for a leaf). `rebuild` is what
    rebuilding it needs besides, and is not part of the structure: a defaultdict's factory, the
    attributes of a dict subclass's object, which of a dataclass's fields its __init__ takes."""

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
        keys = tuple(node)
        factory = node.default_factory if isinstance(node, defaultdict) else None
        attributes = dict(getattr(node, "__dict__", {}))  # (a subclass's own attributes)
        return TreeDef(type(node), keys, tuple(_flatten(node[k], leaves) for k in keys),
                       (factory, attributes))
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        fields = [f for f in dataclasses.fields(node) if hasattr(node, f.name)]
        return TreeDef(type(node), tuple(f.name for f in fields),
                       tuple(_flatten(getattr(node, f.name), leaves) for f in fields),
                       tuple(f.init for f in fields))
    if isinstance(node, list | tuple):
        return TreeDef(type(node), (), tuple(_flatten(child, leaves) for child in node))
    leaves.append(node)
    return None


def tree_paths(tree: Any, prefix: tuple = ()) -> list[tuple]:
    """The path (keys and indices) to every leaf, in `tree_flatten`'s order."""
    if isinstance(tree, dict):
        return [p for k in tree for p in tree_paths(tree[k], (*prefix, k))]
    if dataclasses.is_dataclass(tree) and not isinstance(tree, type):
        return [p for f in dataclasses.fields(tree) if hasattr(tree, f.name)
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
        factory, attributes = node.rebuild
        # A subclass is made without its __init__ (which may want arguments of its own) and
        # filled without its methods (which may do more than store).
        built = kind() if kind in (dict, OrderedDict) else kind.__new__(kind)
        if isinstance(built, defaultdict):
            built.default_factory = factory
        if attributes:
            built.__dict__.update(attributes)
        base = OrderedDict if isinstance(built, OrderedDict) else dict
        base.update(built, zip(node.keys, values, strict=True))
        return built
    if dataclasses.is_dataclass(kind):
        return _dataclass(kind, node, values)
    if kind is list:
        return values
    if hasattr(kind, "_fields"):  # a namedtuple
        return kind(*values)
    try:
        return kind(values)
    except TypeError:  # a tuple or list subclass whose __new__ or __init__ wants more
        built = tuple.__new__(kind, values) if issubclass(kind, tuple) else list.__new__(kind)
        if isinstance(built, list):
            built.extend(values)
        return built


def _dataclass(kind: type, node: TreeDef, values: list) -> Any:
    """A dataclass made by its own __init__ (its __post_init__ runs, as when the caller made
    it), then given the fields __init__ does not take; made without __init__ where that wants
    other arguments than its fields."""
    fields = dict(zip(node.keys, values, strict=True))
    takes = dict(zip(node.keys, node.rebuild, strict=True))
    try:
        built = kind(**{name: v for name, v in fields.items() if takes[name]})
        rest = {name: v for name, v in fields.items() if not takes[name]}
    except TypeError:  # an __init__ of its own
        built, rest = object.__new__(kind), fields
    for name, value in rest.items():
        object.__setattr__(built, name, value)
    return built
