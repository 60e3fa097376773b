"""Plain data across the sandbox's wall: what a call to a learner's function sends and gets back.

When grading, the instructor's tests run in a trusted process and the learner's code in a
sandboxed worker (`teachflow.grading.sandbox`). They talk through a pipe in *messages*, and a
message holds plain data only, so the trusted side never imports, unpickles or evaluates
anything the learner wrote. A message is two parts, each preceded by its length (8 bytes,
big-endian)::

    header   JSON: {"op": "call", "path": ["my_softmax"], "args": [{"array": "a0"}], ...}
    payload  an .npz file (NumPy's zip of arrays), read with allow_pickle=False; may be empty

In the header, JSON's own numbers, strings, ``true``/``false`` and ``null`` stand for
themselves; everything else is an object with one key that says what it is::

    {"list": [...]}  {"tuple": [...]}  {"dict": [[key, value], ...]}  {"complex": [re, im]}
    {"array": "a0"}                      a NumPy array, the payload's entry a0
    {"scalar": "a1"}                     a NumPy scalar (np.float32(1.5)), kept as a 0-d array
    {"tensor": "a2", "requires_grad": false}   a teachflow Tensor: its values, and whether
                                         it is on a tape (its history stays where it is: see
                                         `teachflow.grading.remote` for gradients)
    {"graph": "g0", "kept": 3}           a staged function in the saved-graph format: its
                                         files are the payload's entries g0.saved.json and
                                         g0.arrays.npz, read back by ``tfl.load``; "kept", from
                                         the worker, numbers the original, which stays there
    {"ref": ["model"]}                   (grader to worker only) one of the worker's own
                                         values, passed back to it by name

Nothing else crosses: a function, a class instance, a generator is refused by name
(`CannotCross`), so an object whose ``__eq__`` always says True never reaches a test. The
reader trusts nothing: every size is checked before it is read (`MessageLimits`), nesting is
bounded, and a message that breaks a rule raises `BadMessage`.
"""

from __future__ import annotations

import io
import json
import os
import selectors
import struct
import tempfile
import time
import types
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

LENGTH = struct.Struct(">Q")
GRAPH_FILES = ("saved.json", "arrays.npz")


class BadMessage(ValueError):
    """A message that breaks the format: too big, too deep, not JSON, an unknown tag."""


class CannotCross(TypeError):
    """A value that is not plain data (a function, an object of the learner's own class...)."""


@dataclass(frozen=True)
class MessageLimits:
    """What a reader accepts: bytes of header and payload, nesting depth, items in all."""

    header: int = 16 << 20
    payload: int = 1 << 30
    depth: int = 100
    items: int = 1_000_000


# -- values to a message, and back -------------------------------------------------------------


class Encoder:
    """Turns a value into a header tree and the arrays and files of its payload.

    `tracked(tensor)` says whether a tensor is sent as on a tape (``requires_grad``); `keep`
    numbers a staged function that stays on this side (the worker's: a call of it runs there).
    `tensors` lists the tensors encoded, in the order a `Decoder` makes them again."""

    def __init__(self, limits: MessageLimits = MessageLimits(),
                 ref: Callable[[Any], list[str] | None] | None = None,
                 tracked: Callable[[Any], bool] | None = None,
                 keep: Callable[[Any], int] | None = None) -> None:
        self.limits, self.ref, self.arrays, self.items = limits, ref, {}, 0
        self.tracked = tracked or (lambda tensor: tensor._node is not None)
        self.keep = keep
        self.tensors: list[Any] = []

    def value(self, value: Any, depth: int = 0) -> Any:
        self.items += 1
        if depth > self.limits.depth or self.items > self.limits.items:
            raise CannotCross(f"a value nested deeper than {self.limits.depth} levels or "
                              f"holding more than {self.limits.items} items")
        if value is None or isinstance(value, bool | str):
            return value
        if type(value) in (int, float):  # exactly: a subclass may lie in __eq__
            return value
        if type(value) is complex:
            return {"complex": [value.real, value.imag]}
        if type(value) in (list, tuple):
            return {type(value).__name__: [self.value(v, depth + 1) for v in value]}
        if type(value) is dict:
            return {"dict": [[self.value(k, depth + 1), self.value(v, depth + 1)]
                             for k, v in value.items()]}
        if type(value) is np.ndarray:
            return {"array": self._array(value)}
        if isinstance(value, np.generic) and type(value).__module__ == "numpy":
            return {"scalar": self._array(np.asarray(value))}
        from teachflow.tensor.tensor import Tensor

        if isinstance(value, Tensor):  # (a Parameter too: its values cross, as a Tensor)
            from teachflow.graph import Value

            if isinstance(value._data, Value):
                raise CannotCross("a symbolic tensor of a trace, which has no values yet (the "
                                  "submission's functions run in its own process, which a "
                                  "trace cannot enter: call them outside tfl.function)")
            self.tensors.append(value)
            return {"tensor": self._array(Tensor.numpy(value)),
                    "requires_grad": self.tracked(value)}
        if _is_graph(value):
            graph = {"graph": self._graph(value)}
            return graph if self.keep is None else {**graph, "kept": self.keep(value)}
        path = self.ref(value) if self.ref is not None else None
        if path is not None:
            return {"ref": path}
        raise CannotCross(kind(value))

    def _array(self, array: np.ndarray) -> str:
        if array.dtype.hasobject or array.dtype.kind not in "biufcUS":
            raise CannotCross(f"an array of dtype {array.dtype}")
        name = f"a{len(self.arrays)}"
        self.arrays[name] = array
        return name

    def _graph(self, value: Any) -> str:
        import teachflow as tfl
        from teachflow.core.errors import TeachflowError

        name = f"g{len(self.arrays)}"
        with tempfile.TemporaryDirectory() as folder:
            try:
                tfl.save(value, folder)
            except TeachflowError as error:
                raise CannotCross(f"a staged function that cannot be saved ({error.message})"
                                  ) from None
            for file in GRAPH_FILES:
                data = Path(folder, file).read_bytes()
                self.arrays[f"{name}.{file}"] = np.frombuffer(data, dtype=np.uint8)
        return name


