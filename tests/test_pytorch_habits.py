"""PyTorch's and NumPy's habits in teachflow: the names and calls learners arrive with.

Values are checked against NumPy, and against PyTorch's own numbers where teachflow follows
PyTorch (written down from torch 2.13 on the CPU); gradients against finite differences (the new
differentiable ops are also cases of the shared tables in `op_cases.py`, which check them
eagerly and staged); and every result eagerly, staged with `tfl.function` and compiled with
`tfl.compile` alike.
"""

from __future__ import annotations

import itertools
import math
import os
import re
import shutil
import subprocess
import warnings

import numpy as np
import pytest
from helpers import check_gradients, examples, shapes, weighted_sum
from hypothesis import given, settings
from hypothesis import strategies as st
from op_cases import CLIP_CASES, DIFFERENTIABLE_CASES, NUMPY_UFUNC_CASES, OpCase

import teachflow as tfl
from teachflow.kernels.numpy_runtime import numpy_kernel
from teachflow.ops import OPS
from teachflow.ops.op import Op, op_for_ufunc
from teachflow.ops.shape_rules import elementwise_rule
from teachflow.tensor.habits import ForeignName
from teachflow.tensor.tensor import Tensor

# --- Eager, staged and compiled agree -----------------------------------------------------------

NEW_NAMES = {"min", "var", "cat", "unsqueeze", "squeeze", "flatten", "flatten()", "view",
             "permute", "swapaxes", "clone", "softmax-method", "log_softmax-method",
             "softmax-0d", "log_softmax-0d"}
NEW_CASES = CLIP_CASES + NUMPY_UFUNC_CASES + [c for c in DIFFERENTIABLE_CASES
                                              if c.name in NEW_NAMES]


def test_the_new_cases_are_in_the_shared_table() -> None:
    names = {c.name for c in DIFFERENTIABLE_CASES}
    assert names >= NEW_NAMES
    assert all(c in DIFFERENTIABLE_CASES for c in CLIP_CASES + NUMPY_UFUNC_CASES)


def assert_same(got: tfl.Tensor, want: tfl.Tensor) -> None:
    assert isinstance(got, tfl.Tensor)
    assert got.shape == want.shape and got.dtype == want.dtype
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("case", NEW_CASES, ids=str)
@settings(max_examples=examples(10), deadline=None)
@given(data=st.data())
def test_eager_staged_and_compiled_agree(case: OpCase, data: st.DataObject) -> None:
    """Values and gradients (float64): eager, ``tfl.function``, ``tfl.compile`` (every pass,
    fusion included, verified by the suite's conftest)."""
    example = case.draw(data)
    xs = [tfl.tensor(a) for a in example.inputs]
    want = example.fn(*xs)
    assert_same(tfl.function(lambda *xs: example.fn(*xs))(*xs), want)
    assert_same(tfl.compile(example.fn, *xs)(*xs), want)

    argnums = tuple(range(len(xs)))
    loss = weighted_sum(example.fn, np.random.default_rng(0).uniform(-1, 1, want.shape))
    eager = tfl.grad(loss, argnums)(*xs)
    for got in (tfl.function(tfl.grad(loss, argnums))(*xs),
                tfl.compile(tfl.grad(loss, argnums), *xs)(*xs)):
        for g, w in zip(got, eager, strict=True):
            assert_same(g, w)


def staged_and_compiled(fn, *xs) -> list[tfl.Tensor]:
    """`fn` eagerly, staged and compiled: three results that must agree."""
    return [fn(*xs), tfl.function(lambda *a: fn(*a))(*xs), tfl.compile(fn, *xs)(*xs)]


# --- argmax and argmin --------------------------------------------------------------------------


@settings(max_examples=examples(40), deadline=None)
@given(data=st.data(), dtype=st.sampled_from(["float32", "float64", "int64", "bool"]))
def test_argmax_and_argmin_match_numpy(data: st.DataObject, dtype: str) -> None:
    shape = data.draw(shapes(), label="shape")
    ndim = len(shape)
    axis = data.draw(st.none() | st.integers(-ndim, ndim - 1) if ndim else st.none(),
                     label="axis")
    keepdims = data.draw(st.booleans(), label="keepdims")
    # Small integers: ties are common, and the first of them must win, as in NumPy and PyTorch.
    a = np.random.default_rng(data.draw(st.integers(0, 2**16))).integers(-2, 3, shape)
    a = a.astype(dtype)
    for name in ("argmax", "argmin"):
        want = getattr(np, name)(a, axis=axis, keepdims=keepdims)
        results = staged_and_compiled(lambda t, n=name: getattr(t, n)(axis, keepdims),
                                      tfl.tensor(a))
        results.append(getattr(tfl, name)(a, axis=axis, keepdims=keepdims))
        for got in results:
            assert got.dtype == np.int64 and got.shape == want.shape
            np.testing.assert_array_equal(got.numpy(), want)


def test_argmax_as_pytorch_gives_it() -> None:
    m = tfl.tensor([[1.0, 3.0], [3.0, 0.0]])
    assert m.argmax().item() == 1
    assert m.argmax(axis=0).tolist() == [1, 0]
    assert m.argmax(axis=1, keepdims=True).tolist() == [[1], [0]]
    assert tfl.argmin(m, axis=-1).tolist() == [0, 1]


def test_argmax_has_no_gradient() -> None:
    x = tfl.tensor([0.5, 2.0, -1.0], requires_grad=True)
    position = x.argmax()
    assert not position.requires_grad and position.grad_fn is None
    # d/dx sum(x * argmax(x)): the position counts as a constant.
    g = tfl.grad(lambda x: (x * x.argmax()).sum())(tfl.tensor([0.5, 2.0, -1.0]))
    np.testing.assert_array_equal(g.numpy(), [1.0, 1.0, 1.0])


@pytest.mark.parametrize(("mistake", "error"), [
    (lambda: tfl.zeros(0).argmax(), tfl.ShapeError),
    (lambda: tfl.zeros((2, 0)).argmin(axis=1), tfl.ShapeError),
    (lambda: tfl.zeros((2, 3)).argmax(axis=2), tfl.ShapeError),
    (lambda: tfl.zeros((2, 3)).argmax(axis=(0, 1)), tfl.DTypeError),
], ids=["empty", "empty-axis", "axis-out-of-range", "two-axes"])
def test_argmax_mistakes(mistake, error: type) -> None:
    with pytest.raises(error):
        mistake()


# --- min ----------------------------------------------------------------------------------------


