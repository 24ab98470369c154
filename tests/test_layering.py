"""probes/ and queues/ must never import textual or tui/ (PRODUCT.md, Architecture)."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

from .conftest import REPO

FORBIDDEN = ("textual", "tui")


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


@pytest.mark.parametrize("package", ["queues", "probes"])
def test_package_sources_do_not_import_the_ui(package):
    files = sorted((REPO / package).rglob("*.py"))
    assert files
    offenders = {str(f.relative_to(REPO)): sorted(_imports(f) & set(FORBIDDEN)) for f in files}
    assert {f: m for f, m in offenders.items() if m} == {}


def test_importing_engine_and_probes_loads_no_textual_at_runtime():
    code = (
        "import sys, importlib, pkgutil\n"
        "import queues, probes\n"
        "for pkg in (queues, probes):\n"
        "    for mod in pkgutil.walk_packages(pkg.__path__, pkg.__name__ + '.'):\n"
        "        importlib.import_module(mod.name)\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('textual', 'tui'))\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, check=True)
    assert out.stdout.strip() == ""
