"""Running graphs: the Python a graph becomes, control flow that owns graphs, sessions.

The chapters, in reading order:

- `executor`: a graph as generated straight-line Python, and a node-by-node interpreter;
- `pieces`: a graph cut across devices, each device's piece run on its own thread, at once;
- `control`: ``tfl.cond``, ``tfl.while_loop`` and ``tfl.fori_loop``, and a call of a graph
  function: nodes that own graphs and run them with the executor;
- `session`: TensorFlow 1's define-and-run: ``tfl.Session(graph).run(fetches, feed={...})``.
"""
