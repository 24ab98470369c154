"""The SQL Server library sources (Hangfire, NServiceBus's SQL Server transport), checked without
a server: none can run on this machine, so nothing here claims that a statement ran on one.

- every section of probes/sql/mssql/sources/hangfire.sql and nservicebus.sql parses with
  sqlfluff's `tsql` dialect (placeholder templater);
- every statement is read-only, uses only shared row-read hints, names only allow-listed system
  views, leaves the probe's own session out of the lock manager's rows, converts every parameter
  explicitly, and has no PostgreSQL syntax;
- every read of a library's table is bounded: a TOP (n) or a MIN/MAX, never a join, and skips
  rows other transactions hold;
- the libraries' times are UTC: no local-time function;
- the columns the Python side reads by name are columns the statements return;
- the two sources are registered for SQL Server only.

Every check is shown to fail on a wrong example (often the library's own statement: a probe
must not do what the library does). The sources' Python (their arithmetic on the rows) runs
only in the live suite: a fake session would be a mocked database.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest
from sqlfluff.core import Linter

from dbcore import sqlfiles
from dbcore.mssql import MssqlDialect
from probes.config import Config
from probes.sources import source_classes, sources_for
from probes.sources.hangfire import Hangfire
from probes.sources.nservicebus import NServiceBus

from .conftest import REPO
from .test_mssql_probes_sql import (
    _OPENJSON_WITH,
    _TABLE_HINTS,
    PROBE_HINTS,
    _hints,
    _postgresql_syntax,
    _results,
    _select_before,
    _select_star,
    _system_views,
    _unconverted_parameters,
    _writes,
)
from .tsql import (
    Parse,
    bind_variables,
    code_only,
    split_top_level,
    tsql_linter,
)

# Each file, and what the Python side fills its {table} slot with (dialect.format: quoted names):
# Hangfire's schema, or one transport table.
FILES = {"sources/hangfire.sql": "[HangFire]", "sources/nservicebus.sql": "[dbo].[Sales]"}
SECTIONS = {f"{file}:{name}": text for file in FILES for name, text in sqlfiles.load("probes", "mssql", file).items()}
MODULES = {"sources/hangfire.sql": "probes/sources/hangfire.py", "sources/nservicebus.sql": "probes/sources/nservicebus.py"}

# The libraries' own tables, as the statements name them: read only through a TOP (n) window or
# a MIN/MAX, never joined, always skipping rows another transaction holds.
LIBRARY_TABLES = {
    "sources/hangfire.sql": ("{table}.[JobQueue]", "{table}.[Job]", "{table}.[State]", "{table}.[Schema]"),
    "sources/nservicebus.sql": ("{table}",),
}
LIBRARY_READ_HINTS = {"ROWLOCK", "READPAST", "READCOMMITTEDLOCK"}

# Table hints these statements may use: the probes' shared row reads that skip held rows, and,
# instead of the probes' INDEX(1) (a library's index ids and names vary from table to table),
# FORCESEEK, which changes no lock: it pins the index seek the library's own statements make
# (Hangfire's fetch uses it), so that a missing index fails the statement instead of turning it
# into a scan.
HINTS = (PROBE_HINTS - {"INDEX"}) | {"FORCESEEK"}

# The system views and functions these statements may read, with the permission each needs.
_SERVER_STATE = "VIEW SERVER STATE (2022: VIEW SERVER PERFORMANCE STATE; Azure SQL Database: VIEW DATABASE STATE)"
SYSTEM_VIEWS = {
    "dm_tran_locks": _SERVER_STATE + "; read under HAS_PERMS_BY_NAME only",
    "dm_db_partition_stats": "VIEW DATABASE STATE (2022: VIEW DATABASE PERFORMANCE STATE); read under HAS_PERMS_BY_NAME only",
    "dm_db_stats_histogram": "SELECT on the table (or its ownership): the StateName index's histogram, Hangfire",
    "partitions": "catalog view: the rows of objects this login may see",
    "tables": "catalog view: the rows of objects this login may see",
    "schemas": "catalog view: the rows of schemas this login may see",
    "columns": "catalog view: the rows of objects this login may see",
    "index_columns": "catalog view: the rows of objects this login may see",
}
SESSION_VIEWS = {"dm_tran_locks"}

# Functions of the server's local time: the libraries write UTC (GETUTCDATE(), DateTime.UtcNow).
LOCAL_TIME = re.compile(r"\b(GETDATE|SYSDATETIME|SYSDATETIMEOFFSET)\s*\(|\bCURRENT_TIMESTAMP\b", re.IGNORECASE)

# PostgreSQL syntax besides what tests/test_mssql_probes_sql.py looks for.
MORE_POSTGRESQL = {
    "SKIP LOCKED": re.compile(r"\bSKIP\s+LOCKED\b", re.IGNORECASE),
    "RETURNING": re.compile(r"\bRETURNING\b", re.IGNORECASE),
    "ON CONFLICT": re.compile(r"\bON\s+CONFLICT\b", re.IGNORECASE),
}


def _rendered(key: str) -> str:
    """A section as the Python side sends it: `{table}` filled, `%%` a percent sign."""
    return SECTIONS[key].format(table=FILES[key.split(":")[0]]).replace("%%", "%")


# -- what each check looks for -------------------------------------------------------------------


def _hint_problems(text: str) -> list[str]:
    code = _OPENJSON_WITH.sub(r"\1", code_only(text))
    problems = [f"{table}: {sorted(hints - HINTS)}" for table, hints in _hints(text) if hints - HINTS]
    if len(re.findall(r"\bWITH\s*\(", code, re.IGNORECASE)) != len(_TABLE_HINTS.findall(code)):
        problems.append("a WITH (...) list that is not a table's")
    problems += [f"OPTION {option}" for option in re.findall(r"\bOPTION\s*\(((?:[^()]|\([^()]*\))*)\)", code, re.IGNORECASE)]
    return problems


def _view_problems(text: str) -> list[str]:
    code = code_only(text)
    problems = sorted(_system_views(text) - set(SYSTEM_VIEWS))
    problems += [f"unqualified {m}" for m in re.findall(r"(?<![.\w])dm_\w+", code, re.IGNORECASE)]
    problems += [f"other database {m}" for m in re.findall(r"\b(?:master|msdb|model|tempdb)\s*\.", code, re.IGNORECASE)]
    problems += ["INFORMATION_SCHEMA"] if re.search(r"\bINFORMATION_SCHEMA\b", code, re.IGNORECASE) else []
    return problems


def _unbounded_reads(text: str, tables: tuple[str, ...]) -> list[str]:
    """Reads of a library table that neither stop at a TOP (n) nor only take MIN/MAX of it, that
    join it, that would wait for a row another transaction holds, or that name it anywhere but
    after FROM."""
    code = bind_variables(code_only(text))
    problems = []
    named = len(re.findall(r"\{table\}", code))
    read = 0
    for table in tables:
        for match in re.finditer(rf"\b(FROM|JOIN|UPDATE|INTO)\s+{re.escape(table)}(?![\w.\[])", code, re.IGNORECASE):
            read += 1
            if match.group(1).upper() != "FROM":
                problems.append(f"{table}: {match.group(1).upper()}")
                continue
            columns = _select_before(code, match.start())
            if columns is None:
                problems.append(f"{table}: no SELECT")
                continue
            aggregates = re.sub(r"\b(MIN|MAX)\s*\(\s*[\w.\[\]]+\s*\)|\bAS\s+\w+", "", columns, flags=re.IGNORECASE)
            if not re.match(r"\s*TOP\s*\(", columns, re.IGNORECASE) and not re.fullmatch(r"[\s\d+\-*/(),]*", aggregates):
                problems.append(f"{table}: not bounded: SELECT {columns.strip()[:60]}")
            hints = _TABLE_HINTS.match(code, match.start())
            used = {h.split("(")[0].strip().upper() for h in split_top_level(hints.group(2))} if hints else set()
            if not LIBRARY_READ_HINTS <= used:
                problems.append(f"{table}: without {sorted(LIBRARY_READ_HINTS - used)}")
    if read != named:
        problems.append(f"{named - read} references to a library table that are not a FROM")
    return problems


def _own_session_kept(text: str) -> bool:
    return bool(_system_views(text) & SESSION_VIEWS) and not re.search(r"<>\s*@@SPID\b", code_only(text))


def _lock_reads_unguarded(text: str) -> bool:
    """The lock manager read before (or without) asking whether this login may read it."""
    code = code_only(text)
    if "dm_tran_locks" not in code:
        return False
    guard = code.find("HAS_PERMS_BY_NAME(NULL, NULL, N'')")
    return guard < 0 or guard > code.index("dm_tran_locks")


def _unguarded_histograms(text: str) -> list[str]:
    """sys.dm_db_stats_histogram called with arguments that were not checked for NULL first."""
    code = bind_variables(code_only(text))
    problems = []
    for match in re.finditer(r"\bdm_db_stats_histogram\s*\(\s*(@\w+)\s*,\s*(@\w+)\s*\)|\bdm_db_stats_histogram\s*\(", code,
                             re.IGNORECASE):
        if match.group(1) is None:
            problems.append("not called with two variables")
            continue
        before = code[: match.start()]
        if not all(re.search(rf"\bIF\b[^\n]*{re.escape(arg)}\s+IS\s+NOT\s+NULL", before, re.IGNORECASE)
                   for arg in match.group(1, 2)):
            problems.append(match.group(0))
    return problems


def _nocount_problems(parse: Parse) -> bool:
    """A batch of several statements that does not open with SET NOCOUNT ON and close with OFF
    (pyodbc reads a batch's first result; probe sessions are pooled)."""
    code = code_only(parse.text).strip()
    return parse.statements >= 2 and not (code.startswith("SET NOCOUNT ON;") and code.endswith("SET NOCOUNT OFF;"))


def _columns_read(source: str, binding: str) -> set[str]:
    """The constant keys the module subscripts rows with (not its Queries binding's names)."""
    found = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Subscript) and isinstance(node.slice, ast.Constant) and isinstance(node.slice.value, str):
            if not (isinstance(node.value, ast.Name) and node.value.id == binding):
                found.add(node.slice.value)
    return found


