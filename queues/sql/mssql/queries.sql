-- queuetop engine queries, SQL Server 2019 and later (and Azure SQL). The same names, the same
-- %(name)s parameters and the same result columns, in the same order, as postgresql/queries.sql.
--
-- Conventions of this file:
-- - `{table}` is a queue's table, schema-qualified and bracket-quoted (`[queuetop].[q_orders]`),
--   filled in by the Python side; a literal brace is doubled. A literal percent sign is `%%`
--   (the modulo operator too).
-- - Values are always bound parameters, converted explicitly where their type matters. A list
--   parameter arrives as JSON text (`[1, 2]`, `["a", "b"]`) and is read with OPENJSON.
-- - Where PostgreSQL returns a boolean, a bit column comes back (pyodbc reads it as bool).
-- - Times are datetime2(6) on SYSUTCDATETIME(): naive UTC. A number of seconds S (a float) is
--   added to the clock as whole seconds plus microseconds, because DATEADD takes an int and a
--   single unit would overflow (milliseconds at 24.8 days, microseconds at 36 minutes):
--   DATEADD(microsecond, <fraction of S in us>, DATEADD(second, <whole S>, SYSUTCDATETIME())).
-- - A batch of several statements starts with SET NOCOUNT ON, so that the driver's first result
--   is the batch's result set rather than a row count, and, when it writes more than once,
--   SET XACT_ABORT ON inside BEGIN/COMMIT TRANSACTION, so that any error rolls the whole batch
--   back and ends it (no partial commit, and no result set before the error). Such a batch
--   ends by restoring both options: a batch sent without parameters runs at session scope, and
--   pooled sessions are reused. (A parameterized batch runs as sp_executesql/sp_prepexec, whose
--   SET options revert on their own.) A nested BEGIN/COMMIT inside the caller's transaction only
--   counts @@TRANCOUNT up and down: the caller's COMMIT decides.
-- - Batch limits stay far below lock escalation (about 5,000 locks taken by one statement on
--   one table): every dequeue takes at most 1000 rows per statement, whatever the caller asks.

-- name: schema_version
SELECT [value] FROM queuetop.meta WHERE [key] = N'schema_version';

-- name: init_lock
-- Serialises schema changes (engine init, queue creation) across sessions; held to COMMIT
-- (PostgreSQL: pg_advisory_xact_lock). sp_getapplock waits as long as the session's
-- LOCK_TIMEOUT allows (no @LockTimeout: its default is @@LOCK_TIMEOUT, -1 = forever, as an
-- advisory lock waits under lock_timeout) and returns 0 or 1 when granted, -1 timed out,
-- -2 cancelled, -3 chosen as deadlock victim, -999 a call error: those raise here.
-- A lock owned by the transaction needs one. Under IMPLICIT_TRANSACTIONS (how some ODBC drivers
-- run an autocommit-off session), EXEC does not open it, and an explicit BEGIN TRANSACTION
-- opens two nested ones: COMMIT the inner one at once and the caller's implicit transaction
-- remains, owning the lock. In autocommit mode there is no transaction to own it: refused.
SET NOCOUNT ON;
DECLARE @r int;
DECLARE @resource nvarchar(255) = CONCAT(N'queuetop.init:', CONVERT(bigint, %(key)s));
DECLARE @failure nvarchar(200);
IF @@TRANCOUNT = 0 AND (@@OPTIONS & 2) = 2
BEGIN
    BEGIN TRANSACTION;
    COMMIT TRANSACTION;
END;
IF @@TRANCOUNT = 0
    THROW 51001, N'queuetop: init_lock must run inside a transaction (sp_getapplock with @LockOwner = Transaction)', 1;
EXEC @r = sys.sp_getapplock
    @Resource = @resource, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @DbPrincipal = N'public';
IF @r < 0
BEGIN
    SET @failure = CONCAT(N'queuetop: sp_getapplock for ', @resource, N' returned ', @r);
    THROW 51002, @failure, 1;
END;
SELECT @r AS init_lock;
SET NOCOUNT OFF;

-- name: schema_present
SELECT CONVERT(bit, CASE WHEN OBJECT_ID(N'queuetop.meta', N'U') IS NOT NULL THEN 1 ELSE 0 END) AS present;

-- name: lookup_queue
SELECT table_name FROM queuetop.queues WHERE name = %(name)s;

-- name: register_queue
-- Insert if absent (ON CONFLICT DO NOTHING): UPDLOCK + HOLDLOCK on the probe for the key holds
-- its range until the INSERT, so two registrations of one name neither both insert nor fail.
INSERT INTO queuetop.queues (name, table_name)
SELECT CONVERT(nvarchar(128), %(name)s), CONVERT(nvarchar(128), %(table_name)s)
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.queues AS q WITH (UPDLOCK, HOLDLOCK)
    WHERE q.name = CONVERT(nvarchar(128), %(name)s)
);

-- name: list_queues
SELECT name, table_name, created_at FROM queuetop.queues ORDER BY name;

