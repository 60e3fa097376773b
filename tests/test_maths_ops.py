"""The maths library's ops (sin, cos, erf, log2, rsqrt), rounding (floor, ceil, round, sign) and
the tests of a float (isnan, isinf, isclose), declared in `teachflow/ops/maths.py`.

Each is checked against Python's own maths, element by element; its gradient against finite
differences and its second derivative against the formula; its C expression (what each GPU
thread and each C loop runs) compiled as plain C against NumPy; and, staged, fused into one
kernel, saved and loaded, with the same values.
"""

from __future__ import annotations

import math
import shutil
import subprocess

import numpy as np
import pytest
from helpers import check_gradients

import teachflow as tfl
from teachflow.ops import OPS

POINTS = [-3.0, -1.5, -0.5, -1e-3, 0.0, 0.25, 1.0, 2.0, 4.5]
POSITIVE = [1e-3, 0.25, 0.5, 1.0, 2.0, 8.0, 1e4]
#: Python's maths for each op, one float at a time.
MATHS = {"sin": math.sin, "cos": math.cos, "erf": math.erf, "log2": math.log2,
         "rsqrt": lambda v: 1 / math.sqrt(v)}


@pytest.mark.parametrize("name", sorted(MATHS))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_are_pythons_maths(name: str, dtype: str) -> None:
    points = POSITIVE if name in ("log2", "rsqrt") else POINTS
    x = tfl.tensor(np.array(points, dtype))
    for got in (getattr(tfl, name)(x), getattr(x, name)()):
        assert got.dtype == np.dtype(dtype)
        np.testing.assert_allclose(got.numpy(), [MATHS[name](v) for v in points],
                                   rtol=1e-6 if dtype == "float32" else 1e-15, atol=1e-7)
    assert getattr(tfl, name)(tfl.tensor([1, 2])).dtype == np.float64  # integers: as NumPy


def test_rounding_takes_halves_to_even_and_keeps_integers() -> None:
    x = tfl.tensor([-2.5, -1.5, -0.5, 0.5, 1.5, 2.5, -0.2, 3.7])
    assert x.round().tolist() == [-2.0, -2.0, -0.0, 0.0, 2.0, 2.0, -0.0, 4.0]
    assert tfl.floor(x).tolist() == [-3.0, -2.0, -1.0, 0.0, 1.0, 2.0, -1.0, 3.0]
    assert x.ceil().tolist() == [-2.0, -1.0, -0.0, 1.0, 2.0, 3.0, -0.0, 4.0]
    assert tfl.sign(x).tolist() == [-1.0, -1.0, -1.0, 1.0, 1.0, 1.0, -1.0, 1.0]
    i = tfl.tensor([-3, 0, 5])
    assert i.floor().dtype == np.int64 and i.floor().tolist() == [-3, 0, 5]  # (as NumPy 2)
    assert tfl.tensor([np.nan]).sign().isnan().item()


def test_rounding_passes_no_gradient_and_the_rest_pass_the_formula() -> None:
    x0 = np.array([-1.3, 0.4, 2.6])
    x = tfl.tensor(x0)
    for name in ("floor", "ceil", "round", "sign"):  # flat: x * floor(x) has floor(x) as slope
        got = tfl.grad(lambda t, n=name: (t * getattr(t, n)()).sum())(x)
        np.testing.assert_array_equal(got.numpy(), getattr(np, {"round": "rint"}.get(
            name, name))(x0))
    assert not x.isnan().requires_grad and tfl.tensor(x0, requires_grad=True).isinf().dtype == \
        np.bool_


@pytest.mark.parametrize("name", sorted(MATHS))
def test_gradients_match_finite_differences(name: str) -> None:
    x = np.array([[0.3, 0.9, 1.7], [2.2, 0.6, 1.1]])  # positive: in every op's domain
    check_gradients(getattr(tfl, name), [x])


#: d/dx and d²/dx² of each, written out.
DERIVATIVES = {
    "sin": (np.cos, lambda x: -np.sin(x)),
    "cos": (lambda x: -np.sin(x), lambda x: -np.cos(x)),
    "erf": (lambda x: 2 / np.sqrt(np.pi) * np.exp(-x * x),
            lambda x: -4 * x / np.sqrt(np.pi) * np.exp(-x * x)),
    "log2": (lambda x: 1 / (x * np.log(2)), lambda x: -1 / (x * x * np.log(2))),
    "rsqrt": (lambda x: -0.5 * x ** -1.5, lambda x: 0.75 * x ** -2.5),
}


@pytest.mark.parametrize("name", sorted(DERIVATIVES))
def test_first_and_second_derivatives_are_the_formulas(name: str) -> None:
    x0 = np.array([0.2, 0.7, 1.3, 3.0])
    first = tfl.grad(lambda t: getattr(t, name)().sum())
    second = tfl.grad(lambda t: first(t).sum())
    d1, d2 = DERIVATIVES[name]
    np.testing.assert_allclose(first(tfl.tensor(x0)).numpy(), d1(x0), rtol=1e-12)
    np.testing.assert_allclose(second(tfl.tensor(x0)).numpy(), d2(x0), rtol=1e-12)
    _, tangent = tfl.jvp(lambda t: getattr(t, name)(), (tfl.tensor(x0),),
                         (tfl.tensor(np.ones(4)),))
    np.testing.assert_allclose(tangent.numpy(), d1(x0), rtol=1e-12)


