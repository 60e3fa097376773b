"""Exercise 6, predict the placement: the cells of ``06_predict_placement.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 6 — Predict the placement

        A graph on several devices is placed, then cut (lesson 6, §3). The pass `place` gives
        every node a device, for the first of four reasons that holds:

        1. **pinned**: the node was built inside `with tfl.device(name):`, so it runs there;
        2. **asked for**: its own parameter names a device (`to_device`'s `device`, a `full`'s
           `device`, a `copy`'s `dst`);
        3. **operands**: it runs where its operands live;
        4. **default**: it reads no tensor and asks for no device: it runs where the call does
           (the device of the function's first input).

        Remember what a pin does to an operand from elsewhere: a node built inside reads it on
        the pinned device, so the trace *moves* it there first, with a `to_device` node of its
        own, built inside the pin. Then `partition` makes each move between two devices a `copy`
        node, and counts the bytes it sends (a float32 is 4 bytes).

        Predict first, then run: the point is to find out what you expected.
        """),
        md(CHECKING.format(name="06_predict_placement")),
        setup("""
        from teachflow.passes.place import placement

        tfl.set_logical_devices("cpu", 2)
        """),
        md("""
        ## 1. Where does each node run?

        Read `program`, and the nodes its trace holds, printed below without their devices.
        """),
        given("program", """
        def program(x, w):
            with tfl.device("cpu:1"):
                h = (x @ w).relu()
                s = h.sum(axis=0)
            scaled = s.to("cpu") * 2.0
            return scaled + w.sum(axis=0)


        X = np.linspace(-1.0, 1.0, 8 * 16, dtype=np.float32).reshape(8, 16)
        W = np.linspace(1.0, -1.0, 16 * 16, dtype=np.float32).reshape(16, 16)


        def without_devices(fn, *arrays):
            \"\"\"The nodes of `fn`'s trace, numbered, each as its op and what it reads.\"\"\"
            graph = tfl.trace(fn, *(tfl.tensor(a) for a in arrays))
            lines = []
            for k, node in enumerate(graph.nodes):
                reads = ", ".join(str(o) for o in node.inputs)
                params = f" {node.params}" if node.params else ""
                lines.append(f"{k}: {node.output} = {node.op.name}({reads}){params}")
            return lines


        print("\\n".join(without_devices(program, X, W)))
        """),
        md("""
        For each node, in that order, predict its device (`"cpu"` or `"cpu:1"`) and the reason
        `place` gives (`"pinned"`, `"asked for"`, `"operands"` or `"default"`):
        `predicted_places`, a list of `(device, reason)` pairs, one per node.
        """),
        solution("places", """
        ### BEGIN SOLUTION
        predicted_places = [
            ("cpu:1", "pinned"),     # x moved to the pin
            ("cpu:1", "pinned"),     # w moved to the pin
            ("cpu:1", "pinned"),     # matmul
            ("cpu:1", "pinned"),     # relu
            ("cpu:1", "pinned"),     # sum
            ("cpu", "asked for"),    # s.to("cpu")
            ("cpu", "operands"),     # * 2.0
            ("cpu", "operands"),     # w.sum: the argument w, on cpu (not the moved copy)
            ("cpu", "operands"),     # +
        ]
        ### END SOLUTION
        """),
        given("placement_of", """
        def placement_of(fn, *arrays):
            \"\"\"(device, reason) per node of `fn`'s trace, as the pass place gives them.\"\"\"
            compiled = tfl.compile(fn, *(tfl.tensor(a) for a in arrays), passes=["place"])
            graph = compiled.snapshots[0].graph
            default = graph.inputs[0].spec.device
            return [(node.spec.device, placement(node, default)[0]) for node in graph.nodes]
        """),
        tests("test_places_form", 0, """
        def test_one_place_per_node():
            assert len(predicted_places) == len(without_devices(program, X, W))
            for device, reason in predicted_places:
                assert device in ("cpu", "cpu:1")
                assert reason in ("pinned", "asked for", "operands", "default")
        """),
        tests("test_places", 3, """
        # Grading compares your predictions with what place does, in hidden tests.
        places = predicted_places
        ### BEGIN HIDDEN TESTS
        def test_the_devices():
            got = [device for device, _ in placement_of(program, X, W)]
            assert [device for device, _ in predicted_places] == got


        def test_the_reasons():
            assert [tuple(p) for p in predicted_places] == placement_of(program, X, W)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. How many bytes cross?

        `partition` turns each `to_device` that moves a value between two devices into a `copy`
        and adds up the bytes they send in the figure `bytes_transferred`. Predict it for one
        call of `program` on `X` (8×16 float32) and `W` (16×16 float32): `predicted_bytes`.
        """),
        solution("bytes", """
        ### BEGIN SOLUTION
        predicted_bytes = 8 * 16 * 4 + 16 * 16 * 4 + 16 * 4  # x and w there, s back
        ### END SOLUTION
        """),
        given("bytes_transferred", """
        def bytes_transferred(fn, *arrays):
            \"\"\"The bytes one call of `fn` sends between devices, after partition.\"\"\"
            compiled = tfl.compile(fn, *(tfl.tensor(a) for a in arrays))
            return compiled.snapshots[-1].stats["bytes_transferred"]
        """),
        tests("test_bytes", 2, """
        def test_bytes_predicted():
            assert isinstance(predicted_bytes, int) and predicted_bytes > 0
        ### BEGIN HIDDEN TESTS


        def test_the_bytes():
            assert predicted_bytes == bytes_transferred(program, X, W)
        ### END HIDDEN TESTS
        """),
        md("""
        Now run both, and read `place`'s own sentences: which prediction surprised you?
        """),
        free("""
        print(placement_of(program, X, W), bytes_transferred(program, X, W))
        compiled = tfl.compile(program, tfl.tensor(X), tfl.tensor(W))
        for stage in compiled.snapshots:
            for change in stage.changes if stage.pass_name in ("place", "partition") else []:
                print(f"{stage.pass_name:9} {change.sentence}")
        """),
        md("""
        ## 3. Move less

        `wasteful` does its heavy work on `cpu:1` and sends the whole `(n, n)` result back, to
        sum its rows on `cpu`. Write `frugal(x)`: the same values, its matrix product still on
        `cpu:1`, sending as few bytes as you can.
        """),
        given("wasteful", """
        def wasteful(x):
            with tfl.device("cpu:1"):
                h = (x @ x.T).tanh()
            return h.to("cpu").sum(axis=1)


        XS = np.linspace(-1.0, 1.0, 64 * 8, dtype=np.float32).reshape(64, 8)
        """),
        solution("frugal", """
        def frugal(x):
            \"\"\"What wasteful computes, its product on cpu:1, sending fewer bytes.\"\"\"
            ### BEGIN SOLUTION
            with tfl.device("cpu:1"):
                rows = (x @ x.T).tanh().sum(axis=1)
            return rows.to("cpu")
            ### END SOLUTION
        """),
        given("frugal_report", """
        def frugal_report(x):
            \"\"\"Your frugal, compiled for x and run: what it computes, where its products run,
            and the bytes it sends (plain data).\"\"\"
            x = tfl.tensor(x)
            compiled = tfl.compile(frugal, x)
            return {"result": compiled(x).to("cpu").numpy(),
                    "products": [node.spec.device for node in compiled.graph.nodes
                                 if node.op.name == "matmul"],
                    "bytes": compiled.snapshots[-1].stats["bytes_transferred"]}
        """),
        free("""
        frugal_report(XS), bytes_transferred(wasteful, XS)
        """),
        tests("test_frugal", 2, """
        def check_frugal(x):
            seen = frugal_report(x)
            expected = np.tanh(x @ x.T).sum(axis=1)
            np.testing.assert_allclose(seen["result"], expected, rtol=1e-4, atol=1e-5)
            assert seen["products"] == ["cpu:1"]
            return seen["bytes"]


        def test_frugal_sends_less_than_wasteful():
            assert check_frugal(XS) < bytes_transferred(wasteful, XS)
        ### BEGIN HIDDEN TESTS


        def test_frugal_sends_x_there_and_one_number_per_row_back():
            assert check_frugal(XS) == XS.nbytes + XS.shape[0] * 4


        def test_frugal_on_another_shape():
            x = np.linspace(0.5, -0.5, 32 * 4, dtype=np.float32).reshape(32, 4)
            assert check_frugal(x) == x.nbytes + 32 * 4
        ### END HIDDEN TESTS
        """),
        md("""
        The same values, a fraction of the bytes: a sum is small, so it is cheaper to reduce
        where the data is and send the result. Frameworks do the same at a larger scale:
        gradients are summed on each device before they cross the network. Where in your
        program would a third device go, and what would it have to receive?
        """),
    ]
