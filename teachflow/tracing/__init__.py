"""Tracing: running ordinary Python with the graph builder in charge, and keeping the graph.

The chapters, in reading order:

- `callables`: reading a Python callable (its signature, names, the function under wrappers)
  without running any of the user's code;
- `python_state`: the Python state around traced code: where a captured tensor is found and
  named, what a trace leaked, and what else it changed;
- `guards`: what a trace assumes about state outside its graph, checked before every call;
- `builder`: the `GraphBuilder`, what `bind` does while a graph is being built;
- `trace`: tracing a function: its graph, the structure of its arguments and results, and its
  guards (``tfl.trace``).
"""
