"""Exercise 10, loops as nodes: the cells of ``10_loops_as_nodes.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 10 — Write a loop as one node

        Tracing runs your Python once and records what it did (lesson 2), so a Python loop
        comes out **unrolled**: one copy of the body per step, and a loop whose end depends on
        a tensor's values cannot be traced at all. Lesson 4 gave the way out: `tfl.cond`,
        `tfl.while_loop` and `tfl.fori_loop` take the branches and the body as functions, and
        a trace records each as **one node** that owns sub-graphs; `@tfl.script` rewrites a
        function's `if`, `while` and `for` on tensors into those nodes for you.

        First you predict what a trace records, for programs written four ways. Then you
        write Newton's method for square roots twice: with a fixed number of steps as a
        `fori_loop`, and until it is close enough as a `while_loop`.
        """),
        md(CHECKING.format(name="10_loops_as_nodes")),
        setup(),
        md("""
        ## 1. What does a trace record?

        Read the five programs below. Each is traced with `tfl.compile`, and its first stage,
        the traced graph before any pass, is what you predict: how many nodes stand at its top
        level (a loop or `cond` node counts as one, whatever its sub-graphs hold; a Python
        number in an expression is an operand, not a node).
        """),
        given("programs", """
        def unrolled(x):
            for _ in range(4):                    # a Python loop: the trace runs it
                x = x * 0.5 + 1.0
            return x


        def looped(x):
            return tfl.fori_loop(0, 4, lambda i, c: c * 0.5 + 1.0, x)


        @tfl.script
        def halve_until_small(x):
            while x.sum() > 1:                    # on a tensor: rewritten into a while_loop
                x = x * 0.5
            return x


        @tfl.script
        def mixed(x, n):
            for _ in range(3):
                x = x * 2.0
            for i in range(n):
                x = x + 1.0
            return x


        #: Each program, and the arguments it is traced with.
        PROGRAMS = {
            "unrolled": (unrolled, (tfl.tensor([4.0, 4.0]),)),
            "looped": (looped, (tfl.tensor([4.0, 4.0]),)),
            "halve_until_small": (halve_until_small, (tfl.tensor([4.0, 4.0]),)),
            "mixed, n a tensor": (mixed, (tfl.tensor([4.0, 4.0]), tfl.tensor(3))),
            "mixed, n an int": (mixed, (tfl.tensor([4.0, 4.0]), 3)),
        }


        def traced_ops(name):
            \"\"\"The ops at the top level of program `name`'s traced graph, in order.\"\"\"
            fn, args = PROGRAMS[name]
            graph = tfl.compile(fn, *args).snapshots[0].graph
            return [node.op.name for node in graph.nodes]
        """),
        md("""
        Predict the number of top-level nodes of each program (`predicted_nodes`, a dict with
        the keys of `PROGRAMS`). Two hints from lesson 4: a scripted `while` must learn
        whether its condition is a tensor before it can choose between Python and a loop
        node; and `range(n)` is rewritten only when `n` is a tensor.
        """),
        solution("node_prediction", """
        ### BEGIN SOLUTION
        predicted_nodes = {"unrolled": 8, "looped": 1, "halve_until_small": 3,
                           "mixed, n a tensor": 4, "mixed, n an int": 6}
        ### END SOLUTION
        """),
        tests("test_node_prediction_form", 0, """
        def test_a_count_for_each_program():
            assert sorted(predicted_nodes) == sorted(PROGRAMS)
            assert all(isinstance(n, int) and n >= 1 for n in predicted_nodes.values())


        def test_a_fori_loop_is_one_node():
            assert predicted_nodes["looped"] == len(traced_ops("looped"))
        """),
        tests("test_node_prediction", 2, """
        # Grading traces each program and compares its nodes with your predictions.
        predictions = predicted_nodes
        ### BEGIN HIDDEN TESTS
        def test_the_unrolled_programs():
            for name in ("unrolled", "mixed, n an int"):
                assert predicted_nodes[name] == len(traced_ops(name)), name


        def test_the_scripted_programs():
            for name in ("halve_until_small", "mixed, n a tensor"):
                assert predicted_nodes[name] == len(traced_ops(name)), name
        ### END HIDDEN TESTS
        """),
        md("""
        Now look, and find each node you did not expect. `tfl.compile(...).show()` draws the
        graph in the pass stepper: a loop node is a box that opens on its sub-graphs.
        """),
        free("""
        for name in PROGRAMS:
            print(f"{name:18}", traced_ops(name))
        print(halve_until_small.code)
        """),
        md("""
        ## 2. How often does a scripted function trace?

        A scripted function is a `tfl.function`: it traces once per signature (exercise 5),
        where a tensor counts by its shape and dtype, anything else by its value. Predict
        which of these five calls of a fresh `mixed` trace (`predicted_tracing_calls`, their
        numbers in increasing order).
        """),
        given("trace_story", """
        def trace_story():
            \"\"\"Five calls of a fresh scripted `mixed`; the trace count after each.\"\"\"
            fresh = tfl.function(mixed.python_function)  # (the same rewritten code, no trace yet)
            x, counts = tfl.tensor([4.0, 4.0]), []
            for n in (2, 3, tfl.tensor(2), tfl.tensor(5), 2):   # calls 1 to 5
                fresh(x, n)
                counts.append(fresh.trace_count)
            return counts
        """),
        solution("trace_prediction", """
        ### BEGIN SOLUTION
        predicted_tracing_calls = [1, 2, 3]
        ### END SOLUTION
        """),
        tests("test_trace_prediction", 1, """
        def test_the_first_call_traces():
            assert list(predicted_tracing_calls)[:1] == [1]
            assert list(predicted_tracing_calls) == sorted(set(predicted_tracing_calls))
        ### BEGIN HIDDEN TESTS


        def test_which_calls_trace():
            counts = [0, *trace_story()]
            assert list(predicted_tracing_calls) == [
                n for n in range(1, 6) if counts[n] > counts[n - 1]]
        ### END HIDDEN TESTS
        """),
        md("""
        ## 3. Newton's method, a fixed number of steps

        Newton's method finds `sqrt(a)` by repeating `x <- (x + a / x) / 2`: each step about
        doubles the number of correct digits. Started from `x = (a + 1) / 2`, six steps reach
        float64's precision for any `a` between 0.01 and 100.

        Write `newton_sqrt(a)`: six steps, as **one** `tfl.fori_loop` node (its body is called
        `body(i, x)` and returns the new `x`), elementwise on a tensor `a` of any shape. A
        Python `for` would compute the same numbers, but trace into six copies of the step:
        the tests look at the graph. Because a `fori_loop` has a fixed trip count, gradients
        flow through it: the derivative of `sqrt(a)` is `0.5 / sqrt(a)`.
        """),
        solution("newton_sqrt", """
        def newton_sqrt(a):
            \"\"\"sqrt(a) by six Newton steps from (a + 1) / 2, as one fori_loop node.\"\"\"
            ### BEGIN SOLUTION
            return tfl.fori_loop(0, 6, lambda i, x: (x + a / x) * 0.5, (a + 1.0) * 0.5)
            ### END SOLUTION
        """),
        given("newton_helpers", """
        def newton_ops(a):
            \"\"\"The ops at the top level of newton_sqrt's trace on an array like `a`.\"\"\"
            return [node.op.name for node in tfl.trace(newton_sqrt, tfl.tensor(a)).nodes]


        def newton_gradient(a):
            \"\"\"The gradient of newton_sqrt(a).sum() with respect to `a`.\"\"\"
            return tfl.grad(lambda t: newton_sqrt(t).sum())(tfl.tensor(a))
        """),
        free("""
        a = tfl.tensor([0.25, 2.0, 9.0, 100.0])
        print(newton_sqrt(a), np.sqrt(a.numpy()))
        print(newton_ops(a.numpy()))
        print(newton_gradient(a.numpy()), 0.5 / np.sqrt(a.numpy()))
        """),
        tests("test_newton_sqrt", 2, """
        def test_newton_sqrt_finds_square_roots():
            a = np.array([0.25, 1.0, 2.0, 9.0, 50.0])
            np.testing.assert_allclose(np.asarray(newton_sqrt(tfl.tensor(a))), np.sqrt(a),
                                       rtol=1e-12)


        def test_newton_sqrt_is_one_loop_node():
            ops = newton_ops(np.array([2.0, 3.0]))
            assert ops.count("fori_loop") == 1, ops
            assert len(ops) <= 4, ops  # the start value, and the loop
        ### BEGIN HIDDEN TESTS


        def test_newton_sqrt_on_a_matrix_of_float32():
            a = np.array([[0.01, 0.5, 3.0], [16.0, 42.0, 99.0]], dtype=np.float32)
            got = np.asarray(newton_sqrt(tfl.tensor(a)))
            assert got.shape == a.shape and got.dtype == np.float32
            np.testing.assert_allclose(got, np.sqrt(a), rtol=1e-5)
            assert newton_ops(a).count("fori_loop") == 1


        def test_newton_sqrt_has_the_gradient_of_sqrt():
            a = np.array([0.5, 2.0, 7.0, 30.0])
            np.testing.assert_allclose(np.asarray(newton_gradient(a)), 0.5 / np.sqrt(a),
                                       rtol=1e-9)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 4. Until it is close enough

        Six steps are too many for `a = 1` and too few for `a = 1e6`. A `while_loop` stops
        when the answer is good enough, which its trip count then depends on: tracing cannot
        unroll it, and only a loop node can hold it. Write `sqrt_until_close(a)`: Newton steps
        from `(a + 1) / 2` until every element's `|x * x - a|` is at most `1e-12 * a`, as one
        `tfl.while_loop(cond_fn, body_fn, x)` (the condition is one boolean: `.max()` reduces
        a tensor to its largest element).

        Its graph is then the same for every value of `a`: a staged `sqrt_until_close` traces
        once for all the arrays of one shape, however many steps each needs. (Gradients are
        another matter: lesson 4 shows why teachflow refuses to differentiate a `while_loop`.)

        Try it on float64 (a NumPy array of Python floats is float64; `tfl.tensor([1.0, 2.0])`
        is float32). With float32's seven digits, `x * x` never comes within `1e-12 * a` of
        `a`: the condition never turns false, and the loop never ends, as a `while` in Python
        would not. A data-dependent loop is only as sure to end as its condition.
        """),
        solution("sqrt_until_close", """
        def sqrt_until_close(a):
            \"\"\"sqrt(a) by Newton steps until |x * x - a| <= 1e-12 * a, as one while_loop.\"\"\"
            ### BEGIN SOLUTION
            return tfl.while_loop(lambda x: (abs(x * x - a) - 1e-12 * a).max() > 0,
                                  lambda x: (x + a / x) * 0.5, (a + 1.0) * 0.5)
            ### END SOLUTION
        """),
        given("until_close_helpers", """
        def until_close_ops(a):
            \"\"\"The ops at the top level of sqrt_until_close's trace on an array like `a`.\"\"\"
            return [node.op.name for node in tfl.trace(sqrt_until_close, tfl.tensor(a)).nodes]


        def until_close_staged(arrays):
            \"\"\"A staged sqrt_until_close called on each of `arrays`: its results, and how many
            times it traced.\"\"\"
            staged = tfl.function(sqrt_until_close)
            results = [staged(tfl.tensor(a)) for a in arrays]
            return results, staged.trace_count
        """),
        free("""
        print(sqrt_until_close(tfl.tensor(np.array([1.0, 2.0, 1e6]))))
        print(until_close_ops(np.array([1.0, 2.0])))
        """),
        tests("test_sqrt_until_close", 2, """
        def test_sqrt_until_close_is_close():
            a = np.array([1.0, 2.0, 10.0, 12345.0])
            got = np.asarray(sqrt_until_close(tfl.tensor(a)))
            np.testing.assert_allclose(got, np.sqrt(a), rtol=1e-11)


        def test_sqrt_until_close_is_one_while_node():
            ops = until_close_ops(np.array([2.0, 3.0]))
            assert ops.count("while") == 1 and "fori_loop" not in ops, ops
        ### BEGIN HIDDEN TESTS


        def test_sqrt_until_close_stages_once_for_any_values():
            arrays = [np.array([2.0, 3.0]), np.array([1e6, 1e-3]), np.array([1.0, 1.0])]
            results, traces = until_close_staged(arrays)
            for got, a in zip(results, arrays, strict=True):
                np.testing.assert_allclose(np.asarray(got), np.sqrt(a), rtol=1e-11)
            assert traces == 1


        def test_sqrt_until_close_of_large_and_small_numbers():
            a = np.array([1e-6, 0.5, 4e8, 1e12])
            np.testing.assert_allclose(np.asarray(sqrt_until_close(tfl.tensor(a))), np.sqrt(a),
                                       rtol=1e-11)
        ### END HIDDEN TESTS
        """),
        md("""
        Compare the two graphs in the pass stepper (`tfl.compile(newton_sqrt, a).show()`):
        the body is one small sub-graph either way, and the loop node decides at run time how
        often to run it. That is what TorchScript's `prim::Loop`, JAX's `lax.while_loop` and
        TensorFlow's `While` op hold, and why XLA compiles a loop's body once, however long
        the loop runs.
        """),
    ]
