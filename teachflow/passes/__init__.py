"""The compiler's passes. Each is pure (``Graph -> Graph`` plus its changes; see `base.py`).

Default pipeline, in order: `simplify` (algebraic rules), `constant_fold`, `cse`, `dce`, `fuse`.
"""

from __future__ import annotations

from typing import Any

from teachflow.errors import TeachflowError
from teachflow.passes.base import BuiltinPass, Change, FunctionPass, Pass, as_pass, diff_changes
from teachflow.passes.constant_fold import ConstantFold
from teachflow.passes.cse import CSE
from teachflow.passes.dce import DCE
from teachflow.passes.fuse import fuse
from teachflow.passes.simplify import simplify

#: The built-in passes by name.
PASSES: dict[str, Pass] = {
    "simplify": simplify,
    "constant_fold": ConstantFold(),
    "cse": CSE(),
    "dce": DCE(),
    "fuse": fuse,
}

DEFAULT_PIPELINE = ("simplify", "constant_fold", "cse", "dce", "fuse")


def resolve(passes: Any) -> list[Pass]:
    """`passes` as given to tfl.compile: "default", None, or a list of names and passes."""
    if passes is None:
        return []
    if isinstance(passes, str):
        passes = DEFAULT_PIPELINE if passes == "default" else [passes]
    elif not isinstance(passes, list | tuple):  # one pass on its own
        passes = [passes]
    resolved = []
    for p in passes:
        if isinstance(p, str):
            if p not in PASSES:
                raise TeachflowError(f"unknown pass {p!r}", op="compile",
                                     hint=f"built-in passes: {', '.join(PASSES)}")
            resolved.append(PASSES[p])
        else:
            resolved.append(as_pass(p))
    return resolved


__all__ = ["DEFAULT_PIPELINE", "PASSES", "BuiltinPass", "Change", "FunctionPass", "Pass",
           "as_pass", "diff_changes", "resolve"]
