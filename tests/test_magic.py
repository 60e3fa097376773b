"""The %%compile cell magic, run in a real IPython shell (and once in a real Jupyter kernel)."""

from __future__ import annotations

import ast
import textwrap

import numpy as np
import pytest

import teachflow as tfl
from teachflow.magic import CellReads
from teachflow.magic.cell import LAST as LAST_NAME

IPython = pytest.importorskip("IPython")
from IPython.core.interactiveshell import InteractiveShell  # noqa: E402 (after the skip)


@pytest.fixture(scope="module")
def shell():
    """One IPython shell for this file, gone at its end: IPython keeps one shell per process,
    and a later file (tests/test_grading_route.py, a kernel's shell) makes one of its own."""
    made = not InteractiveShell.initialized()
    yield InteractiveShell.instance()
    if made:
        InteractiveShell.clear_instance()


@pytest.fixture
def ip(shell):
    shell.run_line_magic("load_ext", "teachflow")
    before = set(shell.user_ns)
    shell.user_ns.update(tfl=tfl, x=tfl.tensor([[1.0, -2.0, 3.0], [0.5, 1.5, -1.0]]),
                         w=tfl.tensor([[1.0, 0.0], [0.5, -1.0], [2.0, 1.0]]))
    yield shell
    for name in set(shell.user_ns) - before:
        del shell.user_ns[name]


CELL = "h = (x @ w).relu()\nloss = (h * h).mean()\nloss"


def test_the_cell_is_staged_run_and_its_variables_come_back(ip) -> None:
    x, w = ip.user_ns["x"], ip.user_ns["w"]
    returned = ip.run_cell_magic("compile", "--no-show", CELL)
    h = np.maximum(x.numpy() @ w.numpy(), 0)
    np.testing.assert_allclose(returned.numpy(), (h * h).mean(), rtol=1e-6)
    np.testing.assert_allclose(ip.user_ns["h"].numpy(), h, rtol=1e-6)
    assert ip.user_ns["result"] is returned and ip.user_ns["loss"].item() == returned.item()
    assert ip.user_ns["x"] is x and ip.user_ns["w"] is w  # inputs are not replaced
    compiled = ip.user_ns["compiled"]
    assert isinstance(compiled, tfl.Compilation)
    trace = compiled.snapshots[0].graph
    assert [v.name for v in trace.inputs] == ["x", "w"]  # the tensors the cell reads
    assert [n.op.name for n in trace.nodes] == ["matmul", "relu", "mul", "mean"]
    assert compiled.snapshots[-1].pass_name == "plan_memory"  # (the default pipeline's last)


def test_the_compiled_cell_runs_again_on_new_inputs(ip) -> None:
    ip.run_cell_magic("compile", "--no-show --name staged", CELL)
    staged = ip.user_ns["staged"]
    x2 = tfl.ones(2, 3)
    out = staged(x2, ip.user_ns["w"])
    want = np.maximum(np.ones((2, 3)) @ ip.user_ns["w"].numpy(), 0)
    np.testing.assert_allclose(out["loss"].numpy(), (want * want).mean(), rtol=1e-6)


def test_passes_option_picks_the_pipeline(ip) -> None:
    ip.run_cell_magic("compile", "--no-show --passes simplify,dce", "y = x * 1.0\ny")
    compiled = ip.user_ns["compiled"]
    assert [s.pass_name for s in compiled.snapshots] == ["trace", "simplify", "dce"]
    assert compiled.snapshots[1].changes[0].rule == "x*1 -> x"


def test_an_error_points_to_the_cells_own_line(ip) -> None:
    # Lines are numbered as the notebook shows the cell: the %%compile line is line 1.
    with pytest.raises(tfl.ShapeError) as info:
        ip.run_cell_magic("compile", "--no-show", "h = x @ w\ng = h @ w\ng")
    assert info.value.location.lineno == 3
    assert info.value.location.line == "g = h @ w"


