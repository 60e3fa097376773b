"""A loader that trusts nothing: one crafted file per attack, each refused with a
`SavedGraphError` that names what is wrong, none executing, importing or allocating anything.

Every file starts as a real saved graph (`control_flow` of test_saved.py: a captured tensor
``a0``, a constant ``a1``, an index array ``a2``, a cond, a fori loop) and is then changed in one
way: its JSON as data (`edit`), as text (`raw`), or its arrays.npz.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from test_saved import W, control_flow

import teachflow as tfl
import teachflow.saved.arrays
from teachflow.saved import SavedGraphError

X = tfl.randn(2, 3)


@pytest.fixture
def saved(tmp_path: Path) -> Path:
    return tfl.save(tfl.compile(control_flow, X), tmp_path / "model")


def refused(folder: Path, *words: str) -> SavedGraphError:
    with pytest.raises(SavedGraphError) as info:
        tfl.load(folder)
    for word in words:
        assert word in str(info.value), str(info.value)
    return info.value


def edit(folder: Path, change: Callable[[dict], object]) -> Path:
    manifest = folder / "saved.json"
    document = json.loads(manifest.read_text())
    change(document)
    manifest.write_text(json.dumps(document))
    return folder


def raw(folder: Path, old: str, new: str) -> Path:
    manifest = folder / "saved.json"
    text = manifest.read_text()
    assert old in text
    manifest.write_text(text.replace(old, new, 1))
    return folder


def node(document: dict, op: str, graph: dict | None = None) -> dict:
    return next(n for n in (graph or document["graph"])["nodes"] if n["op"] == op)


def members(folder: Path) -> dict[str, bytes]:
    with zipfile.ZipFile(folder / "arrays.npz") as z:
        return {name: z.read(name) for name in z.namelist()}


def write_members(folder: Path, contents: list[tuple[str, bytes]],
                  compression: int = zipfile.ZIP_STORED) -> None:
    (folder / "arrays.npz").unlink()
    with zipfile.ZipFile(folder / "arrays.npz", "w", compression) as z:
        for name, data in contents:
            z.writestr(name, data)


def npy(array: np.ndarray, allow_pickle: bool = False) -> bytes:
    out = io.BytesIO()
    np.save(out, array, allow_pickle=allow_pickle)
    return out.getvalue()


def test_the_file_unchanged_loads(saved: Path) -> None:
    assert np.allclose(tfl.load(saved)(X)[0].numpy(), control_flow(X)[0].numpy())


# --- The manifest, as data: one change each ----------------------------------------------------


def _nested_conds(document: dict, depth: int) -> None:
    """Graphs inside graphs, `depth` deep, each a cond around the next (fresh ids)."""
    ids = iter(range(1000, 100_000))
    spec = {"shape": [], "dtype": "bool", "device": "cpu"}
    leaf = {"name": "leaf", "inputs": [{"id": next(ids), **spec}], "constants": [],
            "nodes": [], "outputs": []}
    graph = leaf
    for _ in range(depth):
        p = next(ids)
        graph = {"name": "g", "inputs": [{"id": p, **spec}], "constants": [], "outputs": [],
                 "nodes": [{"op": "cond", "inputs": [{"value": p}, {"value": p}],
                            "params": {"true_fn": graph, "false_fn": leaf}, "outputs": []}]}
    node(document, "cond")["params"]["true_fn"] = graph


def _set(path: str, value: object) -> Callable[[dict], None]:
    """A change: the value at `path` (``graph.nodes.0.op``) becomes `value`."""
    def change(document: dict) -> None:
        *parents, last = path.split(".")
        place = document
        for key in parents:
            place = place[int(key)] if isinstance(place, list) else place[key]
        if isinstance(place, list):
            place[int(last)] = value
        else:
            place[last] = value
    return change


EDITS = {
    "unknown op": (_set("graph.nodes.0.op", "__import__('os').system('touch pwned')"),
                   "is not one of teachflow's ops"),
    "unknown parameter": (lambda d: node(d, "sum")["params"].update(where=True),
                          "sum takes no parameter the string 'where'"),
    "missing parameter": (lambda d: node(d, "sum")["params"].pop("keepdims"),
                          "sum needs the parameter 'keepdims'"),
    "string where a number belongs": (_set("graph.inputs.0.shape", ["2", 3]),
                                      "shape[0]: must be an integer, not the string '2'"),
    "bool where an int belongs (axis)": (lambda d: node(d, "sum")["params"].update(axis=[True]),
                                         "axis[0]: must be an integer, not true"),
    "bool where an int belongs (reference)": (_set("graph.nodes.1.inputs.0", {"value": True}),
                                              "must be an integer, not true"),
    "int where a bool belongs": (lambda d: node(d, "sum")["params"].update(keepdims=1),
                                 "keepdims: must be true or false, not the number 1"),
    "float where an int belongs": (_set("graph.inputs.0.id", 0.0),
                                   "id: must be an integer, not the number 0.0"),
    "negative size": (_set("graph.inputs.0.shape", [-2, 3]), "must be from 0 to"),
    "size that overflows": (_set("graph.inputs.0.shape", [2**40, 3]), "must be from 0 to"),
    "too many elements": (_set("graph.inputs.0.shape", [2**16, 2**16, 2**16]),
                          "declares a value of 281474976710656 elements"),
    "too many dimensions": (_set("graph.inputs.0.shape", [1] * 40), "more than the 32"),
    "recorded shape the op disagrees with": (
        _set("graph.nodes.0.outputs.0.shape", [2, 5]),
        "records results f32[2,5], but matmul of its operands gives f32[2,4]"),
    "recorded dtype the op disagrees with": (_set("graph.nodes.0.outputs.0.dtype", "float64"),
                                             "but matmul of its operands gives f32[2,4]"),
    "object dtype": (_set("graph.inputs.0.dtype", "O"), "must be one of bool, int8"),
    "unknown device": (_set("graph.inputs.0.device", "tpu"), "must be one of cpu, gpu"),
    "dangling reference": (_set("graph.nodes.1.inputs.0", {"value": 999}),
                           "reads %999, which no value of this graph is"),
    "cyclic reference": (_set("graph.nodes.0.inputs.0", {"value": 4}),
                         "reads %4 before it is computed"),
    "node reading its own result": (_set("graph.nodes.1.inputs.0", {"value": 4}),
                                    "this is a cycle"),
    "sub-graph reaching outside": (
        lambda d: node(d, "mul", node(d, "cond")["params"]["true_fn"])["inputs"].__setitem__(
            0, {"value": 0}), "a graph a node owns reads only its own inputs"),
    "duplicate id": (_set("graph.nodes.1.outputs.0.id", 2), "id 2 is used twice"),
    "unknown key at the top": (_set("exec", "print('hi')"), "unknown key, the string 'exec'"),
    "unknown key in a node": (_set("graph.nodes.1.code", "x"), "unknown key, the string 'code'"),
    "missing key": (lambda d: d["graph"].pop("outputs"), "has no 'outputs'"),
    "extra operand (NumPy's out=)": (lambda d: node(d, "add")["inputs"].append({"value": 1}),
                                     "add takes 2 operand(s), not 3"),
    "missing operand": (lambda d: node(d, "matmul")["inputs"].pop(),
                        "matmul takes 2 operand(s), not 1"),
    "graph parameter that is not a graph": (
        lambda d: node(d, "cond")["params"].update(true_fn=3), "true_fn: must be an object"),
    "captures in a sub-graph": (
        lambda d: node(d, "cond")["params"]["true_fn"].update(captures=[]),
        "unknown key, the string 'captures'"),
    "index array of floats": (
        lambda d: node(d, "getitem")["params"]["index"][0].update(dtype="float32"),
        "an array of float32 cannot be here"),
    "slice of the wrong length": (
        lambda d: node(d, "getitem")["params"]["index"].__setitem__(1, {"slice": [1, 3]}),
        "a slice is [start, stop, step]"),
    "name with a control character": (_set("graph.inputs.0.name", "x\n"), "is not a name"),
    "name too long": (_set("graph.name", "f" * 1000), "is not a name"),
    "float tag with a string": (_set("graph.nodes.3.inputs.1", {"float": "1e3"}),
                                "a float must be a number"),
    "op refusing its parameters (arange step 0)": (
        lambda d: d["graph"]["nodes"].append(
            {"op": "arange", "inputs": [], "outputs": [{"id": 500, "shape": [5], "dtype":
                                                        "int64", "device": "cpu"}],
             "params": {"start": 0, "stop": 5, "step": 0, "dtype": "int64", "device": "cpu"}}),
        "(arange).params.step: a step of 0"),
    "bound of the wrong kind": (_set("graph.nodes.5.inputs.1", "3"), "must be a number"),
    "sub-graphs nested too deep": (lambda d: _nested_conds(d, 40), "graphs nest more than 32"),
    "wrong format": (_set("format", "onnx"), "is not a teachflow saved graph"),
    "newer major version": (_set("version", "2.0"),
                            "format version 2.0, newer than this teachflow reads (1.x)"),
    "malformed version": (_set("version", "1"), "is not a version"),
    "unknown kind": (_set("kind", "pickle"), "must be one of function, state_dict"),
    "arrays file outside the directory": (_set("arrays", "../outside.npz"),
                                          "no path, no .."),
    "arrays file by absolute path": (_set("arrays", "/etc/passwd"), "no path, no .."),
    "array used twice": (_set("graph.constants.0.array", "a0"), "another value uses already"),
    "array not in the file": (_set("graph.constants.0.array", "a7"),
                              "names the array 'a7', which"),
    "array shape disagreeing with the graph": (_set("graph.captures.0.shape", [4, 3]),
                                               "array a0 has shape (3, 4), but the graph says"),
    "array dtype disagreeing with the graph": (_set("graph.captures.0.dtype", "float64"),
                                               "array a0 holds <f4 values, but the graph says"),
}


@pytest.mark.parametrize("attack", list(EDITS))
def test_a_manifest_changed_so_is_refused_naming_what_is_wrong(saved: Path, attack: str) -> None:
    change, words = EDITS[attack]
    refused(edit(saved, change), words)
    assert not (saved / "pwned").exists() and not Path("pwned").exists()


def _shapes_and_axes(x: tfl.Tensor) -> tuple:
    return (x.sum(axis=1), x.transpose(1, 0), x.reshape(-1), x[1:, 0],
            tfl.broadcast_to(x, (4, 2, 3)), tfl.cat([x, x], axis=1), tfl.stack([x, x], axis=2),
            x.argmax(axis=1), x[np.array([1, 0])])


#: A parameter of a node of `_shapes_and_axes` set to a value no trace would give, with what
#: the refusal says of it: each names the node (op and operands), the parameter, the operand.
PARAMETERS = {
    "axis out of range": ("sum", "axis", [5], "axis 5 is out of range: f32[2,3] has 2 axes"),
    "axis from the end": ("sum", "axis", [-1], "axis -1 counts from the end"),
    "axis twice": ("sum", "axis", [1, 1], "axes [1, 1] are not in increasing order"),
    "one axis out of range": ("argmax", "axis", 2, "axis 2 is out of range"),
    "joined axis out of range": ("concatenate", "axis", 2, "axis 2 is out of range"),
    "new axis out of range": ("stack", "axis", 4, "stacking f32[2,3] gives 3 axes (0 to 2)"),
    "not a permutation": ("transpose", "axes", [1, 1], "axes [1, 1] are not a permutation of "
                                                       "the 2 axes of f32[2,3]"),
    "too few axes": ("transpose", "axes", [0], "not a permutation of the 2 axes"),
    "two sizes to fill in": ("reshape", "shape", [-1, -1], "shape [-1, -1] has a size that is"),
    "reshape to another size": ("reshape", "shape", [7], "cannot reshape f32[2,3] (6 elements)"),
    "broadcast to a shape it does not fit": ("broadcast_to", "shape", [4, 5, 3],
                                             "cannot broadcast shapes (2, 3) and (4, 5, 3)"),
    "negative size": ("broadcast_to", "shape", [-4, 2, 3], "shape [-4, 2, 3] has a size"),
    "index out of bounds": ("getitem", "index", [{"slice": [1, None, None]}, 7],
                            "index 7 is out of bounds for axis 1 with size 3"),
    "too many indices": ("getitem", "index", [0, 0, 0], "too many indices"),
}


@pytest.mark.parametrize("case", list(PARAMETERS))
def test_a_parameter_no_trace_gives_is_refused_naming_node_parameter_and_operand(
        tmp_path: Path, case: str) -> None:
    op, name, value, says = PARAMETERS[case]
    folder = tfl.save(tfl.compile(_shapes_and_axes, X), tmp_path / "model")
    edit(folder, lambda d: node(d, op)["params"].__setitem__(name, value))
    refused(folder, f"({op} of f32[2,3]", f"params.{name}", says)


def test_a_newer_major_version_is_refused_before_its_unknown_keys(saved: Path) -> None:
    edit(saved, lambda d: d.update(version="3.1", graph={"made": "differently"}, extra=1))
    error = refused(saved, "format version 3.1")
    assert "upgrade teachflow" in error.hint


def test_a_newer_minor_version_loads_and_refuses_only_what_it_does_not_know(
        saved: Path) -> None:
    edit(saved, _set("version", "1.7"))
    assert tfl.load(saved)(X)[1].shape == (2, 4)
    edit(saved, _set("graph.nodes.11.op", "gelu"))
    assert "a newer teachflow may have" in refused(saved, "op 'gelu'").hint


# --- The manifest, as text ----------------------------------------------------------------------

TEXT_EDITS = {
    "duplicate key": ('"kind": "function"', '"kind": "function", "kind": "state_dict"',
                      "has the key the string 'kind' twice"),
    "NaN": ('{"float": 0.5}', "NaN", "NaN is not a JSON number"),
    "Infinity": ('{"float": 0.5}', '{"float": Infinity}', "Infinity is not a JSON number"),
    "float too big": ('{"float": 0.5}', '{"float": 1e999}', "1e999 is too big for a float"),
    "huge integer": ('"id": 0,', f'"id": {"9" * 5000},', "an integer of 5000 digits"),
    "integer beyond int64": ('"id": 0,', f'"id": {2**64},', "must be from 0 to"),
    "deep nesting": ('"constants": []', '"constants": ' + "[" * 100_000 + "]" * 100_000,
                     "too deeply"),
}


@pytest.mark.parametrize("attack", list(TEXT_EDITS))
def test_a_manifest_whose_text_is_changed_so_is_refused(saved: Path, attack: str) -> None:
    old, new, words = TEXT_EDITS[attack]
    (saved / "saved.json").write_text(json.dumps(json.loads((saved / "saved.json").read_text())))
    refused(raw(saved, old, new), words)


def test_a_truncated_manifest_is_refused(saved: Path) -> None:
    text = (saved / "saved.json").read_bytes()
    (saved / "saved.json").write_bytes(text[:len(text) // 2])
    refused(saved, "is not valid JSON", "saved.json")


def test_a_manifest_that_is_not_utf8_or_not_an_object_is_refused(saved: Path) -> None:
    (saved / "saved.json").write_bytes(b"\xff\xfe{}")
    refused(saved, "is not UTF-8 text")
    (saved / "saved.json").write_text("[1, 2]")
    refused(saved, "is not a teachflow saved graph")


# --- The files ----------------------------------------------------------------------------------


def test_files_that_are_symbolic_links_are_refused(saved: Path, tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (saved / "arrays.npz").rename(outside / "arrays.npz")
    (saved / "arrays.npz").symlink_to(outside / "arrays.npz")
    refused(saved, "arrays.npz: is a symbolic link")
    (saved / "saved.json").rename(outside / "saved.json")
    (saved / "saved.json").symlink_to(outside / "saved.json")
    refused(saved, "saved.json: is a symbolic link")


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes here")
def test_a_pipe_in_place_of_a_file_is_refused_without_blocking(saved: Path) -> None:
    (saved / "arrays.npz").unlink()
    os.mkfifo(saved / "arrays.npz")  # opening it to read would wait for a writer
    refused(saved, "arrays.npz: is not a regular file")


def test_a_missing_file_or_a_path_that_is_no_directory_is_refused(saved: Path) -> None:
    refused(saved / "saved.json", "is not a directory")
    (saved / "arrays.npz").unlink()
    refused(saved, "has no arrays.npz")


# --- arrays.npz -----------------------------------------------------------------------------


class Payload:
    """Unpickling this would create the file `marker`: what an object array can do."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple:
        return (Path.touch, (self.marker,))


