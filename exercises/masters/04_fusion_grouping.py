"""Exercise 4, a fusion grouping, measured: the cells of ``04_fusion_grouping.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 4 — Choose a fusion grouping, and measure it

        On big arrays, an elementwise op spends its time not on arithmetic but on memory: it
        reads its operands from memory and writes its result back. **Fusion** runs a group of
        ops as one kernel that reads the group's inputs once and writes its result once; the
        values in between never touch memory (lesson 3, §4).

        Which ops to group is a choice. teachflow's `fuse` pass makes it by one rule (read it
        in `teachflow/passes/grouping.py`): connected elementwise ops of one shape share a
        kernel, as long as no cycle between kernels appears. Here you choose the groups
        yourself, check them, and measure what they save against no fusion at all and against
        the compiler's choice. The rules of a legal group, which the helper below enforces,
        are simpler than the compiler's:

        - every member is elementwise and of the group's shape (only the group's inputs may
          broadcast into it), except that the last member may be a reduction (`sum`, `mean`,
          `max`) of what the others computed;
        - a kernel writes one result: only the group's last member may be read by anything
          outside the group, or be returned by the function.
        """),
        md(CHECKING.format(name="04_fusion_grouping")),
        given("setup", """
        import time

        import numpy as np

        import teachflow as tfl
        from teachflow.graph import Value
        from teachflow.kernels.group import FusedGroup
        from teachflow.passes import DROP, rewrite
        from teachflow.passes.fuse import fused_op
        """),
        md("""
        The program: a layer with a gated activation, which returns the activations and their
        sum per row.
        """),
        given("block", """
        def block(x, w, b):
            h = x @ w + b
            y = h.tanh() * h.sigmoid()
            return y, y.sum(axis=1)


        def reference(x, w, b):
            \"\"\"What `block` computes, in NumPy.\"\"\"
            h = x @ w + b
            y = np.tanh(h) / (1 + np.exp(-h))
            return y, y.sum(axis=1)


        rng = np.random.default_rng(0)
        X, W, B = (rng.normal(size=shape).astype(np.float32)
                   for shape in [(8, 16), (16, 32), (32,)])
        """),
        md("""
        `fused_as(groups, x, w, b)` compiles `block` with teachflow's first passes and then a
        fusion pass that makes one kernel of each group you give, as a list of node ids: the
        numbers after `%` in the printed graph. It refuses an illegal group, saying why.
        """),
        given("fused_as", """
        def fuse_as(groups):
            \"\"\"A fusion pass that makes one kernel of each group of node ids in `groups`.\"\"\"

            def my_fusion(graph):
                nodes = {n.id: n for n in graph.nodes}
                order = {n.id: i for i, n in enumerate(graph.nodes)}
                plan = {}  # node id -> (its kernel's name, the ids of its group in graph order)
                for number, group in enumerate(groups, start=1):
                    for i in group:
                        if i not in nodes:
                            raise tfl.TeachflowError(f"the graph has no node %{i}", op="fuse_as",
                                                     hint="use the ids of the printed graph")
                    members = [nodes[i] for i in sorted(set(group), key=order.get)]
                    if len(members) > 1:  # (an op on its own is its own kernel already)
                        refuse_illegal(members, graph, plan)
                        plan.update({n.id: (f"my_k{number}", [m.id for m in members])
                                     for n in members})

                def decide_for(g):
                    in_g = {n.id: n for n in g.nodes}

                    def decide(node, rewriter):
                        if node.id not in plan:
                            return None
                        name, ids = plan[node.id]
                        if node.id != ids[-1]:  # computed inside the kernel: no node of its own
                            return DROP
                        return kernel(name, [in_g[i] for i in ids], rewriter, g)

                    return decide

                return rewrite(graph, decide_for)

            return my_fusion


        def refuse_illegal(members, graph, plan):
            \"\"\"Raise an error saying why `members` cannot be one kernel, if they cannot.\"\"\"
            *body, last = members
            reduction = bool(body) and last.op.partials is not None
            elementwise = body if reduction else members
            for n in members:
                if n.id in plan:
                    raise tfl.TeachflowError(f"%{n.id} is in two groups", op="fuse_as")
            if reduction and last.inputs[0] is not body[-1].output:
                raise tfl.TeachflowError(f"%{last.id} {last.op.name} must reduce what the group's "
                                         f"last elementwise op, %{body[-1].id}, computes",
                                         op="fuse_as")
            for n in elementwise:
                if not n.op.elementwise:
                    raise tfl.TeachflowError(f"%{n.id} {n.op.name} is not elementwise: it cannot "
                                             "be fused", op="fuse_as")
                if n.spec.shape != elementwise[-1].spec.shape:
                    raise tfl.TeachflowError(f"%{n.id} has another shape than the group's",
                                             op="fuse_as")
            users = graph.users()
            for n in body:
                outside = [u for u in users.get(n.output, ()) if u not in members]
                if outside or n.output in graph.outputs:
                    reader = f"%{outside[0].id}" if outside else "the function's result"
                    raise tfl.TeachflowError(
                        f"%{n.id} {n.op.name} is read outside its group (by {reader}), but a "
                        "kernel writes only its last member's value", op="fuse_as")


        def kernel(name, members, rewriter, g):
            \"\"\"One node that runs `members` as one generated kernel.\"\"\"
            last = members[-1]
            reduction = last if len(members) > 1 and last.op.partials is not None else None
            inside = {n.output for n in members}
            inputs = []
            for n in members:
                inputs += [o for o in n.inputs
                           if isinstance(o, Value) and o not in inside and o not in inputs]
            group = FusedGroup(name, tuple(members[:-1] if reduction else members), reduction,
                               tuple(inputs), (last.output,), (last.output in g.outputs,))
            return rewriter.add(fused_op(group), tuple(inputs), {}, last.spec)


        def fused_as(groups, x, w, b):
            \"\"\"`block` compiled for x, w and b, with your `groups` as its kernels.\"\"\"
            return tfl.compile(block, tfl.tensor(x), tfl.tensor(w), tfl.tensor(b),
                               passes=["simplify", "cse", "dce", fuse_as(groups)])
        """),
        md("""
        Here is the graph. Which values would be written to memory only to be read straight
        back, if each op ran as a kernel of its own? (What teachflow's own `fuse` makes of it
        comes later: choose first.)
        """),
        free("""
        example = [tfl.tensor(a) for a in (X, W, B)]
        print(tfl.trace(block, *example))
        """),
        md("""
        ## 1. Your grouping

        Set `my_groups` to a list of groups, each a list of node ids, that runs `block` in as
        few kernels as the rules allow.
        """),
        solution("my_groups", """
        ### BEGIN SOLUTION
        my_groups = [[4, 5, 6, 7]]  # add, tanh, sigmoid, mul: h is never written to memory
        ### END SOLUTION
        """),
        free("""
        mine = fused_as(my_groups, X, W, B)
        print(mine.graph)
        mine.snapshots[-1].stats
        """),
        tests("test_my_groups", 3, """
        def test_my_grouping_computes_the_block():
            y, total = fused_as(my_groups, X, W, B)(*[tfl.tensor(a) for a in (X, W, B)])
            expected_y, expected_total = reference(X, W, B)
            np.testing.assert_allclose(y.numpy(), expected_y, rtol=1e-5, atol=1e-6)
            np.testing.assert_allclose(total.numpy(), expected_total, rtol=1e-5, atol=1e-5)


        def test_my_grouping_launches_at_most_one_kernel_more_than_teachflows():
            # (teachflow's fuse also folds the sum into the kernel, which these rules leave out)
            mine = fused_as(my_groups, X, W, B).snapshots[-1].stats
            teachflows = tfl.compile(block, *[tfl.tensor(a) for a in (X, W, B)]).snapshots[-1]
            assert mine["kernels"] <= teachflows.stats["kernels"] + 1
        ### BEGIN HIDDEN TESTS


        def test_my_grouping_is_as_few_kernels_as_can_be():
            assert fused_as(my_groups, X, W, B).snapshots[-1].stats["kernels"] == 3


        def test_my_grouping_moves_as_few_bytes_as_teachflows():
            mine = fused_as(my_groups, X, W, B).snapshots[-1].stats
            teachflows = tfl.compile(block, *[tfl.tensor(a) for a in (X, W, B)]).snapshots[-1]
            unfused = fused_as([], X, W, B).snapshots[-1].stats
            trip = 8 * 32 * 4  # one write or read of an (8, 32) float32 array
            # h, tanh(h) and sigmoid(h) are each written once and read twice, once or once
            assert mine["bytes_moved"] == unfused["bytes_moved"] - 7 * trip
            # teachflow's kernel also sums y as it writes it: nothing reads y back
            assert mine["bytes_moved"] == teachflows.stats["bytes_moved"] + trip
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. Measure it

        Write `measure(groups, x, w, b, repeat=5)`: compile `block` for `x`, `w` and `b` with
        `fused_as`, and return a dict of three figures:

        - `"kernels"`: how many kernels a call launches: the nodes of the final graph
          (`compiled.graph.nodes`), except *views* (`node.op.view`), which only reinterpret
          memory and launch nothing;
        - `"bytes_moved"`: the memory traffic of those kernels, counted as the compiler's
          figures count it: each kernel reads each of its operands that is a `Value` (once per
          operand) and writes its output, and a value of shape `s` and dtype `d` takes
          `prod(s) * d.itemsize` bytes;
        - `"ms"`: the best time of `repeat` calls, in milliseconds (`time.perf_counter()`); the
          first call of a compilation is warm-up, not timed.

        Count the first two yourself; then compare with `compiled.snapshots[-1].stats`.
        """),
        solution("measure", """
        def measure(groups, x, w, b, repeat=5):
            \"\"\"Kernels, bytes moved and the best time in ms of `block` fused as `groups`.\"\"\"
            ### BEGIN SOLUTION
            compiled = fused_as(groups, x, w, b)
            kernels = [n for n in compiled.graph.nodes if not n.op.view]

            def size(value):
                return int(np.prod(value.shape)) * value.dtype.itemsize

            moved = sum(size(n.output) + sum(size(o) for o in n.inputs if isinstance(o, Value))
                        for n in kernels)
            args = [tfl.tensor(a) for a in (x, w, b)]
            compiled(*args)
            times = []
            for _ in range(repeat):
                start = time.perf_counter()
                compiled(*args)
                times.append(time.perf_counter() - start)
            return {"kernels": len(kernels), "bytes_moved": moved, "ms": min(times) * 1e3}
            ### END SOLUTION
        """),
        tests("test_measure", 2, """
        def test_measure_counts_as_the_compiler_counts():
            got = measure(my_groups, X, W, B, repeat=2)
            stats = fused_as(my_groups, X, W, B).snapshots[-1].stats
            assert got["kernels"] == stats["kernels"]
            assert got["bytes_moved"] == stats["bytes_moved"]
            assert 0 < got["ms"] < 10_000
        ### BEGIN HIDDEN TESTS


        def test_measure_without_fusion_and_with_the_best_grouping():
            for groups in ([], [[4, 5, 6, 7]], [[5, 6, 7]]):
                stats = fused_as(groups, X, W, B).snapshots[-1].stats
                got = measure(groups, X, W, B, repeat=1)
                assert (got["kernels"], got["bytes_moved"]) == (stats["kernels"],
                                                                stats["bytes_moved"]), groups
        ### END HIDDEN TESTS
        """),
        md("""
        ## 3. Does it pay?

        Bytes are a model; the clock is the judge. On arrays big enough for memory to matter,
        time no fusion, a grouping that leaves the `add` out, and yours. Does the order of the
        times follow the order of the bytes? (Try bigger arrays, and a GPU if you have one.)
        Then look at teachflow's own choice, and read why its kernel stops where it does: it goes
        one step past these rules, folding the row sums into the kernel that writes `y` (a
        reduction joins the group of what it reduces, whatever else needs the group's values).
        """),
        free("""
        shapes = [(512, 64), (64, 512), (512,)]
        big = [rng.normal(size=shape).astype(np.float32) for shape in shapes]
        for name, groups in [("none", []), ("without add", [[5, 6, 7]]), ("yours", my_groups)]:
            m = measure(groups, *big, repeat=3)
            print(f"{name:12} {m['kernels']} kernels  {m['bytes_moved'] / 1e6:6.2f} MB  "
                  f"{m['ms']:7.3f} ms")
        """),
        free("""
        teachflows = tfl.compile(block, *example)
        print(teachflows.graph)
        fuse_stage = next(s for s in teachflows.snapshots if s.pass_name == "fuse")
        for change in fuse_stage.changes:
            print(change.sentence)
        """),
    ]