def test_control_flow_on_a_tensor_value_is_a_trace_error_at_the_cell_line(ip) -> None:
    cell = "y = x * 2\nif y.sum() > 0:\n    y = -y\ny"
    with pytest.raises(tfl.TraceError) as info:
        ip.run_cell_magic("compile", "--no-show", cell)
    assert info.value.location.lineno == 3
    assert info.value.location.line == "if y.sum() > 0:"


def test_script_option_turns_control_flow_on_tensors_into_graph_nodes(ip) -> None:
    cell = ("y = x * 2\nif y.sum() > 0:\n    y = -y\nelse:\n    y = y * 3\n"
            "while y.abs().sum() < 100:\n    y = y * 2\ny")
    returned = ip.run_cell_magic("compile", "--no-show --script", cell)
    y = ip.user_ns["x"].numpy() * 2
    y = -y if y.sum() > 0 else y * 3
    while np.abs(y).sum() < 100:
        y = y * 2
    np.testing.assert_allclose(returned.numpy(), y)
    trace = ip.user_ns["compiled"].snapshots[0].graph
    ops = [n.op.name for n in trace.nodes]
    assert ops.count("cond") == 1 and ops.count("while") == 1, ops
    cond = next(n for n in trace.nodes if n.op.name == "cond")
    assert cond.source.lineno == 3 and cond.source.line == "if y.sum() > 0:"
    negate = cond.params["true_fn"].nodes[0]
    assert negate.op.name == "neg" and negate.source.line == "y = -y"
    # A compiled cell with a loop runs again on other inputs: no unrolled trip count.
    again = ip.user_ns["compiled"](tfl.tensor([[100.0, 0, 0], [0, 0, 0]]))
    np.testing.assert_allclose(again[LAST_NAME].numpy(), [[-200.0, 0, 0], [0, 0, 0]])


def test_script_option_reports_what_a_graph_cannot_express_at_the_cell_line(ip) -> None:
    cell = "y = x\nwhile y.sum() > 1:\n    y = y / 2\n    if y.max() < 0.5:\n        break\ny"
    with pytest.raises(tfl.TraceError) as info:
        ip.run_cell_magic("compile", "--no-show --script", cell)
    assert info.value.location.lineno == 3 and "break statement (line 6)" in str(info.value)


# --- The cell number: IPython counts up before the cell runs ----------------------------------


def test_errors_and_the_graph_name_the_cell_number_the_notebook_shows(ip) -> None:
    failed = ip.run_cell("%%compile --no-show\nh = x @ w\ng = h @ w\ng")
    error = failed.error_in_exec
    assert isinstance(error, tfl.ShapeError)
    assert f"cell In[{failed.execution_count}], line 3:  g = h @ w" in str(error)

    ran = ip.run_cell("%%compile --no-show\n\nh = x @ w\nloss = h.sum()")
    assert ran.success, ran.error_in_exec
    text = str(ip.user_ns["compiled"].snapshots[0].graph)
    assert f"cell In[{ran.execution_count}], line 3" in text
    assert f"cell In[{ran.execution_count}], line 4" in text
    assert f"In[{ran.execution_count + 1}]" not in text


def test_in_a_real_kernel_the_error_names_the_cell_as_numbered(tmp_path) -> None:
    nbformat = pytest.importorskip("nbformat")
    nbclient = pytest.importorskip("nbclient")
    cells = [
        "%load_ext teachflow\nimport teachflow as tfl\nx, w = tfl.ones(4, 3), tfl.ones(3, 2)",
        "1 + 1",
        "%%compile --no-show\nh = x @ w\ng = h @ w\ng",
        "%%compile --no-show\nh = (x @ w).relu()\nh.sum()",
        "print(compiled.graph)",
    ]
    nb = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(c) for c in cells])
    client = nbclient.NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True,
                                     resources={"metadata": {"path": str(tmp_path)}})
    client.execute()
    failing, compiled, printed = nb.cells[2], nb.cells[3], nb.cells[4]
    error = next(o for o in failing.outputs if o.output_type == "error")
    assert error.ename == "ShapeError"
    assert f"cell In[{failing.execution_count}], line 3:  g = h @ w" in error.evalue
    graph = "".join(o.get("text", "") for o in printed.outputs)
    assert f"cell In[{compiled.execution_count}], line 2" in graph
    assert f"cell In[{compiled.execution_count}], line 3" in graph


