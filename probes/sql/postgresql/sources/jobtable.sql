-- Any job table, described by a [[queues]] entry of the config (and by the library adapters,
-- which are such descriptions plus their own detection and details). Identifiers in {braces}
-- come from the catalog, quoted; an unconfigured column is a NULL literal, typed by the casts here.
--
-- Cost: the figures are exact counts made by the tally, a page range at a time within a budget
-- of pages per probe cycle, and kept per chunk of pages between passes; between two passes, a
-- state's bounded read (at most `cap` rows, through an index) keeps a small figure exact now.

-- name: resolve
-- The relation behind a configured name: a table, a partitioned parent or a view. Who may read
-- it, and whether row-level security filters what this role sees.
SELECT c.oid AS relid, n.nspname AS schema_name, c.relname AS table_name, c.relkind::text AS relkind,
       has_table_privilege(c.oid, 'SELECT') AS can_select,
       row_security_active(c.oid) AS rls_active
FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
WHERE c.oid = to_regclass(%(table)s::text) AND c.relkind IN ('r', 'p', 'v', 'm');

-- name: columns
-- A column's type as SQL (for messages) and as a quoted name (for typed casts of bound values),
-- and its category (N numeric, B boolean, S string, E enum, ...: what a declared filter's values
-- may be).
SELECT a.attname AS name, format_type(a.atttypid, a.atttypmod) AS type,
       tn.nspname AS type_schema, t.typname AS type_name, t.typtype::text AS typtype, t.typcategory::text AS category
FROM pg_attribute a
JOIN pg_type t ON t.oid = a.atttypid
JOIN pg_namespace tn ON tn.oid = t.typnamespace
WHERE a.attrelid = %(relid)s::oid AND a.attnum > 0 AND NOT a.attisdropped;

-- name: index_keys
-- The key columns of each valid index of the table (or of a partitioned parent), in order (NULL
-- for an expression), each with its indoption (1: DESC, 2: NULLS FIRST): which order an index
-- serves, and which columns lead one.
SELECT array_agg(a.attname::text ORDER BY k.n) AS columns, array_agg(k.option::integer ORDER BY k.n) AS options
FROM pg_index i
CROSS JOIN LATERAL unnest(i.indkey::int2[], i.indoption::int2[]) WITH ORDINALITY AS k(attnum, option, n)
LEFT JOIN pg_attribute a ON a.attrelid = i.indrelid AND a.attnum = k.attnum
WHERE i.indrelid = %(relid)s::oid AND i.indisvalid AND k.n <= i.indnkeyatts
GROUP BY i.indexrelid;

-- name: distinct_values
-- The distinct values of a column (the queues of a shared table, the states of a text state
-- column), found by skipping through the column's index: one index probe per value, not a scan
-- of the rows; at most max_values of them (the recursion stops when the LIMIT is met).
WITH RECURSIVE q AS (
    (SELECT {column} AS v FROM {table} WHERE {column} IS NOT NULL ORDER BY {column} LIMIT 1)
    UNION ALL
    SELECT (SELECT {column} FROM {table} WHERE {column} > q.v ORDER BY {column} LIMIT 1)
    FROM q WHERE q.v IS NOT NULL
)
SELECT v::text AS value FROM q WHERE v IS NOT NULL LIMIT %(max_values)s::integer;

-- name: distinct_small
-- The distinct values of a column of a small table (one the tally reads whole every cycle), in one
-- pass over it: where the planner would not skip through an index (a table too small for its
-- statistics to favour one), a scan of a megabyte, not one per value.
SELECT DISTINCT {column}::text AS value FROM {table} WHERE {column} IS NOT NULL LIMIT %(max_values)s::integer;

