-- queuetop reference schema, SQL Server 2019 and later (and Azure SQL). The same tables and
-- columns as postgresql/schema.sql; per-queue tables are created on demand from queries.sql
-- (create_queue_table) and listed in queuetop.queues.
--
-- How it runs: T-SQL's `GO` is a client convention that ODBC does not know, so the batches of
-- this file are separated by a line `-- batch` and sent one by one. Each batch is idempotent on
-- its own (`IF OBJECT_ID(...) IS NULL CREATE ...`), so `queuetop engine init` may run the file
-- any number of times, and concurrently too (it holds init_lock meanwhile).
--
-- Types: datetime2(6) on the database clock SYSUTCDATETIME() (UTC, microseconds, the precision
-- of PostgreSQL's timestamptz; values come back naive and are UTC); bigint IDENTITY for
-- sequences (the queue tables take theirs from one SEQUENCE, see below); nvarchar(max) JSON
-- text with CHECK (ISJSON(...) = 1) where PostgreSQL has json/jsonb; bit for boolean;
-- uniqueidentifier for uuid. Without a json_type_constraint, ISJSON accepts an object or an
-- array only: a bare scalar body (`42`, `"text"`) that PostgreSQL's json accepts is refused
-- here (ISJSON(x, VALUE) would accept it, but exists from SQL Server 2022 only).
--
-- Names of constraints and indexes are those PostgreSQL generates (meta_pkey, ...), so that
-- the two schemas read the same in either database's catalog.

-- The features below need SQL Server 2019 (OPTIMIZE_FOR_SEQUENTIAL_KEY), or Azure SQL, and a
-- database compatibility level of 130 or more (OPENJSON reads the list parameters). Refuse
-- at once, with the reason, rather than half-way through.
IF CONVERT(int, SERVERPROPERTY('EngineEdition')) NOT IN (5, 8)
    AND CONVERT(int, SERVERPROPERTY('ProductMajorVersion')) < 15
    THROW 51010, N'queuetop needs SQL Server 2019 or later (or Azure SQL)', 1;
IF (SELECT d.compatibility_level FROM sys.databases AS d WHERE d.database_id = DB_ID()) < 130
    THROW 51011, N'queuetop needs a database compatibility level of 130 or more (OPENJSON)', 1;
-- batch
IF SCHEMA_ID(N'queuetop') IS NULL
    EXEC (N'CREATE SCHEMA queuetop');
-- batch
IF OBJECT_ID(N'queuetop.meta', N'U') IS NULL
    CREATE TABLE queuetop.meta (
        [key]   nvarchar(200) NOT NULL CONSTRAINT meta_pkey PRIMARY KEY,
        [value] nvarchar(max) NOT NULL
    );
-- batch
-- The registry of table queues: the probes discover queues here.
IF OBJECT_ID(N'queuetop.queues', N'U') IS NULL
    CREATE TABLE queuetop.queues (
        name       nvarchar(128) NOT NULL CONSTRAINT queues_pkey PRIMARY KEY,
        table_name nvarchar(128) NOT NULL CONSTRAINT queues_table_name_key UNIQUE,
        created_at datetime2(6) NOT NULL CONSTRAINT queues_created_at_default DEFAULT (SYSUTCDATETIME())
    );
-- batch
-- The ids of every queue table's messages. PostgreSQL gives each queue table its own identity
-- column; here the queue tables take `id` from this one sequence, because hold-transaction mode
-- puts a failed message back under its own id (requeue_held), and an IDENTITY column refuses
-- an explicit id unless the session holds SET IDENTITY_INSERT, which needs ALTER permission on
-- the table and is allowed on one table per session at a time. Ids are unique across queues;
-- within a queue they grow with insertion, as before. CACHE: allocation stays in memory (up to
-- 1000 numbers are skipped after an unclean shutdown, as an identity skips its own cache).
IF OBJECT_ID(N'queuetop.message_ids', N'SO') IS NULL
    CREATE SEQUENCE queuetop.message_ids AS bigint START WITH 1 INCREMENT BY 1 CACHE 1000;
-- batch
-- Messages that failed max_attempts times, with their last error. Rare by nature, so one table
-- for all queues is enough. No CHECK on body: dead_letter_claimed moves a row here with
-- `DELETE ... OUTPUT ... INTO`, and an OUTPUT INTO target may not have CHECK constraints (nor
-- triggers, nor foreign keys); the body was checked when it was enqueued.
IF OBJECT_ID(N'queuetop.dead_letters', N'U') IS NULL
    CREATE TABLE queuetop.dead_letters (
        id          bigint IDENTITY (1, 1) NOT NULL CONSTRAINT dead_letters_pkey PRIMARY KEY,
        [queue]     nvarchar(128) NOT NULL,
        message_id  bigint NOT NULL,
        enqueued_at datetime2(6) NOT NULL,
        attempts    int NOT NULL,
        body        nvarchar(max) NOT NULL,
        last_error  nvarchar(max) NULL,
        died_at     datetime2(6) NOT NULL CONSTRAINT dead_letters_died_at_default DEFAULT (SYSUTCDATETIME())
    );
-- batch
IF NOT EXISTS (
    SELECT 1 FROM sys.indexes AS i
    WHERE i.object_id = OBJECT_ID(N'queuetop.dead_letters') AND i.name = N'dead_letters_queue_idx'
)
    CREATE INDEX dead_letters_queue_idx ON queuetop.dead_letters ([queue], id);
-- batch
-- Ring buffers: `capacity` cells created once, then only updated. Writers serialise on the
-- tail row, readers on the head row, so committed cells are always the contiguous range
-- [head, tail) and a rolled-back writer or reader leaves no hole behind (queries.sql,
-- ring_put and ring_take, which are what PostgreSQL keeps in two plpgsql functions).
IF OBJECT_ID(N'queuetop.rings', N'U') IS NULL
    CREATE TABLE queuetop.rings (
        id            int IDENTITY (1, 1) NOT NULL CONSTRAINT rings_pkey PRIMARY KEY,
        name          nvarchar(128) NOT NULL CONSTRAINT rings_name_key UNIQUE,
        capacity      int NOT NULL CONSTRAINT rings_capacity_check CHECK (capacity > 0),
        refused_total bigint NOT NULL CONSTRAINT rings_refused_total_default DEFAULT (0),
        created_at    datetime2(6) NOT NULL CONSTRAINT rings_created_at_default DEFAULT (SYSUTCDATETIME())
    );
-- batch
IF OBJECT_ID(N'queuetop.ring_tails', N'U') IS NULL
    CREATE TABLE queuetop.ring_tails (
        ring_id int NOT NULL CONSTRAINT ring_tails_pkey PRIMARY KEY
            CONSTRAINT ring_tails_ring_id_fkey REFERENCES queuetop.rings (id) ON DELETE CASCADE,
        pos     bigint NOT NULL CONSTRAINT ring_tails_pos_default DEFAULT (0)  -- next position to write
    );
-- batch
IF OBJECT_ID(N'queuetop.ring_heads', N'U') IS NULL
    CREATE TABLE queuetop.ring_heads (
        ring_id int NOT NULL CONSTRAINT ring_heads_pkey PRIMARY KEY
            CONSTRAINT ring_heads_ring_id_fkey REFERENCES queuetop.rings (id) ON DELETE CASCADE,
        pos     bigint NOT NULL CONSTRAINT ring_heads_pos_default DEFAULT (0)  -- next position to read
    );
-- batch
IF OBJECT_ID(N'queuetop.ring_cells', N'U') IS NULL
    CREATE TABLE queuetop.ring_cells (
        ring_id int NOT NULL CONSTRAINT ring_cells_ring_id_fkey REFERENCES queuetop.rings (id) ON DELETE CASCADE,
        cell    int NOT NULL,            -- 0 .. capacity-1; position p lives in cell (p mod capacity)
        is_full bit NOT NULL CONSTRAINT ring_cells_is_full_default DEFAULT (0),
        seq     bigint NULL,             -- the position last written here
        put_at  datetime2(6) NULL,
        body    nvarchar(max) NULL CONSTRAINT ring_cells_body_check CHECK (body IS NULL OR ISJSON(body) = 1),
        CONSTRAINT ring_cells_pkey PRIMARY KEY CLUSTERED (ring_id, cell)
    );
-- batch
-- PostgreSQL leaves room on each page for HOT updates (fillfactor 50). SQL Server honours a
-- fill factor only when an index is built, not as rows arrive, so the equivalent here is to keep
-- the rows from growing: bodies live off-row (a fixed 16-byte pointer in the row), so writing a
-- cell of any size never splits a page of the clustered index after the first lap. Steady
-- state stays update-only, with no index churn.
IF EXISTS (
    SELECT 1 FROM sys.tables AS t
    WHERE t.object_id = OBJECT_ID(N'queuetop.ring_cells') AND t.large_value_types_out_of_row = 0
)
    EXEC sys.sp_tableoption N'queuetop.ring_cells', 'large value types out of row', 1;
-- batch
-- One ring_cells table holds every ring: a statement that escalated to a table lock (a put of
-- thousands of bodies, which must stay one statement to be all-or-nothing) would stop every
-- other ring's readers and writers. Row locks only, whatever the size.
IF EXISTS (SELECT 1 FROM sys.tables AS t WHERE t.object_id = OBJECT_ID(N'queuetop.ring_cells') AND t.lock_escalation <> 1)
    ALTER TABLE queuetop.ring_cells SET (LOCK_ESCALATION = DISABLE);
-- batch
-- Leases: compare-and-swap on the database clock; the fencing token grows by one each time the
-- lease changes hands.
IF OBJECT_ID(N'queuetop.leases', N'U') IS NULL
    CREATE TABLE queuetop.leases (
        name        nvarchar(128) NOT NULL CONSTRAINT leases_pkey PRIMARY KEY,
        holder      nvarchar(200) NULL,
        token       bigint NOT NULL CONSTRAINT leases_token_default DEFAULT (0),
        acquired_at datetime2(6) NULL,
        expires_at  datetime2(6) NULL,
        released_at datetime2(6) NULL
    );
-- batch
-- Pattern 5, the aggregation compactor. Writers only INSERT status deltas (+1 PENDING when a
-- task reaches a user, -1 PENDING / +1 DONE when the user answers); readers always read
-- SUM(count) GROUP BY status; a single compacting agent folds a group's delta rows into one
-- aggregate row per status. task_status_naive is the hot-row design the scenario contrasts.
-- Readers block on writers' uncommitted deltas under locking READ COMMITTED; with
-- READ_COMMITTED_SNAPSHOT on (Azure SQL's default) they read the committed rows, as in
-- PostgreSQL, and never wait.
IF OBJECT_ID(N'queuetop.tasks', N'U') IS NULL
    CREATE TABLE queuetop.tasks (
        id         bigint IDENTITY (1, 1) NOT NULL CONSTRAINT tasks_pkey PRIMARY KEY,
        title      nvarchar(max) NOT NULL,
        created_at datetime2(6) NOT NULL CONSTRAINT tasks_created_at_default DEFAULT (SYSUTCDATETIME())
    );
-- batch
-- IGNORE_DUP_KEY: a user the task already reached is skipped (PostgreSQL's ON CONFLICT DO
-- NOTHING), and two sessions adding the same user wait on that key's lock, not on a key-range
-- lock: an `INSERT ... WHERE NOT EXISTS (... WITH (UPDLOCK, HOLDLOCK))` would lock the gap
-- after the task's last user and serialise every submission to the task for the length of its
-- (deliberately long) transaction. SQL Server reports each ignored key with informational
-- message 3604, not an error.
IF OBJECT_ID(N'queuetop.user_tasks', N'U') IS NULL
    CREATE TABLE queuetop.user_tasks (
        task_id     bigint NOT NULL CONSTRAINT user_tasks_task_id_fkey REFERENCES queuetop.tasks (id) ON DELETE CASCADE,
        user_id     bigint NOT NULL,
        status      nvarchar(32) NOT NULL CONSTRAINT user_tasks_status_default DEFAULT (N'PENDING'),
        answered_at datetime2(6) NULL,
        CONSTRAINT user_tasks_pkey PRIMARY KEY (task_id, user_id) WITH (IGNORE_DUP_KEY = ON)
    );
-- batch
IF OBJECT_ID(N'queuetop.task_status_deltas', N'U') IS NULL
    CREATE TABLE queuetop.task_status_deltas (
        id           bigint IDENTITY (1, 1) NOT NULL CONSTRAINT task_status_deltas_pkey PRIMARY KEY,
        task_id      bigint NOT NULL,
        status       nvarchar(32) NOT NULL,
        [count]      bigint NOT NULL,
        is_aggregate bit NOT NULL CONSTRAINT task_status_deltas_is_aggregate_default DEFAULT (0),
        created_at   datetime2(6) NOT NULL CONSTRAINT task_status_deltas_created_at_default DEFAULT (SYSUTCDATETIME())
    );
-- batch
IF NOT EXISTS (
    SELECT 1 FROM sys.indexes AS i
    WHERE i.object_id = OBJECT_ID(N'queuetop.task_status_deltas') AND i.name = N'task_status_deltas_task_idx'
)
    CREATE INDEX task_status_deltas_task_idx ON queuetop.task_status_deltas (task_id, id);
-- batch
-- PostgreSQL's partial index is a filtered index here. Like every filtered index, it requires
-- the sessions that write the table to run with the ANSI settings every ODBC driver sets by
-- default (QUOTED_IDENTIFIER, ANSI_NULLS, ANSI_PADDING, ANSI_WARNINGS and CONCAT_NULL_YIELDS_NULL
-- ON, NUMERIC_ROUNDABORT OFF); a session that turned one off gets error 1934 on INSERT.
IF NOT EXISTS (
    SELECT 1 FROM sys.indexes AS i
    WHERE i.object_id = OBJECT_ID(N'queuetop.task_status_deltas') AND i.name = N'task_status_deltas_pending_idx'
)
    CREATE INDEX task_status_deltas_pending_idx ON queuetop.task_status_deltas (task_id) WHERE is_aggregate = 0;
-- batch
IF OBJECT_ID(N'queuetop.task_status_naive', N'U') IS NULL
    CREATE TABLE queuetop.task_status_naive (
        task_id bigint NOT NULL,
        status  nvarchar(32) NOT NULL,
        [count] bigint NOT NULL CONSTRAINT task_status_naive_count_default DEFAULT (0),
        CONSTRAINT task_status_naive_pkey PRIMARY KEY (task_id, status)
    );
-- batch
IF OBJECT_ID(N'queuetop.compactor_runs', N'U') IS NULL
    CREATE TABLE queuetop.compactor_runs (
        name             nvarchar(128) NOT NULL CONSTRAINT compactor_runs_pkey PRIMARY KEY,
        last_run_at      datetime2(6) NULL,
        last_duration_ms float NULL,
        last_rows_folded bigint NULL,
        last_groups      int NULL,
        runs_total       bigint NOT NULL CONSTRAINT compactor_runs_runs_total_default DEFAULT (0)
    );
-- batch
-- Pattern 4, exactly-once processing with inbox/outbox and claims (design note 002). Each
-- endpoint has an inbox store (eo_inbox: only single-statement compare-and-swap operations,
-- never inside a business transaction, as if it were a remote blob store), an outbox (eo_outbox:
-- written in the same transaction as the business change), signals on a table queue
-- (`eo.<endpoint>`) and a payload store (eo_payloads: the claim-check).
IF OBJECT_ID(N'queuetop.eo_payloads', N'U') IS NULL
    CREATE TABLE queuetop.eo_payloads (
        id         uniqueidentifier NOT NULL CONSTRAINT eo_payloads_pkey PRIMARY KEY,
        body       nvarchar(max) NOT NULL,
        created_at datetime2(6) NOT NULL CONSTRAINT eo_payloads_created_at_default DEFAULT (SYSUTCDATETIME())
    );
-- batch
IF OBJECT_ID(N'queuetop.eo_inbox', N'U') IS NULL
    CREATE TABLE queuetop.eo_inbox (
        endpoint   nvarchar(128) NOT NULL,
        attempt_id uniqueidentifier NOT NULL,  -- fresh for every attempt to create the record
        message_id uniqueidentifier NOT NULL,
        claim_id   uniqueidentifier NULL,      -- set once, by compare-and-swap, to the claiming outbox record's
        created_at datetime2(6) NOT NULL CONSTRAINT eo_inbox_created_at_default DEFAULT (SYSUTCDATETIME()),
        CONSTRAINT eo_inbox_pkey PRIMARY KEY (endpoint, attempt_id)
    );
-- batch
IF OBJECT_ID(N'queuetop.eo_outbox', N'U') IS NULL
    CREATE TABLE queuetop.eo_outbox (
        endpoint   nvarchar(128) NOT NULL,
        message_id uniqueidentifier NOT NULL,  -- the incoming message (or the business operation) it stands for
        claim_id   uniqueidentifier NOT NULL,
        state      nvarchar(16) NOT NULL CONSTRAINT eo_outbox_state_default DEFAULT (N'claimed')
            CONSTRAINT eo_outbox_state_check CHECK (state IN (N'claimed', N'processed')),
        outgoing   nvarchar(max) NOT NULL CONSTRAINT eo_outbox_outgoing_default DEFAULT (N'[]')  -- [{message_id, destination, body}]
            CONSTRAINT eo_outbox_outgoing_check CHECK (ISJSON(outgoing) = 1),
        attempts   nvarchar(max) NULL          -- {message_id: attempt_id}, persisted before any signal is sent
            CONSTRAINT eo_outbox_attempts_check CHECK (attempts IS NULL OR ISJSON(attempts) = 1),
        incoming   bit NOT NULL CONSTRAINT eo_outbox_incoming_default DEFAULT (1),  -- 0: the endpoint's own operation (send)
        created_at datetime2(6) NOT NULL CONSTRAINT eo_outbox_created_at_default DEFAULT (SYSUTCDATETIME()),
        CONSTRAINT eo_outbox_pkey PRIMARY KEY (endpoint, message_id)
    );
-- batch
-- The business side effect of the scenario's endpoints: deliberately not idempotent (no key).
-- PostgreSQL keeps it as a heap with an index; a heap here keeps the pages its DELETEs empty
-- (they are released only under a table lock), so the index is the clustered one.
IF OBJECT_ID(N'queuetop.eo_effects', N'U') IS NULL
    CREATE TABLE queuetop.eo_effects (
        endpoint   nvarchar(128) NOT NULL,
        message_id uniqueidentifier NOT NULL,
        [at]       datetime2(6) NOT NULL CONSTRAINT eo_effects_at_default DEFAULT (SYSUTCDATETIME())
    );
-- batch
IF NOT EXISTS (
    SELECT 1 FROM sys.indexes AS i
    WHERE i.object_id = OBJECT_ID(N'queuetop.eo_effects') AND i.name = N'eo_effects_message_idx'
)
    CREATE CLUSTERED INDEX eo_effects_message_idx ON queuetop.eo_effects (endpoint, message_id);
-- batch
-- Pattern 3+4, the transactional outbox and its relay. A service writes its business change
-- and its outgoing messages (sends to a queue, or publishes to a topic) in one transaction;
-- the relay holding the lease moves them to the destination queues (a topic through its
-- recipient list, queuetop.subscriptions), fenced by its lease's token. The outbox is a queue
-- itself (outbox_take dequeues it with READPAST), so its index is chosen as the queue tables'
-- is: clustered on the ever-growing id, with OPTIMIZE_FOR_SEQUENTIAL_KEY (see create_queue_table
-- in queries.sql for the reasons).
IF OBJECT_ID(N'queuetop.outbox', N'U') IS NULL
    CREATE TABLE queuetop.outbox (
        id          bigint IDENTITY (1, 1) NOT NULL,
        kind        nvarchar(16) NOT NULL CONSTRAINT outbox_kind_check CHECK (kind IN (N'send', N'publish')),
        destination nvarchar(128) NOT NULL,   -- a queue (send) or a topic (publish)
        body        nvarchar(max) NOT NULL CONSTRAINT outbox_body_check CHECK (ISJSON(body) = 1),
        created_at  datetime2(6) NOT NULL CONSTRAINT outbox_created_at_default DEFAULT (SYSUTCDATETIME()),
        CONSTRAINT outbox_pkey PRIMARY KEY CLUSTERED (id) WITH (OPTIMIZE_FOR_SEQUENTIAL_KEY = ON)
    );
-- batch
IF OBJECT_ID(N'queuetop.subscriptions', N'U') IS NULL
    CREATE TABLE queuetop.subscriptions (
        topic   nvarchar(128) NOT NULL,
        [queue] nvarchar(128) NOT NULL,
        CONSTRAINT subscriptions_pkey PRIMARY KEY (topic, [queue])
    );
-- batch
-- Last, so that a schema whose installation stopped half-way does not claim to be complete.
MERGE queuetop.meta WITH (HOLDLOCK) AS m
USING (SELECT N'schema_version' AS [key], N'1' AS [value]) AS s
ON m.[key] = s.[key]
WHEN MATCHED THEN UPDATE SET [value] = s.[value]
WHEN NOT MATCHED THEN INSERT ([key], [value]) VALUES (s.[key], s.[value]);
