"""Errors a learner can act on.

Every mistake a learner makes with teachflow must surface as a `TeachflowError` whose message
names the op, describes the operands, says what disagrees, and points at the learner's own line of
code (here: the line of *this test file* that made the mistake), never at a teachflow file. A NumPy
error behind it is kept as ``__cause__``. The subclasses are also the matching built-in exceptions,
so ``except ValueError`` written against NumPy keeps working.
"""

from __future__ import annotations

import inspect
import os
import re
import threading
import warnings

import numpy as np
import pytest

import teachflow as tfl
from teachflow.core import backends, errors

HERE = os.path.basename(__file__)
PACKAGE_DIR = os.path.dirname(os.path.abspath(tfl.__file__)) + os.sep


# --- Helpers ------------------------------------------------------------------------------------


def assert_points_at_test(info: pytest.ExceptionInfo) -> None:
    """The error names this test's own line: the line where the exception left the test's code.

    ``info.tb`` is the traceback entry of the frame that holds the ``with pytest.raises`` block,
    i.e. the test itself, and ``tb_lineno`` is the line in it whose call raised.
    """
    test_frame = info.tb
    assert test_frame.tb_frame.f_code.co_filename == __file__
    lineno = test_frame.tb_lineno
    err = info.value
    message = str(err)
    assert f"{HERE}:{lineno}" in message, message
    # The only file:line in the message is the test's, not one inside teachflow.
    assert re.findall(r"([\w.-]+\.py):(\d+)", message) == [(HERE, str(lineno))], message
    assert err.location is not None
    assert os.path.abspath(err.location.filename) == os.path.abspath(__file__)
    assert not os.path.abspath(err.location.filename).startswith(PACKAGE_DIR)
    assert err.location.lineno == lineno


def described(err: BaseException) -> str:
    """The message without its "at file:line: source" line, which quotes the test's own code (so
    a shape written in the test would otherwise always be found in the message)."""
    return "\n".join(line for line in str(err).splitlines() if not line.startswith("  at "))


def names_shape(message: str, shape: tuple) -> bool:
    """A shape may be written ``(2, 3)``, ``[2, 3]`` or ``[2,3]`` (as in ``f32[2,3]``)."""
    inner = ", ".join(str(d) for d in shape)
    forms = [f"({inner}{',' if len(shape) == 1 else ''})", f"[{inner}]",
             "[" + ",".join(str(d) for d in shape) + "]"]
    return any(form in message for form in forms)


def lineno() -> int:
    """The line of the caller that is running now."""
    return inspect.currentframe().f_back.f_lineno


# --- The hierarchy ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cls", "bases"),
    [
        (tfl.ShapeError, (ValueError,)),
        (tfl.IndexingError, (tfl.ShapeError, ValueError, IndexError)),
        (tfl.DTypeError, (TypeError,)),
        (tfl.ArgumentError, (TypeError,)),
        (tfl.DeviceError, (RuntimeError,)),
        (tfl.TraceError, ()),
        (tfl.GradingError, ()),
        (tfl.AutodiffError, ()),
    ],
)
def test_every_error_is_a_teachflow_error_and_its_builtin(cls: type, bases: tuple) -> None:
    assert issubclass(cls, tfl.TeachflowError)
    assert issubclass(cls, Exception)
    for base in bases:
        assert issubclass(cls, base)
    assert getattr(errors, cls.__name__) is cls  # the public name is the one errors.py defines
    assert cls.__name__ in tfl.__all__


def test_teachflow_error_base_is_an_exception() -> None:
    assert issubclass(tfl.TeachflowError, Exception)
    assert tfl.TeachflowError is errors.TeachflowError
    assert "TeachflowError" in tfl.__all__


def test_catching_the_builtin_catches_teachflow_errors() -> None:
    a, b = tfl.ones(2, 3), tfl.ones(4, 5)
    with pytest.raises(ValueError):
        a @ b
    with pytest.raises(IndexError):
        a[7]
    with pytest.raises(TypeError):
        tfl.tensor([1, 2], requires_grad=True)
    with pytest.raises(RuntimeError):
        tfl.tensor(1.0, device="tpu")


