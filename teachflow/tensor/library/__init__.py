"""The library of functions: ``tfl.exp(x)``, ``tfl.sum(x, axis=1)``, ``tfl.reshape(x, 2, 3)``,
``tfl.matmul(a, b)``, ``tfl.where(c, a, b)``, ...

A function applies the op of a tensor's method (``tfl.exp(x)`` is ``x.exp()``, for anything
`tfl.tensor` takes), or one of its kind that no method has (``tfl.where``, ``tfl.concatenate``),
so its file is named as the method's: `elementwise`, `reductions`, `movement`, `linalg`. Each file
also tells NumPy which of its functions answer NumPy's (``np.where`` on tensors is ``tfl.where``;
see `teachflow.tensor.interop`).
"""

from teachflow.tensor.library.elementwise import (
    abs,
    clip,
    clone,
    exp,
    log,
    maximum,
    minimum,
    relu,
    sigmoid,
    softplus,
    sqrt,
    tanh,
    where,
)
from teachflow.tensor.library.linalg import matmul
from teachflow.tensor.library.movement import (
    broadcast_to,
    cat,
    concatenate,
    flatten,
    permute,
    reshape,
    squeeze,
    stack,
    swapaxes,
    transpose,
    unsqueeze,
)
from teachflow.tensor.library.reductions import (
    argmax,
    argmin,
    log_softmax,
    max,
    mean,
    min,
    softmax,
    sum,
    var,
)

__all__ = [
    "abs", "argmax", "argmin", "broadcast_to", "cat", "clip", "clone", "concatenate", "exp",
    "flatten", "log", "log_softmax", "matmul", "max", "maximum", "mean", "min", "minimum",
    "permute", "relu", "reshape", "sigmoid", "softmax", "softplus", "sqrt", "squeeze", "stack",
    "sum", "swapaxes", "tanh", "transpose", "unsqueeze", "var", "where",
]
