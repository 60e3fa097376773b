"""The exercises' master notebooks, built from this file: ``python exercises/build.py``.

Each exercise is a *master* notebook: the answers in it, its cells marked as nbgrader marks them
(solution cells, locked given cells, test cells worth points, hidden tests between
``### BEGIN HIDDEN TESTS`` and ``### END HIDDEN TESTS``). ``teachflow assign`` turns a master
into the learners' copy; ``teachflow check`` runs its visible tests; grading runs them all.

Grading runs the tests in a trusted process and the learner's code in a sandboxed worker, so
the tests are written for that wall. A name the learner defines (and a given cell's name that
uses one) is a proxy in the tests: calling it runs it in the worker, and only plain data crosses
(tensors, arrays, numbers, strings, lists and dicts of them). So a test calls the learner's
functions with arrays and tensors and checks what comes back against values it computes itself;
a learner's gradient rule is plugged into an op the *test* declares; a learner's rule or pass is
run by a given helper beside it, which reports what the pass stepper shows as plain data (stage
names, the rules that fired, the ops left, the result on some inputs). Given cells that do not
use the learner's names run on both sides. The same notebooks pass ``teachflow check``, which
runs everything in one process.

The notebooks are committed without outputs, and this file is their source: edit it, then run
it. ``python exercises/build.py --check`` says whether the committed notebooks are up to date.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

HERE = Path(__file__).resolve().parent

# --- Cells, marked as nbgrader marks them --------------------------------------------------------


def _marks(grade_id: str, *, solution: bool = False, grade: bool = False, locked: bool = False,
           points: float = 0) -> dict:
    return {"nbgrader": {"grade_id": grade_id, "solution": solution, "grade": grade,
                         "locked": locked, "points": points, "schema_version": 3}}


def _text(source: str) -> str:
    return textwrap.dedent(source).strip("\n")


def md(source: str) -> nbformat.NotebookNode:
    """Words for the learner."""
    return new_markdown_cell(_text(source))


def given(grade_id: str, source: str) -> nbformat.NotebookNode:
    """Code the learner runs but does not change (locked)."""
    return new_code_cell(_text(source), metadata=_marks(grade_id, locked=True))


def solution(grade_id: str, source: str) -> nbformat.NotebookNode:
    """The learner's answer: the part between the markers becomes a stub when handed out."""
    return new_code_cell(_text(source), metadata=_marks(grade_id, solution=True))


def tests(grade_id: str, points: float, source: str) -> nbformat.NotebookNode:
    """pytest functions, worth `points` together (locked)."""
    return new_code_cell(_text(source), metadata=_marks(grade_id, grade=True, locked=True,
                                                        points=points))


def free(source: str) -> nbformat.NotebookNode:
    """A cell to play in: nobody grades it."""
    return new_code_cell(_text(source))


def setup(more: str = "") -> nbformat.NotebookNode:
    """The first code cell, locked: NumPy and teachflow, then `more` (teachflow's parts)."""
    return given("setup", "import numpy as np\n\nimport teachflow as tfl\n" + _text(more))


CHECKING = """
Run the visible tests whenever you like: `tfl.grading.check()` in a cell, or
`teachflow check {name}.ipynb` in a terminal. Grading runs some more that you cannot see.
"""

# --- 1. A gradient rule --------------------------------------------------------------------------


def gradient_rule() -> list:
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


# --- 2. A simplification rule --------------------------------------------------------------------