def test_error_renders_op_operands_hint_and_location() -> None:
    operands = ("x: float32[2] on cpu",)
    err, line = tfl.TeachflowError("it broke", op="f", operands=operands, hint="do less"), lineno()
    text = str(err)
    assert text.startswith("f: it broke")
    assert "x: float32[2] on cpu" in text
    assert "hint: do less" in text
    assert f"{HERE}:{line}" in text
    assert (err.op, err.operands, err.hint, err.message) == ("f", operands, "do less", "it broke")
    assert err.location.lineno == line
    assert "tfl.TeachflowError" in err.location.line  # the source text of the user's line
    assert str(err.location) == f"{HERE}:{line}"


def test_error_with_an_explicit_location_keeps_it() -> None:
    where = errors.SourceLocation("/somewhere/lesson.py", 42, "f")
    err = tfl.ShapeError("bad", location=where)
    assert err.location is where
    assert "lesson.py:42" in str(err)
    assert err.op is None and str(err).startswith("bad")


def test_location_is_the_innermost_user_frame() -> None:
    def users_helper(a, b):
        return a @ b

    with pytest.raises(tfl.ShapeError) as info:
        users_helper(tfl.ones(2, 3), tfl.ones(4, 5))
    helper_line = users_helper.__code__.co_firstlineno + 1
    assert info.value.location.lineno == helper_line
    assert f"{HERE}:{helper_line}" in str(info.value)
    assert "return a @ b" in str(info.value)  # the message quotes the learner's line


# --- The mistakes of the brief, one by one ------------------------------------------------------


def test_matmul_shape_mismatch() -> None:
    a, b = tfl.ones(2, 3), tfl.ones(4, 5)
    with pytest.raises(tfl.ShapeError) as info:
        a @ b
    message = described(info.value)
    assert "matmul" in message and info.value.op == "matmul"
    assert names_shape(message, (2, 3)) and names_shape(message, (4, 5))
    # which dimensions disagree: 3 (a's last) against 4 (b's second-to-last)
    assert re.search(r"dimension\D{0,12}\b3\b", message), message
    assert re.search(r"dimension\D{0,12}\b4\b", message), message
    assert "float32" in message and "cpu" in message  # operand descriptions
    assert info.value.hint
    assert_points_at_test(info)


def test_matmul_mismatch_via_function_and_vectors() -> None:
    with pytest.raises(tfl.ShapeError) as info:
        tfl.matmul(tfl.ones(3), tfl.ones(4))
    assert "matmul" in described(info.value)
    assert names_shape(described(info.value), (3,)) and names_shape(described(info.value), (4,))
    assert_points_at_test(info)


def test_broadcast_mismatch_in_add_names_the_dimension() -> None:
    a, b = tfl.ones(2, 3), tfl.ones(4, 3)
    with pytest.raises(tfl.ShapeError) as info:
        a + b
    message = described(info.value)
    assert "add" in message and info.value.op == "add"
    assert names_shape(message, (2, 3)) and names_shape(message, (4, 3))
    assert re.search(r"dimension (0|-2)\b", message), message  # the first axis disagrees
    assert "2" in message and "4" in message
    assert_points_at_test(info)


def test_broadcast_mismatch_in_other_binary_ops() -> None:
    with pytest.raises(tfl.ShapeError) as info:
        tfl.ones(3) * tfl.ones(4)
    message = described(info.value)
    assert "mul" in message and re.search(r"dimension (0|-1)\b", message)
    assert_points_at_test(info)
    with pytest.raises(tfl.ShapeError) as info:
        tfl.maximum(tfl.ones(2, 5), tfl.ones(3))
    assert "maximum" in described(info.value)
    assert_points_at_test(info)


