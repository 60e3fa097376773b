"""Exercise 2, a simplification rule: the cells of ``02_simplification_rule.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
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