def simplification_rule() -> list:
    return [
        md("""
        # Exercise 2 — A simplification rule that fires in the stepper

        In lesson 3 you met `simplify`, a pass made of **rules as data**. Each rule is a name in
        plain words, a pattern to look for, and what to put in its place:

        ```python
        Rule("x*1 -> x", Pattern(ew.mul, X, 1), lambda m, emit: m.x)
        ```

        `Pattern(ew.mul, X, 1)` matches a node that multiplies anything (bound to `x`) by the
        literal 1. A `Pattern` in the place of an operand matches the node that made that
        operand, so patterns nest: `Pattern(ew.neg, Pattern(ew.neg, X))` is `-(-x)`. The
        replacement receives the match `m` (`m.x` is what `X` matched) and `emit`, which adds a
        new node where the old one stood: `emit(ew.add, m.x, m.y)`. The rule's name is what the
        pass stepper shows when it fires, so let it say what the rule does.

        One check guards every rule for free: the replacement must have the shape, dtype and
        device of what it replaces. Everything else is your responsibility. A rule must be an
        identity **for every value**, floating point's `inf`, `nan` and `-0.0` included, or the
        compiled program computes something other than what you wrote. Read
        `teachflow/passes/simplify.py` for the rules teachflow ships, and why `x+0 -> x` is not
        among them for floats.
        """),
        md(CHECKING.format(name="02_simplification_rule")),
        setup("""
        from teachflow.ops import elementwise as ew
        from teachflow.passes.rules import Pattern, Rule, Var, rule_pass
        from teachflow.viz.stepper_data import compilation_data

        X, Y = Var("x"), Var("y")
        """),
        md("""
        The helper below compiles one of a few small programs with a pass made only of the rules
        you give it (then `dce`, which sweeps away what no longer has a reader), runs it, and
        reports what the pass stepper shows: the stages, the rules that fired, the ops left.
        """),
        given("at_work", """
        EXAMPLES = {  # small programs of x and y for the rules to work on
            "sub_neg": lambda x, y: x - (-y),
            "sub_neg_exp": lambda x, y: (x - (-y)).exp(),
            "sub": lambda x, y: x - y,
            "neg_sub": lambda x, y: (-x) - y,
            "neg_mul_neg": lambda x, y: (-x) * (-y),
            "neg_mul_neg_plus": lambda x, y: (-x) * (-y) + 1.0,
            "neg_mul": lambda x, y: (-x) * y,
            "neg_squared": lambda x, y: (-x) * (-x) + y,
            "both": lambda x, y: (x - (-y)).exp() + (-x) * (-y),
        }


        def at_work(rules, example, x, y):
            \"\"\"Compile EXAMPLES[example] for x and y with a pass made of `rules`, then dce;
            run it, and say what the stepper shows (a dict of plain data).\"\"\"
            x, y = tfl.tensor(x), tfl.tensor(y)
            compiled = tfl.compile(EXAMPLES[example], x, y,
                                   passes=[rule_pass("my_rules", rules), "dce"])
            stages = compilation_data(compiled)["stages"]  # what the pass stepper draws
            with np.errstate(all="ignore"):  # (inf and nan are welcome here)
                result = compiled(x, y).numpy()
            return {
                "stages": [stage["pass"] for stage in stages],
                "rules": [rule.name for rule in rules],
                "fired": [change["rule"] for stage in stages if stage["pass"] == "my_rules"
                          for change in stage["changes"]],
                "ops": [node.op.name for node in compiled.graph.nodes],
                "result": result,
            }
        """),
        given("inputs", """
        XS, YS = np.array([0.5, -1.0, 2.0]), np.array([1.5, 0.25, -3.0])
        COLUMN, ROW = np.array([[1.0], [2.0], [-3.0]]), np.array([0.5, -1.0, 4.0, 0.0])
        # Floating point's awkward corners: signed zeros, infinities and nan.
        SPECIAL_X = np.array([-0.0, 0.0, -0.0, np.inf, -np.inf, np.inf, np.nan, 1.5, -0.0])
        SPECIAL_Y = np.array([-0.0, -0.0, 0.0, 1.0, np.inf, np.inf, 2.0, np.nan, 3.0])


        def same_floats(got, expected):
            \"\"\"Equal as a program sees floats: nan where nan, and zeros of the same sign.\"\"\"
            np.testing.assert_array_equal(got, expected)
            numbers = ~np.isnan(expected)
            assert (np.signbit(got) == np.signbit(expected))[numbers].all(), "a zero's sign changed"


        def evaluated(example, x, y):
            \"\"\"EXAMPLES[example] run eagerly, op by op, with no pass at all.\"\"\"
            with np.errstate(all="ignore"):
                return EXAMPLES[example](tfl.tensor(x), tfl.tensor(y)).numpy()
        """),
        md("""
        ## 1. `x - (-y) -> x + y`

        Subtracting a negation is adding, and not only roughly: in IEEE arithmetic `a - b` is
        exactly `a + (-b)`, so this rule holds bit for bit, for infinities, nan and signed
        zeros too. Define `minus_negative`, a `Rule` named `"x - (-y) -> x + y"`, that
        replaces `sub(x, neg(y))` by `add(x, y)`.
        """),
        solution("minus_negative", """
        ### BEGIN SOLUTION
        minus_negative = Rule("x - (-y) -> x + y", Pattern(ew.sub, X, Pattern(ew.neg, Y)),
                              lambda m, emit: emit(ew.add, m.x, m.y))
        ### END SOLUTION
        """),
        given("minus_negative_at_work", """
        def minus_negative_at_work(example, x, y):
            \"\"\"`at_work` with your rule minus_negative alone.\"\"\"
            return at_work([minus_negative], example, x, y)
        """),
        free("""
        minus_negative_at_work("sub_neg_exp", XS, YS)
        """),
        tests("test_minus_negative", 3, """
        def test_minus_negative_fires_in_the_stepper():
            seen = minus_negative_at_work("sub_neg_exp", XS, YS)
            assert seen["stages"] == ["trace", "my_rules", "dce"]
            assert seen["fired"] == [minus_negative.name]
            assert seen["ops"] == ["add", "exp"]


        def test_minus_negative_keeps_the_values():
            seen = minus_negative_at_work("sub_neg_exp", XS, YS)
            np.testing.assert_allclose(seen["result"], np.exp(XS + YS), rtol=1e-12)
        ### BEGIN HIDDEN TESTS


        def test_minus_negative_leaves_other_subtractions_alone():
            for example in ("sub", "neg_sub", "neg_mul_neg"):
                seen = minus_negative_at_work(example, XS, YS)
                assert seen["fired"] == [], example


        def test_minus_negative_holds_for_every_float():
            seen = minus_negative_at_work("sub_neg", SPECIAL_X, SPECIAL_Y)
            assert seen["ops"] == ["add"]
            same_floats(seen["result"], evaluated("sub_neg", SPECIAL_X, SPECIAL_Y))


        def test_minus_negative_with_broadcasting():
            seen = minus_negative_at_work("sub_neg", COLUMN, ROW)
            assert seen["fired"] == seen["rules"]
            np.testing.assert_allclose(seen["result"], COLUMN + ROW)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 2. `(-x) * (-y) -> x * y`

        The sign of a product is decided by the signs of its factors alone, so two negations
        cancel exactly. Define `negative_times_negative`, a `Rule` named
        `"(-x) * (-y) -> x * y"`. (`mul` is commutative, and the engine tries both orders of
        its operands for you.)
        """),
        solution("negative_times_negative", """
        ### BEGIN SOLUTION
        negative_times_negative = Rule(
            "(-x) * (-y) -> x * y", Pattern(ew.mul, Pattern(ew.neg, X), Pattern(ew.neg, Y)),
            lambda m, emit: emit(ew.mul, m.x, m.y))
        ### END SOLUTION
        """),
        given("negative_times_negative_at_work", """
        def negative_times_negative_at_work(example, x, y):
            \"\"\"`at_work` with your rule negative_times_negative alone.\"\"\"
            return at_work([negative_times_negative], example, x, y)
        """),
        tests("test_negative_times_negative", 3, """
        def test_negative_times_negative_fires_in_the_stepper():
            seen = negative_times_negative_at_work("neg_mul_neg_plus", XS, YS)
            assert seen["stages"] == ["trace", "my_rules", "dce"]
            assert seen["fired"] == [negative_times_negative.name]
            assert seen["ops"] == ["mul", "add"]
            np.testing.assert_allclose(seen["result"], XS * YS + 1.0, rtol=1e-12)
        ### BEGIN HIDDEN TESTS


        def test_negative_times_negative_needs_two_negations():
            for example in ("neg_mul", "sub_neg"):
                assert negative_times_negative_at_work(example, XS, YS)["fired"] == [], example


        def test_negative_times_negative_holds_for_every_float():
            seen = negative_times_negative_at_work("neg_mul_neg", SPECIAL_X, SPECIAL_Y)
            assert seen["ops"] == ["mul"]
            same_floats(seen["result"], evaluated("neg_mul_neg", SPECIAL_X, SPECIAL_Y))


        def test_negative_times_negative_of_one_value():
            seen = negative_times_negative_at_work("neg_squared", COLUMN, ROW)
            assert seen["ops"] == ["mul", "add"]
            np.testing.assert_allclose(seen["result"], COLUMN * COLUMN + ROW)
        ### END HIDDEN TESTS
        """),
        md("""
        ## 3. Watch them in the stepper

        Both rules in one pass, on a program that gives each something to do. Step to the
        `my_rules` stage: each change names its rule, in your words. Click one to see the nodes
        it matched; step on to `dce` to see the negations go.
        """),
        free("""
        x, y = tfl.tensor(XS), tfl.tensor(YS)
        compiled = tfl.compile(EXAMPLES["both"], x, y, passes=[
            rule_pass("my_rules", [minus_negative, negative_times_negative]), "dce"])
        compiled.show()
        """),
        md("""
        ## 4. A rule that is not a rule

        `log(exp(x)) -> x` looks like school algebra. It is not a rule for floats: find a
        float32 number `x` for which teachflow's `tfl.tensor([x]).exp().log()` is *not* `x`, and
        set `log_exp_counterexample` to it. (A `nan` does not count: `log(exp(nan))` is `nan`,
        just as the rule would say.) You may try numbers in a cell of your own.
        """),
        solution("log_exp", """
        ### BEGIN SOLUTION
        log_exp_counterexample = 100.0  # exp(100) overflows float32: log(inf) is inf, not 100
        ### END SOLUTION
        """),
        tests("test_log_exp", 1, """
        def test_log_exp_counterexample_breaks_the_rule():
            x = np.float32(log_exp_counterexample)
            assert not np.isnan(x)
            with np.errstate(all="ignore"):
                got = tfl.tensor([x]).exp().log().numpy()[0]
            assert got != x
        """),
        md("""
        Overflow is one way to break it; rounding is another (try `x = 0.1`). That is why a
        compiler's rules are identities that hold *exactly*, and why teachflow's verification
        (`tfl.compile(..., verify=True)`) runs the program before and after each pass.
        """),
    ]


