"""Tensors: an array on a device, its place on the tape, and every method a learner calls.

A tensor's methods never compute anything themselves: each says *which* op to apply (one call of
`bind`), and the current execution mode decides *how*. Where a method lives follows one rule: its
file is named for the kind of op it is, and its ``tfl.`` function is in `functions`, in the
section of that kind (movement's in `arrange`); PyTorch's and NumPy's names for it (``dim=``,
``permute``, ``cat``) stand beside it. The chapters, in reading order:

- `habits`: how methods answer to PyTorch's and NumPy's names (``dim=``, ``t.clamp``);
- `conversion`: Python and NumPy data as arrays (dtypes, constants, shapes), and a tensor as
  other things: ``t.numpy()``, ``t.item()``, ``float(t)``, ``t.astype(...)``, ``t.to("gpu")``;
- `indexing`: indices as ``t[...]`` takes them;
- `elementwise`: ``a + b``, ``a < b``, ``m1 & m2``, ``p -= g``, ``t.exp()``, ``t.clip(0, 1)``;
- `reductions`: ``t.sum()``, ``t.mean()``, ``t.max()``, ``t.argmax()``, ``t.var()``,
  ``t.softmax()``, ``t.prod()``, ``t.cumsum(0)``, ``t.sort()``, ``t.topk(k)``;
- `movement`: ``t.reshape()``, ``t.view()``, ``t.T``, ``t.permute()``, ``t.squeeze()``,
  ``t[i]``, ``t[i] = v``, ``t.flip(0)``, ``t.repeat(2, 1)``, ``t.split(2)``, ``t.tril()``;
- `linalg`: ``a @ b``;
- `interop`: NumPy's protocols (``np.asarray(t)``, ``np.exp(t)``, ``np.where(t > 0, t, 0)``);
- `tensor`: the `Tensor` itself: its array, device, tape node, grad, repr and backward, with
  the files above as its methods;
- `weak`: `WeakTensor`, a Python number become a tensor (a loop's index);
- `eager`: the eager interpreter: run the kernel now, record on the tape;
- `factories`: making tensors (``tfl.tensor``, ``zeros``, ``randn``, ...);
- `functions`: the functions ``tfl.exp``, ``tfl.sum``, ``tfl.matmul``, one section per kind
  as above (``tfl.where`` among them);
- `arrange`: movement's functions, ``tfl.reshape``, ``tfl.concatenate``, ``tfl.split``, ...;
- `einsum`: ``tfl.einsum("bij,bjk->bik", a, b)``, lowered to the functions above.
"""
