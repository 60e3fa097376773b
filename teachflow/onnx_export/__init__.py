"""The same graph for other runtimes: ``tfl.export_onnx`` writes it as an ONNX model.

ONNX (Open Neural Network Exchange) is a file format for computation graphs that most frameworks
can write and many runtimes can run. A model is a protocol-buffer file holding one graph: named
inputs and outputs with their types, *initializers* (the weights, stored in the file), and nodes
in topological order, each one standard operator (``MatMul``, ``Tanh``, ``If``, ``Loop``) from a
versioned *opset* that says exactly what every operator computes. It is the IR teachflow traces,
written down with a published meaning for every op.

That is why it demonstrates language independence. The file says everything the computation
is, and nothing about the Python that traced it: onnxruntime, a C++ program that has never heard
of teachflow, loads it and computes the same numbers (the tests check that it does, for every op
that has an ONNX equivalent). TensorFlow's GraphDef was made for the same reason: "a
language-irrelevant form that can be executed by other languages". teachflow's own saved graphs
(`teachflow.saved`) are that too, in a format this course can read end to end; ONNX is the one
the rest of the world reads.

What is exported is the graph *before fusion*: a fused kernel is code teachflow generated for
itself (NumPy or CUDA C), not an operator ONNX knows, and a runtime fuses for its own hardware
anyway. So the exporter takes the last stage of the compilation whose ops are all primitives
(after simplify, constant folding, CSE and DCE). The weights the graph reads (captured tensors)
are written into the file as initializers, with their values at export time.

The chapters: `onnxruntime_types` (the types onnxruntime's kernels take, and what to do about the
others); each teachflow op in ONNX's words, one module per kind of op as in `teachflow.ops`:
`arithmetic_ops` (elementwise ops, comparisons, casts and ``matmul``), `reduction_ops` (sums, means,
extremes), `shape_ops` (reshapes, transposes, broadcasts, concatenations), `creation_ops` (``full``,
``arange``, ``eye``, and the random ops, which have no equivalent), `index_ops` (slices, index
arrays and writes), `window_ops` (convolution and pooling, and their gradients: ``Conv``,
``ConvTranspose``, ``MaxPool``, ``AveragePool``) and `control_flow` (``cond`` and loops as ``If``
and ``Loop``, and a call of a graph function inlined: the callee's nodes in its place); and
`emitter`, which walks a graph and writes the model, asking each node's converter for its ONNX
nodes. A model onnxruntime could not run is never written: the export refuses it, naming the op, its
dtype and the line. Only `emitter` and `onnxruntime_types`'s check need the ``onnx`` package (the
optional ``onnx`` extra), imported when a model is written, so ``import teachflow`` does not need
it.

The versions are pinned low on purpose: ONNX IR version 8 and opset 17 (ONNX 1.12, 2022), which
every current runtime reads. A newer opset would change some operators' signatures (in opset 18
``ReduceMax`` takes its axes as an input), so the exporter writes one opset, and writes it
exactly.
"""

from __future__ import annotations

from os import PathLike
from pathlib import Path
from typing import Any

import numpy as np

from teachflow.compiler import Compilation
from teachflow.core.errors import TeachflowError
from teachflow.graph import Graph, subgraphs
from teachflow.nn import Module
from teachflow.staged.concrete import ConcreteFunction
from teachflow.staged.function import Function, one_compilation
from teachflow.staged.function import compile as compile_on
from teachflow.tensor.factories import tensor

#: The ONNX IR version and opset the exporter writes.
IR_VERSION, OPSET = 8, 17


def export_onnx(fn: Any, args_or_path: Any, path: str | Path | None = None) -> Path:
    """Write the graph of `fn` to `path` as an ONNX model, checked by ONNX's checker; returns
    the path. `fn` is a concrete function, a `Compilation` (``tfl.compile``), or a
    ``tfl.function`` that has been traced once (for one input signature); or, as
    ``torch.onnx.export(model, args, path)`` takes it, a module or any function with its example
    input (a tensor, or a tuple of them), traced on it here (a module in eval mode, as
    PyTorch exports one, and put back in its mode after):

        tfl.export_onnx(tfl.compile(model_fn, x), "model.onnx")
        tfl.export_onnx(model, x, "model.onnx")
        onnxruntime.InferenceSession("model.onnx").run(None, {"x": x.numpy()})

    The model's inputs are named as the function's arguments, its outputs ``output0``,
    ``output1``, ... Needs the optional ``onnx`` extra (``pip install teachflow[onnx]``).
    """
    import onnx

    example, path = ((), args_or_path) if path is None else (args_or_path, path)
    if not isinstance(path, str | PathLike):
        raise TeachflowError(f"the path to write to is {type(path).__name__}, not a str or Path",
                             op="export_onnx",
                             hint="tfl.export_onnx(compiled, path) or, with example inputs, "
                                  "tfl.export_onnx(model, x, path)")
    model = to_onnx(fn, *(example if isinstance(example, tuple) else (example,)))
    onnx.save(model, str(Path(path)))
    return Path(path)


