"""The SQL Server dialect's SQL files, checked without a server (none can run on this machine;
a live suite runs them for real when QUEUETOP_MSSQL_DSN is set).

- every statement of queues/sql/mssql/queries.sql and every batch of schema.sql parses with
  sqlfluff's `tsql` dialect (placeholders bound as T-SQL variables, `{table}` as a bracketed
  name); the few it cannot parse are listed with the reason, and must still fail, and only at
  the statement listed;
- both dialects define the same queries (less the PostgreSQL-only ones, each with its reason),
  with the same parameters, `{fields}` and result columns in the same order (the same Python
  reads the rows by position), and the schemas the same tables and columns;
- a batch of several statements sets NOCOUNT (and, when it writes more than once, XACT_ABORT
  in a transaction) and restores them;
- every dequeue carries ROWLOCK, READPAST, UPDLOCK and READCOMMITTEDLOCK on the table it takes
  rows from, with TOP and ORDER BY inside the CTE that has the hints, and writes through it;
- every table hint is one of Microsoft's, and literal TOP limits stay far below lock escalation;
- no PostgreSQL syntax slipped in.
"""

from __future__ import annotations

import re

import pytest
from sqlfluff.core import Linter

from dbcore import sqlfiles

from .tsql import (
    DML,
    Parse,
    bind_variables,
    code_only,
    column_name,
    depth_zero,
    enclosing_parentheses,
    fails_only_at,
    split_top_level,
    sql_fields,
    tsql_linter,
)

PG_QUERIES = sqlfiles.load("queues", "postgresql", "queries.sql")
MSSQL_QUERIES = sqlfiles.load("queues", "mssql", "queries.sql")
MSSQL_SCHEMA = sqlfiles.read_script("queues", "mssql", "schema.sql")
PG_SCHEMA = sqlfiles.read_script("queues", "postgresql", "schema.sql")

# What the Python side fills `{field}`s with: bracket-quoted identifiers.
FIELDS = {"table": "[queuetop].[q_example]", "database": "[queuetop_example]"}
# A batch separator of schema.sql (ODBC knows no `GO`): the Python side splits on it.
BATCH_SEPARATOR = re.compile(r"^\s*--\s*batch\s*$", re.MULTILINE)

# PostgreSQL queries with no honest T-SQL equivalent: left out of the mssql file (never faked
# with a `SELECT 1`), so the Python side must not call them on SQL Server.
PG_ONLY = {
    "listen_enqueue": "LISTEN/NOTIFY has no SQL Server equivalent a pyodbc session can wait on: Service Broker's "
                      "WAITFOR (RECEIVE ...) needs a queue and a service per channel and is missing on Azure SQL Database, "
                      "query notifications are not usable from pyodbc; SQL Server workers poll",
    "create_queue_trigger": "the trigger only feeds LISTEN/NOTIFY (see listen_enqueue): there is nothing for it to notify",
    "cancel_backend": "pg_cancel_backend cancels a session's running statement and keeps the session; T-SQL can only end "
                      "another session (KILL: terminate_backend), a request is cancelled only by its own client's attention",
}

# Statements sqlfluff's tsql dialect cannot parse: {query: (a text of the statement where
# sqlfluff stops, why)}. Each must still fail to parse (so that the list cannot go stale), and
# only from that statement on: what comes before it is still checked. Such a statement is
# placed last in its query or batch.
_NO_LOCK_ESCALATION = "sqlfluff 4.5's tsql grammar has no ALTER TABLE ... SET (LOCK_ESCALATION = ...)"
UNPARSABLE = {
    "create_queue_table": ("SET (LOCK_ESCALATION = DISABLE)", _NO_LOCK_ESCALATION),
}
# The same for schema.sql's batches, each found by its text.
UNPARSABLE_SCHEMA = {
    "ALTER TABLE queuetop.ring_cells SET (LOCK_ESCALATION = DISABLE)": _NO_LOCK_ESCALATION,
}

