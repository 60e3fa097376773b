"""The fast path of a staged call: a whole call written as one generated function.

The plain route of a call (`Function.run`) is four steps of plain Python: find the concrete
function for the arguments' signature, check its guards, run its executor, write back the state
the call updated (`ConcreteFunction.run_flat`). A short training step spends as long on those
steps as in its kernels: each is a few Python calls that touch objects the kernels have pushed
out of the CPU's caches. So a `Function` may write the four steps again as one function,
``call(arguments)``, with the code generator that wrote the executor (`Source`), in the
executor's own namespace: the guards' lines (`guard_code`), the arguments and the state read
as arrays, the executor's lines themselves, the results, and the write-back. TorchDynamo guards
a compiled frame the same way. ``f.fast_call_for(x, y).source`` shows it; for the training step
of the README (``train_step(xs, ys)``, its kernels' lines left out):

    def call(arguments):
        \"\"\"One call of train_step, whole: or NOT_TAKEN, and the plain route runs.\"\"\"
        t0 = owner()  # w
        if t0 is None:  # gone
            return NOT_TAKEN
        ...
        a0 = arguments[0]
        a1 = arguments[1]
        if a0._backend is not backend or a1._backend is not backend:
            return NOT_TAKEN  # (another device: the plain route explains)
        if (a0._node is not None or a1._node is not None or t0._node is not None
        ...
        try:  # the executor's lines
            v3 = matmul(x, w)  # snippet.py:10
            ...
        except Exception as exc:
            raise explain(arguments) from exc
        r0 = make(v31, backend, None)
        t0._take_array(v32)  # w <- output 1
        ...
        return r0

- What it adds: speed only. It runs the same kernels on the same arrays as the plain route, and
  leaves the same results, state and traces (tests/test_fast_path.py runs the tests of staged
  functions both ways, and compares the two call by call).
- When it is used: a call with tensors only, passed by position, whose shapes, dtypes and
  devices are those of an earlier call (`Function.run` looks it up by them), while
  `TAKE_FAST_PATH` in `teachflow.staged.function` is on.
- When it is not: anything unusual (a guard that fails, a tensor the call reads that is gone or
  on another device, a ``.grad`` it reads that is None, a call someone may differentiate, which
  the plain route runs op by op on the tape) returns `NOT_TAKEN` before the call has changed
  anything, and the plain route runs, which explains or traces again.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from teachflow.autodiff import tape
from teachflow.execution.executor import Line, Source, explain_failure
from teachflow.staged.concrete import ConcreteFunction, not_differentiable_again
from teachflow.staged.guard_code import GuardCode, one_line
from teachflow.tensor.tensor import Tensor

#: What a fast call returns when the call must take the plain route.
NOT_TAKEN = object()


class FastCall:
    """The fast path of one concrete function: ``call(arguments)``, written on first use
    (`write`), and its `source`."""

    def __init__(self, concrete: ConcreteFunction) -> None:
        self.concrete = concrete
        self.call: Callable[[tuple], Any] | None = None
        self._source: str | None = None

    def write(self) -> None:
        """Write and compile ``call``."""
        self._source, self.call = _written(self.concrete)

    @property
    def source(self) -> str:
        """The generated Python of the whole call."""
        if self._source is None:
            self.write()
        return self._source


def _written(concrete: ConcreteFunction) -> tuple[str, Callable[[tuple], Any]]:
    """The source and function of a whole call of `concrete` on tensor arguments."""
    executor = concrete.executor
    source = executor.code  # the executor's own: its names, kernels and constants
    # The names the call uses besides the executor's, claimed from the same source.
    local = {n: source.names.claim(n) for n in ("arguments", "exc", "tracked", "taped")}
    arguments = local["arguments"]
    not_taken = source.helper("NOT_TAKEN", NOT_TAKEN)
    make = source.helper("make", Tensor._make)
    guards = GuardCode(source, arguments, fail=not_taken)
    constant = _constants(source)
    name = concrete.graph.name
    lines: list[Line] = [
        (0, f'"""One call of {name}, whole: or NOT_TAKEN, and the plain route runs."""', None)]
    # 1. What the trace assumed (and the tensors it reads or updates, found once).
    lines.append((0, "# What the trace assumed about the state.", None))
    for slot in [v.data for v in concrete.traced.graph.captures] + [
            u.slot for u in concrete.graph.updates]:
        lines += guards.find(slot)
    for guard in concrete.guards:
        lines += guards.check(guard)
    # 2. The arguments and the state the graph reads, as arrays.
    lines.append((0, "# The arguments and the state, as arrays.", None))
    backend = constant("backend", concrete.backend)
    tensors = [source.names.claim(f"a{k}") for k in range(len(concrete.graph.inputs))]
    lines += [(0, f"{a} = {arguments}[{k}]", None) for k, a in enumerate(tensors)]
    if tensors:
        lines += [(0, f"if {' or '.join(f'{a}._backend is not {backend}' for a in tensors)}:",
                   None), (1, f"return {not_taken}  # (another device: the plain route explains)",
                           None)]
    held = list(tensors)  # the tensors whose arrays the executor takes, in its order
    for capture in executor.captures:
        found, tensor = guards.tensor(capture.data)
        lines += found
        if capture.data.attr == "grad":
            grad = source.names.claim("grad")
            lines += [(0, f"{grad} = {tensor}._grad  # {one_line(capture.data.name)}", None),
                      (0, f"if {grad} is None:", None), (1, f"return {not_taken}", None)]
            tensor = grad
        held.append(tensor)
    lines += _on_the_tape(source, concrete, held, not_taken, local)
    if held:
        lines.append((0, f"{', '.join(executor.params)} = "
                         f"{', '.join(f'{t}._data' for t in held)}", None))
    # 3. The executor's lines.
    if executor.body:  # (none where the graph returns what it is given)
        explain = constant("explain",
                           lambda tensors: explain_failure(concrete.traced.graph, tensors))
        lines += [(0, "try:  # the executor's lines", None),
                  *[(depth + 1, text, node) for depth, text, node in executor.body],
                  (0, f"except Exception as {local['exc']}:", None),
                  (1, f"raise {explain}({arguments}) from {local['exc']}", None)]
    # 4. The results, and the state written back.
    lines.append((0, "# The results, and the state written back.", None))
    results = [source.names.claim(f"r{i}") for i in range(concrete.result_count)]
    for i, r in enumerate(results):
        out = constant("backend", concrete.output_backends[i])
        found, array = _array(source, concrete, i, constant)
        lines += [*found, (0, f"{r} = {make}({array}, {out}, None)", None)]
        if not concrete.differentiable:
            not_again = source.helper("not_again", not_differentiable_again)
            lines += [(0, f"if {local['taped']}:", None),
                      (1, f"{r} = {not_again}({r}, {local['tracked']}, {name!r})", None)]
    for update in concrete.graph.updates:
        tensor = guards.tensor(update.slot)[1]  # (found in step 1)
        comment = f"  # {one_line(update.slot.name)} <- output {update.output}"
        if update.output is None:
            lines.append((0, f"{tensor}._grad = None{comment}", None))
            continue
        found, array = _array(source, concrete, update.output, constant)
        lines += found
        if update.slot.attr == "data":
            lines.append((0, f"{tensor}._take_array({array}){comment}", None))
        else:
            out = constant("backend", concrete.output_backends[update.output])
            lines.append((0, f"{tensor}._grad = {make}({array}, {out}, None){comment}", None))
    if concrete.returns_first_result:
        lines.append((0, f"return {results[0]}", None))
    else:
        structured = constant("structured", concrete.structured)
        lines.append((0, f"return {structured}({arguments}, [{', '.join(results)}])", None))
    return source.define(source.names.claim("call"), [arguments], lines)


def _on_the_tape(source: Source, concrete: ConcreteFunction, held: list[str],
                 not_taken: str, local: dict[str, str]) -> list[Line]:
    """The lines that find whether the call is recorded on the tape (a tensor it reads is on
    the tape, and grad mode is on): then a call someone may differentiate takes the plain route
    (op by op, on the tape); one that ran backward() inside marks its results."""
    taped, tracked = local["taped"], local["tracked"]
    if not held:
        return [(0, f"{taped} = False", None)]
    grad_enabled = source.helper("grad_enabled", tape.is_grad_enabled)
    nodes = [f"{t}._node" for t in held]
    if concrete.differentiable:
        return [(0, f"if ({' or '.join(f'{n} is not None' for n in nodes)}) and "
                    f"{grad_enabled}():", None),
                (1, f"return {not_taken}  # someone may differentiate: op by op, on the tape",
                 None)]
    listed = ", ".join(nodes) + ("," if len(nodes) == 1 else "")
    return [(0, f"{tracked} = [n for n in ({listed}) if n is not None]", None),
            (0, f"{taped} = bool({tracked}) and {grad_enabled}()", None)]


def _array(source: Source, concrete: ConcreteFunction, i: int,
           constant: Callable[[str, Any], str]) -> tuple[list[Line], str]:
    """Output `i` as its backend's array: the lines that make sure of it (a 0-d result may come
    as a NumPy scalar), and its name."""
    returned = concrete.executor.returned[i]
    shape = concrete.graph.outputs[i].spec.shape
    if shape and None not in shape:  # an array for sure
        return [], returned
    backend = concrete.output_backends[i]
    kind, xp = constant("array_type", backend.array_type), constant("xp", backend.xp)
    name = source.names.claim(f"array{i}")
    return [(0, f"{name} = {returned}", None), (0, f"if type({name}) is not {kind}:", None),
            (1, f"{name} = {xp}.asarray({name})", None)], name


def _constants(source: Source) -> Callable[[str, Any], str]:
    """``constant(prefix, value)``: the name `value` has in `source`, bound on first use (one
    name per object)."""
    named: dict[int, str] = {}

    def constant(prefix: str, value: Any) -> str:
        if id(value) not in named:
            named[id(value)] = source.bind(prefix, value)
        return named[id(value)]

    return constant