def test_min_matches_numpy_and_splits_ties_as_pytorch() -> None:
    a = np.array([[3.0, -1.0, 2.0], [0.5, 0.5, 4.0]])
    for axis in (None, 0, 1, (0, 1)):
        for got in staged_and_compiled(lambda t, ax=axis: t.min(axis=ax), tfl.tensor(a)):
            np.testing.assert_array_equal(got.numpy(), a.min(axis=axis))
    assert tfl.min(a, axis=1, keepdims=True).shape == (2, 1)
    # torch.tensor([1., 0., 0., 2.]).min().backward() gives [0, 0.5, 0.5, 0].
    grad = tfl.grad(lambda x: x.min())
    x = tfl.tensor([1.0, 0.0, 0.0, 2.0])
    for g in (grad(x), tfl.function(grad)(x), tfl.compile(grad, x)(x)):
        np.testing.assert_array_equal(g.numpy(), [0.0, 0.5, 0.5, 0.0])
    with pytest.raises(tfl.ShapeError):
        tfl.zeros((0, 2)).min(axis=0)


# --- clip ---------------------------------------------------------------------------------------

X = [-1.0, 0.0, 0.5, 1.0, 2.0]


@pytest.mark.parametrize(("clip", "values", "grad"), [
    # torch.clamp(x, 0, 1): the gradient is 1 on both boundaries
    (lambda x: x.clip(0.0, 1.0), [0.0, 0.0, 0.5, 1.0, 1.0], [0, 1, 1, 1, 0]),
    (lambda x: tfl.clip(x, min=0.5), [0.5, 0.5, 0.5, 1.0, 2.0], [0, 0, 1, 1, 1]),
    (lambda x: x.clip(max=0.0), [-1.0, 0.0, 0.0, 0.0, 0.0], [1, 1, 0, 0, 0]),
    # min > max: max wins everywhere, and x gets no gradient
    (lambda x: x.clip(2.0, 1.0), [1.0] * 5, [0] * 5),
], ids=["both", "min", "max", "min>max"])
def test_clip_values_and_gradients_are_pytorchs(clip, values: list, grad: list) -> None:
    x = tfl.tensor(X)
    for got in staged_and_compiled(clip, x):
        assert got.dtype == np.float32
        np.testing.assert_array_equal(got.numpy(), values)
    gradient = tfl.grad(lambda x: clip(x).sum())
    for g in (gradient(x), tfl.function(gradient)(x), tfl.compile(gradient, x)(x)):
        np.testing.assert_array_equal(g.numpy(), grad)
    leaf = tfl.tensor(X, requires_grad=True)
    clip(leaf).sum().backward()
    np.testing.assert_array_equal(leaf.grad.numpy(), grad)


def test_clip_with_tensor_bounds_sends_gradients_as_pytorch() -> None:
    """torch.clamp(x, lo, hi) with tensors lo and hi, ties and lo > hi included."""
    x = tfl.tensor(X, requires_grad=True)
    lo = tfl.tensor([0.0, 0.0, 0.5, 2.0, 3.0], requires_grad=True)
    hi = tfl.tensor([1.0, 0.0, 0.5, 1.0, 1.0], requires_grad=True)
    out = x.clip(lo, hi)
    np.testing.assert_array_equal(out.numpy(), [0.0, 0.0, 0.5, 1.0, 1.0])
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0, 1, 1, 0, 0])
    np.testing.assert_array_equal(lo.grad.numpy(), [1, 0, 0, 0, 0])
    np.testing.assert_array_equal(hi.grad.numpy(), [0, 0, 0, 1, 1])
    staged = tfl.function(tfl.grad(lambda x, lo, hi: x.clip(lo, hi).sum(), argnums=(0, 1, 2)))
    plain = [tfl.tensor(t.numpy()) for t in (x, lo, hi)]
    for g, leaf in zip(staged(*plain), (x, lo, hi), strict=True):
        np.testing.assert_array_equal(g.numpy(), leaf.grad.numpy())


def test_clip_keeps_the_dtype_and_nan() -> None:
    ints = tfl.tensor([-3, 0, 5])
    for got in (ints.clip(max=1), ints.clip(-1), ints.clip(-1, 1)):
        assert got.dtype == np.int64
    assert ints.clip(-1, 1).tolist() == [-1, 0, 1]
    assert tfl.tensor(np.array([1, 9], np.uint8)).clip(max=5).tolist() == [1, 5]
    assert tfl.tensor([True, False]).clip(min=True).tolist() == [True, True]
    x = tfl.tensor([math.nan, 3.0], requires_grad=True)
    out = x.clip(0.0, 1.0)
    assert math.isnan(out[0].item()) and out[1].item() == 1.0
    out.sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [0.0, 0.0])  # as PyTorch: nan >= 0 is false
    with pytest.raises(tfl.TeachflowError, match="min, a max, or both"):
        tfl.ones(2).clip()


def test_clip_fuses_into_one_kernel_calling_np_clip() -> None:
    x = tfl.tensor(np.linspace(-2.0, 2.0, 300_001))
    fn = lambda x: (x.clip(-1.0, 0.5) * 2.0).exp()
    compiled = tfl.compile(fn, x)
    [fused] = compiled.snapshots[-1].graph.nodes
    source = fused.op.numpy_source
    assert re.search(r"np\.clip\(in0, -1\.0, 0\.5, out=", source), source
    assert "clip" in fused.op.cuda_source
    # The NumPy kernel computes exactly what eager NumPy does; the C one (where a compiler is)
    # calls libmvec's exp, within float rounding of it.
    want = fn(x).numpy()
    np.testing.assert_array_equal(numpy_kernel(fused.op.group)(x.numpy()), want)
    np.testing.assert_allclose(compiled(x).numpy(), want, rtol=1e-14, atol=0)


@pytest.mark.skipif(shutil.which("cc") is None, reason="no C compiler")
def test_clips_c_expression_computes_numpys_clip(tmp_path) -> None:
    """The fusion template (what each GPU thread runs) against np.clip, NaN, infinities and
    min > max included, compiled as plain C on the CPU. (Signed zeros may differ, as they do for
    maximum and minimum.)"""
    values = [-2.0, -0.0, 1.0, 3.0, math.nan, math.inf, -math.inf]
    literals = ", ".join({"nan": "NAN", "inf": "INFINITY", "-inf": "-INFINITY"}.get(
        repr(v), repr(v)) for v in values)
    expression = OPS["clip"].fusion.format("x", "lo", "hi")
    (tmp_path / "clip.c").write_text(f"""#include <math.h>
#include <stdio.h>
int main(void) {{
    double v[] = {{{literals}}};
    for (int i = 0; i < {len(values)}; i++)
        for (int j = 0; j < {len(values)}; j++)
            for (int k = 0; k < {len(values)}; k++) {{
                double x = v[i], lo = v[j], hi = v[k];
                printf("%.17g\\n", {expression});
            }}
    return 0;
}}
""")
    subprocess.run(["cc", str(tmp_path / "clip.c"), "-o", str(tmp_path / "clip"), "-lm"],
                   check=True)
    printed = subprocess.run([str(tmp_path / "clip")], capture_output=True, text=True,
                             check=True).stdout.split()
    got = np.array([float(p) for p in printed])
    want = np.array([np.clip(x, lo, hi) for x, lo, hi in itertools.product(values, repeat=3)])
    np.testing.assert_array_equal(got, want)


# --- var ----------------------------------------------------------------------------------------


