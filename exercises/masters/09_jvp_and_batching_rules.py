"""Exercise 9, JVP and batching rules: the cells of ``09_jvp_and_batching_rules.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 9 — Write the JVP and batching rules of an op

        In lesson 9, `tfl.jvp` and `tfl.vmap` rewrote a graph node by node, each node by its op's
        rule for the transformation, declared in the op's one declaration beside its gradient
        rule (`teachflow/ops/`). Most ops share their rules (`teachflow/ops/tangents.py`,
        `teachflow/ops/batching.py`). Here you write both rules of one op by hand, as JAX's
        `defjvp` and its batching rules are written: `hypot(x, y) = sqrt(x**2 + y**2)`, whose
        gradient rules you may have written in exercise 1.

        A rule is written with teachflow ops, as teachflow's own are, so that it computes when
        it runs eagerly and builds nodes when it runs inside a trace (a `tfl.function`, or
        another transformation around it: a `vmap` of a `vmap`, the `vmap` inside `jacfwd`).
        Read `teachflow/rewrites/forward_mode.py` and `vectorizing.py` to see where your rules
        are called.
        """),
        md(CHECKING.format(name="09_jvp_and_batching_rules")),
        setup("""
        from teachflow.core.dispatch import bind
        from teachflow.ops.op import Op
        from teachflow.ops.shape_rules import elementwise_rule
        """),
        md("""
        The cell below declares `hypot` the way teachflow declares an op: a kernel written
        against the array module `xp`, a shape rule (broadcasting, as every elementwise op),
        its gradient rules, and the two fields this exercise is about: `jvp`, its forward-mode
        rule, and `batch`, its batching rule. The rules are *yours*, given as arguments:
        nothing to change here. (`primitive=False` keeps this op out of teachflow's own
        vocabulary.)
        """),
        given("hypot_op", """
        def hypot_with(jvp_rule, batch_rule):
            \"\"\"hypot(x, y) = sqrt(x**2 + y**2), an op whose JVP rule is `jvp_rule` and whose
            batching rule is `batch_rule`.\"\"\"
            op = Op("hypot", lambda xp: xp.hypot, elementwise_rule(lambda xp: xp.hypot),
                    grads=(lambda g, x, out: g * x / out, lambda g, y, out: g * y / out),
                    fusion="hypot({0}, {1})", broadcasts=True, jvp=jvp_rule, batch=batch_rule,
                    primitive=False)
            return lambda x, y: bind(op, tfl.as_tensor(x), tfl.as_tensor(y))
        """),
        md("""
        ## 1. The JVP rule

        Forward mode asks: when the operands move along their tangents, how fast does the
        result move? For `hypot`, `d hypot = (x dx + y dy) / hypot(x, y)`. Write
        `hypot_jvp(op, primals, tangents, out, params)`, with the arguments teachflow gives
        every JVP rule:

        - `primals`: the operands `(x, y)`; `out`: the result, `hypot(x, y)`, already computed
          (use it: no need to compute the square root again);
        - `tangents`: `(tx, ty)`, each a tensor of its operand's shape, or **None** for an
          operand that does not move. None is a zero nobody computed: leave its term out
          rather than multiply by zeros;
        - `op` and `params`: the op itself and its parameters (`hypot` has none).

        Return the result's tangent, of the result's shape and dtype (an operand that was
        broadcast moves everywhere it was stretched to), or None if nothing moves.
        """),
        solution("hypot_jvp", """
        def hypot_jvp(op, primals, tangents, out, params):
            \"\"\"The tangent of hypot(x, y), or None.\"\"\"
            (x, y), (tx, ty) = primals, tangents
            ### BEGIN SOLUTION
            terms = [p * t for p, t in ((x, tx), (y, ty)) if t is not None]
            if not terms:
                return None
            total = terms[0] if len(terms) == 1 else terms[0] + terms[1]
            return total / out
            ### END SOLUTION
        """),
        md("""
        The helpers below run `tfl.jvp` and `tfl.jacfwd` on the op with your rule (the op has
        no batching rule yet: `jacfwd` batches only the nodes your rule makes, with their own
        rules).
        """),
        given("forward_helpers", """
        def tangent(x, y, tx, ty):
            \"\"\"How fast hypot(x, y) moves when x moves along tx and y along ty (None: it
            stays where it is), by tfl.jvp with your rule.\"\"\"
            hypot = hypot_with(hypot_jvp, None)
            x, y = tfl.as_tensor(x), tfl.as_tensor(y)
            if ty is None:
                return tfl.jvp(lambda x: hypot(x, y), (x,), (tfl.as_tensor(tx),))[1]
            if tx is None:
                return tfl.jvp(lambda y: hypot(x, y), (y,), (tfl.as_tensor(ty),))[1]
            return tfl.jvp(hypot, (x, y), (tfl.as_tensor(tx), tfl.as_tensor(ty)))[1]


        def jacobian(x, y):
            \"\"\"d hypot(x, y) / dx, by tfl.jacfwd: a vmap of your rule's tangents.\"\"\"
            hypot = hypot_with(hypot_jvp, None)
            return tfl.jacfwd(lambda x: hypot(x, tfl.as_tensor(y)))(tfl.as_tensor(x))
        """),
        free("""
        x, y = np.array([3.0, -1.0, 0.5]), np.array([4.0, 2.0, -2.0])
        print(tangent(x, y, np.array([1.0, 0.0, 0.0]), None))   # 3 / 5 first, then zeros
        print(jacobian(x, y))
        """),
        tests("test_hypot_jvp", 3, """
        def by_differences(x, y, tx, ty, eps=1e-6):
            \"\"\"Central differences: how fast np.hypot moves along (tx, ty).\"\"\"
            tx = np.zeros_like(x) if tx is None else tx
            ty = np.zeros_like(y) if ty is None else ty
            return (np.hypot(x + eps * tx, y + eps * ty)
                    - np.hypot(x - eps * tx, y - eps * ty)) / (2 * eps)


        def check_tangent(x, y, tx, ty):
            got = np.asarray(tangent(x, y, tx, ty))
            np.testing.assert_allclose(got, by_differences(x, y, tx, ty), rtol=1e-6, atol=1e-9)


        def test_hypot_jvp_matches_finite_differences():
            x, y = np.array([3.0, -1.0, 0.5]), np.array([4.0, 2.0, -2.0])
            check_tangent(x, y, np.array([1.0, -2.0, 0.5]), np.array([0.3, 1.0, -1.0]))


        def test_hypot_jvp_when_one_operand_stays():
            x, y = np.array([3.0, -1.0, 0.5]), np.array([4.0, 2.0, -2.0])
            check_tangent(x, y, np.array([1.0, 0.0, 2.0]), None)
            check_tangent(x, y, None, np.array([0.0, 1.0, -3.0]))
        ### BEGIN HIDDEN TESTS


        def test_hypot_jvp_of_broadcast_operands():
            column, row = np.array([[1.0], [-2.0], [0.5]]), np.array([0.5, -1.0, 2.0, 4.0])
            t_column, t_row = np.array([[0.5], [1.0], [-1.0]]), np.array([1.0, 0.0, -2.0, 0.5])
            for tx, ty in ((t_column, t_row), (t_column, None), (None, t_row)):
                assert np.asarray(tangent(column, row, tx, ty)).shape == (3, 4)
                check_tangent(column, row, tx, ty)


        def test_hypot_jvp_keeps_float32():
            x, y = np.array([3.0, 5.0], np.float32), np.array([4.0, 12.0], np.float32)
            got = tangent(x, y, np.array([1.0, 1.0], np.float32), None)
            assert np.asarray(got).dtype == np.float32
            np.testing.assert_allclose(np.asarray(got), [0.6, 5 / 13], rtol=1e-6)


        def test_jacfwd_of_hypot_is_diagonal():
            x, y = np.array([3.0, -1.0, 0.5, 2.0]), np.array([4.0, 2.0, -2.0, 0.1])
            np.testing.assert_allclose(np.asarray(jacobian(x, y)), np.diag(x / np.hypot(x, y)),
                                       rtol=1e-12, atol=1e-15)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. The batching rule

        `tfl.vmap` runs the op once for a whole batch. Its batching rule gets the operands with
        a batch axis added, and must give the result for every example at once, and where the
        result's batch axis is. Write `hypot_batch(op, args, dims, params, size)`:

        - `args`: the operands `(x, y)`, as vmap has them; `size`: how many examples;
        - `dims`: for each operand, where its batch axis is (an int: `in_axes=1` puts it
          second), or **None** for an operand that is the same for every example (`in_axes`
          None): it has no batch axis at all.

        Return `(result, axis)`: the result for every example, and where its batch axis is.

        The op's kernel broadcasts, so one call of `bind(op, ...)` can compute every example,
        once the operands are lined up: each batch axis first, and, since broadcasting lines
        shapes up *from the right*, size-1 axes after it until every operand's example has the
        same rank. Otherwise an example's axis meets the batch axis: `x` of examples `(3,)`
        batched to `(4, 3)` against an unbatched `y` of shape `(2, 3)` would not broadcast,
        and, worse, with a batch of 2 it would, and compute the wrong thing. (Tensors have
        `.ndim`, `.shape`, `.permute(*axes)` and `.reshape(*shape)`.)
        """),
        solution("hypot_batch", """
        def hypot_batch(op, args, dims, params, size):
            \"\"\"hypot for the whole batch, and where the result's batch axis is.\"\"\"
            ### BEGIN SOLUTION
            rank = max(a.ndim - (d is not None) for a, d in zip(args, dims))  # an example's
            lined_up = []
            for a, d in zip(args, dims):
                if d is not None:
                    a = a.permute(d, *[k for k in range(a.ndim) if k != d])  # batch axis first
                    a = a.reshape(size, *[1] * (rank - (a.ndim - 1)), *a.shape[1:])
                lined_up.append(a)
            return bind(op, *lined_up), 0
            ### END SOLUTION
        """),
        md("""
        The helpers below run `tfl.vmap` on the op with your rules: once, with the `in_axes`
        you give; nested, a `vmap` of a `vmap` (your rule then runs inside a trace, and the
        outer `vmap` batches what it made); and traced, to count the op's nodes in the
        batched graph.
        """),
        given("batch_helpers", """
        def mapped(xs, ys, in_axes):
            \"\"\"tfl.vmap(hypot, in_axes)(xs, ys), with your rules.\"\"\"
            hypot = hypot_with(hypot_jvp, hypot_batch)
            return tfl.vmap(hypot, in_axes=tuple(in_axes))(tfl.as_tensor(xs), tfl.as_tensor(ys))


        def table(xs, ys):
            \"\"\"hypot of every x with every y, by a vmap over ys of a vmap over xs:
            table(xs, ys)[j, i] = hypot(xs[i], ys[j]).\"\"\"
            hypot = hypot_with(hypot_jvp, hypot_batch)
            over_xs = tfl.vmap(hypot, in_axes=(0, None))
            return tfl.vmap(over_xs, in_axes=(None, 0))(tfl.as_tensor(xs), tfl.as_tensor(ys))


        def ops_of_mapped(xs, ys, in_axes):
            \"\"\"The ops of the graph of tfl.vmap(hypot, in_axes), traced for xs and ys.\"\"\"
            hypot = hypot_with(hypot_jvp, hypot_batch)
            graph = tfl.trace(tfl.vmap(hypot, in_axes=tuple(in_axes)), tfl.as_tensor(xs),
                              tfl.as_tensor(ys))
            return [node.op.name for node in graph.nodes]
        """),
        free("""
        xs, y = np.arange(12.0).reshape(4, 3), np.array([[1.0, 2.0, 3.0], [-1.0, 0.5, 2.0]])
        print(mapped(xs, y, (0, None)).shape)     # (4, 2, 3): each x against the whole y
        print(table(np.array([3.0, 5.0]), np.array([4.0, 12.0])))
        print(ops_of_mapped(xs, y, (0, None)))
        """),
        tests("test_hypot_batch", 4, """
        def loop(xs, ys, in_axes):
            \"\"\"What vmap must give: np.hypot example by example, stacked.\"\"\"
            batched, axis = (xs, in_axes[0]) if in_axes[0] is not None else (ys, in_axes[1])
            size = batched.shape[axis]

            def example(a, axis, i):
                return a if axis is None else np.take(a, i, axis=axis)

            return np.stack([np.hypot(example(xs, in_axes[0], i), example(ys, in_axes[1], i))
                             for i in range(size)])


        def check_mapped(xs, ys, in_axes):
            got = np.asarray(mapped(xs, ys, in_axes))
            expected = loop(xs, ys, in_axes)
            assert got.shape == expected.shape
            np.testing.assert_allclose(got, expected, rtol=1e-12)


        RNG = np.random.default_rng(9)


        def test_hypot_batch_against_a_loop():
            check_mapped(RNG.normal(size=(5, 3)), RNG.normal(size=(5, 3)), (0, 0))


        def test_hypot_batch_with_an_operand_the_same_for_every_example():
            check_mapped(RNG.normal(size=(4, 3)), RNG.normal(size=(2, 3)), (0, None))
            check_mapped(RNG.normal(size=(3,)), RNG.normal(size=(4, 3)), (None, 0))
        ### BEGIN HIDDEN TESTS


        def test_hypot_batch_never_lets_the_batch_axis_meet_an_example_axis():
            # a batch of 2 against an example of 2 rows: broadcasting alone would not complain
            check_mapped(RNG.normal(size=(2, 3)), RNG.normal(size=(2, 3)), (0, None))
            check_mapped(RNG.normal(size=(2, 1)), RNG.normal(size=(2, 5)), (0, None))


        def test_hypot_batch_with_the_batch_axis_elsewhere():
            check_mapped(RNG.normal(size=(3, 5)), RNG.normal(size=(5, 3)), (1, 0))
            check_mapped(RNG.normal(size=(2, 4, 3)), RNG.normal(size=(3,)), (1, None))


        def test_nested_vmap_of_hypot():
            xs, ys = RNG.normal(size=(4,)), RNG.normal(size=(3,))
            got = np.asarray(table(xs, ys))
            assert got.shape == (3, 4)
            np.testing.assert_allclose(got, np.hypot(xs[None, :], ys[:, None]), rtol=1e-12)
            xs, ys = RNG.normal(size=(4, 2)), RNG.normal(size=(3, 2))
            np.testing.assert_allclose(np.asarray(table(xs, ys)),
                                       np.hypot(xs[None, :, :], ys[:, None, :]), rtol=1e-12)


        def test_hypot_batch_runs_the_op_once_for_the_batch():
            ops = ops_of_mapped(RNG.normal(size=(6, 3)), RNG.normal(size=(2, 3)), (0, None))
            assert ops.count("hypot") == 1
        ### END HIDDEN TESTS
        """),
        md("""
        Compare your rules with teachflow's: `tangents.diagonal` derives an elementwise op's
        JVP from its gradient rules (its Jacobian is diagonal, so each VJP rule applied to a
        tangent is a term of the JVP), and `batching.elementwise` is the rule you just wrote,
        shared by every op whose kernel broadcasts. Then look at a rule that is not shared:
        `matmul`'s, `_batch_matmul` in `teachflow/ops/linalg.py`.
        """),
    ]
