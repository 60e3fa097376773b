"""Reverse-mode automatic differentiation: the tape, and the backward pass over it.

The chapters, in reading order:

- `tape`: when ops are recorded (``tfl.no_grad``), what a tape node keeps for the gradient rules,
  and `record`;
- `backprop`: the backward pass: ``loss.backward()`` and `backpropagate`, each cotangent fitted to
  its input's shape and dtype.

Gradients as *functions* (``tfl.grad``) build on tensors, so they come after them, in
`teachflow.transforms`.
"""
