"""The Tensor as a learner meets it: making one, looking at it, getting values out."""

from __future__ import annotations

import copy
import pickle

import numpy as np
import pytest

import teachflow as tfl

# --- Creation and dtype defaults ----------------------------------------------------------------


@pytest.mark.parametrize(
    ("data", "dtype"),
    [
        (1.5, np.float32),
        ([1.0, 2.0], np.float32),
        ([[1.0, 2.0], [3.0, 4.0]], np.float32),
        ([1, 2.5], np.float32),  # mixed ints and floats: still a Python-float default
        (3, np.int64),
        ([1, 2, 3], np.int64),
        (True, np.bool_),
        ([True, False], np.bool_),
        (np.array([1.0, 2.0]), np.float64),  # a NumPy array keeps its dtype
        (np.array([1.0, 2.0], dtype=np.float16), np.float16),
        (np.array([1, 2], dtype=np.int32), np.int32),
        (np.float64(2.0), np.float64),  # so does a NumPy scalar
        (np.arange(6).reshape(2, 3), np.int64),
    ],
)
def test_dtype_defaults(data, dtype) -> None:
    t = tfl.tensor(data)
    assert t.dtype == np.dtype(dtype)
    assert isinstance(t.dtype, np.dtype)
    np.testing.assert_array_equal(t.numpy(), np.asarray(data).astype(dtype))


def test_explicit_dtype_wins() -> None:
    assert tfl.tensor([1.0, 2.0], dtype="float64").dtype == np.float64
    assert tfl.tensor([1, 2], dtype=np.float32).dtype == np.float32
    assert tfl.tensor(np.ones(2), dtype="float32").dtype == np.float32
    assert tfl.tensor([1.7, 2.2], dtype="int32").tolist() == [1, 2]


def test_tensor_of_a_tensor_is_a_detached_copy() -> None:
    x = tfl.tensor([1.0, 2.0], requires_grad=True)
    y = tfl.tensor(x)
    assert y is not x and not y.requires_grad
    np.testing.assert_array_equal(y.numpy(), x.numpy())
    assert not np.shares_memory(y.numpy(), x.numpy())


@pytest.mark.parametrize("copier", [copy.copy, copy.deepcopy,
                                    lambda t: pickle.loads(pickle.dumps(t))],
                         ids=["copy", "deepcopy", "pickle"])
def test_copies_own_their_values_and_a_leaf_stays_a_leaf(copier) -> None:
    w = tfl.tensor([1.0, 2.0], requires_grad=True)
    (w * 3).sum().backward()
    c = copier(w)
    assert c is not w and c.requires_grad and c.is_leaf
    with tfl.no_grad():
        w -= 1.0
    np.testing.assert_array_equal(c.numpy(), [1.0, 2.0])  # its own values
    h = copier(w * 2)  # computed: a plain tensor
    assert not h.requires_grad and h.tolist() == [0.0, 2.0]


def test_copying_a_traced_tensor_says_to_clone_at_the_users_line() -> None:
    def f(x):
        return copy.copy(x) * 2

    with pytest.raises(tfl.TraceError, match="a traced tensor has no values to copy") as info:
        tfl.function(f)(tfl.ones(2))
    assert "x.clone()" in info.value.hint
    # The line is the learner's (copy.copy's own lines are Python's, not the learner's).
    assert info.value.location.lineno == f.__code__.co_firstlineno + 1
    assert info.value.location.filename == __file__


def test_tensor_copies_its_input_while_as_tensor_does_not() -> None:
    data = np.array([1.0, 2.0, 3.0])
    copied = tfl.tensor(data)
    shared = tfl.as_tensor(data)
    data[0] = 99.0
    assert copied.tolist() == [1.0, 2.0, 3.0]
    assert shared.tolist() == [99.0, 2.0, 3.0]
    assert np.shares_memory(shared.numpy(), data)
    assert not np.shares_memory(copied.numpy(), data)
    assert shared.dtype == np.float64 and not shared.requires_grad
    t = tfl.ones(2)
    assert tfl.as_tensor(t) is t  # a tensor is returned as it is
    assert tfl.as_tensor(t, dtype="float64").dtype == np.float64
    assert tfl.as_tensor([1.0, 2.0]).dtype == np.float32


