-- agentmem schema, migration 007: agentmem acts on its own tables only, and shared
-- rows are written by the schema owner only.
--
-- 1. agentmem_tables lists the tables agentmem owns in this schema, each with its
--    kind. Row-level security, forget_user and retention act on these tables and on
--    nothing else that lives in the schema (with AGENTMEM_SCHEMA=public, another
--    application's public.orders may well have a user_id column). A migration that
--    adds a table registers it here in the same file.
--      user         per-user rows keyed by user_id (NOT NULL): row-level security,
--                   forget_user, retention; the app role has DML on its own rows.
--      shared       rows of the whole deployment, no user_id: the app role reads
--                   them; only the schema owner (or a tool registrar role, for
--                   toolbox_memory) writes them.
--      bookkeeping  the migration runner's tables: read-only for the app role.
-- 2. Shared workflows move out of workflow_memory (user_id NULL) into
--    shared_workflow_memory, which has no user_id (a Citus reference table later).
--    workflow_memory.user_id becomes NOT NULL, so every row there belongs to one user
--    and is under the plain own-rows policy: the app role can no longer rewrite a
--    shared row, publish its own (SET user_id = NULL), or re-own and delete one. It
--    counts uses of a shared workflow only through
--    agentmem_record_shared_workflow_use (SECURITY DEFINER: +1 and nothing else).
-- 3. agentmem_enable_row_security() is replaced: it reads the registry instead of
--    every table of the schema with a user_id column. Policies migration 003 put on
--    tables that are not agentmem's are removed again (and row-level security
--    disabled there when no other policy remains).
-- 4. The app role's rights are brought in line on upgrade: it keeps SELECT on
--    toolbox_memory but loses INSERT/UPDATE/DELETE/TRUNCATE, and gets SELECT on the
--    new shared table and EXECUTE on the counter function.
-- 5. table_sizes lists agentmem's tables only; memory_growth counts shared workflows.
-- (psycopg sql.SQL template: no literal braces in this file.)

CREATE TABLE agentmem_tables (
    table_name  text PRIMARY KEY,
    kind        text NOT NULL CHECK (kind IN ('user', 'shared', 'bookkeeping')),
    added_in    integer NOT NULL
);
INSERT INTO agentmem_tables (table_name, kind, added_in) VALUES
    ('summary_memory', 'user', 1),
    ('conversational_memory', 'user', 1),
    ('workflow_memory', 'user', 1),
    ('fact_memory', 'user', 1),
    ('knowledge_memory', 'user', 1),
    ('entity_memory', 'user', 1),
    ('tool_log', 'user', 1),
    ('conversational_context', 'user', 4),
    ('toolbox_memory', 'shared', 1),
    ('shared_workflow_memory', 'shared', 7),
    ('schema_migrations', 'bookkeeping', 1),
    ('agentmem_meta', 'bookkeeping', 1),
    ('agentmem_tables', 'bookkeeping', 7);

CREATE TABLE shared_workflow_memory (
    id              uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    name            text NOT NULL,
    description     text NOT NULL,
    query           text NOT NULL DEFAULT '',
    steps           jsonb NOT NULL DEFAULT jsonb_build_array(),
    outcome         text NOT NULL DEFAULT '',
    success_count   integer NOT NULL DEFAULT 1,
    use_count       integer NOT NULL DEFAULT 0,
    metadata        jsonb NOT NULL DEFAULT jsonb_build_object(),
    published_from  uuid,                          -- the user's workflow it was copied from, if any
    created_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at      timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_used_at    timestamptz,
    embedding       vector({dim}),
    search_tsv      tsvector GENERATED ALWAYS AS (to_tsvector('english', name || ' ' || description || ' ' || query)) STORED
);
CREATE INDEX shared_workflow_memory_embedding ON shared_workflow_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX shared_workflow_memory_tsv ON shared_workflow_memory USING gin (search_tsv) WITH (fastupdate = off);

INSERT INTO shared_workflow_memory (id, name, description, query, steps, outcome, success_count, use_count,
                                    metadata, created_at, updated_at, last_used_at, embedding)
SELECT id, name, description, query, steps, outcome, success_count, use_count,
       metadata, created_at, updated_at, last_used_at, embedding
FROM workflow_memory WHERE user_id IS NULL;
DELETE FROM workflow_memory WHERE user_id IS NULL;
ALTER TABLE workflow_memory ALTER COLUMN user_id SET NOT NULL;

CREATE FUNCTION agentmem_record_shared_workflow_use(workflow_id uuid, success boolean) RETURNS boolean
LANGUAGE sql SECURITY DEFINER AS $$
    UPDATE shared_workflow_memory
    SET use_count = use_count + 1,
        success_count = success_count + CASE WHEN success THEN 1 ELSE 0 END,
        last_used_at = clock_timestamp()
    WHERE id = workflow_id
    RETURNING true;
$$;
-- A SECURITY DEFINER function must not resolve names through the caller's search_path
-- (pg_temp last, so a temporary table cannot stand in for ours).
DO $$
BEGIN
    EXECUTE format('ALTER FUNCTION agentmem_record_shared_workflow_use(uuid, boolean) SET search_path = %I, pg_temp',
                   current_schema());
END
$$;
REVOKE EXECUTE ON FUNCTION agentmem_record_shared_workflow_use(uuid, boolean) FROM PUBLIC;

CREATE OR REPLACE FUNCTION agentmem_enable_row_security() RETURNS integer
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    t record;
    p text;
    n integer := 0;
    me text := 'current_setting(''agentmem.user_id'', true)';