-- name: create_queue_table
-- visible_at: NULL = ready; a claim sets it to the visibility deadline (with claim_token), a
-- retry with back-off sets it to the time the message may run again (without claim_token).
--
-- The index, chosen on purpose (design note mssql.md, "Index deadlocks and latches"):
-- - One index only: the clustered primary key on id, the sequence the queue is ordered by.
--   Every dequeue is an ordered scan of it from the oldest row that stops after TOP rows,
--   skipping locked rows (READPAST), so no sort and no second access path. NServiceBus's
--   receive/purge deadlocks (#313) came from two statements taking locks on two indexes in
--   opposite orders; with no secondary index (none on visible_at, which every claim changes:
--   a claim would move the row in such an index, the churn #313 met) there is no second order.
-- - The last-page latch convoy of inserts on an ever-growing key (#419, #624) is what
--   OPTIMIZE_FOR_SEQUENTIAL_KEY (SQL Server 2019) addresses, so the table keeps the
--   clustered key NServiceBus gave up: its way out, a heap with a nonclustered index, later
--   drifted to scans, sorts and lock escalation (#1780).
-- - The plan is pinned, as Hangfire pins its own with FORCESEEK: FORCESEEK has nothing to
--   seek here (the oldest ready row has no seek predicate; the hint would fail with error
--   8622), so the dequeues name the clustered index instead, INDEX(1), and an index someone
--   adds later cannot pull them into a lookup-and-sort plan.
-- - Claims only overwrite fixed-length columns (claim_token, visible_at, attempts), so a claim
--   never grows its row nor splits a page; only a retry's last_error does. No fill factor: it
--   would only apply at a rebuild, and inserts go to the end.
-- - LOCK_ESCALATION = DISABLE: the dequeues are bounded at 1000 rows, but an enqueue batch is
--   as large as its caller makes it (a relay batch can hold thousands), and an escalated table
--   lock would stop every consumer until the producer commits. PostgreSQL never escalates.
--   (The last statement: sqlfluff's T-SQL grammar lacks this ALTER TABLE form; the test knows.)
IF OBJECT_ID(N'{table}', N'U') IS NULL
    CREATE TABLE {table} (
        id          bigint NOT NULL DEFAULT (NEXT VALUE FOR queuetop.message_ids),
        enqueued_at datetime2(6) NOT NULL DEFAULT (SYSUTCDATETIME()),
        attempts    int NOT NULL DEFAULT (0),
        claim_token bigint NULL,
        visible_at  datetime2(6) NULL,
        last_error  nvarchar(max) NULL,
        body        nvarchar(max) NOT NULL CHECK (ISJSON(body) = 1),
        PRIMARY KEY CLUSTERED (id) WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)
    );
IF EXISTS (SELECT 1 FROM sys.tables AS t WHERE t.object_id = OBJECT_ID(N'{table}') AND t.lock_escalation <> 1)
    ALTER TABLE {table} SET (LOCK_ESCALATION = DISABLE);

-- name: enqueue
INSERT INTO {table} (body) OUTPUT inserted.id VALUES (%(body)s);

-- name: retry_dead_letters
-- The queue's dead letters back in the queue as new messages (attempts 0, ready now), and gone
-- from the dead letters, in one statement (OUTPUT INTO: none lost or doubled).
DELETE FROM queuetop.dead_letters
OUTPUT deleted.body INTO {table} (body)
WHERE [queue] = CONVERT(nvarchar(128), %(queue)s);

-- name: enqueue_batch
-- The ids follow the list's order: NEXT VALUE FOR ... OVER (ORDER BY ...) is the documented way
-- to number an INSERT ... SELECT in order (a sequence default under ORDER BY is not).
INSERT INTO {table} (id, body)
SELECT NEXT VALUE FOR queuetop.message_ids OVER (ORDER BY CONVERT(int, b.[key])), b.[value]
FROM OPENJSON(%(bodies)s) AS b;

-- name: claim_one
-- Claim mode: a one-statement transaction marks the oldest visible message with our token and
-- a visibility deadline; processing then happens outside any transaction. The CTE picks the row
-- (TOP and ORDER BY inside it, with the hints): UPDLOCK so that two consumers never take the
-- same row, READPAST so that a consumer skips rows others hold instead of waiting (lax FIFO),
-- ROWLOCK so that it locks rows and never a page (READPAST skips locked rows, not locked
-- pages: every statement that writes a queue table says ROWLOCK for that reason),
-- READCOMMITTEDLOCK because READPAST is refused under READ_COMMITTED_SNAPSHOT otherwise. The
-- UPDATE goes through the CTE, so exactly the row it picked is claimed.
WITH next AS (
    SELECT TOP (1) id, attempts, enqueued_at, claim_token, visible_at, body
    FROM {table} WITH (ROWLOCK, READPAST, UPDLOCK, READCOMMITTEDLOCK, INDEX(1))
    WHERE visible_at IS NULL OR visible_at <= SYSUTCDATETIME()
    ORDER BY id
)
UPDATE next
SET claim_token = CONVERT(bigint, %(token)s),
    visible_at = DATEADD(microsecond,
        CONVERT(int, ROUND((CONVERT(float, %(visibility_s)s) - FLOOR(CONVERT(float, %(visibility_s)s))) * 1000000, 0)),
        DATEADD(second, CONVERT(int, FLOOR(CONVERT(float, %(visibility_s)s))), SYSUTCDATETIME())),
    attempts = attempts + 1
OUTPUT inserted.id, inserted.attempts, inserted.enqueued_at, inserted.body;

-- name: claim_batch
-- As claim_one, for up to `batch` rows (at most 1000 per statement). One row comes back, as in
-- PostgreSQL, but SQL Server has no arrays: each column is a JSON array in id order (OUTPUT
-- returns rows in no guaranteed order, so they are collected and ordered here):
--   ids [1, 2], attempts [1, 1], enqueued_ats ["2025-01-31T12:00:00.123456", ...] (ISO 8601,
--   naive UTC), bodies ["{\"n\": 1}", ...] (each body as a JSON string, exactly as stored).
-- No claimed row: one row of NULLs, as array_agg over nothing.
SET NOCOUNT ON;
DECLARE @claimed TABLE (id bigint NOT NULL PRIMARY KEY, attempts int NOT NULL, enqueued_at datetime2(6) NOT NULL,
                        body nvarchar(max) NOT NULL);
WITH next AS (
    SELECT TOP (CASE WHEN CONVERT(int, %(batch)s) < 1000 THEN CONVERT(int, %(batch)s) ELSE 1000 END)
           id, attempts, enqueued_at, claim_token, visible_at, body
    FROM {table} WITH (ROWLOCK, READPAST, UPDLOCK, READCOMMITTEDLOCK, INDEX(1))
    WHERE visible_at IS NULL OR visible_at <= SYSUTCDATETIME()
    ORDER BY id
)
UPDATE next
SET claim_token = CONVERT(bigint, %(token)s),
    visible_at = DATEADD(microsecond,
        CONVERT(int, ROUND((CONVERT(float, %(visibility_s)s) - FLOOR(CONVERT(float, %(visibility_s)s))) * 1000000, 0)),
        DATEADD(second, CONVERT(int, FLOOR(CONVERT(float, %(visibility_s)s))), SYSUTCDATETIME())),
    attempts = attempts + 1
OUTPUT inserted.id, inserted.attempts, inserted.enqueued_at, inserted.body
INTO @claimed (id, attempts, enqueued_at, body);
SELECT
    N'[' + STRING_AGG(CONVERT(nvarchar(max), c.id), N',') WITHIN GROUP (ORDER BY c.id) + N']' AS ids,
    N'[' + STRING_AGG(CONVERT(nvarchar(max), c.attempts), N',') WITHIN GROUP (ORDER BY c.id) + N']' AS attempts,
    N'[' + STRING_AGG(CONVERT(nvarchar(max), N'"' + CONVERT(nvarchar(30), c.enqueued_at, 126) + N'"'), N',')
        WITHIN GROUP (ORDER BY c.id) + N']' AS enqueued_ats,
    N'[' + STRING_AGG(N'"' + STRING_ESCAPE(c.body, 'json') + N'"', N',') WITHIN GROUP (ORDER BY c.id) + N']' AS bodies
FROM @claimed AS c;
SET NOCOUNT OFF;

-- name: ack_one
-- By id AND token: a consumer whose visibility expired (and whose message was claimed again by
-- someone else) must not delete it.
DELETE FROM {table} WITH (ROWLOCK) WHERE id = CONVERT(bigint, %(id)s) AND claim_token = CONVERT(bigint, %(token)s);

-- name: ack_batch
-- `ids` is a JSON array of the batch's ids (at most the 1000 one claim returns).
DELETE FROM {table} WITH (ROWLOCK)
WHERE claim_token = CONVERT(bigint, %(token)s)
  AND id IN (SELECT CONVERT(bigint, j.[value]) FROM OPENJSON(%(ids)s) AS j);

-- name: release_for_retry
UPDATE {table} WITH (ROWLOCK)
SET claim_token = NULL,
    visible_at = CASE WHEN CONVERT(float, %(delay_s)s) > 0
                      THEN DATEADD(microsecond,
                               CONVERT(int, ROUND((CONVERT(float, %(delay_s)s) - FLOOR(CONVERT(float, %(delay_s)s))) * 1000000, 0)),
                               DATEADD(second, CONVERT(int, FLOOR(CONVERT(float, %(delay_s)s))), SYSUTCDATETIME())) END,
    last_error = CONVERT(nvarchar(max), %(error)s)
WHERE id = CONVERT(bigint, %(id)s) AND claim_token = CONVERT(bigint, %(token)s);

-- name: dead_letter_claimed
-- The message moves with its error in one statement: the rows this DELETE really removed (by id
-- AND token) are the ones written to dead_letters. The row count is the rows moved.
DELETE FROM {table} WITH (ROWLOCK)
OUTPUT CONVERT(nvarchar(128), %(queue)s), deleted.id, deleted.enqueued_at, deleted.attempts, deleted.body,
       CONVERT(nvarchar(max), %(error)s)
INTO queuetop.dead_letters ([queue], message_id, enqueued_at, attempts, body, last_error)
WHERE id = CONVERT(bigint, %(id)s) AND claim_token = CONVERT(bigint, %(token)s);

-- name: take_held
-- Hold-transaction mode: the destructive select (DELETE through the CTE, OUTPUT deleted.*)
-- inside a transaction that stays open while the messages are processed; the row locks are the
-- claim, and a crash gives the messages back at once. Hints, TOP and ORDER BY as in claim_one,
-- at most 1000 rows per statement. OUTPUT returns rows in no guaranteed order: the Python side
-- sorts them by id.
WITH next AS (
    SELECT TOP (CASE WHEN CONVERT(int, %(batch)s) < 1000 THEN CONVERT(int, %(batch)s) ELSE 1000 END)
           id, attempts, enqueued_at, body
    FROM {table} WITH (ROWLOCK, READPAST, UPDLOCK, READCOMMITTEDLOCK, INDEX(1))
    WHERE visible_at IS NULL OR visible_at <= SYSUTCDATETIME()
    ORDER BY id
)
DELETE FROM next
OUTPUT deleted.id, deleted.attempts + 1 AS attempts, deleted.enqueued_at, deleted.body;

-- name: requeue_held
-- A held message that failed goes back under its own id (so it keeps its place in line), in
-- the same transaction that deleted it. The id column is a sequence default, not an IDENTITY,
-- so no IDENTITY_INSERT is needed (schema.sql, queuetop.message_ids).
INSERT INTO {table} (id, enqueued_at, attempts, visible_at, last_error, body)
VALUES (CONVERT(bigint, %(id)s), CONVERT(datetime2(6), %(enqueued_at)s), CONVERT(int, %(attempts)s),
        CASE WHEN CONVERT(float, %(delay_s)s) > 0
             THEN DATEADD(microsecond,
                      CONVERT(int, ROUND((CONVERT(float, %(delay_s)s) - FLOOR(CONVERT(float, %(delay_s)s))) * 1000000, 0)),
                      DATEADD(second, CONVERT(int, FLOOR(CONVERT(float, %(delay_s)s))), SYSUTCDATETIME())) END,
        CONVERT(nvarchar(max), %(error)s), CONVERT(nvarchar(max), %(body)s));

-- name: dead_letter_held
INSERT INTO queuetop.dead_letters ([queue], message_id, enqueued_at, attempts, body, last_error)
VALUES (CONVERT(nvarchar(128), %(queue)s), CONVERT(bigint, %(id)s), CONVERT(datetime2(6), %(enqueued_at)s),
        CONVERT(int, %(attempts)s), CONVERT(nvarchar(max), %(body)s), CONVERT(nvarchar(max), %(error)s));

-- name: queue_has_messages
-- A plain read: under READ_COMMITTED_SNAPSHOT it sees the committed rows without waiting, as
-- PostgreSQL does; under locking READ COMMITTED it waits for a held head row's transaction and
-- then answers for what was committed (READPAST would answer "empty" while a held message may
-- still come back).
SELECT CONVERT(bit, CASE WHEN EXISTS (SELECT 1 FROM {table}) THEN 1 ELSE 0 END) AS has_messages;

-- name: queue_counts
-- Exact counts, for the CLI and tests on small queues (the probes use estimates when deep).
SELECT q.depth, q.ready, q.in_flight, d.dead
FROM (
    SELECT COUNT_BIG(*) AS depth,
           COUNT_BIG(CASE WHEN visible_at IS NULL OR visible_at <= SYSUTCDATETIME() THEN 1 END) AS ready,
           COUNT_BIG(CASE WHEN claim_token IS NOT NULL AND visible_at > SYSUTCDATETIME() THEN 1 END) AS in_flight
    FROM {table}
) AS q
CROSS JOIN (
    SELECT COUNT_BIG(*) AS dead FROM queuetop.dead_letters WHERE [queue] = CONVERT(nvarchar(128), %(queue)s)
) AS d;

-- name: ring_create
-- A new ring, its tail and head rows and its `capacity` empty cells, all or nothing; an existing
-- name is left as it is (the caller compares the capacity). The probe for the name holds its
-- key range (UPDLOCK, HOLDLOCK) so that two creators of one ring do not both insert. Cells are
-- inserted 2000 per statement (numbers 0..9999 from a cross join, filtered), each statement far
-- below lock escalation; a very large ring still holds one row lock per cell until COMMIT.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @name nvarchar(128) = %(name)s;
DECLARE @capacity int = CONVERT(int, %(capacity)s);
DECLARE @id int;
DECLARE @done int = 0;
DECLARE @chunk int;
BEGIN TRANSACTION;
IF NOT EXISTS (SELECT 1 FROM queuetop.rings WITH (UPDLOCK, HOLDLOCK) WHERE name = @name)
BEGIN
    INSERT INTO queuetop.rings (name, capacity) VALUES (@name, @capacity);
    SET @id = CONVERT(int, SCOPE_IDENTITY());
    INSERT INTO queuetop.ring_tails (ring_id) VALUES (@id);
    INSERT INTO queuetop.ring_heads (ring_id) VALUES (@id);
    WHILE @done < @capacity
    BEGIN
        SET @chunk = CASE WHEN @capacity - @done < 2000 THEN @capacity - @done ELSE 2000 END;
        WITH digits AS (
            SELECT v.n FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS v (n)
        ), numbers AS (
            SELECT a.n + 10 * b.n + 100 * c.n + 1000 * d.n AS n
            FROM digits AS a CROSS JOIN digits AS b CROSS JOIN digits AS c CROSS JOIN digits AS d
        )
        INSERT INTO queuetop.ring_cells (ring_id, cell)
        SELECT @id, @done + numbers.n FROM numbers WHERE numbers.n < @chunk;
        SET @done = @done + @chunk;
    END;
END;
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: ring_describe
SELECT r.name, r.capacity, r.refused_total, t.pos - h.pos AS used, h.pos AS head, t.pos AS tail
FROM queuetop.rings AS r
JOIN queuetop.ring_tails AS t ON t.ring_id = r.id
JOIN queuetop.ring_heads AS h ON h.ring_id = r.id
WHERE r.name = CONVERT(nvarchar(128), %(name)s);

-- name: ring_put
-- Put all of `bodies` (a JSON array of JSON texts) or nothing. Returns the first position
-- written, or NULL when the ring lacks room (the refusal is counted). An unknown ring raises
-- error 50404 (PostgreSQL: SQLSTATE QT404).
-- Writers serialise on the ring's tail row (UPDLOCK, held to COMMIT; no READPAST: a writer
-- waits its turn, it does not skip the ring). Readers only ever empty cells, so free cells seen
-- here stay free while we hold the tail. The free count skips cells a reader holds (READPAST):
-- until that reader commits they are not free, as PostgreSQL sees them. Positions pos..pos+n-1
-- live in cells pos mod capacity onwards, wrapping once at most: two ranges of cell numbers,
-- two seeks.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @name nvarchar(128) = %(name)s;
DECLARE @put TABLE (ord int NOT NULL PRIMARY KEY, body nvarchar(max) NOT NULL);
DECLARE @id int;
DECLARE @cap int;
DECLARE @pos bigint;
DECLARE @n int;
DECLARE @free int = 0;
DECLARE @c0 int;
DECLARE @hi1 int;
DECLARE @hi2 int;
DECLARE @unknown nvarchar(300) = CONCAT(N'unknown ring ', @name);
INSERT INTO @put (ord, body)
SELECT CONVERT(int, j.[key]) + 1, j.[value] FROM OPENJSON(%(bodies)s) AS j;
SET @n = @@ROWCOUNT;
BEGIN TRANSACTION;
SELECT @id = r.id, @cap = r.capacity, @pos = t.pos
FROM queuetop.rings AS r
JOIN queuetop.ring_tails AS t WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK) ON t.ring_id = r.id
WHERE r.name = @name;
IF @id IS NULL
    THROW 50404, @unknown, 1;
IF @n BETWEEN 1 AND @cap
BEGIN
    SET @c0 = CONVERT(int, @pos %% @cap);
    SET @hi1 = CASE WHEN @c0 + @n > @cap THEN @cap - 1 ELSE @c0 + @n - 1 END;
    SET @hi2 = CASE WHEN @c0 + @n > @cap THEN @c0 + @n - 1 - @cap ELSE -1 END;
    SELECT @free = COUNT(*) FROM queuetop.ring_cells AS c WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
    WHERE c.ring_id = @id AND c.cell BETWEEN @c0 AND @hi1 AND c.is_full = 0;
    IF @hi2 >= 0
        SELECT @free = @free + COUNT(*) FROM queuetop.ring_cells AS c WITH (ROWLOCK, READPAST, READCOMMITTEDLOCK)
        WHERE c.ring_id = @id AND c.cell BETWEEN 0 AND @hi2 AND c.is_full = 0;
END;
IF @n > 0 AND @free < @n
BEGIN
    UPDATE queuetop.rings SET refused_total = refused_total + @n WHERE id = @id;
    SET @pos = NULL;
END
ELSE IF @n > 0
BEGIN
    UPDATE c
    SET is_full = 1, seq = @pos + p.ord - 1, put_at = SYSUTCDATETIME(), body = p.body
    FROM queuetop.ring_cells AS c WITH (ROWLOCK)
    JOIN @put AS p ON c.ring_id = @id AND c.cell = CONVERT(int, (@pos + p.ord - 1) %% @cap);
    UPDATE queuetop.ring_tails SET pos = @pos + @n WHERE ring_id = @id;
END;
COMMIT TRANSACTION;
SELECT @pos AS first_pos;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: ring_take
-- Take up to `count` cells in order from the head, at most 1000 per call (a dequeue, bounded
-- like the others; the caller gets fewer and may take again). The body stays in the cell (it
-- is overwritten by the next put). An unknown ring raises error 50404.
-- Readers serialise on the ring's head row (UPDLOCK, held to COMMIT), as PostgreSQL's
-- FOR UPDATE does: FIFO across readers needs one reader at a time, so a reader waits for the
-- head rather than skipping it. The cells are taken only below the committed tail (read
-- without hints: under READ_COMMITTED_SNAPSHOT the last committed value at once, under locking
-- READ COMMITTED after a writer that already moved it commits), so every cell taken is a
-- committed, full one that no writer holds. No READPAST on the cells on purpose: skipping a
-- cell inside [head, tail) would leave a hole that moving the head past it would lose; nothing
-- else locks those cells for longer than a writer's momentary shared read, which UPDLOCK waits
-- out.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @name nvarchar(128) = %(name)s;
DECLARE @max bigint = CONVERT(bigint, %(count)s);
DECLARE @taken TABLE (seq bigint NOT NULL PRIMARY KEY, put_at datetime2(6) NULL, body nvarchar(max) NULL);
DECLARE @id int;
DECLARE @cap int;
DECLARE @head bigint;
DECLARE @tail bigint;
DECLARE @k bigint;
DECLARE @c0 int;
DECLARE @hi1 int;
DECLARE @hi2 int;
DECLARE @n int = 0;
DECLARE @unknown nvarchar(300) = CONCAT(N'unknown ring ', @name);
BEGIN TRANSACTION;
SELECT @id = r.id, @cap = r.capacity, @head = h.pos
FROM queuetop.rings AS r
JOIN queuetop.ring_heads AS h WITH (UPDLOCK, ROWLOCK, READCOMMITTEDLOCK) ON h.ring_id = r.id
WHERE r.name = @name;
IF @id IS NULL
    THROW 50404, @unknown, 1;
SELECT @tail = t.pos FROM queuetop.ring_tails AS t WHERE t.ring_id = @id;
SELECT @k = MIN(m.v) FROM (VALUES (@max), (CONVERT(bigint, @cap)), (@tail - @head), (CONVERT(bigint, 1000))) AS m (v);
IF @k > 0
BEGIN
    SET @c0 = CONVERT(int, @head %% @cap);
    SET @hi1 = CASE WHEN @c0 + @k > @cap THEN @cap - 1 ELSE @c0 + @k - 1 END;
    SET @hi2 = CASE WHEN @c0 + @k > @cap THEN @c0 + @k - 1 - @cap ELSE -1 END;
    UPDATE c SET is_full = 0
    OUTPUT inserted.seq, inserted.put_at, inserted.body INTO @taken (seq, put_at, body)
    FROM queuetop.ring_cells AS c WITH (ROWLOCK, UPDLOCK, READCOMMITTEDLOCK)
    WHERE c.ring_id = @id AND c.cell BETWEEN @c0 AND @hi1
      AND c.is_full = 1 AND c.seq >= @head AND c.seq < @head + @k;
    SET @n = @@ROWCOUNT;
    IF @hi2 >= 0
    BEGIN
        UPDATE c SET is_full = 0
        OUTPUT inserted.seq, inserted.put_at, inserted.body INTO @taken (seq, put_at, body)
        FROM queuetop.ring_cells AS c WITH (ROWLOCK, UPDLOCK, READCOMMITTEDLOCK)
        WHERE c.ring_id = @id AND c.cell BETWEEN 0 AND @hi2
          AND c.is_full = 1 AND c.seq >= @head AND c.seq < @head + @k;
        SET @n = @n + @@ROWCOUNT;
    END;
    IF @n > 0
        UPDATE queuetop.ring_heads SET pos = @head + @n WHERE ring_id = @id;
END;
COMMIT TRANSACTION;
SELECT seq, put_at, body FROM @taken ORDER BY seq;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: lease_acquire
-- One compare-and-swap on the database clock: the lease is taken if it is free, expired, or
-- already ours. A new holder gets token + 1; the current holder keeps its token. MERGE ... WITH
-- (HOLDLOCK) holds the key (or, for a new name, its range) from the match to the write, so two
-- acquirers cannot both see the lease free, nor both insert it. No row comes back when another
-- holder has it. SYSUTCDATETIME() is evaluated once for the statement.
MERGE queuetop.leases WITH (HOLDLOCK) AS l
USING (
    SELECT CONVERT(nvarchar(128), %(name)s) AS name,
           CONVERT(nvarchar(200), %(holder)s) AS holder,
           DATEADD(microsecond,
               CONVERT(int, ROUND((CONVERT(float, %(ttl_s)s) - FLOOR(CONVERT(float, %(ttl_s)s))) * 1000000, 0)),
               DATEADD(second, CONVERT(int, FLOOR(CONVERT(float, %(ttl_s)s))), SYSUTCDATETIME())) AS expires_at
) AS s
ON l.name = s.name
WHEN MATCHED AND (l.holder IS NULL OR l.expires_at <= SYSUTCDATETIME() OR l.holder = s.holder) THEN
    UPDATE SET
        token = CASE WHEN l.holder = s.holder AND l.expires_at > SYSUTCDATETIME() THEN l.token ELSE l.token + 1 END,
        acquired_at = CASE WHEN l.holder = s.holder AND l.expires_at > SYSUTCDATETIME() THEN l.acquired_at
                           ELSE SYSUTCDATETIME() END,
        holder = s.holder,
        expires_at = s.expires_at,
        released_at = NULL
WHEN NOT MATCHED THEN
    INSERT (name, holder, token, acquired_at, expires_at)
    VALUES (s.name, s.holder, 1, SYSUTCDATETIME(), s.expires_at)
OUTPUT inserted.token;

-- name: lease_renew
-- Only by the holder (and, when given, only under the token it was handed). A lease that
-- expired but was not taken over may be renewed: nobody else was issued a token meanwhile.
UPDATE queuetop.leases
SET expires_at = DATEADD(microsecond,
        CONVERT(int, ROUND((CONVERT(float, %(ttl_s)s) - FLOOR(CONVERT(float, %(ttl_s)s))) * 1000000, 0)),
        DATEADD(second, CONVERT(int, FLOOR(CONVERT(float, %(ttl_s)s))), SYSUTCDATETIME()))
OUTPUT inserted.token
WHERE name = CONVERT(nvarchar(128), %(name)s) AND holder = CONVERT(nvarchar(200), %(holder)s)
  AND (CONVERT(bigint, %(token)s) IS NULL OR token = CONVERT(bigint, %(token)s));

-- name: lease_release
UPDATE queuetop.leases
SET holder = NULL, expires_at = NULL, released_at = SYSUTCDATETIME()
OUTPUT inserted.token
WHERE name = CONVERT(nvarchar(128), %(name)s) AND holder = CONVERT(nvarchar(200), %(holder)s)
  AND (CONVERT(bigint, %(token)s) IS NULL OR token = CONVERT(bigint, %(token)s));

-- name: lease_describe
SELECT name, holder, token, expires_at,
       CONVERT(float, DATEDIFF_BIG(microsecond, SYSUTCDATETIME(), expires_at)) / 1000000.0 AS expires_in_s
FROM queuetop.leases WHERE name = CONVERT(nvarchar(128), %(name)s);

-- name: truncate_queue
TRUNCATE TABLE {table};

-- name: fill_queue
-- Benchmarks only: a queue of a given depth, 2000 rows per statement (each far below lock
-- escalation, and each its own statement in the log), bodies {"n": 1} .. {"n": count}.
SET NOCOUNT ON;
DECLARE @count int = CONVERT(int, %(count)s);
DECLARE @done int = 0;
DECLARE @chunk int;
WHILE @done < @count
BEGIN
    SET @chunk = CASE WHEN @count - @done < 2000 THEN @count - @done ELSE 2000 END;
    WITH digits AS (
        SELECT v.n FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS v (n)
    ), numbers AS (
        SELECT a.n + 10 * b.n + 100 * c.n + 1000 * d.n AS n
        FROM digits AS a CROSS JOIN digits AS b CROSS JOIN digits AS c CROSS JOIN digits AS d
    )
    INSERT INTO {table} (id, body)
    SELECT NEXT VALUE FOR queuetop.message_ids OVER (ORDER BY numbers.n), CONCAT(N'{{"n": ', @done + numbers.n + 1, N'}}')
    FROM numbers WHERE numbers.n < @chunk;
    SET @done = @done + @chunk;
END;
SET NOCOUNT OFF;

-- name: vacuum_queue
-- PostgreSQL's VACUUM ANALYZE before a benchmark: SQL Server has nothing to vacuum (deleted
-- rows are ghost records its background task removes, and after truncate_queue + fill_queue
-- there are none), so what is left to do is the ANALYZE half: fresh statistics.
UPDATE STATISTICS {table};

-- name: task_create
INSERT INTO queuetop.tasks (title) OUTPUT inserted.id VALUES (CONVERT(nvarchar(max), %(title)s));

-- name: task_submit
-- Insert-only: the task reaches these users (new ones only), and one +n PENDING delta says so;
-- no row comes back when none was new. `users` is a JSON array of ids. A user another session
-- is adding right now waits on that key and is then skipped (IGNORE_DUP_KEY, schema.sql).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @task_id bigint = CONVERT(bigint, %(task_id)s);
DECLARE @added bigint;
BEGIN TRANSACTION;
INSERT INTO queuetop.user_tasks (task_id, user_id)
SELECT DISTINCT @task_id, CONVERT(bigint, j.[value])
FROM OPENJSON(%(users)s) AS j
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.user_tasks AS u WHERE u.task_id = @task_id AND u.user_id = CONVERT(bigint, j.[value])
);
SET @added = @@ROWCOUNT;
IF @added > 0
    INSERT INTO queuetop.task_status_deltas (task_id, status, [count])
    OUTPUT inserted.[count]
    VALUES (@task_id, N'PENDING', @added);
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: task_answer
-- The user's own row changes (no one else touches it); the aggregate only gets two inserts.
-- Two rows (1, 1) come back when the user answered, none when the task never reached them or
-- they had answered already.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @task_id bigint = CONVERT(bigint, %(task_id)s);
DECLARE @user_id bigint = CONVERT(bigint, %(user_id)s);
DECLARE @answered TABLE (task_id bigint NOT NULL);
BEGIN TRANSACTION;
UPDATE queuetop.user_tasks SET status = N'DONE', answered_at = SYSUTCDATETIME()
OUTPUT inserted.task_id INTO @answered (task_id)
WHERE task_id = @task_id AND user_id = @user_id AND status = N'PENDING';
INSERT INTO queuetop.task_status_deltas (task_id, status, [count])
OUTPUT 1 AS answered
SELECT a.task_id, d.status, d.delta
FROM @answered AS a
CROSS JOIN (VALUES (N'PENDING', -1), (N'DONE', 1)) AS d (status, delta);
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: task_status_counts
SELECT status, SUM([count]) AS [count]
FROM queuetop.task_status_deltas WHERE task_id = CONVERT(bigint, %(task_id)s)
GROUP BY status ORDER BY status;

