"""Transformations as rewrites of the graph: forward mode, batching, and Jacobians.

``tfl.grad`` (`teachflow.transforms`) differentiates by recording a tape as the function runs.
The transformations here trace the function into a graph first and then walk that graph node by
node, applying each op's rule for the transformation (declared with the op): run eagerly they
compute, and inside a trace they build the transformed graph, which ``tfl.compile`` then shows.
All of them compose, with each other and with ``tfl.grad``.

- `walk`: tracing a function for a rewrite, and what each node the rewrite makes says of it;
- `forward_mode`: ``tfl.jvp``, forward-mode derivatives, by each op's JVP rule;
- `vectorizing`: ``tfl.vmap``, a function of one example run on a batch, by each op's
  batching rule;
- `jacobians`: ``tfl.jacfwd``, ``tfl.jacrev`` and ``tfl.hessian``, built from the three.
"""

from teachflow.rewrites.forward_mode import jvp
from teachflow.rewrites.jacobians import hessian, jacfwd, jacrev
from teachflow.rewrites.vectorizing import vmap

__all__ = ["hessian", "jacfwd", "jacrev", "jvp", "vmap"]