def test_reshape_to_a_wrong_size() -> None:
    a = tfl.ones(2, 3)
    with pytest.raises(tfl.ShapeError) as info:
        a.reshape(7)
    message = described(info.value)
    assert "reshape" in message
    assert names_shape(message, (2, 3)) and names_shape(message, (7,))
    assert "6" in message  # the number of elements it has
    assert_points_at_test(info)
    with pytest.raises(tfl.ShapeError) as info:
        tfl.reshape(a, (-1, 4))
    assert "reshape" in described(info.value) and "4" in described(info.value)
    assert_points_at_test(info)


def test_bad_axis_in_sum() -> None:
    a = tfl.ones(2, 3)
    with pytest.raises(tfl.ShapeError) as info:
        a.sum(axis=5)
    message = described(info.value)
    assert "sum" in message and "5" in message
    assert "2" in message  # the tensor's number of dimensions
    assert_points_at_test(info)
    with pytest.raises(tfl.ShapeError) as info:
        tfl.sum(a, axis=-3)
    assert "-3" in described(info.value)
    assert_points_at_test(info)
    with pytest.raises(tfl.ShapeError) as info:
        a.mean(axis=(0, 0))
    assert "mean" in described(info.value)
    assert_points_at_test(info)


def test_bad_axis_in_sum_names_the_operand_shape() -> None:
    with pytest.raises(tfl.ShapeError) as info:
        tfl.ones(2, 3).sum(axis=5)
    assert names_shape(described(info.value), (2, 3)), described(info.value)


def test_bad_index() -> None:
    a = tfl.ones(2, 3)
    with pytest.raises(tfl.IndexingError) as info:
        a[5]
    err = info.value
    assert isinstance(err, IndexError) and isinstance(err, tfl.ShapeError)
    assert "getitem" in described(err) and "5" in described(err)
    assert names_shape(described(err), (2, 3))
    assert_points_at_test(info)
    with pytest.raises(tfl.IndexingError) as info:
        a[0, 7]
    assert "7" in described(info.value)
    assert_points_at_test(info)
    with pytest.raises(tfl.IndexingError) as info:
        a[0, 0, 0]
    assert_points_at_test(info)
    with pytest.raises(tfl.IndexingError) as info:
        a[np.array([0, 9])]
    assert "9" in described(info.value)
    assert_points_at_test(info)


def test_index_of_a_wrong_type() -> None:
    a = tfl.ones(2, 3)
    with pytest.raises(tfl.DTypeError) as info:
        a[1.5]
    assert "getitem" in described(info.value)
    assert_points_at_test(info)
    with pytest.raises(tfl.DTypeError) as info:
        a[tfl.tensor([0.5])]
    assert "float32" in described(info.value)
    assert_points_at_test(info)


def test_requires_grad_on_an_integer_tensor() -> None:
    with pytest.raises(tfl.DTypeError) as info:
        tfl.tensor([1, 2], requires_grad=True)
    err = info.value
    assert isinstance(err, TypeError)
    assert "int64" in described(err) and "requires_grad" in described(err)
    assert err.hint and "float" in err.hint
    assert_points_at_test(info)
    t = tfl.tensor([True, False])
    with pytest.raises(tfl.DTypeError) as info:
        t.requires_grad = True
    assert "bool" in described(info.value)
    assert_points_at_test(info)
    assert t.requires_grad is False  # the failed attempt left it untouched


def test_backward_on_a_non_scalar() -> None:
    y = tfl.ones(3, requires_grad=True).exp()
    with pytest.raises(tfl.AutodiffError) as info:
        y.backward()
    message = described(info.value)
    assert "backward" in message and names_shape(message, (3,))
    assert "scalar" in message
    assert info.value.hint
    assert_points_at_test(info)


def test_backward_with_a_grad_of_the_wrong_shape() -> None:
    y = tfl.ones(2, requires_grad=True) * 2
    with pytest.raises(tfl.AutodiffError) as info:
        y.backward(tfl.ones(3))
    assert names_shape(described(info.value), (3,)) and names_shape(described(info.value), (2,))
    assert_points_at_test(info)