def test_an_object_array_is_refused_and_never_unpickled(saved: Path) -> None:
    marker = saved / "unpickled"
    payload = np.empty((3, 4), dtype=object)
    payload[0, 0] = Payload(marker)
    contents = members(saved)
    contents["a0.npy"] = npy(payload, allow_pickle=True)
    write_members(saved, list(contents.items()))
    refused(saved, "array a0 holds pickled Python objects, but the graph says float32")
    assert not marker.exists()


def test_an_absurd_declared_shape_is_refused_before_allocating(saved: Path) -> None:
    import tracemalloc

    header = io.BytesIO()
    np.lib.format.write_array_header_1_0(
        header, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
    contents = members(saved)
    contents["a0.npy"] = header.getvalue() + b"\0" * 48
    write_members(saved, list(contents.items()))
    tracemalloc.start()
    try:
        refused(saved, "array a0 has shape (1000000000000,), but the graph says (3, 4)")
        assert tracemalloc.get_traced_memory()[1] < 5 << 20  # (10**12 floats: 4 TB)
    finally:
        tracemalloc.stop()


def test_array_data_shorter_than_its_header_says_is_refused(saved: Path) -> None:
    contents = members(saved)
    contents["a0.npy"] = contents["a0.npy"][:-8]
    write_members(saved, list(contents.items()))
    refused(saved, "array a0 is", "bytes long, but its header says")


def test_a_big_endian_array_is_refused(saved: Path) -> None:
    contents = members(saved)
    contents["a0.npy"] = npy(W.numpy().astype(">f4"))
    write_members(saved, list(contents.items()))
    refused(saved, "array a0 holds >f4 values")


def test_an_array_nothing_uses_is_refused(saved: Path) -> None:
    write_members(saved, [*members(saved).items(), ("a9.npy", npy(np.zeros(2)))])
    refused(saved, "holds a9.npy, which nothing in the graph uses")


def test_a_member_named_as_a_path_is_refused(saved: Path) -> None:
    write_members(saved, [*members(saved).items(), ("../evil.npy", npy(np.zeros(2)))])
    refused(saved, "holds a member named the string '../evil.npy'")


def test_two_members_of_one_name_are_refused(saved: Path) -> None:
    contents = list(members(saved).items())
    with pytest.warns(UserWarning, match="Duplicate name"):
        write_members(saved, [*contents, contents[0]])
    refused(saved, "holds two members named a0.npy")


def test_a_member_compressed_otherwise_than_an_npz_is_refused(saved: Path) -> None:
    write_members(saved, list(members(saved).items()), zipfile.ZIP_BZIP2)
    refused(saved, "is encrypted or compressed in a way an .npz is not")


def test_arrays_declaring_more_bytes_than_the_limit_are_refused(
        saved: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(teachflow.saved.arrays, "MAX_ARRAY_BYTES", 100)
    refused(saved, "bytes of arrays, more than the 100")


def test_a_truncated_or_foreign_arrays_file_is_refused(saved: Path) -> None:
    data = (saved / "arrays.npz").read_bytes()
    (saved / "arrays.npz").write_bytes(data[:len(data) // 2])
    refused(saved, "arrays.npz")
    (saved / "arrays.npz").write_bytes(b"\x80\x04K\x01.")  # a pickle, not a zip
    refused(saved, "is not an .npz file")


# --- A state dict -------------------------------------------------------------------------------


def test_a_state_dict_with_a_name_twice_or_a_wrong_shape_is_refused(tmp_path: Path) -> None:
    folder = tfl.save({"w": tfl.ones(2, 3), "b": tfl.zeros(3)}, tmp_path / "state")
    assert list(tfl.load(folder)) == ["w", "b"]
    edit(folder, _set("tensors.1.name", "w"))
    refused(folder, "the name 'w' is there twice")
    edit(folder, _set("tensors.1.name", "b"))
    edit(folder, _set("tensors.1.shape", [4]))
    refused(folder, "array a1 has shape (3,), but the graph says (4,)")


def test_names_that_read_as_code_stay_names(saved: Path) -> None:
    """Names reach the generated executor and the stepper's page; there they are only names."""
    code = "__import__('pathlib').Path('pwned').touch() or x"

    def rename(document: dict) -> None:
        document["graph"]["name"] = code
        document["graph"]["inputs"][0]["name"] = f"x): {code} #"
        document["graph"]["captures"][0]["name"] = "</script><script>alert(1)</script>"

    loaded = tfl.load(edit(saved, rename))
    assert np.allclose(loaded(X)[0].numpy(), control_flow(X)[0].numpy())
    assert "__import__(" not in loaded.source and "(x):" not in loaded.source
    page = loaded.to_html(saved / "page.html").read_text()
    assert "<script>alert" not in page
    assert not Path("pwned").exists() and not (saved / "pwned").exists()



def many_folds(x: tfl.Tensor, count: int = 200) -> tfl.Tensor:
    """`count` nodes, each foldable into a 512 kB constant: 200 MB if all 200 were folded. (Not
    ``zeros``: one value repeated folds to a broadcast of one number, which costs nothing.)"""
    big = tfl.arange(1 << 16, dtype="float64")
    return sum(((big + float(i)) * 2.0).max() for i in range(count)) + x


def test_a_small_file_of_many_foldable_nodes_loads_in_little_memory(tmp_path: Path) -> None:
    import tracemalloc

    from teachflow.passes.constant_fold import MAX_FOLDED_BYTES

    folder = tfl.save(tfl.compile(many_folds, tfl.ones(3, dtype="float64"), passes=[]),
                      tmp_path / "folds")
    assert sum(f.stat().st_size for f in folder.iterdir()) < 1 << 20  # the file is small ...
    tracemalloc.start()
    try:
        loaded = tfl.load(folder)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 4 * MAX_FOLDED_BYTES, f"loading took {peak >> 20} MB"  # ... and so is loading
    (stage,) = [s for s in loaded.compilation.snapshots if s.pass_name == "constant_fold"]
    folded = [c.data.nbytes for c in stage.graph.constants]
    assert MAX_FOLDED_BYTES // 2 < sum(folded) <= MAX_FOLDED_BYTES  # folded up to the bound
    # What is not folded is computed when the graph runs, the same values either way
    few = tfl.compile(lambda x: many_folds(x, 40), tfl.ones(3, dtype="float64"),
                      passes=["constant_fold"])
    np.testing.assert_allclose(few(tfl.ones(3, dtype="float64")).numpy(),
                               2 * sum(range((1 << 16) - 1, (1 << 16) + 39)) + np.ones(3))
