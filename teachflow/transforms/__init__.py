"""Transformations of functions: a function in, a function out.

- `gradients`: ``tfl.grad(f)`` and ``tfl.value_and_grad(f)``, reverse mode over the tape.
- `checkpoint`: ``tfl.checkpoint(fn)``, a region whose activations are computed again in
  backward instead of kept (rematerialisation).
"""