-- name: compaction_groups
-- Groups with delta rows not yet folded (the filtered index holds only those).
SELECT DISTINCT task_id FROM queuetop.task_status_deltas WHERE is_aggregate = 0 ORDER BY task_id;

-- name: compaction_take_ids
-- Step 1, in the compaction's transaction: the group's row ids as of now (deltas inserted later
-- are left for the next run). READPAST skips deltas a writer has not committed yet (PostgreSQL
-- does not see them either), where a plain locking read would wait for the writer; UPDLOCK
-- holds the ids taken until step 2 deletes them; READCOMMITTEDLOCK as for every READPAST. At
-- most 1000 ids per run and group (PostgreSQL takes them all): the DELETE of step 2 stays far
-- below lock escalation, and a larger group is folded over several runs.
WITH next AS (
    SELECT TOP (1000) id
    FROM queuetop.task_status_deltas WITH (ROWLOCK, READPAST, UPDLOCK, READCOMMITTEDLOCK)
    WHERE task_id = CONVERT(bigint, %(task_id)s)
    ORDER BY id
)
SELECT id FROM next ORDER BY id;

-- name: compaction_fold
-- Step 2, in the compaction's transaction: delete exactly those ids (a JSON array) and insert the
-- sums of the rows this DELETE really removed. A row another compactor deleted first is not
-- returned here, so it cannot be counted twice.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @task_id bigint = CONVERT(bigint, %(task_id)s);
DECLARE @gone TABLE (status nvarchar(32) NOT NULL, [count] bigint NOT NULL);
DECLARE @deleted bigint;
DECLARE @inserted bigint;
BEGIN TRANSACTION;
DELETE FROM queuetop.task_status_deltas WITH (ROWLOCK)
OUTPUT deleted.status, deleted.[count] INTO @gone (status, [count])
WHERE task_id = @task_id
  AND id IN (SELECT CONVERT(bigint, j.[value]) FROM OPENJSON(%(ids)s) AS j);