def test_var_is_pytorchs_by_default_and_numpys_with_correction_0() -> None:
    v = np.array([[1.0, 2.0, 4.0], [0.0, 1.0, 1.0]], dtype=np.float32)
    t = tfl.tensor(v)
    # torch: v.var() = 1.9, v.var(dim=1) = [2.3333, 0.3333], v.var(dim=0, correction=0)
    np.testing.assert_allclose(t.var().item(), 1.9, rtol=1e-6)
    np.testing.assert_allclose(t.var(axis=1).numpy(), [7 / 3, 1 / 3], rtol=1e-6)
    np.testing.assert_allclose(tfl.var(t, axis=0, correction=0).numpy(), [0.25, 0.25, 2.25])
    for axis in (None, 0, 1, (0, 1)):
        for correction in (0, 1):
            for got in staged_and_compiled(
                    lambda t, a=axis, c=correction: t.var(a, keepdims=True, correction=c), t):
                want = np.var(v, axis=axis, keepdims=True, ddof=correction)
                assert got.dtype == np.float32 and got.shape == want.shape
                np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    ints = tfl.tensor([[1, 2, 4], [0, 1, 1]])
    assert ints.var().dtype == np.float64  # as np.var of ints


def test_var_gradient_matches_finite_differences() -> None:
    a = np.random.default_rng(1).normal(size=(3, 4))
    check_gradients(lambda x: x.var(axis=1), [a])
    check_gradients(lambda x: tfl.var(x, correction=0), [a])


# --- Shapes: unsqueeze, squeeze, flatten, view, permute, swapaxes -------------------------------


def test_shape_methods_give_pytorchs_shapes() -> None:
    z = tfl.zeros(1, 2, 1)
    assert z.squeeze().shape == (2,)
    assert z.squeeze(0).shape == (2, 1)
    assert z.squeeze(1).shape == (1, 2, 1)  # not of size 1: stays, as in PyTorch
    assert tfl.squeeze(z, (0, -1)).shape == (2,)
    m = tfl.zeros(2, 3)
    assert m.unsqueeze(0).shape == (1, 2, 3)
    assert m.unsqueeze(-1).shape == (2, 3, 1) and tfl.unsqueeze(m, 2).shape == (2, 3, 1)
    assert tfl.tensor(1.0).flatten().shape == (1,)
    b = tfl.zeros(2, 3, 4)
    assert b.flatten().shape == (24,) and b.flatten(1).shape == (2, 12)
    assert tfl.flatten(b, 0, 1).shape == (6, 4)
    assert b.view(4, -1).shape == (4, 6) and b.view((6, 4)).shape == (6, 4)
    assert b.permute(2, 0, 1).shape == (4, 2, 3) and b.permute((2, 0, 1)).shape == (4, 2, 3)
    assert tfl.permute(b, 1, 2, 0).shape == (3, 4, 2)
    assert b.swapaxes(0, -1).shape == (4, 3, 2) and tfl.swapaxes(m, 0, 1).shape == (3, 2)


@pytest.mark.parametrize("mistake", [
    lambda: tfl.zeros(2, 3).unsqueeze(3),
    lambda: tfl.zeros(2, 3).squeeze(2),
    lambda: tfl.zeros(2, 3, 4).flatten(2, 1),
    lambda: tfl.zeros(2, 3).swapaxes(0, 2),
    lambda: tfl.zeros(2, 3).view(4, 2),
    lambda: tfl.zeros(2, 3, 4).permute(0, 1),
], ids=["unsqueeze", "squeeze", "flatten", "swapaxes", "view", "permute"])
def test_shape_method_mistakes_are_shape_errors(mistake) -> None:
    with pytest.raises(tfl.ShapeError):
        mistake()


def test_shape_methods_with_an_unknown_batch_size() -> None:
    with tfl.Graph() as graph:
        x = tfl.placeholder((None, 3), name="x")
        y = x.unsqueeze(1).flatten(1).squeeze().unsqueeze(-1).swapaxes(0, 1)
    a = np.arange(12.0, dtype=np.float32).reshape(4, 3)
    got = tfl.Session(graph).run(y, feed={x: a})
    np.testing.assert_array_equal(got, a[..., None].swapaxes(0, 1))


# --- clone --------------------------------------------------------------------------------------


def test_clone_is_a_real_copy_with_the_identity_gradient() -> None:
    x = tfl.tensor([1.0, 2.0], requires_grad=True)
    y = x.clone()
    assert y.grad_fn == "clone" and y is not x
    assert not np.shares_memory(y.numpy(), x.numpy())
    (y * 3.0).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), [3.0, 3.0])
    graph = tfl.trace(lambda x: tfl.clone(x) + 1, tfl.ones(2))
    assert [n.op.name for n in graph.nodes] == ["clone", "add"]


# --- numel, dim, size ---------------------------------------------------------------------------


def test_numel_dim_and_a_size_that_is_an_int_and_pytorchs_size() -> None:
    t = tfl.zeros(2, 3)
    assert t.numel() == 6 and t.dim() == 2
    assert t.size == 6 and isinstance(t.size, int) and t.size + 1 == 7
    assert np.zeros(t.size).shape == (6,) and list(range(t.size)) == list(range(6))
    assert f"{t.size}" == "6" and repr(t.size) == "6"
    assert t.size() == (2, 3) and t.size(1) == 3 and t.size(-2) == 2
    with pytest.raises(tfl.ShapeError):
        t.size(2)
    assert tfl.tensor(1.0).size == 1 and tfl.tensor(1.0).size() == ()
    with tfl.Graph():
        p = tfl.placeholder((None, 3))
        assert p.size() == (None, 3) and p.size(1) == 3
        # No number to compute with until the graph runs (not -1, which would compute wrong).
        for use in (lambda: p.numel(), lambda: p.size + 1, lambda: p.sum() / p.size,
                    lambda: p.size == 0, lambda: int(p.size)):
            with pytest.raises(tfl.TraceError, match="known only when the graph runs"):
                use()


def test_a_count_of_elements_is_a_weak_python_number() -> None:
    x = tfl.ones(2, 3)
    assert (x.sum() / x.size).dtype == np.float32  # as x.sum() / 6
    assert tfl.function(lambda x: x * x.size)(x).dtype == np.float32


# --- softmax and log_softmax: methods, 0-d, empty -----------------------------------------------


def test_softmax_methods_equal_the_functions() -> None:
    x = tfl.tensor(np.random.default_rng(2).normal(size=(2, 3)))
    for axis in (0, 1, -1):
        assert_same(x.softmax(axis), tfl.softmax(x, axis=axis))
        assert_same(x.log_softmax(axis), tfl.log_softmax(x, axis=axis))


@pytest.mark.parametrize("axis", [-1, 0])
def test_softmax_of_a_0d_tensor_is_pytorchs(axis: int) -> None:
    x = tfl.tensor(3.0)
    for fn, value in ((lambda t: tfl.softmax(t, axis=axis), 1.0),
                      (lambda t: t.log_softmax(axis), 0.0)):
        for got in staged_and_compiled(fn, x):
            assert got.shape == () and got.dtype == np.float32 and got.item() == value
        gradient = tfl.grad(fn)
        for g in (gradient(x), tfl.function(gradient)(x), tfl.compile(gradient, x)(x)):
            assert g.shape == () and g.item() == 0.0
    with pytest.raises(tfl.ShapeError):
        tfl.softmax(x, axis=1)


