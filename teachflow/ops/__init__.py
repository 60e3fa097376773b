"""teachflow's primitive ops, one declaration each (see `op` for what a declaration holds).

- `shape_rules`: shape rules many ops share (broadcasting, an elementwise op's dtype)
- `tangents`, `batching`: forward-mode (JVP) and batching (vmap) rules many ops share
- `elementwise`: arithmetic, transcendental functions, activations, comparisons, clip, casts,
  copies
- `maths`: more elementwise ops: sin, cos, erf, log2, rsqrt; floor, ceil, round; isnan, isinf
- `reduction`: sum, mean, max, min; argmax, argmin; log_softmax (one op for its gradient)
- `scans`: prod, all, any; cumsum, cumprod (running sums and products); argsort
- `views`: reshape, transpose, broadcast_to, and moving a batch axis
- `index_rules`, `index_batching`: how indexing finds its shape and writes, and how it batches
- `shape`: indexing, concatenate, stack
- `along_axis`: picking along one axis (PyTorch's gather) and its gradient
- `linalg`: matmul
- `windows`, `convolution`, `pooling`: windows slid over images (im2col and col2im); conv2d
  and its two gradients; max and average pooling and theirs
- `creation`: constants, ranges (arange, linspace), identity matrices, random numbers (normal,
  uniform, randint), device transfer
- `collective`: all_reduce, one value made from every process's (data-parallel training)

Everything else (softmax, var, squeeze, ...) is composed from these, as Tensor
methods (`teachflow.tensor.tensor`) and functions (`teachflow.tensor.functions`).
"""

from teachflow.ops import (
    along_axis,
    collective,
    convolution,
    creation,
    elementwise,
    linalg,
    maths,
    pooling,
    reduction,
    scans,
    shape,
)
from teachflow.ops.op import OPS, Op, RuleError

__all__ = ["OPS", "Op", "RuleError", "along_axis", "collective", "convolution", "creation",
           "elementwise", "linalg", "maths", "pooling", "reduction", "scans", "shape"]
