"""The matrix product as a function: ``tfl.matmul(a, b)``, which is ``a @ b``
(`teachflow.tensor.linalg`) for anything `tfl.tensor` takes. (``np.matmul`` on tensors is a ufunc:
NumPy's protocol answers it, `teachflow.tensor.interop`.)
"""

from __future__ import annotations

from typing import Any

from teachflow.core.dispatch import bind
from teachflow.ops import linalg
from teachflow.tensor.tensor import Tensor, as_tensor

__all__ = ["matmul"]


def matmul(a: Any, b: Any) -> Tensor:
    return bind(linalg.matmul, as_tensor(a), as_tensor(b))
