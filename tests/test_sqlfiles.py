"""Every SQL statement lives in a `.sql` file, and the files and the code agree.

The code reaches a file's queries only through a module-level `Queries("pkg", "file.sql")`
binding subscripted with a literal (`ENGINE_SQL["claim_one"]`), or through a function whose
parameter is annotated `QueryName`, called with a literal (`queue.statement("enqueue")`). This
test reads every module of dbcore/, queues/, probes/, bench/ and tui/ with `ast` and checks that:

- every name used exists in the file it is looked up in, and every section is used somewhere;
- no lookup uses a computed name (which this scan could not follow);
- no Python string holds a SQL statement (tests may write SQL: they set up and check the truth);
- each dialect directory defines the same engine query names.
"""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from dbcore import pgversions, sqlfiles

from .conftest import REPO

PACKAGES = ("dbcore", "queues", "probes", "jobs", "bench", "tui")
LOADER = "dbcore/sqlfiles.py"  # Queries itself: the one place a name is looked up by value
SQL_PACKAGES = ("dbcore", "queues", "probes", "jobs", "bench")
# Files run whole, not looked up by name; and the table of fragments by major, whose sections
# dbcore/pgversions.py reads all at once (tests/test_servers.py checks each slot is filled); and
# a dialect's shared expressions, which dbcore/sqlfiles.py fills in as it loads a file.
SCRIPTS = {("queues", "schema.sql"), ("dbcore", "probe_session.sql"), ("dbcore", "lock_timeout.sql"), ("dbcore", "versions.sql"),
           ("dbcore", "fragments.sql")}
# A SQL statement: an upper-case keyword that opens one, then more text. Case-sensitive on
# purpose: "select a session first" is English, "SELECT id FROM" is SQL.
STATEMENT = re.compile(
    r"^\s*(SELECT|INSERT|UPDATE|DELETE|WITH|MERGE|LISTEN|UNLISTEN|NOTIFY|CREATE|DROP|ALTER|TRUNCATE|LOCK|"
    r"GRANT|REVOKE|SET|RESET|SHOW|BEGIN|COMMIT|ROLLBACK|SAVEPOINT|PREPARE|EXECUTE|DEALLOCATE|VACUUM|ANALYZE|"
    r"COPY|CALL|DO|EXPLAIN|DECLARE|FETCH|EXEC)\s+\S"
)
# Strings that read as SQL but are never sent to a database, each with the reason.
NOT_STATEMENTS = {
    "tui/sample.py": "the deterministic sample source shows invented session queries on screen",
}


@dataclass
class Scan:
    bindings: dict[str, tuple[str, str]] = field(default_factory=dict)  # NAME -> (package, file)
    uses: dict[tuple[str, str], set[str]] = field(default_factory=lambda: defaultdict(set))
    problems: list[str] = field(default_factory=list)


def _modules() -> list[tuple[str, ast.Module]]:
    out = []
    for package in PACKAGES:
        for path in sorted((REPO / package).rglob("*.py")):
            out.append((str(path.relative_to(REPO)), ast.parse(path.read_text(encoding="utf-8"), filename=str(path))))
    assert len(out) > 30
    return out


def _is_query_name_annotation(node: ast.expr | None) -> bool:
    return node is not None and any(isinstance(n, ast.Name) and n.id == "QueryName" for n in ast.walk(node))


