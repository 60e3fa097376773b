"""teachflow: learn how deep-learning frameworks turn Python into fast kernels.

    import teachflow as tfl

    x = tfl.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
    loss = (x @ x).tanh().sum()
    loss.backward()
    x.grad

The package reads in the order of the course: each chapter is a package (or, for a public
namespace of its own, a module), and imports only the chapters before it.

1. Foundations (`core`): errors that name your line, devices, shapes and dtypes, seeded random
   numbers, nested containers of tensors, and the one dispatch point, `bind`.
2. Ops (`ops`): the primitive ops, one declaration each.
3. The graph IR (`graph`): values, nodes, the graph and its text form.
4. Autodiff's tape (`autodiff`): what is recorded, and the backward pass over it.
5. Tensors (`tensor`): the Tensor, its methods grouped by kind of op, the eager interpreter,
   making tensors, and the library of functions.
6. Transformations (`transforms`): gradients as functions, ``tfl.grad``; then gradients checked
   against finite differences (`testing`).
7. Tracing (`tracing`): reading a callable, the Python state around a trace, what a trace
   assumes, the graph builder behind `bind`, tracing a function.
8. Memory (`memory`): how long each value of a running graph is held, and the peak.
9. Running graphs (`execution`): the generated Python that runs a graph, control flow in the
   graph (``cond``, loops and calls, nodes that own graphs), TensorFlow 1's sessions.
   Transformations as rewrites of the graph (`rewrites`): ``tfl.jvp``, ``tfl.vmap``, and the
   Jacobians built from them, applying each op's rule node by node.
10. The compiler: fused kernels in NumPy, C and CUDA (`kernels`), the passes (`passes`), what a
   stage costs (`figures`), the pass stepper and its pictures (`viz`), the pipeline (`compiler`).
11. Polymorphic functions (`staged`): signatures, concrete functions, `tfl.function` and
    `tfl.compile`; scripting: capturing a function from its source, with its control flow on
    tensors as graph nodes (`script`).
12. Modules and training: layers with parameters, as PyTorch's (`nn`), optimizers (`optim`),
    data sets and batches (`data`); training in several processes at once, their gradients
    all-reduced (`distributed`).
13. Saved graphs: a language-neutral file and a loader that trusts nothing (`saved`), and the
    same graph as an ONNX model for other runtimes (`onnx_export`).
14. The notebook: the ``%%compile`` cell magic (`magic`).
15. Exercises: authoring them, checking them, grading them (`grading`), and the ``teachflow``
    command that does it (`__main__`); ``tfl.grading`` is imported on first use.

Each package's own docstring lists its modules in reading order.
README.md has the table.
"""

import numpy as _np

from teachflow import data, distributed, nn, optim, testing
from teachflow.autodiff.tape import enable_grad, is_grad_enabled, no_grad
from teachflow.compiler import Compilation, Snapshot
from teachflow.core.backends import device, devices, set_logical_devices
from teachflow.core.errors import (
    ArgumentError,
    AutodiffError,
    DeviceError,
    DTypeError,
    GradientWarning,
    GradingError,
    IndexingError,
    ShapeError,
    TeachflowError,
    TraceError,
)
from teachflow.core.spec import TensorSpec
from teachflow.execution.control import cond, fori_loop, while_loop
from teachflow.execution.session import Session
from teachflow.graph import Graph, GraphError
from teachflow.onnx_export import export_onnx
from teachflow.rewrites import hessian, jacfwd, jacrev, jvp, vmap
from teachflow.saved import SavedGraphError, load, save
from teachflow.script import script
from teachflow.staged.function import (
    ConcreteFunction,
    Function,
    RetracingWarning,
    compile,
    function,
)
from teachflow.tensor import eager as _eager  # installs the eager interpreter behind `bind`
from teachflow.tensor.factories import (
    arange,
    eye,
    full,
    full_like,
    manual_seed,
    ones,
    ones_like,
    rand,
    randn,
    tensor,
    zeros,
    zeros_like,
)
from teachflow.tensor.functions import (
    abs,
    argmax,
    argmin,
    broadcast_to,
    cat,
    clip,
    clone,
    concatenate,
    exp,
    flatten,
    log,
    log_softmax,
    matmul,
    max,
    maximum,
    mean,
    min,
    minimum,
    permute,
    relu,
    reshape,
    sigmoid,
    softmax,
    softplus,
    sqrt,
    squeeze,
    stack,
    sum,
    swapaxes,
    tanh,
    transpose,
    unsqueeze,
    var,
    where,
)
from teachflow.tensor.tensor import Tensor, as_tensor
from teachflow.tracing.builder import placeholder
from teachflow.tracing.python_state.world import SideEffectWarning
from teachflow.tracing.trace import trace
from teachflow.transforms.checkpoint import checkpoint
from teachflow.transforms.gradients import grad, value_and_grad