def _columns_returned(file: str) -> set[str]:
    return {column for key, text in SECTIONS.items() if key.startswith(file + ":")
            for shape in _results(text) for column in shape if column}


# -- parsing ---------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def linter() -> Linter:
    return tsql_linter(SECTIONS.values())


@pytest.fixture(scope="module")
def parsed(linter: Linter) -> dict[str, Parse]:
    return {key: Parse(linter, _rendered(key)) for key in SECTIONS}


def test_both_files_have_their_sections():
    names = {key.split(":")[1] for key in SECTIONS if key.startswith("sources/hangfire.sql")}
    assert {"layout", "queues", "queue_windows", "job_states", "head", "waiting_head", "failed"} <= names
    names = {key.split(":")[1] for key in SECTIONS if key.startswith("sources/nservicebus.sql")}
    assert {"tables", "held_rows", "head_window", "delayed", "head", "failed"} <= names


def test_every_section_parses_as_tsql(parsed: dict[str, Parse]):
    failed = {key: (parse.problems, parse.text[parse.first_unparsable :][:80] if parse.first_unparsable else None)
              for key, parse in parsed.items() if not parse.ok}
    assert failed == {}


def test_a_parse_that_gives_up_is_detected(linter: Linter):
    for text in ("SELECT TOP (1) jq.Id FROM [HangFire].[JobQueue] AS jq FOR UPDATE SKIP LOCKED",
                 "SELECT TOP (1) jq.Id FROM [HangFire].[JobQueue] AS jq WITH (READPASTT)",
                 "SELECT jq.Id FROM [HangFire].[JobQueue] AS jq WHERE"):
        assert not Parse(linter, text).ok, text
    assert Parse(linter, "SELECT TOP (1) jq.Id FROM [HangFire].[JobQueue] AS jq WITH (FORCESEEK, READPAST)").ok