# Queries that take rows for a consumer: {query: the table they take rows from}. Each must
# carry DEQUEUE_HINTS on that table, with TOP and ORDER BY in the CTE that has the hints.
DEQUEUES = {
    "claim_one": "{table}",
    "claim_batch": "{table}",
    "take_held": "{table}",
    "outbox_take": "queuetop.outbox",
    "compaction_take_ids": "queuetop.task_status_deltas",
}
DEQUEUE_HINTS = {"ROWLOCK", "READPAST", "UPDLOCK", "READCOMMITTEDLOCK"}
# Dequeues that serialise on purpose instead of skipping: {query: (the row they wait for, why)}.
SERIALISED_TAKES = {
    "ring_take": ("queuetop.ring_heads", "readers take cells in order, one at a time, waiting for the head row "
                  "(PostgreSQL: FOR UPDATE); READPAST on a cell inside [head, tail) would leave a hole"),
}
# Other queries that use READPAST, and why they are not dequeues.
READPAST_ELSEWHERE = {"ring_put": "counts free cells, skipping those a reader holds (not free until it commits)"}

# Queries whose result differs in shape from PostgreSQL's on purpose: {query: why}.
RESULT_SHAPES = {
    "scenario_pause": "WAITFOR DELAY returns no row; PostgreSQL's pg_sleep returns one void value, which nobody reads",
}

# Microsoft's table hints (Transact-SQL reference, "Table hints"). INDEX, FORCESEEK and
# SPATIAL_WINDOW_MAX_CELLS take arguments.
TABLE_HINTS = frozenset({
    "NOLOCK", "READUNCOMMITTED", "UPDLOCK", "REPEATABLEREAD", "SERIALIZABLE", "READCOMMITTED", "TABLOCK", "TABLOCKX",
    "PAGLOCK", "ROWLOCK", "NOWAIT", "READPAST", "XLOCK", "SNAPSHOT", "NOEXPAND", "HOLDLOCK", "READCOMMITTEDLOCK",
    "FORCESEEK", "FORCESCAN", "INDEX", "KEEPIDENTITY", "KEEPDEFAULTS", "IGNORE_CONSTRAINTS", "IGNORE_TRIGGERS",
    "SPATIAL_WINDOW_MAX_CELLS",
})
HINTS_WITH_ARGUMENTS = {"INDEX", "FORCESEEK", "SPATIAL_WINDOW_MAX_CELLS"}
LOCK_ESCALATION_THRESHOLD = 5000

# PostgreSQL syntax that has no place in a T-SQL file, looked for in code (not comments, not
# string literals), with the placeholders already bound as @variables.
POSTGRESQL_SYNTAX = {
    "FOR UPDATE": re.compile(r"\bFOR\s+UPDATE\b", re.IGNORECASE),
    "FOR SHARE": re.compile(r"\bFOR\s+SHARE\b", re.IGNORECASE),
    "SKIP LOCKED": re.compile(r"\bSKIP\s+LOCKED\b", re.IGNORECASE),
    ":: cast": re.compile(r"::"),
    "RETURNING": re.compile(r"\bRETURNING\b", re.IGNORECASE),
    "now()": re.compile(r"\bnow\s*\(\s*\)", re.IGNORECASE),
    "ON CONFLICT": re.compile(r"\bON\s+CONFLICT\b", re.IGNORECASE),
    "LIMIT": re.compile(r"(?<![@\w])LIMIT\s+[@\d(]", re.IGNORECASE),
    "array type": re.compile(r"\w\[\]"),
    "= ANY(array)": re.compile(r"=\s*ANY\s*\(\s*@", re.IGNORECASE),
    "IF NOT EXISTS in DDL": re.compile(r"\b(CREATE|ALTER)\s+\w+\s+IF\s+NOT\s+EXISTS\b|\bADD\s+COLUMN\s+IF\b", re.IGNORECASE),
    "PostgreSQL function": re.compile(r"\b(pg_\w+|clock_timestamp|generate_series|unnest|array_agg|to_regclass)\s*\(",
                                      re.IGNORECASE),
}


# -- helpers ----------------------------------------------------------------------------------


def _rendered(text: str) -> str:
    """A query as the Python side sends it: `{fields}` filled, `%%` a percent sign."""
    return text.format(**FIELDS).replace("%%", "%")


