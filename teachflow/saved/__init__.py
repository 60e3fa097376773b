"""Saved graphs: ``tfl.save`` and ``tfl.load``, a language-neutral file and a loader that trusts
nothing (lesson 7; TensorFlow's GraphDef, "a language-irrelevant form").

A staged function saves as its traced graph: ops by name, their parameters, the shape and dtype
of every value, the graphs control flow owns and the functions it calls, each once (JSON), and
its arrays (NumPy's ``.npz``). Loaded, it runs without the Python that made it: this teachflow
compiles the graph again and runs it. A module saves its state dict the same way.
``docs/saved-graph.md`` describes the format.

The chapters, in reading order:

- `format`: the format's name, version, files and limits, and reading JSON without trusting it;
- `schema`: what each op may be given, read from its declaration, and each parameter's kind;
- `save`: writing a graph or a state dict;
- `arrays`: reading arrays.npz, each array's header checked before its data is read;
- `reader`: building a graph from the JSON, checking every value, reference and op;
- `loaded`: the loaded function, callable and shown in the pass stepper;
- `load`: the files checked, then the version, then the body.
"""

from teachflow.saved.format import SavedGraphError
from teachflow.saved.load import load
from teachflow.saved.loaded import SavedFunction
from teachflow.saved.save import save

__all__ = ["SavedFunction", "SavedGraphError", "load", "save"]