# --- Running a cell again ---------------------------------------------------------------------


def test_running_a_cell_twice_gives_the_same_graph(ip) -> None:
    first = ip.run_cell_magic("compile", "--no-show", CELL)
    graph = ip.user_ns["compiled"].snapshots[0].graph
    assert isinstance(ip.user_ns["h"], tfl.Tensor)  # the cell's own names are tensors now
    again = ip.run_cell_magic("compile", "--no-show", CELL)
    regraph = ip.user_ns["compiled"].snapshots[0].graph
    assert [v.name for v in regraph.inputs] == [v.name for v in graph.inputs] == ["x", "w"]
    assert str(regraph) == str(graph)
    assert again.item() == first.item()


def test_a_loop_that_reads_its_own_value_from_an_earlier_turn_gives_one_graph(ip) -> None:
    """h is read (in a branch) before the cell binds it in text order, but only on turns after
    the first: the cell's own h, not an input, whether or not the notebook has an h."""
    cell = "for k in range(3):\n    h = (x @ x.T) if k == 0 else (h @ h)\nh.sum()"
    graphs = []
    for _ in range(2):
        ip.run_cell_magic("compile", "--no-show", cell)
        graphs.append(str(ip.user_ns["compiled"].snapshots[0].graph))
    assert graphs[0] == graphs[1] and "graph cell(%x: f32[2,3])" in graphs[0]


def test_a_branch_that_reads_the_notebooks_value_first_still_reads_it(ip) -> None:
    ip.user_ns["s"] = tfl.ones(2)
    cell = "for k in range(1, 3):\n    if k:\n        s = s + k\ns"
    first = ip.run_cell_magic("compile", "--no-show", cell)
    second = ip.run_cell_magic("compile", "--no-show", cell)  # reads the s the first made
    np.testing.assert_array_equal(first.numpy(), [4.0, 4.0])
    np.testing.assert_array_equal(second.numpy(), [7.0, 7.0])


def test_a_name_read_before_the_cell_assigns_it_comes_from_the_notebook(ip) -> None:
    ip.user_ns.update(h=tfl.ones(2, 2), lr=0.5)
    ip.run_cell_magic("compile", "--no-show", "h = h + 1\nlr = lr * 0.5\nh * lr")
    trace = ip.user_ns["compiled"].snapshots[0].graph
    assert [v.name for v in trace.inputs] == ["h"]  # a tensor: an input; a number: a constant
    np.testing.assert_allclose(ip.user_ns["h"].numpy(), np.full((2, 2), 2.0))
    assert ip.user_ns["lr"] == 0.25
    np.testing.assert_allclose(ip.user_ns["result"].numpy(), np.full((2, 2), 0.5))


def reads(source: str) -> list[str]:
    return CellReads.of(ast.parse(textwrap.dedent(source))).before_bound


