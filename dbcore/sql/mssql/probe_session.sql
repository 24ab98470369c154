-- Run once when a probe session opens (dbcore/mssql.py): SQL Server's counterpart of
-- PostgreSQL's PROBE_SETTINGS. A probe waits at most 100 ms for a lock and loses any deadlock;
-- it reads committed data (no dirty reads, whatever the database's default). The 2 s statement
-- timeout is pyodbc's query timeout, set on the connection; SQL Server has no read-only
-- session: the probes' T-SQL is SELECT only (tests/test_mssql_probes_sql.py).
SET LOCK_TIMEOUT 100;
SET DEADLOCK_PRIORITY LOW;
SET TRANSACTION ISOLATION LEVEL READ COMMITTED;
