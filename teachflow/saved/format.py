"""The saved format: its name and version, its files, the limits a loader keeps to, and reading
JSON without trusting it.

A saved graph is a directory of two files (``docs/saved-graph.md`` describes every field):

    model/
      saved.json    what was saved: a graph (ops by name, their parameters, the shape and dtype of
                    every value, the graphs control flow owns), or the names of a state dict's
                    tensors
      arrays.npz    the numbers: constants, the values of captured tensors, index arrays

JSON and NumPy's ``.npz`` are read by every language, and neither can hold code: a file says
*which* of teachflow's own ops to apply, never *how*. That is what makes a file from anywhere
safe to load, provided the loader believes nothing it has not checked. The helpers below read
one JSON value each and refuse, naming where in the file, anything but what they expect: a
string where a number belongs, a bool where an int belongs (in Python, ``True`` *is* an int), an
integer too big for int64, an unknown key. Limits bound what a file can make the loader do
before it has checked it: how much it reads, how big a value it may declare, how deep graphs
nest.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from teachflow.core.errors import TeachflowError

FORMAT = "teachflow.saved"
#: (major, minor). A newer minor version may use ops or parameters this teachflow does not know,
#: which it refuses by name; a newer major version may change anything, so it is refused whole.
#: 1.1 adds the functions a graph calls; a file without calls is written as 1.0.
VERSION = (1, 1)
MANIFEST = "saved.json"
ARRAYS = "arrays.npz"

MAX_JSON_BYTES = 64 << 20
MAX_ARRAY_BYTES = 4 << 30  # all arrays together, as their headers declare them
MAX_ARRAYS = 100_000
MAX_ELEMENTS = 1 << 31  # of any one value a graph declares (an input, a node's result)
MAX_NDIM = 32
MAX_GRAPH_DEPTH = 32  # graphs inside graphs (a cond inside a loop inside a cond...)
MAX_NAME = 200
INT64 = (-(1 << 63), (1 << 63) - 1)

DTYPES = ("bool", "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64",
          "float16", "float32", "float64", "complex64", "complex128")
#: The CPU, the GPU, and the CPU's logical devices (``tfl.set_logical_devices``): a graph loaded
#: where a device it names is not there says so when it is loaded.
DEVICES = ("cpu", "gpu", *(f"cpu:{i}" for i in range(1, 64)))


class SavedGraphError(TeachflowError, ValueError):
    """A saved graph or state dict that cannot be loaded as it is (malformed, truncated, written
    by a newer teachflow, or hostile); the message names the file and the place in it."""


def refuse(where: str, message: str, hint: str | None = None) -> SavedGraphError:
    return SavedGraphError(f"{where}: {message}", op="load", hint=hint)


def shown(data: Any) -> str:
    """A JSON value as a message names it, briefly (a hostile list may nest a thousand deep)."""
    if isinstance(data, bool) or data is None:
        return json.dumps(data)
    if isinstance(data, int | float):
        return f"the number {data!r}"
    if isinstance(data, str):
        return f"the string {data[:40]!r}" + ("..." if len(data) > 40 else "")
    if isinstance(data, list):
        return f"a list of {len(data)}"
    return "an object" if isinstance(data, dict) else type(data).__name__


# --- Parsing ------------------------------------------------------------------------------------


def parse_json(raw: bytes, where: str) -> Any:
    """`raw` as JSON, refusing what JSON parsers disagree on: duplicate keys (which one wins?),
    NaN and Infinity (not JSON), numbers too big for their type."""
    try:
        text = raw.decode("utf-8")
        return json.loads(text, object_pairs_hook=_no_duplicate_keys(where),
                          parse_constant=_no_constant(where), parse_int=_int(where),
                          parse_float=_float(where))
    except SavedGraphError:
        raise
    except RecursionError:
        raise refuse(where, "nests lists or objects too deeply to be a saved graph") from None
    except UnicodeDecodeError as exc:
        raise refuse(where, f"is not UTF-8 text: {exc}") from None
    except ValueError as exc:
        raise refuse(where, f"is not valid JSON: {exc}",
                     hint="the file may be truncated or damaged; save it again") from None


def _no_duplicate_keys(where: str) -> Any:
    def pairs(items: list[tuple[str, Any]]) -> dict:
        seen: set[str] = set()
        for key, _ in items:
            if key in seen:
                raise refuse(where, f"an object has the key {shown(key)} twice")
            seen.add(key)
        return dict(items)
    return pairs


def _no_constant(where: str) -> Any:
    def constant(name: str) -> Any:
        raise refuse(where, f"{name} is not a JSON number",
                     hint='a float that is not finite is written {"float": "inf"}')
    return constant


def _int(where: str) -> Any:
    def parse(digits: str) -> int:
        if len(digits.lstrip("-")) > 20:  # (int() of a long string costs quadratic time)
            raise refuse(where, f"an integer of {len(digits)} digits is too big for any field")
        return int(digits)
    return parse


def _float(where: str) -> Any:
    def parse(digits: str) -> float:
        value = float(digits)
        if not math.isfinite(value):
            raise refuse(where, f"the number {digits[:40]} is too big for a float")
        return value
    return parse


# --- Reading one value ---------------------------------------------------------------------------


def fields(data: Any, where: str, required: tuple[str, ...],
           optional: tuple[str, ...] = ()) -> dict:
    """`data` as an object with exactly these keys (the optional ones may be missing)."""
    if not isinstance(data, dict):
        raise refuse(where, f"must be an object, not {shown(data)}")
    missing = [k for k in required if k not in data]
    if missing:
        raise refuse(where, f"has no {', '.join(map(repr, missing))}")
    unknown = [k for k in data if k not in required and k not in optional]
    if unknown:
        raise refuse(where, f"has an unknown key, {shown(unknown[0])}",
                     hint=f"the keys it may have: {', '.join(required + optional)}")
    return data


def integer(data: Any, where: str, low: int = INT64[0], high: int = INT64[1]) -> int:
    if type(data) is not int:  # (bool is a subclass of int: true is not 1 here)
        raise refuse(where, f"must be an integer, not {shown(data)}")
    if not low <= data <= high:
        raise refuse(where, f"must be from {low} to {high}, not {data}")
    return data


def boolean(data: Any, where: str) -> bool:
    if not isinstance(data, bool):
        raise refuse(where, f"must be true or false, not {shown(data)}")
    return data


def text(data: Any, where: str, choices: tuple[str, ...] | None = None) -> str:
    """A short printable string (names end up in messages, pages and generated code), or one
    of `choices`."""
    if not isinstance(data, str):
        raise refuse(where, f"must be a string, not {shown(data)}")
    if choices is not None and data not in choices:
        raise refuse(where, f"must be one of {', '.join(choices)}, not {shown(data)}")
    if len(data) > MAX_NAME or not data.isprintable():
        raise refuse(where, f"{shown(data)} is not a name (at most {MAX_NAME} printable "
                            "characters)")
    return data


def items(data: Any, where: str, most: int | None = None) -> list:
    if not isinstance(data, list):
        raise refuse(where, f"must be a list, not {shown(data)}")
    if most is not None and len(data) > most:
        raise refuse(where, f"has {len(data)} items, more than the {most} it may have")
    return data


def version(data: Any, where: str) -> tuple[int, int]:
    """The file's ``"major.minor"`` version, if this teachflow reads it."""
    found = re.fullmatch(r"(\d{1,6})\.(\d{1,6})", text(data, where))
    if found is None:
        raise refuse(where, f"{shown(data)} is not a version (major.minor, like \"1.0\")")
    major, minor = int(found[1]), int(found[2])
    if major > VERSION[0]:
        raise refuse(where, f"the file is format version {data}, newer than this teachflow "
                            f"reads ({VERSION[0]}.x)",
                     hint="upgrade teachflow to load it, or save it again with this one")
    if major < VERSION[0]:
        raise refuse(where, f"the file is format version {data}, which this teachflow no longer "
                            f"reads ({VERSION[0]}.x)")
    return major, minor