_HINT_GROUP = re.compile(r"\bWITH\s*\(((?:[^()]|\([^()]*\))*)\)", re.IGNORECASE)
_OPTION = re.compile(r"^\s*\w+\s*=")
_HINT = re.compile(r"^\s*(\w+)\s*(\(.*\))?\s*$", re.DOTALL)


def _hint_groups(code: str) -> list[list[str]]:
    """Every `WITH (...)` table-hint list of some code, each as its items; index options
    (`WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)`: every item `name = value`) are not hints."""
    groups = []
    for match in _HINT_GROUP.finditer(code):
        items = split_top_level(match.group(1))
        if not all(_OPTION.match(item) for item in items):
            groups.append(items)
    return groups


def _bad_hints(code: str) -> list[str]:
    """The hints of some code that are not Microsoft's (or take arguments they do not take)."""
    bad = []
    for group in _hint_groups(code):
        for item in group:
            match = _HINT.match(item)
            name = match.group(1).upper() if match else ""
            if name not in TABLE_HINTS or (match and match.group(2) and name not in HINTS_WITH_ARGUMENTS):
                bad.append(item)
    return bad


def _hints_on(code: str, table: str) -> list[tuple[set[str], int]]:
    """The hint sets on each reference to `table` (`FROM table WITH (...)`, `JOIN table AS x
    WITH (...)`), with where each hint list starts."""
    pattern = re.compile(rf"\b(?:FROM|JOIN)\s+{re.escape(table)}(?:\s+AS\s+\w+)?\s+WITH\s*\(((?:[^()]|\([^()]*\))*)\)",
                         re.IGNORECASE)
    found = []
    for match in pattern.finditer(code):
        names = set()
        for item in split_top_level(match.group(1)):
            hint = _HINT.match(item)
            names.add(hint.group(1).upper() if hint else item)
        found.append((names, match.start()))
    return found


def _top_expressions(code: str) -> list[str]:
    """The expression of every `TOP (...)`."""
    found = []
    for match in re.finditer(r"\bTOP\s*\(", code, re.IGNORECASE):
        depth, start = 0, match.end() - 1
        for end in range(start, len(code)):
            depth += {"(": 1, ")": -1}.get(code[end], 0)
            if depth == 0:
                found.append(code[start + 1 : end])
                break
    return found


def _result_columns(statement: str) -> list[str] | None:
    """The result columns of one statement (`RETURNING`, `OUTPUT` without INTO, or a SELECT
    that is the statement itself, after its CTEs), or None when it returns no rows."""
    code = statement.strip()
    found = depth_zero(code, re.compile(r"(RETURNING|OUTPUT)\b", re.IGNORECASE))
    if found:
        stop = depth_zero(code, re.compile(r"(INTO|VALUES|SELECT|FROM|WHERE)\b|;", re.IGNORECASE), found.end())
        if stop and stop.group(0).upper() == "INTO":
            return None  # OUTPUT ... INTO a table: no rows for the client
        return split_top_level(code[found.end() : stop.start() if stop else len(code)])
    main = depth_zero(code, DML)
    if main is None or main.group(1).upper() != "SELECT":
        return None
    position = main.end() + re.match(r"\s*(DISTINCT\s+)?", code[main.end() :], re.IGNORECASE).end()
    if re.match(r"TOP\s*\(", code[position:], re.IGNORECASE):
        position = code.index("(", position) + len(_top_expressions(code[position:])[0]) + 2
    stop = depth_zero(code, re.compile(r"(FROM|UNION)\b|;", re.IGNORECASE), position)
    items = split_top_level(code[position : stop.start() if stop else len(code)])
    return None if items and re.match(r"@\w+\s*=", items[0]) else items  # SELECT @x = ...: assigns, returns nothing


def _results(text: str) -> list[list[str]]:
    """The result column lists of every statement of a query (or batch) that returns rows."""
    code = bind_variables(code_only(text))
    statements, depth, begin = [], 0, 0
    for i, char in enumerate(code):
        depth += {"(": 1, ")": -1}.get(char, 0)
        if char == ";" and depth == 0:
            statements.append(code[begin : i + 1])
            begin = i + 1
    statements.append(code[begin:])
    found = []
    for statement in statements:
        # A statement inside IF/BEGIN/WHILE: what follows the control words.
        body = re.sub(r"^\s*((IF\b.*?\n|BEGIN|END|ELSE|WHILE\b.*?\n)\s*)*", "", statement, flags=re.IGNORECASE | re.DOTALL)
        columns = _result_columns(body) if DML.search(body) else None
        if columns is not None:
            found.append(columns)
    return found