@pytest.mark.parametrize(("shape", "axis"), [((0, 3), 0), ((0, 3), 1), ((2, 0), -1),
                                             ((0,), 0), ((2, 0, 3), 1), ((2, 0, 3), 2)])
@pytest.mark.parametrize("name", ["softmax", "log_softmax"])
def test_softmax_of_empty_tensors_is_empty(shape: tuple, axis: int, name: str) -> None:
    x = tfl.zeros(shape)
    fn = lambda t: getattr(tfl, name)(t, axis=axis)
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no log(0), no 0/0 along the way
        results = staged_and_compiled(fn, x)
        g = tfl.grad(lambda t: fn(t).sum())(x)
    for got in results:
        assert got.shape == shape and got.dtype == np.float32
    assert g.shape == shape


# --- Names teachflow spells otherwise -----------------------------------------------------------


@pytest.mark.parametrize(("name", "spelling"), [
    ("clamp", "x.clip(min, max)"), ("cuda", "x.to('gpu')"), ("mm", "x @ y"), ("bmm", "x @ y"),
    ("dot", "x @ y"), ("long", "x.astype('int64')"), ("float", "x.astype('float32')"),
    ("double", "x.astype('float64')"), ("int", "x.astype('int32')"),
    ("expand", "tfl.broadcast_to(x, shape)"), ("add_", "x += y"), ("mul_", "x *= y"),
    ("sub_", "x -= y"), ("ravel", "x.flatten()"), ("copy", "x.clone()"),
])
def test_a_foreign_name_says_how_teachflow_spells_it(name: str, spelling: str) -> None:
    with pytest.raises(AttributeError) as info:
        getattr(tfl.ones(2), name)
    message = str(info.value)
    assert f"'{name}'" in message and f"teachflow spells it {spelling}" in message


#: Every foreign name, and how teachflow spells it, wherever its kind's file declares it.
FOREIGN_NAMES = {name: value.spelling for cls in Tensor.__mro__ for name, value in vars(cls).items()
                 if isinstance(value, ForeignName)}


def test_every_foreign_name_is_missing_and_answered() -> None:
    assert len(FOREIGN_NAMES) > 60  # (they are found)
    t = tfl.ones(2)
    for name, spelling in FOREIGN_NAMES.items():
        # On the class, a foreign name is only its explanation: never a method that works.
        assert isinstance(getattr(Tensor, name), ForeignName), f"{name} is a real attribute"
        assert not hasattr(t, name)
        with pytest.raises(AttributeError, match=re.escape(spelling)):
            getattr(t, name)


def test_an_unknown_name_is_the_usual_attribute_error() -> None:
    t = tfl.ones(2)
    with pytest.raises(AttributeError) as info:
        t.frobnicate
    assert str(info.value) == "'Tensor' object has no attribute 'frobnicate'"
    assert info.value.name == "frobnicate" and info.value.obj is t  # "Did you mean" still works
    assert not hasattr(t, "clamp") and getattr(t, "__array_interface__", None) is None


def test_a_property_that_fails_keeps_its_own_attribute_error(monkeypatch) -> None:
    """`__getattr__` also runs when a property raises AttributeError: the property's own error
    must come through, not a claim that the tensor has no such attribute."""
    def broken(self):
        raise AttributeError("'Backend' object has no attribute 'name'")

    monkeypatch.setattr(Tensor, "device", property(broken))
    with pytest.raises(AttributeError, match="'Backend' object has no attribute 'name'"):
        tfl.ones(2).device


# --- NumPy's ufuncs on tensors ------------------------------------------------------------------


def test_numpy_ufuncs_run_teachflows_ops_with_gradients() -> None:
    a = np.array([[-1.0, 0.5], [2.0, 0.25]], dtype=np.float32)
    x = tfl.tensor(a, requires_grad=True)
    for got, want in [(np.tanh(x), np.tanh(a)), (np.exp(x), np.exp(a)), (np.add(x, 1), a + 1),
                      (np.ones(2) + x, np.ones(2) + a), (np.ones(2) * x, np.ones(2) * a),
                      (a @ x, a @ a),
                      (np.maximum(x, 0.0), np.maximum(a, 0.0)), (np.abs(x), np.abs(a))]:
        assert isinstance(got, tfl.Tensor) and got.requires_grad
        assert got.dtype == want.dtype
        np.testing.assert_allclose(got.numpy(), want, rtol=1e-6)
    less = np.zeros(2) < x
    assert isinstance(less, tfl.Tensor) and less.dtype == np.bool_
    np.tanh(x).sum().backward()
    np.testing.assert_allclose(x.grad.numpy(), 1 - np.tanh(a) ** 2, rtol=1e-6)


def test_numpy_ufuncs_are_traced_as_teachflow_ops() -> None:
    x = tfl.tensor([0.5, -1.0])
    staged = tfl.function(lambda x: np.tanh(x))
    np.testing.assert_allclose(staged(x).numpy(), np.tanh(x.numpy()))
    assert [n.op.name for n in staged.get_concrete_function(x).graph.nodes] == ["tanh"]
    graph = tfl.trace(lambda x: np.add(x, 1) * np.ones(2), x)
    assert [n.op.name for n in graph.nodes] == ["add", "mul"]
    compiled = tfl.compile(lambda x: np.exp(np.negative(x)), x)
    np.testing.assert_allclose(compiled(x).numpy(), np.exp(-x.numpy()), rtol=1e-6)


def test_numpy_reads_tensors_as_arrays_as_before() -> None:
    t = tfl.tensor([[1.0, 2.0], [3.0, 4.0]])
    assert isinstance(np.asarray(t), np.ndarray)
    np.testing.assert_allclose(t, [[1.0, 2.0], [3.0, 4.0]])
    np.testing.assert_array_equal(t, np.asarray(t))
    assert np.allclose(t, t.numpy())


@pytest.mark.parametrize(("call", "says"), [
    (lambda t: np.arctan(t), "teachflow has no op for np.arctan; call np.arctan(t.numpy()) to "
                             "compute on the values (no gradient)"),
    (lambda t: np.add.reduce(t), "np.add.reduce(...) does not run on tensors"),
    (lambda t: np.add.outer(t, t), "np.add.outer(...) does not run on tensors"),
    (lambda t: np.add(t, 1, out=np.empty(2, np.float32)), "out="),
    (lambda t: np.multiply(t, 2, dtype=np.float64), "dtype="),
], ids=["no-op", "reduce", "outer", "out", "dtype"])
def test_a_ufunc_teachflow_cannot_run_says_what_to_call(call, says: str) -> None:
    with pytest.raises(tfl.TeachflowError) as info:
        call(tfl.ones(2))
    assert says in str(info.value)
    assert f"{os.path.basename(__file__)}:{call.__code__.co_firstlineno}" in str(info.value)