def _is_graph(value: Any) -> bool:
    from teachflow.compiler import Compilation
    from teachflow.saved.loaded import SavedFunction
    from teachflow.staged.function import ConcreteFunction, Function

    return isinstance(value, Compilation | ConcreteFunction | Function | SavedFunction)


def kind(value: Any) -> str:
    """What `value` is, in words: 'a function (my_softmax)', 'an A object'."""
    cls = type(value)
    if isinstance(value, type):
        return f"a class ({value.__name__})"
    if isinstance(value, types.FunctionType | types.BuiltinFunctionType | types.MethodType):
        return f"a function ({getattr(value, '__name__', cls.__name__)})"
    name = cls.__name__ if cls.__module__ in ("builtins", "__main__") else \
        f"{cls.__module__}.{cls.__name__}"
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name} object"


class Decoder:
    """Turns a header tree and its payload back into values: arrays, tensors, loaded graphs.

    `kept(loaded, number)` stands in for a staged function the other side kept (see
    `Encoder`), and a graph that is not kept is refused; `tensors` lists the tensors made, in
    the order the `Encoder` met them. With `leaves`, a tensor sent as on a tape is made a leaf
    that requires grad; without, every tensor is made off the tape."""

    def __init__(self, arrays: dict[str, np.ndarray], limits: MessageLimits = MessageLimits(),
                 graphs: Path | None = None,
                 resolve: Callable[[list[str]], Any] | None = None,
                 kept: Callable[[Any, int], Any] | None = None, leaves: bool = True) -> None:
        self.arrays, self.limits, self.graphs, self.resolve = arrays, limits, graphs, resolve
        self.kept, self.leaves = kept, leaves
        self.items = 0
        self.tensors: list[Any] = []

    def value(self, tree: Any, depth: int = 0) -> Any:
        self.items += 1
        if depth > self.limits.depth or self.items > self.limits.items:
            raise BadMessage(f"a value nested deeper than {self.limits.depth} levels or "
                             f"holding more than {self.limits.items} items")
        if tree is None or isinstance(tree, bool | int | float | str):
            return tree
        if not isinstance(tree, dict) or len(tree) not in (1, 2):
            raise BadMessage(f"a value of the form {type(tree).__name__} is not in the format")
        tag = next(iter(tree))
        body = tree[tag]
        if tag in ("list", "tuple") and isinstance(body, list):
            items = [self.value(v, depth + 1) for v in body]
            return items if tag == "list" else tuple(items)
        if tag == "dict" and isinstance(body, list):
            pairs = [self._pair(p, depth) for p in body]
            return dict(pairs)
        if tag == "complex" and isinstance(body, list) and len(body) == 2 and all(
                isinstance(x, int | float) and not isinstance(x, bool) for x in body):
            return complex(*body)
        if tag == "array":
            return self._array(body)
        if tag == "scalar":
            array = self._array(body)
            if array.ndim:
                raise BadMessage("a scalar that is not 0-d")
            return array[()]
        if tag == "tensor" and isinstance(tree.get("requires_grad"), bool):
            import teachflow as tfl

            made = tfl.tensor(self._array(body),
                              requires_grad=self.leaves and tree["requires_grad"])
            self.tensors.append(made)
            return made
        if tag == "graph" and isinstance(body, str):
            number = tree.get("kept")
            if self.kept is None:
                if len(tree) != 1:
                    raise BadMessage("a kept graph where none may be")
                return self._graph(body)
            if type(number) is not int:
                raise BadMessage("a graph the worker did not keep")
            return self.kept(self._graph(body), number)
        if tag == "ref" and self.resolve is not None and isinstance(body, list) and all(
                isinstance(name, str) for name in body) and body:
            return self.resolve(body)
        raise BadMessage(f"an unknown value {tag!r:.40}")

    def _pair(self, pair: Any, depth: int) -> tuple[Any, Any]:
        if not isinstance(pair, list) or len(pair) != 2:
            raise BadMessage("a dict entry that is not a [key, value] pair")
        key = self.value(pair[0], depth + 1)
        try:
            hash(key)
        except TypeError:
            raise BadMessage("a dict key that cannot be a key") from None
        return key, self.value(pair[1], depth + 1)

    def _array(self, name: Any) -> np.ndarray:
        if not isinstance(name, str) or name not in self.arrays:
            raise BadMessage(f"an array {name!r:.40} the payload does not hold")
        return self.arrays[name]

    def _graph(self, name: str) -> Any:
        import teachflow as tfl

        if self.graphs is None:
            raise BadMessage("a graph where none may be")
        folder = Path(tempfile.mkdtemp(dir=self.graphs))
        for file in GRAPH_FILES:
            data = self._array(f"{name}.{file}")
            if data.dtype != np.uint8 or data.ndim != 1:
                raise BadMessage(f"graph file {file} is not bytes")
            (folder / file).write_bytes(data.tobytes())
        return tfl.load(folder)  # the loader that trusts nothing: a SavedGraphError if bad


