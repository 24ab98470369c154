-- Rings: used = tail position - head position, two primary-key rows per ring; no cell is read.

-- name: rings
SELECT r.name, r.capacity, (t.pos - h.pos) AS used, r.refused_total
FROM queuetop.rings r
JOIN queuetop.ring_tails t ON t.ring_id = r.id
JOIN queuetop.ring_heads h ON h.ring_id = r.id
ORDER BY r.name;