def test_backward_on_a_tensor_that_needs_no_grad() -> None:
    loss = tfl.ones(3).sum()
    with pytest.raises(tfl.AutodiffError) as info:
        loss.backward()
    assert "backward" in described(info.value) and "requires_grad" in described(info.value)
    assert_points_at_test(info)
    x = tfl.ones(3, requires_grad=True)
    with tfl.no_grad():
        loss = (x * 2).sum()
    with pytest.raises(tfl.AutodiffError) as info:
        loss.backward()
    assert_points_at_test(info)


def test_grad_of_a_function_returning_a_non_scalar() -> None:
    df = tfl.grad(lambda x: x * 2)
    with pytest.raises(tfl.AutodiffError) as info:
        df(tfl.ones(3))
    message = described(info.value)
    assert "grad" in message and names_shape(message, (3,)) and "scalar" in message
    assert_points_at_test(info)
    with pytest.raises(tfl.AutodiffError) as info:
        tfl.grad(lambda x: 3.0)(tfl.ones(3))
    assert "float" in described(info.value)
    assert_points_at_test(info)


def test_grad_with_respect_to_an_integer_argument() -> None:
    with pytest.raises(tfl.DTypeError) as info:
        tfl.grad(lambda x: x.sum())(tfl.tensor([1, 2]))
    assert "int64" in described(info.value)
    assert_points_at_test(info)


def test_grad_with_argnums_out_of_range() -> None:
    with pytest.raises(tfl.AutodiffError) as info:
        tfl.grad(lambda x: x.sum(), argnums=3)(tfl.ones(2))
    assert "argnums" in described(info.value)
    assert_points_at_test(info)


def test_unknown_device_string() -> None:
    with pytest.raises(tfl.DeviceError) as info:
        tfl.tensor([1.0], device="tpu")
    assert "'tpu'" in described(info.value)
    assert "cpu" in info.value.hint
    assert_points_at_test(info)
    with pytest.raises(tfl.DeviceError) as info:
        tfl.zeros(2, device="quantum")
    assert "quantum" in described(info.value)
    assert_points_at_test(info)
    with pytest.raises(tfl.DeviceError) as info:
        tfl.ones(2).to("tpu")
    assert_points_at_test(info)


def test_asking_for_an_unusable_gpu_says_why() -> None:
    reason = backends.gpu_unavailable_reason()
    if reason is None:
        pytest.skip("a GPU is usable here")
    for device in ("gpu", "cuda", "cuda:0"):
        with pytest.raises(tfl.DeviceError) as info:
            tfl.tensor([1.0], device=device)
        assert reason in described(info.value)
        assert_points_at_test(info)
    with pytest.raises(tfl.DeviceError) as info:
        tfl.ones(2).to("gpu")
    assert reason in described(info.value)
    assert_points_at_test(info)


def test_an_unusable_gpu_says_why_even_where_one_exists(monkeypatch) -> None:
    why = "CuPy is not installed (pretend); install it with `pip install teachflow[gpu]`"
    monkeypatch.setattr(backends, "_gpu_backend", lambda: why)
    with pytest.raises(tfl.DeviceError) as info:
        tfl.zeros(3, device="gpu")
    assert why in described(info.value) and "gpu" in described(info.value).lower()
    assert_points_at_test(info)
    assert tfl.devices() == ["cpu"]


# --- The NumPy error is kept as __cause__ -------------------------------------------------------


