-- Expressions that more than one SQL Server statement writes, each kept once here and filled in
-- where a statement of any file of this dialect writes `{<name>}` (dbcore/sqlfiles.py, load).

-- name: wait_event_type
-- A request's wait_type (sys.dm_exec_requests, named `rq` in the statement) as a coarse class in
-- PostgreSQL's words (Lock, Latch, IO, Client, Other); NULL when it runs nothing or does not
-- wait. connections.sql's `sessions` and details.sql's `session`.
CASE WHEN rq.wait_type IS NULL THEN NULL
     WHEN rq.wait_type LIKE N'LCK[_]M[_]%%' THEN N'Lock'
     WHEN rq.wait_type LIKE N'PAGEIOLATCH[_]%%' OR rq.wait_type IN (N'WRITELOG', N'IO_COMPLETION', N'ASYNC_IO_COMPLETION')
     THEN N'IO'
     WHEN rq.wait_type LIKE N'PAGELATCH[_]%%' OR rq.wait_type LIKE N'LATCH[_]%%' THEN N'Latch'
     WHEN rq.wait_type = N'ASYNC_NETWORK_IO' THEN N'Client'
     ELSE N'Other' END