@pytest.mark.parametrize(
    ("make", "shape", "value"),
    [
        (lambda: tfl.zeros(2, 3), (2, 3), 0.0),
        (lambda: tfl.zeros((2, 3)), (2, 3), 0.0),
        (lambda: tfl.zeros([4]), (4,), 0.0),
        (lambda: tfl.zeros(()), (), 0.0),
        (lambda: tfl.ones(3), (3,), 1.0),
        (lambda: tfl.ones((1, 2, 1)), (1, 2, 1), 1.0),
        (lambda: tfl.full((2, 2), 7.5), (2, 2), 7.5),
        (lambda: tfl.full(3, 2.0), (3,), 2.0),
    ],
)
def test_filled_creation(make, shape, value) -> None:
    t = make()
    assert t.shape == shape and t.dtype == np.float32 and t.device == "cpu"
    np.testing.assert_array_equal(t.numpy(), np.full(shape, value, dtype=np.float32))
    assert not t.requires_grad


def test_filled_creation_options() -> None:
    assert tfl.zeros(2, dtype="float64").dtype == np.float64
    assert tfl.ones(2, dtype="int32").dtype == np.int32
    assert tfl.full((2,), 3).dtype == np.int64  # the dtype follows the value
    assert tfl.full((2,), True).dtype == np.bool_
    assert tfl.full((2,), 3, dtype="float32").tolist() == [3.0, 3.0]
    w = tfl.zeros(2, 3, requires_grad=True)
    assert w.requires_grad and w.is_leaf and w.grad is None
    assert tfl.ones(2, device="cpu").device == "cpu"


def test_like_creation() -> None:
    x = tfl.tensor([[1, 2, 3]], dtype="int32")
    for make, value in ((tfl.zeros_like, 0), (tfl.ones_like, 1),
                        (lambda t, **kw: tfl.full_like(t, 5, **kw), 5)):
        t = make(x)
        assert t.shape == (1, 3) and t.dtype == np.int32
        assert t.tolist() == [[value] * 3]
        assert make(x, dtype="float64").dtype == np.float64


def test_random_creation() -> None:
    tfl.manual_seed(0)
    a = tfl.randn(2, 3)
    assert a.shape == (2, 3) and a.dtype == np.float32
    assert tfl.randn((4,)).shape == (4,)
    assert tfl.randn(2, dtype="float64").dtype == np.float64
    u = tfl.rand(1000)
    assert u.dtype == np.float32
    assert u.numpy().min() >= 0.0 and u.numpy().max() < 1.0
    assert 0.4 < u.numpy().mean() < 0.6
    n = tfl.randn(20000, dtype="float64").numpy()
    assert abs(n.mean()) < 0.05 and 0.95 < n.std() < 1.05
    w = tfl.randn(3, requires_grad=True)
    assert w.requires_grad and w.is_leaf


def test_manual_seed_reproduces_draws() -> None:
    tfl.manual_seed(1234)
    first = (tfl.randn(5).numpy(), tfl.rand(3).numpy())
    tfl.manual_seed(1234)
    again = (tfl.randn(5).numpy(), tfl.rand(3).numpy())
    np.testing.assert_array_equal(first[0], again[0])
    np.testing.assert_array_equal(first[1], again[1])
    assert not np.array_equal(first[0], tfl.randn(5).numpy())  # the stream moves on
    tfl.manual_seed(1235)
    assert not np.array_equal(first[0], tfl.randn(5).numpy())  # another seed, other numbers


# --- Attributes ---------------------------------------------------------------------------------


def test_attributes_of_a_plain_tensor() -> None:
    t = tfl.tensor([[1.0, 2.0, 3.0], [4.0, 5.0, 6.0]])
    assert t.shape == (2, 3) and type(t.shape) is tuple
    assert all(type(d) is int for d in t.shape)
    assert t.dtype == np.float32 and isinstance(t.dtype, np.dtype)
    assert t.device == "cpu"
    assert t.ndim == 2 and tfl.tensor(1.0).ndim == 0
    assert t.requires_grad is False and t.grad is None
    assert t.is_leaf is True and t.grad_fn is None


def test_attributes_along_the_tape() -> None:
    x = tfl.tensor([1.0, 2.0], requires_grad=True)
    assert x.requires_grad and x.is_leaf and x.grad_fn is None
    y = x * 2
    assert y.requires_grad and not y.is_leaf and y.grad_fn == "mul"
    assert (y.sum()).grad_fn == "sum" and (x @ x).grad_fn == "matmul"
    assert (x > 1).requires_grad is False  # comparisons carry no gradient
    y.sum().backward()
    assert isinstance(x.grad, tfl.Tensor) and x.grad.tolist() == [2.0, 2.0]
    x.requires_grad = False
    assert not x.requires_grad and not (x * 2).requires_grad
    with pytest.raises(tfl.AutodiffError):
        y.requires_grad = False  # only a leaf can be switched off


