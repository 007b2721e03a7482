-- agentmem on Citus: distribute a migrated agentmem schema across a Citus cluster.
-- Not a numbered migration (the runner never applies it): run it once on the Citus
-- coordinator, after `agentmem init`, and again after an upgrade that adds a table.
--
--   PGOPTIONS='-c search_path=agent_memory' psql -v ON_ERROR_STOP=1 -f sql/citus_distribute.sql
--
-- or `agentmem distribute`, which runs this very file (and first checks the schema
-- against Citus's rules: memory/store/distribution.py). Connect as the schema owner.
-- Dry run (lists the plan, changes nothing, works without Citus): add
-- `-c agentmem.distribute_dry_run=on` to PGOPTIONS, or `agentmem distribute --dry-run`.
--
-- What it does, in one transaction (all of it or nothing):
--   1. refuses, with nothing changed, when the citus extension is not installed;
--   2. tables without user_id (toolbox_memory, the bookkeeping tables) become
--      reference tables: one copy on every node, joinable and readable everywhere;
--   3. tables with user_id become hash-distributed on user_id, all in one colocation
--      group (the first one anchors it), so a user's messages, summaries, facts and
--      windows share a shard and every per-user statement runs on one node;
--   4. order: reference tables first, then each table after the tables its foreign
--      keys point to (Citus needs the referenced table distributed first);
--   5. tables already distributed are skipped, so it can be run again.
-- The per-user tables carry triggers (the search window of migrations 004/008), so
-- citus.enable_unsafe_triggers is switched on for the transaction; set it for the
-- database too (ALTER DATABASE ... SET citus.enable_unsafe_triggers = on), or later
-- trigger DDL is refused. See README "Scaling out".

-- The plan, from the catalog: one row per table of the current schema, in order.
CREATE OR REPLACE FUNCTION pg_temp.agentmem_distribution_plan()
RETURNS TABLE (step integer, table_name name, kind text, colocate_with name)
LANGUAGE plpgsql AS $plan$
DECLARE
    s oid := current_schema()::regnamespace;
    remaining name[];
    per_user name[];
    pick name;
    anchor name;
    n integer := 0;
BEGIN
    SELECT coalesce(array_agg(c.relname ORDER BY c.relname), ARRAY[]::name[]) INTO remaining
    FROM pg_class c WHERE c.relnamespace = s AND c.relkind IN ('r', 'p') AND NOT c.relispartition;
    SELECT coalesce(array_agg(c.relname), ARRAY[]::name[]) INTO per_user
    FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'user_id' AND NOT a.attisdropped
    WHERE c.relnamespace = s AND c.relkind IN ('r', 'p') AND NOT c.relispartition;
    -- Since migration 007 agentmem's tables are registered with their kind: only those
    -- are planned (another application's tables in the same schema are left alone).
    IF to_regclass(format('%I.agentmem_tables', current_schema())) IS NOT NULL THEN
        EXECUTE format('SELECT coalesce(array_agg(table_name::name ORDER BY table_name), ARRAY[]::name[]),'
                       ' coalesce(array_agg(table_name::name) FILTER (WHERE kind = %L), ARRAY[]::name[])'
                       ' FROM %I.agentmem_tables WHERE table_name::name = ANY ($1)', 'user', current_schema())
            INTO remaining, per_user USING remaining;
    END IF;
    WHILE cardinality(remaining) > 0 LOOP
        -- Next: a reference table before any distributed one, and never a table whose
        -- foreign keys point at a table not placed yet (self-references aside); by name.
        SELECT r INTO pick FROM unnest(remaining) AS r
        WHERE NOT EXISTS (
            SELECT 1 FROM pg_constraint k
            JOIN pg_class child ON child.oid = k.conrelid JOIN pg_class parent ON parent.oid = k.confrelid
            WHERE k.contype = 'f' AND k.conparentid = 0 AND child.relname = r AND child.relnamespace = s
              AND parent.relnamespace = s AND parent.relname <> r AND parent.relname = ANY (remaining))
        ORDER BY (r = ANY (per_user)), r LIMIT 1;
        IF pick IS NULL THEN  -- a cycle of foreign keys: Citus could not take it either
            RAISE EXCEPTION 'agentmem distribute: the foreign keys among % form a cycle', remaining;
        END IF;
        n := n + 1;
        IF pick = ANY (per_user) THEN
            step := n; table_name := pick; kind := 'distributed'; colocate_with := anchor;
            anchor := coalesce(anchor, pick);
        ELSE
            step := n; table_name := pick; kind := 'reference'; colocate_with := NULL;
        END IF;
        RETURN NEXT;
        remaining := array_remove(remaining, pick);
    END LOOP;
END
$plan$;

DO $distribute$
DECLARE
    dry boolean := coalesce(current_setting('agentmem.distribute_dry_run', true), '') IN ('on', 'true', '1');
    p record;
    tbl text;
    anchor text;
    already boolean;
BEGIN
    IF to_regclass(format('%I.schema_migrations', current_schema())) IS NULL THEN
        RAISE EXCEPTION 'agentmem distribute: schema % is not a migrated agentmem schema', current_schema()
            USING HINT = 'Run agentmem init first, and run this with search_path set to the agentmem schema.';
    END IF;
    IF NOT dry AND NOT EXISTS (SELECT 1 FROM pg_extension WHERE extname = 'citus') THEN
        RAISE EXCEPTION 'agentmem distribute: the citus extension is not installed in database %; nothing was changed',
                        current_database()
            USING HINT = 'Run this on a Citus coordinator (CREATE EXTENSION citus; then citus_add_node() for each '
                         'worker), or set agentmem.distribute_dry_run = on to see the plan.';
    END IF;
    IF dry THEN
        FOR p IN SELECT * FROM pg_temp.agentmem_distribution_plan() LOOP
            RAISE NOTICE 'agentmem distribute (dry run): % %.%', p.kind, current_schema(), p.table_name;
        END LOOP;
        RETURN;
    END IF;
    PERFORM set_config('citus.enable_unsafe_triggers', 'on', true);
    -- The colocation group: that of a table an earlier run distributed, if any.
    EXECUTE 'SELECT min(logicalrelid::regclass::text) FROM pg_dist_partition'
            ' WHERE logicalrelid = ANY ($1::regclass[]) AND partmethod = ''h'''
        INTO anchor
        USING ARRAY(SELECT format('%I.%I', current_schema(), q.table_name)
                    FROM pg_temp.agentmem_distribution_plan() q WHERE q.kind = 'distributed');
    FOR p IN SELECT * FROM pg_temp.agentmem_distribution_plan() LOOP
        tbl := format('%I.%I', current_schema(), p.table_name);
        EXECUTE 'SELECT EXISTS (SELECT 1 FROM pg_dist_partition WHERE logicalrelid = $1::regclass)'
            INTO already USING tbl;
        CONTINUE WHEN already;
        IF p.kind = 'reference' THEN
            PERFORM create_reference_table(tbl);
        ELSIF anchor IS NULL THEN
            PERFORM create_distributed_table(tbl, 'user_id', colocate_with => 'none');
            anchor := tbl;
        ELSE
            PERFORM create_distributed_table(tbl, 'user_id', colocate_with => anchor);
        END IF;
        RAISE NOTICE 'agentmem distribute: % %', p.kind, tbl;
    END LOOP;
END
$distribute$;
