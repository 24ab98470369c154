"""Installing the reference schema and checking that it is there."""

from __future__ import annotations

from dbcore import sqlfiles
from dbcore.database import one
from dbcore.dialect import Session, dialect_of
from dbcore.errors import StandbyReadOnly, UsageError
from dbcore.sqlfiles import Queries

SCHEMA_VERSION = "1"
# Serialises concurrent `engine init` runs (and queue creation) across sessions.
INIT_LOCK_KEY = 0x71756575  # "queu"


# The engine's named statements (queues/sql/<dialect>/queries.sql).
ENGINE_SQL = Queries("queues", "queries.sql")


def install(conn: Session) -> str:
    """Install or upgrade the schema, in the session's dialect; safe to run any number of
    times, concurrently too."""
    dialect = dialect_of(conn)
    script = sqlfiles.read_script("queues", dialect.name, "schema.sql")
    with conn.transaction():
        lock_init(conn)
        dialect.run_script(conn, script)
    return SCHEMA_VERSION


def lock_init(conn: Session) -> None:
    """Inside a transaction: wait for any other schema change (init, queue creation) to end."""
    conn.execute(ENGINE_SQL["init_lock"], {"key": INIT_LOCK_KEY})


def refuse_standby(conn: Session, *, where: str) -> None:
    """Refuse a write aimed at a hot standby (exit 2, before anything is written): one line,
    `<where> is a standby: read-only`."""
    if dialect_of(conn).in_recovery(conn):
        raise StandbyReadOnly(where)


def require(conn: Session, *, where: str) -> None:
    """Fail with a clear message (exit 2) when the schema is missing or too old."""
    present = one(conn.execute(ENGINE_SQL["schema_present"]))[0]
    if not present:
        raise UsageError(f"the queuetop schema is not installed in {where}; run `queuetop engine init` first")
    version = conn.execute(ENGINE_SQL["schema_version"]).fetchone()
    if version is None or version[0] != SCHEMA_VERSION:
        found = version[0] if version else "none"
        raise UsageError(
            f"the queuetop schema in {where} is version {found}, this queuetop needs {SCHEMA_VERSION}; "
            "run `queuetop engine init`"
        )