def _postgresql_syntax(text: str) -> list[str]:
    code = code_only(bind_variables(text))
    return [name for name, pattern in POSTGRESQL_SYNTAX.items() if pattern.search(code)]


def _schema_batches(script: str) -> list[str]:
    """schema.sql's batches as the Python side runs them: those with code in them."""
    return [batch for batch in BATCH_SEPARATOR.split(script) if code_only(batch).strip()]


def _create_tables(script: str) -> dict[str, list[str]]:
    """{table: its columns in order} of every CREATE TABLE of a script."""
    code = code_only(script)
    tables = {}
    for match in re.finditer(r"\bCREATE\s+TABLE\s+(?:IF\s+NOT\s+EXISTS\s+)?(\S+)\s*\(", code, re.IGNORECASE):
        body = enclosing_parentheses(code, match.end())
        columns = []
        for item in split_top_level(body):
            first = item.split()[0].strip("[]\"")
            if first.upper() not in {"PRIMARY", "CONSTRAINT", "UNIQUE", "CHECK", "FOREIGN", "INDEX", "EXCLUDE"}:
                columns.append(first.lower())
        tables[match.group(1).lower()] = columns
    return tables


# -- parsing with sqlfluff ----------------------------------------------------------------------


@pytest.fixture(scope="module")
def linter() -> Linter:
    return tsql_linter([*PG_QUERIES.values(), *MSSQL_QUERIES.values()])


@pytest.fixture(scope="module")
def parsed_queries(linter: Linter) -> dict[str, Parse]:
    return {name: Parse(linter, _rendered(text)) for name, text in MSSQL_QUERIES.items()}


@pytest.fixture(scope="module")
def parsed_batches(linter: Linter) -> list[Parse]:
    return [Parse(linter, batch) for batch in _schema_batches(MSSQL_SCHEMA)]


def test_a_parse_that_gives_up_is_detected(linter: Linter):
    # (A lone unknown word would parse: T-SQL runs `name 1` as a procedure call.)
    for text in ("SELECT id FROM t FOR UPDATE SKIP LOCKED", "SELECT id FROM t WITH (READPASTT)", "SELECT id FROM t WHERE"):
        assert not Parse(linter, text).ok, text
    good = Parse(linter, "SELECT TOP (1) id FROM t WITH (ROWLOCK, READPAST, UPDLOCK) ORDER BY id")
    assert good.ok, good.problems


def test_every_query_parses_as_tsql(parsed_queries: dict[str, Parse]):
    failed = {name: parse.problems for name, parse in parsed_queries.items() if name not in UNPARSABLE and not parse.ok}
    assert failed == {}


def test_every_schema_batch_parses_as_tsql(parsed_batches: list[Parse]):
    failed = [(parse.text.strip()[:80], parse.problems) for parse in parsed_batches
              if not any(marker in parse.text for marker in UNPARSABLE_SCHEMA) and not parse.ok]
    assert failed == []


def test_each_unparsable_statement_still_fails_and_only_there(parsed_queries: dict[str, Parse], parsed_batches: list[Parse]):
    assert all(reason for _, reason in UNPARSABLE.values()) and all(UNPARSABLE_SCHEMA.values())
    stale = {}
    for name, (marker, _reason) in UNPARSABLE.items():
        assert marker in parsed_queries[name].text, (name, marker)
        stale[name] = fails_only_at(parsed_queries[name], marker)
    for marker in UNPARSABLE_SCHEMA:
        batches = [parse for parse in parsed_batches if marker in parse.text]
        assert len(batches) == 1, marker
        stale[marker] = fails_only_at(batches[0], marker)
    assert {key: why for key, why in stale.items() if why} == {}


