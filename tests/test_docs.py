"""The README is a front door that stays true: short, its links resolve, its commands exist."""

from __future__ import annotations

import itertools
import re

import pytest

from tui.cli import build_parser

from .conftest import REPO

DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)#\s]+)(#[^)\s]*)?\)")


def test_the_readme_is_short_and_gives_the_two_setup_commands():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    assert "make run " in text and "make test " in text


@pytest.mark.parametrize("page", DOCS, ids=lambda p: p.name)
def test_every_relative_link_resolves(page):
    text = page.read_text(encoding="utf-8")
    targets = [m.group(1) for m in LINK.finditer(text) if "://" not in m.group(1)]
    missing = [t for t in targets if not (page.parent / t).exists()]
    assert missing == []


def test_every_command_in_the_readme_table_exists():
    text = (REPO / "README.md").read_text(encoding="utf-8")
    commands = re.findall(r"^\| `queuetop ([a-z]+(?: [a-z]+)?)", text, re.MULTILINE)
    assert len(commands) >= 8
    parser = build_parser()
    for command in commands:
        words = command.split()
        if words[0].startswith("-"):
            continue
        # `--help` of an existing command exits 0; of an unknown one, argparse exits 2.
        with pytest.raises(SystemExit) as exit_info:
            parser.parse_args([*words, "--help"])
        assert exit_info.value.code == 0, command


def test_the_readme_snapshot_example_has_the_reports_columns():
    """Issue 31: the README's example `snapshot` output had drifted (the report's header now says
    `source`, with a `delayed` column). Each table the example shows has the report's header."""
    from tui.report import render
    from tui.sample import sample_snapshot

    readme = (REPO / "README.md").read_text(encoding="utf-8").splitlines()
    report = render(sample_snapshot()).splitlines()
    # The report's tables: a title, then the header indented by two spaces.
    tables = [line for line, after in itertools.pairwise(report) if line and not line.startswith(" ") and after.startswith("  ")]
    titles = [title for title in tables if title in readme]
    assert "Queues (~ = depth estimated)" in titles
    for title in titles:
        shown = readme[readme.index(title) + 1].split()
        printed = report[report.index(title) + 1].split()
        assert shown == printed, (title, shown, printed)


def test_the_job_console_table_says_what_each_library_does():
    """docs/jobs.md's library × action table (issue 46) says "refused" exactly where the library's
    job console refuses the action, for every library with one."""
    from jobs.model import ACTIONS
    from jobs.registry import MODULES, library_for

    text = (REPO / "docs" / "jobs.md").read_text(encoding="utf-8")
    table = text.split("## What each library's actions run", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in table.splitlines() if line.startswith("| ") and not line.startswith("| library")]
    seen = set()
    for row in rows:
        cells = [cell.strip() for cell in row.strip("|").split("|")]
        source = re.search(r"\(`([^`]+)`\)", cells[0]).group(1)
        cls = library_for(source)
        assert cls is not None, source
        version = {"pg-boss 9": "20", "pg-boss 10": "24"}.get(cells[0].split(" (")[0])
        library = type(cls("public", version))
        for action, cell in zip(ACTIONS, cells[1:5], strict=True):
            assert cell.startswith("refused") == (action not in library.mirrors), (cells[0], action, cell)
        assert cells[5].startswith("refused") == (library.pause_mirrors is None), (cells[0], "pause")
        seen.add(source)
    assert seen == set(MODULES)