SET @deleted = @@ROWCOUNT;
INSERT INTO queuetop.task_status_deltas (task_id, status, [count], is_aggregate)
SELECT @task_id, g.status, SUM(g.[count]), 1 FROM @gone AS g GROUP BY g.status HAVING SUM(g.[count]) <> 0;
SET @inserted = @@ROWCOUNT;
COMMIT TRANSACTION;
SELECT @deleted AS deleted, @inserted AS inserted;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: compaction_record
MERGE queuetop.compactor_runs WITH (HOLDLOCK) AS r
USING (
    SELECT CONVERT(nvarchar(128), %(name)s) AS name, CONVERT(float, %(duration_ms)s) AS duration_ms,
           CONVERT(bigint, %(rows)s) AS rows_folded, CONVERT(int, %(groups)s) AS group_count
) AS s
ON r.name = s.name
WHEN MATCHED THEN
    UPDATE SET last_run_at = SYSUTCDATETIME(), last_duration_ms = s.duration_ms,
               last_rows_folded = s.rows_folded, last_groups = s.group_count, runs_total = r.runs_total + 1
WHEN NOT MATCHED THEN
    INSERT (name, last_run_at, last_duration_ms, last_rows_folded, last_groups, runs_total)
    VALUES (s.name, SYSUTCDATETIME(), s.duration_ms, s.rows_folded, s.group_count, 1);