def test_a_batch_of_several_statements_sets_nocount_and_restores_it(parsed_queries: dict[str, Parse]):
    """pyodbc reads the first result of a batch: with row counts on, that is the count of its
    first INSERT, and the SELECT that follows is never read."""
    wrong = {}
    for name, parse in parsed_queries.items():
        if name in UNPARSABLE or parse.statements < 2:
            continue
        code = code_only(parse.text).strip()
        if not code.startswith("SET NOCOUNT ON;") or not code.endswith("SET NOCOUNT OFF;"):
            wrong[name] = "SET NOCOUNT ON first, SET NOCOUNT OFF last"
    assert len([n for n, p in parsed_queries.items() if p.statements >= 2]) >= 15
    assert wrong == {}


def test_a_batch_that_writes_twice_is_one_transaction_that_aborts_on_error():
    """Several writes in one batch: SET XACT_ABORT ON and BEGIN/COMMIT TRANSACTION, so that an
    error rolls all of them back and ends the batch (T-SQL otherwise runs on after most errors)."""
    wrong = {}
    for name, text in MSSQL_QUERIES.items():
        code = code_only(text)
        # Statements that write (a MERGE's own `UPDATE SET` and `INSERT (...)` are not).
        writes = re.findall(r"(?im)^\s*(INSERT\s+INTO|UPDATE\s+(?!SET\b)[\w\[@{]|DELETE\s+FROM|MERGE\s)", code)
        if len(writes) < 2:
            continue
        if not ("SET XACT_ABORT ON;" in code and "BEGIN TRANSACTION;" in code and "COMMIT TRANSACTION;" in code
                and code.strip().endswith("SET XACT_ABORT OFF;\nSET NOCOUNT OFF;")):
            wrong[name] = writes
    assert wrong == {}


# -- the two dialects agree ---------------------------------------------------------------------


def test_both_dialects_define_the_same_queries_but_the_postgresql_only_ones():
    assert all(reason.strip() for reason in PG_ONLY.values())
    assert set(PG_ONLY) <= set(PG_QUERIES), "PG_ONLY names a query PostgreSQL does not have"
    assert not set(PG_ONLY) & set(MSSQL_QUERIES), "a query listed as PostgreSQL-only is defined for SQL Server"
    assert sorted(set(PG_QUERIES) - set(PG_ONLY) ^ set(MSSQL_QUERIES)) == []


def test_both_dialects_take_the_same_parameters_and_fields():
    params = {name: (set(sqlfiles.PLACEHOLDER.findall(PG_QUERIES[name])), set(sqlfiles.PLACEHOLDER.findall(text)))
              for name, text in MSSQL_QUERIES.items()}
    assert {name: pair for name, pair in params.items() if pair[0] != pair[1]} == {}
    fields = {name: (sql_fields(PG_QUERIES[name]), sql_fields(text)) for name, text in MSSQL_QUERIES.items()}
    assert {name: pair for name, pair in fields.items() if pair[0] != pair[1]} == {}
    assert set().union(*(f for _, f in fields.values())) <= set(FIELDS)


def test_both_dialects_return_the_same_columns_in_the_same_order():
    """The same Python code reads the rows by position: the same result sets, with as many
    columns, named the same where PostgreSQL names them (an expression's column, `count(*)`,
    is matched by position only)."""
    differ, returning = {}, 0
    for name, text in MSSQL_QUERIES.items():
        pg = [[column_name(item) for item in columns] for columns in _results(PG_QUERIES[name])]
        mssql = [[column_name(item) for item in columns] for columns in _results(text)]
        returning += bool(pg)
        same = len(pg) == len(mssql) and all(
            len(a) == len(b) and all(x is None or x == y for x, y in zip(a, b, strict=True)) for a, b in zip(pg, mssql, strict=True)
        )
        if not same:
            differ[name] = (pg, mssql)
    assert {name: shapes for name, shapes in differ.items() if name not in RESULT_SHAPES} == {}
    assert set(RESULT_SHAPES) <= set(differ), "a listed difference is gone: take it off RESULT_SHAPES"
    assert returning >= 50


