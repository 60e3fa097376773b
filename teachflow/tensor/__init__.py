"""Tensors: an array on a device, its place on the tape, and every method a learner calls.

A tensor's methods never compute anything themselves: each says *which* op to apply (one call of
`bind`), and the current execution mode decides *how*. The chapters, in reading order:

- `conversion`: Python and NumPy data as arrays: dtypes, constants, shapes;
- `indexing`: indices as ``t[...]`` takes them;
- `operators`, `methods`, `interop`: what a tensor inherits (its operators and everyday methods,
  PyTorch's and NumPy's names, NumPy's protocols);
- `tensor`: the `Tensor` itself;
- `eager`: the eager interpreter: run the kernel now, record on the tape;
- `factories`: making tensors (``tfl.tensor``, ``zeros``, ``randn``, ...);
- `library`: the functions ``tfl.exp``, ``tfl.matmul``, ``tfl.softmax``, ...
"""