def _literals(node: ast.expr) -> list[str] | None:
    """The string(s) an expression can be: a literal, or either branch of `a if c else b`."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return [node.value]
    if isinstance(node, ast.IfExp):
        body, orelse = _literals(node.body), _literals(node.orelse)
        return body + orelse if body is not None and orelse is not None else None
    return None


def _binding_name(node: ast.expr) -> str | None:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return None


def scan() -> Scan:
    result = Scan()
    modules = _modules()
    # 1. The bindings: NAME = Queries("package", "file.sql"), at module level only.
    for where, tree in modules:
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _binding_name(node.func) == "Queries":
                parent_ok = any(
                    isinstance(stmt, ast.Assign) and stmt.value is node and len(stmt.targets) == 1
                    and isinstance(stmt.targets[0], ast.Name) for stmt in tree.body
                )
                args = [a.value if isinstance(a, ast.Constant) else None for a in node.args]
                dialects = [k.value.value for k in node.keywords if k.arg == "dialect" and isinstance(k.value, ast.Constant)]
                if not parent_ok or len(args) != 2 or None in args or len(dialects) != len(node.keywords):
                    result.problems.append(f"{where}:{node.lineno}: Queries(...) must be a module-level NAME = "
                                           "Queries('package', 'file.sql'[, dialect='...']) with literal arguments")
                    continue
                stmt = next(s for s in tree.body if isinstance(s, ast.Assign) and s.value is node)
                name = stmt.targets[0].id
                # A binding to another dialect's file (its own sections) is that file: "mssql:queues.sql".
                file = args[1] if not dialects or dialects[0] == "postgresql" else f"{dialects[0]}:{args[1]}"
                if name in result.bindings and result.bindings[name] != (args[0], file):
                    result.problems.append(f"{where}: {name} is bound to two different files")
                result.bindings[name] = (args[0], file)
    # 2. Forwarders: functions with a QueryName parameter, and the file their lookups reach.
    forwarders: dict[str, tuple[str, str] | None] = {}
    positions: dict[str, int] = {}  # which positional argument of a call is the name (after self)
    functions = [(where, fn) for where, tree in modules for fn in ast.walk(tree)
                 if isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) and where != LOADER]
    for _where, fn in functions:
        params = [a for a in fn.args.args + fn.args.kwonlyargs if _is_query_name_annotation(a.annotation)]
        if params:
            forwarders[fn.name] = None
            names = [a.arg for a in fn.args.args]
            index = names.index(params[0].arg) if params[0].arg in names else 0
            positions[fn.name] = index - 1 if names and names[0] in ("self", "cls") else index
    for _ in range(len(forwarders) + 1):  # resolve chains (_bound -> statement -> _sql -> ENGINE_SQL)
        for _where, fn in functions:
            if fn.name not in forwarders or forwarders[fn.name] is not None:
                continue
            for node in ast.walk(fn):
                if isinstance(node, ast.Subscript) and _binding_name(node.value) in result.bindings:
                    forwarders[fn.name] = result.bindings[_binding_name(node.value)]
                elif isinstance(node, ast.Call) and forwarders.get(_binding_name(node.func) or ""):
                    forwarders[fn.name] = forwarders[_binding_name(node.func)]
    for name, file in forwarders.items():
        if file is None:
            result.problems.append(f"forwarder {name}() takes a QueryName but reaches no Queries lookup")
    # 3. Uses: subscripts of bindings and calls of forwarders; names must be literals, or a
    #    variable that is itself a QueryName (a parameter, or a loop over a QueryName tuple).
    for where, tree in modules:
        named_constants = {
            s.target.id: _literals_of_sequence(s.value) for s in tree.body
            if isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name) and _is_query_name_annotation(s.annotation)
        }
        for file_names in named_constants.values():
            if file_names is None:
                result.problems.append(f"{where}: a QueryName constant must be a tuple of literals")
        for fn in [tree, *[n for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]]:
            typed = set()
            if not isinstance(fn, ast.Module):
                typed |= {a.arg for a in fn.args.args + fn.args.kwonlyargs if _is_query_name_annotation(a.annotation)}
            loops = {}
            for node in ast.walk(fn):
                if isinstance(node, ast.For) and isinstance(node.target, ast.Name) and isinstance(node.iter, ast.Name) \
                        and node.iter.id in named_constants:
                    loops[node.target.id] = named_constants[node.iter.id] or []
            for node in _own_nodes(fn):
                key, name_node = None, None
                if isinstance(node, ast.Subscript) and _binding_name(node.value) in result.bindings:
                    key, name_node = result.bindings[_binding_name(node.value)], node.slice
                elif isinstance(node, ast.Call) and forwarders.get(_binding_name(node.func) or ""):
                    index = positions[_binding_name(node.func) or ""]
                    if len(node.args) <= index:
                        continue
                    key, name_node = forwarders[_binding_name(node.func)], node.args[index]
                if key is None:
                    continue
                names = _literals(name_node)
                if names is None and isinstance(name_node, ast.Name) and name_node.id in loops:
                    names = loops[name_node.id]
                if names is None and isinstance(name_node, ast.Name) and name_node.id in typed:
                    continue  # a forwarder passing its own parameter on
                if names is None:
                    result.problems.append(f"{where}:{node.lineno}: a query looked up by a computed name")
                    continue
                result.uses[key].update(names)
    return result


def _literals_of_sequence(node: ast.expr) -> list[str] | None:
    if not isinstance(node, (ast.Tuple, ast.List)):
        return None
    values = [_literals(e) for e in node.elts]
    return None if any(v is None for v in values) else [x for v in values for x in v]


def _own_nodes(fn: ast.AST):
    """The nodes of a function (or module) body, not those of functions nested in it."""
    stack = list(ast.iter_child_nodes(fn))
    while stack:
        node = stack.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            stack.extend(ast.iter_child_nodes(node))
        elif isinstance(node, ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


def _sql_files() -> dict[tuple[str, str], dict[str, str]]:
    """Every file of named queries: PostgreSQL's as (package, "file.sql"), another dialect's as
    (package, "mssql:file.sql"). A section of another dialect's file that PostgreSQL's file of the
    same name also has is reached through PostgreSQL's binding (a session runs its own dialect's
    text of the name); one only it has must be reached through a binding to that dialect's file."""
    files = {}
    for package in SQL_PACKAGES:
        for dialect_dir in sorted((REPO / package / "sql").iterdir()):
            for path in sorted(dialect_dir.rglob("*.sql")):
                name = path.relative_to(dialect_dir).as_posix()
                if (package, name) in SCRIPTS:
                    continue
                key = name if dialect_dir.name == "postgresql" else f"{dialect_dir.name}:{name}"
                files[(package, key)] = sqlfiles.load(package, dialect_dir.name, name)
    return files


