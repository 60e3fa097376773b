"""A concrete function: one trace of a `tfl.function`, compiled, and what calling it does.

The plain route of a call, after `Function` has found this concrete function for the call's
signature (or the caller called it directly, and `run` checked that the signature fits):

1. check its guards: the state outside the graph is as the trace assumed (`guards_hold`,
   generated from the guards: `teachflow.staged.guard_code`);
2. read that state, and run the generated executor on the arguments' arrays and the state's
   (`run_flat`); a call that someone may differentiate instead runs the traced graph op by op,
   on the tape (`interpret`);
3. write back the state the traced code updated (see `teachflow.tracing.builder`): the new
   values of tensors updated in place, and new ``.grad``s (`write_back`);
4. give the results in the function's structure.

How a call runs is the interpreter's decision, as for every op (`dispatch.call`): eagerly it
takes that route (`run`); inside another trace it is one ``call`` node of that trace (`inline`,
see `teachflow.staged.calls`).
A `tfl.function` may also take a fast path, the same steps written as one generated function
(`teachflow.staged.fast_path`); it reads this module's route, and must leave what it leaves.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from teachflow.autodiff import tape
from teachflow.compiler import Compilation, run_pipeline
from teachflow.core import dispatch
from teachflow.core.backends import get_backend
from teachflow.core.errors import AutodiffError, DeviceError, SignatureMismatch, TeachflowError
from teachflow.core.spec import TensorSpec
from teachflow.core.tree import tree_flatten, tree_unflatten
from teachflow.execution.executor import explain_failure, interpret
from teachflow.execution.pieces import executor_for
from teachflow.graph import Graph, Value
from teachflow.ops.op import Op
from teachflow.staged.calls import call_node, calls_as_node
from teachflow.staged.guard_code import guards_function
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
        self.guard_source, self._guards_hold = guards_function(
            self.guards, [v.data for v in traced.graph.captures])
        self.traced = traced
        self._call_signature = call_signature  # the Python function's, to read calls alike
        self.compilation = Compilation(run_pipeline(traced.graph, passes, verify, examples),
                                       self)
        self.graph = self.compilation.graph  # the optimized graph
        inputs = traced.graph.inputs
        self.backend = get_backend(backend or (inputs[0].spec.device if inputs else "cpu"))
        self.input_backends = [get_backend(v.spec.device) for v in inputs]
        self.executor = executor_for(self.graph, self.backend)
        self.output_backends = [get_backend(v.spec.device) for v in self.graph.outputs]
        #: How many of the graph's outputs are the function's results (the rest: new state).
        self.result_count = len(traced.graph.results)
        self._update_plan = [(u.slot, u.output, None if u.output is None else
                              self.output_backends[u.output]) for u in self.graph.updates]
        # A trace that ran backward() has its gradients inside: it is not differentiated again.
        self.differentiable = all(u.slot.attr != "grad" for u in traced.graph.updates)
        self._returns_state = any(r is not None for r in traced.returned)
        self._single_output = traced.out_tree is None and isinstance(traced.out_leaves[0], Value)
        #: A call returns its first result as it is (no structure, no state returned).
        self.returns_first_result = self._single_output and not self._returns_state

    @property
    def source(self) -> str:
        """The generated Python that runs the graph."""
        return self.executor.source

    def __call__(self, /, *args: Any, **kwargs: Any) -> Any:
        return dispatch.call(self, args, kwargs)

    def run(self, args: tuple, kwargs: dict) -> Any:
        """A call, eagerly, by the plain route: the arguments must fit the signature and the
        guards must hold (`_checked_inputs`); then the executor runs and the state is written
        back (`run_flat`)."""
        tensors, arrays = self._checked_inputs(args, kwargs)
        result = self.run_flat(tensors)
        write_into_arrays(arrays)
        return result

    def inline(self, args: tuple, kwargs: dict) -> Any:
        """Inside another trace: one ``call`` node of that trace; where it cannot be one
        (`calls_as_node`), the traced graph's ops join that trace, one by one."""
        tensors, arrays = self._checked_inputs(args, kwargs)
        if calls_as_node(self, arrays):
            return call_node(self, tensors)
        result = self._finish(tensors, interpret(self.traced.graph, tensors))
        write_into_arrays(arrays)
        return result

    def inputs_of(self, /, *args: Any, **kwargs: Any) -> list[Tensor]:
        """The tensors a call with these arguments gives the graph, in the order of its inputs
        (a NumPy array as the tensor made of it)."""
        args, kwargs, _ = canonical_call(self._call_signature, args, kwargs, self.graph.name)
        leaves, _ = as_inputs(tree_flatten((args, kwargs))[0])
        return leaf_keys(leaves)[1]

    def guards_hold(self, tensors: list[Tensor] | tuple) -> bool:
        """Does the state outside the graph still look as the trace assumed (and does every
        tensor it reads still exist)? `guard_source` is the generated Python that says."""
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
            self.traced.in_tree)
        if keys != self.signature.keys or not same_tree:
            if same_tree:
                new = Signature(self.signature.arguments, self.signature.names, keys)
                why = retrace_reason(self.signature, new)
            elif keys is not None:
                why = structure_difference(self.traced.in_tree, treedef) or \
                    "the arguments are structured differently"
            raise SignatureMismatch(f"this concrete function was traced for ({self.signature}); "
                                    f"these arguments do not fit it: {why}", op="function",
                                    hint=self.mismatch_hint)
        if not self.guards_hold(tensors):
            why = "; ".join([g.reason(tensors) for g in self.guards if not g.holds(tensors)]
                            + [f"{v.data.name} exists" for v in self.traced.graph.captures
                               if not v.data.alive])
            raise SignatureMismatch(f"this concrete function was traced assuming that {why}",
                                    op="function", hint=self.mismatch_hint)
        return tensors, arrays

    def run_flat(self, tensors: list[Tensor] | tuple) -> Any:
        """Run on the flat tensor arguments (known to fit, guards checked): read the state,
        run the executor, write back the state it updated; give back the results in the
        function's structure."""
        arrays, tracked = self._arrays(tensors)
        taped = bool(tracked) and tape.is_grad_enabled()
        if taped and self.differentiable:
            # Someone may differentiate through this call: its ops run one by one, on the tape
            # (the optimized graph's fused kernels have no gradient rules).
            return self._finish(tensors, interpret(self.traced.graph, tensors))
        try:
            outputs = self.executor.fn(*arrays)
        except Exception as exc:
            raise explain_failure(self.traced.graph, tensors) from exc
        results = []  # (loops: in the hot path, a comprehension's own frame costs)
        for array, out_backend in zip(outputs[:self.result_count], self.output_backends,
                                      strict=False):
            if type(array) is not out_backend.array_type:  # a NumPy scalar, from a 0-d result
                array = out_backend.xp.asarray(array)
            results.append(Tensor._make(array, out_backend, None))
        if taped:
            # A trace that ran backward(): its gradients are inside already. Its results say so
            # if backward() reaches them again (the state it updated stays plain, as eagerly).
            results = [not_differentiable_again(r, tracked, self.graph.name) for r in results]
        if self._update_plan:
            self._write_back_arrays(tensors, outputs)
        return self.structured(tensors, results)

    def _arrays(self, tensors: list[Tensor] | tuple) -> tuple[list, list]:
        """The arrays the executor takes: the arguments', then the state's, read now (by
        reference: current values); and the tape nodes of those on the tape."""
        arrays, tracked = [], []
        for t, backend in zip(tensors, self.input_backends, strict=True):
            if t._backend is not backend:
                raise DeviceError(f"this function was compiled for {backend.name} but got a "
                                  f"tensor on {t.device}", op="function")
            if t._node is not None:
                tracked.append(t._node)
            arrays.append(t._data)
        for capture in self.executor.captures:
            state = capture.data.read(tensors)
            if state._node is not None:
                tracked.append(state._node)
            arrays.append(state._data)
        return arrays, tracked

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
        if self._update_plan:
            write_back(self.graph, tensors, results)
            results = results[:self.result_count]
        return self.structured(tensors, results)

    def structured(self, tensors: list[Tensor] | tuple, results: list[Tensor]) -> Any:
        """The results in the function's structure."""
        if self._returns_state:  # `return w`: w itself
            results = [r if outside is None else outside.read(tensors)
                       for r, outside in zip(results, self.traced.returned, strict=True)]
        if self._single_output:
            return results[0]
        it = iter(results)
        leaves = [next(it) if isinstance(v, Value) else v for v in self.traced.out_leaves]
        return tree_unflatten(self.traced.out_tree, leaves)

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


def not_differentiable_again(result: Tensor, parents: list, function: str) -> Tensor:
    """`result`, marked as a result of a staged call that ran backward() inside (`parents`: the
    tape nodes the call read), so that backward() reaching it says why it cannot go on."""
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