def test_a_batch_of_several_statements_sets_nocount_and_restores_it(linter: Linter, parsed: dict[str, Parse]):
    assert [key for key, parse in parsed.items() if _nocount_problems(parse)] == []
    assert sum(parse.statements >= 2 for parse in parsed.values()) >= 5
    assert _nocount_problems(Parse(linter, "DECLARE @n int = 1;\nSELECT @n AS n;"))
    assert not _nocount_problems(Parse(linter, "SET NOCOUNT ON;\nDECLARE @n int = 1;\nSELECT @n AS n;\nSET NOCOUNT OFF;"))


# -- read only, shared reads, bounded cost -------------------------------------------------------


def test_every_statement_is_read_only():
    assert {key: found for key, text in SECTIONS.items() if (found := _writes(text))} == {}


def test_the_read_only_check_catches_what_the_libraries_themselves_run():
    for text in (
        # Hangfire's fetch (SqlServerJobQueue) and its keep-alive (SqlServerTimeoutJob)
        "update top (1) JQ set FetchedAt = GETUTCDATE() output INSERTED.Id from [HangFire].JobQueue JQ "
        "with (forceseek, readpast, updlock, rowlock) where Queue in (@q)",
        # NServiceBus's receive (SqlConstants.ReceiveText)
        "WITH message AS (SELECT TOP(1) RowVersion FROM [dbo].[Sales] WITH (UPDLOCK, READPAST, ROWLOCK) ORDER BY RowVersion) "
        "DELETE FROM message OUTPUT deleted.RowVersion;",
        "EXEC sp_getapplock @Resource = 'HangFire:SchemaLock', @LockMode = 'Exclusive'",
        "SELECT a INTO #t FROM b",
        "SET TRANSACTION ISOLATION LEVEL READ UNCOMMITTED",
    ):
        assert _writes(text), text