-- name: distinct_in_states
-- The distinct queues of a shared table whose index leads with (state, queue) and none with the
-- queue alone (River's fetching index): skipping through the queues of each state the column
-- can hold, finished ones too, one index probe per state and queue, at most max_values queues a
-- state (a queue is named once per state that holds it); not a read of the rows.
SELECT d.v::text AS value
FROM unnest(%(states)s::{state_type}[]) AS s(state)
CROSS JOIN LATERAL (
    WITH RECURSIVE q AS (
        (SELECT {column} AS v FROM {table}
         WHERE {state} = s.state AND {column} IS NOT NULL ORDER BY {column} LIMIT 1)
        UNION ALL
        SELECT (SELECT {column} FROM {table} WHERE {state} = s.state AND {column} > q.v ORDER BY {column} LIMIT 1)
        FROM q WHERE q.v IS NOT NULL
    )
    SELECT v FROM q WHERE v IS NOT NULL LIMIT %(max_values)s::integer
) AS d;

-- name: names_plan
-- What the planner makes of a distinct read ({read}: distinct_values or distinct_in_states): an
-- index probe per value where an index leads with the column (and the state), else a scan of
-- the table for each value, which is never run.
EXPLAIN (FORMAT JSON) {read};

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

-- name: running
-- Fragment: row `j`'s xmax is a transaction running now (it deleted or locked the row and has not
-- committed): the running transactions' ids, gathered once per statement (an InitPlan).
(j.xmax <> '0'::xid AND j.xmax = ANY (ARRAY(SELECT a.backend_xid FROM pg_stat_activity AS a WHERE a.backend_xid IS NOT NULL)))

-- name: held
-- Fragment: row `j` is held - claimed (visible_at ahead of an attempted row), locked
-- (in_flight_when_not_null), or held by a running transaction ({running}, where the table's
-- consumers may work a job inside the transaction that locked it; else false).
(coalesce(({locked}) IS NOT NULL OR (({visible})::timestamptz > now() AND coalesce(({attempts})::integer, 1) > 0), false)
 OR {running})

-- name: exhausted
-- Fragment: row `j` has used up its attempts.
coalesce(({attempts})::integer >= ({max_attempts})::integer, false)

-- name: later
-- Fragment: row `j` is due later (scheduled, backing off, sent with a delay).
coalesce(({not_before})::timestamptz > now() OR ({visible})::timestamptz > now(), false)

