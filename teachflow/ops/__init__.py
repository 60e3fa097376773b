"""teachflow's primitive ops, one declaration each (see `op.py` for what a declaration holds).

- `elementwise`: arithmetic, transcendental functions, activations, comparisons, casts
- `reduction`: sum, mean, max
- `shape`: reshape, transpose, broadcast_to, indexing, concatenate, stack
- `linalg`: matmul
- `creation`: constants, random numbers, device transfer

Everything else (softmax, log_softmax, ...) is composed from these in `teachflow.functions`.
"""

from teachflow.ops import creation, elementwise, linalg, reduction, shape
from teachflow.ops.op import OPS, Op, RuleError

__all__ = ["OPS", "Op", "RuleError", "creation", "elementwise", "linalg", "reduction", "shape"]
