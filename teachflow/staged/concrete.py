"""A concrete function: one trace of a `tfl.function`, compiled, and what calling it does.

A call runs the generated executor on the tensor arguments and on the state the trace reads
(captured tensors, ``.grad``s), then writes back the state the traced code updated (see
`teachflow.tracing.builder`): the new values of tensors updated in place, and new ``.grad``s.

How it runs is the interpreter's decision, as for every op (`dispatch.call`): eagerly it runs the
executor (`run`); inside another trace it adds its graph's ops to that trace (`inline`).

A call of a `tfl.function` with tensors is itself generated code (`call_source`): the guards,
reading the state, the executor and writing the state back, in one Python function. A training
step is short, and the dozen small steps of a call written out one function at a time cost a
tenth of it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from teachflow.autodiff import tape
from teachflow.compiler import Compilation, run_pipeline
from teachflow.core import dispatch
from teachflow.core.backends import get_backend
from teachflow.core.errors import AutodiffError, DeviceError, SignatureMismatch, TeachflowError
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.executor import explain_failure, generate, interpret
from teachflow.graph import Graph, Value
from teachflow.ops.op import Op
from teachflow.staged.signature import (
    Signature,
    canonical_call,
    exact_tree,
    fit_input_signature,
    leaf_keys,
    retrace_reason,
    structure_difference,
)
from teachflow.tensor.tensor import Tensor
from teachflow.tracing.guards import GuardWriter, compile_guards, guard_source, one_line
from teachflow.tracing.trace import Traced


class ConcreteFunction:
    """One trace of a `Function`: its graph and the executor generated from it."""

    #: What to do when called with arguments of another signature (a Compilation says its own).
    mismatch_hint = ("call the tfl.function itself: it traces a new concrete function for a new "
                     "signature")

    def __init__(self, traced: Traced, signature: Signature, call_signature: Any = None,
                 passes: Any = "default", backend: str | None = None,
                 verify: bool | None = None, examples: list[Tensor] | None = None,
                 input_signature: list[TensorSpec] | None = None) -> None:
        self.signature = signature
        self.input_signature = input_signature
        self.guards = traced.guards
        self._guards_hold = compile_guards(self.guards, [v.data for v in traced.graph.captures])
        self._traced = traced
        self._call_signature = call_signature  # the Python function's, to read calls alike
        self.compilation = Compilation(run_pipeline(traced.graph, passes, verify, examples),
                                       self)
        self.graph = self.compilation.graph  # the optimized graph
        inputs = traced.graph.inputs
        self._backend = get_backend(backend or (inputs[0].spec.device if inputs else "cpu"))
        self._executor = generate(self.graph, self._backend)
        self._out_backends = [get_backend(v.spec.device) for v in self.graph.outputs]
        self._results = len(traced.graph.results)
        self._updates = bool(self.graph.updates)
        self._update_plan = [(u.slot, u.output, None if u.output is None else
                              self._out_backends[u.output]) for u in self.graph.updates]
        # A trace that ran backward() has its gradients inside: it is not differentiated again.
        self._differentiable = all(u.slot.attr != "grad" for u in traced.graph.updates)
        self._returns_state = any(r is not None for r in traced.returned)
        self._single_output = traced.out_tree is None and isinstance(traced.out_leaves[0], Value)
        self.call_source, namespace = _quick_call_source(self)
        exec(compile(self.call_source, f"<teachflow call of {self.graph.name}>", "exec"),
             namespace)  # (generated from the graph, its guards and its updates)
        self.quick_call = namespace["call"]

    @property
    def source(self) -> str:
        """The generated Python that runs the graph."""
        return self._executor.source

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return dispatch.call(self, args, kwargs)

    def run(self, args: tuple, kwargs: dict) -> Any:
        """Run the executor on these arguments (eagerly)."""
        tensors, arrays = self._checked_inputs(args, kwargs)
        result = self.run_flat(tensors)
        write_into_arrays(arrays)
        return result

    def inline(self, args: tuple, kwargs: dict) -> Any:
        """Inside another trace: the traced graph's ops join that trace, one by one."""
        tensors, arrays = self._checked_inputs(args, kwargs)
        result = self._finish(tensors, interpret(self._traced.graph, tensors))
        write_into_arrays(arrays)
        return result

    def inputs_of(self, /, *args: Any, **kwargs: Any) -> list[Tensor]:
        """The tensors a call with these arguments gives the graph, in the order of its inputs
        (a NumPy array as the tensor made of it)."""
        args, kwargs, _ = canonical_call(self._call_signature, args, kwargs, self.graph.name)
        leaves, _ = as_inputs(tree_flatten((args, kwargs))[0])
        return leaf_keys(leaves)[1]

    @property
    def guard_source(self) -> str:
        """The generated Python that checks the trace's guards before each call."""
        return guard_source(self.guards, [v.data for v in self._traced.graph.captures])[0]

    def guards_hold(self, tensors: list[Tensor] | tuple) -> bool:
        """Does the state outside the graph still look as the trace assumed (and does every
        tensor it reads still exist)?"""
        return self._guards_hold(tensors)

    def _checked_inputs(self, args: tuple, kwargs: dict) -> tuple[list[Tensor], list]:
        """The call's tensors (and its NumPy arrays, see `as_inputs`), once it is sure that
        they fit this trace: its signature, and the guards on the state it read."""
        try:
            args, kwargs, _ = canonical_call(self._call_signature, args, kwargs,
                                             self.graph.name)
            leaves, treedef = tree_flatten((args, kwargs))
            leaves, arrays = as_inputs(leaves)
            keys, tensors = leaf_keys(leaves)
            if self.input_signature is not None and len(keys) == len(self.signature.names):
                keys = fit_input_signature(self.input_signature, keys, tensors,
                                           list(self.signature.names), self.graph.name)
        except TeachflowError as err:
            why = err.message
            keys, treedef = None, None
        same_tree = treedef is not None and exact_tree(treedef) == exact_tree(
            self._traced.in_tree)
        if keys != self.signature.keys or not same_tree:
            if same_tree:
                new = Signature(self.signature.arguments, self.signature.names, keys)
                why = retrace_reason(self.signature, new)
            elif keys is not None:
                why = structure_difference(self._traced.in_tree, treedef) or \
                    "the arguments are structured differently"
            raise SignatureMismatch(f"this concrete function was traced for ({self.signature}); "
                                    f"these arguments do not fit it: {why}", op="function",
                                    hint=self.mismatch_hint)
        if not self.guards_hold(tensors):
            why = "; ".join([g.reason(tensors) for g in self.guards if not g.holds(tensors)]
                            + [f"{v.data.name} exists" for v in self._traced.graph.captures
                               if not v.data.alive])
            raise SignatureMismatch(f"this concrete function was traced assuming that {why}",
                                    op="function", hint=self.mismatch_hint)
        return tensors, arrays

    def run_flat(self, tensors: list[Tensor] | tuple) -> Any:
        """Run on the flat tensor arguments (known to fit); write back updated state; give back
        the results in the function's structure."""
        backend, arrays, tracked = self._backend, [], []
        for t in tensors:
            if t._backend is not backend:
                raise DeviceError(f"this function was compiled for {backend.name} but got a "
                                  f"tensor on {t.device}", op="function")
            if t._node is not None:
                tracked.append(t._node)
            arrays.append(t._data)
        for capture in self._executor.captures:  # read by reference: current values
            state = capture.data.read(tensors)
            if state._node is not None:
                tracked.append(state._node)
            arrays.append(state._data)
        taped = bool(tracked) and tape.is_grad_enabled()
        if taped and self._differentiable:
            # Someone may differentiate through this call: its ops run one by one, on the tape
            # (the optimized graph's fused kernels have no gradient rules).
            return self._finish(tensors, interpret(self._traced.graph, tensors))
        try:
            outputs = self._executor.fn(*arrays)
        except Exception as exc:
            raise explain_failure(self._traced.graph, tensors) from exc
        n = self._results
        results = []  # (loops: in the hot path, a comprehension's own frame costs)
        for array, out_backend in zip(outputs[:n], self._out_backends, strict=False):
            if type(array) is not out_backend.array_type:  # a NumPy scalar, from a 0-d result
                array = out_backend.xp.asarray(array)
            results.append(Tensor._make(array, out_backend, None))
        if taped:
            # A trace that ran backward(): its gradients are inside already. Its results say so
            # if backward() reaches them again (the state it updated stays plain, as eagerly).
            results = [_not_differentiable_again(r, tracked, self.graph.name) for r in results]
        if self._updates:
            self._write_back_arrays(tensors, outputs)
        return self._structured(tensors, results)

    def _write_back_arrays(self, tensors: list[Tensor] | tuple, outputs: Any) -> None:
        """`write_back` for a run of the executor, which runs only eagerly: the state takes the
        new arrays at once, as `EagerInterpreter.assign` and `write_grad` would give them to it
        (no Tensor is made for a new value; a .grad is a plain tensor)."""
        for slot, output, out_backend in self._update_plan:
            tensor = slot.tensor(tensors)
            array = None if output is None else outputs[output]
            if array is not None and type(array) is not out_backend.array_type:
                array = out_backend.xp.asarray(array)  # (a NumPy scalar, from a 0-d result)
            if slot.attr == "data":
                tensor._take_array(array)
            else:
                tensor._grad = None if array is None else Tensor._make(array, out_backend, None)

    def _finish(self, tensors: list[Tensor] | tuple, results: list[Tensor]) -> Any:
        """Write back the state the call updated; the results in the function's structure."""
        if self._updates:
            write_back(self.graph, tensors, results)
            results = results[:self._results]
        return self._structured(tensors, results)

    def _structured(self, tensors: list[Tensor] | tuple, results: list[Tensor]) -> Any:
        """The results in the function's structure."""
        if self._returns_state:  # `return w`: w itself
            results = [r if outside is None else outside.read(tensors)
                       for r, outside in zip(results, self._traced.returned, strict=True)]
        if self._single_output:
            return results[0]
        it = iter(results)
        leaves = [next(it) if isinstance(v, Value) else v for v in self._traced.out_leaves]
        return tree_unflatten(self._traced.out_tree, leaves)

    def __repr__(self) -> str:
        return f"<ConcreteFunction {self.graph.name}({self.signature}): {len(self.graph)} nodes>"