-- name: user_task_counts
-- The ground truth the aggregates must agree with: every user's own row.
SELECT status, COUNT_BIG(*) AS [count] FROM queuetop.user_tasks WHERE task_id = CONVERT(bigint, %(task_id)s)
GROUP BY status ORDER BY status;

-- name: naive_task_init
-- The hot-row design (the contention scenario's "naive" mode): one aggregate row per status,
-- created with the task (the note's step 2, "inserts empty statuses rows"); existing rows stay.
INSERT INTO queuetop.task_status_naive (task_id, status, [count])
SELECT CONVERT(bigint, %(task_id)s), s.status, 0
FROM (VALUES (N'PENDING'), (N'DONE')) AS s (status)
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.task_status_naive AS n WITH (UPDLOCK, HOLDLOCK)
    WHERE n.task_id = CONVERT(bigint, %(task_id)s) AND n.status = s.status
);

-- name: naive_submit
-- The task reaches these users, and the PENDING row is updated in the same transaction (the
-- note's trigger): from here to COMMIT the submission holds that row's lock. One row comes
-- back, the number of new users, when the task has its PENDING row.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @task_id bigint = CONVERT(bigint, %(task_id)s);
DECLARE @added bigint;
BEGIN TRANSACTION;
INSERT INTO queuetop.user_tasks (task_id, user_id)
SELECT DISTINCT @task_id, CONVERT(bigint, j.[value])
FROM OPENJSON(%(users)s) AS j
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.user_tasks AS u WHERE u.task_id = @task_id AND u.user_id = CONVERT(bigint, j.[value])
);
SET @added = @@ROWCOUNT;
UPDATE queuetop.task_status_naive SET [count] = [count] + @added
OUTPUT @added AS [count]
WHERE task_id = @task_id AND status = N'PENDING';
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: naive_answer
-- The user's row, then both hot aggregate rows: PENDING -1, DONE +1. Two rows come back when
-- the user answered.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @task_id bigint = CONVERT(bigint, %(task_id)s);
DECLARE @user_id bigint = CONVERT(bigint, %(user_id)s);
DECLARE @answered TABLE (task_id bigint NOT NULL);
BEGIN TRANSACTION;
UPDATE queuetop.user_tasks SET status = N'DONE', answered_at = SYSUTCDATETIME()
OUTPUT inserted.task_id INTO @answered (task_id)
WHERE task_id = @task_id AND user_id = @user_id AND status = N'PENDING';
UPDATE n
SET [count] = n.[count] + CASE WHEN n.status = N'DONE' THEN 1 ELSE -1 END
OUTPUT 1 AS answered
FROM queuetop.task_status_naive AS n
JOIN @answered AS a ON n.task_id = a.task_id
WHERE n.status IN (N'PENDING', N'DONE');
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: naive_status_counts
SELECT status, [count] FROM queuetop.task_status_naive WHERE task_id = CONVERT(bigint, %(task_id)s) ORDER BY status;

-- name: scenario_drop_tasks
-- The contention scenario's rows (`tasks`, a JSON array of ids), all or nothing: deltas, naive
-- counters, tasks (user_tasks go with their tasks, ON DELETE CASCADE).
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @tasks TABLE (id bigint NOT NULL PRIMARY KEY);
INSERT INTO @tasks (id) SELECT DISTINCT CONVERT(bigint, j.[value]) FROM OPENJSON(%(tasks)s) AS j;
BEGIN TRANSACTION;
DELETE FROM queuetop.task_status_deltas WHERE task_id IN (SELECT t.id FROM @tasks AS t);
DELETE FROM queuetop.task_status_naive WHERE task_id IN (SELECT t.id FROM @tasks AS t);
DELETE FROM queuetop.tasks WHERE id IN (SELECT t.id FROM @tasks AS t);
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: task_by_title
SELECT TOP (1) id FROM queuetop.tasks WHERE title = CONVERT(nvarchar(max), %(title)s) ORDER BY id;

-- name: task_next_users
-- User ids the task has not reached yet, after the highest it has (the demo's resubmissions):
-- `count` of them, up to a million (numbers from a cross join of digits, cut by TOP).
WITH digits AS (
    SELECT v.n FROM (VALUES (0), (1), (2), (3), (4), (5), (6), (7), (8), (9)) AS v (n)
), numbers AS (
    SELECT TOP (CONVERT(bigint, %(count)s)) ROW_NUMBER() OVER (ORDER BY (SELECT NULL)) AS g
    FROM digits AS a CROSS JOIN digits AS b CROSS JOIN digits AS c
    CROSS JOIN digits AS d CROSS JOIN digits AS e CROSS JOIN digits AS f
    ORDER BY g
)
SELECT ISNULL((SELECT MAX(u.user_id) FROM queuetop.user_tasks AS u WHERE u.task_id = CONVERT(bigint, %(task_id)s)), 0)
       + numbers.g AS user_id
FROM numbers ORDER BY numbers.g;

-- name: task_pending_users
SELECT TOP (CONVERT(bigint, %(limit)s)) user_id FROM queuetop.user_tasks
WHERE task_id = CONVERT(bigint, %(task_id)s) AND status = N'PENDING' ORDER BY user_id;

-- Exactly-once endpoints (pattern 4). The inbox store's statements run alone, in autocommit.
-- Ids are uuids as text, converted to uniqueidentifier; pyodbc returns uniqueidentifier as an
-- upper-case string (or uuid.UUID with pyodbc.native_uuid = True).

-- name: eo_payload_put
-- Insert if absent (ON CONFLICT DO NOTHING): the probe holds the key's range to the INSERT.
INSERT INTO queuetop.eo_payloads (id, body)
SELECT CONVERT(uniqueidentifier, %(id)s), CONVERT(nvarchar(max), %(body)s)
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.eo_payloads AS p WITH (UPDLOCK, HOLDLOCK) WHERE p.id = CONVERT(uniqueidentifier, %(id)s)
);

-- name: eo_payload_get
SELECT body FROM queuetop.eo_payloads WHERE id = CONVERT(uniqueidentifier, %(id)s);

-- name: eo_payload_delete
DELETE FROM queuetop.eo_payloads WHERE id = CONVERT(uniqueidentifier, %(id)s);

-- name: eo_inbox_create
INSERT INTO queuetop.eo_inbox (endpoint, attempt_id, message_id)
SELECT CONVERT(nvarchar(128), %(endpoint)s), CONVERT(uniqueidentifier, %(attempt_id)s), CONVERT(uniqueidentifier, %(message_id)s)
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.eo_inbox AS i WITH (UPDLOCK, HOLDLOCK)
    WHERE i.endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND i.attempt_id = CONVERT(uniqueidentifier, %(attempt_id)s)
);