BEGIN
    FOR t IN
        SELECT r.table_name, to_regclass(format('%I.%I', current_schema(), r.table_name)) AS tbl
        FROM agentmem_tables r WHERE r.kind = 'user' ORDER BY r.table_name
    LOOP
        IF t.tbl IS NULL THEN
            RAISE EXCEPTION 'agentmem_tables lists %, which does not exist in schema %', t.table_name, current_schema();
        END IF;
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t.tbl);
        FOREACH p IN ARRAY ARRAY['agentmem_own_rows', 'agentmem_read', 'agentmem_insert', 'agentmem_update',
                                 'agentmem_delete'] LOOP
            EXECUTE format('DROP POLICY IF EXISTS %I ON %s', p, t.tbl);
        END LOOP;
        EXECUTE format('CREATE POLICY agentmem_own_rows ON %s USING (user_id = %s) WITH CHECK (user_id = %s)',
                       t.tbl, me, me);
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;
REVOKE EXECUTE ON FUNCTION agentmem_enable_row_security() FROM PUBLIC;

SELECT agentmem_enable_row_security();

-- Undo what migration 003 did to tables that are not agentmem's.
DO $$
DECLARE
    t record;
    p text;
BEGIN
    FOR t IN
        SELECT c.oid, c.oid::regclass AS tbl FROM pg_class c
        WHERE c.relnamespace = (SELECT oid FROM pg_namespace WHERE nspname = current_schema())
          AND c.relkind IN ('r', 'p')
          AND c.relname NOT IN (SELECT table_name FROM agentmem_tables)
          AND EXISTS (SELECT 1 FROM pg_policy pp WHERE pp.polrelid = c.oid
                      AND pp.polname IN ('agentmem_own_rows', 'agentmem_read', 'agentmem_insert',
                                         'agentmem_update', 'agentmem_delete'))
    LOOP
        BEGIN
            FOREACH p IN ARRAY ARRAY['agentmem_own_rows', 'agentmem_read', 'agentmem_insert', 'agentmem_update',
                                     'agentmem_delete'] LOOP
                EXECUTE format('DROP POLICY IF EXISTS %I ON %s', p, t.tbl);
            END LOOP;
            IF NOT EXISTS (SELECT 1 FROM pg_policy pp WHERE pp.polrelid = t.oid) THEN
                EXECUTE format('ALTER TABLE %s DISABLE ROW LEVEL SECURITY', t.tbl);
            END IF;
        EXCEPTION WHEN insufficient_privilege THEN
            RAISE WARNING 'agentmem: could not remove its row-level security policies from %: %', t.tbl, SQLERRM;
        END;
    END LOOP;
END
$$;

-- Roles already granted rights by create_app_role (before this migration): shared
-- tables become read-only for them, and they may read the new one and count uses.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'toolbox_memory'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type IN ('INSERT', 'UPDATE', 'DELETE', 'TRUNCATE')
    LOOP
        EXECUTE format('REVOKE INSERT, UPDATE, DELETE, TRUNCATE ON toolbox_memory FROM %s', r.grantee);
    END LOOP;
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'workflow_memory'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
    LOOP
        EXECUTE format('GRANT SELECT ON shared_workflow_memory TO %s', r.grantee);
        EXECUTE format('GRANT SELECT ON agentmem_tables TO %s', r.grantee);
        EXECUTE format('GRANT EXECUTE ON FUNCTION agentmem_record_shared_workflow_use(uuid, boolean) TO %s',
                       r.grantee);
    END LOOP;
END
$$;

CREATE OR REPLACE VIEW table_sizes AS
WITH t AS (
    SELECT c.oid, c.relname, c.reltoastrelid,
           EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'created_at'
                   AND NOT a.attisdropped) AS dated
    FROM pg_class c
    JOIN agentmem_tables r ON r.table_name = c.relname
    WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'conversational_memory'::regclass)
      AND c.relkind IN ('r', 'p') AND NOT c.relispartition
)
SELECT t.relname AS table_name,
       n.row_count, n.rows_last_day, n.rows_last_week,
       pg_total_relation_size(t.oid) AS total_bytes,
       pg_relation_size(t.oid) AS table_bytes,
       pg_indexes_size(t.oid) AS index_bytes,
       CASE WHEN t.reltoastrelid = 0 THEN 0 ELSE pg_total_relation_size(t.reltoastrelid) END AS toast_bytes,
       pg_size_pretty(pg_total_relation_size(t.oid)) AS total_size,
       s.n_live_tup AS est_live_rows,
       s.n_dead_tup AS dead_rows,
       greatest(s.last_vacuum, s.last_autovacuum) AS last_vacuum,
       greatest(s.last_analyze, s.last_autoanalyze) AS last_analyze
FROM t
CROSS JOIN LATERAL agentmem_row_counts(t.oid::regclass, t.dated) n
LEFT JOIN pg_stat_all_tables s ON s.relid = t.oid;

CREATE OR REPLACE VIEW memory_growth AS
SELECT day, table_name, rows_added FROM (
    SELECT date_trunc('day', created_at) AS day, 'conversational_memory' AS table_name, count(*) AS rows_added
    FROM conversational_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'summary_memory', count(*) FROM summary_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'fact_memory', count(*) FROM fact_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'knowledge_memory', count(*) FROM knowledge_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'workflow_memory', count(*) FROM workflow_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'shared_workflow_memory', count(*) FROM shared_workflow_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', first_seen), 'entity_memory', count(*) FROM entity_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'toolbox_memory', count(*) FROM toolbox_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'tool_log', count(*) FROM tool_log GROUP BY 1
) g;