def test_the_column_check_reads_output_select_and_returning():
    assert _results("INSERT INTO t (a) OUTPUT inserted.id, 1 AS x VALUES (1);") == [["inserted.id", "1 AS x"]]
    assert _results("DELETE FROM t OUTPUT deleted.id INTO @gone (id) WHERE a = 1;") == []
    assert _results("SET NOCOUNT ON; SELECT @n = COUNT(*) FROM t; SELECT TOP (CONVERT(int, @n)) a, b AS c FROM t;") == [["a", "b AS c"]]
    assert _results("WITH x AS (SELECT 1 AS a) UPDATE t SET a = 1 FROM x RETURNING t.a, t.b;") == [["t.a", "t.b"]]
    assert [column_name(c) for c in ["m.body::text AS body", "count(*)", "q.[queue]", "1"]] == ["body", None, "queue", None]


def test_a_percent_sign_is_doubled():
    """The one bind style is %(name)s: any other percent sign is written %%."""
    stray = {}
    for name, text in MSSQL_QUERIES.items():
        left = sqlfiles.PLACEHOLDER.sub("", text).replace("%%", "")
        if "%" in left:
            stray[name] = left[left.index("%") - 20 : left.index("%") + 20]
    assert stray == {}
    assert "%" not in MSSQL_SCHEMA


def test_both_schemas_have_the_same_tables_and_columns():
    pg = _create_tables(PG_SCHEMA) | _create_tables(PG_QUERIES["create_queue_table"])
    mssql = _create_tables(MSSQL_SCHEMA) | _create_tables(MSSQL_QUERIES["create_queue_table"])
    assert len(pg) >= 20 and "{table}" in pg and pg["{table}"][:2] == ["id", "enqueued_at"]
    assert mssql == pg


def test_every_schema_batch_is_idempotent_and_the_version_comes_last():
    batches = [code_only(batch).strip() for batch in _schema_batches(MSSQL_SCHEMA)]
    assert len(batches) >= 20
    assert [b[:60] for b in batches if not b.startswith(("IF ", "MERGE "))] == []
    assert batches[-1].startswith("MERGE queuetop.meta") and "N'schema_version'" in MSSQL_SCHEMA


# -- dequeues, locks and hints ------------------------------------------------------------------


def test_every_dequeue_skips_and_locks_rows_and_orders_inside_the_hinted_cte():
    postgres_dequeues = {name for name, text in PG_QUERIES.items() if "SKIP LOCKED" in text}
    assert postgres_dequeues <= set(DEQUEUES), "a PostgreSQL dequeue has no SQL Server dequeue check"
    readpast = {name for name, text in MSSQL_QUERIES.items() if "READPAST" in code_only(text)}
    assert readpast == set(DEQUEUES) | set(READPAST_ELSEWHERE)
    wrong = {}
    for name, table in DEQUEUES.items():
        code = code_only(MSSQL_QUERIES[name])
        references = _hints_on(code, table)
        if len(references) != 1 or not DEQUEUE_HINTS <= references[0][0]:
            wrong[name] = f"{DEQUEUE_HINTS} on {table}: {references}"
            continue
        cte = enclosing_parentheses(code, references[0][1])
        if not (cte.lstrip().startswith("SELECT TOP (") and re.search(r"\bORDER\s+BY\s+id\s*$", cte)):
            wrong[name] = f"not SELECT TOP (...) ... ORDER BY id inside the hinted CTE: {cte[:60]!r}"
        elif not re.search(r"\)\s*(UPDATE next|DELETE FROM next|SELECT id FROM next)\b", code):
            wrong[name] = "the statement does not take the rows through the CTE"
    assert wrong == {}


def test_the_serialised_takes_wait_for_their_row_and_skip_nothing():
    for name, (row, reason) in SERIALISED_TAKES.items():
        assert reason
        code = code_only(MSSQL_QUERIES[name])
        references = _hints_on(code, row)
        assert len(references) == 1 and {"UPDLOCK", "ROWLOCK", "READCOMMITTEDLOCK"} <= references[0][0], (name, references)
        assert "READPAST" not in code, name


def test_dequeues_take_at_most_a_bounded_batch():
    for name in DEQUEUES:
        tops = _top_expressions(code_only(MSSQL_QUERIES[name]))
        assert len(tops) == 1, name
        literals = [int(n) for n in re.findall(r"\b\d+\b", tops[0])]
        assert literals and max(literals) <= 1000, (name, tops[0])
        assert tops[0].strip().isdigit() or re.fullmatch(r"CASE WHEN .* < (\d+) THEN .* ELSE \1 END", tops[0].strip()), tops[0]