def to_onnx(fn: Any, *example_args: Any) -> Any:
    """The ONNX model (an ``onnx.ModelProto``) that `export_onnx` writes: of `fn` staged, or
    traced on `example_args` (see `export_onnx`)."""
    from onnx import helper

    from teachflow import __version__
    from teachflow.onnx_export.emitter import Emitter, check, value_info
    from teachflow.onnx_export.onnxruntime_types import refuse_unrunnable

    graph = exported_graph(traced(fn, example_args) if example_args else fn)
    e = Emitter()
    names, inputs = [], []
    for k, v in enumerate(graph.inputs):
        name = e.fresh(v.name if v.name and v.name.isidentifier() else f"input{k}")
        dims = [f"{name}_{axis}" if d is None else d for axis, d in enumerate(v.shape)]
        names.append(name)
        inputs.append(value_info(name, v.spec, dims))
    results, outputs = e.translate(graph, names), []
    for v in [*graph.inputs, *graph.outputs]:  # (what no node has refused)
        if v.dtype.kind == "c":
            raise TeachflowError(f"{v} is {v.dtype.name}, and onnxruntime has no complex "
                                 "tensors", op="export_onnx",
                                 hint="pass the real and imaginary parts as two inputs")
    for k, (name, v) in enumerate(zip(results, graph.outputs, strict=True)):
        outputs.append(value_info(e.fresh(f"output{k}"), v.spec))
        e.nodes.append(helper.make_node("Identity", [name], [outputs[-1].name],
                                        name=e.fresh(f"return {k}")))
    proto = helper.make_graph(e.nodes, graph.name, inputs, outputs, initializer=e.initializers,
                              value_info=e.value_info, doc_string=str(graph))
    model = helper.make_model(proto, ir_version=IR_VERSION, producer_name="teachflow",
                              producer_version=__version__,
                              opset_imports=[helper.make_opsetid("", OPSET)])
    refuse_unrunnable(model, e.made_by)
    check(model)
    return model


def traced(fn: Any, example_args: tuple) -> Any:
    """`fn` traced on `example_args`: a ``tfl.function``'s concrete function for them, any
    other function (a module: in eval mode, its modes put back after) compiled on them; what is
    staged already, as it is."""
    if isinstance(fn, Compilation | ConcreteFunction):
        return fn
    if isinstance(fn, Function):
        return fn.get_concrete_function(*example_args)
    if not callable(fn):
        raise TeachflowError(f"export_onnx exports a function or a module, not a "
                             f"{type(fn).__name__}", op="export_onnx",
                             hint="tfl.export_onnx(model, x, path)")
    modes = {m: m.training for m in fn.modules()} if isinstance(fn, Module) else {}
    try:
        if modes:
            fn.eval()
        return compile_on(fn, *(tensor(a) if isinstance(a, np.ndarray) else a
                                for a in example_args))
    finally:
        for module, training in modes.items():
            module.training = training


def exported_graph(fn: Any) -> Graph:
    """The graph `export_onnx` writes: the last stage of `fn`'s compilation before fusion."""
    compilation = one_compilation(fn, "export_onnx", "an ONNX model",
                                  "export one of them: f.concrete_functions[k], or "
                                  "f.get_concrete_function(*args)")
    if compilation is None:
        raise TeachflowError(
            f"export_onnx exports a staged function, not a {type(fn).__name__}, unless it is "
            "given example inputs to trace it on", op="export_onnx",
            hint="tfl.export_onnx(f, x, path) with f's example input x (a tuple for several), "
                 "or give it tfl.compile(f, *example_args), a tfl.function that has been "
                 "called, or one of its concrete_functions")
    graph = next(s.graph for s in reversed(compilation.snapshots) if _primitive(s.graph))
    if graph.updates:
        written = ", ".join(u.slot.name for u in graph.updates)
        raise TeachflowError(
            f"the function updates state ({written}) when it runs, and an ONNX model is a pure "
            "function of its inputs", op="export_onnx",
            hint="export a function that returns the new values instead (a forward pass, or a "
                 "step that returns the new parameters)")
    return graph


def _primitive(graph: Graph) -> bool:
    """Only primitive ops (no fused kernel), inside its control flow too."""
    return all(node.op.primitive and all(_primitive(g) for g in subgraphs(node).values())
               for node in graph.nodes)


__all__ = ["IR_VERSION", "OPSET", "export_onnx", "exported_graph", "to_onnx"]
