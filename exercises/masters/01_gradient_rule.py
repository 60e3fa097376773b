"""Exercise 1, a gradient rule: the cells of ``01_gradient_rule.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
    return [
        md("""
        # Exercise 1 — Write a gradient rule

        Backpropagation sounds grand, but in teachflow it is a row of small, humble functions.
        Every op carries a **gradient rule** that answers one question: *if the op's output were
        nudged by `g`, how does that nudge reach each input?* `mul`'s rule for `x` is
        `lambda g, y: g * y`; `tanh`'s is `lambda g, out: g * (1 - out * out)`. Backward does
        nothing but apply these rules, from the loss back to the leaves (lesson 1, and
        `teachflow/ops/elementwise.py`, where every op is declared with its rules).

        Here you write the rules of two ops that teachflow does not have. You need not trust
        yourself: a **gradient check** (`tfl.testing.gradcheck`) nudges every input element by a
        tiny amount, watches how the output moves, and compares that with what your rule says.
        When they agree to many digits, your rule is right.
        """),
        md(CHECKING.format(name="01_gradient_rule")),
        setup(),
        md("""
        ## 1. SiLU

        `silu(x) = x * sigmoid(x)` (also called *swish*) is a smooth cousin of ReLU that many
        modern networks use. Write its rule, `silu_grad(g, x)`: given the cotangent `g` (one
        number per element of the output) and the input `x`, return `g` times the derivative of
        `silu` at `x`.

        Two hints: the product rule, and `sigmoid'(x) = sigmoid(x) * (1 - sigmoid(x))`. Write
        it with teachflow ops (`tfl.sigmoid`, `*`, `+`, `-`), as teachflow's own rules are
        written: `g` and `x` are tensors.
        """),
        solution("silu_grad", """
        def silu_grad(g, x):
            \"\"\"g times the derivative of x * sigmoid(x).\"\"\"
            ### BEGIN SOLUTION
            s = tfl.sigmoid(x)
            return g * s * (1 + x * (1 - s))
            ### END SOLUTION
        """),
        md("""
        The cell below declares `silu` and `hypot` as ops of their own, the way teachflow
        declares every op: a kernel written against the array module `xp` (NumPy, or CuPy on a
        GPU), the expression that fusion compiles, and one gradient rule per input. The rules
        are *yours*. Nothing to change here, but do read it: this is all it takes to add an op.
        (`primitive=False` keeps these two out of teachflow's own vocabulary of ops.)
        """),
        given("ops_with_your_rules", """
        from teachflow.core.dispatch import bind
        from teachflow.ops.elementwise import elementwise


        def silu_with(rule):
            \"\"\"silu(x) = x * sigmoid(x), an op whose gradient rule is `rule`(g, x).\"\"\"
            op = elementwise(
                "silu", lambda xp: lambda x, out=None: xp.multiply(
                    x, xp.exp(-xp.logaddexp(0, -x)), out=out),  # (a sigmoid that never overflows)
                "({0} / (1 + exp(-{0})))",
                grads=(lambda g, x: tfl.as_tensor(rule(g, x)),), arg_names=("x",),
                primitive=False)
            return lambda x: bind(op, tfl.as_tensor(x))


        def hypot_with(rule_x, rule_y):
            \"\"\"hypot(x, y) = sqrt(x**2 + y**2), an op whose gradient rules are `rule_x` and
            `rule_y`, each called (g, x, y, out).\"\"\"
            op = elementwise(
                "hypot", lambda xp: xp.hypot, "hypot({0}, {1})",
                grads=(lambda g, x, y, out: tfl.as_tensor(rule_x(g, x, y, out)),
                       lambda g, x, y, out: tfl.as_tensor(rule_y(g, x, y, out))),
                primitive=False)
            return lambda x, y: bind(op, tfl.as_tensor(x), tfl.as_tensor(y))
        """),
        md("""
        Try your rule. `gradcheck` returns `True`, or raises an error that names the element
        where your rule and the nudges disagree, and by how much.
        """),
        free("""
        silu = silu_with(silu_grad)
        x = tfl.tensor(np.linspace(-3.0, 3.0, 7))
        print(silu(x))
        tfl.testing.gradcheck(silu, x)
        """),
        tests("test_silu_grad", 3, """
        def test_silu_grad_passes_a_gradient_check():
            assert tfl.testing.gradcheck(silu_with(silu_grad), np.linspace(-3.0, 3.0, 7))


        def test_silu_grad_is_zero_where_g_is_zero():
            got = np.asarray(silu_grad(tfl.zeros(3), tfl.tensor([-1.0, 0.0, 2.0])))
            np.testing.assert_array_equal(got, [0.0, 0.0, 0.0])
        ### BEGIN HIDDEN TESTS


        def test_silu_grad_on_a_matrix_far_from_zero():
            x = np.array([[-30.0, -4.5, -0.3], [0.2, 5.0, 30.0]])
            assert tfl.testing.gradcheck(silu_with(silu_grad), x)


        def test_silu_grad_is_g_times_the_derivative():
            x, g = np.array([-2.0, -0.5, 0.0, 1.0, 3.0]), np.array([1.0, -2.0, 0.5, 3.0, -1.0])
            s = 1 / (1 + np.exp(-x))
            got = np.asarray(silu_grad(tfl.tensor(g), tfl.tensor(x)))
            assert got.shape == x.shape
            np.testing.assert_allclose(got, g * s * (1 + x * (1 - s)), rtol=1e-10)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. `hypot`, an op of two inputs

        `hypot(x, y) = sqrt(x**2 + y**2)` is the length of the vector `(x, y)`. An op of two
        inputs has one rule per input. A rule may also read the op's output, as `tanh`'s does,
        which saves computing the square root again: write `hypot_grad_x(g, x, y, out)` and
        `hypot_grad_y(g, x, y, out)`.

        One thing you never do in a rule: when `x` was broadcast (a column against a row, say),
        the gradient flowing back into `x` must be summed back to `x`'s shape. teachflow's
        autodiff engine does that once, for every op, so that rules stay pure maths. Return
        something of the output's shape and let the engine do the rest.
        """),
        solution("hypot_grads", """
        def hypot_grad_x(g, x, y, out):
            \"\"\"g times d hypot(x, y) / dx.\"\"\"
            ### BEGIN SOLUTION
            return g * x / out
            ### END SOLUTION


        def hypot_grad_y(g, x, y, out):
            \"\"\"g times d hypot(x, y) / dy.\"\"\"
            ### BEGIN SOLUTION
            return g * y / out
            ### END SOLUTION
        """),
        free("""
        hypot = hypot_with(hypot_grad_x, hypot_grad_y)
        print(hypot(tfl.tensor([3.0, 5.0]), tfl.tensor([4.0, 12.0])))   # 5 and 13
        tfl.testing.gradcheck(hypot, np.array([3.0, -1.0, 0.5]), np.array([4.0, 2.0, -2.0]))
        """),
        tests("test_hypot_grads", 3, """
        def test_hypot_grads_pass_a_gradient_check():
            hypot = hypot_with(hypot_grad_x, hypot_grad_y)
            assert tfl.testing.gradcheck(hypot, np.array([3.0, -1.0, 0.5]),
                                         np.array([4.0, 2.0, -2.0]))
        ### BEGIN HIDDEN TESTS


        def test_hypot_grads_leave_broadcasting_to_the_engine():
            hypot = hypot_with(hypot_grad_x, hypot_grad_y)
            column, row = np.array([[1.0], [-2.0], [0.5]]), np.array([0.5, -1.0, 2.0, 4.0])
            assert tfl.testing.gradcheck(hypot, column, row)
            assert tfl.testing.gradcheck(hypot, row, column)


        def test_hypot_grads_are_g_times_the_derivatives():
            x, y, g = np.array([3.0, -1.0]), np.array([4.0, 2.0]), np.array([2.0, -0.5])
            out = np.hypot(x, y)
            args = [tfl.tensor(a) for a in (g, x, y, out)]
            np.testing.assert_allclose(np.asarray(hypot_grad_x(*args)), g * x / out, rtol=1e-10)
            np.testing.assert_allclose(np.asarray(hypot_grad_y(*args)), g * y / out, rtol=1e-10)
        ### END HIDDEN TESTS
        """),
        md("""
        Well done: that is the whole of an op's calculus. If you are curious, look at how
        `teachflow/autodiff/backprop.py` calls these rules, and at `teachflow/testing.py`, which checks
        them by nudging.
        """),
    ]
