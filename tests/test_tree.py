"""The file tree is the table of contents: a learner guesses the file from the question.

So the tree is kept readable: no file too long to read as one chapter, few modules at the
package's root (the chapters are packages), one name for one thing (no two classes of one
name, no two modules of one file name), and every package's docstring names its modules, so
that opening ``__init__.py`` says what the folder holds.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "teachflow"
MAX_LINES = 400
MAX_ROOT_MODULES = 8
#: The files whose lines are counted: source, style and text (no build output).
COUNTED = (".py", ".js", ".css", ".html", ".md")

def sources() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if "__pycache__" not in p.parts)


def packages() -> list[Path]:
    return sorted(p.parent for p in PACKAGE.rglob("__init__.py") if "__pycache__" not in p.parts)


def classes() -> dict[str, list[str]]:
    """Every class defined in teachflow (at any depth: in a function, in a class), by name:
    where each is defined (``path:line``)."""
    found: dict[str, list[str]] = defaultdict(list)
    for path in sources():
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                found[node.name].append(f"{path.relative_to(ROOT)}:{node.lineno}")
    return found


def modules_of(package: Path) -> list[str]:
    """The modules of `package`: its files (but ``__init__``) and its packages."""
    return sorted([p.stem for p in package.glob("*.py") if p.name != "__init__.py"]
                  + [p.name for p in package.iterdir() if (p / "__init__.py").exists()])


def test_no_file_of_teachflow_or_the_widgets_is_over_400_lines() -> None:
    files = [p for folder in (PACKAGE, ROOT / "widgets") for p in sorted(folder.rglob("*"))
             if p.is_file() and p.suffix in COUNTED]
    long = {str(p.relative_to(ROOT)): n for p in files
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES}
    assert long == {}, f"over {MAX_LINES} lines: {long}"


def test_the_root_of_teachflow_has_few_modules() -> None:
    root = [p.name for p in PACKAGE.glob("*.py") if p.name not in ("__init__.py", "__main__.py")]
    assert len(root) <= MAX_ROOT_MODULES, f"modules at the root: {sorted(root)}"


@pytest.mark.parametrize("private", [False, True], ids=["public", "private"])
def test_no_two_classes_have_one_name(private: bool) -> None:
    twice = {name: places for name, places in classes().items()
             if name.startswith("_") == private and len(places) > 1}
    assert twice == {}, f"classes of one name: {twice}"


#: A kind of op is one concept with one name in the two chapters about it: `teachflow.ops`
#: declares its ops (ops/elementwise.py), `teachflow.tensor` gives a tensor the methods that
#: apply them (tensor/elementwise.py). No other file name is shared.
KIND_OF_OP = {"elementwise.py": ["teachflow/ops/elementwise.py", "teachflow/tensor/elementwise.py"],
              "linalg.py": ["teachflow/ops/linalg.py", "teachflow/tensor/linalg.py"]}


def test_no_two_modules_have_one_file_name() -> None:
    where: dict[str, list[str]] = defaultdict(list)
    for path in sources():
        if path.name != "__init__.py":
            where[path.name].append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert twice == KIND_OF_OP, f"modules of one file name: {twice}"


@pytest.mark.parametrize("package", packages(), ids=lambda p: str(p.relative_to(ROOT)))
def test_every_package_names_its_modules_in_its_docstring(package: Path) -> None:
    docstring = ast.get_docstring(ast.parse((package / "__init__.py").read_text("utf-8"))) or ""
    missing = [m for m in modules_of(package) if f"`{m}`" not in docstring]
    assert docstring and missing == [], f"{package.relative_to(ROOT)}'s docstring does not " \
                                        f"name {missing} in backticks"




def test_every_op_teachflow_declares_has_a_name_of_its_own() -> None:
    """An op is known by its name: in the text form, in a saved graph (`OPS` looks it up) and
    in ONNX's converters. Two declarations of one name would leave one of them unreachable."""
    import importlib
    import pkgutil

    import teachflow.ops
    from teachflow.ops.op import OPS, Op

    by_name: dict[str, dict[int, str]] = {}
    for info in pkgutil.iter_modules(teachflow.ops.__path__, "teachflow.ops."):
        for attr, op in vars(importlib.import_module(info.name)).items():
            if isinstance(op, Op) and op.primitive:
                by_name.setdefault(op.name, {})[id(op)] = f"{info.name}.{attr}"
    shared = {name: sorted(set(where.values())) for name, where in by_name.items()
              if len(where) > 1}
    assert shared == {}, "ops declared twice under one name"
    assert all(id(OPS[name]) in where for name, where in by_name.items())


def test_no_file_holds_a_merge_s_conflict_markers() -> None:
    """A conflict left in a text file (README's prose, a notebook) runs nowhere, so no other
    test would say so."""
    suffixes = {*COUNTED, ".ipynb", ".toml", ".cfg", ".txt", ".yml", ".yaml", ".json"}
    folders = [p for p in ROOT.iterdir() if p.is_dir() and not p.name.startswith(".")
               and p.name not in ("build", "node_modules")]
    files = [p for p in ROOT.iterdir() if p.is_file()] + [
        p for folder in folders for p in folder.rglob("*")
        if p.is_file() and "release" not in p.parts and "__pycache__" not in p.parts]
    marked = [str(p.relative_to(ROOT)) for p in files
              if (p.suffix in suffixes or p.name == "Makefile")
              and any(line.startswith(("<<<<<<< ", ">>>>>>> "))
                      for line in p.read_text("utf-8", errors="replace").splitlines())]
    assert marked == [], f"merge conflict markers in {marked}"
