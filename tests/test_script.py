"""``@tfl.script``: a catalogue of what it captures and what it refuses (and how to rewrite it).

The catalogue is data: each case is a function's source, the arguments it is called with, and
either the graph control flow it must become (and the eager result it must equal) or the
TraceError it must raise. ``docs/script.md`` prints it; `test_the_docs_print_the_catalogue`
keeps the two the same (``python tests/test_script.py`` writes the page again).
"""

from __future__ import annotations

import importlib.util
import pathlib
import re
import sys
import textwrap
from dataclasses import dataclass, field

import numpy as np
import pytest

import teachflow as tfl

DOCS = pathlib.Path(__file__).parent.parent / "docs" / "script.md"


@dataclass(frozen=True)
class Case:
    title: str
    source: str  # defines `f` (and whatever it needs), decorated with @tfl.script
    args: tuple = ((1.0, 2.0),)  # each a list for a float32 tensor, or a Python value
    nodes: dict = field(default_factory=dict)  # op name -> count in the traced graph
    error: str | None = None  # a phrase of the TraceError


SUPPORTED = [
    Case("while on a tensor: one loop node, whatever the trip count", """
        def g(x):
            return x * 0.5

        @tfl.script
        def f(x):
            while x.sum() > 1:
                x = g(x)
            return x
        """, ((4.0, 4.0),), {"while": 1}),
    Case("if/else on a tensor: one cond node, both branches traced", """
        @tfl.script
        def f(x):
            if x.sum() > 0:
                y = x * 2
            else:
                y = -x
            return y
        """, ((1.0, -3.0),), {"cond": 1}),
    Case("if without else: the variable keeps its value on the other path", """
        @tfl.script
        def f(x):
            y = x
            if x.max() > 1:
                y = x / x.max()
            return y
        """, ((1.0, 4.0),), {"cond": 1}),
    Case("elif: a cond inside a cond", """
        @tfl.script
        def f(x):
            s = x.sum()
            if s > 10:
                y = x * 0
            elif s > 0:
                y = x * 2
            else:
                y = -x
            return y
        """, ((1.0, 2.0),), {"cond": 2}),
    Case("for over range(n) with n a tensor: one fori_loop node", """
        @tfl.script
        def f(x, n):
            for i in range(n):
                x = x * 2 + 1
            return x
        """, ((1.0, 2.0), "n=3"), {"fori_loop": 1}),
    Case("for over range(3), a Python int: stays Python, unrolled", """
        @tfl.script
        def f(x):
            for i in range(3):
                x = x * 2
            return x
        """, ((1.0, 2.0),), {"mul": 3, "fori_loop": 0}),
    Case("if on a Python argument: stays Python (one trace per value)", """
        @tfl.script
        def f(x, double=True):
            if double:
                x = x * 2
            return x
        """, ((1.0, 2.0),), {"cond": 0}),
    Case("and / or / not in a condition on tensors", """
        @tfl.script
        def f(x):
            if x.sum() > 0 and not x.max() > 10:
                y = x
            else:
                y = x * 0
            return y
        """, ((1.0, 2.0),), {"cond": 1}),
    Case("a loop inside a branch, a counter carried as a tensor", """
        @tfl.script
        def f(x):
            n = 0
            if x.sum() > 0:
                while x.sum() < 100:
                    x = x * 3
                    n = n + 1
            return x, n
        """, ((1.0, 1.0),), {"cond": 1}),
    Case("an update of an element inside a branch", """
        @tfl.script
        def f(x):
            y = x * 1
            if x.sum() > 0:
                y[0] = 0.0
            return y
        """, ((1.0, 2.0),), {"cond": 1}),
    Case("a method, reading self", """
        class Model:
            def __init__(self):
                self.w = tfl.tensor([2.0, 2.0])

            @tfl.script
            def forward(self, x):
                while (x * self.w).sum() < 50:
                    x = x * self.w
                return x

        f = Model().forward
        """, ((1.0, 2.0),), {"while": 1}),
    Case("a nested function, reading its closure", """
        def make(limit):
            @tfl.script
            def f(x):
                while x.sum() < limit:
                    x = x + 1
                return x
            return f

        f = make(10.0)
        """, ((1.0, 2.0),), {"while": 1}),
]

