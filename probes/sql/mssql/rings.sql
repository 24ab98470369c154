-- Rings: used = tail position - head position, two primary-key rows per ring; no cell is read.
-- (SQL Server; the same statement, parameters and columns as postgresql/rings.sql.)

-- name: rings
-- A plain read-committed read. Under READ_COMMITTED_SNAPSHOT it reads the committed positions
-- and never waits; under locking read committed a put or take in progress holds its ring's tail
-- or head row until it commits, and this read waits for it at most the session's LOCK_TIMEOUT
-- (then error 1222: the probe reports a lock timeout). It does not skip the row (READPAST would
-- drop the ring from the panel) nor read it uncommitted.
SELECT r.name, r.capacity, (t.pos - h.pos) AS used, r.refused_total
FROM queuetop.rings AS r
JOIN queuetop.ring_tails AS t ON t.ring_id = r.id
JOIN queuetop.ring_heads AS h ON h.ring_id = r.id
ORDER BY r.name;