# --- 3. A pass of your own: CSE ------------------------------------------------------------------


def cse_pass() -> list:
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


# --- 4. A fusion grouping, measured --------------------------------------------------------------


def fusion_grouping() -> list:
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


# --- 5. Predict the retraces ---------------------------------------------------------------------


def predict_retraces() -> list:
    return [
        md("""
        # Exercise 5 — Predict the retraces

        A `tfl.function` traces your Python once per **signature** and then runs the graph it
        recorded, without running your Python again. The signature of a call is, for each
        tensor argument, its shape, dtype and device, and for every other argument its *value*
        (lesson 2, §3). So whether a call traces depends on what you pass, and a trace bakes in
        whatever plain Python values the function read at that moment.

        Knowing when a function retraces is half of using staged code well: a retrace costs a
        trace and a compilation, and a value baked in can be a stale one. In this exercise you
        predict first, and run afterwards. Resist the temptation to run the cells below before
        you have written your predictions: the point is to find out what you expected.
        """),
        md(CHECKING.format(name="05_predict_retraces")),
        setup(),
        md("""
        ## 1. Which calls trace?

        Read `first_story`: nine calls of one `tfl.function`, on a fresh one each time the
        story is told. (`tfl.ones` and `tfl.zeros` make float32 tensors, as PyTorch's do; a
        NumPy array of Python floats is float64, and keeps its dtype in `tfl.tensor`.)
        """),
        given("first_story", """
        def first_story():
            \"\"\"The nine calls, on a fresh `scale`; the trace count after each one.\"\"\"
            scale = tfl.function(lambda x, factor: x * factor)
            counts = []

            def call(*args):
                scale(*args)
                counts.append(scale.trace_count)

            call(tfl.ones(3), 2.0)                 # call 1
            call(tfl.ones(3), 2.0)                 # call 2
            call(tfl.zeros(3), 2.0)                # call 3: other numbers, the same shape
            call(tfl.ones(4), 2.0)                 # call 4
            call(tfl.ones(3), 3.0)                 # call 5
            call(tfl.ones(3), 2)                   # call 6: an int this time
            call(tfl.tensor(np.ones(3)), 2.0)      # call 7
            call(tfl.ones(3), tfl.tensor(3.0))     # call 8: the factor as a tensor
            call(tfl.ones(3), tfl.tensor(4.0))     # call 9
            return counts
        """),
        md("""
        Predict: how many traces in all (`predicted_trace_count`), and which calls trace, by
        their numbers from 1 to 9 (`predicted_tracing_calls`, a list in increasing order)?
        """),
        solution("first_prediction", """
        ### BEGIN SOLUTION
        predicted_trace_count = 6
        predicted_tracing_calls = [1, 4, 5, 6, 7, 8]
        ### END SOLUTION
        """),
        tests("test_first_prediction_form", 0, """
        def test_the_predictions_are_call_numbers():
            assert isinstance(predicted_trace_count, int)
            assert list(predicted_tracing_calls) == sorted(set(predicted_tracing_calls))
            assert all(1 <= n <= 9 for n in predicted_tracing_calls)
            assert len(predicted_tracing_calls) == predicted_trace_count


        def test_the_first_call_traces():
            assert 1 in predicted_tracing_calls
        """),
        tests("test_first_prediction", 3, """
        # Grading runs the story and compares it with your predictions, in hidden tests.
        predictions = (predicted_trace_count, predicted_tracing_calls)
        ### BEGIN HIDDEN TESTS
        def test_the_trace_count():
            assert predicted_trace_count == first_story()[-1]


        def test_which_calls_trace():
            counts = [0, *first_story()]
            traced = [n for n in range(1, 10) if counts[n] > counts[n - 1]]
            assert list(predicted_tracing_calls) == traced
        ### END HIDDEN TESTS
        """),
        md("""
        Now run it, and read the function's own explanations: `retrace_reasons` says, for
        each trace after the first, which argument changed and how.
        """),
        free("""
        print(first_story())
        scale = tfl.function(lambda x, factor: x * factor)
        scale(tfl.ones(3), 2.0)
        scale(tfl.ones(3), 2)
        scale.retrace_reasons
        """),
        md("""
        ## 2. What does a trace remember?

        A function reads more than its arguments. `second_story` calls a function that reads a
        Python float, `threshold`, and a tensor, `weights`, from around it; between calls, the
        story changes them. Each call returns `[2.0, 2.0, 2.0]` or something else: predict the
        first element of each of the four results (`predicted_results`, four numbers).
        """),
        given("second_story", """
        def second_story():
            \"\"\"Four calls of `f`, the world around it changing in between; the first element
            of each result.\"\"\"
            threshold = 1.0
            weights = tfl.ones(3)

            @tfl.function
            def f(x):
                return x * weights + threshold

            results = [f(tfl.ones(3))]        # call 1: 1 * 1 + 1 = 2
            threshold = 100.0
            results.append(f(tfl.ones(3)))    # call 2
            with tfl.no_grad():
                weights *= 10                 # the same tensor, updated in place
            results.append(f(tfl.ones(3)))    # call 3
            weights = tfl.zeros(3)            # the name now names another tensor
            results.append(f(tfl.ones(3)))    # call 4
            return [r.numpy()[0].item() for r in results]
        """),
        solution("second_prediction", """
        ### BEGIN SOLUTION
        predicted_results = [2.0, 2.0, 11.0, 100.0]
        ### END SOLUTION
        """),
        tests("test_second_prediction_form", 0, """
        def test_four_results_predicted():
            assert len(predicted_results) == 4
            assert float(predicted_results[0]) == 2.0
        """),
        tests("test_second_prediction", 2, """
        # Grading runs the story and compares it with your prediction, in a hidden test.
        prediction = predicted_results
        ### BEGIN HIDDEN TESTS
        def test_the_results():
            assert [float(r) for r in predicted_results] == second_story()
        ### END HIDDEN TESTS
        """),
        md("""
        Run it, and explain each number to yourself: which values did the trace bake in, which
        did it read at every call, and what made call 4 trace again? (`f.retrace_reasons` would
        tell you.) This is why a model's state lives in tensors updated in place, and why
        teachflow warns when staged code changes plain Python state.
        """),
        free("""
        second_story()
        """),
        md("""
        ## 3. Trace once

        Write `scale_once`, a `tfl.function` that computes `x * factor` and traces **once** for
        all of these calls: `x` a float32 vector of any length, `factor` a float32 scalar tensor
        of any value, such as `scale_once(tfl.ones(3), tfl.tensor(2.0))` and
        `scale_once(tfl.ones(1000), tfl.tensor(0.5))`. Lesson 2 (and the README) show how to
        say "any length": a `tfl.TensorSpec` with `None` for the dimension that varies.
        """),
        solution("scale_once", """
        ### BEGIN SOLUTION
        scale_once = tfl.function(
            lambda x, factor: x * factor,
            input_signature=[tfl.TensorSpec((None,), "float32"), tfl.TensorSpec((), "float32")])
        ### END SOLUTION
        """),
        tests("test_scale_once", 2, """
        def test_scale_once_traces_once():
            for n, factor in [(3, 2.0), (5, 2.0), (5, -1.5), (1, 0.0)]:
                got = scale_once(tfl.ones(n), tfl.tensor(factor))
                np.testing.assert_allclose(np.asarray(got), np.full(n, factor))
            assert scale_once.trace_count == 1
        ### BEGIN HIDDEN TESTS


        def test_scale_once_on_long_vectors():
            x = np.linspace(-1.0, 1.0, 1000).astype(np.float32)
            got = scale_once(tfl.tensor(x), tfl.tensor(np.float32(0.5)))
            np.testing.assert_allclose(np.asarray(got), x * 0.5, rtol=1e-6)
            assert scale_once.trace_count == 1
        ### END HIDDEN TESTS
        """),
        md("""
        That is the whole game of signatures: what is a tensor is looked at by shape, dtype and
        device; everything else, by value. Choose which is which, and you choose when your
        function traces.
        """),
    ]