@pytest.mark.parametrize(
    ("mistake", "expected", "cause"),
    [
        pytest.param(lambda: tfl.ones(2, 3) @ tfl.ones(4, 5), tfl.ShapeError, ValueError,
                     id="matmul"),
        pytest.param(lambda: tfl.ones(2, 3) + tfl.ones(4, 3), tfl.ShapeError, ValueError,
                     id="add"),
        pytest.param(lambda: tfl.ones(2, 3).reshape(7), tfl.ShapeError, ValueError,
                     id="reshape"),
        pytest.param(lambda: tfl.ones(2, 3)[5], tfl.IndexingError, IndexError, id="getitem"),
        pytest.param(lambda: tfl.concatenate([tfl.ones(2, 3), tfl.ones(2, 4)]), tfl.ShapeError,
                     ValueError, id="concatenate"),
        pytest.param(lambda: tfl.stack([tfl.ones(2), tfl.ones(3)]), tfl.ShapeError, ValueError,
                     id="stack"),
        pytest.param(lambda: tfl.broadcast_to(tfl.ones(2, 3), (3, 3)), tfl.ShapeError,
                     ValueError, id="broadcast_to"),
        pytest.param(lambda: tfl.tensor([2]) ** -1, tfl.TeachflowError, ValueError,
                     id="kernel-failure-fallback"),
    ],
)
def test_numpy_error_is_kept_as_cause(mistake, expected: type, cause: type) -> None:
    with pytest.raises(expected) as info:
        mistake()
    err = info.value
    assert isinstance(err.__cause__, cause)
    assert not isinstance(err.__cause__, tfl.TeachflowError)
    assert type(err.__cause__).__module__ == "builtins"  # NumPy raises plain built-ins
    assert err.op is not None and err.op in described(err)
    # The location is the lambda's line in this file, where the mistake was written.
    assert f"{HERE}:{mistake.__code__.co_firstlineno}" in str(err)


# --- A learner never sees a bare built-in error for a mistake -----------------------------------

