"""Asserts rewritten to keep their values (pytest's trick), and those values put into words."""

from __future__ import annotations

import ast

import numpy as np
import pytest

import teachflow as tfl
from teachflow.grading.asserts import HELPER, AssertionFailure, assertion_failed, rewrite_asserts
from teachflow.grading.explain import describe, difference


def failure(source: str, **names) -> AssertionFailure:
    """Run `source` (asserts rewritten) with `names`; the failure its first failing assert
    raised."""
    tree = rewrite_asserts(ast.parse(source), source)
    namespace = {"np": np, "tfl": tfl, HELPER: assertion_failed, **names}
    with pytest.raises(AssertionFailure) as failed:
        exec(compile(tree, "<test>", "exec"), namespace)
    return failed.value


@pytest.mark.parametrize(("source", "lines"), [
    ("assert (3, 1) == (3,)", ["got:      (3, 1)", "expected: (3,)",
                               "got 2 items where 1 was expected"]),
    ("x = [1, 2, 3]\nassert x == [1, 5, 3]",
     ["got:      x = [1, 2, 3]", "expected: [1, 5, 3]",
      "first difference at index 1: 2 where 5 was expected"]),
    ("assert 4 == len('abc')", ["got:      len('abc') = 3", "expected: 4", "off by -1"]),
    ("assert [3] == (3,)", ["got:      [3]", "expected: (3,)",
                            "got a list where a tuple was expected"]),
    ("d = {'a': 1}\nassert d == {'a': 2, 'b': 3}",
     ["got:      d = {'a': 1}", "expected: {'a': 2, 'b': 3}", "missing keys: 'b'",
      "keys with other values: 'a'"]),
    ("n = 5\nassert n < 2", ["n = 5, which is not < 2"]),
    ("assert 3 in [1, 2]", ["3 is not in [1, 2]"]),
    ("x = None\nassert x is not None", ["x = None, which is None"]),
    ("assert not [1]", ["[1], which should be false"]),
    ("flag = 0\nassert flag", ["flag is 0"]),
    ("a = 'shape'\nassert a != 'shape'", ["a and 'shape' are both 'shape': they should differ"]),
])
def test_a_failed_assert_keeps_its_values(source: str, lines: list[str]) -> None:
    failed = failure(source)
    assert failed.details == lines
    assert failed.lineno == source.count("\n") + 1
    assert failed.statement == source.splitlines()[-1]


def test_a_call_keeps_its_arguments_and_arrays_say_where_they_differ() -> None:
    failed = failure("got = np.array([1.0, 2.0, 3.0])\n"
                     "assert np.allclose(got, [1.0, 2.0, 4.0]), 'the third one'")
    assert failed.details == [
        "message: the third one",
        "np.allclose(got, [1.0, 2.0, 4.0]) returned False",
        "got = ndarray of shape (3,), float64: [1., 2., 3.]",
        "[1.0, 2.0, 4.0]",
        "1 of 3 numbers differ; the largest difference is 1 at index (2,) (3 where 4 was "
        "expected)"]


def test_each_operand_runs_once_in_pythons_order() -> None:
    calls = []

    def side(name, value):
        calls.append(name)
        return value

    failure("assert side('left', 1) == side('right', 2)", side=side)
    assert calls == ["left", "right"]
    calls.clear()
    failure("def f(*a, **k):\n    return False\n"
            "assert side('function', f)(side('a', 1), side('b', 2), k=side('k', 3))", side=side)
    assert calls == ["function", "a", "b", "k"]
    passing = "assert side('x', 1) == 1\nassert side('y', [1])"
    calls.clear()
    exec(compile(rewrite_asserts(ast.parse(passing), passing), "<t>", "exec"),
         {"side": side, HELPER: assertion_failed})
    assert calls == ["x", "y"]


def test_tensors_are_described_by_shape_dtype_and_values() -> None:
    failed = failure("t = tfl.ones((2, 3))\nassert t.shape == (3, 2)")
    assert failed.details[0] == "got:      t.shape = (2, 3)"
    assert describe(tfl.tensor([1.0, 2.0])) == "Tensor of shape (2,), float32: [1., 2.]"
    assert describe(np.float32(0.5)) == "0.5 (float32)"
    assert describe(np.arange(1000)).startswith("ndarray of shape (1000,), int64: [ 0, 1, 2, ...")
    assert difference(tfl.ones((2,)), np.ones((3,))) == [
        "the shapes differ: (2,) where (3,) was expected"]


def test_a_learners_odd_objects_do_not_break_the_explanation() -> None:
    class Odd:
        def __repr__(self):
            raise RuntimeError("no repr")

        def __eq__(self, other):
            raise RuntimeError("no eq")

        __hash__ = None

    assert describe(Odd()).startswith("<Odd instance at 0x")  # reprlib's stand-in
    (line,) = difference([Odd()], [1])
    assert line.startswith("first difference at index 0: <Odd instance")
    assert len(describe("x" * 1000)) <= 300
