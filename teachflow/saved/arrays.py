"""Reading arrays.npz without trusting it: every array checked before a byte of it is read.

An ``.npz`` is a zip of ``.npy`` files, each a small header (dtype, shape) then the raw numbers.
Loaded carelessly it is dangerous in two ways. An object array is stored *pickled*, and
unpickling runs code of the file's choosing: it is loaded with ``allow_pickle=False``, and an
object dtype is refused from the header already. And a header may declare any shape: reading
``(10**12,)`` would allocate terabytes before finding the data missing. So each member is read
in two steps: first its header alone, compared with the shape and dtype the graph says it holds
(and with the size the zip says the member has), and only then its data.

The zip itself is checked when it is opened: members named as the writer names them (``a0.npy``,
``a1.npy``...), each once, stored or deflated (not encrypted), their declared sizes within
`MAX_ARRAY_BYTES` together. At the end, every member must have been used by the graph.
"""

from __future__ import annotations

import math
import os
import re
import zipfile
from typing import BinaryIO

import numpy as np

from teachflow.saved.format import MAX_ARRAY_BYTES, MAX_ARRAYS, refuse, refusing, shown, text

_MEMBER = re.compile(r"a\d{1,9}\.npy")
_HEADER_READERS = {(1, 0): np.lib.format.read_array_header_1_0,
                   (2, 0): np.lib.format.read_array_header_2_0}
_MAX_HEADER = 10_000


class ArrayFile:
    """The arrays of a saved directory, read one by one as the graph names them."""

    def __init__(self, file: BinaryIO, where: str) -> None:
        self.where = where
        size = os.fstat(file.fileno()).st_size
        if size > MAX_ARRAY_BYTES + (64 << 20):  # (the arrays, and room for the zip's own)
            raise refuse(where, f"is {size} bytes, more than a saved graph's arrays may be")
        if file.read(4) not in (b"PK\x03\x04", b"PK\x05\x06"):  # (a zip, or an empty one)
            raise refuse(where, "is not an .npz file (a zip of .npy arrays)")
        file.seek(0)
        with refusing(where, "cannot be opened as an .npz file"):
            self.npz = np.load(file, allow_pickle=False)
            members = self.npz.zip.infolist()
        self.members: dict[str, zipfile.ZipInfo] = {}
        for info in members[:MAX_ARRAYS + 1]:
            self._check_member(info)
        if len(members) > MAX_ARRAYS:
            raise refuse(where, f"holds more than {MAX_ARRAYS} arrays")
        total = sum(info.file_size for info in members)
        if total > MAX_ARRAY_BYTES:
            raise refuse(where, f"declares {total} bytes of arrays, more than the "
                                f"{MAX_ARRAY_BYTES} a saved graph may hold")
        self.used: set[str] = set()

    def _check_member(self, info: zipfile.ZipInfo) -> None:
        name = info.filename
        if not _MEMBER.fullmatch(name):
            raise refuse(self.where, f"holds a member named {shown(name)}; its arrays are "
                                     "named a0.npy, a1.npy, ...")
        if name in self.members:
            raise refuse(self.where, f"holds two members named {name}")
        if info.flag_bits & 0x1 or info.compress_type not in (zipfile.ZIP_STORED,
                                                               zipfile.ZIP_DEFLATED):
            raise refuse(self.where, f"member {name} is encrypted or compressed in a way "
                                     "an .npz is not")
        self.members[name] = info

    def read(self, name: object, shape: tuple[int, ...], dtype: np.dtype,
             where: str) -> np.ndarray:
        """The array named `name`, if its header says it holds `shape` and `dtype`."""
        name = text(name, where)
        info = self.members.get(f"{name}.npy")
        if info is None:
            raise refuse(where, f"names the array {name!r}, which {self.where} does not hold")
        if name in self.used:
            raise refuse(where, f"names the array {name!r}, which another value uses already")
        with refusing(where, f"array {name} cannot be read"), self.npz.zip.open(info) as f:
            version = np.lib.format.read_magic(f)
            if version not in _HEADER_READERS:
                raise refuse(where, f"array {name} is in .npy format {version}, not 1.0 or 2.0")
            found_shape, _, found_dtype = _HEADER_READERS[version](
                f, max_header_size=_MAX_HEADER)
            header = f.tell()
        if found_dtype.hasobject:  # (read, NumPy would unpickle them: run code of the file's)
            raise refuse(where, f"array {name} holds pickled Python objects, but the graph "
                                f"says {dtype.name}")
        if found_dtype != dtype:
            raise refuse(where, f"array {name} holds {found_dtype.str} values, but the graph "
                                f"says {dtype.name}")
        if tuple(found_shape) != tuple(shape):
            raise refuse(where, f"array {name} has shape {found_shape}, but the graph says "
                                f"{tuple(shape)}")
        size = header + math.prod(shape) * dtype.itemsize
        if info.file_size != size:
            raise refuse(where, f"array {name} is {info.file_size} bytes long, but its header "
                                f"says {size}", hint="the file may be truncated; save it again")
        with refusing(where, f"array {name} cannot be read"):
            array = self.npz[name]
        self.used.add(name)
        return np.asarray(array, order="C")  # (ascontiguousarray makes a 0-d array 1-d)

    def check_all_used(self) -> None:
        unused = sorted(set(self.members) - {f"{n}.npy" for n in self.used})
        if unused:
            raise refuse(self.where, f"holds {unused[0]}, which nothing in the graph uses")

    def close(self) -> None:
        self.npz.close()
