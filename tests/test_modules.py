"""teachflow's modules are layered: each imports only modules that come before it.

A learner reads the package in the order of the course (`teachflow/__init__.py` gives it); a
module that imported one defined later, even inside a function, would make them meet names
before their chapter. The import graph of `teachflow/` must have no cycle. Imports under
``if TYPE_CHECKING:`` serve annotations only and are left out.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import networkx as nx
import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "teachflow"


def module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported_modules(source: str, name: str, modules: set[str], package: bool = False) -> set[str]:
    """The package's modules that module `name` (`package`: an ``__init__``) imports anywhere in
    its `source`."""
    tree = ast.parse(source)
    type_only = {id(n) for node in ast.walk(tree)
                 if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test)
                 for stmt in node.body for n in ast.walk(stmt)}
    found = set()

    def add(target: str) -> None:
        while target and target not in modules:  # `from pkg.mod import Class` -> pkg.mod
            target = target.rpartition(".")[0]
        if target and target != name:
            found.add(target)

    for node in ast.walk(tree):
        if id(node) in type_only:
            continue
        if isinstance(node, ast.Import):
            for alias in node.names:
                add(alias.name)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = name.split(".") if package else name.split(".")[:-1]
                base = ".".join(parts[:len(parts) - node.level + 1] + [base] * bool(base))
            for alias in node.names:
                add(f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base)
    return found


def import_graph() -> nx.DiGraph:
    paths = sorted(PACKAGE.rglob("*.py"))
    modules = {module_name(p) for p in paths}
    graph = nx.DiGraph()
    graph.add_nodes_from(modules)
    for path in paths:
        source = path.read_text(encoding="utf-8")
        for target in imported_modules(source, module_name(path), modules,
                                       path.name == "__init__.py"):
            if target != "teachflow":  # (the package's __init__ imports every chapter)
                graph.add_edge(module_name(path), target)
    return graph


def test_the_import_graph_of_teachflow_has_no_cycle() -> None:
    graph = import_graph()
    cycles = [sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1]
    assert cycles == [], f"modules that import each other: {cycles}"


def test_the_checker_sees_imports_inside_functions_and_relative_ones() -> None:
    modules = {"teachflow", "teachflow.a", "teachflow.b", "teachflow.sub", "teachflow.sub.c"}
    source = ("from typing import TYPE_CHECKING\n"
              "if TYPE_CHECKING:\n    from teachflow import b\n"
              "def f():\n    from teachflow.sub import c\n"
              "from .. import a\n"
              "from . import c as see\n")
    found = imported_modules(source, "teachflow.sub.probe", modules)
    assert found == {"teachflow.sub.c", "teachflow.a"}


@pytest.mark.parametrize("module", ["teachflow.tensor.tensor", "teachflow.autodiff.tape",
                                    "teachflow.graph"])
def test_the_core_reads_before_staging(module: str) -> None:
    """The tape comes before Tensor, and neither knows of tracing or of the compiler."""
    later = nx.descendants(import_graph(), module)
    assert not later & {"teachflow.tracing.builder", "teachflow.staged.function",
                        "teachflow.compiler", "teachflow.transforms.gradients"}, later


def reading_orders() -> dict[str, list[str]]:
    """The chapters in the order a learner is told to read them: by the package's docstring, and
    by README.md's table (its first column)."""
    docstring = ast.get_docstring(ast.parse((PACKAGE / "__init__.py").read_text("utf-8")))
    readme = (PACKAGE.parent / "README.md").read_text("utf-8")
    table = "".join(line.split("|")[1] for line in readme.splitlines()
                    if line.startswith("| `teachflow/"))
    return {"teachflow/__init__.py": re.findall(r"`(\w+)`", docstring),
            "README.md": re.findall(r"`(?:teachflow/)?(\w+)(?:\.py|/)`", table)}


@pytest.mark.parametrize("where", ["teachflow/__init__.py", "README.md"])
def test_the_reading_order_is_every_chapter_each_after_what_it_imports(where: str) -> None:
    """The order a learner is told to read the package in names every module and package of
    `teachflow/` once, and each imports only chapters named before it."""
    graph = import_graph()
    chapters = {name.split(".")[1] for name in graph if name != "teachflow"}
    named = [word for word in reading_orders()[where] if word in chapters]
    assert sorted(named) == sorted(chapters), "each chapter named once"
    place = {chapter: i for i, chapter in enumerate(named)}
    later = [(a, b) for a, b in graph.edges if a != "teachflow"
             and place[a.split(".")[1]] < place[b.split(".")[1]]]
    assert later == [], f"modules that import a chapter named after them: {later}"
