"""The dialect seam: what differs between PostgreSQL and SQL Server, behind one small interface.

A `Dialect` knows how to open a `Session` on a target, how to quote an identifier, how to turn
its driver's errors into queuetop's (each with the exit code PRODUCT.md defines), and what it
can do (`Capabilities`): whether idle consumers can be woken by a notification or must poll,
whether statements take and return arrays, whether the engine's prepared hot path exists.
Engine and probe code ask the capability, never the dialect's name.

Both dialects read the same named queries (`Queries`), each from its own directory
(`<package>/sql/<dialect.name>/`), with the same bind style (`%(name)s`) and the same `{field}`
identifier slots: a statement is chosen by name and the dialect supplies its text.

- PostgreSQL: the session *is* a psycopg connection. psycopg already has the interface the
  engine uses (`execute()` returning a cursor, `transaction()`), and the measured hot path
  (queues/hotpath.py) needs the connection itself.
- SQL Server: a SQLAlchemy Core connection over pyodbc (dbcore/mssql.py), pooled per target.

The seam's types (what a dialect implements) are in dbcore/seam.py and the choice of a dialect
(`dialect_named`, `dialect_of`, `open_session`) in dbcore/registry.py; this module is where the
engine, the probes and the dashboard import both from.
"""

from .registry import connection_lost as connection_lost
from .registry import dialect_named as dialect_named
from .registry import dialect_of as dialect_of
from .registry import open_session as open_session
from .registry import translate_error as translate_error
from .seam import DEFAULT_LOCK_TIMEOUT_S as DEFAULT_LOCK_TIMEOUT_S
from .seam import LOCK_TIMEOUT_APPLICATIONS as LOCK_TIMEOUT_APPLICATIONS
from .seam import LOCK_TIMEOUT_ENV as LOCK_TIMEOUT_ENV
from .seam import MAX_LOCK_TIMEOUT_S as MAX_LOCK_TIMEOUT_S
from .seam import Capabilities as Capabilities
from .seam import Dialect as Dialect
from .seam import LockTimeoutSetting as LockTimeoutSetting
from .seam import Result as Result
from .seam import Session as Session
from .seam import lock_timeout_for as lock_timeout_for