# Sections written ahead of the code that will read them, each with its reason. Exact: a section
# that gets used must leave this list (test_every_section_of_every_file_is_used checks both ways).
NOT_YET_USED: dict[tuple[str, str], set[str]] = {}


# -- the loader ----------------------------------------------------------------------------


def test_sections_are_split_by_name_and_comments_dropped():
    text = "-- file comment\n-- name: first\n-- why\nSELECT 1;\n\n-- name: second\nSELECT 2\nFROM t;\n"
    assert sqlfiles.parse_sections(text) == {"first": "SELECT 1;", "second": "SELECT 2\nFROM t;"}


def test_duplicate_and_empty_sections_are_rejected():
    with pytest.raises(ValueError, match="twice"):
        sqlfiles.parse_sections("-- name: a\nSELECT 1;\n-- name: a\nSELECT 2;\n")
    with pytest.raises(ValueError, match="empty"):
        sqlfiles.parse_sections("-- name: a\n-- only a comment\n")


def test_an_unknown_name_says_which_file_it_was_looked_up_in():
    with pytest.raises(KeyError, match=r"no query 'nope' in probes/sql/postgresql/locks.sql"):
        sqlfiles.Queries("probes", "locks.sql")["nope"]


# -- the code and the files agree ----------------------------------------------------------


def test_every_lookup_is_one_this_scan_can_follow():
    result = scan()
    assert result.problems == []
    assert {"ENGINE_SQL", "LOCKS_SQL", "DETAILS_SQL", "BENCH_SQL"} <= set(result.bindings)