__version__ = "0.1.0"


# Dtypes by name, as PyTorch habits write them (tfl.zeros(3, dtype=tfl.float64)).
float16, float32, float64 = _np.dtype("float16"), _np.dtype("float32"), _np.dtype("float64")
int8, int16, int32, int64 = (_np.dtype(f"int{b}") for b in (8, 16, 32, 64))
uint8 = _np.dtype("uint8")

#: PyTorch's module-level names for what teachflow spells otherwise (see `__getattr__`).
_FOREIGN = {
    "clamp": "tfl.clip(x, min, max)", "pow": "x ** y", "std": "x.var(axis).sqrt()",
    "mm": "a @ b", "bmm": "a @ b", "dot": "a @ b", "matmul_": "a @ b", "einsum": "@ and .sum()",
    "from_numpy": "tfl.tensor(array) (a copy) or tfl.as_tensor(array) (shared)",
    "add": "x + y", "sub": "x - y", "mul": "x * y", "div": "x / y", "neg": "-x",
    "linspace": "tfl.tensor(np.linspace(start, stop, n))", "randint": "tfl.tensor("
    "np.random.randint(low, high, size))", "rand_like": "tfl.rand(*x.shape)",
    "randn_like": "tfl.randn(*x.shape)", "empty": "tfl.zeros(shape)", "no_grad_": "tfl.no_grad()",
    "bool": "'bool' (a dtype name)", "long": "tfl.int64", "float": "tfl.float32",
    "double": "tfl.float64", "half": "tfl.float16",
}


def __getattr__(name: str) -> object:
    """``tfl.grading`` and ``tfl.viz``, imported on first use; ``tfl.clamp`` and other PyTorch
    names: say what teachflow calls them."""
    if name == "grading":
        import teachflow.grading  # (which sets the attribute, so this runs once)

        return teachflow.grading
    if name == "viz":  # (tfl.viz.show_backward(loss) with no import of its own)
        import teachflow.viz

        return teachflow.viz
    spelling = _FOREIGN.get(name)
    if spelling is None:
        raise AttributeError(f"module 'teachflow' has no attribute {name!r}")
    raise AttributeError(f"module 'teachflow' has no attribute {name!r}: teachflow spells it "
                         f"{spelling}")


def load_ipython_extension(ipython: object) -> None:
    """``%load_ext teachflow`` registers the ``%%compile`` cell magic."""
    from teachflow.magic import load_ipython_extension as load

    load(ipython)

__all__ = [
    "ArgumentError",
    "AutodiffError",
    "Compilation",
    "ConcreteFunction",
    "DTypeError",
    "DeviceError",
    "Function",
    "GradientWarning",
    "GradingError",
    "Graph",
    "GraphError",
    "IndexingError",
    "RetracingWarning",
    "SavedGraphError",
    "Session",
    "ShapeError",
    "SideEffectWarning",
    "Snapshot",
    "TeachflowError",
    "Tensor",
    "TensorSpec",
    "TraceError",
    "abs",
    "arange",
    "argmax",
    "argmin",
    "as_tensor",
    "broadcast_to",
    "cat",
    "checkpoint",
    "clip",
    "clone",
    "compile",
    "concatenate",
    "cond",
    "data",
    "device",
    "devices",
    "distributed",
    "enable_grad",
    "exp",
    "export_onnx",
    "eye",
    "flatten",
    "float16",
    "float32",
    "float64",
    "fori_loop",
    "full",
    "full_like",
    "function",
    "grad",
    "hessian",
    "int8",
    "int16",
    "int32",
    "int64",
    "is_grad_enabled",
    "jacfwd",
    "jacrev",
    "jvp",
    "load",
    "log",
    "log_softmax",
    "manual_seed",
    "matmul",
    "max",
    "maximum",
    "mean",
    "min",
    "minimum",
    "nn",
    "no_grad",
    "ones",
    "ones_like",
    "optim",
    "permute",
    "placeholder",
    "rand",
    "randn",
    "relu",
    "reshape",
    "save",
    "script",
    "set_logical_devices",
    "sigmoid",
    "softmax",
    "softplus",
    "sqrt",
    "squeeze",
    "stack",
    "sum",
    "swapaxes",
    "tanh",
    "tensor",
    "testing",
    "trace",
    "transpose",
    "uint8",
    "unsqueeze",
    "value_and_grad",
    "var",
    "vmap",
    "where",
    "while_loop",
    "zeros",
    "zeros_like",
]


def __dir__() -> list[str]:
    """Tab completion shows the public names (and ``grading``, imported on first use), not the
    chapters the package imports to make them."""
    return [*__all__, "grading", *(name for name in globals() if name.startswith("__"))]

del _eager