def test_array_plus_equals_tensor_says_what_to_write() -> None:
    a = np.zeros(2, np.float32)
    with pytest.raises(tfl.TeachflowError, match=re.escape("array = array + tensor")):
        a += tfl.ones(2)
    np.testing.assert_array_equal(a, [0.0, 0.0])


def test_the_op_of_a_ufunc_is_found_from_the_declarations(monkeypatch) -> None:
    for op in OPS.values():
        kernel = op.kernel(np)
        if isinstance(kernel, np.ufunc):
            assert op_for_ufunc(kernel) is op
    assert op_for_ufunc(np.sin) is OPS["sin"]
    assert op_for_ufunc(np.arctan) is None
    arctangent = Op("arctangent", lambda xp: xp.arctan, elementwise_rule(lambda xp: xp.arctan),
                    fusion="atan({0})", arg_names=("x",), primitive=False)
    monkeypatch.setitem(OPS, "arctangent", arctangent)  # as if declared in teachflow/ops
    assert op_for_ufunc(np.arctan) is arctangent
    got = np.arctan(tfl.tensor([0.5]))
    np.testing.assert_allclose(got.numpy(), np.arctan(np.float32(0.5)))
    assert [n.op.name for n in tfl.trace(lambda x: np.arctan(x), tfl.ones(1)).nodes] == [
        "arctangent"]


# --- transpose checks its axes ------------------------------------------------------------------


def test_transpose_refuses_an_axis_out_of_range_naming_axes_and_shape() -> None:
    for mistake in (lambda: tfl.zeros((2, 3)).transpose(0, 3),
                    lambda: tfl.transpose(tfl.zeros((2, 3)), (0, 3)),
                    lambda: tfl.function(lambda x: x.transpose(0, 3))(tfl.zeros((2, 3)))):
        with pytest.raises(tfl.ShapeError) as info:
            mistake()
        message = str(info.value)
        assert "(0, 3)" in message and "(2, 3)" in message and "axis 3" in message


def test_transpose_refuses_repeated_and_missing_axes() -> None:
    m = tfl.zeros(2, 3)
    for axes in ((0, 0), (0, -2), (-1, 1)):
        with pytest.raises(tfl.ShapeError, match="twice"):
            m.transpose(*axes)
    with pytest.raises(tfl.ShapeError, match="swapaxes"):
        tfl.zeros(2, 3, 4).transpose(0, 1)
    with pytest.raises(tfl.ShapeError):
        tfl.tensor(1.0).transpose(0)


def test_transpose_with_negative_axes_in_range_still_works() -> None:
    a = np.arange(24.0).reshape(2, 3, 4)
    t = tfl.tensor(a)
    for axes in ((-1, 0, 1), (2, -3, -2), (-1, -2, -3)):
        for got in staged_and_compiled(lambda t, ax=axes: t.transpose(*ax), t):
            np.testing.assert_array_equal(got.numpy(), a.transpose(axes))
    assert tfl.zeros(2, 3).transpose(-1, 0).shape == (3, 2)
    assert tfl.tensor(1.0).transpose().shape == ()
    assert t.transpose(np.int64(2), np.int64(0), np.int64(1)).shape == (4, 2, 3)


# --- arange and eye -----------------------------------------------------------------------------


@pytest.mark.parametrize(("args", "dtype"), [
    ((5,), "int64"), ((2, 9, 3), "int64"), ((10, 0, -3), "int64"), ((0, 0), "int64"),
    ((3, 1), "int64"), ((5.0,), "float32"), ((0, 1, 0.25), "float32"), ((1, 4, 1.0), "float32"),
    ((0, 1, 0.1), "float32"), ((-1.5, 1.5, 0.5), "float32"), ((np.int64(4),), "int64"),
])
def test_arange_gives_numpys_values_with_pytorchs_dtypes(args: tuple, dtype: str) -> None:
    want = np.arange(*args, dtype=dtype)
    results = staged_and_compiled(lambda t: tfl.arange(*args) + t, tfl.zeros((), dtype=dtype))
    results.append(tfl.arange(*args))
    for got in results:
        assert got.dtype == np.dtype(dtype) and got.shape == want.shape
        np.testing.assert_array_equal(got.numpy(), want)


def test_arange_and_eye_options() -> None:
    assert tfl.arange(3, dtype="float64").dtype == np.float64
    assert tfl.arange(3, device="cpu").device == "cpu"
    np.testing.assert_array_equal(tfl.eye(3).numpy(), np.eye(3, dtype=np.float32))
    np.testing.assert_array_equal(tfl.eye(2, 3, dtype="int32").numpy(), np.eye(2, 3, dtype=int))
    assert tfl.eye(2).dtype == np.float32 and tfl.eye(0).shape == (0, 0)
    graph = tfl.trace(lambda x: x @ tfl.eye(2) + tfl.arange(2), tfl.ones(2, 2))
    assert [n.op.name for n in graph.nodes][:2] == ["eye", "matmul"]
    assert "arange" in [n.op.name for n in graph.nodes]
    for mistake, error in ((lambda: tfl.arange(0, 1, 0), tfl.ShapeError),
                           (lambda: tfl.arange("3"), tfl.DTypeError),
                           (lambda: tfl.eye(-1), tfl.ShapeError),
                           (lambda: tfl.eye(2.5), tfl.DTypeError)):
        with pytest.raises(error):
            mistake()


# --- Every new function is exported -------------------------------------------------------------


def test_new_functions_are_exported() -> None:
    for name in ("arange", "eye", "argmax", "argmin", "min", "unsqueeze", "squeeze", "flatten",
                 "clip", "var", "cat", "permute", "clone", "swapaxes"):
        assert name in tfl.__all__ and callable(getattr(tfl, name)), name
    assert tfl.cat is tfl.concatenate


def test_numpy_reductions_on_a_tensor_give_tensors() -> None:
    t = tfl.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
    for fn, method in ((np.sum, "sum"), (np.mean, "mean"), (np.max, "max"), (np.min, "min")):
        got = fn(t, axis=0)
        assert isinstance(got, tfl.Tensor) and got.requires_grad
        np.testing.assert_allclose(got.numpy(), getattr(t.numpy(), method)(axis=0))
    assert np.sum(t, dtype=np.float64).dtype == np.float64
    assert np.sum(t, keepdims=True).shape == (1, 1)
    staged = tfl.function(lambda x: np.mean(x) + np.sum(x, axis=1))
    np.testing.assert_allclose(staged(t.detach()).numpy(), [-1.0 + 1.5, 7.0 + 1.5])
    with pytest.raises(tfl.DTypeError, match="in place"):
        np.sum(t, out=np.zeros(()))


