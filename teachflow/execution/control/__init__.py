"""Control flow in the graph: ``cond``, ``while_loop`` and ``fori_loop``, nodes that own graphs.

Tracing runs Python, so Python's own ``if`` and ``for`` decide *while tracing*: a loop comes out
unrolled, and a branch on a tensor's value cannot be decided at all. These functions put the
decision into the graph instead. Eagerly they simply run; traced, each becomes one node that owns
graphs traced from the functions it was given (both branches of a ``cond``; a loop's condition
and body, once), and decides when the graph runs, however many steps that takes.

The chapters, in reading order:

- `graphs`: tracing a function into a closed sub-graph (what it reads from outside becomes its
  inputs);
- `control_op`: what a control-flow op says beyond an ordinary op (how it reruns, its generated
  code);
- `vjp`: the gradient of a sub-graph, by running it again on the tape;
- `cond`: ``tfl.cond``, whose gradient is a ``cond`` of the branches' gradients;
- `loop_code`: a loop node's shape rule and its generated code, a Python loop around its body's;
- `carry`: what a loop carries from step to step, checked to keep its structure and types;
- `loop_run`: a loop run, eagerly as a Python loop, traced as one node;
- `loops`: ``tfl.while_loop`` and ``tfl.fori_loop``, whose gradient runs the loop backwards (a
  loop whose trip count depends on data has none: see `loops`), and whose tangents and batches
  are loops too;
- `call`: a graph function calling another, one ``call`` node that owns the callee's graph,
  whose gradient is a call of the callee's backward graph.
"""

from teachflow.execution.control.call import CALL, run_call
from teachflow.execution.control.cond import cond
from teachflow.execution.control.loops import fori_loop, while_loop

__all__ = ["CALL", "cond", "fori_loop", "run_call", "while_loop"]
