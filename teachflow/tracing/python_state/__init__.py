"""The Python state around traced code: where it finds tensors, and where it could leave one.

Tracing runs the user's Python once. Two things about the objects around that code matter:

- **Names.** A captured tensor is best shown by the name the code reaches it by (``w``,
  ``self.w``, ``model.layer.w``, ``opt.state[0]``), and when that name lasts (a global, a closure
  variable, an attribute, a dict entry), the trace assumes it keeps naming the same tensor. The
  `Path` to it is followed again at every call, link by link from its root, so rebinding any link
  (``model = Model()`` in a notebook cell run again, ``model.w = new_w``) retraces (see
  `guards.Guard`).
- **Leaks.** A Python assignment inside the traced code (``self.w = ...``, ``d["m"] = ...``,
  ``Counter.total = ...``, a global or nonlocal) runs once, while tracing. If it stores a tensor
  of the trace, that place would keep a symbolic tensor with no values: it is found, put back, and
  reported.

Both need the same thing: the places (dict entries, list items, attributes, the contents of sets)
reachable from some roots, a few levels deep. `walk` visits them breadth first, so the first place
a tensor is found at is its shortest name, and it stops after a budget of places, so a notebook
with thousands of globals costs a few milliseconds, not seconds. Libraries (NumPy, teachflow, the
standard library) are not looked into: they hold no state of the learner's.

The chapters, in reading order:

- `places`: a `Place` (an entry, an attribute) and a `Path` (from a root that lasts, link by link
  to a place), and `walk`, which finds the places below some roots;
- `contents`: the mutable containers around a trace, as they were before it (`Contents`), so
  that what the trace left in them can be found and put back;
- `reach`: what a function's code can reach (`Reach`): the globals it uses and its closure
  cells, through the functions and methods it calls, which are the roots of both;
- `world`: the Python state around a traced function, watched while it is traced (`World`):
  what it leaked put back, what else it changed said in words (`SideEffectWarning`);
- `naming`: the name a captured tensor is given, the one the code reaches it by, and the path
  that name lasts by (`CaptureNames`).
"""

from teachflow.tracing.python_state.contents import GONE, Contents, contents_of
from teachflow.tracing.python_state.places import BUDGET, DEPTH, Path, Place, holding, walk
from teachflow.tracing.python_state.reach import Reach, reach

__all__ = ["BUDGET", "DEPTH", "GONE", "Contents", "Path", "Place", "Reach", "contents_of",
           "holding", "reach", "walk"]