def test_every_hint_is_a_shared_row_read():
    assert {key: problems for key, text in SECTIONS.items() if (problems := _hint_problems(text))} == {}
    used = {hint for text in SECTIONS.values() for _, hints in _hints(text) for hint in hints}
    assert used == HINTS


def test_the_hint_check_catches_the_libraries_locking_and_dirty_reads():
    # NServiceBus's receive hints, and Hangfire's monitoring API's dirty read (with (nolock)).
    assert _hint_problems("SELECT TOP (1) m.Id FROM [dbo].[Sales] AS m WITH (UPDLOCK, READPAST, ROWLOCK)") == ["[dbo].[Sales]: ['UPDLOCK']"]
    assert _hint_problems("SELECT DISTINCT jq.Queue FROM [HangFire].JobQueue AS jq WITH (NOLOCK)") == ["[HangFire].JobQueue: ['NOLOCK']"]
    assert _hint_problems("SELECT TOP (1) a FROM t WITH (READPAST) OPTION (MAXDOP 8)") == ["OPTION MAXDOP 8"]
    assert _hint_problems("SELECT TOP (1) a FROM t (NOLOCK) WITH (NOWAIT)") == ["a WITH (...) list that is not a table's"]
    assert _hint_problems("SELECT TOP (1) a FROM t AS x WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)") == []


def test_library_tables_are_read_through_a_bounded_window_that_skips_held_rows():
    problems = {key: found for key, text in SECTIONS.items()
                if (found := _unbounded_reads(text, LIBRARY_TABLES[key.split(":")[0]]))}
    assert problems == {}
    reading = {key for key, text in SECTIONS.items() if "{table}" in code_only(text)}
    assert len(reading) >= 10


def test_the_bounded_read_check_catches_scans_joins_and_waits():
    hangfire = LIBRARY_TABLES["sources/hangfire.sql"]
    # Hangfire's own list of queues (SqlServerJobQueueMonitoringApi.GetQueues): a scan.
    assert _unbounded_reads("SELECT DISTINCT q.Queue FROM {table}.[JobQueue] AS q WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)",
                            hangfire) == ["{table}.[JobQueue]: not bounded: SELECT DISTINCT q.Queue"]
    assert _unbounded_reads("SELECT COUNT_BIG(*) FROM {table}.[Job] AS j WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK) "
                            "WHERE j.StateName = N''", hangfire) == ["{table}.[Job]: not bounded: SELECT COUNT_BIG(*)"]
    assert _unbounded_reads("SELECT TOP (5) q.Id FROM {table}.[JobQueue] AS q ORDER BY q.Id", hangfire) \
        == ["{table}.[JobQueue]: without ['READCOMMITTEDLOCK', 'READPAST', 'ROWLOCK']"]
    assert _unbounded_reads("SELECT TOP (5) q.Id FROM {table}.[JobQueue] AS q WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK) "
                            "JOIN {table}.[Job] AS j ON j.Id = q.JobId", hangfire) == ["{table}.[Job]: JOIN"]
    assert _unbounded_reads("SELECT TOP (1) n.Id FROM x AS n, {table}.[State] AS s", hangfire) \
        == ["1 references to a library table that are not a FROM"]
    nsb = LIBRARY_TABLES["sources/nservicebus.sql"]
    # NServiceBus's own peek (SqlConstants.PeekText) reads no held row, but without ROWLOCK.
    assert _unbounded_reads("SELECT isnull(cast(max([RowVersion]) - min([RowVersion]) + 1 AS int), 0) Id FROM {table} "
                            "WITH (READPAST, READCOMMITTEDLOCK)", nsb)
    assert _unbounded_reads("SELECT TOP (@n) h.RowVersion FROM {table} AS h WITH (FORCESEEK, ROWLOCK, READPAST, READCOMMITTEDLOCK)",
                            nsb) == []
    assert _unbounded_reads("SET @q = (SELECT MIN(q.[Queue]) FROM {table}.[JobQueue] AS q WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK))",
                            hangfire) == []


