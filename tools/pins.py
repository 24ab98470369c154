"""Print what `pip install -e '.[EXTRAS]'` would install here, one `name==version` a line (the
project itself aside): pip's own resolver, run dry (`--report`), on pyproject.toml's requirements.

The Makefile then installs exactly these with uv, which is several times faster than pip but
resolves differently (with pip, pytest-textual-snapshot 1.1.0 keeps pytest at 8; uv takes
pytest 9 and an older plugin): the venv must be the same whichever installer filled it.

    python tools/pins.py test,lint,mssql > pins.txt     (run by the venv's python, which has pip)
"""

from __future__ import annotations

import json
import subprocess
import sys
import tempfile
import tomllib
from pathlib import Path


def requirements(extras: list[str]) -> list[str]:
    project = tomllib.loads((Path(__file__).resolve().parent.parent / "pyproject.toml").read_text())["project"]
    return [*project["dependencies"], *(req for extra in extras for req in project["optional-dependencies"][extra])]


def main() -> int:
    extras = [extra for extra in (sys.argv[1] if len(sys.argv) > 1 else "").split(",") if extra]
    with tempfile.TemporaryDirectory() as tmp:
        report = Path(tmp) / "report.json"
        subprocess.run([sys.executable, "-m", "pip", "install", "-qq", "--disable-pip-version-check", "--dry-run",
                        "--ignore-installed", "--report", str(report), *requirements(extras)], check=True)
        install = json.loads(report.read_text())["install"]
    for item in install:
        print(f"{item['metadata']['name']}=={item['metadata']['version']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
