"""Exercise 8, predict the peak: the cells of ``08_predict_the_peak.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 8 — Predict the peak

        A graph runs as a *schedule*: its nodes one after another, step 0, 1, 2, ... Each value
        a node makes is held in memory from the step that makes it to the last step that reads
        it (lesson 8, §1), and then let go of. What a step holds is the sum of the live values'
        sizes, and the most any step holds is the schedule's **peak**. teachflow counts:

        - the call's arguments (and the state it reads) at every step: their owner holds them;
        - an intermediate from the step that makes it to the step that last reads it, both
          included (a step holds its operands and its result at once);
        - an output from the step that makes it to the last step: the caller gets it.

        A float32 is 4 bytes. Predict first, then run: the point is to find out what you
        expected.
        """),
        md(CHECKING.format(name="08_predict_the_peak")),
        setup("""
        from teachflow.memory import live_ranges, peak_bytes
        """),
        md("""
        ## 1. How long is each value held?

        Read `program` and its schedule, printed below: one node per step, in order.
        """),
        given("program", """
        def program(x, w):
            h = x * w
            e = h.exp()
            t = e + h
            return t.sum()


        X = np.linspace(-1.0, 1.0, 64, dtype=np.float32)
        W = np.linspace(1.0, -1.0, 64, dtype=np.float32)


        def schedule_of(fn, *arrays):
            \"\"\"`fn`'s graph as traced (no pass has run), one line per step.\"\"\"
            graph = tfl.compile(fn, *(tfl.tensor(a) for a in arrays), passes=[]).graph
            return [f"step {k}: {node.output} = {node.op.name}"
                    f"({', '.join(str(o) for o in node.inputs)})"
                    for k, node in enumerate(graph.nodes)]


        print("\\n".join(schedule_of(program, X, W)))
        """),
        md("""
        For each node's result, in the schedule's order, predict the step that makes it and
        the last step that holds it: `predicted_ranges`, a list of `(first, last)` pairs, one
        per node.
        """),
        solution("ranges", """
        ### BEGIN SOLUTION
        predicted_ranges = [
            (0, 2),  # h: read last by e + h
            (1, 2),  # e
            (2, 3),  # t: read by the sum
            (3, 3),  # the sum: an output, held to the last step (which is its own)
        ]
        ### END SOLUTION
        """),
        given("ranges_of", """
        def ranges_of(fn, *arrays):
            \"\"\"(first, last) of each node's result in `fn`'s traced schedule.\"\"\"
            graph = tfl.compile(fn, *(tfl.tensor(a) for a in arrays), passes=[]).graph
            made = {v for node in graph.nodes for v in node.outputs}
            return [(r.first_use, r.last_use) for r in live_ranges(graph) if r.value in made]
        """),
        tests("test_ranges", 3, """
        def test_one_range_per_node():
            assert len(predicted_ranges) == len(schedule_of(program, X, W))
            for first, last in predicted_ranges:
                assert 0 <= first <= last
        ### BEGIN HIDDEN TESTS


        def test_the_ranges():
            assert [tuple(r) for r in predicted_ranges] == ranges_of(program, X, W)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. The peak

        Predict the peak of `program`'s schedule on `X` and `W` (64 float32 each), in bytes:
        `predicted_peak`. Which step holds it?
        """),
        solution("peak", """
        ### BEGIN SOLUTION
        predicted_peak = 5 * 64 * 4  # step 2: x, w, h, e and t
        ### END SOLUTION
        """),
        given("peak_of", """
        def peak_of(fn, *arrays):
            \"\"\"The peak bytes of `fn`'s schedule as traced (no pass has run).\"\"\"
            return peak_bytes(tfl.compile(fn, *(tfl.tensor(a) for a in arrays), passes=[]).graph)
        """),
        tests("test_peak", 2, """
        def test_peak_predicted():
            assert isinstance(predicted_peak, int) and predicted_peak > 0
        ### BEGIN HIDDEN TESTS


        def test_the_peak():
            assert predicted_peak == peak_of(program, X, W)
        ### END HIDDEN TESTS
        """),
        md("""
        Now run it, and read the bytes each step holds: was your peak where you thought?
        """),
        free("""
        from teachflow.memory import timeline

        graph = tfl.compile(program, tfl.tensor(X), tfl.tensor(W), passes=[]).graph
        print(ranges_of(program, X, W), peak_of(program, X, W))
        print("bytes held at each step:", timeline(graph))
        """),
        md("""
        ## 3. Hold less

        `greedy` makes three big intermediates before it reduces any of them, so at its peak it
        holds all three. Write `lean(x)`: the same value, written so that its schedule, as
        traced, holds less at its peak. (Only the order in which you write it may change: the
        same ops, no pass.)
        """),
        given("greedy", """
        def greedy(x):
            a = (x * 1.0).exp()
            b = (x * 2.0).exp()
            c = (x * 3.0).exp()
            return a.sum() + b.sum() + c.sum()


        XS = np.linspace(-1.0, 1.0, 256, dtype=np.float32)
        """),
        solution("lean", """
        def lean(x):
            \"\"\"What greedy computes, holding less at its peak.\"\"\"
            ### BEGIN SOLUTION
            total = (x * 1.0).exp().sum()
            total = total + (x * 2.0).exp().sum()
            return total + (x * 3.0).exp().sum()
            ### END SOLUTION
        """),
        given("lean_report", """
        def lean_report(x):
            \"\"\"Your lean on x: its result and the peak of its traced schedule (plain data).\"\"\"
            return {"result": lean(tfl.tensor(x)).item(), "peak": peak_of(lean, x)}
        """),
        free("""
        lean_report(XS), peak_of(greedy, XS)
        """),
        tests("test_lean", 2, """
        def check_lean(x):
            seen = lean_report(x)
            expected = sum(np.exp(x.astype(np.float64) * k).sum() for k in (1.0, 2.0, 3.0))
            np.testing.assert_allclose(seen["result"], expected, rtol=1e-4)
            return seen["peak"]


        def test_lean_holds_less_than_greedy():
            assert check_lean(XS) < peak_of(greedy, XS)
        ### BEGIN HIDDEN TESTS


        def test_lean_holds_x_and_two_arrays_at_most():
            # x, the product and its exp at once; a few scalars beside them
            assert check_lean(XS) <= 3 * XS.nbytes + 4 * 4


        def test_lean_on_another_size():
            x = np.linspace(0.5, -0.5, 1000, dtype=np.float32)
            assert check_lean(x) <= 3 * x.nbytes + 4 * 4
        ### END HIDDEN TESTS
        """),
        md("""
        The same values, three fifths of the memory: reducing a big value as soon as it is made
        lets its memory go before the next one is made. The compiler can find that order
        itself, and fusion can avoid making the big values at all: compare the peak of each
        stage of `tfl.compile(greedy, ...)` below, and say which pass lowers it, and why.
        """),
        free("""
        compiled = tfl.compile(greedy, tfl.tensor(XS))
        for stage in compiled.snapshots:
            print(f"{stage.pass_name:14} {peak_bytes(stage.graph):6,} bytes")
        """),
    ]
