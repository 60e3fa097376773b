"""`import teachflow` stays light: the heavy optional parts load only when first used; and its
public modules show only their public names."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest


def test_import_does_not_load_plotting_widgets_or_cupy() -> None:
    code = ("import sys, teachflow; "
            "print(sorted(m for m in ('matplotlib', 'ipywidgets', 'anywidget', 'cupy', 'IPython')"
            " if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_public_api_names_exist() -> None:
    import teachflow as tfl

    for name in ["tensor", "zeros", "ones", "full", "randn", "rand", "manual_seed", "no_grad",
                 "grad", "value_and_grad", "matmul", "maximum", "minimum", "where", "softmax",
                 "log_softmax", "broadcast_to", "concatenate", "stack", "sum", "mean", "max",
                 "reshape", "transpose", "exp", "log", "sqrt", "tanh", "relu", "sigmoid", "abs",
                 "devices", "TeachflowError", "ShapeError", "DTypeError", "DeviceError",
                 "TraceError", "GradingError"]:
        assert callable(getattr(tfl, name)), name
    assert set(tfl.__all__) <= set(dir(tfl))


# --- Public namespaces show only public names (issue 26, §4) ------------------------------------

#: Names a public module takes from another chapter on purpose: PyTorch's ``F`` has the
#: activations that teachflow's library defines.
RE_EXPORTS = {"teachflow.nn.functional": {"relu", "sigmoid", "tanh", "softmax", "log_softmax"}}


def public_modules() -> dict[str, types.ModuleType]:
    """The package and every module its tab completion leads to (``tfl.nn``, ``tfl.nn.
    functional``, ``tfl.optim.lr_scheduler``, ``tfl.grading``, ...), found by walking dir()."""
    import teachflow as tfl

    found, todo = {}, [tfl]
    while todo:
        module = todo.pop()
        found[module.__name__] = module
        for name in dir(module):
            value = getattr(module, name)
            if isinstance(value, types.ModuleType) and not name.startswith("__") \
                    and value.__name__ not in found:
                todo.append(value)
    return found


def test_the_walk_reaches_every_public_module() -> None:
    assert {"teachflow", "teachflow.nn", "teachflow.nn.functional", "teachflow.nn.utils",
            "teachflow.optim", "teachflow.optim.lr_scheduler", "teachflow.data",
            "teachflow.testing", "teachflow.grading"} <= set(public_modules())


@pytest.mark.parametrize("name", sorted(public_modules()))
def test_tab_completion_shows_only_the_public_names_of_a_module(name: str) -> None:
    module = public_modules()[name]
    shown = [n for n in dir(module) if not n.startswith("__")]
    assert shown, name
    lazily_imported = {"grading"} if name == "teachflow" else set()
    assert set(shown) == set(module.__all__) | lazily_imported
    for attr in shown:
        value = getattr(module, attr)
        assert attr != "annotations" and getattr(value, "__module__", None) != "typing", attr
        if isinstance(value, types.ModuleType):
            assert value.__name__.startswith("teachflow."), attr  # (no numpy, math, ...)
        elif name != "teachflow" and attr not in RE_EXPORTS.get(name, ()):
            home = getattr(value, "__module__", name) or name
            package = name if hasattr(module, "__path__") else name.rpartition(".")[0]
            assert home.startswith(package), f"{name}.{attr} comes from {home}"


def test_what_the_issue_found_is_gone() -> None:
    import teachflow as tfl

    assert not {"Any", "annotations", "DTypeError", "Tensor", "np"} & set(
        dir(tfl.nn.functional))
    assert not {"no_grad", "zeros", "zeros_like", "Tensor", "Iterable"} & set(dir(tfl.optim))
    assert not {"autodiff", "backends", "dispatch", "_np", "_FOREIGN"} & set(dir(tfl))
    assert "__version__" in dir(tfl) and "__file__" in dir(tfl.nn)