def write_back(graph: Graph, arguments: list[Tensor] | tuple, outputs: list[Tensor]) -> None:
    """After a run: each piece of state the traced code updated takes its new value, as eagerly
    (a tensor updated in place holds the new values; a .grad is the new gradient, or None).
    Through the interpreter: inside another trace, that trace records the updates in turn."""
    interpreter = dispatch.current_interpreter()
    for update in graph.updates:
        tensor = update.slot.tensor(arguments)
        new = None if update.output is None else outputs[update.output]
        if update.slot.attr == "data":
            interpreter.assign(tensor, new)
        else:  # a gradient is a plain value, off the tape, as backward() leaves it
            plain = new is None or new._node is None  # (what the generated code gives is)
            interpreter.write_grad(tensor, new if plain else new.detach())


#: What `ConcreteFunction.quick_call` returns when a call must go the careful way.
CAREFUL = object()


def _quick_call_source(concrete: ConcreteFunction) -> tuple[str, dict[str, Any]]:
    """The source of ``call(arguments)``: a whole call of `concrete` on tensor arguments in one
    generated function, as TorchDynamo guards a compiled frame. It checks the guards, reads the
    captured state, runs the executor, makes the results and writes the updated state back:
    what `Function.run` and `run_flat` do step by step, without the steps (each a Python call
    touching objects that the kernels have pushed out of the cache, so they cost more than their
    work). Anything unusual (a guard that fails, a tensor on another device, a call to record on
    the tape) returns `CAREFUL`, and the call goes the careful way, which says why."""
    writer = GuardWriter(fail="CAREFUL")
    namespace = writer.namespace
    named: dict[int, str] = {}

    def constant(prefix: str, value: Any) -> str:  # (one name per object)
        if id(value) not in named:
            named[id(value)] = writer.constant(prefix, value)
        return named[id(value)]

    lines: list[str] = []
    for slot in (v.data for v in concrete._traced.graph.captures):
        lines += writer.find(slot)
    for guard in concrete.guards:
        lines += writer.check(guard)

    def tensor_of(slot: Any) -> str:
        found, name = writer.tensor(slot)
        lines.extend(found)
        return name

    backend = constant("backend", concrete._backend)
    held = [f"a{k}" for k in range(len(concrete._traced.graph.inputs))]
    lines += [f"{a} = arguments[{k}]" for k, a in enumerate(held)]
    if held:
        lines += [f"if {' or '.join(f'{a}._backend is not {backend}' for a in held)}:",
                  "    return CAREFUL  # (another device: the careful way explains)"]
    for k, capture in enumerate(concrete._executor.captures):
        slot = capture.data
        if slot.attr == "data":
            held.append(tensor_of(slot))
            continue
        owner = tensor_of(slot)
        held.append(f"s{k}")
        lines += [f"s{k} = {owner}._grad  # {one_line(slot.name)}", f"if s{k} is None:",
                  "    return CAREFUL"]
    namespace.update(CAREFUL=CAREFUL, grad_enabled=tape.is_grad_enabled, make=Tensor._make,
                     not_again=_not_differentiable_again)
    nodes = "".join(f"{t}._node, " for t in held)
    lines += [f"tracked = [n for n in ({nodes.rstrip()}) if n is not None]" if held else
              "tracked = []", "taped = bool(tracked) and grad_enabled()"]
    if concrete._differentiable:
        lines += ["if taped:  # someone may differentiate through it: op by op, on the tape",
                  "    return CAREFUL"]
    executor = constant("executor", concrete._executor)
    explain = constant("explain", lambda tensors: explain_failure(concrete._traced.graph,
                                                                  tensors))
    lines += ["try:", f"    outputs = {executor}.fn({', '.join(f'{t}._data' for t in held)})",
              "except Exception as exc:", f"    raise {explain}(arguments) from exc"]

    def array(i: int, name: str) -> list[str]:
        """Output `i` as its backend's array (a 0-d result may come as a NumPy scalar)."""
        read, shape = [f"{name} = outputs[{i}]"], concrete.graph.outputs[i].spec.shape
        if shape and None not in shape:  # an array for sure
            return read
        return [*read, *_as_array(name, concrete._out_backends[i], constant)]

    results = [f"r{i}" for i in range(concrete._results)]
    for i, r in enumerate(results):
        out = constant("backend", concrete._out_backends[i])
        lines += [*array(i, r), f"{r} = make({r}, {out}, None)", "if taped:",
                  f"    {r} = not_again({r}, tracked, {concrete.graph.name!r})"]
    for update in concrete.graph.updates:  # the state the call updated takes its new value
        owner = tensor_of(update.slot)
        comment = f"  # {one_line(update.slot.name)} <- output {update.output}"
        if update.output is None:
            lines.append(f"{owner}._grad = None{comment}")
            continue
        lines += array(update.output, "new")
        if update.slot.attr == "data":
            lines.append(f"{owner}._take_array(new){comment}")
        else:
            out = constant("backend", concrete._out_backends[update.output])
            lines.append(f"{owner}._grad = make(new, {out}, None){comment}")
    if concrete._single_output and not concrete._returns_state:
        lines.append(f"return {results[0]}")
    else:
        structured = constant("structured", concrete._structured)
        lines.append(f"return {structured}(arguments, [{', '.join(results)}])")
    text = "\n".join(["def call(arguments):",
                      f'    """One call of {concrete.graph.name}, whole (or CAREFUL)."""',
                      *[f"    {line}" for line in lines], ""])
    return text, namespace