def test_the_histogram_is_read_only_for_an_object_and_index_checked_first():
    calls = {key for key, text in SECTIONS.items() if "dm_db_stats_histogram" in code_only(text)}
    assert calls == {"sources/hangfire.sql:job_states"}
    assert {key: found for key in calls if (found := _unguarded_histograms(SECTIONS[key]))} == {}
    assert _unguarded_histograms("SELECT h.equal_rows FROM sys.dm_db_stats_histogram(OBJECT_ID(N'x'), 2) AS h")
    assert _unguarded_histograms("SELECT h.equal_rows FROM sys.dm_db_stats_histogram(@o, @s) AS h")
    assert _unguarded_histograms("IF @o IS NOT NULL\n SELECT h.equal_rows FROM sys.dm_db_stats_histogram(@o, @s) AS h")
    assert not _unguarded_histograms("IF @o IS NOT NULL AND @s IS NOT NULL\n"
                                     " SELECT h.equal_rows FROM sys.dm_db_stats_histogram(@o, @s) AS h")


def test_the_probes_own_session_is_left_out_of_the_lock_manager():
    readers = [key for key, text in SECTIONS.items() if _system_views(text) & SESSION_VIEWS]
    assert sorted(readers) == ["sources/hangfire.sql:queue_windows", "sources/nservicebus.sql:held_rows"]
    assert [key for key in readers if _own_session_kept(SECTIONS[key])] == []
    assert _own_session_kept("SELECT COUNT_BIG(*) FROM sys.dm_tran_locks AS l WHERE l.request_mode = N'X'")
    assert not _own_session_kept("SELECT COUNT_BIG(*) FROM sys.dm_tran_locks AS l WHERE l.request_session_id <> @@SPID")


def test_the_lock_manager_is_read_only_with_the_permission_to_read_it():
    """Without VIEW SERVER STATE sys.dm_tran_locks shows the probe's own locks only: a count of
    0 would be a lie, so it is not read, and the figure is NULL."""
    assert [key for key, text in SECTIONS.items() if _lock_reads_unguarded(text)] == []
    assert _lock_reads_unguarded("SELECT @held = COUNT_BIG(*) FROM sys.dm_tran_locks AS l WHERE l.request_session_id <> @@SPID")
    assert not _lock_reads_unguarded("IF HAS_PERMS_BY_NAME(NULL, NULL, N'VIEW SERVER STATE') = 1\n"
                                     "    SELECT @held = COUNT_BIG(*) FROM sys.dm_tran_locks AS l")


# -- what the statements may name ---------------------------------------------------------------


def test_every_system_view_is_allowed():
    assert {key: problems for key, text in SECTIONS.items() if (problems := _view_problems(text))} == {}
    used = set().union(*(_system_views(text) for text in SECTIONS.values()))
    assert used == set(SYSTEM_VIEWS), "an allowed view is no longer used: take it off the list"


def test_the_view_check_catches_other_views():
    assert _view_problems("SELECT 1 AS x FROM sys.dm_os_ring_buffers AS r") == ["dm_os_ring_buffers"]
    assert _view_problems("SELECT 1 AS x FROM sys.dm_db_index_physical_stats(DB_ID(), @o, NULL, NULL, 'SAMPLED') AS s") \
        == ["dm_db_index_physical_stats"]
    assert _view_problems("SELECT c.name FROM INFORMATION_SCHEMA.COLUMNS AS c") == ["INFORMATION_SCHEMA"]
    assert _view_problems("SELECT 1 AS x FROM msdb.sys.tables AS t") == ["other database msdb."]
    assert _view_problems("SELECT 1 AS x FROM dm_tran_locks") == ["unqualified dm_tran_locks"]


def test_no_local_time_the_libraries_write_utc():
    assert {key for key, text in SECTIONS.items() if LOCAL_TIME.search(code_only(text))} == set()
    for text in ("SELECT GETDATE() AS t", "SELECT SYSDATETIME() AS t", "SELECT CURRENT_TIMESTAMP AS t"):
        assert LOCAL_TIME.search(text), text
    assert not LOCAL_TIME.search("SELECT GETUTCDATE() AS t, SYSUTCDATETIME() AS u")