-- name: blocked_row
-- Fragment: row `j` of a state its row classifies, due, is one the library's fetch skips now
-- ({blocked}, the library's rule: a lock, a policy, a locked named queue). The library's rule is
-- looked at only for due rows.
(NOT {listed} AND NOT {later} AND coalesce(({blocked}), false))

-- name: listed
-- Fragment: row `j` is in a state that says its class by itself (dead, in flight, delayed).
coalesce({state} = ANY(%(listed_states)s::{state_type}[]), false)

-- name: not_done
-- Fragment: a row that is not finished (finished rows are in no figure).
coalesce({state} <> ALL(%(done_states)s::{state_type}[]), true)

-- name: tally
-- The rows of the page ranges read ({branches}: one tally_rows each), counted by partition,
-- chunk of pages, group and state, with how many of them the row itself says are held, out of
-- attempts, due later, or blocked (in that order: each count excludes the rows of the ones
-- before), and the oldest due time of the rest (the age column, epoch seconds). Which class a
-- row is in follows from its state (jobtable.py, `_classes`). Finished rows are in none of these
-- (counted false): only in `finished`. With the table's recorded times (created_column,
-- finished_column), the rows of each range created and finished in its window (since the
-- range's last reading, up to `settle` seconds before this statement): the rates.
SELECT s.rel, s.chunk, s.grp, s.state::text AS state, count(*) FILTER (WHERE s.counted) AS n,
       count(*) FILTER (WHERE s.counted AND s.held) AS held,
       count(*) FILTER (WHERE s.counted AND NOT s.held AND s.exhausted) AS exhausted,
       count(*) FILTER (WHERE s.counted AND NOT s.held AND NOT s.exhausted AND s.later) AS later,
       count(*) FILTER (WHERE s.counted AND NOT s.held AND NOT s.exhausted AND NOT s.later AND s.blocked) AS blocked,
       extract(epoch FROM min(s.ts) FILTER (WHERE s.counted AND NOT s.held AND NOT s.exhausted AND NOT s.later
                                              AND NOT s.blocked))::float8 AS oldest,
       count(*) FILTER (WHERE s.arrived) AS arrived,
       count(*) FILTER (WHERE s.finished) AS finished,
       count(*) FILTER (WHERE s.finished AND s.failed) AS failed,
       -- (the statement's own start: now() is the probe transaction's, which began before)
       extract(epoch FROM statement_timestamp())::float8 AS server_now,
       extract(epoch FROM statement_timestamp())::float8 - %(settle)s::float8 AS server_until
FROM ({branches}) AS s
GROUP BY s.rel, s.chunk, s.grp, s.state;

-- name: tally_rows
-- Part of tally: the unfinished rows of one page range ({range}) of the table, of each partition
-- of a partitioned one (a TID range scan, PostgreSQL 14 and later: its cost is the range's pages,
-- whatever the table's size), or of the whole relation; and the finished ones that were created
-- or finished in the range's window ({arrived}, {finished}). OFFSET 0 keeps each row's flags computed once, not once per count.
(SELECT {chunk}::bigint AS chunk, {rel} AS rel, ({group})::text AS grp, {state} AS state,
        {held} AS held, {exhausted} AS exhausted, {later} AS later, {blocked_row} AS blocked, ({age})::timestamptz AS ts,
        {not_done} AS counted, {arrived} AS arrived, {finished} AS finished, {failed_row} AS failed
 FROM {table} AS j
 WHERE {range} AND ({not_done} OR {finished} OR {arrived})
 OFFSET 0)

-- name: arrived_in_window
-- Fragment: row `j` was created ({created}: its recorded time) in its range's window, from
-- {since} (epoch seconds) to `settle` seconds before this statement.
(j.{created} >= to_timestamp({since}::float8)
 AND j.{created} < statement_timestamp() - make_interval(secs => %(settle)s::float8))

-- name: finished_in_window
-- Fragment: row `j` is finished (done or dead) and finished ({finished_at}) in the window.
(j.{finished_at} >= to_timestamp({since}::float8)
 AND j.{finished_at} < statement_timestamp() - make_interval(secs => %(settle)s::float8)
 AND NOT {not_done_or_dead})

-- name: not_finished
-- Fragment: a row neither done nor dead (what finished_in_window's rows are not).
coalesce({state} <> ALL(%(finished_states)s::{state_type}[]), true)

-- name: failed_row
-- Fragment: a finished row that failed for good (a dead state).
coalesce({state} = ANY(%(dead_states)s::{state_type}[]), false)

-- name: page_range
-- Fragment: the rows of pages [lo, hi).
j.ctid >= {lo}::tid AND j.ctid < {hi}::tid

-- name: whole_relation
-- Fragment: every row (a view, or a server without TID range scans: the whole relation at once).
TRUE

-- name: relation_facts
-- For each relation asked about (a table or a partitioned parent): each of its relations with
-- storage (itself, or each partition) with its pages now (what a pass of the tally must read),
-- the statistics' idea of its rows (the last ANALYZE's or VACUUM's count, else the live-row
-- counter) and what the planner's estimates depend on (reltuples and relpages change with every
-- VACUUM and ANALYZE; and its valid indexes, the parent's too). The probes ask once a cycle for
-- every table the last cycle sampled (tally.py, CycleCatalog). Catalog and size reads only (no
-- lock beyond opening the relation's files).
SELECT p.relid, c.oid AS rel, c.relkind::text AS relkind, c.reltuples::float8 AS reltuples, c.relpages::bigint AS relpages,
       pg_stat_get_live_tuples(c.oid) AS n_live_tup,
       CASE WHEN c.relkind IN ('r', 'm')
            THEN (pg_relation_size(c.oid) / current_setting('block_size')::bigint)::bigint END AS pages,
       (SELECT count(*) FROM pg_index i WHERE i.indisvalid AND i.indrelid = c.oid) AS indexes
FROM unnest(%(relids)s::oid[]) AS p(relid)
CROSS JOIN LATERAL (SELECT p.relid AS oid UNION ALL SELECT i.inhrelid FROM pg_inherits i WHERE i.inhparent = p.relid) AS r
JOIN pg_class c ON c.oid = r.oid AND c.relkind IN ('r', 'm', 'p')
ORDER BY p.relid, c.oid;

-- name: states_read
-- The exact counts where an index leads to them, between two passes of the tally, in one
-- statement (one snapshot: a job moving from one state to the next meanwhile is counted once):
-- of each state at most its limit of rows ({branches}: one state_branch per state), counted as
-- the tally counts. A state read to fewer rows than its limit was read whole: exact.
SELECT s.*, extract(epoch FROM statement_timestamp())::float8 AS server_now
FROM ({branches}) AS s;

-- name: state_branch
-- Part of states_read: at most {limit} rows of one state ({index}: its place in the list),
-- counted by group as the tally counts them (each branch on its own: a state that says its class
-- by itself has constant flags, and its rows are only grouped). The state is a bound value, so
-- the planner can pick the library's partial index for it (`WHERE status = 'doing'`); with no
-- state column, the rows of the queue.
(SELECT {index} AS state_index, b.grp, b.state::text AS state, count(*) AS n,
        count(*) FILTER (WHERE b.held) AS held,
        count(*) FILTER (WHERE NOT b.held AND b.exhausted) AS exhausted,
        count(*) FILTER (WHERE NOT b.held AND NOT b.exhausted AND b.later) AS later,
        count(*) FILTER (WHERE NOT b.held AND NOT b.exhausted AND NOT b.later AND b.blocked) AS blocked,
        extract(epoch FROM min(b.ts) FILTER (WHERE NOT b.held AND NOT b.exhausted AND NOT b.later AND NOT b.blocked))::float8
            AS oldest
 FROM (SELECT ({group})::text AS grp, {state} AS state, {held} AS held, {exhausted} AS exhausted,
              {later} AS later, {blocked_row} AS blocked, ({age})::timestamptz AS ts
       FROM {table} AS j
       WHERE {state_is} AND {filter}
       LIMIT {limit}::integer) AS b
 GROUP BY b.grp, b.state)

-- name: state_is
-- Fragment: the rows of one state (a bound value).
{state} = {state_value}::{state_type}

-- name: union_all
-- Fragment: between two branches of states_read.
UNION ALL

-- name: state_plan
-- What the planner expects a state's bounded read ({read}: its state_branch) to cost: little
-- when an index leads to the state's rows, much when they must be found among others' (a scan
-- of the table, or an index whose condition takes in another state too and filters it out row
-- by row).
EXPLAIN (FORMAT JSON) SELECT * FROM {read} AS r;

-- name: head
-- Enter: a queue's head rows in its order ({order}: every order_by column with its direction),
-- every column as text cut to 200 characters (the table's column order is kept), so a wide row
-- cannot flood the screen.
SELECT (SELECT json_object_agg(f.key, left(f.value, 200)) FROM json_each_text(row_to_json(t)) AS f) AS row
FROM (SELECT * FROM {table} AS j WHERE {filter} ORDER BY {order} LIMIT %(limit)s::integer) AS t;

-- name: dead_head
-- Enter: the failed rows, newest first (the order reversed, every column of it), cut the same way.
SELECT (SELECT json_object_agg(f.key, left(f.value, 200)) FROM json_each_text(row_to_json(t)) AS f) AS row
FROM (SELECT * FROM {table} AS j WHERE {filter} ORDER BY {order_reversed} LIMIT %(limit)s::integer) AS t;

-- name: ascending
-- Fragment: one column of an order (NULLS as PostgreSQL puts them by default, said, so that the
-- reversed order is the exact reverse).
{column} ASC NULLS LAST

-- name: ascending_nulls_first
{column} ASC NULLS FIRST

-- name: descending
{column} DESC NULLS FIRST

-- name: descending_nulls_last
{column} DESC NULLS LAST

-- name: list_separator
-- Fragment: between two columns of an order.
,

-- name: column_is_any
-- Fragment: a declared filter's column (quoted from the catalog) holds one of its values (bound,
-- cast to the column's type).
{column} = ANY({values}::{type}[])

-- name: waiting_state_is
-- Fragment: rows in a state that is neither finished nor dead (Enter's head).
{state} = ANY(%(waiting_states)s::{state_type}[])

-- name: dead_state_is
-- Fragment: rows in one of the dead states.
{state} = ANY(%(dead_states)s::{state_type}[])

-- name: both
-- Fragment: two conditions.
({first}) AND ({second})
