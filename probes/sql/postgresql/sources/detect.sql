-- Which queue libraries are installed, and where: the one catalog statement of a probe cycle for
-- every source together (probes/sources/base.py, find_installs).
--
-- Each library source declares a signature (QueueSource.signature): parts that must all be found
-- in one schema, each a relation (`procrastinate_jobs`), a relation's column (`job.start_after`)
-- or a function (`add_job()`), a part with alternatives matching any of them
-- (`job.start_after|job.startafter`). The Python side splits the parts into the parallel arrays
-- below (one row per alternative; `part_id` numbers the parts, alternatives share it). Extras
-- are parts reported when found, never required (River's `river_queue`).
--
-- Catalog reads only, through the catalog's own indexes (pg_class by relname, pg_proc by proname,
-- pg_attribute by (attrelid, attname)): its cost grows with the number of relations of those
-- names, not with any table's rows. The catalog shows every schema's objects to every role: an
-- install in a schema the role has no USAGE on is found too, marked not `usable` (nothing in it
-- can be read: the probe says so rather than show nothing); the engine's own schema (queuetop)
-- and the system's are never a library's.
-- Schema names are returned as the catalog has them: the code quotes them (sql.Identifier).

-- name: installs
-- One row per (source, schema) whose signature is complete: the extras found there, the
-- extensions whose objects live in that schema (PGMQ's version, when it is installed as one), and
-- whether the role may use that schema.
-- Then one row per relation name in `tables` (what the other sources' detect() asked for the
-- last time, as to_regclass reads a name), with whether it is there: the engine's own tables.
WITH wanted AS (
    SELECT *, CASE WHEN function_name IS NULL THEN 'r' ELSE 'f' END AS kind,
           coalesce(relation, function_name) AS object_name
    FROM unnest(%(sources)s::text[], %(parts)s::text[], %(part_ids)s::integer[], %(required)s::boolean[],
                %(relations)s::name[], %(columns)s::name[], %(functions)s::name[])
         AS w(source, part, part_id, required, relation, column_name, function_name)
), needed AS (
    -- Per library: how many parts it requires, and how many relations and functions they name.
    SELECT source, count(DISTINCT part_id) AS parts, count(DISTINCT kind || object_name) AS objects
    FROM wanted WHERE required GROUP BY source
), objects AS (
    -- Every relation and function of a name some signature has, in whichever schema.
    SELECT 'r' AS kind, c.relname AS name, c.oid, c.relnamespace AS nsp
    FROM pg_class c
    WHERE c.relname IN (SELECT relation FROM wanted) AND c.relkind IN ('r', 'p', 'v', 'm', 'f')
    UNION
    SELECT 'f', p.proname, 0::oid, p.pronamespace
    FROM pg_proc p
    WHERE p.proname IN (SELECT function_name FROM wanted)
), candidates AS (
    -- The schemas the role may use that hold every relation and function a library requires, by
    -- name: only there are columns looked at (a schema per tenant, each with a table called
    -- `job` and one called `version`, costs two name lookups each, no more).
    SELECT r.source, o.nsp
    FROM (SELECT DISTINCT source, kind, object_name FROM wanted WHERE required) r
    JOIN objects o ON o.kind = r.kind AND o.name = r.object_name
    JOIN needed USING (source)
    JOIN pg_namespace n ON n.oid = o.nsp
    WHERE n.nspname NOT IN ('queuetop', 'pg_catalog', 'information_schema')
      AND n.nspname !~ '^pg_(toast|temp_)'
    GROUP BY r.source, o.nsp, needed.objects
    HAVING count(*) = needed.objects
), found AS (
    -- There, every part that is whole (a column: one probe of pg_attribute's (attrelid, attname)
    -- index).
    SELECT w.source, w.part, w.part_id, w.required, k.nsp
    FROM candidates k
    JOIN wanted w ON w.source = k.source
    JOIN objects o ON o.nsp = k.nsp AND o.kind = w.kind AND o.name = w.object_name
    WHERE w.column_name IS NULL
       OR EXISTS (SELECT FROM pg_attribute a WHERE a.attrelid = o.oid AND a.attname = w.column_name AND NOT a.attisdropped)
), complete AS (
    SELECT f.source, f.nsp, array_agg(DISTINCT f.part) FILTER (WHERE NOT f.required) AS extras
    FROM found f
    JOIN needed USING (source)
    GROUP BY f.source, f.nsp, needed.parts
    HAVING count(DISTINCT f.part_id) FILTER (WHERE f.required) = needed.parts
)
SELECT c.source, n.nspname::text AS schema, coalesce(c.extras, '{}'::text[]) AS extras,
       (SELECT coalesce(jsonb_object_agg(e.extname, e.extversion), '{}'::jsonb)
        FROM pg_extension e WHERE e.extnamespace = n.oid) AS extensions,
       has_schema_privilege(c.nsp, 'USAGE') AS usable, NULL::text AS relation, NULL::boolean AS present
FROM complete c
JOIN pg_namespace n ON n.oid = c.nsp
UNION ALL
SELECT NULL, NULL, NULL, NULL, NULL, t.name, to_regclass(t.name) IS NOT NULL
FROM unnest(%(tables)s::text[]) AS t(name);
