"""The packages depend one way only (PRODUCT.md, Architecture; dbcore/__init__.py):

    dbcore   <-  queues   (the engine)
    dbcore   <-  probes   (the samplers)
    dbcore, probes   <-  jobs   (the job console: any library's jobs, read and acted on)
    dbcore, queues, probes   <-  bench   (the benchmarks)
    dbcore, queues, probes, jobs, bench   <-  tui   (the dashboard and the command line)

`queues` and `probes` never import each other, and nothing but `tui` imports textual.
Checked twice: statically (every import statement, at any depth of the module) and at run time
(importing every module of a package loads no module of a package it may not see).
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

OURS = ("dbcore", "queues", "probes", "jobs", "bench", "tui")
ALLOWED = {
    "dbcore": set(),
    "queues": {"dbcore"},
    "probes": {"dbcore"},
    "jobs": {"dbcore", "probes"},
    "bench": {"dbcore", "queues", "probes"},
    "tui": {"dbcore", "queues", "probes", "jobs", "bench"},
}
UI_ONLY = {"textual"}  # third-party packages only the dashboard may use


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def _violations(package: str) -> dict[str, list[str]]:
    files = sorted((REPO / package).rglob("*.py"))
    assert files, package
    forbidden = (set(OURS) - {package} - ALLOWED[package]) | (UI_ONLY if package != "tui" else set())
    found = {str(f.relative_to(REPO)): sorted(_imports(f) & forbidden) for f in files}
    return {f: m for f, m in found.items() if m}


@pytest.mark.parametrize("package", OURS)
def test_package_imports_only_what_its_layer_allows(package):
    assert _violations(package) == {}


def test_the_check_catches_an_import_against_the_direction(tmp_path):
    # The scan itself must see imports inside functions (where the old cycle hid).
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from probes.postgres import PostgresProbes\n    import textual.app\n")
    assert _imports(module) == {"probes", "textual"}


@pytest.mark.parametrize(
    ("package", "unseen"),
    [("dbcore", ("queues", "probes", "jobs", "bench", "tui", "textual")), ("queues", ("probes", "jobs", "bench", "tui", "textual")),
     ("probes", ("queues", "jobs", "bench", "tui", "textual")), ("jobs", ("queues", "bench", "tui", "textual")),
     ("bench", ("jobs", "tui", "textual"))],
)
def test_importing_a_package_loads_nothing_it_may_not_see(package, unseen):
    code = (
        "import sys, importlib, pkgutil\n"
        f"import {package} as pkg\n"
        "for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "    importlib.import_module(mod.name)\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {unseen!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == ""


# -- modules form a tree ---------------------------------------------------------------------


def _module_graph(root: Path) -> dict[str, set[str]]:
    """Each of our modules (`tui.cli`, `tui.commands` for an __init__) and the modules of ours it
    imports, wherever the import is written (in a function, under TYPE_CHECKING)."""
    modules: dict[str, Path] = {}
    for package in OURS:
        for path in sorted((root / package).rglob("*.py")):
            parts = path.relative_to(root).with_suffix("").parts
            modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path

    def ours(name: str) -> str | None:  # the module of ours a dotted name is in: `a.b.c` may be `a.b`'s attribute
        while name and name not in modules:
            name = name.rpartition(".")[0]
        return name or None

    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        targets: set[str | None] = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), filename=str(path))):
            if isinstance(node, ast.Import):
                targets.update(ours(alias.name) for alias in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = node.module or ""
                if node.level:
                    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
                    base = ".".join(package[: len(package) - node.level + 1] + ([node.module] if node.module else []))
                targets.update(ours(f"{base}.{alias.name}") or ours(base) for alias in node.names)
        graph[name] = {target for target in targets if target is not None and target != name}
    return graph


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Each set of modules that import one another, directly or not (depth-first; Tarjan)."""
    order: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(module: str) -> None:
        order[module] = low[module] = len(order)
        stack.append(module)
        for target in sorted(graph[module]):
            if target not in order:
                visit(target)
                low[module] = min(low[module], low[target])
            elif target in stack:
                low[module] = min(low[module], order[target])
        if low[module] == order[module]:
            members = stack[stack.index(module):]
            del stack[stack.index(module):]
            if len(members) > 1:
                found.append(sorted(members))

    for module in sorted(graph):
        if module not in order:
            visit(module)
    return found


def test_the_cycle_check_sees_imports_inside_functions_and_type_checking(tmp_path):
    package = tmp_path / "tui"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from tui.b import B\n")
    (package / "b.py").write_text("def f():\n    from . import c\n")
    (package / "c.py").write_text("def g():\n    import tui.a\n")
    graph = _module_graph(tmp_path)
    assert graph["tui.a"] == {"tui.b"} and graph["tui.b"] == {"tui.c"} and graph["tui.c"] == {"tui.a"}
    assert _cycles(graph) == [["tui.a", "tui.b", "tui.c"]]


def _cycles_of(package: str, graph: dict[str, set[str]]) -> list[list[str]]:
    """The cycles of `graph` that a module of `package` is part of."""
    return [cycle for cycle in _cycles(graph) if any(module.split(".")[0] == package for module in cycle)]


@pytest.mark.parametrize("package", OURS)
def test_no_modules_of_a_package_import_one_another(package):
    """No two modules need each other, even through an import inside a function or under
    TYPE_CHECKING (tui.cli and tui.entry once did): the imports of every package form a tree.
    Package by package, so a failure says which one has a cycle, and its modules."""
    cycles = _cycles_of(package, _module_graph(REPO))
    assert cycles == [], "modules that import one another:\n" + "\n".join(" <-> ".join(cycle) for cycle in cycles)


def test_the_cycle_check_tells_the_package_of_two_modules_importing_each_other(tmp_path):
    package = tmp_path / "probes"
    package.mkdir()
    (package / "__init__.py").write_text("")
    (package / "a.py").write_text("from .b import B\nA = 1\n")  # a name of b's, relatively
    (package / "b.py").write_text("from probes import a\nB = 2\n")  # the module a, from its package
    (package / "c.py").write_text("from .a import A\n")  # above both, in no cycle
    graph = _module_graph(tmp_path)
    assert graph["probes.a"] == {"probes.b"} and graph["probes.b"] == {"probes.a"} and graph["probes.c"] == {"probes.a"}
    assert _cycles_of("probes", graph) == [["probes.a", "probes.b"]]
    assert _cycles_of("tui", graph) == []