def shape(data: Any, where: str, unknown: bool = False) -> tuple[int | None, ...]:
    """A shape: a list of sizes (null where not known, if `unknown`), whose elements number at
    most `MAX_ELEMENTS`, so that nothing the file declares can make the loader allocate much."""
    dims = tuple(None if d is None and unknown else integer(d, f"{where}[{k}]", 0, MAX_ELEMENTS)
                 for k, d in enumerate(items(data, where, MAX_NDIM)))
    elements = math.prod(d for d in dims if d is not None)
    if elements > MAX_ELEMENTS:
        raise refuse(where, f"declares a value of {elements} elements {list(dims)}, more than "
                            f"the {MAX_ELEMENTS} one value may have")
    return dims


@contextmanager
def refusing(where: str, what: str) -> Iterator[None]:
    """Any error but teachflow's own raised inside (by NumPy, zipfile, a shape rule given
    parameters no trace would give it) becomes a SavedGraphError saying `what` failed, with the
    original kept as its cause: whatever a file does, the loader raises nothing else."""
    try:
        yield
    except TeachflowError as err:
        if isinstance(err, SavedGraphError):
            raise
        raise refuse(where, f"{what}: {err.message}", hint=err.hint) from err
    except Exception as exc:  # (MemoryError and RecursionError are Exceptions too)
        raise refuse(where, f"{what}: {type(exc).__name__}: {str(exc)[:300]}") from exc


def dtype(data: Any, where: str) -> np.dtype:
    """One of the dtypes the format has, by name (never whatever ``np.dtype`` makes of a
    string: ``"O"`` is an object dtype)."""
    return np.dtype(text(data, where, DTYPES))
