-- PgBouncer's admin console (the `pgbouncer` database of a --pgbouncer DSN: probes/pooler_console.py).
-- The console speaks only the simple query protocol and knows only its own commands: each is
-- sent as it is, with no parameter, on a connection of its own (no SET, no transaction).

-- name: pools
-- One row per pool (database as PgBouncer names it, user): clients active and waiting, servers
-- active and idle, the longest wait (maxwait, maxwait_us), the pool's mode.
SHOW POOLS;

-- name: databases
-- One row per [databases] entry: its name (the alias clients use), the server database it
-- connects to (`database`), its pool size.
SHOW DATABASES;
