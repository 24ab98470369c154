"""The SQL Server session's own logic, run for real: `MssqlSession` is SQLAlchemy Core with
psycopg's surface (autocommit per statement outside `transaction()`, a transaction that commits
or rolls back, nested blocks as savepoints, rows read before the commit, list parameters as
JSON, `%(name)s` placeholders bound through `text()`). None of that is specific to SQL Server,
so these tests drive the wrapper over a SQLAlchemy engine on the suite's real PostgreSQL.
They say nothing about SQL Server itself: its statements are checked by tests/test_mssql_sql.py
and tests/test_mssql_compile.py, and run only in the live suite (docs/mssql.md)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import sqlalchemy as sa

from dbcore.mssql import MssqlDialect, MssqlSession


class _PostgresBind(MssqlDialect):
    """SQL Server's bind step (`%(x)s` as `:x`, other colons escaped), kept; PostgreSQL's quoting."""

    def quote(self, *parts: str) -> str:
        return ".".join('"' + p.replace('"', '""') + '"' for p in parts)


@pytest.fixture
def session(db) -> Iterator[MssqlSession]:
    engine = sa.create_engine(sa.engine.URL.create("postgresql+psycopg", username="postgres", database=db.name,
                                                   query={"host": db.server.socket_dir}), poolclass=sa.pool.NullPool)
    with engine.connect() as conn:
        yield MssqlSession(_PostgresBind(), conn, db.target)
    engine.dispose()


def _count(db) -> int:
    with db.connect() as other:  # another session: sees only what was committed
        return other.execute("SELECT count(*) FROM t").fetchone()[0]


@pytest.fixture
def table(db) -> None:
    with db.connect() as conn:
        conn.execute("CREATE TABLE t (id int PRIMARY KEY, note text)")


def test_a_statement_outside_a_transaction_is_committed_at_once(db, table, session):
    result = session.execute("INSERT INTO t VALUES (%(id)s, %(note)s)", {"id": 1, "note": "a"})
    assert result.rowcount == 1
    assert _count(db) == 1  # another session sees it: committed


def test_rows_are_read_before_the_commit_and_outlive_it(db, table, session):
    session.execute("INSERT INTO t VALUES (1, 'a'), (2, 'b')")
    result = session.execute("SELECT id, note FROM t ORDER BY id")
    assert result.fetchone() == (1, "a")
    assert result.fetchall() == [(2, "b")]
    assert result.fetchone() is None


def test_a_transaction_commits_on_success_and_rolls_back_on_an_exception(db, table, session):
    with session.transaction():
        session.execute("INSERT INTO t VALUES (1, 'a')")
        assert _count(db) == 0  # not yet committed
    assert _count(db) == 1
    with pytest.raises(ZeroDivisionError), session.transaction():
        session.execute("INSERT INTO t VALUES (2, 'b')")
        raise ZeroDivisionError
    assert _count(db) == 1


def test_a_nested_block_is_a_savepoint(db, table, session):
    with session.transaction():
        session.execute("INSERT INTO t VALUES (1, 'outer')")
        with pytest.raises(ValueError), session.transaction():
            session.execute("INSERT INTO t VALUES (2, 'inner')")
            raise ValueError
        session.execute("INSERT INTO t VALUES (3, 'after')")
    assert [r[0] for r in session.execute("SELECT id FROM t ORDER BY id").fetchall()] == [1, 3]


def test_a_failed_statement_outside_a_transaction_leaves_the_session_usable(db, table, session):
    session.execute("INSERT INTO t VALUES (1, 'a')")
    with pytest.raises(Exception, match=r"duplicate key|database error"):
        session.execute("INSERT INTO t VALUES (1, 'again')")
    session.execute("INSERT INTO t VALUES (2, 'b')")  # rolled back, not stuck in an aborted transaction
    assert _count(db) == 2


@pytest.mark.parametrize("autocommit", [False, True], ids=["session", "probe-session"])
def test_a_statement_that_costs_the_connection_leaves_the_session_usable_on_a_new_one(db, table, autocommit):
    """The server ends the session's connection (as a restart, or SQL Server's KILL, would):
    SQLAlchemy invalidates it. A probe session's next statement (the connection in AUTOCOMMIT)
    used to raise PendingRollbackError. Now the next statement runs on a new connection, in
    AUTOCOMMIT again for a probe session."""
    engine = sa.create_engine(sa.engine.URL.create("postgresql+psycopg", username="postgres", database=db.name,
                                                   query={"host": db.server.socket_dir}), poolclass=sa.pool.NullPool)
    opener = (lambda: engine.connect().execution_options(isolation_level="AUTOCOMMIT")) if autocommit else engine.connect
    session = MssqlSession(_PostgresBind(), opener, db.target, autocommit=autocommit)
    try:
        first = session.execute("SELECT pg_backend_pid()").fetchone()[0]
        with db.connect() as admin:
            admin.execute("SELECT pg_terminate_backend(%s)", (first,))
        with pytest.raises(Exception, match=r"terminating connection|server closed the connection"):
            session.execute("SELECT 1")
        assert session.execute("SELECT pg_backend_pid()").fetchone()[0] != first  # no PendingRollbackError
        session.execute("INSERT INTO t VALUES (1, 'a')")
        assert _count(db) == 1  # committed at once, as before the loss
        with session.transaction():  # and a transaction
            session.execute("INSERT INTO t VALUES (2, 'b')")
        assert _count(db) == 2
    finally:
        session.close()
        engine.dispose()


def test_list_parameters_go_as_json_text_and_colons_in_literals_stay(db, table, session):
    row = session.execute("SELECT %(ids)s::text AS ids, '12:30:00' AS at, 'a::b' AS s, 'x%%' AS p", {"ids": [1, 2, 3]}).fetchone()
    assert json.loads(row[0]) == [1, 2, 3]
    assert row[1:] == ("12:30:00", "a::b", "x%")


def test_a_named_query_runs_its_own_dialects_text(db, session):
    """A NamedQuery resolves by name in the session's dialect: here `mssql`'s file, whose
    schema_present text is T-SQL, so PostgreSQL must refuse it: the proof that it was picked."""
    from queues.schema import ENGINE_SQL

    with pytest.raises(Exception, match="database error"):
        session.execute(ENGINE_SQL["schema_present"])


def test_a_forced_rollback_undoes_a_block_that_succeeded(db, table, session):
    with session.transaction(force_rollback=True):
        session.execute("INSERT INTO t VALUES (1, 'a')")
        assert session.execute("SELECT count(*) FROM t").fetchone() == (1,)  # seen inside
    assert _count(db) == 0


def test_an_isolation_level_holds_for_the_session_and_is_not_handed_to_the_pools_next_user(db):
    """The contention scenario's answerers run SERIALIZABLE. Set as SQLAlchemy's execution
    option, the level is undone when the connection goes back to the pool."""
    engine = sa.create_engine(sa.engine.URL.create("postgresql+psycopg", username="postgres", database=db.name,
                                                   query={"host": db.server.socket_dir}), pool_size=1, max_overflow=0)
    try:
        with engine.connect() as conn:
            session = MssqlSession(_PostgresBind(), conn, db.target)
            backend = session.execute("SELECT pg_backend_pid()").fetchone()
            session.dialect.set_isolation(session, "SERIALIZABLE")
            with session.transaction():
                assert session.execute("SHOW transaction_isolation").fetchone() == ("serializable",)
            with session.transaction():  # and the next transaction too
                assert session.execute("SHOW transaction_isolation").fetchone() == ("serializable",)
        with engine.connect() as conn:
            session = MssqlSession(_PostgresBind(), conn, db.target)
            assert session.execute("SELECT pg_backend_pid()").fetchone() == backend  # the same pooled connection
            with session.transaction():
                assert session.execute("SHOW transaction_isolation").fetchone() == ("read committed",)
    finally:
        engine.dispose()
