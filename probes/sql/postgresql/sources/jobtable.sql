-- Any job table, described by a [[queues]] entry of the config (and by the library adapters,
-- which are such descriptions plus their own detection and details). Identifiers in {braces}
-- come from the catalog, quoted; an unconfigured column is a NULL literal, typed by the casts here.
--
-- Cost: every count reads at most `cap` rows of one state (or of the queue, with no state
-- column); past the cap the figure is the planner's estimate, flagged as such. Never a scan of
-- the whole table for a figure, whatever the depth.

-- name: resolve
-- The relation behind a configured name: a table, a partitioned parent or a view. Who may read
-- it, and whether row-level security filters what this role sees.
SELECT c.oid AS relid, n.nspname AS schema_name, c.relname AS table_name, c.relkind::text AS relkind,
       has_table_privilege(c.oid, 'SELECT') AS can_select,
       row_security_active(c.oid) AS rls_active
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass(%(table)s::text) AND c.relkind IN ('r', 'p', 'v', 'm');

-- name: columns
-- A column's type as SQL (for messages) and as a quoted name (for typed casts of bound values).
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
       tn.nspname AS type_schema, t.typname AS type_name, t.typtype::text AS typtype
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_namespace tn ON tn.oid = t.typnamespace
WHERE a.attrelid = %(relid)s::oid AND a.attnum > 0 AND NOT a.attisdropped;

-- name: leading_index_columns
-- Columns that lead a valid index (of the table, or of a partitioned parent), and the column
-- that follows each (NULL for a one-column index).
SELECT a.attname AS name, b.attname AS second
FROM pg_index i
JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = i.indkey[0]
LEFT JOIN pg_attribute b ON b.attrelid = i.indrelid AND b.attnum = i.indkey[1] AND i.indnkeyatts > 1
WHERE i.indrelid = %(relid)s::oid AND i.indisvalid;