def test_literal_top_limits_stay_far_below_lock_escalation():
    found = {}
    for name, text in MSSQL_QUERIES.items():
        for expression in _top_expressions(code_only(text)):
            found.setdefault(name, []).extend(int(n) for n in re.findall(r"\b\d+\b", expression))
    assert {name: limits for name, limits in found.items() if any(n >= LOCK_ESCALATION_THRESHOLD for n in limits)} == {}
    assert len(found) >= 8
    assert _top_expressions("SELECT TOP (5000) id FROM t") == ["5000"]


def test_every_table_hint_is_one_of_microsofts():
    bad = {name: _bad_hints(code_only(text)) for name, text in MSSQL_QUERIES.items()}
    assert {name: hints for name, hints in bad.items() if hints} == {}
    assert _bad_hints(code_only(MSSQL_SCHEMA)) == []
    used = {item.split("(")[0].strip().upper() for text in MSSQL_QUERIES.values() for group in _hint_groups(code_only(text))
            for item in group}
    assert {"ROWLOCK", "READPAST", "UPDLOCK", "READCOMMITTEDLOCK", "HOLDLOCK", "INDEX"} <= used


def test_the_hint_check_catches_a_typo_and_passes_index_options():
    assert _bad_hints("SELECT id FROM t WITH (ROWLOCK, READPASTT, UPDLOCK)") == ["READPASTT"]
    assert _bad_hints("SELECT id FROM t WITH (NOLOCK(1))") == ["NOLOCK(1)"]
    assert _bad_hints("SELECT id FROM t WITH (ROWLOCK, INDEX(1), FORCESEEK)") == []
    assert _bad_hints("CREATE TABLE t (id int, PRIMARY KEY (id) WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON))") == []
    assert _bad_hints(code_only("SELECT 1; -- WITH (READPASTT) in a comment")) == []  # comments are dropped first


def test_application_locks_belong_to_the_transaction_and_report_their_outcome():
    for name in ("init_lock", "compaction_try_lock"):
        assert "pg_advisory_xact_lock" in PG_QUERIES[name] or "pg_try_advisory_xact_lock" in PG_QUERIES[name]
        code = code_only(MSSQL_QUERIES[name])
        call = re.search(r"EXEC @r = sys\.sp_getapplock\s+(.*?);", code, re.DOTALL)
        assert call and "@LockOwner = N''" in call.group(1), name  # (string contents are emptied by code_only)
        assert "@LockOwner = N'Transaction'" in MSSQL_QUERIES[name], name
        assert re.search(r"SELECT [^;]*@r\b[^;]*;\s*SET NOCOUNT OFF;$", code.strip()), name
    try_lock = MSSQL_QUERIES["compaction_try_lock"]
    assert "@LockTimeout = 0" in try_lock and "AS locked;" in try_lock and "CONVERT(bit," in try_lock


def test_acks_and_retries_present_the_claim_token():
    for name, text in PG_QUERIES.items():
        if "claim_token = %(token)s" in text:
            assert "claim_token = CONVERT(bigint, %(token)s)" in MSSQL_QUERIES[name], name


def test_no_postgresql_syntax_in_the_sql_server_files():
    found = {name: _postgresql_syntax(text) for name, text in MSSQL_QUERIES.items()}
    assert {name: syntax for name, syntax in found.items() if syntax} == {}
    assert _postgresql_syntax(MSSQL_SCHEMA) == []


def test_the_postgresql_syntax_check_finds_it_in_postgresqls_own_files():
    found = set()
    for text in [*PG_QUERIES.values(), PG_SCHEMA]:
        found |= set(_postgresql_syntax(text))
    assert {"FOR UPDATE", "SKIP LOCKED", ":: cast", "RETURNING", "now()", "ON CONFLICT", "LIMIT"} <= found
    assert _postgresql_syntax("SELECT 1 -- FOR UPDATE SKIP LOCKED, in a comment") == []
    assert _postgresql_syntax("SELECT N'a::b' AS x, @limit AS y") == []