def test_requires_grad_can_be_switched_on_later() -> None:
    w = tfl.tensor([3.0])
    w.requires_grad = True
    assert w.requires_grad and w.is_leaf
    (w * w).sum().backward()
    assert w.grad.tolist() == [6.0]


# --- Getting values out -------------------------------------------------------------------------


def test_numpy_and_asarray() -> None:
    t = tfl.tensor([[1.0, 2.0], [3.0, 4.0]])
    a = t.numpy()
    assert isinstance(a, np.ndarray) and a.dtype == np.float32
    np.testing.assert_array_equal(a, [[1.0, 2.0], [3.0, 4.0]])
    b = np.asarray(t)
    assert isinstance(b, np.ndarray) and b.dtype == np.float32
    np.testing.assert_array_equal(b, a)
    assert np.asarray(t, dtype=np.float64).dtype == np.float64
    assert np.array(t).shape == (2, 2)
    assert float(np.sum(np.asarray(t))) == 10.0
    x = tfl.tensor([1.0], requires_grad=True)
    assert np.asarray(x * 2).tolist() == [2.0]  # works on tape tensors too


def test_item_and_tolist() -> None:
    assert tfl.tensor(3.5).item() == 3.5 and type(tfl.tensor(3.5).item()) is float
    assert tfl.tensor([[7]]).item() == 7 and type(tfl.tensor([[7]]).item()) is int
    assert type(tfl.tensor(True).item()) is bool
    assert tfl.tensor([[1, 2], [3, 4]]).tolist() == [[1, 2], [3, 4]]
    assert tfl.tensor(2.0).tolist() == 2.0
    with pytest.raises(tfl.ShapeError):
        tfl.ones(2).item()


def test_detach() -> None:
    x = tfl.tensor([1.0, 2.0], requires_grad=True)
    y = (x * 3).detach()
    assert not y.requires_grad and y.is_leaf and y.grad_fn is None
    assert y.tolist() == [3.0, 6.0] and y.dtype == x.dtype
    d = x.detach()
    assert d is not x and not d.requires_grad and x.requires_grad
    np.testing.assert_array_equal(d.numpy(), x.numpy())


def test_to_cpu_on_a_cpu_tensor_is_itself() -> None:
    t = tfl.ones(2)
    assert t.to("cpu") is t
    assert t.to("CPU") is t
    assert t.cpu() is t