def test_numpy_functions_with_a_teachflow_twin_give_tensors_with_gradients() -> None:
    x = tfl.tensor([[1.0, -2.0], [3.0, 4.0]], requires_grad=True)
    cases = [
        (lambda a: np.where(a > 0, a, 0).sum(), np.where(x.numpy() > 0, 1.0, 0.0)),
        (lambda a: np.clip(a, 0, 3).sum(), ((x.numpy() >= 0) & (x.numpy() <= 3)) * 1.0),
        (lambda a: np.concatenate([a, a * 2]).sum(), np.full((2, 2), 3.0)),
        (lambda a: np.stack([a, a]).sum(), np.full((2, 2), 2.0)),
        (lambda a: (np.reshape(a, (4,)) * np.arange(4.0)).sum(), [[0.0, 1.0], [2.0, 3.0]]),
        (lambda a: np.ravel(np.transpose(a))[0] * 5.0, [[5.0, 0.0], [0.0, 0.0]]),
    ]
    for f, want in cases:
        np.testing.assert_allclose(tfl.grad(f)(x).numpy(), want)
        staged = tfl.function(tfl.grad(f))
        np.testing.assert_allclose(staged(x.detach()).numpy(), want)


def test_numpy_functions_without_a_twin_never_drop_a_gradient_silently() -> None:
    x = tfl.tensor([1.5, -2.5], requires_grad=True)
    for call in (lambda: np.round(x), lambda: np.dot(x, x), lambda: np.std(x)):
        with pytest.raises(tfl.TeachflowError, match="no teachflow twin") as err:
            call()
        assert ".numpy()" in err.value.hint
    plain = x.detach()
    np.testing.assert_allclose(np.round(plain), [2.0, -2.0])  # values only: as before
    assert np.allclose(plain, [1.5, -2.5]) and isinstance(np.std(plain), np.floating)
    with pytest.raises(tfl.TraceError):
        tfl.function(lambda a: a * np.round(a))(plain)
    with pytest.raises(tfl.DTypeError, match=r"tfl\.reshape"):
        np.reshape(x, (2,), order="F")


# --- Python's operators: //, %, &, |, ~ and format ----------------------------------------------

FLOOR_X = np.array([[-3.5, -1.0, 2.0, 5.5], [7.25, -0.75, 0.0, 9.0]])
FLOOR_Y = np.array([2.0, -3.0, 1.5, -2.0])