-- name: eo_inbox_exists
SELECT 1 AS found FROM queuetop.eo_inbox
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND attempt_id = CONVERT(uniqueidentifier, %(attempt_id)s);

-- name: eo_inbox_claim
-- Compare-and-swap: set the claim id if none is set (or it is already this one). The UPDATE
-- re-reads the row under its update lock, so of two claims one wins and the other finds the
-- claim id set.
UPDATE queuetop.eo_inbox SET claim_id = CONVERT(uniqueidentifier, %(claim_id)s)
OUTPUT 1 AS claimed
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND attempt_id = CONVERT(uniqueidentifier, %(attempt_id)s)
  AND message_id = CONVERT(uniqueidentifier, %(message_id)s)
  AND (claim_id IS NULL OR claim_id = CONVERT(uniqueidentifier, %(claim_id)s));

-- name: eo_inbox_delete
DELETE FROM queuetop.eo_inbox
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND attempt_id = CONVERT(uniqueidentifier, %(attempt_id)s)
  AND (CONVERT(uniqueidentifier, %(claim_id)s) IS NULL OR claim_id = CONVERT(uniqueidentifier, %(claim_id)s));

-- name: eo_outbox_get
-- outgoing and attempts are JSON text (PostgreSQL's jsonb comes back decoded).
SELECT message_id, claim_id, state, outgoing, attempts FROM queuetop.eo_outbox
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND message_id = CONVERT(uniqueidentifier, %(message_id)s);

-- name: eo_outbox_create
-- A fresh claim id, unless a record exists already (another copy of the message made it).
INSERT INTO queuetop.eo_outbox (endpoint, message_id, claim_id)
SELECT CONVERT(nvarchar(128), %(endpoint)s), CONVERT(uniqueidentifier, %(message_id)s), CONVERT(uniqueidentifier, %(claim_id)s)
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.eo_outbox AS o WITH (UPDLOCK, HOLDLOCK)
    WHERE o.endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND o.message_id = CONVERT(uniqueidentifier, %(message_id)s)
);

-- name: eo_outbox_processed
-- In the business transaction: only the record's own claim, only once.
UPDATE queuetop.eo_outbox SET state = N'processed'
OUTPUT 1 AS processed
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND message_id = CONVERT(uniqueidentifier, %(message_id)s)
  AND claim_id = CONVERT(uniqueidentifier, %(claim_id)s) AND state = N'claimed';

-- name: eo_outbox_new
-- A business operation with no incoming message (the sender): processed from the start.
-- `outgoing` is JSON text.
INSERT INTO queuetop.eo_outbox (endpoint, message_id, claim_id, state, outgoing, incoming)
VALUES (CONVERT(nvarchar(128), %(endpoint)s), CONVERT(uniqueidentifier, %(message_id)s),
        CONVERT(uniqueidentifier, %(claim_id)s), N'processed', CONVERT(nvarchar(max), %(outgoing)s), 0);

-- name: eo_outbox_set_attempts
-- Persisted before sending; compare-and-swap, so that two dispatchers never both send.
UPDATE queuetop.eo_outbox SET attempts = CONVERT(nvarchar(max), %(attempts)s)
OUTPUT 1 AS persisted
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND message_id = CONVERT(uniqueidentifier, %(message_id)s)
  AND attempts IS NULL;

-- name: eo_outbox_discard
-- A claim that lost: its record goes (only if it is still unprocessed and still its own).
DELETE FROM queuetop.eo_outbox
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND message_id = CONVERT(uniqueidentifier, %(message_id)s)
  AND claim_id = CONVERT(uniqueidentifier, %(claim_id)s) AND state = N'claimed';

-- name: eo_outbox_delete
DELETE FROM queuetop.eo_outbox
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND message_id = CONVERT(uniqueidentifier, %(message_id)s)
  AND state = N'processed';

-- name: eo_outbox_pending
-- The endpoint's own business operations left undispatched by a crash (not incoming messages).
SELECT TOP (CONVERT(bigint, %(limit)s)) message_id FROM queuetop.eo_outbox
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND state = N'processed' AND incoming = 0
ORDER BY created_at;

