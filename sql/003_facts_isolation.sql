-- agentmem schema, migration 003: row-level security keyed on agentmem.user_id, and
-- what durable facts need.
--
-- Row-level security. Every base table of this schema with a user_id column gets
-- policies comparing user_id with the transaction setting agentmem.user_id, which
-- agentmem sets at the start of every user-scoped transaction (memory.store.db). The table
-- owner (the role that runs migrations) bypasses them; they apply to the non-owner
-- role that memory.store.isolation.create_app_role creates for applications. Rows whose
-- user_id is NULL in a table where it may be NULL (workflow_memory) are shared:
-- readable and countable (UPDATE) by every user, insertable and deletable by none
-- through the app role. Tables without user_id (toolbox_memory: tools of a
-- deployment, no user data) are not under row-level security.
--
-- The work is done by agentmem_enable_row_security(), which is idempotent and
-- discovers the tables from the catalog: a later migration that adds a table with a
-- user_id column ends with SELECT agentmem_enable_row_security(); and
-- create_app_role() calls it again, so no table is left out.
-- (psycopg sql.SQL template: no literal braces in this file.)

CREATE FUNCTION agentmem_enable_row_security() RETURNS integer
LANGUAGE plpgsql AS $$
DECLARE
    t record;
    n integer := 0;
    me text := 'current_setting(''agentmem.user_id'', true)';
BEGIN
    FOR t IN
        SELECT c.oid::regclass AS tbl, NOT a.attnotnull AS shared_rows
        FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped
        WHERE c.relnamespace = current_schema()::regnamespace
          AND c.relkind IN ('r', 'p') AND NOT c.relispartition
    LOOP
        EXECUTE format('ALTER TABLE %s ENABLE ROW LEVEL SECURITY', t.tbl);
        EXECUTE format('DROP POLICY IF EXISTS agentmem_own_rows ON %s', t.tbl);
        EXECUTE format('DROP POLICY IF EXISTS agentmem_read ON %s', t.tbl);
        EXECUTE format('DROP POLICY IF EXISTS agentmem_insert ON %s', t.tbl);
        EXECUTE format('DROP POLICY IF EXISTS agentmem_update ON %s', t.tbl);
        EXECUTE format('DROP POLICY IF EXISTS agentmem_delete ON %s', t.tbl);
        IF t.shared_rows THEN
            EXECUTE format('CREATE POLICY agentmem_read ON %s FOR SELECT USING (user_id = %s OR user_id IS NULL)',
                           t.tbl, me);
            EXECUTE format('CREATE POLICY agentmem_insert ON %s FOR INSERT WITH CHECK (user_id = %s)', t.tbl, me);
            EXECUTE format('CREATE POLICY agentmem_update ON %s FOR UPDATE USING (user_id = %s OR user_id IS NULL)'
                           ' WITH CHECK (user_id = %s OR user_id IS NULL)', t.tbl, me, me);
            EXECUTE format('CREATE POLICY agentmem_delete ON %s FOR DELETE USING (user_id = %s)', t.tbl, me);
        ELSE
            EXECUTE format('CREATE POLICY agentmem_own_rows ON %s USING (user_id = %s) WITH CHECK (user_id = %s)',
                           t.tbl, me, me);
        END IF;
        n := n + 1;
    END LOOP;
    RETURN n;
END
$$;

SELECT agentmem_enable_row_security();

-- Facts: the active set of one user is read on every remember (cap, near-duplicates)
-- and rendered at the start of every conversation; fact_memory_active covers it.
-- Supersession chains are walked by superseded_by.
CREATE INDEX fact_memory_superseded_by ON fact_memory (superseded_by) WHERE superseded_by IS NOT NULL;

-- Retention: purge scans expired rows per table.
CREATE INDEX conversational_memory_expires ON conversational_memory (expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX tool_log_expires ON tool_log (expires_at) WHERE expires_at IS NOT NULL;
