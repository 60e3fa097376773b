"""A tensor's linear algebra: ``x @ w``, the matrix product (batched over leading axes).

One call of `bind` with `teachflow.ops.linalg.matmul`, whose gradient is two more matrix products.
`Tensor` inherits it from `Linalg`; its function, ``tfl.matmul``, is in
`teachflow.tensor.functions`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from teachflow.core.dispatch import bind
from teachflow.ops import linalg
from teachflow.tensor.habits import ForeignName

if TYPE_CHECKING:
    from teachflow.tensor.tensor import Tensor


class Linalg:
    """The ``@`` operator, an op applied through `bind` (a mixin of `Tensor`)."""

    __slots__ = ()

    def __matmul__(self, other: Any) -> Tensor:
        return bind(linalg.matmul, self, other)

    def __rmatmul__(self, other: Any) -> Tensor:
        return bind(linalg.matmul, other, self)

    # --- PyTorch's and NumPy's names for the above, which teachflow spells otherwise ----------

    matmul = ForeignName("x @ y")
    mm = ForeignName("x @ y")
    bmm = ForeignName("x @ y (it batches over leading axes)")
    dot = ForeignName("x @ y")
    mv = ForeignName("x @ v")
