-- queuetop reference schema, PostgreSQL. Idempotent: `queuetop engine init` runs it whole,
-- under an advisory lock, as many times as it likes. Per-queue tables are created on demand
-- from queries.sql (create_queue_table) and listed in queuetop.queues.

CREATE SCHEMA IF NOT EXISTS queuetop;

CREATE TABLE IF NOT EXISTS queuetop.meta (
    key   text PRIMARY KEY,
    value text NOT NULL
);

-- The registry of table queues: the probes discover queues here.
CREATE TABLE IF NOT EXISTS queuetop.queues (
    name       text PRIMARY KEY,
    table_name text NOT NULL UNIQUE,
    created_at timestamptz NOT NULL DEFAULT now()
);

-- Messages that failed max_attempts times, with their last error. Rare by nature, so one table
-- for all queues is enough.
CREATE TABLE IF NOT EXISTS queuetop.dead_letters (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    queue       text NOT NULL,
    message_id  bigint NOT NULL,
    enqueued_at timestamptz NOT NULL,
    attempts    integer NOT NULL,
    body        json NOT NULL,
    last_error  text,
    died_at     timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS dead_letters_queue_idx ON queuetop.dead_letters (queue, id);

-- Wakes waiting consumers: one notification per INSERT statement (not per row), whoever the
-- producer is, so a plain INSERT from an application wakes workers too.
CREATE OR REPLACE FUNCTION queuetop.notify_enqueue() RETURNS trigger
LANGUAGE plpgsql AS $$
BEGIN
    PERFORM pg_notify('queuetop_enqueue', TG_ARGV[0]);
    RETURN NULL;
END
$$;

-- Ring buffers: `capacity` cells created once, then only updated. Writers serialise on the
-- tail row, readers on the head row, so committed cells are always the contiguous range
-- [head, tail) and a rolled-back writer or reader leaves no hole behind.
CREATE TABLE IF NOT EXISTS queuetop.rings (
    id            integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    name          text NOT NULL UNIQUE,
    capacity      integer NOT NULL CHECK (capacity > 0),
    refused_total bigint NOT NULL DEFAULT 0,
    created_at    timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS queuetop.ring_tails (
    ring_id integer PRIMARY KEY REFERENCES queuetop.rings (id) ON DELETE CASCADE,
    pos     bigint NOT NULL DEFAULT 0          -- next position to write
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS queuetop.ring_heads (
    ring_id integer PRIMARY KEY REFERENCES queuetop.rings (id) ON DELETE CASCADE,
    pos     bigint NOT NULL DEFAULT 0          -- next position to read
) WITH (fillfactor = 50);
CREATE TABLE IF NOT EXISTS queuetop.ring_cells (
    ring_id integer NOT NULL REFERENCES queuetop.rings (id) ON DELETE CASCADE,
    cell    integer NOT NULL,                  -- 0 .. capacity-1; position p lives in cell p % capacity
    is_full boolean NOT NULL DEFAULT false,
    seq     bigint,                            -- the position last written here
    put_at  timestamptz,
    body    json,                              -- json keeps the text exactly as it was put
    PRIMARY KEY (ring_id, cell)
) WITH (fillfactor = 50);                      -- room for HOT updates: no index churn

-- Put all of p_bodies or nothing. Returns the first position written, or NULL when the ring
-- lacks room (the refusal is counted). Readers only ever empty cells, so free cells seen here
-- stay free while we hold the tail lock.
CREATE OR REPLACE FUNCTION queuetop.ring_put(p_ring text, p_bodies json[]) RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_id  integer;
    v_cap integer;
    v_pos bigint;
    v_n   integer := coalesce(cardinality(p_bodies), 0);
    v_free integer;
BEGIN
    SELECT r.id, r.capacity, t.pos INTO v_id, v_cap, v_pos
    FROM queuetop.rings r JOIN queuetop.ring_tails t ON t.ring_id = r.id
    WHERE r.name = p_ring
    FOR UPDATE OF t;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown ring %', p_ring USING ERRCODE = 'QT404';
    END IF;
    IF v_n = 0 THEN
        RETURN v_pos;
    END IF;
    IF v_n <= v_cap THEN
        SELECT count(*) INTO v_free FROM queuetop.ring_cells
        WHERE ring_id = v_id AND NOT is_full
          AND cell IN (SELECT (p % v_cap)::integer FROM generate_series(v_pos, v_pos + v_n - 1) AS p);
    ELSE
        v_free := 0;
    END IF;
    IF v_free < v_n THEN
        UPDATE queuetop.rings SET refused_total = refused_total + v_n WHERE id = v_id;
        RETURN NULL;
    END IF;
    UPDATE queuetop.ring_cells c
    SET is_full = true, seq = v_pos + b.ord - 1, put_at = now(), body = b.body
    FROM unnest(p_bodies) WITH ORDINALITY AS b(body, ord)
    WHERE c.ring_id = v_id AND c.cell = ((v_pos + b.ord - 1) % v_cap)::integer;
    UPDATE queuetop.ring_tails SET pos = v_pos + v_n WHERE ring_id = v_id;
    RETURN v_pos;
END
$$;

-- Take up to p_max cells in order from the head. The body stays in the cell (it is
-- overwritten by the next put) so the update does not have to rewrite it.
CREATE OR REPLACE FUNCTION queuetop.ring_take(p_ring text, p_max integer)
RETURNS TABLE (seq bigint, put_at timestamptz, body json)
LANGUAGE plpgsql AS $$
DECLARE
    v_id  integer;
    v_cap integer;
    v_pos bigint;
    v_n   bigint;
BEGIN
    SELECT r.id, r.capacity, h.pos INTO v_id, v_cap, v_pos
    FROM queuetop.rings r JOIN queuetop.ring_heads h ON h.ring_id = r.id
    WHERE r.name = p_ring
    FOR UPDATE OF h;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'unknown ring %', p_ring USING ERRCODE = 'QT404';
    END IF;
    RETURN QUERY
        WITH taken AS (
            UPDATE queuetop.ring_cells c SET is_full = false
            FROM generate_series(v_pos, v_pos + least(greatest(p_max, 0), v_cap) - 1) AS p(pos)
            WHERE c.ring_id = v_id AND c.cell = (p.pos % v_cap)::integer
              AND c.is_full AND c.seq = p.pos
            RETURNING c.seq, c.put_at, c.body
        )
        SELECT t.seq, t.put_at, t.body FROM taken t ORDER BY t.seq;
    GET DIAGNOSTICS v_n = ROW_COUNT;
    IF v_n > 0 THEN
        UPDATE queuetop.ring_heads SET pos = v_pos + v_n WHERE ring_id = v_id;
    END IF;
END
$$;

-- Leases: compare-and-swap on the database clock; the fencing token grows by one each time the
-- lease changes hands.
CREATE TABLE IF NOT EXISTS queuetop.leases (
    name        text PRIMARY KEY,
    holder      text,
    token       bigint NOT NULL DEFAULT 0,
    acquired_at timestamptz,
    expires_at  timestamptz,
    released_at timestamptz
);


-- Pattern 5, the aggregation compactor. Writers only INSERT status deltas (+1 PENDING when a
-- task reaches a user, -1 PENDING / +1 DONE when the user answers); readers always read
-- SUM(count) GROUP BY status; a single compacting agent folds a group's delta rows into one
-- aggregate row per status. task_status_naive is the hot-row design the scenario contrasts.
CREATE TABLE IF NOT EXISTS queuetop.tasks (
    id         bigint GENERATED BY DEFAULT AS IDENTITY PRIMARY KEY,
    title      text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS queuetop.user_tasks (
    task_id     bigint NOT NULL REFERENCES queuetop.tasks (id) ON DELETE CASCADE,
    user_id     bigint NOT NULL,
    status      text NOT NULL DEFAULT 'PENDING',
    answered_at timestamptz,
    PRIMARY KEY (task_id, user_id)
);
CREATE TABLE IF NOT EXISTS queuetop.task_status_deltas (
    id           bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    task_id      bigint NOT NULL,
    status       text NOT NULL,
    count        bigint NOT NULL,
    is_aggregate boolean NOT NULL DEFAULT false,
    created_at   timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS task_status_deltas_task_idx ON queuetop.task_status_deltas (task_id, id);
CREATE INDEX IF NOT EXISTS task_status_deltas_pending_idx ON queuetop.task_status_deltas (task_id)
    WHERE NOT is_aggregate;
CREATE TABLE IF NOT EXISTS queuetop.task_status_naive (
    task_id bigint NOT NULL,
    status  text NOT NULL,
    count   bigint NOT NULL DEFAULT 0,
    PRIMARY KEY (task_id, status)
);
CREATE TABLE IF NOT EXISTS queuetop.compactor_runs (
    name             text PRIMARY KEY,
    last_run_at      timestamptz,
    last_duration_ms double precision,
    last_rows_folded bigint,
    last_groups      integer,
    runs_total       bigint NOT NULL DEFAULT 0
);

INSERT INTO queuetop.meta (key, value) VALUES ('schema_version', '1')
ON CONFLICT (key) DO UPDATE SET value = excluded.value;

-- Pattern 4, exactly-once processing with inbox/outbox and claims (design note 002). Each
-- endpoint has an inbox store (eo_inbox: only single-statement compare-and-swap operations,
-- never inside a business transaction, as if it were a remote blob store), an outbox (eo_outbox:
-- written in the same transaction as the business change), signals on a table queue
-- (`eo.<endpoint>`) and a payload store (eo_payloads: the claim-check).
CREATE TABLE IF NOT EXISTS queuetop.eo_payloads (
    id         uuid PRIMARY KEY,
    body       text NOT NULL,
    created_at timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS queuetop.eo_inbox (
    endpoint   text NOT NULL,
    attempt_id uuid NOT NULL,   -- fresh for every attempt to create the record
    message_id uuid NOT NULL,
    claim_id   uuid,            -- set once, by compare-and-swap, to the claiming outbox record's
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint, attempt_id)
);
CREATE TABLE IF NOT EXISTS queuetop.eo_outbox (
    endpoint   text NOT NULL,
    message_id uuid NOT NULL,   -- the incoming message (or the business operation) it stands for
    claim_id   uuid NOT NULL,
    state      text NOT NULL DEFAULT 'claimed' CHECK (state IN ('claimed', 'processed')),
    outgoing   jsonb NOT NULL DEFAULT '[]',  -- [{message_id, destination, body}]
    attempts   jsonb,           -- {message_id: attempt_id}, persisted before any signal is sent
    incoming   boolean NOT NULL DEFAULT true,  -- false: the endpoint's own operation (send)
    created_at timestamptz NOT NULL DEFAULT now(),
    PRIMARY KEY (endpoint, message_id)
);
ALTER TABLE queuetop.eo_outbox ADD COLUMN IF NOT EXISTS incoming boolean NOT NULL DEFAULT true;
-- The business side effect of the scenario's endpoints: deliberately not idempotent (no key).
CREATE TABLE IF NOT EXISTS queuetop.eo_effects (
    endpoint   text NOT NULL,
    message_id uuid NOT NULL,
    at         timestamptz NOT NULL DEFAULT now()
);
CREATE INDEX IF NOT EXISTS eo_effects_message_idx ON queuetop.eo_effects (endpoint, message_id);

-- Pattern 3+4, the transactional outbox and its relay. A service writes its business change
-- and its outgoing messages (sends to a queue, or publishes to a topic) in one transaction;
-- the relay holding the lease moves them to the destination queues (a topic through its
-- recipient list, queuetop.subscriptions), fenced by its lease's token.
CREATE TABLE IF NOT EXISTS queuetop.outbox (
    id          bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('send', 'publish')),
    destination text NOT NULL,   -- a queue (send) or a topic (publish)
    body        json NOT NULL,
    created_at  timestamptz NOT NULL DEFAULT now()
);
CREATE TABLE IF NOT EXISTS queuetop.subscriptions (
    topic text NOT NULL,
    queue text NOT NULL,
    PRIMARY KEY (topic, queue)
);