def _as_array(name: str, backend: Any, constant: Callable[[str, Any], str]) -> list[str]:
    kind, xp = constant("array_type", backend.array_type), constant("xp", backend.xp)
    return [f"if type({name}) is not {kind}:", f"    {name} = {xp}.asarray({name})"]


def _refuse_backward(g: Any, i: int, *, function: str) -> Any:
    raise AutodiffError(
        f"this result comes from a call of the staged function {function}, which ran "
        "backward() inside: its gradients were computed inside the graph, and the call is not "
        "on the tape for another backward", op="backward",
        hint="compute what you want to differentiate outside that staged function (or stage "
             "it separately, without backward() inside)")


#: Marks the results of a staged call that ran backward(): backward() reaching one says why it
#: cannot go on (rather than a silently missing gradient).
_RAN_BACKWARD = Op("staged call that ran backward()", lambda xp: None, lambda *a: None,
                   grads=_refuse_backward, primitive=False, arg_names=())


def _not_differentiable_again(result: Tensor, parents: list, function: str) -> Tensor:
    if result.dtype.kind not in "fc":
        return result
    node = tape.TapeNode(_RAN_BACKWARD, {"function": function}, tuple(parents),
                             (None,) * len(parents), None, result._backend, result.shape,
                             result.dtype)
    return Tensor._make(result._data, result._backend, node)


def as_inputs(leaves: list) -> tuple[list, list]:
    """A NumPy array argument is data: a tensor input, copied as `tfl.tensor` copies it. Also
    each array with its tensor and the tensor's values now: an update of the tensor inside the
    function goes back into the array after the call (`write_into_arrays`), as the same
    update of the array would eagerly."""
    inputs, arrays, made = [], [], {}
    for x in leaves:
        if isinstance(x, np.ndarray):
            t = made.get(id(x))  # one array passed twice is one tensor, as it is one array
            if t is None:
                t = made[id(x)] = Tensor(x)
                arrays.append((t, x, t._data))
            x = t
        inputs.append(x)
    return inputs, arrays


def write_into_arrays(arrays: list) -> None:
    for tensor, array, before in arrays:
        if tensor._data is not before:  # updated in place by the call
            np.copyto(array, tensor.numpy(), casting="same_kind")
