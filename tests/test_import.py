"""`import teachflow` stays light: the heavy optional parts load only when first used."""

from __future__ import annotations

import subprocess
import sys


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
