"""Fuzzing the loader: real saved files, changed at random, either load or raise a
`TeachflowError`, and nothing else escapes.

The changes are those a damaged disk, a bad download or an attacker makes: bytes flipped,
inserted or deleted, a file cut short (of saved.json and of arrays.npz alike), and, for the
manifest as JSON, values replaced by others of any type (huge integers, bools, strings, lists,
nested objects), two values swapped, keys deleted. A file that still loads is called too, if
its graph has no loop (a changed bound could make one run for ever).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any
from unittest import mock

import numpy as np
import pytest
from helpers import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_saved import control_flow

import teachflow as tfl
import teachflow.saved.format
from teachflow.compiler import every_node

X = tfl.randn(2, 3)


def loopless(x: tfl.Tensor) -> tuple:
    h = (x @ tfl.ones(3, 4) + np.arange(4, dtype=np.float32)).relu()
    return h[np.array([1, 0]), ::2].sum(axis=0), tfl.where(h > 1, h, -h).max(axis=1)


@pytest.fixture(scope="module")
def bases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("bases")
    return {"control flow": tfl.save(tfl.compile(control_flow, X), folder / "control"),
            "loopless": tfl.save(tfl.compile(loopless, X), folder / "loopless"),
            "state dict": tfl.save({"w": tfl.randn(3, 2), "b.bias": tfl.zeros(2)},
                                   folder / "state")}


def test_the_files_unchanged_load(bases: dict[str, Path]) -> None:
    for name, base in bases.items():
        loaded = tfl.load(base)
        if name == "state dict":
            assert list(loaded) == ["w", "b.bias"]
        else:
            expected = (control_flow if name == "control flow" else loopless)(X)
            assert all(np.allclose(a.numpy(), b.numpy(), atol=1e-6)
                       for a, b in zip(loaded(X), expected, strict=True))


# --- Changes ------------------------------------------------------------------------------------

JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=8)
    | st.sampled_from(["...", "float32", "object", "cpu", "gpu", "while", "a0", "a1"]),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(
        st.sampled_from(["value", "float", "slice", "array", "hole", "id", "x"]), inner,
        max_size=2),
    max_leaves=6)

BYTE_CHANGES = st.one_of(
    st.tuples(st.just("flip"), st.integers(min_value=0), st.integers(1, 255)),
    st.tuples(st.just("truncate"), st.integers(min_value=0)),
    st.tuples(st.just("delete"), st.integers(min_value=0), st.integers(1, 64)),
    st.tuples(st.just("insert"), st.integers(min_value=0), st.binary(min_size=1, max_size=8)))

JSON_CHANGES = st.one_of(
    st.tuples(st.just("replace"), st.integers(min_value=0), JSON_VALUES),
    st.tuples(st.just("swap"), st.integers(min_value=0), st.integers(min_value=0)),
    st.tuples(st.just("delete key"), st.integers(min_value=0)))

CHANGES = st.one_of(st.tuples(st.sampled_from(["saved.json", "arrays.npz"]), BYTE_CHANGES),
                    st.tuples(st.just("json"), JSON_CHANGES))


def change_bytes(data: bytes, change: tuple) -> bytes:
    at = change[1] % (len(data) + 1)
    if change[0] == "flip":
        return data[:at] + bytes([data[at] ^ change[2]]) + data[at + 1:] if at < len(data) \
            else data
    if change[0] == "truncate":
        return data[:at]
    if change[0] == "delete":
        return data[:at] + data[at + change[2]:]
    return data[:at] + change[2] + data[at:]


def places(data: Any) -> list[tuple[Any, Any]]:
    """Every (container, key) of the document, depth first."""
    found = []
    keys = range(len(data)) if isinstance(data, list) else data if isinstance(data, dict) else ()
    for key in keys:
        found.append((data, key))
        found += places(data[key])
    return found


def change_json(document: Any, change: tuple) -> None:
    spots = places(document)
    if not spots:
        return
    container, key = spots[change[1] % len(spots)]
    if change[0] == "replace":
        container[key] = change[2]
    elif change[0] == "swap":
        other, other_key = spots[change[2] % len(spots)]
        container[key], other[other_key] = other[other_key], container[key]
    elif isinstance(container, dict):
        del container[key]
    else:
        container.pop(key)


def changed_copy(base: Path, folder: Path, changes: list) -> Path:
    shutil.copytree(base, folder)
    for target, change in changes:
        if target == "json":
            manifest = folder / "saved.json"
            try:
                document = json.loads(manifest.read_bytes())
            except ValueError:  # (a byte change before made it JSON no more)
                continue
            change_json(document, change)
            manifest.write_text(json.dumps(document))
        else:
            path = folder / target
            path.write_bytes(change_bytes(path.read_bytes(), change))
    return folder


@settings(max_examples=examples(2000), deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(base=st.sampled_from(["control flow", "loopless", "state dict"]),
       changes=st.lists(CHANGES, min_size=1, max_size=3))
def test_a_changed_file_loads_or_raises_a_teachflow_error(bases: dict[str, Path], base: str,
                                                         changes: list) -> None:
    with tempfile.TemporaryDirectory() as work, \
            mock.patch.object(teachflow.saved.format, "MAX_ELEMENTS", 10_000):
        folder = changed_copy(bases[base], Path(work) / "changed", changes)
        try:
            loaded = tfl.load(folder)
        except tfl.TeachflowError:
            return
        if isinstance(loaded, tfl.saved.SavedFunction) and not any(
                getattr(n.op, "rerun", None) for n in every_node(loaded.graph)):
            args = [np.ones([d or 1 for d in v.shape], v.dtype) for v in loaded.graph.inputs]
            with contextlib.suppress(tfl.TeachflowError):
                loaded(*args)
