"""Foundations: what every later chapter stands on.

The chapters, in reading order:

- `errors`: errors a learner can act on, naming the op, the operands and the learner's line;
- `backends`: devices (the CPU's logical ones too, and ``with tfl.device(...)``), and the array
  module (NumPy or CuPy) a kernel is written against;
- `spec`: a tensor's shape, dtype and device, known without its values (`TensorSpec`);
- `random`: random numbers you can reproduce (``tfl.manual_seed``);
- `tree`: nested containers of tensors, flattened to a list and rebuilt;
- `dispatch`: `bind`, the one place where eager and staged execution part ways;
- `collectives`: the job of several processes a process joins, and the all-reduce between
  them, on ``torch.distributed`` (the engine the op ``all_reduce`` runs on).
"""
