"""``tfl.nn.parallel``: data parallelism, the module that makes N processes train as one.

    model = tfl.nn.parallel.DistributedDataParallel(model)   # in each process of a job
    loss = F.cross_entropy(model(x_my_share), y_my_share)
    loss.backward()            # every rank now holds the gradients averaged over all ranks
    opt.step()                 # so every rank takes the same step

Each rank runs the same model on its share of the batch. The loss of the whole batch is the mean
of the shares' losses (for shares of equal size), so its gradient is the mean of the shares'
gradients: one all-reduce (``mean``) of the gradients makes every rank hold the gradient of the
whole batch, and N processes take the step one process would take on the whole batch. The
parameters start equal (rank 0's are broadcast when the module is made) and stay equal.

Eagerly, gradients are data, and an all-reduce costs a round trip however small it is: so they
are copied into flat buckets of about `bucket_mb` megabytes and each bucket is all-reduced as
one array (PyTorch's ``DistributedDataParallel`` does the same). Buckets follow the order
gradients are produced in backward(), the reverse of the order of ``parameters()``, the order
layers are used in. A parameter's hook (``register_post_accumulate_grad_hook``) runs the moment
its gradient is final; when the last gradient of a bucket arrives, the bucket's all-reduce
*starts* (``async_op``) and the backward pass goes on computing earlier layers' gradients while
it travels: communication overlaps computation. When every bucket has started, the hook waits
for them all and each parameter's ``.grad`` becomes its slice of its bucket.

Inside ``tfl.function``, gradients are graph values: each becomes one ``all_reduce`` node
(``reduction='mean'``, with this module's `bucket_mb`), and the compiler's pass
`bucket_all_reduce` does the bucketing, as a rewrite the stepper shows.
"""

from __future__ import annotations

import time
from typing import Any

import numpy as np

from teachflow.core import collectives
from teachflow.core.dispatch import bind
from teachflow.core.errors import AutodiffError
from teachflow.nn.module import Module, Parameter
from teachflow.ops.collective import all_reduce


class DistributedDataParallel(Module):
    """`module`, replicated: after backward() every rank holds the gradients averaged over the
    ranks (see the module docstring). Needs a job (`tfl.distributed.init` or `launch`)."""

    def __init__(self, module: Module, bucket_mb: float = 25) -> None:
        super().__init__()
        self.module = module
        self.bucket_mb = bucket_mb
        collectives.job()  # (a clear error here, if this process has joined no job)
        for p in module.parameters():
            collectives.broadcast_(p._data, 0)
        params = [p for p in module.parameters() if p.requires_grad]
        self._buckets = _buckets(params[::-1], bucket_mb)
        self._reducer = _Reducer(self._buckets, bucket_mb)
        for p in params:
            p.register_post_accumulate_grad_hook(self._reducer.ready)

    @property
    def communication_seconds(self) -> float:
        """Seconds spent starting and waiting for all-reduces (eagerly), over every backward();
        what the overlap hid is not counted."""
        return self._reducer.seconds

    def forward(self, *args: Any, **kwargs: Any) -> Any:
        self._reducer.check_finished()
        return self.module(*args, **kwargs)

    def extra_repr(self) -> str:
        sizes = ", ".join(f"{b.nbytes / 2**20:.2f}" for b in self._buckets)
        return f"bucket_mb={self.bucket_mb}, buckets of [{sizes}] MB"


class _Bucket:
    """Parameters whose gradients are all-reduced together, as one flat array of one dtype."""

    def __init__(self, params: list[Parameter]) -> None:
        self.params = params
        self.dtype = params[0].dtype
        ends = np.cumsum([p.numel() for p in params])
        self.slices = [slice(int(e - p.numel()), int(e)) for p, e in zip(params, ends,
                                                                       strict=True)]
        self.size = int(ends[-1])
        self.nbytes = self.size * self.dtype.itemsize


def _buckets(params: list[Parameter], bucket_mb: float) -> list[_Bucket]:
    """`params`, in order, cut into buckets of at most `bucket_mb` MB (a bigger parameter has one
    of its own) and of one dtype each."""
    buckets: list[list[Parameter]] = []
    limit, size = bucket_mb * 2**20, 0.0
    for p in params:
        nbytes = p.numel() * p.dtype.itemsize
        if not buckets or size + nbytes > limit or buckets[-1][0].dtype != p.dtype:
            buckets.append([])
            size = 0.0
        buckets[-1].append(p)
        size += nbytes
    return [_Bucket(b) for b in buckets]


class _Reducer:
    """The state of one backward(): which gradients have arrived, which buckets have started."""

    def __init__(self, buckets: list[_Bucket], bucket_mb: float) -> None:
        self.buckets, self.bucket_mb = buckets, bucket_mb
        self.where = {id(p): (i, k) for i, b in enumerate(buckets) for k, p in enumerate(b.params)}
        self.seconds = 0.0  # in all-reduces' starting and waiting, over every backward()
        self._reset()

    def _reset(self) -> None:
        self.arrived: set[int] = set()  # the ids of the parameters whose gradients are in
        self.flat: dict[int, np.ndarray] = {}  # bucket index -> its flat array
        self.started: list[tuple[_Bucket, np.ndarray, Any]] = []

    def ready(self, p: Parameter) -> None:
        """`p`'s gradient is final: reduce it, in its bucket (eagerly) or as a node (traced)."""
        grad = p.grad
        if not isinstance(grad._data, np.ndarray):  # a graph value: one node, bucketed later
            p.grad = bind(all_reduce, grad, reduction="mean", bucket_mb=self.bucket_mb)
            return
        i, k = self.where[id(p)]
        bucket = self.buckets[i]
        flat = self.flat.get(i)
        if flat is None:  # (a new array each backward: last step's .grad stay as they were)
            flat = self.flat[i] = np.empty(bucket.size, bucket.dtype)
        flat[bucket.slices[k]] = grad._data.reshape(-1)
        self.arrived.add(id(p))
        if all(id(q) in self.arrived for q in bucket.params):
            start = time.perf_counter()
            self.started.append((bucket, flat, collectives.all_reduce_(flat, "mean",
                                                                       async_op=True)))
            self.seconds += time.perf_counter() - start
        if len(self.started) == len(self.buckets):
            self._finish()

    def _finish(self) -> None:
        """Wait for every bucket's all-reduce; each parameter's .grad becomes its slice."""
        start = time.perf_counter()
        for _, _, work in self.started:
            work.wait()
        self.seconds += time.perf_counter() - start
        for bucket, flat, _ in self.started:
            for p, part in zip(bucket.params, bucket.slices, strict=True):
                p.grad = type(p.grad)._make(flat[part].reshape(p.shape), p._backend, None)
        self._reset()

    def check_finished(self) -> None:
        """A forward pass begins: the last backward() must have reduced every gradient."""
        if not self.arrived:
            return
        missing = sum(id(p) not in self.arrived for b in self.buckets for p in b.params)
        self._reset()
        raise AutodiffError(
            f"the last backward() gave no gradient to {missing} parameter(s) of the "
            "DistributedDataParallel module, so their buckets were never all-reduced and the "
            "ranks' gradients differ", op="DistributedDataParallel",
            hint="every parameter must take part in the loss (remove unused layers, or add "
                 "0 * p.sum() for each to the loss)")


__all__ = ["DistributedDataParallel"]


def __dir__() -> list[str]:  # (tab completion: the public names, not what this module imports)
    return [*__all__, *(name for name in globals() if name.startswith("__"))]
