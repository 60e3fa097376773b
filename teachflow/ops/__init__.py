"""teachflow's primitive ops, one declaration each (see `op` for what a declaration holds).

- `shape_rules`: shape rules many ops share (broadcasting, an elementwise op's dtype)
- `tangents`, `batching`: forward-mode (JVP) and batching (vmap) rules many ops share
- `elementwise`: arithmetic, transcendental functions, activations, comparisons, clip, casts,
  copies
- `reduction`: sum, mean, max, min; argmax, argmin; log_softmax (one op for its gradient)
- `views`: reshape, transpose, broadcast_to, and moving a batch axis
- `index_rules`, `index_batching`: how indexing finds its shape and writes, and how it batches
- `shape`: indexing, concatenate, stack
- `linalg`: matmul
- `creation`: constants, ranges, identity matrices, random numbers, device transfer
- `collective`: all_reduce, one value made from every process's (data-parallel training)

Everything else (softmax, var, squeeze, ...) is composed from these, as Tensor
methods (`teachflow.tensor.tensor`) and functions (`teachflow.tensor.functions`).
"""

from teachflow.ops import collective, creation, elementwise, linalg, reduction, shape
from teachflow.ops.op import OPS, Op, RuleError

__all__ = ["OPS", "Op", "RuleError", "collective", "creation", "elementwise", "linalg",
           "reduction", "shape"]