-- name: eo_effect
INSERT INTO queuetop.eo_effects (endpoint, message_id)
VALUES (CONVERT(nvarchar(128), %(endpoint)s), CONVERT(uniqueidentifier, %(message_id)s));

-- name: eo_outbox_outgoing
UPDATE queuetop.eo_outbox SET outgoing = CONVERT(nvarchar(max), %(outgoing)s)
WHERE endpoint = CONVERT(nvarchar(128), %(endpoint)s) AND message_id = CONVERT(uniqueidentifier, %(message_id)s);

-- name: block_head_row
-- An injected blocker: the queue's head row locked, the session then idle in transaction
-- (PostgreSQL: FOR UPDATE). An update lock, held to the end of the transaction: consumers skip
-- the row (READPAST), plain readers pass (U is compatible with S), writers of that row wait.
-- Like FOR UPDATE, it waits if another transaction holds the head row.
SELECT TOP (1) id FROM {table} WITH (ROWLOCK, UPDLOCK, READCOMMITTEDLOCK) ORDER BY id;

-- name: block_table
-- An injected blocker on the whole table (PostgreSQL: LOCK TABLE ... IN EXCLUSIVE MODE, which
-- lets plain readers pass and makes writers and FOR UPDATE wait). TABLOCK with UPDLOCK holds an
-- update lock on the table to the end of the transaction: compatible with the IS and S locks
-- of readers, not with the IX locks every INSERT, DELETE and dequeue takes on the table
-- (READPAST does not skip a table lock). TABLOCKX would stop the readers too.
SET NOCOUNT ON;
DECLARE @held bigint;
SELECT TOP (1) @held = id FROM {table} WITH (TABLOCK, UPDLOCK);
SET NOCOUNT OFF;

-- name: purge_dead_letters
DELETE FROM queuetop.dead_letters WHERE [queue] = CONVERT(nvarchar(128), %(queue)s);

-- name: compaction_try_lock
-- One compactor per group at a time: the others skip the group instead of waiting
-- (PostgreSQL: pg_try_advisory_xact_lock). An application lock owned by the transaction,
-- requested with @LockTimeout = 0: sp_getapplock returns 0 when granted, -1 when another
-- compactor holds it. `locked` is a bit: 1 granted, 0 held elsewhere; any other return code
-- (-2 cancelled, -3 deadlock victim, -999 call error) raises. The transaction is made sure of
-- as in init_lock.
SET NOCOUNT ON;
DECLARE @r int;
DECLARE @resource nvarchar(255) = CONCAT(N'queuetop.compact:', CONVERT(int, %(class)s), N':', CONVERT(int, %(key)s));
DECLARE @failure nvarchar(200);
IF @@TRANCOUNT = 0 AND (@@OPTIONS & 2) = 2
BEGIN
    BEGIN TRANSACTION;
    COMMIT TRANSACTION;
END;
IF @@TRANCOUNT = 0
    THROW 51001, N'queuetop: compaction_try_lock must run inside a transaction (sp_getapplock with @LockOwner = Transaction)', 1;
EXEC @r = sys.sp_getapplock
    @Resource = @resource, @LockMode = N'Exclusive', @LockOwner = N'Transaction', @LockTimeout = 0,
    @DbPrincipal = N'public';
IF @r < -1
BEGIN
    SET @failure = CONCAT(N'queuetop: sp_getapplock for ', @resource, N' returned ', @r);
    THROW 51002, @failure, 1;
END;
SELECT CONVERT(bit, CASE WHEN @r >= 0 THEN 1 ELSE 0 END) AS locked;
SET NOCOUNT OFF;

-- name: terminate_backend
-- The dashboard's one write to someone else's session (after the operator confirmed it): KILL
-- ends the session and rolls its transaction back (pg_terminate_backend), on the session the
-- operator chose and no other: its identity is (%(pid)s, %(started)s), the session id and its
-- login_time, checked before the KILL (a later login may reuse the session id); %(started)s
-- NULL: the id alone. KILL takes no variable, so it is built as text, from an int: nothing but
-- digits reaches it. One row, PostgreSQL's columns: found (a user session has that id),
-- started (its login_time), signalled (a bit: 0 when the session is not another user session
-- this login can see, without VIEW SERVER STATE a login sees only its own, or is another login
-- than the one chosen, or ended meanwhile: error 6106). Other errors raise: 6102, no ALTER ANY
-- CONNECTION permission; 6115, KILL refused inside a user transaction (run this on an autocommit
-- connection).
SET NOCOUNT ON;
DECLARE @pid int = CONVERT(int, %(pid)s);
DECLARE @started datetime = CONVERT(datetime, %(started)s);
DECLARE @kill nvarchar(40) = CONCAT(N'KILL ', @pid);
DECLARE @found bit = 0;
DECLARE @login datetime = NULL;
DECLARE @terminated bit = 0;
SELECT @found = 1, @login = s.login_time
FROM sys.dm_exec_sessions AS s
WHERE s.session_id = @pid AND s.is_user_process = 1;
BEGIN TRY
    IF @pid <> @@SPID AND @found = 1 AND (@started IS NULL OR @login = @started)
    BEGIN
        EXEC (@kill);
        SET @terminated = 1;
    END;
END TRY
BEGIN CATCH
    IF ERROR_NUMBER() <> 6106
        THROW;
END CATCH;
SELECT @found AS found, @login AS started, @terminated AS signalled;
SET NOCOUNT OFF;

-- name: database_exists
SELECT 1 AS found FROM sys.databases WHERE name = CONVERT(nvarchar(128), %(name)s);

-- name: create_database
-- Refused inside a user transaction (error 226): run on an autocommit connection.
CREATE DATABASE {database};

-- name: drop_queue_table
DROP TABLE IF EXISTS {table};

-- name: unregister_queue
DELETE FROM queuetop.queues WHERE name = CONVERT(nvarchar(128), %(name)s);

-- name: scenario_drop_endpoints
-- The exactly-once scenario's endpoints (a JSON array of names), all or nothing: their side
-- effects, inbox and outbox records.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @endpoints TABLE (name nvarchar(128) NOT NULL PRIMARY KEY);
INSERT INTO @endpoints (name) SELECT DISTINCT CONVERT(nvarchar(128), j.[value]) FROM OPENJSON(%(endpoints)s) AS j;
BEGIN TRANSACTION;
DELETE FROM queuetop.eo_effects WHERE endpoint IN (SELECT e.name FROM @endpoints AS e);
DELETE FROM queuetop.eo_inbox WHERE endpoint IN (SELECT e.name FROM @endpoints AS e);
DELETE FROM queuetop.eo_outbox WHERE endpoint IN (SELECT e.name FROM @endpoints AS e);
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: scenario_effects
-- The exactly-once scenario's verdict: side effects a receiver applied, and how many distinct.
SELECT COUNT_BIG(*) AS effects, COUNT_BIG(DISTINCT message_id) AS distinct_messages
FROM queuetop.eo_effects WHERE endpoint = CONVERT(nvarchar(128), %(receiver)s);

-- name: scenario_leftovers
-- What the exactly-once scenario left behind: inbox records of the receiver, outbox records of both.
SELECT (SELECT COUNT_BIG(*) FROM queuetop.eo_inbox WHERE endpoint = CONVERT(nvarchar(128), %(receiver)s)) AS inbox,
       (SELECT COUNT_BIG(*) FROM queuetop.eo_outbox
        WHERE endpoint IN (CONVERT(nvarchar(128), %(receiver)s), CONVERT(nvarchar(128), %(sender)s))) AS outbox;

-- name: scenario_pending_deltas
-- The contention scenario's deltas not yet folded, for its tasks (a JSON array of ids).
SELECT COUNT_BIG(*) AS [count] FROM queuetop.task_status_deltas
WHERE is_aggregate = 0 AND task_id IN (SELECT CONVERT(bigint, j.[value]) FROM OPENJSON(%(tasks)s) AS j);

-- name: scenario_pause
-- A long transaction's think time, spent inside the transaction (the contention scenario's
-- submission selecting eligible users, as in design note 001). WAITFOR DELAY takes a time of
-- day: the seconds are added to midnight (datetime: 1/300 s steps, at most 24 hours).
SET NOCOUNT ON;
DECLARE @delay datetime = DATEADD(millisecond, CONVERT(int, ROUND(CONVERT(float, %(seconds)s) * 1000, 0)), CONVERT(datetime, 0));
WAITFOR DELAY @delay;
SET NOCOUNT OFF;

