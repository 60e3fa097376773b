"""Exercise 5, predict the retraces: the cells of ``05_predict_retraces.ipynb``."""

from __future__ import annotations

from masters.cells import CHECKING, free, given, md, setup, solution, tests


def cells() -> list:
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