MISTAKES = [
    pytest.param(lambda: tfl.ones(2, 3) @ tfl.ones(4, 5), id="matmul"),
    pytest.param(lambda: tfl.ones(2, 3) @ 2, id="matmul-scalar"),
    pytest.param(lambda: tfl.tensor(1.0) @ tfl.ones(2), id="matmul-0d"),
    pytest.param(lambda: tfl.ones(2, 3) + tfl.ones(4, 3), id="add-broadcast"),
    pytest.param(lambda: tfl.ones(2, 3) + [1.0, 2.0], id="add-list-broadcast"),
    pytest.param(lambda: tfl.ones(2, 3) + "x", id="add-string"),
    pytest.param(lambda: tfl.ones(2, 3) + None, id="add-none"),
    pytest.param(lambda: tfl.where(tfl.ones(2) > 0, tfl.ones(2, 3), tfl.ones(4)), id="where"),
    pytest.param(lambda: tfl.ones(2, 3).reshape(7), id="reshape"),
    pytest.param(lambda: tfl.ones(2, 3).reshape("a"), id="reshape-string"),
    pytest.param(lambda: tfl.ones(2, 3).transpose(0, 0), id="transpose"),
    pytest.param(lambda: tfl.tensor(1.0).transpose(1), id="transpose-0d"),
    pytest.param(lambda: tfl.broadcast_to(tfl.ones(2, 3), (3,)), id="broadcast_to"),
    pytest.param(lambda: tfl.ones(2, 3).sum(axis=5), id="sum-axis"),
    pytest.param(lambda: tfl.ones(2, 3).sum(axis=(1, 1)), id="sum-axis-twice"),
    pytest.param(lambda: tfl.ones(2, 3).max(axis=-3), id="max-axis"),
    pytest.param(lambda: tfl.zeros(0).max(), id="max-empty"),
    pytest.param(lambda: tfl.softmax(tfl.ones(2, 3), axis=4), id="softmax-axis"),
    pytest.param(lambda: tfl.concatenate([]), id="concatenate-empty"),
    pytest.param(lambda: tfl.concatenate([tfl.ones(2, 3), tfl.ones(3)]), id="concatenate-ndim"),
    pytest.param(lambda: tfl.concatenate([tfl.ones(2, 3)], axis=5), id="concatenate-axis"),
    pytest.param(lambda: tfl.stack([tfl.ones(2), tfl.ones(2)], axis=5), id="stack-axis"),
    pytest.param(lambda: tfl.ones(2, 3)[5], id="index"),
    pytest.param(lambda: tfl.ones(2, 3)[np.array([True, False, True])], id="index-mask"),
    pytest.param(lambda: tfl.ones(2, 3)[1.5], id="index-float"),
    pytest.param(lambda: tfl.ones(2, 3)["x"], id="index-string"),
    pytest.param(lambda: [1, 2, 3][tfl.tensor(1.0)], id="float-tensor-as-index"),
    pytest.param(lambda: tfl.tensor([[1, 2], [3]]), id="ragged-list"),
    pytest.param(lambda: tfl.tensor(None), id="tensor-of-none"),
    pytest.param(lambda: tfl.zeros("a"), id="zeros-string-shape"),
    pytest.param(lambda: tfl.tensor([1, 2], requires_grad=True), id="int-requires-grad"),
    pytest.param(lambda: tfl.ones(2, 3).item(), id="item"),
    pytest.param(lambda: bool(tfl.ones(2)), id="bool"),
    pytest.param(lambda: float(tfl.ones(3)), id="float"),
    pytest.param(lambda: len(tfl.tensor(1.0)), id="len-0d"),
    pytest.param(lambda: list(tfl.tensor(1.0)), id="iter-0d"),
    pytest.param(lambda: tfl.ones(3, requires_grad=True).exp().backward(), id="backward-vector"),
    pytest.param(lambda: tfl.ones(3).sum().backward(), id="backward-untracked"),
    pytest.param(lambda: tfl.grad(lambda x: x * 2)(tfl.ones(3)), id="grad-vector"),
    pytest.param(lambda: tfl.grad(lambda x: None)(tfl.ones(3)), id="grad-none"),
    pytest.param(lambda: tfl.grad(lambda x: x.sum(), argnums=2)(tfl.ones(3)), id="argnums"),
    pytest.param(lambda: tfl.tensor(1.0, device="tpu"), id="device"),
    pytest.param(lambda: tfl.tensor(1.0, device=3), id="device-int"),
    pytest.param(lambda: tfl.zeros(-1), id="negative-size"),
    # Found by this suite once: bare built-in errors escaped for these mistakes.
    pytest.param(lambda: tfl.ones(2, 3).sum(axis="x"), id="sum-axis-string"),
    pytest.param(lambda: tfl.ones(2, 3).sum(axis=1.5), id="sum-axis-float"),
    pytest.param(lambda: tfl.tensor([[1, 2], [3]], dtype="float32"), id="ragged-list-with-dtype"),
    pytest.param(lambda: tfl.ones(2, 2) + [[1.0, 2.0], [3.0]], id="ragged-list-operand"),
    pytest.param(lambda: tfl.tensor([1.0], dtype="junk"), id="unknown-dtype"),
    pytest.param(lambda: tfl.ones(2).astype("junk"), id="astype-unknown-dtype"),
    pytest.param(lambda: tfl.tensor("abc"), id="string-data"),
    pytest.param(lambda: tfl.full((2,), "x"), id="string-fill"),
    pytest.param(lambda: tfl.randn(2, dtype="int32"), id="integer-random"),
    pytest.param(lambda: tfl.tensor([2]) ** -1, id="integer-negative-power"),
    pytest.param(lambda: tfl.zeros((2, 3)).transpose(0, 3), id="transpose-axis-out-of-range"),
    pytest.param(lambda: tfl.zeros(0).argmax(), id="argmax-empty"),
    pytest.param(lambda: tfl.ones(2, 3).argmin(axis=(0, 1)), id="argmin-two-axes"),
    pytest.param(lambda: tfl.ones(2).clip(), id="clip-no-bound"),
    pytest.param(lambda: tfl.ones(2, 3).unsqueeze(5), id="unsqueeze-axis"),
    pytest.param(lambda: tfl.ones(2, 3).size(2), id="size-axis"),
    pytest.param(lambda: tfl.arange(0, 1, 0), id="arange-step-0"),
    pytest.param(lambda: tfl.softmax(tfl.tensor(1.0), axis=1), id="softmax-0d-axis"),
    pytest.param(lambda: np.arctan(tfl.ones(2)), id="ufunc-without-op"),
    pytest.param(lambda: np.add(tfl.ones(2), 1, out=np.empty(2)), id="ufunc-out"),
    # Found by the second adversarial round: arguments of the wrong kind.
    pytest.param(lambda: tfl.manual_seed("abc"), id="seed-string"),
    pytest.param(lambda: tfl.manual_seed(1.5), id="seed-float"),
    pytest.param(lambda: tfl.concatenate([tfl.ones(2)], axis=None), id="cat-axis-none"),
    pytest.param(lambda: tfl.stack([tfl.ones(2), tfl.ones(2)], axis="1"), id="stack-axis-string"),
    pytest.param(lambda: tfl.ones(2, 3).transpose(None), id="transpose-none"),
    pytest.param(lambda: tfl.ones(2, 3).unsqueeze(None), id="unsqueeze-none"),
    pytest.param(lambda: tfl.ones(2, 3).sum(1, dim=1), id="axis-and-dim"),
    pytest.param(lambda: tfl.mean(tfl.ones(2, 3), 0, True, keepdim=True), id="keepdims-twice"),
    pytest.param(lambda: tfl.cat([tfl.ones(2), tfl.ones(2)], 0, dim=0), id="cat-axis-and-dim"),
    pytest.param(lambda: tfl.ones(2, 3).softmax(axes=1), id="unknown-keyword"),
    pytest.param(lambda: tfl.grad(None)(tfl.ones(2)), id="grad-of-none"),
    pytest.param(lambda: tfl.grad(lambda x: x.sum(), argnums=None), id="argnums-none"),
    pytest.param(lambda: tfl.value_and_grad(lambda x: x.sum(), argnums=()), id="argnums-empty"),
    pytest.param(lambda: tfl.grad(lambda x: x.sum(), argnums=True), id="argnums-bool"),
    pytest.param(lambda: tfl.trace(None, tfl.ones(2)), id="trace-none"),
    pytest.param(lambda: tfl.function(tfl.ones(2)), id="function-of-a-tensor"),
    pytest.param(lambda: tfl.compile(3, tfl.ones(2)), id="compile-an-int"),
    pytest.param(lambda: tfl.TensorSpec((-1, 3)), id="spec-negative-size"),
    pytest.param(lambda: tfl.TensorSpec((2,), device="tpu"), id="spec-device"),
    pytest.param(lambda: tfl.ones(2).reshape((None, 2)), id="reshape-none-size"),
    pytest.param(lambda: tfl.zeros((2, None)), id="zeros-none-size"),
    pytest.param(lambda: tfl.ones(2) & tfl.ones(2), id="and-of-floats"),
    pytest.param(lambda: f"{tfl.ones(2):.3f}", id="format-vector"),
    pytest.param(lambda: tfl.Session(None), id="session-of-none"),
]


