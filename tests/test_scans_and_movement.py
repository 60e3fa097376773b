"""The reductions, scans, movement, einsum, attention and creation ops of issue 33.

`op_cases.py` draws their values and gradients (first order) against NumPy formulas, eagerly,
staged, under ``tfl.jvp`` and ``tfl.vmap``; `test_onnx_export.py` runs each in onnxruntime. Here:
the cases a table does not reach (zeros in a product, ties in a sort, overflow in a logsumexp),
second derivatives, what the compiler makes of them (attention's fused stages, a random op never
merged), saved graphs (and hostile parameters refused), and the errors, each naming the op, the
shapes and this file's line.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest
from helpers import check_gradients

import teachflow as tfl
from teachflow.core.dispatch import bind
from teachflow.ops import OPS, scans
from teachflow.saved import SavedGraphError

F = tfl.nn.functional


def second_derivative_matches_finite_differences(f, x: np.ndarray, eps: float = 1e-5) -> None:
    """The derivative of ``sum(grad(x) * w)`` (a gradient differentiated again) against central
    differences of the first gradient."""
    w = np.linspace(0.5, 1.5, x.size).reshape(x.shape)
    first = lambda t: tfl.grad(lambda u: f(u).sum())(t)
    got = tfl.grad(lambda t: (first(t) * tfl.tensor(w)).sum())(tfl.tensor(x)).numpy()
    numeric = np.zeros_like(x)
    for i in np.ndindex(x.shape):
        step = np.zeros_like(x)
        step[i] = eps
        ahead, behind = (first(tfl.tensor(x + s)).numpy() for s in (step, -step))
        numeric[i] = ((ahead - behind) * w).sum() / (2 * eps)
    np.testing.assert_allclose(got, numeric, rtol=1e-5, atol=1e-6)


# --- prod: the gradient where elements are 0 ----------------------------------------------------


def test_prod_values_and_its_gradient_is_the_product_of_the_others_even_with_zeros() -> None:
    x = np.array([[2.0, 0.0, 3.0, 4.0], [1.5, -2.0, 0.5, 1.0], [0.0, 5.0, 0.0, 2.0]])
    np.testing.assert_array_equal(tfl.prod(x, 1).numpy(), [0.0, -1.5, 0.0])
    got = tfl.grad(lambda t: t.prod(dim=1).sum())(tfl.tensor(x)).numpy()
    others = np.array([[np.prod(np.delete(row, i)) for i in range(4)] for row in x])
    np.testing.assert_array_equal(got, others)  # one zero: only it gets a gradient, 24
    assert got[0].tolist() == [0.0, 24.0, 0.0, 0.0] and got[2].tolist() == [0.0] * 4
    check_gradients(lambda t: t.prod(axis=(0, 2), keepdims=True), [np.arange(1.0, 13).reshape(
        2, 3, 2) / 7 - 0.5])
    check_gradients(lambda t: t.prod(), [x])


def test_prod_second_derivative_and_dtypes() -> None:
    second_derivative_matches_finite_differences(lambda t: t.prod(0), np.array(
        [[0.5, -1.0], [2.0, 0.0], [1.5, 0.7]]))
    assert tfl.prod(np.array([2, 3, 4], np.int32)).dtype == np.int64  # as NumPy multiplies
    assert tfl.prod(np.zeros((0, 3)), 0).tolist() == [1.0, 1.0, 1.0]  # the empty product


def test_all_and_any_are_bools_of_nonzero() -> None:
    x = tfl.tensor([[1.0, 0.0, -2.0], [3.0, 4.0, math.nan]])
    assert x.all().item() is False and x.any().item() is True
    assert x.all(dim=1).tolist() == [False, True]  # (nan is not zero: true, as in NumPy)
    assert tfl.any(x == 0, axis=0, keepdims=True).tolist() == [[False, True, False]]
    assert tfl.all(tfl.zeros(0)).item() is True and tfl.any(tfl.zeros(0)).item() is False
    assert x.all(1).dtype == np.bool_ and OPS["all"].differentiable is False


# --- logsumexp: stable ----------------------------------------------------------------------------


def test_logsumexp_does_not_overflow_and_handles_infinities() -> None:
    x = np.array([[1000.0, 1000.0], [-1000.0, -1001.0], [-math.inf, -math.inf], [math.inf, 0]])
    with np.errstate(over="raise", invalid="raise", divide="ignore"):  # (log 0 = -inf: meant)
        got = tfl.logsumexp(tfl.tensor(x), 1).numpy()
    m = np.array([1000.0, -1000.0])
    want = m + np.log(np.exp(x[:2, 0] - m) + np.exp(x[:2, 1] - m))
    np.testing.assert_allclose(got[:2], want, rtol=1e-15)
    assert got[2] == -math.inf and got[3] == math.inf
    with np.errstate(divide="ignore"):
        assert tfl.logsumexp(tfl.zeros(2, 0), 1).tolist() == [-math.inf, -math.inf]


def test_logsumexp_gradient_is_the_softmax_and_differentiates_twice() -> None:
    x = np.array([[0.3, -1.2, 2.0], [5.0, 5.0, -3.0]])
    got = tfl.grad(lambda t: t.logsumexp(1).sum())(tfl.tensor(x)).numpy()
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-14)
    second_derivative_matches_finite_differences(lambda t: t.logsumexp(1), x)


# --- cumsum, cumprod ------------------------------------------------------------------------------


def test_cumsum_and_cumprod_values_dtypes_and_gradients() -> None:
    x = np.array([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert tfl.cumsum(x, 1).tolist() == [[1, 3, 6], [4, 9, 15]]
    assert tfl.tensor(x).cumprod(0).tolist() == [[1, 2, 3], [4, 10, 18]]
    assert tfl.cumsum(np.array([True, True, False]), 0).tolist() == [1, 2, 2]
    assert tfl.cumsum(np.arange(3, dtype=np.int32), 0).dtype == np.int64  # as NumPy sums
    assert tfl.tensor(x).cumsum(1, dtype="int32").dtype == np.int32
    # d(sum of cumsum)/dx_i: how many sums x_i is in, n - i.
    assert tfl.grad(lambda t: t.cumsum(1).sum())(tfl.tensor(x)).tolist() == [[3, 2, 1]] * 2
    check_gradients(lambda t: t.cumprod(1), [np.array([[0.5, -2.0, 1.5, 0.7]])])
    second_derivative_matches_finite_differences(lambda t: t.cumprod(0), x / 3)


def test_cumprod_gradient_is_exact_where_elements_are_zero() -> None:
    x = np.array([2.0, 0.0, 3.0, 0.0, 5.0])
    got = tfl.grad(lambda t: t.cumprod(0).sum())(tfl.tensor(x)).numpy()
    # Output j = x_0 ... x_j; its derivative along i <= j: the product without x_i.
    want = [sum(np.prod(np.delete(x[:j + 1], i)) for j in range(i, 5)) for i in range(5)]
    np.testing.assert_array_equal(got, want)
    assert got.tolist() == [1.0, 2.0 + 6.0, 0.0, 0.0, 0.0]


# --- sort, argsort, topk --------------------------------------------------------------------------


def test_sort_returns_values_and_indices_stably_in_both_directions() -> None:
    x = tfl.tensor([[3.0, 1.0, 3.0, 2.0, 1.0]])
    values, indices = x.sort()
    assert values.tolist() == [[1, 1, 2, 3, 3]] and indices.tolist() == [[1, 4, 3, 0, 2]]
    down = tfl.sort(x, dim=-1, descending=True)
    assert down.values.tolist() == [[3, 3, 2, 1, 1]] and down.indices.tolist() == [[0, 2, 3, 1, 4]]
    assert x.argsort(descending=True).tolist() == down.indices.tolist()
    assert tfl.argsort(np.array([[2, 0], [1, 5]], np.uint8), 0).tolist() == [[1, 0], [0, 1]]
    assert indices.dtype == np.int64


def test_topk_keeps_the_k_largest_or_smallest_and_their_gradient_goes_back() -> None:
    x = tfl.tensor([[0.5, 4.0, -1.0, 2.0], [7.0, 6.0, 8.0, 5.0]])
    top = x.topk(2)
    assert top.values.tolist() == [[4.0, 2.0], [8.0, 7.0]]
    assert top.indices.tolist() == [[1, 3], [2, 0]]
    low = tfl.topk(x, 1, dim=0, largest=False)
    assert low.values.tolist() == [[0.5, 4.0, -1.0, 2.0]] and low.indices.tolist() == [[0] * 4]
    got = tfl.grad(lambda t: (t.topk(2).values * tfl.tensor([10.0, 1.0])).sum())(x)
    assert got.tolist() == [[0, 10, 0, 1], [1, 0, 10, 0]]
    second_derivative_matches_finite_differences(lambda t: t.sort(1).values ** 3,
                                                 x.numpy().astype(np.float64))


# --- movement -------------------------------------------------------------------------------------


def test_movement_values_written_out() -> None:
    x = tfl.tensor(np.arange(6.0).reshape(2, 3))
    assert x.flip(1).tolist() == [[2, 1, 0], [5, 4, 3]]
    assert tfl.flip(x, (0, 1)).tolist() == [[5, 4, 3], [2, 1, 0]]
    assert x.roll(1, 1).tolist() == [[2, 0, 1], [5, 3, 4]]
    assert tfl.roll(x, -1).tolist() == [[1, 2, 3], [4, 5, 0]]  # flattened, shape kept
    assert x.repeat(1, 2).tolist() == [[0, 1, 2, 0, 1, 2], [3, 4, 5, 3, 4, 5]]
    assert x.repeat(2, 1, 1).shape == (2, 2, 3)
    assert [p.tolist() for p in x.split(2, 1)] == [[[0, 1], [3, 4]], [[2], [5]]]
    assert [p.shape for p in tfl.split(x, [1, 0, 2], dim=1)] == [(2, 1), (2, 0), (2, 2)]
    assert [p.shape for p in x.chunk(3, 1)] == [(2, 1)] * 3
    assert [p.shape for p in tfl.chunk(tfl.zeros(5), 2)] == [(3,), (2,)]
    assert x.tril().tolist() == [[0, 0, 0], [3, 4, 0]]
    assert tfl.triu(x, 1).tolist() == [[0, 1, 2], [0, 0, 5]]
    assert x.diagonal().tolist() == [0, 4] and x.diagonal(1).tolist() == [1, 5]
    assert tfl.diagonal(x, -1).tolist() == [3] and x.diagonal(5).shape == (0,)
    assert tfl.tensor([[True, True], [True, True]]).tril().tolist() == [[True, False],
                                                                        [True, True]]


def test_reading_an_element_twice_adds_its_gradients() -> None:
    x = tfl.tensor([1.0, 2.0, 3.0])
    grad = tfl.grad(lambda t: F.pad(t, (2, 2), mode="replicate").sum())(x)
    assert grad.tolist() == [3.0, 1.0, 3.0]
    grad = tfl.grad(lambda t: F.pad(t, (2, 1), mode="reflect").sum())(x)
    assert grad.tolist() == [1.0, 3.0, 2.0]  # [3, 2, 1, 2, 3, 2]
    assert tfl.grad(lambda t: t.repeat(3).sum())(x).tolist() == [3.0, 3.0, 3.0]


def test_pad_modes_written_out() -> None:
    x = tfl.tensor([[1.0, 2.0, 3.0]])
    assert F.pad(x, (1, 2), value=9.0).tolist() == [[9, 1, 2, 3, 9, 9]]
    assert F.pad(x, (2, 2), mode="reflect").tolist() == [[3, 2, 1, 2, 3, 2, 1]]
    assert F.pad(x, (1, 1), mode="replicate").tolist() == [[1, 1, 2, 3, 3]]
    assert F.pad(x, (1, 2), mode="circular").tolist() == [[3, 1, 2, 3, 1, 2]]
    assert F.pad(x, (-1, 0, 1, 0)).tolist() == [[0, 0], [2, 3]]  # crop the last, pad the first


# --- einsum ---------------------------------------------------------------------------------------


def test_einsum_is_lowered_to_the_ops_a_learner_knows() -> None:
    a, b = tfl.randn(2, 3, 4), tfl.randn(2, 4, 5)
    graph = tfl.trace(lambda a, b: tfl.einsum("bij,bjk->bik", a, b), a, b)
    assert {n.op.name for n in graph.nodes} <= {"reshape", "transpose", "matmul"}
    assert "matmul" in {n.op.name for n in graph.nodes}
    m = np.arange(9.0).reshape(3, 3)
    assert tfl.einsum("ii", m).item() == 12.0  # the trace: a diagonal, summed
    assert tfl.einsum("ij->ji", [m]).tolist() == m.T.tolist()  # (operands as one list too)
    np.testing.assert_allclose(tfl.einsum("bij,bjk->bik", a, b).numpy(),
                               a.numpy() @ b.numpy(), rtol=1e-6)
    check_gradients(lambda u, v: tfl.einsum("i,ij->j", u, v), [np.array([1.0, -2.0]),
                                                                m[:2] / 4])


# --- attention ------------------------------------------------------------------------------------


def test_attention_compiles_to_two_matmuls_around_softmaxs_fused_stages() -> None:
    rng = np.random.default_rng(0)
    q, k, v = (tfl.tensor(rng.normal(size=s).astype(np.float32)) for s in
               ((2, 4, 8), (2, 5, 8), (2, 5, 3)))
    fn = lambda q, k, v: F.scaled_dot_product_attention(q, k, v)
    compiled = tfl.compile(fn, q, k, v)
    nodes = compiled.graph.nodes
    assert [n.op.name for n in nodes if not n.op.name.startswith("fused")] == [
        "transpose", "matmul", "div", "matmul"]
    groups = [([m.op.name for m in n.op.group.nodes], n.op.group.reduction.op.name)
              for n in nodes if n.op.name.startswith("fused")]
    assert groups == [(["mul"], "max"), (["sub", "exp"], "sum")]  # scale, then softmax's
    np.testing.assert_allclose(compiled(q, k, v).numpy(), fn(q, k, v).numpy(), rtol=1e-6)
    scores = q.numpy() @ k.numpy().transpose(0, 2, 1) / math.sqrt(8)
    e = np.exp(scores - scores.max(-1, keepdims=True))
    np.testing.assert_allclose(fn(q, k, v).numpy(), e / e.sum(-1, keepdims=True) @ v.numpy(),
                               rtol=1e-5, atol=1e-6)


def test_attention_masks_causally_by_bool_mask_and_by_addition() -> None:
    q = tfl.tensor(np.random.default_rng(1).normal(size=(1, 3, 2)))
    v = tfl.tensor(np.arange(3.0).reshape(1, 3, 1))
    first = F.scaled_dot_product_attention(q, q, v, is_causal=True)
    assert first[0, 0, 0].item() == 0.0  # the first position sees only itself
    mask = np.tril(np.ones((3, 3), bool))
    np.testing.assert_array_equal(F.scaled_dot_product_attention(q, q, v, attn_mask=mask).numpy(),
                                  first.numpy())
    added = np.where(mask, 0.0, -np.inf)
    np.testing.assert_allclose(F.scaled_dot_product_attention(
        q, q, v, attn_mask=tfl.tensor(added), scale=0.5).numpy()[0, 0], [0.0])
    tfl.manual_seed(0)
    dropped = F.scaled_dot_product_attention(q, q, v, dropout_p=0.5)
    assert dropped.shape == (1, 3, 1)


# --- creation -------------------------------------------------------------------------------------


def test_linspace_includes_both_ends() -> None:
    got = tfl.linspace(-1, 2, 7)
    assert got.dtype == np.float32 and got.shape == (7,)
    np.testing.assert_allclose(got.numpy(), [-1 + 0.5 * i for i in range(7)], rtol=1e-7)
    assert tfl.linspace(0, 1, 1).tolist() == [0.0] and tfl.linspace(0, 1, 0).shape == (0,)
    assert tfl.linspace(3, 5, 3, dtype="float64").tolist() == [3.0, 4.0, 5.0]


def test_randint_is_seeded_in_range_and_never_folded_or_merged() -> None:
    tfl.manual_seed(7)
    first = tfl.randint(3, 9, (200,))
    tfl.manual_seed(7)
    assert tfl.randint(3, 9, (200,)).tolist() == first.tolist()
    assert first.dtype == np.int64 and set(first.tolist()) == set(range(3, 9))
    assert tfl.randint(4, (2, 3), dtype="int32").dtype == np.int32
    compiled = tfl.compile(lambda: tfl.randint(0, 1000, (50,)) - tfl.randint(0, 1000, (50,)))
    assert [n.op.name for n in compiled.graph.nodes].count("randint") == 2  # CSE kept both
    assert compiled().tolist() != compiled().tolist()  # drawn anew at every call
    assert OPS["randint"].random and OPS["randint"].impure


# --- saved graphs ---------------------------------------------------------------------------------


def every_new_op(x: tfl.Tensor) -> tuple:
    return (x.prod(1), x.all(0), (x > 0).any(), x.cumsum(0), x.cumprod(1), x.argsort(1),
            x.sort(0, descending=True).values, x.topk(2).indices, x.logsumexp(1),
            x.flip(0).roll(1, 1).repeat(1, 2), x.tril(), x.diagonal(), F.pad(x, (1, 1), "reflect"),
            tfl.einsum("ij,kj->ik", x, x), tfl.linspace(0, 1, 3) + x[0, :3])


def test_the_new_ops_save_and_load_with_the_same_results(tmp_path: Path) -> None:
    x = tfl.tensor(np.random.default_rng(2).normal(size=(3, 4)))
    folder = tfl.save(tfl.compile(every_new_op, x), tmp_path / "model")
    loaded = tfl.load(folder)
    for got, want in zip(loaded(x), every_new_op(x), strict=True):
        np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-12)
    random = tfl.save(tfl.compile(lambda: tfl.randint(0, 5, (4,))), tmp_path / "random")
    assert set(tfl.load(random)().tolist()) <= set(range(5))


def _saved_node(tmp_path: Path, fn, *args) -> tuple[Path, dict]:
    folder = tfl.save(tfl.compile(fn, *args, passes=[]), tmp_path / "model")
    return folder, json.loads((folder / "saved.json").read_text())


@pytest.mark.parametrize(("fn", "op", "param", "value", "words"), [
    (lambda x: x.argsort(0), "argsort", "descending", "yes", ["descending"]),
    (lambda x: x.cumsum(0), "cumsum", "axis", 3, ["axis", "out of range"]),
    (lambda x: x + tfl.linspace(0, 1, 3), "linspace", "num", -3, ["num"]),
    (lambda x: x + tfl.randint(0, 5, (3,)), "randint", "low", 7, ["randint", "empty range"]),
    (lambda x: x + tfl.randint(0, 5, (3,), dtype="int8"), "randint", "high", 1000, ["int8"]),
])
def test_hostile_parameters_of_the_new_ops_are_refused(tmp_path: Path, fn, op: str, param: str,
                                                       value: object, words: list) -> None:
    folder, document = _saved_node(tmp_path, fn, tfl.ones(3, dtype="int64"))
    next(n for n in document["graph"]["nodes"] if n["op"] == op)["params"][param] = value
    (folder / "saved.json").write_text(json.dumps(document))
    with pytest.raises(SavedGraphError) as info:
        tfl.load(folder)
    assert all(w in str(info.value) for w in words), str(info.value)


# --- errors ---------------------------------------------------------------------------------------


@pytest.mark.parametrize(("call", "kind", "op", "words"), [
    (lambda x: x.cumsum(2), tfl.ShapeError, "cumsum", ["axis 2", "(2, 3)"]),
    (lambda x: x.cumprod(), tfl.ArgumentError, "cumprod", ["axis"]),
    (lambda x: x.sort(dim=5), tfl.ShapeError, "sort", ["(2, 3)"]),
    (lambda x: x.topk(4), tfl.ShapeError, "topk", ["(2, 3)", "from 0 to 3"]),
    (lambda x: x.argsort(0, descending="no"), tfl.DTypeError, "argsort", ["descending"]),
    (lambda x: x.prod(axis=(0, 0)), tfl.ShapeError, "prod", ["twice"]),
    (lambda x: x.logsumexp(3), tfl.ShapeError, "logsumexp", ["(2, 3)"]),
    (lambda x: x.flip(2), tfl.ShapeError, "flip", ["(2, 3)"]),
    (lambda x: x.roll((1, 2), 0), tfl.ShapeError, "roll", ["shift"]),
    (lambda x: x.repeat(2), tfl.ShapeError, "repeat", ["(2, 3)"]),
    (lambda x: x.split([1, 1], 1), tfl.ShapeError, "split", ["add up to 3", "(2, 3)"]),
    (lambda x: x.chunk(0), tfl.ShapeError, "chunk", ["positive"]),
    (lambda x: x[0].tril(), tfl.ShapeError, "tril", ["(3,)"]),
    (lambda x: x.diagonal(0, 1, -1), tfl.ShapeError, "diagonal", ["(2, 3)"]),
    (lambda x: F.pad(x, (1,)), tfl.ShapeError, "pad", ["(2, 3)"]),
    (lambda x: F.pad(x, (3, 0), mode="reflect"), tfl.ShapeError, "pad", ["size 3"]),
    (lambda x: tfl.einsum("ij,jk->ik", x, x), tfl.ShapeError, "einsum", ["'j'", "(2, 3)"]),
    (lambda x: tfl.einsum("ijk->i", x), tfl.ShapeError, "einsum", ["(2, 3)"]),
    (lambda x: tfl.einsum("...i->i", x), tfl.ArgumentError, "einsum", ["..."]),
    (lambda x: F.scaled_dot_product_attention(x, x.T, x), tfl.ShapeError,
     "scaled_dot_product_attention", ["(2, 3)", "(3, 2)"]),
    (lambda x: tfl.randint(5, 5, (2,)), tfl.ShapeError, "randint", ["empty range"]),
    (lambda x: tfl.randint(0, 3, (2,), dtype="float32"), tfl.DTypeError, "randint",
     ["float32"]),
    (lambda x: tfl.linspace(0, 1, -1), tfl.ShapeError, "linspace", ["-1"]),
])
def test_bad_input_names_the_op_the_shapes_and_this_line(call, kind: type, op: str,
                                                          words: list) -> None:
    x = tfl.tensor(np.arange(6.0).reshape(2, 3))
    with pytest.raises(kind) as info:
        call(x)
    err = info.value
    assert isinstance(err, tfl.TeachflowError) and err.op == op, (err.op, str(err))
    assert all(w in str(err) for w in words), str(err)
    assert err.location is not None and "test_scans_and_movement.py" in str(err.location)


def test_a_scan_op_checks_its_axis_when_bound_directly() -> None:
    with pytest.raises(tfl.ShapeError, match="axis 2 is out of range") as info:
        tfl.trace(lambda x: bind(scans.cumsum, x, axis=2), tfl.ones(2, 3))
    assert "f32[2, 3]" in str(info.value) or "float32[2, 3]" in str(info.value)
