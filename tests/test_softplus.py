"""softplus, the op that shows adding an op touches its declaration alone.

``softplus(x) = log(1 + e^x)`` is declared in `teachflow/ops/elementwise.py` and nowhere else:
its kernel (NumPy's logaddexp, which takes ``out=``), its gradient (the sigmoid), and its C
expression. These tests check that it computes the maths without overflow, that its gradient is
right and can be differentiated again, and that everything that reads declarations picks it up:
the fusion pass, the fused NumPy and CUDA kernels, the IR's text.
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

#: From far below to far above zero: e^x under- and overflows float32 and float64 at the ends.
VALUES = [-1000.0, -100.0, -30.0, -2.5, -1.0, -1e-8, -0.0, 0.0, 1e-8, 0.5, 1.0, 3.0, 30.0, 100.0,
          1000.0]


def reference(x: float) -> float:
    """log(1 + e^x) in Python's float64 maths: log1p(e^x), or x + log1p(e^-x) where e^x
    overflows."""
    return math.log1p(math.exp(x)) if x < 30 else x + math.log1p(math.exp(-x))


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_values_match_the_maths_without_overflow(dtype: str) -> None:
    x = np.array(VALUES, dtype=dtype)
    with np.errstate(over="raise", invalid="raise"):  # no overflow, no nan made, anywhere
        for got in (tfl.softplus(tfl.tensor(x)), tfl.tensor(x).softplus()):
            assert got.dtype == np.dtype(dtype)
            np.testing.assert_allclose(got.numpy(), [reference(v) for v in VALUES],
                                       rtol=1e-6 if dtype == "float32" else 1e-14,
                                       atol=np.finfo(dtype).tiny)  # (e^-100 is subnormal)
    assert tfl.softplus([1, 2]).dtype == np.float64  # integers: as NumPy computes them
    with np.errstate(invalid="ignore"):  # (NumPy warns of the nan)
        assert math.isnan(tfl.softplus(tfl.tensor([math.nan])).item())
    assert tfl.softplus(tfl.tensor([-math.inf, math.inf])).tolist() == [0.0, math.inf]


def test_gradient_matches_finite_differences_and_is_the_sigmoid() -> None:
    x = np.array([[-3.0, -0.4, 0.0], [0.7, 2.0, 5.0]])
    check_gradients(tfl.softplus, [x])
    np.testing.assert_allclose(tfl.grad(lambda t: t.softplus().sum())(tfl.tensor(x)).numpy(),
                               1 / (1 + np.exp(-x)), rtol=1e-14)


def test_second_derivative_is_the_sigmoids_derivative() -> None:
    x = np.array([-2.0, 0.0, 0.5, 3.0])
    d2 = tfl.grad(lambda t: tfl.grad(lambda u: u.softplus().sum())(t).sum())(tfl.tensor(x))
    s = 1 / (1 + np.exp(-x))
    np.testing.assert_allclose(d2.numpy(), s * (1 - s), rtol=1e-12)


def _net(x: tfl.Tensor, y: tfl.Tensor) -> tfl.Tensor:
    return (x * y - 1.0).softplus() * 2.0


@pytest.mark.parametrize("n", [10, 400_000])  # one block, and several
def test_it_fuses_and_the_fused_kernel_computes_what_eager_computes(n: int) -> None:
    rng = np.random.default_rng(0)
    x, y = (tfl.tensor(rng.normal(scale=20, size=n).astype(np.float32)) for _ in range(2))
    compiled = tfl.compile(_net, x, y)
    [fused] = compiled.graph.nodes
    assert [n.op.name for n in fused.op.group.nodes] == ["mul", "sub", "softplus", "mul"]
    source = compiled.kernels[fused.op.name]["numpy"]
    assert "softplus(v" in source and "out=s0" in source  # the op's own kernel, into scratch
    want = _net(x, y).numpy()
    np.testing.assert_array_equal(compiled(x, y).numpy(), want)  # the same ufuncs: bit for bit
    np.testing.assert_array_equal(tfl.function(_net)(x, y).numpy(), want)


def test_it_ends_in_a_fused_reduction_and_has_cuda_source() -> None:
    x = tfl.tensor(np.linspace(-50, 50, 3_000).reshape(300, 10))
    fn = lambda x: (x * 0.5).softplus().sum(axis=0)
    compiled = tfl.compile(fn, x)
    [fused] = compiled.graph.nodes
    assert fused.op.group.reduction.op.name == "sum"
    np.testing.assert_allclose(compiled(x).numpy(), fn(x).numpy(), rtol=1e-12)
    assert "log1p(exp(" in compiled.kernels[fused.op.name]["cuda"]


def test_it_prints_in_the_ir_and_in_a_fused_node_body() -> None:
    graph = tfl.trace(lambda x: x.softplus() + 1.0, tfl.ones(3))
    assert "= softplus %x : f32[3]" in str(graph)
    compiled = tfl.compile(lambda x: x.softplus() + 1.0, tfl.ones(3))
    assert "softplus %x" in str(compiled.graph)  # in the body the fused node prints


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_its_c_expression_computes_numpys_logaddexp(tmp_path) -> None:
    """The fusion template (what each GPU thread runs), compiled as plain C on the CPU."""
    values = [*VALUES, math.nan, math.inf, -math.inf]
    literals = ", ".join({"nan": "NAN", "inf": "INFINITY", "-inf": "-INFINITY"}.get(
        repr(v), repr(v)) for v in values)
    (tmp_path / "softplus.c").write_text(f"""#include <math.h>
#include <stdio.h>
int main(void) {{
    double v[] = {{{literals}}};
    for (int i = 0; i < {len(values)}; i++) {{
        double x = v[i];
        printf("%.17g\\n", {OPS["softplus"].fusion.format("x")});
    }}
    return 0;
}}
""")
    subprocess.run(["cc", str(tmp_path / "softplus.c"), "-o", str(tmp_path / "softplus"), "-lm"],
                   check=True)
    printed = subprocess.run([str(tmp_path / "softplus")], capture_output=True, text=True,
                             check=True).stdout.split()
    with np.errstate(invalid="ignore"):  # (of nan)
        want = np.logaddexp(0, values)
    np.testing.assert_allclose([float(p) for p in printed], want, rtol=1e-15, atol=0)