# --- 6. Predict the placement --------------------------------------------------------------------


def predict_placement() -> list:
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


# --- 7. Run a saved graph ------------------------------------------------------------------------

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


def run_a_saved_graph() -> list:
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


# --- 8. Predict the peak -------------------------------------------------------------------------


def predict_the_peak() -> list:
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


# --- 9. JVP and batching rules -------------------------------------------------------------------


def jvp_and_batching_rules() -> list:
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


# --- The notebooks -------------------------------------------------------------------------------

NOTEBOOKS: dict[str, Callable[[], list]] = {
    "01_gradient_rule.ipynb": gradient_rule,
    "02_simplification_rule.ipynb": simplification_rule,
    "03_cse_pass.ipynb": cse_pass,
    "04_fusion_grouping.ipynb": fusion_grouping,
    "05_predict_retraces.ipynb": predict_retraces,
    "06_predict_placement.ipynb": predict_placement,
    "07_run_a_saved_graph.ipynb": run_a_saved_graph,
    "08_predict_the_peak.ipynb": predict_the_peak,
    "09_jvp_and_batching_rules.ipynb": jvp_and_batching_rules,
}


def notebook(name: str) -> nbformat.NotebookNode:
    """The master notebook `name`, as this file builds it (cell ids fixed, so a rebuild of an
    unchanged exercise writes the same file)."""
    cells = NOTEBOOKS[name]()
    for index, cell in enumerate(cells):
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        cell.id = grade_id or f"{cell.cell_type}-{index}"
    result = new_notebook(cells=cells)
    result.metadata["kernelspec"] = {"name": "python3", "display_name": "Python 3",
                                     "language": "python"}
    result.metadata["language_info"] = {"name": "python"}
    nbformat.validate(result)
    return result


def text(name: str) -> str:
    return nbformat.writes(notebook(name)) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1 if a committed notebook is out of date")
    args = parser.parse_args(argv)
    stale = []
    for name in NOTEBOOKS:
        path, wanted = HERE / name, text(name)
        if path.exists() and path.read_text(encoding="utf-8") == wanted:
            continue
        stale.append(name)
        if not args.check:
            path.write_text(wanted, encoding="utf-8")
    if args.check and stale:
        print(f"out of date (run python exercises/build.py): {', '.join(stale)}")
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