@pytest.mark.parametrize("mistake", MISTAKES)
def test_a_mistake_is_a_teachflow_error_pointing_at_the_learner(mistake) -> None:
    with pytest.raises(tfl.TeachflowError) as info:
        mistake()
    err = info.value
    assert err.location is not None
    assert not os.path.abspath(err.location.filename).startswith(PACKAGE_DIR)
    assert f"{HERE}:{mistake.__code__.co_firstlineno}" in str(err)


@pytest.mark.parametrize(
    "mistake",
    [
        pytest.param(lambda: tfl.zeros(-1), id="zeros"),
        pytest.param(lambda: tfl.randn(-2, 3), id="randn"),
    ],
)
def test_a_negative_size_is_a_shape_error(mistake) -> None:
    with pytest.raises(tfl.ShapeError):
        mistake()


def test_reshape_rejects_negative_sizes_other_than_minus_one() -> None:
    with pytest.raises(tfl.ShapeError):
        tfl.ones(2, 3).reshape(-2, 3)


# --- NumPy's warnings point at the learner's line ----------------------------------------------


def _warnings_of(run) -> list[warnings.WarningMessage]:
    """The RuntimeWarnings `run` gives, as a learner sees them (no filter of the test's own:
    `pytest.warns` would show every warning where NumPy raised it)."""
    with warnings.catch_warnings(record=True) as caught:
        run()
    return [w for w in caught if issubclass(w.category, RuntimeWarning)]