# -- messages on a pipe -------------------------------------------------------------------------


def write_message(stream: BinaryIO, header: dict[str, Any],
                  arrays: dict[str, np.ndarray] | None = None) -> None:
    """Write one message: its header as JSON, its arrays as an .npz payload."""
    payload = io.BytesIO()
    if arrays:
        np.savez(payload, **arrays)
    head = json.dumps(header, separators=(",", ":")).encode()
    body = payload.getvalue()
    stream.write(LENGTH.pack(len(head)) + head + LENGTH.pack(len(body)))
    stream.write(body)
    stream.flush()


def read_message(read: Callable[[int], bytes], limits: MessageLimits = MessageLimits()
                 ) -> tuple[dict[str, Any], dict[str, np.ndarray]]:
    """Read one message with `read(n)` (which returns exactly n bytes or raises EOFError)."""
    header_size = _length(read, limits.header, "header")
    try:
        header = json.loads(read(header_size))
    except (ValueError, RecursionError) as error:
        raise BadMessage(f"a header that is not JSON ({error})") from None
    if not isinstance(header, dict):
        raise BadMessage("a header that is not a JSON object")
    payload_size = _length(read, limits.payload, "payload")
    return header, _arrays(read(payload_size), limits) if payload_size else {}


def _length(read: Callable[[int], bytes], most: int, what: str) -> int:
    (size,) = LENGTH.unpack(read(LENGTH.size))
    if size > most:
        raise BadMessage(f"a {what} of {size} bytes (at most {most})")
    return size


def _arrays(data: bytes, limits: MessageLimits) -> dict[str, np.ndarray]:
    try:
        with zipfile.ZipFile(io.BytesIO(data)) as archive:
            declared = sum(info.file_size for info in archive.infolist())
            if declared > limits.payload:
                raise BadMessage(f"a payload that unpacks to {declared} bytes "
                                 f"(at most {limits.payload})")
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            return {name: npz[name] for name in npz.files}
    except BadMessage:
        raise
    except (ValueError, OSError, EOFError, zipfile.BadZipFile, KeyError) as error:
        raise BadMessage(f"a payload that is not an .npz of plain arrays ({error})") from None


def reader_of(fd: int, deadline: float | None = None) -> Callable[[int], bytes]:
    """`read(n)` on a file descriptor: exactly n bytes, EOFError when the pipe closes, and
    TimeoutError once `deadline` (a `time.monotonic()` time) passes, where there is one."""
    selector = selectors.DefaultSelector()
    selector.register(fd, selectors.EVENT_READ)

    def read(size: int) -> bytes:
        chunks, left = [], size
        while left:
            if deadline is not None:
                wait = deadline - time.monotonic()
                if wait <= 0 or not selector.select(wait):
                    raise TimeoutError
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                raise EOFError
            chunks.append(chunk)
            left -= len(chunk)
        return b"".join(chunks)

    return read