-- name: fingerprint
-- The statistics' idea of how many rows a relation (or all partitions of a parent) holds (the
-- row count of the last ANALYZE or VACUUM, else the live-row counter), and what the planner's
-- estimates depend on: each relation's statistics (reltuples and relpages change with every
-- VACUUM and ANALYZE) and its indexes. The estimates read under one fingerprint are reused until
-- it changes (or for a minute at most: between two ANALYZEs the planner also scales by the
-- table's current size, which only opening the table - a lock - would tell). Catalog reads only.
WITH rels AS (
    SELECT c.oid, c.reltuples, c.relpages, pg_stat_get_live_tuples(c.oid) AS n_live_tup
    FROM pg_class c
    WHERE c.relkind IN ('r', 'm')
      AND (c.oid = %(relid)s::oid OR c.oid IN (SELECT inhrelid FROM pg_inherits WHERE inhparent = %(relid)s::oid))
)
SELECT coalesce(sum(CASE WHEN reltuples >= 0 THEN reltuples ELSE n_live_tup END), 0)::bigint AS live,
       coalesce(sum(relpages), 0)::bigint AS pages,
       coalesce(string_agg(format('%%s:%%s:%%s', oid, reltuples, relpages), ',' ORDER BY oid), '')
           || '/' || (SELECT count(*) FROM pg_index i
                      WHERE i.indisvalid AND (i.indrelid = %(relid)s::oid OR i.indrelid IN (SELECT oid FROM rels)))::text
           AS stats_key
FROM rels;

-- name: distinct_values
-- The distinct values of a column (the queues of a shared table, the states of a text state
-- column), found by skipping through the column's index: one index probe per value, not a scan
-- of the rows.
WITH RECURSIVE q AS (
    (SELECT {column} AS v FROM {table} WHERE {column} IS NOT NULL ORDER BY {column} LIMIT 1)
    UNION ALL
    SELECT (SELECT {column} FROM {table} WHERE {column} > q.v ORDER BY {column} LIMIT 1)
    FROM q WHERE q.v IS NOT NULL
)
SELECT v::text AS value FROM q WHERE v IS NOT NULL LIMIT %(max_values)s::integer;

-- name: distinct_in_states
-- The distinct queues of a shared table whose index leads with (state, queue) and none with the
-- queue alone (River's fetching index): skipping through the queues of each waiting, running or
-- dead state, one index probe per queue, not a read of the rows.
SELECT DISTINCT d.v::text AS value
FROM unnest(%(states)s::{state_type}[]) AS s(state)
CROSS JOIN LATERAL (
    WITH RECURSIVE q AS (
        (SELECT {queue_column} AS v FROM {table}
         WHERE {state} = s.state AND {queue_column} IS NOT NULL ORDER BY {queue_column} LIMIT 1)
        UNION ALL
        SELECT (SELECT {queue_column} FROM {table}
                WHERE {state} = s.state AND {queue_column} > q.v ORDER BY {queue_column} LIMIT 1)
        FROM q WHERE q.v IS NOT NULL
    )
    SELECT v FROM q WHERE v IS NOT NULL LIMIT %(max_values)s::integer
) AS d
LIMIT %(max_values)s::integer;

-- name: enum_labels
-- The values an enum state column can take.
SELECT e.enumlabel AS value FROM pg_enum e
WHERE e.enumtypid = %(type)s::regtype ORDER BY e.enumsortorder;

-- name: queue_is
-- Fragment: the rows of one queue of a shared table.
{queue_column} = %(queue)s::{queue_type}

-- name: every_row
-- Fragment: no filter.
TRUE

-- name: states_read
-- Every state that is read (the done states never are), in one statement, so in one snapshot (a
-- job moving from one state to the next meanwhile is counted once, not in both): of each state
-- at most its limit of rows ({branches}: one state_branch per state, through its own index),
-- split by what else the row says, grouped by state and by {group} (the queue column of a
-- shared table read for all its queues at once, else NULL: one group). `scanned` = limit means
-- there are more. A row whose xmax is a running transaction is held by it (deleted or locked,
-- not yet committed): in flight.
WITH running AS (
    SELECT backend_xid::text AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
)
SELECT f.s AS state_index, f.q AS queue,
       count(*) AS scanned,
       count(*) FILTER (WHERE held) AS held,
       count(*) FILTER (WHERE NOT held AND NOT exhausted AND later) AS later,
       count(*) FILTER (WHERE NOT held AND exhausted) AS exhausted,
       extract(epoch FROM now() - min(ts) FILTER (WHERE NOT held AND NOT exhausted AND NOT later))::float8
           AS oldest_due_age_s
FROM (
    SELECT r.s, r.q,
           coalesce(r.locked OR (r.vis > now() AND coalesce(r.att, 1) > 0)
                    OR (r.x <> '0'::xid AND r.x::text IN (SELECT xid FROM running)), false) AS held,
           coalesce(r.nb > now() OR r.vis > now(), false) AS later,
           coalesce(r.att >= r.max_att, false) AS exhausted,
           r.ts
    FROM ({branches}) AS r
) AS f
GROUP BY f.s, f.q;

-- name: state_branch
-- Part of states_read: at most {limit} rows of one state ({index}: its place in the list), the
-- state a bound value, so the planner can pick the library's partial index for it
-- (`WHERE status = 'doing'`).
(SELECT {index} AS s, ({group})::text AS q, ({locked}) IS NOT NULL AS locked, ({visible})::timestamptz AS vis,
        ({not_before})::timestamptz AS nb, ({attempts})::integer AS att,
        ({max_attempts})::integer AS max_att, ({age})::timestamptz AS ts, ({xmax})::xid AS x
 FROM {table}
 WHERE {state} = {state_value}::{state_type} AND {filter}
 LIMIT {limit}::integer)

-- name: union_all
-- Fragment: between two branches of states_read.
UNION ALL

-- name: state_plan
-- What the planner expects a state's bounded read ({read}: its state_branch) to cost: little
-- when an index leads to the state's rows, much when they must be found among others' (a scan
-- of the table, or an index whose condition takes in another state too and filters it out row
-- by row).
EXPLAIN (FORMAT JSON) {read};

-- name: stateless
-- A table with no state column (finished jobs are deleted). Two bounded reads: the queue's rows
-- (at most `cap`), and among them those marked otherwise than ready - claimed, locked,
-- scheduled, backing off, out of attempts - which the table's indexes on those columns find
-- without reading the ready ones. Rows an open transaction holds (no marker) are counted in the
-- first read.
WITH running AS (
    SELECT backend_xid::text AS xid FROM pg_stat_activity WHERE backend_xid IS NOT NULL
), everything AS (
    SELECT count(*) AS total,
           count(*) FILTER (WHERE NOT marked AND x <> '0'::xid AND x::text IN (SELECT xid FROM running)) AS held_unmarked,
           extract(epoch FROM now() - min(ts) FILTER (WHERE NOT marked))::float8 AS oldest_due_age_s
    FROM (
        SELECT coalesce(({locked}) IS NOT NULL OR ({visible})::timestamptz > now() OR ({not_before})::timestamptz > now()
                        OR ({attempts})::integer >= ({max_attempts})::integer, false) AS marked,
               ({age})::timestamptz AS ts, ({xmax})::xid AS x
        FROM {table}
        WHERE {filter}
        LIMIT %(cap)s::integer
    ) AS r
), marked AS (
    SELECT count(*) AS scanned,
           count(*) FILTER (WHERE held) AS held,
           count(*) FILTER (WHERE NOT held AND NOT exhausted AND later) AS later,
           count(*) FILTER (WHERE NOT held AND exhausted) AS exhausted
    FROM (
        SELECT coalesce(r.locked OR (r.vis > now() AND coalesce(r.att, 1) > 0), false) AS held,
               coalesce(r.nb > now() OR r.vis > now(), false) AS later,
               coalesce(r.att >= r.max_att, false) AS exhausted
        FROM (
            SELECT ({locked}) IS NOT NULL AS locked, ({visible})::timestamptz AS vis,
                   ({not_before})::timestamptz AS nb, ({attempts})::integer AS att,
                   ({max_attempts})::integer AS max_att
            FROM {table}
            WHERE {filter}
              AND (({locked}) IS NOT NULL OR ({visible})::timestamptz > now() OR ({not_before})::timestamptz > now()
                   OR ({attempts})::integer >= ({max_attempts})::integer)
            LIMIT %(cap)s::integer
        ) AS r
    ) AS f
)
SELECT e.total, e.held_unmarked, e.oldest_due_age_s, m.scanned, m.held, m.later, m.exhausted
FROM everything e, marked m;

-- name: estimate_state
-- The planner's row estimate for one state of one queue (from the column statistics), for a
-- state with more rows than the cap.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE {state} = %(state)s::{state_type} AND {filter};

-- name: split_sample
-- How the rows of the states whose count is an estimate split - held, due later, out of
-- attempts - by queue, from a random sample of the table's pages (%(percent)s of them: a fixed
-- number of pages, whatever the table's size). A bounded read through an index would follow
-- the index's order, and an index in due order (pg-boss's (name, start_after)) meets every due
-- job before the first scheduled one.
SELECT f.st AS state, f.q AS queue,
       count(*) AS scanned,
       count(*) FILTER (WHERE held) AS held,
       count(*) FILTER (WHERE NOT held AND NOT exhausted AND later) AS later,
       count(*) FILTER (WHERE NOT held AND exhausted) AS exhausted
FROM (
    SELECT r.st, r.q,
           coalesce(r.locked OR (r.vis > now() AND coalesce(r.att, 1) > 0), false) AS held,
           coalesce(r.nb > now() OR r.vis > now(), false) AS later,
           coalesce(r.att >= r.max_att, false) AS exhausted
    FROM (
        SELECT ({state})::text AS st, ({group})::text AS q, ({locked}) IS NOT NULL AS locked,
               ({visible})::timestamptz AS vis, ({not_before})::timestamptz AS nb, ({attempts})::integer AS att,
               ({max_attempts})::integer AS max_att
        FROM {table} TABLESAMPLE SYSTEM (%(percent)s::float8)
        WHERE {state} = ANY(%(states)s::{state_type}[]) AND {filter}
    ) AS r
) AS f
GROUP BY f.st, f.q;

-- name: oldest_due
-- The oldest due job of each queue in one waiting state (by the age column), one index probe per
-- queue where an index is in (queue, age) order (pg-boss's (name, start_after)): for a state
-- whose count is an estimate, the rows read are a sample in some index's order and need not
-- hold any queue's oldest. Used only when the plan says it is such a probe.
SELECT q.queue, extract(epoch FROM now() - o.ts)::float8 AS oldest_due_age_s
FROM unnest(%(queues)s::text[]) AS q(queue)
CROSS JOIN LATERAL (
    SELECT ({age})::timestamptz AS ts FROM {table}
    WHERE {state} = %(state)s::{state_type} AND {queue_column} = q.queue::{queue_type}
      AND coalesce(({not_before})::timestamptz <= now(), true) AND coalesce(({visible})::timestamptz <= now(), true)
      AND ({locked}) IS NULL AND ({age}) IS NOT NULL
    ORDER BY {age} LIMIT 1
) AS o;

-- name: oldest_due_plan
-- What oldest_due would cost ({read}).
EXPLAIN (FORMAT JSON) {read};

-- name: estimate_rows
-- The planner's row estimate for a queue of a table with no state column.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {table} WHERE {filter};

-- name: estimate_marked
-- The planner's row estimate for the rows of a queue marked otherwise than ready.
EXPLAIN (FORMAT JSON) SELECT 1 FROM {table}
WHERE {filter}
  AND (({locked}) IS NOT NULL OR ({visible})::timestamptz > now() OR ({not_before})::timestamptz > now()
       OR ({attempts})::integer >= ({max_attempts})::integer);

-- name: dead_letters
-- A separate dead-letter table: its rows (of this queue, with a filter), counted up to `cap`.
SELECT count(*) AS scanned FROM (SELECT 1 FROM {table} WHERE {filter} LIMIT %(cap)s::integer) AS d;

-- name: head
-- Enter: a queue's head rows in its order, every column as text cut to 200 characters (the
-- table's column order is kept), so a wide row cannot flood the screen.
SELECT (SELECT json_object_agg(f.key, left(f.value, 200)) FROM json_each_text(row_to_json(t)) AS f) AS row
FROM (SELECT * FROM {table} WHERE {filter} ORDER BY {order} LIMIT %(limit)s::integer) AS t;

-- name: dead_head
-- Enter: the failed rows, newest first (by the order column), cut the same way.
SELECT (SELECT json_object_agg(f.key, left(f.value, 200)) FROM json_each_text(row_to_json(t)) AS f) AS row
FROM (SELECT * FROM {table} WHERE {filter} ORDER BY {order} DESC LIMIT %(limit)s::integer) AS t;

-- name: waiting_state_is
-- Fragment: rows in a state that is neither finished nor dead (Enter's head).
{state} = ANY(%(waiting_states)s::{state_type}[])

-- name: dead_state_is
-- Fragment: rows in one of the dead states.
{state} = ANY(%(dead_states)s::{state_type}[])

-- name: exhausted
-- Fragment: rows whose attempts reached their maximum.
({attempts})::integer >= ({max_attempts})::integer

-- name: both
-- Fragment: two conditions.
({first}) AND ({second})
