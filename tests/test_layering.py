"""The packages depend one way only (PRODUCT.md, Architecture; dbcore/__init__.py):

    dbcore   <-  queues   (the engine)
    dbcore   <-  probes   (the samplers)
    dbcore, queues, probes   <-  tui   (the dashboard and the command line)

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

OURS = ("dbcore", "queues", "probes", "tui")
ALLOWED = {
    "dbcore": set(),
    "queues": {"dbcore"},
    "probes": {"dbcore"},
    "tui": {"dbcore", "queues", "probes"},
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
    [("dbcore", ("queues", "probes", "tui", "textual")), ("queues", ("probes", "tui", "textual")),
     ("probes", ("queues", "tui", "textual"))],
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
