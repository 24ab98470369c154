-- Run on each connection of the command line's engine sessions (dbcore/dialect.py,
-- lock_timeout_for): how long a statement waits for a lock another session holds, in
-- milliseconds, before it fails with error 1222 (a LockTimeout, exit 1). SET LOCK_TIMEOUT takes a
-- constant, not a parameter (a parameterised batch runs in sp_executesql, whose SET would end
-- with it): dbcore/mssql.py writes the number of milliseconds into the statement below.
SET LOCK_TIMEOUT {lock_timeout_ms};