@pytest.mark.parametrize(("source", "expected"), [
    ("h = x * 2\ny = h + 1", ["x"]),
    ("h = h + 1", ["h"]),
    ("loss = (b @ a + c).sum()", ["b", "a", "c"]),  # the order Python evaluates them in
    ("h += x", ["h", "x"]),
    ("h = x\nh += x", ["x"]),
    ("h[0] = v", ["v", "h"]),
    ("a, *b = t\nc = a + b[0]", ["t"]),
    ("for k in ks:\n    s = s + k * w\nt = s", ["ks", "s", "w"]),
    ("s = x\nfor k in range(3):\n    s = s + k\n", ["x", "range"]),
    ("for i in range(2):\n    h = x * i\ny = h.sum()", ["range", "x"]),
    ("ys = [x * k for k in ks if k > m]", ["ks", "m", "x"]),
    ("ys = [k * j for k in ks for j in js]", ["ks", "js"]),
    ("d = {k: v * w for k, v in items}", ["items", "w"]),
    ("g = (k for k in ks)\nk = 1", ["ks"]),
    ("ys = [(n := x * k) for k in ks]\nz = n", ["ks", "x"]),
    ("y = a if c else b", ["c", "a", "b"]),
    ("d = {p: q, **r}", ["p", "q", "r"]),
    ("with open(p) as f:\n    t = f.read() + u", ["open", "p", "u"]),
    ("try:\n    y = x\nexcept E as e:\n    y = e", ["x", "E"]),
    ("import numpy as np\ny = np.exp(x)", ["x"]),
    ("def f(a, b=d):\n    return a * w + b\ny = f(x)", ["d", "w", "x"]),
    ("f = lambda a: a * w\ny = f(x)", ["w", "x"]),
    ("def f():\n    return h\nh = x\ny = f()", ["x"]),  # f reads the cell's own h
    ("del h", ["h"]),
    ("if c:\n    h = h + 1", ["c", "h"]),  # a branch not in a loop reads what it reads
    ("for k in ks:\n    h = x if k == 0 else h * x", ["ks", "x", "h"]),  # (h: maybe_own)
])
def test_the_cell_reads_in_evaluation_order(source: str, expected: list[str]) -> None:
    assert reads(source) == expected


@pytest.mark.parametrize(("source", "maybe"), [
    ("for k in ks:\n    h = x if k == 0 else h * x", {"h"}),
    ("for k in ks:\n    if k:\n        s = s + k", {"s"}),
    ("while c:\n    y = a or y", {"y"}),
    ("for k in ks:\n    s = s + k", set()),  # read on the first turn for certain
    ("if c:\n    h = h + 1", set()),
    ("for k in ks:\n    t = u if k else 0", set()),  # u is never the cell's own
])
def test_reads_in_branches_of_loops_may_be_of_the_cells_own_value(source: str, maybe) -> None:
    assert CellReads.of(ast.parse(source)).maybe_own == maybe


def test_the_cell_binds_what_it_assigns_not_its_comprehension_variables() -> None:
    found = CellReads.of(ast.parse("h = x\nfor i in r:\n    pass\nys = [k for k in r]\n"
                                   "import numpy as np\ndef f(): pass"))
    assert found.bound == {"h", "i", "ys", "np", "f"}


def test_a_gpu_that_is_not_there_is_a_device_error(ip) -> None:
    if "gpu" in tfl.devices():
        pytest.skip("a GPU is usable here")
    with pytest.raises(tfl.DeviceError, match="GPU"):
        ip.run_cell_magic("compile", "--no-show --device gpu", CELL)


def test_unknown_options_are_refused(ip) -> None:
    with pytest.raises(tfl.TeachflowError, match="--frobnicate"):
        ip.run_cell_magic("compile", "--frobnicate", CELL)


# --- Wrong options point at the %%compile line --------------------------------------------------