def test_no_postgresql_syntax():
    def found(text: str) -> list[str]:
        code = code_only(bind_variables(text))
        return _postgresql_syntax(text) + [name for name, pattern in MORE_POSTGRESQL.items() if pattern.search(code)]

    assert {key: hits for key, text in SECTIONS.items() if (hits := found(text))} == {}
    assert "SKIP LOCKED" in found("SELECT id FROM t FOR UPDATE SKIP LOCKED")
    assert "LIMIT" in found("SELECT id FROM t ORDER BY id LIMIT 5")
    assert ":: cast" in found("SELECT id::text FROM t")
    assert "now()" in found("SELECT now()")
    assert "RETURNING" in found("DELETE FROM t RETURNING id")
    assert found("SELECT N'a::b LIMIT 5' AS x -- now()") == []


def test_every_parameter_is_converted_explicitly():
    assert {key: found for key, text in SECTIONS.items() if (found := _unconverted_parameters(text))} == {}
    assert _unconverted_parameters("SELECT TOP (%(limit)s) a FROM t") == ["%(limit)s"]


def test_a_percent_sign_is_doubled_and_no_select_star():
    def stray_percent(text: str) -> bool:
        return "%" in sqlfiles.PLACEHOLDER.sub("", text).replace("%%", "")

    for key, text in SECTIONS.items():
        assert not stray_percent(text), key
        assert not _select_star(text), key
    assert stray_percent("SELECT a FROM t WHERE b LIKE N'x%' AND c = CONVERT(int, %(c)s)")
    assert _select_star("WITH message AS (SELECT TOP(1) * FROM q) SELECT m.Id FROM message AS m")


def test_every_placeholder_binds_and_only_the_table_slot_is_used():
    for key, text in SECTIONS.items():
        fields = set(re.findall(r"\{(\w*)\}", text))
        assert fields <= {"table"}, key
        bound = MssqlDialect().bind(text.format(table=FILES[key.split(":")[0]]))
        assert "%(" not in bound, key


# -- the Python side reads what the statements return --------------------------------------------


def test_the_sources_read_only_columns_the_statements_return():
    for file, module in MODULES.items():
        source = (REPO / module).read_text(encoding="utf-8")
        binding = {"sources/hangfire.sql": "HANGFIRE_SQL", "sources/nservicebus.sql": "NSB_SQL"}[file]
        missing = _columns_read(source, binding) - _columns_returned(file)
        assert missing == set(), (module, missing)


def test_the_column_check_catches_a_column_no_statement_returns():
    assert _columns_read('row = {}\nrow["nope"]\nNSB_SQL["tables"]\n', "NSB_SQL") == {"nope"}
    assert "nope" not in _columns_returned("sources/nservicebus.sql")


# -- registration ---------------------------------------------------------------------------------


def test_the_library_sources_are_sql_servers_only():
    on_mssql = [source.name for source in sources_for(Config(), "mssql")]
    on_postgresql = [source.name for source in sources_for(Config(), "postgresql")]
    assert {"hangfire", "nservicebus"} <= set(on_mssql)
    assert not {"hangfire", "nservicebus"} & set(on_postgresql)
    assert Hangfire.dialects == ("mssql",) and NServiceBus.dialects == ("mssql",)
    # After the engine's own sources (reference, outbox, inbox), as the other libraries are.
    assert on_mssql.index("hangfire") > on_mssql.index("inbox") and on_mssql.index("nservicebus") > on_mssql.index("inbox")
    classes = source_classes()
    assert classes["hangfire"] is Hangfire and classes["nservicebus"] is NServiceBus
    assert Hangfire.kind == NServiceBus.kind == "table"
    assert "hangfire" not in [s.name for s in sources_for(Config(disabled_sources=frozenset({"hangfire"})), "mssql")]


def test_the_sql_files_are_bound_as_sql_server_only():
    for module in MODULES.values():
        tree = ast.parse((REPO / module).read_text(encoding="utf-8"))
        calls = [node for node in ast.walk(tree) if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "Queries"]
        assert len(calls) == 1, module
        assert {kw.arg: kw.value.value for kw in calls[0].keywords} == {"dialect": "mssql"}, module
    assert not Path(REPO / "probes" / "sql" / "postgresql" / "sources" / "hangfire.sql").exists()