UNSUPPORTED = [
    Case("return inside an if on a tensor", """
        @tfl.script
        def f(x):
            if x.sum() > 0:
                return x
            return -x
        """, error="contains a return statement"),
    Case("break inside a while on a tensor", """
        @tfl.script
        def f(x):
            while x.sum() > 1:
                x = x / 2
                if x.max() < 0.5:
                    break
            return x
        """, ((4.0, 4.0),), error="contains a break statement"),
    Case("continue inside a for over a tensor range", """
        @tfl.script
        def f(x, n):
            for i in range(n):
                if i > 2:
                    continue
                x = x * 2
            return x
        """, ((1.0, 2.0), "n=3"), error="contains a continue statement"),
    Case("a variable assigned in only one branch, used after", """
        @tfl.script
        def f(x):
            if x.sum() > 0:
                y = x * 2
            return y
        """, error="assigned in only one branch"),
    Case("while ... else", """
        @tfl.script
        def f(x):
            while x.sum() > 1:
                x = x / 2
            else:
                x = x + 1
            return x
        """, ((4.0, 4.0),), error="an else clause after the loop"),
    Case("branches that disagree on a dtype", """
        @tfl.script
        def f(x):
            if x.sum() > 0:
                y = x
            else:
                y = x.astype("float64")
            return y
        """, error="the branches disagree on y"),
    Case("a loop that changes a variable's shape", """
        @tfl.script
        def f(x):
            while x.sum() > 1:
                x = x.sum()
            return x
        """, ((4.0, 4.0),), error="changes loop variable 'x' from float32[2] to float32[]"),
    Case("an if on a tensor whose branches only print", """
        @tfl.script
        def f(x):
            if x.sum() > 0:
                print("positive")
            return x
        """, error="assigns no variable that is used after it"),
    Case("a lambda (its source is part of a line of other code)", """
        f = tfl.script(lambda x: x)
        """, error="cannot read a lambda's source"),
    Case("a function without a source file (made by exec)", """
        namespace = {}
        exec("def g(x):\\n    return x", namespace)
        f = tfl.script(namespace["g"])
        """, error="cannot read the source"),
]


def _load(case: Case, tmp_path: pathlib.Path) -> object:
    """Write the case into a module of its own (script reads source files) and import it."""
    path = tmp_path / f"case_{abs(hash(case.title))}.py"
    path.write_text("import teachflow as tfl\n" + textwrap.dedent(case.source))
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module
    spec.loader.exec_module(module)
    return module


def _arguments(case: Case) -> tuple[list, dict]:
    args, kwargs = [], {}
    for a in case.args:
        if isinstance(a, str):
            name, value = a.split("=")
            kwargs[name] = tfl.tensor(int(value))
        else:
            args.append(tfl.tensor(np.array(a, dtype="float32")))
    return args, kwargs


def _eager(result: object) -> list[np.ndarray]:
    leaves = result if isinstance(result, tuple) else (result,)
    return [np.asarray(leaf.numpy() if isinstance(leaf, tfl.Tensor) else leaf) for leaf in leaves]


def _ops(graph: tfl.Graph) -> list[str]:
    names = []
    for node in graph.nodes:
        names.append(node.op.name)
        for sub in tfl.graph.subgraphs(node).values():
            names += _ops(sub)
    return names


@pytest.mark.parametrize("case", SUPPORTED, ids=[c.title for c in SUPPORTED])
def test_a_supported_case_becomes_graph_control_flow_and_equals_python(case, tmp_path) -> None:
    module = _load(case, tmp_path)
    args, kwargs = _arguments(case)
    staged = module.f(*args, **kwargs)
    python = module.f.python_function if hasattr(module.f, "python_function") else None
    original = textwrap.dedent(case.source)
    plain = {"tfl": tfl}  # the same source without @tfl.script: Python's own control flow
    exec(compile(re.sub(r"(?m)^\s*@tfl\.script\s*$\n?", "", original), "<plain>", "exec"),
         plain)
    for got, want in zip(_eager(staged), _eager(plain["f"](*args, **kwargs)), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-6)
    function = module.f if python is not None else module.f.__self__.__class__.forward
    concrete = function.concrete_functions[0] if hasattr(function, "concrete_functions") \
        else None
    graph = concrete.graph if concrete is not None else tfl.trace(module.f, *args, **kwargs)
    ops = _ops(tfl.trace(module.f, *args, **kwargs)) if concrete is None else _ops(
        concrete.compilation.snapshots[0].graph)
    for op, count in case.nodes.items():
        assert ops.count(op) == count, (op, ops, str(graph))


