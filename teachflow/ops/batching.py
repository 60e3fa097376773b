"""``tfl.vmap``'s batching rules that many ops share: the values of an op's `batch` field.

A batching rule runs an op once for a whole batch of examples. It gets the op, its operands,
where each batched operand has its batch axis (`dims`: an int, or None for an operand that is
the same for every example), the op's parameters and the batch size, and gives the result and
where its batch axis is. `teachflow.rewrites.batching` applies them, node by node; an op none of
whose operands is batched simply runs once.

- `elementwise`: an op whose kernel broadcasts needs no rule of its own. Each batched operand
  gets its batch axis first, and size-1 axes after it so that every example has the same rank
  (broadcasting lines shapes up from the right: the batch axis must not meet an example's
  axis); an operand that is not batched broadcasts against the batch as it is.
- `op.unbatched`: an op with no tensor operands (zeros, a range, random numbers) is never
  batched: it runs once, and every example sees the same values, random numbers included (as
  in JAX: pass a batch of draws in, batched, for a draw per example).
"""

from __future__ import annotations

from typing import Any

from teachflow.core.dispatch import bind
from teachflow.ops.views import to_front, with_rank


def elementwise(op: Any, args: tuple, dims: tuple, params: dict, size: int) -> tuple:
    """Moved the batch axes to the front and lined the ranks up: the kernel broadcasts."""
    rank = max(x.ndim - (d is not None) for x, d in zip(args, dims, strict=True)
               if hasattr(x, "ndim"))
    moved = [x if d is None else with_rank(to_front(x, d), rank)
             for x, d in zip(args, dims, strict=True)]
    return bind(op, *moved, **params), 0