-- name: queue_row_count
-- A whole queue counted and read back: the relay scenario's verdict (test-sized queues only).
SELECT COUNT_BIG(*) AS [count] FROM {table};

-- name: queue_bodies
SELECT body FROM {table};

-- Outbox and relay (patterns 3 and 4).

-- name: outbox_write
INSERT INTO queuetop.outbox (kind, destination, body)
OUTPUT inserted.id
VALUES (CONVERT(nvarchar(16), %(kind)s), CONVERT(nvarchar(128), %(destination)s), CONVERT(nvarchar(max), %(body)s));

-- name: outbox_take
-- In the relay's transaction: the oldest rows nobody else holds, deleted; exactly the rows this
-- DELETE returns are published. Rows locked by another relay's open batch (a stalled ex-leader
-- that has not noticed it lost the lease) are skipped (READPAST), not waited for: they come
-- back if its fence refuses it. Hints, TOP and ORDER BY in the CTE as in take_held; at most
-- 1000 rows per batch. OUTPUT order is not guaranteed: the relay sorts by id.
WITH next AS (
    SELECT TOP (CASE WHEN CONVERT(int, %(limit)s) < 1000 THEN CONVERT(int, %(limit)s) ELSE 1000 END)
           id, kind, destination, body
    FROM queuetop.outbox WITH (ROWLOCK, READPAST, UPDLOCK, READCOMMITTEDLOCK, INDEX(1))
    ORDER BY id
)
DELETE FROM next
OUTPUT deleted.id, deleted.kind, deleted.destination, deleted.body;

-- name: subscribers
SELECT topic, [queue] FROM queuetop.subscriptions
WHERE topic IN (SELECT CONVERT(nvarchar(128), j.[value]) FROM OPENJSON(%(topics)s) AS j)
ORDER BY topic, [queue];

-- name: subscribe
INSERT INTO queuetop.subscriptions (topic, [queue])
SELECT CONVERT(nvarchar(128), %(topic)s), CONVERT(nvarchar(128), %(queue)s)
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.subscriptions AS s WITH (UPDLOCK, HOLDLOCK)
    WHERE s.topic = CONVERT(nvarchar(128), %(topic)s) AND s.[queue] = CONVERT(nvarchar(128), %(queue)s)
);

-- name: unsubscribe
DELETE FROM queuetop.subscriptions
WHERE topic = CONVERT(nvarchar(128), %(topic)s) AND [queue] = CONVERT(nvarchar(128), %(queue)s);

-- name: lease_fence
-- The last statement of every relay transaction: the lease is still ours, under our token, by
-- the database clock now (SYSUTCDATETIME() is read when this statement runs, as PostgreSQL's
-- clock_timestamp(), not at transaction start). REPEATABLEREAD keeps the shared lock on the
-- row to COMMIT (PostgreSQL: FOR SHARE), so a takeover's MERGE waits for this COMMIT; it also
-- makes the read a locking one under READ_COMMITTED_SNAPSHOT.
SELECT token FROM queuetop.leases WITH (REPEATABLEREAD, ROWLOCK)
WHERE name = CONVERT(nvarchar(128), %(name)s) AND holder = CONVERT(nvarchar(200), %(holder)s)
  AND token = CONVERT(bigint, %(token)s) AND expires_at > SYSUTCDATETIME();

-- name: outbox_rows
SELECT COUNT_BIG(*) AS [count] FROM queuetop.outbox;

-- name: lease_forget
DELETE FROM queuetop.leases WHERE name = CONVERT(nvarchar(128), %(name)s);

-- name: remember_made
-- What the dashboard's prompts created (a queue, a lease), so that `queuetop demo reset` removes
-- it and nothing else of the user's: one queuetop.meta key per object (if absent), the time as
-- ISO 8601 UTC.
INSERT INTO queuetop.meta ([key], [value])
SELECT CONCAT(N'made-by-dashboard:', CONVERT(nvarchar(16), %(kind)s), N':', CONVERT(nvarchar(128), %(name)s)),
       CONVERT(nvarchar(30), SYSUTCDATETIME(), 126)
WHERE NOT EXISTS (
    SELECT 1 FROM queuetop.meta AS m WITH (UPDLOCK, HOLDLOCK)
    WHERE m.[key] = CONCAT(N'made-by-dashboard:', CONVERT(nvarchar(16), %(kind)s), N':', CONVERT(nvarchar(128), %(name)s))
);

-- name: demo_objects
-- What `queuetop demo reset` removes: everything named demo.*, the outbox relays' topology, and
-- what the dashboard's prompts recorded as theirs (`queues` and `leases` are JSON arrays of
-- names). A recorded key is 'made-by-dashboard:<kind>:<name>', the name may hold colons.
WITH made AS (
    SELECT LEFT(r.rest, CHARINDEX(N':', r.rest + N':') - 1) AS kind,
           SUBSTRING(r.rest, CHARINDEX(N':', r.rest + N':') + 1, 4000) AS name
    FROM queuetop.meta AS m
    CROSS APPLY (SELECT SUBSTRING(m.[key], LEN(N'made-by-dashboard:') + 1, 4000) AS rest) AS r
    WHERE m.[key] LIKE N'made-by-dashboard:%%'
)
SELECT N'queue' AS kind, q.name, q.table_name AS detail FROM queuetop.queues AS q
WHERE q.name LIKE N'demo.%%'
   OR q.name IN (SELECT CONVERT(nvarchar(128), j.[value]) FROM OPENJSON(%(queues)s) AS j)
   OR q.name IN (SELECT made.name FROM made WHERE made.kind = N'queue')
UNION ALL
SELECT N'ring', r.name, NULL FROM queuetop.rings AS r WHERE r.name LIKE N'demo.%%'
UNION ALL
SELECT N'lease', l.name, NULL FROM queuetop.leases AS l
WHERE l.name LIKE N'demo.%%'
   OR l.name IN (SELECT CONVERT(nvarchar(128), j.[value]) FROM OPENJSON(%(leases)s) AS j)
   OR l.name IN (SELECT made.name FROM made WHERE made.kind = N'lease')
UNION ALL
SELECT N'task', CONVERT(nvarchar(128), t.id), t.title FROM queuetop.tasks AS t WHERE t.title LIKE N'demo.%%'
ORDER BY kind, name;

-- name: ring_drop
-- Its tails, heads and cells go with it (ON DELETE CASCADE).
DELETE FROM queuetop.rings WHERE name = CONVERT(nvarchar(128), %(name)s);

-- name: demo_forget_rest
-- The relays' outbox rows and subscriptions (`destinations`, a JSON array of names), and the
-- record of what the prompts made, all or nothing.
SET NOCOUNT ON;
SET XACT_ABORT ON;
DECLARE @destinations TABLE (name nvarchar(128) NOT NULL PRIMARY KEY);
INSERT INTO @destinations (name)
SELECT DISTINCT CONVERT(nvarchar(128), j.[value]) FROM OPENJSON(%(destinations)s) AS j;
BEGIN TRANSACTION;
DELETE FROM queuetop.outbox WHERE destination IN (SELECT d.name FROM @destinations AS d);
DELETE FROM queuetop.subscriptions WHERE topic IN (SELECT d.name FROM @destinations AS d);
DELETE FROM queuetop.meta WHERE [key] LIKE N'made-by-dashboard:%%';
COMMIT TRANSACTION;
SET XACT_ABORT OFF;
SET NOCOUNT OFF;

-- name: engine_sessions
-- Other sessions of queuetop's engine (producers, workers, relays, the demo): resetting under
-- them would drop tables they write to. program_name is the ODBC APP the engine connects with.
-- Without VIEW SERVER STATE (SQL Server 2022: VIEW SERVER PERFORMANCE STATE) a login sees only
-- its own session here, so the list is empty.
SELECT s.program_name AS application_name, COUNT_BIG(*) AS n
FROM sys.dm_exec_sessions AS s
WHERE s.is_user_process = 1 AND s.database_id = DB_ID() AND s.session_id <> @@SPID
  AND s.program_name LIKE N'queuetop-%%' AND s.program_name NOT IN (N'queuetop-probe', N'queuetop-admin')
GROUP BY s.program_name ORDER BY s.program_name;