@pytest.mark.parametrize("case", UNSUPPORTED, ids=[c.title for c in UNSUPPORTED])
def test_an_unsupported_case_is_a_trace_error_naming_it_and_the_line(case, tmp_path) -> None:
    with pytest.raises(tfl.TraceError) as info:
        module = _load(case, tmp_path)
        args, kwargs = _arguments(case)
        module.f(*args, **kwargs)
    message = str(info.value)
    assert case.error in message, message
    assert info.value.hint, message  # the rewrite that works
    assert info.value.location is not None and info.value.location.filename.endswith(".py")


def test_a_while_loop_runs_for_any_input_with_one_graph(tmp_path) -> None:
    module = _load(SUPPORTED[0], tmp_path)
    halved = module.f(tfl.tensor([4.0, 4.0]))
    same = module.f(tfl.tensor([0.2, 0.2]))
    np.testing.assert_allclose(halved.numpy(), [0.5, 0.5])
    np.testing.assert_allclose(same.numpy(), [0.2, 0.2])
    assert module.f.trace_count == 1
    (loop,) = module.f.concrete_functions[0].compilation.snapshots[0].graph.nodes[-1:]
    assert loop.op.name == "while"
    body = loop.params["body_fn"]
    assert [n.op.name for n in body.nodes] == ["mul"] and body.nodes[0].source.function == "g"


def test_traced_without_script_the_same_function_is_a_trace_error_pointing_here() -> None:
    def f_dynamic(x):
        while x.sum() > 1:
            x = x * 0.5
        return x

    with pytest.raises(tfl.TraceError) as info:
        tfl.trace(f_dynamic, tfl.tensor([4.0, 4.0]))
    for name in ("tfl.cond", "tfl.while_loop", "@tfl.script"):
        assert name in info.value.hint


def test_scripted_functions_compose_with_grad_compile_and_function(tmp_path) -> None:
    module = _load(SUPPORTED[1], tmp_path)
    x = tfl.tensor([1.0, -3.0])
    loss = lambda x: module.f(x).sum()
    assert np.allclose(tfl.grad(loss)(x).numpy(), [-1.0, -1.0])  # sum < 0: y = -x
    assert np.allclose(tfl.function(tfl.grad(loss))(tfl.tensor([1.0, 3.0])).numpy(), [2, 2])
    compiled = tfl.compile(module.f, x)
    assert "if " in compiled.source and "else:" in compiled.source
    assert tfl.function(module.f)(x).numpy().tolist() == [-1.0, 3.0]
    assert "cond" in module.f.code or "if_stmt" in module.f.code


def render() -> str:
    """The catalogue as the page docs/script.md."""
    lines = ["# What `@tfl.script` captures", "",
             "Generated from the catalogue in `tests/test_script.py` "
             "(`python tests/test_script.py` writes it again).", "",
             "`@tfl.script` rewrites `if`, `while` and `for i in range(...)` statements whose "
             "condition or bound is a tensor into `tfl.cond`, `tfl.while_loop` and "
             "`tfl.fori_loop` nodes. Control flow on Python values stays Python.", "",
             "## Supported", ""]
    for case in SUPPORTED:
        nodes = ", ".join(f"{count} `{op}`" for op, count in case.nodes.items())
        lines += [f"### {case.title}", "", "```python", textwrap.dedent(case.source).strip(),
                  "```", "", f"Graph: {nodes} node(s).", ""]
    lines += ["## Not supported (a `TraceError` says why, and what to write instead)", ""]
    for case in UNSUPPORTED:
        lines += [f"### {case.title}", "", "```python", textwrap.dedent(case.source).strip(),
                  "```", "", f"Error: \u2026{case.error}\u2026", ""]
    return "\n".join(lines)


def test_the_docs_print_the_catalogue() -> None:
    assert DOCS.read_text() == render(), "run: python tests/test_script.py"


if __name__ == "__main__":
    DOCS.parent.mkdir(exist_ok=True)
    DOCS.write_text(render())