@pytest.mark.parametrize(("options", "error", "words"), [
    ("--passes simplify,bogus", tfl.TeachflowError, "unknown pass 'bogus'"),
    ("--device tpu", tfl.DeviceError, "unknown device 'tpu'"),
    ("--frobnicate", tfl.TeachflowError, "unknown option '--frobnicate'"),
    ("--html", tfl.TeachflowError, "--html needs a value"),
    ("--name 1st", tfl.TeachflowError, "not a Python name"),
    ("--passes 'cse", tfl.TeachflowError, "cannot read the options"),
    ("--passes ''", tfl.TeachflowError, "names an empty pass"),
    ("--passes ,", tfl.TeachflowError, "names an empty pass"),
    ("--passes cse --passes dce", tfl.TeachflowError, "--passes is given twice"),
    ("--name class", tfl.TeachflowError, "not a Python name the notebook can use"),
    ("--name x", tfl.TeachflowError, "would overwrite a name the cell uses"),
    ("--name result", tfl.TeachflowError, "would overwrite the cell's result"),
    ("--name print", tfl.TeachflowError, "would overwrite Python's own print"),
    ("--html /no/such/folder/x.html", tfl.TeachflowError, "there is no folder /no/such/folder"),
    ("--html /tmp", tfl.TeachflowError, "is a folder, not a page"),
    ("--name tfl", tfl.TeachflowError, "would overwrite the notebook's tfl"),
])
def test_a_wrong_option_is_an_error_at_the_compile_line(ip, options, error, words) -> None:
    ran = ip.run_cell(f"%%compile {options}\n{CELL}")
    err = ran.error_in_exec
    assert isinstance(err, error), err
    assert words in err.message
    assert err.location.lineno == 1
    assert err.location.line == f"%%compile {options}"
    assert f"at cell In[{ran.execution_count}], line 1:  %%compile {options}" in str(err)
    assert "compiled" not in ip.user_ns  # refused before anything was compiled


def test_a_gpu_that_is_not_there_is_an_error_at_the_compile_line(ip) -> None:
    if "gpu" in tfl.devices():
        pytest.skip("a GPU is usable here")
    ran = ip.run_cell(f"%%compile --device gpu\n{CELL}")
    assert isinstance(ran.error_in_exec, tfl.DeviceError)
    assert ran.error_in_exec.location.line == "%%compile --device gpu"
    assert f"cell In[{ran.execution_count}], line 1" in str(ran.error_in_exec)


def test_html_option_writes_the_stepper_page(ip, tmp_path) -> None:
    page = tmp_path / "cell.html"
    ip.run_cell_magic("compile", f"--no-show --html {page}", CELL)
    text = page.read_text()
    assert "<script" in text and "tf-stepper" in text and '"stages"' in text


def test_a_syntax_error_in_the_cell_points_at_its_line(ip) -> None:
    ran = ip.run_cell("%%compile\nh = (x @ w\nh")
    err = ran.error_in_exec
    assert isinstance(err, tfl.TeachflowError) and "'(' was never closed" in err.message
    assert err.location.lineno == 2 and err.location.line == "h = (x @ w"


def test_passes_none_stages_the_graph_as_traced(ip) -> None:
    ip.run_cell_magic("compile", "--no-show --passes none", "y = x * 1.0\ny")
    compiled = ip.user_ns["compiled"]
    assert [s.pass_name for s in compiled.snapshots] == ["trace"]
    assert [n.op.name for n in compiled.graph.nodes] == ["mul"]


def test_naming_an_earlier_compilation_again_replaces_it(ip) -> None:
    ip.run_cell_magic("compile", "--no-show --name step", CELL)
    first = ip.user_ns["step"]
    ip.run_cell_magic("compile", "--no-show --name step", CELL)
    assert ip.user_ns["step"] is not first and isinstance(ip.user_ns["step"], tfl.Compilation)


@pytest.mark.parametrize(("body", "word", "line"), [
    ("h = x * 2\nreturn h", "return", 3),
    ("if True:\n    yield x", "yield", 3),
    ("h = [x]\nfor t in h:\n    h = (yield from h)", "yield", 4),
])
def test_return_or_yield_outside_a_function_is_refused_at_its_line(ip, body, word, line) -> None:
    ran = ip.run_cell(f"%%compile\n{body}")
    err = ran.error_in_exec
    assert isinstance(err, tfl.TeachflowError), err
    assert f"'{word}' outside a function" in err.message
    assert err.location.lineno == line


def test_return_inside_a_function_of_the_cell_is_fine(ip) -> None:
    ip.run_cell_magic("compile", "--no-show", "def double(t):\n    return t * 2\nh = double(x)\nh")
    np.testing.assert_array_equal(ip.user_ns["h"].numpy(), ip.user_ns["x"].numpy() * 2)