def test_numpys_warnings_point_at_the_learners_line_eagerly_staged_and_in_a_session() -> None:
    x = tfl.tensor([-1.0, 2.0])
    staged = tfl.function(lambda a: (a.log() * 2 + 1).tanh())
    unfused = tfl.function(lambda a: a.sqrt() * 2, passes=None)
    with tfl.Graph() as g:
        p = tfl.placeholder((2,), name="p")
        q = (p / 0.0).exp()
    runs = {
        "eager": lambda: x.log(),
        "staged": lambda: staged(x),
        "unfused": lambda: unfused(x),
        "session": lambda: tfl.Session(g).run(q, feed={p: np.array([0.0, 1.0], np.float32)}),
        "folded": lambda: tfl.compile(lambda a: a + tfl.full((), -1.0).log(), x),
    }
    for name, run in runs.items():
        caught = _warnings_of(run)
        assert caught, name
        for w in caught:
            assert w.filename.endswith(HERE), (name, w.filename, str(w.message))
            assert "encountered" in str(w.message)
    with warnings.catch_warnings(record=True) as caught:
        np.log(np.array([-1.0]))  # the learner's own NumPy code warns as ever
    assert caught and caught[0].filename.endswith(HERE)


def test_the_callers_errstate_holds_in_the_threads_of_a_fused_kernel() -> None:
    x = tfl.tensor(-np.ones(1_000_000, np.float32))  # several blocks, on several threads
    staged = tfl.function(lambda a: (a.log() * 2 + 1).tanh())
    staged(tfl.ones(1_000_000))
    with np.errstate(all="ignore"):
        assert _warnings_of(lambda: staged(x)) == []
    (kernel,) = [n.op for n in staged.concrete_functions[0].graph.nodes]
    with np.errstate(invalid="raise"), pytest.raises(FloatingPointError):
        kernel.kernel(np)(x.numpy())  # raised in a worker thread, as the caller asked
    seen: list = []
    with np.errstate(all="call", call=lambda kind, flag: seen.append(kind)):
        staged(x)  # a callback in the workers too (not a NameError there)
    assert "invalid value" in seen


def test_a_warning_is_shown_once_per_line_and_every_kind_of_it_is_shown() -> None:
    def run() -> None:
        x = tfl.tensor([-1.0, 0.0, 2.0])
        staged = tfl.function(lambda a: a.log() * 2)
        for _ in range(3):
            x.log()
            staged(x)

    caught = _warnings_of(run)
    messages = sorted(str(w.message) for w in caught)
    assert messages == ["divide by zero encountered in log"] * 2 + \
        ["invalid value encountered in log"] * 2  # eager and staged, each once, both kinds


def test_tracing_a_value_that_overflows_its_dtype_warns_and_never_raises() -> None:
    x16 = tfl.tensor(np.ones(3, np.float16))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        np.testing.assert_array_equal(tfl.function(lambda x: x + 1e6)(x16).numpy(), np.inf)
        graph = tfl.trace(lambda s: tfl.where(s > 0, s, -1e9), x16)  # a float16 mask idiom
    assert graph.nodes[-1].op.name == "where"


def test_a_staged_call_that_warns_runs_once() -> None:
    """Random draws in it are the eager ones (nothing runs a second time to warn)."""
    f = lambda x: x.log() + tfl.randn(3)
    x = tfl.tensor([-1.0, 2.0, 3.0])
    staged = tfl.function(f)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        staged(x)  # (traced)
        tfl.manual_seed(0)
        eager = [f(x).numpy() for _ in range(2)]
        tfl.manual_seed(0)
        got = [staged(x).numpy() for _ in range(2)]
    np.testing.assert_allclose(got, eager, rtol=1e-6)


def test_warnings_in_threads_leave_the_filters_as_they_were() -> None:
    x = tfl.tensor([-1.0, 0.0])  # (making a tensor puts teachflow's own filter in place)
    before = list(warnings.filters)

    def work() -> None:
        for _ in range(200):
            x.log()

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        threads = [threading.Thread(target=work) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    assert warnings.filters == before