@pytest.mark.parametrize("fn", [
    pytest.param(lambda x, y: x // y, id="x // y"),
    pytest.param(lambda x, y: x % y, id="x % y"),
    pytest.param(lambda x, y: 7 // y, id="7 // y"),
    pytest.param(lambda x, y: 7.5 % y, id="7.5 % y"),
    pytest.param(lambda x, y: x // 2, id="x // 2"),
    pytest.param(lambda x, y: x % -2, id="x % -2"),
])
def test_floor_division_and_remainder_are_pythons_eagerly_staged_and_compiled(fn) -> None:
    """NumPy's (and Python's) signs: the quotient rounds down, the remainder takes the divisor's
    sign. The fused kernels must not use C's / and %, which round toward zero."""
    want = fn(FLOOR_X, FLOOR_Y)
    x, y = tfl.tensor(FLOOR_X), tfl.tensor(FLOOR_Y)
    for got in (fn(x, y), tfl.function(fn)(x, y), tfl.compile(fn, x, y)(x, y),
                tfl.compile(lambda x, y: fn(x * 1.0, y) + 0.0, x, y)(x, y)):
        assert got.dtype == np.float64
        np.testing.assert_array_equal(got.numpy(), want)


def test_integer_floor_division_keeps_the_integer_dtype() -> None:
    a = tfl.tensor(np.array([-7, 7, 9], dtype=np.int32))
    assert (a // 2).dtype == np.int32 and (a % 4).dtype == np.int32
    np.testing.assert_array_equal((a // 2).numpy(), [-4, 3, 4])
    np.testing.assert_array_equal((a % -4).numpy(), [-3, -1, -3])


def test_remainder_has_the_gradient_of_x_minus_y_floor_x_over_y() -> None:
    """Away from the jumps, x % y = x - y*floor(x/y): d/dx = 1, d/dy = -floor(x/y)."""
    check_gradients(lambda x, y: x % y, [FLOOR_X + 0.1, FLOOR_Y + 0.2])
    x = tfl.tensor(FLOOR_X, requires_grad=True)
    assert not (x // FLOOR_Y).requires_grad  # a step function, as sign: no gradient to follow
    (x - FLOOR_Y * (x // FLOOR_Y)).sum().backward()
    np.testing.assert_array_equal(x.grad.numpy(), np.ones_like(FLOOR_X))


def test_masks_combine_with_and_or_not_as_numpy_does() -> None:
    a = np.array([-1.0, 0.5, 2.0, -3.0])
    x = tfl.tensor(a)
    cases = [  # each on a tensor and on the array: the same mask
        lambda x: (x > 0) & (x < 1), lambda x: (x > 0) | (x < -2), lambda x: ~(x > 0),
        lambda x: True & (x > 0), lambda x: (x > 0) | False,
    ]
    for fn in cases:
        want = fn(a)
        for got in (fn(x), tfl.function(fn)(x)):
            assert got.dtype == np.bool_
            np.testing.assert_array_equal(got.numpy(), want)
    assert x[(x > 0) & (x < 1)].numpy().tolist() == [0.5]


@pytest.mark.parametrize("mistake", [lambda x: x & (x > 0), lambda x: (x > 0) | 1,
                                     lambda x: ~x.astype("int32")])
def test_and_or_not_of_numbers_say_to_compare_first(mistake) -> None:
    with pytest.raises(tfl.DTypeError, match="combines masks") as info:
        mistake(tfl.tensor([1.0, 2.0]))
    assert "(x > 0) & (x < 1)" in info.value.hint


def test_a_one_element_tensor_formats_as_its_number() -> None:
    loss = tfl.tensor([[0.123456]])
    assert f"{loss:.3f}" == "0.123" and f"{tfl.tensor(3):>4d}" == "   3"
    assert f"{loss}" == str(loss)
    with pytest.raises(tfl.ShapeError, match=r"'\.2f' needs a one-element tensor.*\(2,\)"):
        f"{tfl.ones(2):.2f}"


# --- NumPy's spellings of masks, axes and sizes --------------------------------------------------


def test_numpy_booleans_and_numpys_mask_functions_combine_masks() -> None:
    m = tfl.tensor([1.0, 5.0, 7.0]) > 4
    want = [False, True, True]
    for got in (m & np.bool_(True), np.True_ & m, m | np.False_, np.logical_and(m, True),
                np.logical_or(m, m), np.bitwise_and(m, m), ~np.logical_not(m), np.invert(~m)):
        assert isinstance(got, tfl.Tensor)
        np.testing.assert_array_equal(got.numpy(), want)
    np.testing.assert_array_equal(tfl.function(lambda m: m & np.True_)(m).numpy(), want)
    with pytest.raises(tfl.DTypeError, match="combines masks"):
        np.bitwise_and(tfl.tensor([1, 2]), 3)


def test_transpose_takes_numpys_axes_keyword() -> None:
    x = tfl.ones(2, 3, 4)
    assert tfl.transpose(x, axes=(2, 0, 1)).shape == (4, 2, 3)
    assert x.transpose(axes=(1, 0, 2)).shape == (3, 2, 4)
    assert x.transpose(axes=None).shape == (4, 3, 2)
    with pytest.raises(tfl.ArgumentError, match="unexpected keyword"):
        x.transpose(1, 0, 2, axes=(1, 0, 2))


@pytest.mark.parametrize("use", [
    lambda x: x.transpose(True, False), lambda x: x.mean(axis=True),
    lambda x: x.sum(axis=(0, True)), lambda x: x.reshape(True, 6), lambda x: tfl.zeros(True, 3),
    lambda x: tfl.randn(True), lambda x: x.unsqueeze(True), lambda x: x.argmax(axis=False),
], ids=["transpose", "mean", "sum", "reshape", "zeros", "randn", "unsqueeze", "argmax"])
def test_a_bool_is_not_an_axis_or_a_size(use) -> None:
    with pytest.raises(tfl.DTypeError):  # NumPy and PyTorch refuse them too, though True == 1
        use(tfl.ones(2, 3))


def test_unsqueeze_and_squeeze_keep_sizes_known_only_when_the_graph_runs() -> None:
    with tfl.Graph() as g:
        p = tfl.placeholder((None, 1, None), name="p")
        outs = [p.unsqueeze(0), p.unsqueeze(-1), p.squeeze(), p.squeeze(1), tfl.squeeze(p, 0),
                tfl.unsqueeze(p, 2).squeeze(2)]
    assert [o.shape for o in outs] == [(1, None, 1, None), (None, 1, None, 1), (None, None),
                                       (None, None), (None, 1, None), (None, 1, None)]
    data = np.arange(6, dtype=np.float32).reshape(2, 1, 3)
    x = tfl.tensor(data)
    wants = [x.unsqueeze(0), x.unsqueeze(-1), x.squeeze(), x.squeeze(1), x.squeeze(0),
             x.unsqueeze(2).squeeze(2)]
    for got, want in zip(tfl.Session(g).run(outs, feed={p: data}), wants, strict=True):
        np.testing.assert_array_equal(got, want.numpy())


def test_an_index_out_of_range_when_the_graph_runs_is_an_indexing_error() -> None:
    pick = tfl.function(lambda x, i: x[i])
    with pytest.raises(tfl.IndexingError, match="out of bounds") as err:
        pick(tfl.ones(3, 2), tfl.tensor([0, 5]))
    assert err.value.location.filename.endswith("test_pytorch_habits.py")


def test_argnums_may_be_a_numpy_integer() -> None:
    grad = tfl.grad(lambda a, b: (a * b).sum(), argnums=np.int64(1))
    np.testing.assert_array_equal(grad(tfl.ones(2), tfl.full((2,), 3.0)).numpy(), [1.0, 1.0])


# --- Positional habits that would compute something else ------------------------------------------


@pytest.mark.parametrize("axes", [(0, 1), (-2, -1), (0, -1)])
def test_pytorchs_transpose_of_two_axes_on_a_matrix_is_explained(axes) -> None:
    t = tfl.ones(2, 5)
    with pytest.raises(tfl.ShapeError, match="PyTorch's transpose swaps two axes") as err:
        t.transpose(*axes)  # NumPy's reading keeps both axes; PyTorch's swaps them
    assert "x.T" in err.value.hint
    assert t.transpose(1, 0).shape == t.T.shape == t.swapaxes(0, 1).shape == (5, 2)
    assert t.transpose((0, 1)).shape == t.permute(0, 1).shape == (2, 5)  # all axes named


def test_var_takes_only_its_axis_by_position() -> None:
    t = tfl.tensor([[1.0, 2.0, 4.0], [0.0, 1.0, 1.0]])
    with pytest.raises(tfl.DTypeError, match="one argument by position"):
        t.var(1, False)  # PyTorch's old var(dim, unbiased): here it would have been keepdims
    with pytest.raises(tfl.DTypeError, match="correction is a number"):
        t.var(correction="a")
    np.testing.assert_allclose(tfl.var(t, 1, correction=0).numpy(), np.var(t.numpy(), axis=1))


def test_tensors_hold_numbers_only() -> None:
    for make in (lambda: tfl.zeros(3, dtype=object), lambda: tfl.ones(2).astype(str),
                 lambda: tfl.eye(2, dtype="datetime64[s]"),
                 lambda: tfl.TensorSpec((2,), "U3")):
        with pytest.raises(tfl.DTypeError, match="numbers or booleans"):
            make()


def test_np_array_of_a_tensor_is_a_copy_and_np_asarray_a_view() -> None:
    t = tfl.tensor([1.0, 2.0])
    copied = np.array(t)
    copied[0] = 5.0  # writable, and the tensor keeps its values
    assert t.numpy()[0] == 1.0 and np.array(t, copy=True).flags.writeable
    assert np.shares_memory(np.asarray(t), t.numpy()) and not np.asarray(t).flags.writeable
    assert np.array(t, dtype=np.float64).dtype == np.float64


def test_like_takes_anything_a_tensor_is_made_of() -> None:
    np.testing.assert_array_equal(tfl.zeros_like([1.0, 2.0]).numpy(), [0.0, 0.0])
    np.testing.assert_array_equal(tfl.full_like(np.ones((2, 1)), 3.0).numpy(), [[3.0], [3.0]])
    with pytest.raises(tfl.DTypeError, match="None is not a tensor"):
        tfl.ones_like(None)


def test_a_ragged_index_list_is_an_indexing_error() -> None:
    with pytest.raises(tfl.IndexingError, match="ragged"):
        tfl.ones(3, 4)[[[0, 1], [0]]]


def test_pytorchs_two_tensor_max_names_maximum() -> None:
    with pytest.raises(tfl.DTypeError, match=r"tfl\.maximum"):
        tfl.max(tfl.ones(2), tfl.zeros(2))
    with pytest.raises(tfl.DTypeError, match=r"tfl\.minimum"):
        tfl.min(tfl.ones(2), tfl.zeros(2))


def test_to_takes_every_spelling_pytorch_does() -> None:
    x = tfl.ones(3)
    assert x.to(tfl.float64).dtype == np.float64 and x.to("int32").dtype == np.int32
    assert x.to("cpu") is x and x.to(device="cpu") is x and x.to(dtype="float32") is x
    assert x.to("cpu", tfl.float16).dtype == np.float16
    assert x.to(device="cpu", dtype=np.int64).dtype == np.int64
    assert x.to(tfl.zeros(2, dtype=tfl.int32)).dtype == np.int32  # another tensor's dtype
    with pytest.raises(tfl.DeviceError, match="'tpu' is neither a device nor a dtype"):
        x.to("tpu")
    with pytest.raises(tfl.DTypeError, match="3 is neither a device nor a dtype"):
        x.to(3)


def test_the_retracing_advice_for_a_static_argument_fits_what_it_is() -> None:
    words = tfl.function(lambda x, mode: x * len(mode))
    numbers = tfl.function(lambda x, lr: x * lr)
    with pytest.warns(tfl.RetracingWarning, match="Argument mode is static"):
        for m in "abcdefg":
            words(tfl.ones(2), m)
    with pytest.warns(tfl.RetracingWarning, match=r"as tensors \(tfl.tensor\(lr\)\)"):
        for i in range(7):
            numbers(tfl.ones(2), 0.1 * i)


# --- PyTorch's dim= and keepdim= (issue 26, §1) -------------------------------------------------

CUBE = np.arange(24.0).reshape(2, 3, 4) % 7 - 3.0


def _softmax(a: np.ndarray, axis: int) -> np.ndarray:
    e = np.exp(a - a.max(axis=axis, keepdims=True))
    return e / e.sum(axis=axis, keepdims=True)


# (name, teachflow with PyTorch's keywords, the NumPy reference)
DIM_CALLS = [
    ("sum", lambda x: x.sum(dim=1, keepdim=True), lambda a: a.sum(axis=1, keepdims=True)),
    ("tfl.sum", lambda x: tfl.sum(x, dim=(0, 2)), lambda a: a.sum(axis=(0, 2))),
    ("mean", lambda x: x.mean(dim=-1), lambda a: a.mean(axis=-1)),
    ("tfl.mean", lambda x: tfl.mean(x, 0, keepdim=True), lambda a: a.mean(0, keepdims=True)),
    ("max", lambda x: x.max(dim=2, keepdim=True), lambda a: a.max(axis=2, keepdims=True)),
    ("tfl.max", lambda x: tfl.max(x, dim=0), lambda a: a.max(axis=0)),
    ("min", lambda x: x.min(dim=1), lambda a: a.min(axis=1)),
    ("tfl.min", lambda x: tfl.min(x, dim=1, keepdim=True), lambda a: a.min(1, keepdims=True)),
    ("argmax", lambda x: x.argmax(dim=1), lambda a: a.argmax(axis=1)),
    ("tfl.argmin", lambda x: tfl.argmin(x, dim=2, keepdim=True),
     lambda a: a.argmin(axis=2, keepdims=True)),
    ("var", lambda x: x.var(dim=1, keepdim=True, correction=0),
     lambda a: a.var(axis=1, keepdims=True)),
    ("tfl.var", lambda x: tfl.var(x, dim=2), lambda a: a.var(axis=2, ddof=1)),
    ("softmax", lambda x: x.softmax(dim=1), lambda a: _softmax(a, 1)),
    ("tfl.softmax", lambda x: tfl.softmax(x, dim=0), lambda a: _softmax(a, 0)),
    ("F.softmax", lambda x: tfl.nn.functional.softmax(x, dim=-1), lambda a: _softmax(a, -1)),
    ("log_softmax", lambda x: x.log_softmax(dim=2), lambda a: np.log(_softmax(a, 2))),
    ("tfl.log_softmax", lambda x: tfl.log_softmax(x, dim=1), lambda a: np.log(_softmax(a, 1))),
    ("tfl.cat", lambda x: tfl.cat([x, x * 2], dim=1),
     lambda a: np.concatenate([a, a * 2], axis=1)),
    ("tfl.concatenate", lambda x: tfl.concatenate([x, x], dim=-1),
     lambda a: np.concatenate([a, a], axis=-1)),
    ("tfl.stack", lambda x: tfl.stack([x, -x], dim=2), lambda a: np.stack([a, -a], axis=2)),
    ("np.sum", lambda x: np.sum(x, axis=1), lambda a: a.sum(axis=1)),
    ("unsqueeze(axis=)", lambda x: x.unsqueeze(axis=1), lambda a: np.expand_dims(a, 1)),
    ("np.squeeze", lambda x: np.squeeze(x[:1], axis=0), lambda a: np.squeeze(a[:1], axis=0)),
]


@pytest.mark.parametrize(("call", "reference"), [c[1:] for c in DIM_CALLS],
                         ids=[c[0] for c in DIM_CALLS])
def test_pytorchs_dim_and_keepdim_name_the_axis_eagerly_and_staged(call, reference) -> None:
    expected = reference(CUBE)
    eager = call(tfl.tensor(CUBE))
    staged = tfl.function(call)(tfl.tensor(CUBE))
    for got in (eager, staged):
        assert got.shape == expected.shape
        np.testing.assert_allclose(got.numpy(), expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("call", [
    lambda x: x.sum(axis=0, dim=1), lambda x: x.sum(1, dim=1), lambda x: tfl.mean(x, 0, dim=0),
    lambda x: x.max(0, True, keepdim=True), lambda x: x.argmax(0, dim=0),
    lambda x: x.var(1, dim=1), lambda x: x.softmax(-1, dim=-1),
    lambda x: tfl.log_softmax(x, axis=-1, dim=0), lambda x: tfl.cat([x, x], 0, dim=0),
    lambda x: tfl.stack([x, x], axis=0, dim=1), lambda x: x.unsqueeze(0, axis=0),
], ids=["sum", "sum-positional", "mean", "keepdims", "argmax", "var", "softmax", "log_softmax",
        "cat", "stack", "unsqueeze"])
def test_an_axis_given_under_both_names_is_an_argument_error(call) -> None:
    for fn in (call, tfl.function(call)):
        with pytest.raises(tfl.ArgumentError, match="under two names") as info:
            fn(tfl.tensor(CUBE))
        assert not isinstance(info.value, tfl.DTypeError)  # (not a problem of dtypes)
        assert isinstance(info.value, TypeError) and info.value.hint


@pytest.mark.parametrize(("call", "op", "keyword", "meant"), [
    (lambda x: x.sum(axes=1), "sum", "axes", "axis"),
    (lambda x: tfl.mean(x, keep_dims=True), "mean", "keep_dims", "keepdims"),
    (lambda x: x.softmax(dims=1), "softmax", "dims", "dim"),
    (lambda x: tfl.cat([x, x], axs=1), "concatenate", "axs", "axis"),
    (lambda x: x.argmax(keepdmis=True), "argmax", "keepdmis", "keepdims"),
    (lambda x: x.max(initial=0.0), "max", "initial", None),
    (lambda x: x.var(unbiased=False), "var", "unbiased", None),
    (lambda x: x.squeeze(axes=0), "squeeze", "axes", "axis"),
])
def test_an_unknown_keyword_is_an_argument_error_naming_op_and_keyword(call, op, keyword,
                                                                       meant) -> None:
    with pytest.raises(tfl.ArgumentError) as info:
        call(tfl.tensor(CUBE))
    err = info.value
    assert not isinstance(err, tfl.DTypeError) and isinstance(err, TypeError)
    assert err.op == op and f"unexpected keyword argument {keyword!r}" in str(err)
    if meant is not None:
        assert err.hint == f"did you mean {meant}=?"
    assert err.location is not None and err.location.filename == __file__