def test_isnan_isinf_and_isclose_as_pytorch_defines_them() -> None:
    x = tfl.tensor([1.0, np.nan, np.inf, -np.inf, 1e-9, 100.0])
    y = tfl.tensor([1.0 + 1e-6, np.nan, np.inf, np.inf, 0.0, 100.1])
    assert x.isnan().tolist() == [False, True, False, False, False, False]
    assert tfl.isinf(x).tolist() == [False, False, True, True, False, False]
    # |x - y| <= atol + rtol |y|; equal infinities are close, opposite ones and NaN are not.
    assert tfl.isclose(x, y).tolist() == [True, False, True, False, True, False]
    assert x.isclose(y, equal_nan=True).tolist() == [True, True, True, False, True, False]
    assert tfl.isclose(x, y, rtol=1e-2).tolist() == [True, False, True, False, True, True]
    assert tfl.isclose(x, 1.0, atol=0.0).tolist() == [True, False, False, False, False, False]
    assert tfl.isclose(tfl.tensor([1.0]), tfl.tensor([np.inf]), rtol=10.0).tolist() == [False]


def _chain(x: tfl.Tensor) -> tfl.Tensor:
    """Every new elementwise op in one expression that stays in their domains."""
    positive = x * x + 0.5
    return ((x.sin() * x.cos() + x.erf()) * positive.log2() * positive.rsqrt()
            + x.floor() + x.ceil() + (x * 3).round() + x.sign()
            + tfl.where(x.isnan() | x.isinf(), 0.0, 1.0))


@pytest.mark.parametrize("n", [7, 300_000])  # one block, and several
def test_they_fuse_into_one_kernel_that_computes_what_eager_computes(n: int) -> None:
    x = tfl.tensor(np.random.default_rng(0).normal(scale=3, size=n).astype(np.float32))
    compiled = tfl.compile(_chain, x)
    [fused] = compiled.graph.nodes
    names = {node.op.name for node in fused.op.group.nodes}
    assert {"sin", "cos", "erf", "log2", "rsqrt", "floor", "ceil", "round", "isnan",
            "isinf"} <= names
    np.testing.assert_allclose(compiled(x).numpy(), _chain(x).numpy(), rtol=2e-6, atol=2e-6)
    cuda = compiled.kernels[fused.op.name]["cuda"]
    assert "erf(" in cuda and "rint(" in cuda and "log2(" in cuda  # each thread: math.h's


def test_staged_saved_and_loaded_they_give_eager_values(tmp_path) -> None:
    x = tfl.tensor(np.linspace(-4, 4, 12).reshape(3, 4))
    staged = tfl.function(_chain)
    np.testing.assert_allclose(staged(x).numpy(), _chain(x).numpy(), rtol=1e-12)
    loaded = tfl.load(tfl.save(staged, tmp_path / "maths"))
    np.testing.assert_allclose(loaded(x).numpy(), _chain(x).numpy(), rtol=1e-12)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_the_c_expressions_compute_numpys_results(tmp_path) -> None:
    """Each op's fusion template, compiled as plain C on the CPU, on values that include the
    halves rounding must send to even, infinities and NaN."""
    values = [-2.5, -1.5, -0.5, -0.2, 0.0, 0.5, 1.5, 2.5, 3.7, 1e-300, 1e300, math.nan,
              math.inf, -math.inf]
    literals = ", ".join({"nan": "NAN", "inf": "INFINITY", "-inf": "-INFINITY"}.get(
        repr(v), repr(v)) for v in values)
    names = ["sin", "cos", "erf", "log2", "rsqrt", "floor", "ceil", "round", "sign", "isnan",
             "isinf"]
    prints = "\n".join(f'        printf("%.17g\\n", (double)({template}));' for template in (
        OPS[n].fusion.format("x", dtype="double") for n in names))
    (tmp_path / "maths.c").write_text(f"""#include <math.h>
#include <stdio.h>
int main(void) {{
    double v[] = {{{literals}}};
    for (int i = 0; i < {len(values)}; i++) {{
        double x = v[i];
{prints}
    }}
    return 0;
}}
""")
    subprocess.run(["cc", str(tmp_path / "maths.c"), "-o", str(tmp_path / "maths"), "-lm"],
                   check=True)
    printed = subprocess.run([str(tmp_path / "maths")], capture_output=True, text=True,
                             check=True).stdout.split()
    got = np.array([float(p) for p in printed]).reshape(len(values), len(names))
    with np.errstate(all="ignore"):
        x = np.array(values)
        for k, name in enumerate(names):
            want = OPS[name].kernel(np)(x).astype(np.float64)
            np.testing.assert_allclose(got[:, k], want, rtol=1e-15, atol=0, err_msg=name)


def test_bad_arguments_name_the_op_and_the_line() -> None:
    x = tfl.tensor([1.0, 2.0])
    with pytest.raises(tfl.TeachflowError, match="rtol must be a number >= 0") as caught:
        tfl.isclose(x, x, rtol=-1e-5)
    assert caught.value.op == "isclose" and "test_maths_ops.py" in str(caught.value.location)
    with pytest.raises(tfl.TeachflowError, match="equal_nan"):
        x.isclose(x, equal_nan="yes")
    with pytest.raises(tfl.ShapeError, match="cannot broadcast") as caught:
        tfl.isclose(x, tfl.ones(3))
    assert "test_maths_ops.py" in str(caught.value.location)
    with pytest.raises(tfl.TeachflowError, match="beta must be a number > 0"):
        x.softplus(beta=0)
