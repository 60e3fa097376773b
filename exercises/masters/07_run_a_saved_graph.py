"""Exercise 7, run a saved graph: the cells of ``07_run_a_saved_graph.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests

#: The saved.json that `tfl.save` wrote for a small function, `mystery`, traced on a 2×3 float32
#: matrix (part 1 of exercise 7 asks what it computes).
MYSTERY = """{
 "format": "teachflow.saved",
 "version": "1.0",
 "kind": "function",
 "arrays": "arrays.npz",
 "graph": {
  "name": "mystery",
  "inputs": [{"id": 0, "name": "x", "shape": [2, 3], "dtype": "float32", "device": "cpu"}],
  "constants": [],
  "nodes": [
   {
    "op": "transpose",
    "inputs": [{"value": 0}],
    "params": {"axes": [1, 0]},
    "outputs": [{"id": 1, "shape": [3, 2], "dtype": "float32", "device": "cpu"}]
   },
   {
    "op": "mul",
    "inputs": [{"value": 1}, {"float": 2.0}],
    "params": {},
    "outputs": [{"id": 2, "shape": [3, 2], "dtype": "float32", "device": "cpu"}]
   },
   {
    "op": "sub",
    "inputs": [{"value": 2}, {"float": 1.0}],
    "params": {},
    "outputs": [{"id": 3, "shape": [3, 2], "dtype": "float32", "device": "cpu"}]
   },
   {
    "op": "relu",
    "inputs": [{"value": 3}],
    "params": {},
    "outputs": [{"id": 4, "shape": [3, 2], "dtype": "float32", "device": "cpu"}]
   },
   {
    "op": "sum",
    "inputs": [{"value": 4}],
    "params": {"axis": [1], "keepdims": false},
    "outputs": [{"id": 5, "shape": [3], "dtype": "float32", "device": "cpu"}]
   }
  ],
  "outputs": [5]
 }
}
"""


def cells() -> list:
    return [
        md("""
        # Exercise 7 — Run a saved graph without teachflow

        `tfl.save` writes a staged function as data (lesson 7): `saved.json` names the ops to
        apply, in the order they run, with their operands, parameters, and the shape and
        dtype of every result; `arrays.npz` holds the numbers the graph carries (its
        constants, and the weights it captured). Nothing in either file is code. That is
        what makes the format *language-neutral*: anything that can read JSON and arrays can
        run it, given its own implementation of each op.

        In this exercise you are that other runtime. You first read a file and work out
        what it computes, by eye. Then you write a loader of your own, with NumPy and
        `json` and no teachflow, and check it against `tfl.load` on real saved functions,
        lesson 7's training step among them. Last, you make it refuse what teachflow's
        loader refuses: a file that names an op it does not have, or that reads a value
        before it is computed. `docs/saved-graph.md` describes every field.
        """),
        md(CHECKING.format(name="07_run_a_saved_graph")),
        setup("""
        import json
        import tempfile
        from pathlib import Path
        """),
        md("""
        ## 1. Read it, and predict

        `MYSTERY` below is the `saved.json` that `tfl.save` wrote for a small function
        called `mystery`. Read it: each node's `inputs` are value ids (`{"value": 1}`) or
        literal numbers (`{"float": 2.0}` is the float 2.0), and each of its `outputs` has an
        id that later nodes read. Nothing here runs it; `X` is the input to predict for.
        """),
        given("mystery", 'MYSTERY = """' + MYSTERY + '"""\n'
              "X = np.array([[1.0, 0.0, 3.0], [0.5, -1.0, 2.0]], dtype=np.float32)"),
        md("""
        What does `mystery` return for `X`? Work it out by hand from the JSON, without
        loading it, and write it as `predicted_mystery`, a list of numbers.
        """),
        solution("predicted_mystery", """
        ### BEGIN SOLUTION
        predicted_mystery = [1.0, 0.0, 8.0]  # relu(X.T * 2 - 1), summed along each row
        ### END SOLUTION
        """),
        tests("test_predicted_mystery_form", 0, """
        def test_the_prediction_is_three_numbers():
            # mystery's output is the value its last node makes: "shape": [3]
            assert len(predicted_mystery) == 3
            assert all(isinstance(float(v), float) for v in predicted_mystery)
        """),
        md("""
        The helpers below write a manifest (and its arrays) into a folder and load it with
        `tfl.load`, and stage a function and save it, returning what the files hold. Run
        the cell after them to see whether you read `mystery` right.
        """),
        given("helpers", """
        def load_saved(manifest, arrays):
            \"\"\"tfl.load's function for saved.json's text `manifest` and the arrays of
            arrays.npz, by name.\"\"\"
            with tempfile.TemporaryDirectory() as folder:
                Path(folder, "saved.json").write_text(manifest)
                np.savez(Path(folder, "arrays.npz"), **arrays)
                return tfl.load(folder)


        def saved(fn, *inputs):
            \"\"\"`fn` staged on `inputs` (arrays) and saved by tfl.save: saved.json's text,
            arrays.npz's arrays by name, and the results tfl.load's function gives for
            `inputs` (a list of arrays).\"\"\"
            with tempfile.TemporaryDirectory() as folder:
                tfl.save(tfl.compile(fn, *[tfl.tensor(a) for a in inputs]), folder)
                with np.load(Path(folder, "arrays.npz")) as npz:
                    arrays = {name: npz[name] for name in npz.files}
                manifest = Path(folder, "saved.json").read_text()
            results = load_saved(manifest, arrays)(*inputs)
            results = results if isinstance(results, tuple) else (results,)
            return manifest, arrays, [r.numpy() for r in results]
        """),
        free("""
        load_saved(MYSTERY, {})(X)
        """),
        tests("test_predicted_mystery", 2, """
        # Grading loads MYSTERY with tfl.load, runs it on X and compares, in a hidden test.
        prediction = predicted_mystery
        ### BEGIN HIDDEN TESTS
        def test_mystery_as_predicted():
            expected = load_saved(MYSTERY, {})(X).numpy()
            np.testing.assert_allclose(np.asarray(predicted_mystery, dtype=float), expected)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. A loader of your own

        Now run any such file, with NumPy alone. First the ops: `NUMPY_OPS` maps an op's name
        to a function of its operands (positional) and its parameters (by name, as the
        file's `params` has them). Three are given; add `sub`, `mul`, `div`, `neg`, `pow`,
        `exp`, `relu`, `matmul`, `transpose` (`axes`), `mean` (`axis`, `keepdims`),
        `reshape` (`shape`), `broadcast_to` (`shape`), `full` (`shape`, `fill_value`,
        `dtype`, `device`: a result of that dtype; the device you can ignore) and
        `stop_gradient` (which only matters to gradients: running, it passes its operand
        through).

        An `axis` in the file is `null`, an integer or a list of integers; `axis_of` makes it
        what NumPy takes.
        """),
        solution("numpy_ops", """
        def axis_of(axis):
            \"\"\"A saved axis parameter as NumPy takes it (a list becomes a tuple).\"\"\"
            return tuple(axis) if isinstance(axis, list) else axis


        NUMPY_OPS = {  # op name -> function(*operands, **params)
            "add": lambda a, b: np.add(a, b),
            "tanh": lambda a: np.tanh(a),
            "sum": lambda a, axis, keepdims: np.sum(a, axis=axis_of(axis), keepdims=keepdims),
        }
        ### BEGIN SOLUTION
        NUMPY_OPS.update({
            "sub": lambda a, b: np.subtract(a, b),
            "mul": lambda a, b: np.multiply(a, b),
            "div": lambda a, b: np.divide(a, b),
            "neg": lambda a: np.negative(a),
            "pow": lambda a, b: np.power(a, b),
            "exp": lambda a: np.exp(a),
            "relu": lambda a: np.maximum(a, 0),
            "matmul": lambda a, b: np.matmul(a, b),
            "transpose": lambda a, axes: np.transpose(a, axes),
            "mean": lambda a, axis, keepdims: np.mean(a, axis=axis_of(axis), keepdims=keepdims),
            "reshape": lambda a, shape: np.reshape(a, shape),
            "broadcast_to": lambda a, shape: np.broadcast_to(a, shape),
            "full": lambda shape, fill_value, dtype, device: np.full(shape, fill_value, dtype),
            "stop_gradient": lambda a: a,
        })
        ### END SOLUTION
        """),
        md("""
        Then the loader: `run_saved(manifest, arrays, inputs)` takes saved.json's text, the
        arrays of arrays.npz by name, and the function's arguments (arrays, in the order of
        `graph["inputs"]`), and returns a list with one array per id in `graph["outputs"]`.
        Keep a dict from value id to array:

        - each input's id takes its argument; each entry of `graph["captures"]` (there may be
          none) and of `graph["constants"]` takes `arrays[entry["array"]]`;
        - then each node, in order: its operands are `{"value": id}` (the array of that id)
          or a literal, which you make a Python number (`{"float": 0.5}` is `0.5`, and
          `{"float": "inf"}`, `"-inf"` and `"nan"` are what JSON has no number for; an
          integer or a bool is itself); call its op from `NUMPY_OPS` with the operands and
          the node's `params`, and keep the result under the id of its (one) output.

        Each result must have the dtype the file records for it (`"float32"`, mostly): keep
        literals Python numbers (a NumPy float64 scalar would make float32 arrays float64),
        and give `full` its dtype.
        """),
        md("""
        ## 3. Trust nothing

        A file may come from anyone. `run_saved` must raise a `ValueError`, saying where,
        before running anything for:

        - an op that is not in `NUMPY_OPS`, however it is spelled (so never
          `getattr(np, name)`: `"load"` is a NumPy function, not an op of this format);
        - an operand that reads a value not computed yet: an id defined *later* in the file
          (which makes a cycle) or nowhere.
        """),
        solution("run_saved", """
        def run_saved(manifest, arrays, inputs):
            \"\"\"The results of the saved function `manifest` (saved.json's text) on `inputs`,
            computed with NumPy: a list of arrays, one per output.\"\"\"
            ### BEGIN SOLUTION
            graph = json.loads(manifest)["graph"]
            values = {v["id"]: np.asarray(a) for v, a in zip(graph["inputs"], inputs)}
            for entry in graph.get("captures", []) + graph["constants"]:
                values[entry["id"]] = arrays[entry["array"]]

            def operand(item, where):
                if isinstance(item, dict) and "value" in item:
                    if item["value"] not in values:
                        raise ValueError(f"{where} reads %{item['value']}, which is not "
                                         "computed before it")
                    return values[item["value"]]
                if isinstance(item, dict):
                    return float(item["float"])  # (float("inf") and float("nan") too)
                return item

            for k, node in enumerate(graph["nodes"]):
                where = f"graph.nodes[{k}] ({node['op']})"
                if node["op"] not in NUMPY_OPS:
                    raise ValueError(f"{where}: {node['op']!r} is not an op of this loader")
                operands = [operand(item, where) for item in node["inputs"]]
                result = NUMPY_OPS[node["op"]](*operands, **node["params"])
                (output,) = node["outputs"]
                values[output["id"]] = np.asarray(result)
            return [values[i] for i in graph["outputs"]]
            ### END SOLUTION
        """),
        md("""
        Try it on `mystery`, and on a layer that captures its weights (they travel in
        arrays.npz), against `tfl.load`:
        """),
        given("examples", """
        W = np.array([[0.5, -1.0], [2.0, 0.25], [-0.5, 1.5]], dtype=np.float32)
        B = np.array([0.1, -0.2], dtype=np.float32)
        Y = np.array([[0.5], [-0.25]], dtype=np.float32)
        LAYER = tfl.tensor(W), tfl.tensor(B)


        def layer(x):  # reads two captured tensors
            return (x @ LAYER[0] + LAYER[1]).tanh()


        def loss_fn(w, b, x, y):
            return (((x @ w + b).tanh() - y) ** 2).mean()


        def step(w, b, x, y):  # lesson 7's training step
            loss, (gw, gb) = tfl.value_and_grad(loss_fn, argnums=(0, 1))(w, b, x, y)
            return w - 0.5 * gw, b - 0.5 * gb, loss


        def scaled(x):  # a constant, a mean kept 2-d, a reshape, a division, a negation
            shift = tfl.tensor(np.array([1.0, 2.0], dtype=np.float32))
            return ((x @ LAYER[0]).mean(axis=0, keepdims=True) / 2 + shift
                    - (-x).exp().reshape(6).sum())
        """),
        free("""
        print(run_saved(MYSTERY, {}, [X]))
        manifest, arrays, expected = saved(layer, X)
        print(sorted(arrays), run_saved(manifest, arrays, [X]), expected)
        """),
        tests("test_run_saved", 3, """
        def check(fn, *inputs):
            manifest, arrays, expected = saved(fn, *inputs)
            got = run_saved(manifest, arrays, list(inputs))
            assert len(got) == len(expected)
            for g, e in zip(got, expected):
                g = np.asarray(g)
                assert g.shape == e.shape and g.dtype == e.dtype, (g.shape, g.dtype, e.shape)
                np.testing.assert_allclose(g, e, rtol=1e-5, atol=1e-6)


        def test_run_saved_runs_mystery():
            (got,) = run_saved(MYSTERY, {}, [X])
            np.testing.assert_allclose(np.asarray(got), [1.0, 0.0, 8.0])


        def test_run_saved_reads_captured_weights():
            check(layer, X)
        ### BEGIN HIDDEN TESTS


        def test_run_saved_runs_the_training_step():
            check(step, W[:, :1].copy(), B[:1].copy(), np.vstack([X, -X]), np.vstack([Y, -Y]))


        def test_run_saved_runs_constants_means_and_reshapes():
            check(scaled, X)


        def test_run_saved_reads_special_floats():
            text = MYSTERY.replace('{"float": 1.0}', '{"float": "-inf"}')
            (got,) = run_saved(text, {}, [X])
            np.testing.assert_array_equal(np.asarray(got), [np.inf] * 3)
        ### END HIDDEN TESTS
        """),
        tests("test_run_saved_refuses", 2, """
        import pytest


        def edited(edit):
            document = json.loads(MYSTERY)
            edit(document["graph"]["nodes"])
            return json.dumps(document)


        def test_run_saved_refuses_an_op_it_does_not_have():
            def os_system(nodes):
                nodes[3]["op"] = "__import__('os').system"

            with pytest.raises(ValueError):
                run_saved(edited(os_system), {}, [X])
        ### BEGIN HIDDEN TESTS


        def test_run_saved_refuses_a_numpy_function_that_is_no_op():
            def load(nodes):
                nodes[3]["op"] = "load"

            with pytest.raises(ValueError):
                run_saved(edited(load), {}, [X])


        def test_run_saved_refuses_a_cycle():
            def cycle(nodes):
                nodes[1]["inputs"][0] = {"value": 4}

            with pytest.raises(ValueError):
                run_saved(edited(cycle), {}, [X])


        def test_run_saved_refuses_a_dangling_reference():
            def dangling(nodes):
                nodes[2]["inputs"][0] = {"value": 99}

            with pytest.raises(ValueError):
                run_saved(edited(dangling), {}, [X])
        ### END HIDDEN TESTS
        """),
        md("""
        Your loader is about forty lines, and it runs a training step that teachflow traced,
        without teachflow: that is what a language-neutral format buys. It is also a little
        too trusting still. teachflow's loader (`teachflow/saved/reader.py`) checks more
        before it runs anything: every object's keys and types, each op's number of operands
        and its parameters, every shape against what the op's own shape rule gives, each
        array's header against what the manifest says. Which of those would have stopped a
        file that made your loader allocate a hundred gigabytes?
        """),
    ]