def test_len_and_iteration() -> None:
    t = tfl.tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
    assert len(t) == 3
    rows = list(t)
    assert len(rows) == 3 and all(isinstance(r, tfl.Tensor) for r in rows)
    assert [r.tolist() for r in rows] == [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    assert [v.item() for v in tfl.tensor([4, 5])] == [4, 5]
    x = tfl.tensor([1.0, 2.0, 3.0], requires_grad=True)
    total = tfl.tensor(0.0)
    for i, v in enumerate(x):  # iterating is indexing, so it is differentiable
        total = total + v * (i + 1)
    total.backward()
    assert x.grad.tolist() == [1.0, 2.0, 3.0]
    with pytest.raises(tfl.ShapeError):
        len(tfl.tensor(1.0))


def test_repr() -> None:
    r = repr(tfl.tensor([[1.0, 2.0], [3.0, 4.0]]))
    assert r.startswith("tensor(") and "dtype=float32" in r
    assert "1." in r and "4." in r
    assert "dtype=int64" in repr(tfl.tensor([1, 2]))
    x = tfl.tensor([1.0], requires_grad=True)
    assert "requires_grad=True" in repr(x)
    assert "grad_fn=<mul>" in repr(x * 2)
    assert "device" not in repr(x)  # the CPU is the default and is not repeated
    assert repr(tfl.tensor(2.5)) == "tensor(2.5, dtype=float32)"


def test_bool_float_int_of_one_element_tensors() -> None:
    assert bool(tfl.tensor([1.0])) is True and bool(tfl.tensor(0.0)) is False
    assert bool(tfl.tensor([[3]])) is True
    assert float(tfl.tensor([[2.5]])) == 2.5
    assert int(tfl.tensor(7.9)) == 7
    assert [10, 20, 30][tfl.tensor(1)] == 20  # an integer tensor works as an index
    assert (tfl.tensor(2.0) > 1) and not (tfl.tensor(2.0) < 1)  # `if t > 0:` works
    for make in (lambda: bool(tfl.ones(2)), lambda: float(tfl.ones(2))):
        with pytest.raises(tfl.ShapeError):
            make()


# --- Operators with NumPy arrays and Python scalars ---------------------------------------------

REFLECTED = [
    ("+", lambda a, t: a + t, lambda a, b: a + b),
    ("-", lambda a, t: a - t, lambda a, b: a - b),
    ("*", lambda a, t: a * t, lambda a, b: a * b),
    ("/", lambda a, t: a / t, lambda a, b: a / b),
    ("**", lambda a, t: a ** t, lambda a, b: a ** b),
    ("@", lambda a, t: a @ t, lambda a, b: a @ b),
    ("<", lambda a, t: a < t, lambda a, b: a < b),
    ("<=", lambda a, t: a <= t, lambda a, b: a <= b),
    (">", lambda a, t: a > t, lambda a, b: a > b),
    (">=", lambda a, t: a >= t, lambda a, b: a >= b),
    ("==", lambda a, t: a == t, lambda a, b: a == b),
    ("!=", lambda a, t: a != t, lambda a, b: a != b),
]


@pytest.mark.parametrize(("symbol", "with_tensor", "with_numpy"), REFLECTED,
                         ids=[r[0] for r in REFLECTED])
def test_numpy_array_on_the_left_gives_a_tensor(symbol, with_tensor, with_numpy) -> None:
    a = np.array([[1.0, 2.0], [2.0, 0.5]])
    b = np.array([[2.0, 2.0], [1.0, 4.0]])
    out = with_tensor(a, tfl.tensor(b))
    assert isinstance(out, tfl.Tensor), type(out)
    expected = with_numpy(a, b.astype(np.float32))
    assert out.shape == expected.shape
    np.testing.assert_allclose(out.numpy(), expected, rtol=1e-6)


def test_numpy_array_on_the_left_keeps_the_gradient() -> None:
    x = tfl.tensor([1.0, 2.0], requires_grad=True)
    (np.array([3.0, 4.0]) * x).sum().backward()
    assert x.grad.tolist() == [3.0, 4.0]


def test_python_scalars_on_either_side() -> None:
    t = tfl.tensor([1.0, 2.0])
    assert (2 * t).tolist() == [2.0, 4.0] and (t * 2).dtype == np.float32
    assert (1 - t).tolist() == [0.0, -1.0]
    assert (2 / t).tolist() == [2.0, 1.0]
    assert (2 ** t).tolist() == [2.0, 4.0]
    assert (-t).tolist() == [-1.0, -2.0] and (+t) is t
    assert abs(tfl.tensor([-1.5])).tolist() == [1.5]
    assert (t * 2.5).dtype == np.float32  # a Python float does not promote float32
    assert (tfl.tensor([1, 2]) * 2).dtype == np.int64


def test_comparisons_give_bool_tensors() -> None:
    t = tfl.tensor([1.0, 2.0, 3.0])
    for out in (t < 2, t <= 2, t > 2, t >= 2, t == 2, t != 2):
        assert isinstance(out, tfl.Tensor) and out.dtype == np.bool_
    assert (t == 2).tolist() == [False, True, False]
    assert (t != 2).tolist() == [True, False, True]


# --- Identity and hashing -----------------------------------------------------------------------


def test_tensors_are_hashable_by_identity() -> None:
    a = tfl.tensor([1.0, 2.0])
    b = tfl.tensor([1.0, 2.0])
    assert hash(a) == hash(a) and hash(a) == object.__hash__(a)
    table = {a: "a", b: "b"}  # equal values, different keys
    assert len(table) == 2 and table[a] == "a" and table[b] == "b"
    assert len({a, b, a}) == 2
    assert isinstance(a == b, tfl.Tensor)  # == is elementwise, not identity


def test_indexing_and_slicing() -> None:
    t = tfl.tensor(np.arange(12.0).reshape(3, 4))
    assert t[1].tolist() == [4.0, 5.0, 6.0, 7.0]
    assert t[:, 1:3].shape == (3, 2)
    assert t[-1, -1].item() == 11.0
    assert t[None].shape == (1, 3, 4) and t[..., 0].tolist() == [0.0, 4.0, 8.0]
    assert t[[0, 2]].shape == (2, 4)
    assert t[t > 9].tolist() == [10.0, 11.0]
    assert t[tfl.tensor([2, 0])][:, 0].tolist() == [8.0, 0.0]
