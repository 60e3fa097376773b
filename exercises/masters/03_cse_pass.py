"""Exercise 3, a pass of your own, CSE: the cells of ``03_cse_pass.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 3 — Common subexpression elimination, your own pass

        Programs repeat themselves. `(x * 2).tanh() + (x * 2).tanh()` asks for `x * 2` twice
        and for its `tanh` twice; a compiler computes each once. The trick is called **value
        numbering**: walk the graph in order and give every node a *key*, what it computes
        written as data: its op, its parameters, and which values it reads. Two nodes with the
        same key compute the same thing, so every reader of the second can read the first
        instead, and the second goes.

        This is only legal because ops are **pure**: a result depends on the operands and on
        nothing else. One kind of op is not: `tfl.randn` must draw new numbers every time, so
        two draws must never be merged, however alike they look.

        A pass is a function from a graph to a new graph. Write it with `rewrite`, the helper
        every teachflow pass is written with (lesson 3, §5): it walks a copy of the graph in
        order and asks your `decide(node, rewriter)` about each node. Return `None` to keep the
        node, or a value to stand in for the node's output everywhere (the node then goes).
        `rewrite` also updates the operands of later nodes as it goes, so once `%4` stands in
        for `%6`, a node that read `%6` reads `%4` by the time you are asked about it.

        What you can read on a node: `node.op.name` (`"mul"`), `node.params` (a dict, such as
        `{"axis": (1,), "keepdims": False}`), `node.inputs` (a tuple of operands, each a graph
        `Value` or a Python number such as `2.0`), `node.output` (its `Value`), and
        `node.op.random` (True for ops that draw random numbers). Values are told apart by
        identity (or by `value.id`); a number by its type and its value, as `repr` writes it.
        """),
        md(CHECKING.format(name="03_cse_pass")),
        setup("""
        from teachflow.graph import Value
        from teachflow.passes import rewrite
        from teachflow.viz.stepper_data import compilation_data
        """),
        md("""
        Here is the shape of a pass, from lesson 3: it drops `x * 1` by hand.

        ```python
        def drop_times_one(graph):
            def decide(node, rewriter):
                if node.op.name == "mul" and node.inputs[1] == 1:
                    return node.inputs[0]   # every reader of x * 1 now reads x
                return None                 # keep the node as it is
            return rewrite(graph, lambda g: decide)
        ```

        `rewrite` calls the function you give it once per graph it rewrites (a loop's body is a
        graph of its own), so that is where a fresh table of keys belongs.

        ## 1. `my_cse`
        """),
        solution("my_cse", """
        def my_cse(graph):
            \"\"\"Merge each node that computes what an earlier node computes into that one.\"\"\"
            ### BEGIN SOLUTION
            def decide_for(g):
                first = {}  # a node's key -> the value of the first node with that key

                def decide(node, rewriter):
                    if node.op.random:
                        return None  # every draw is a new one: never merged
                    operands = tuple(o if isinstance(o, Value) else (type(o).__name__, repr(o))
                                     for o in node.inputs)
                    key = (node.op.name, repr(sorted(node.params.items())), operands)
                    if key in first:
                        return first[key]
                    first[key] = node.output
                    return None

                return decide

            return rewrite(graph, decide_for)
            ### END SOLUTION
        """),
        md("""
        The helper below compiles one of a few small programs with your pass (then `dce`), runs
        it on `x`, and reports what the pass stepper shows, as plain data.
        """),
        given("examples", """
        EXAMPLES = {  # small programs of x to look for repeated work in
            "repeated": lambda x: (x * 2.0).tanh() + (x * 2.0).tanh() * (x * 2.0),
            "chain": lambda x: ((x + 1.0).exp() * 2.0).sum() + ((x + 1.0).exp() * 2.0).sum(),
            "literals": lambda x: (x * 2.0).exp() - (x * 3.0).exp(),
            "axes": lambda x: x.sum(axis=0).max() - x.sum(axis=1).max(),
            "noise": lambda x: (x + tfl.randn(*x.shape)) - (x + tfl.randn(*x.shape)),
        }
        X = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -3.0], [0.1, 0.2, 0.3]])
        """),
        given("my_cse_at_work", """
        def my_cse_at_work(example, x):
            \"\"\"Compile EXAMPLES[example] for x with your pass, then dce; run it, and say what
            the stepper shows (a dict of plain data).\"\"\"
            x = tfl.tensor(x)
            compiled = tfl.compile(EXAMPLES[example], x, passes=[my_cse, "dce"])
            stages = compilation_data(compiled)["stages"]  # what the pass stepper draws
            return {
                "stages": [stage["pass"] for stage in stages],
                "changes": {stage["pass"]: len(stage["changes"]) for stage in stages},
                "traced": [node.op.name for node in compiled.snapshots[0].graph.nodes],
                "ops": [node.op.name for node in compiled.graph.nodes],
                "result": compiled(x).numpy(),
            }
        """),
        free("""
        my_cse_at_work("repeated", X)
        """),
        tests("test_my_cse", 3, """
        def test_my_cse_computes_each_thing_once():
            assert callable(my_cse)
            seen = my_cse_at_work("repeated", X)
            assert seen["stages"] == ["trace", "my_cse", "dce"]
            assert seen["traced"] == ["mul", "tanh", "mul", "tanh", "mul", "mul", "add"]
            assert seen["ops"] == ["mul", "tanh", "mul", "add"]
            t = np.tanh(X * 2.0)
            np.testing.assert_allclose(seen["result"], t + t * (X * 2.0), rtol=1e-12)


        def test_my_cse_follows_merged_operands():
            seen = my_cse_at_work("chain", X)
            assert seen["ops"] == ["add", "exp", "mul", "sum", "add"]
            np.testing.assert_allclose(seen["result"], 2 * (np.exp(X + 1.0) * 2.0).sum())
        ### BEGIN HIDDEN TESTS


        def test_my_cse_tells_numbers_apart():
            seen = my_cse_at_work("literals", X)
            assert seen["changes"]["my_cse"] == 0
            assert seen["ops"] == seen["traced"]
            np.testing.assert_allclose(seen["result"], np.exp(X * 2.0) - np.exp(X * 3.0))


        def test_my_cse_tells_parameters_apart():
            seen = my_cse_at_work("axes", X)
            assert seen["ops"] == seen["traced"]
            expected = X.sum(axis=0).max() - X.sum(axis=1).max()
            np.testing.assert_allclose(seen["result"], expected, rtol=1e-12)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. Purity

        The tests below run your pass on `(x + randn) - (x + randn)`. Merged, the two draws
        would be one, and the program would compute zeros.
        """),
        tests("test_my_cse_purity", 2, """
        def test_my_cse_never_merges_random_draws():
            seen = my_cse_at_work("noise", X)
            assert seen["ops"].count("normal") == 2
            assert seen["ops"].count("add") == 2
        ### BEGIN HIDDEN TESTS


        def test_my_cse_keeps_two_draws_different():
            seen = my_cse_at_work("noise", X)
            assert np.abs(seen["result"]).max() > 0
        ### END HIDDEN TESTS
        """),
        md("""
        ## 3. In the stepper

        Your pass is a stage of the pipeline like any built-in one: step to `my_cse` and see
        each node it removed; the stage's figures show the nodes and bytes saved.
        """),
        free("""
        tfl.compile(EXAMPLES["repeated"], tfl.tensor(X), passes=[my_cse, "dce"]).show()
        """),
        md("""
        Now open `teachflow/passes/cse.py` and compare. teachflow's pass knows one thing more:
        for an op such as `add`, `a + b` is `b + a`. Where would that go in yours?
        """),
    ]