def test_every_query_named_in_the_code_exists_in_its_file():
    result, files = scan(), _sql_files()
    assert set(result.uses) <= set(files), "a Queries binding names a file that is not there"
    missing = {f"{pkg}/{file}": sorted(names - set(files[(pkg, file)])) for (pkg, file), names in result.uses.items()}
    assert {k: v for k, v in missing.items() if v} == {}


def test_every_section_of_every_file_is_used():
    result, files = scan(), _sql_files()
    unused = {}
    for (pkg, file), queries in files.items():
        used = result.uses.get((pkg, file), set()) | result.uses.get((pkg, file.partition(":")[2]), set())
        left = set(queries) - used
        if left != NOT_YET_USED.get((pkg, file), set()):
            unused[f"{pkg}/{file}"] = sorted(left)
    assert unused == {}


def test_the_scan_sees_each_way_the_code_names_a_query():
    uses = scan().uses
    engine = uses[("queues", "queries.sql")]
    assert "claim_one" in engine  # a loop over the hot path's QueryName tuple
    assert "enqueue" in engine  # through the TableQueue._bound forwarder
    assert {"naive_answer", "task_answer"} <= engine  # either branch of a conditional
    assert "lookup_queue" in engine  # ENGINE_SQL["..."] through `schema.`
    assert "picture" in uses[("probes", "locks.sql")] and {"waiting", "sessions", "applocks"} <= uses[("probes", "mssql:locks.sql")]


def test_no_sql_statement_is_written_in_python():
    found = []
    for where, tree in _modules():
        if where in NOT_STATEMENTS:
            continue
        docstrings = {
            id(node.body[0].value) for node in ast.walk(tree)
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
            and node.body and isinstance(node.body[0], ast.Expr) and isinstance(node.body[0].value, ast.Constant)
        }
        for node in ast.walk(tree):
            text = None
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings:
                text = node.value
            elif isinstance(node, ast.JoinedStr) and node.values and isinstance(node.values[0], ast.Constant):
                text = str(node.values[0].value)
            if text is not None and STATEMENT.match(text):
                found.append(f"{where}:{node.lineno}: {text[:60]!r}")
    assert found == []


def test_the_statement_check_catches_sql_and_passes_english():
    for sql_text in ("SELECT 1", "LISTEN queuetop_enqueue", "  DELETE FROM t WHERE x = %s", "LOCK TABLE {} IN EXCLUSIVE MODE"):
        assert STATEMENT.match(sql_text), sql_text
    for english in ("select a session in the Locks panel first", "SELECT", "Delete processed messages", "lock"):
        assert not STATEMENT.match(english), english


def test_dialect_directories_define_the_same_query_names():
    """Every dialect defines PostgreSQL's engine queries, but for the few that only PostgreSQL
    can run (tests/test_mssql_sql.py's PG_ONLY, each with its reason): their callers ask the
    dialect's capabilities first."""
    from .test_mssql_sql import PG_ONLY

    root = Path(REPO / "queues" / "sql")
    dialects = {d.name: sqlfiles.load("queues", d.name, "queries.sql") for d in root.iterdir() if (d / "queries.sql").exists()}
    assert {"postgresql", "mssql"} <= set(dialects)
    names = {name: set(q) for name, q in dialects.items()}
    reference = names["postgresql"]
    assert set(PG_ONLY) <= reference
    expected = {name: reference - set(PG_ONLY) if name == "mssql" else reference for name in names}
    assert {name: sorted(expected[name] ^ found) for name, found in names.items() if found != expected[name]} == {}


def test_queue_queries_have_no_stray_braces():
    # `{name}` fields are filled with quoted identifiers or literals only; any other brace
    # would break psycopg.sql formatting.
    for name, text in sqlfiles.load("queues", "postgresql", "queries.sql").items():
        fields = set(re.findall(r"\{(\w*)\}", text))
        assert fields <= {"table", "channel_payload", "database", *pgversions.fragments()}, (name, fields)
