-- agentmem schema, migration 008: every per-user table can be hash-distributed on
-- user_id (Citus), colocated with the others.
--
-- Citus shards a distributed table by its distribution column and enforces, per shard,
-- only what one shard can see. Hence its rules, which this migration satisfies for
-- every per-user table (tests/test_distribution.py checks the catalog afterwards):
--   * every primary key and unique constraint includes user_id: uniqueness of a
--     key without it would need a look at every shard. Ids stay unique in practice
--     (identity bigint, Citus hands each node its own range; random uuids), the
--     database now vouches for (user_id, id);
--   * a foreign key between distributed tables includes user_id on both sides, so
--     the referenced row lives on the same shard (colocated tables). Citus refuses
--     ON DELETE SET NULL on such a key (it would null the distribution column; the
--     PostgreSQL 15 column-list form is refused too), so the two SET NULL keys become
--     NO ACTION, and the code that deletes a referenced row clears or keeps the
--     referrers itself (memory.tables.facts.forget, memory.tables.retention.purge_expired);
--   * statements that triggers run touch one user's rows only: the look-back window
--     of migration 004 is refreshed with the user's id passed along, so each of its
--     statements is routed to the shard of that user.
-- Tables without user_id (toolbox_memory, shared_workflow_memory, the bookkeeping
-- tables) become reference tables: one copy on every node, no rule to meet. The
-- distribution itself is done by `agentmem distribute` (sql/citus_distribute.sql) on a
-- Citus cluster; on a single PostgreSQL this migration only changes keys and indexes.
-- (psycopg sql.SQL template: no literal braces in this file.)

-- Foreign keys first: they depend on the primary keys they reference.
ALTER TABLE conversational_memory DROP CONSTRAINT conversational_memory_summary_id_fkey;
ALTER TABLE conversational_context DROP CONSTRAINT conversational_context_message_id_fkey;
ALTER TABLE fact_memory DROP CONSTRAINT fact_memory_superseded_by_fkey;

-- Primary keys with user_id first: it also serves every per-user lookup by id.
ALTER TABLE summary_memory DROP CONSTRAINT summary_memory_pkey,
    ADD CONSTRAINT summary_memory_pkey PRIMARY KEY (user_id, summary_id);
ALTER TABLE conversational_memory DROP CONSTRAINT conversational_memory_pkey,
    ADD CONSTRAINT conversational_memory_pkey PRIMARY KEY (user_id, id);
ALTER TABLE conversational_context DROP CONSTRAINT conversational_context_pkey,
    ADD CONSTRAINT conversational_context_pkey PRIMARY KEY (user_id, message_id);
ALTER TABLE fact_memory DROP CONSTRAINT fact_memory_pkey,
    ADD CONSTRAINT fact_memory_pkey PRIMARY KEY (user_id, id);
ALTER TABLE knowledge_memory DROP CONSTRAINT knowledge_memory_pkey,
    ADD CONSTRAINT knowledge_memory_pkey PRIMARY KEY (user_id, id);
ALTER TABLE entity_memory DROP CONSTRAINT entity_memory_pkey,
    ADD CONSTRAINT entity_memory_pkey PRIMARY KEY (user_id, id);
ALTER TABLE tool_log DROP CONSTRAINT tool_log_pkey,
    ADD CONSTRAINT tool_log_pkey PRIMARY KEY (user_id, id);
-- Since 007 every workflow_memory row is one user's (user_id NOT NULL; shared ones
-- live in shared_workflow_memory, a reference table).
ALTER TABLE workflow_memory DROP CONSTRAINT workflow_memory_pkey,
    ADD CONSTRAINT workflow_memory_pkey PRIMARY KEY (user_id, id);

-- Colocated foreign keys: the referencing row names its user, the referenced row is
-- on the same shard. The window rows still go with their message (CASCADE is allowed).
ALTER TABLE conversational_memory ADD CONSTRAINT conversational_memory_summary_fkey
    FOREIGN KEY (user_id, summary_id) REFERENCES summary_memory (user_id, summary_id);
ALTER TABLE conversational_context ADD CONSTRAINT conversational_context_message_fkey
    FOREIGN KEY (user_id, message_id) REFERENCES conversational_memory (user_id, id) ON DELETE CASCADE;
ALTER TABLE fact_memory ADD CONSTRAINT fact_memory_superseded_by_fkey
    FOREIGN KEY (user_id, superseded_by) REFERENCES fact_memory (user_id, id);

-- The indexes behind those keys' checks (a summary's or fact's referrers), by user;
-- the primary key now covers what conversational_context_user did.
DROP INDEX conversational_memory_summary;
CREATE INDEX conversational_memory_summary ON conversational_memory (user_id, summary_id) WHERE summary_id IS NOT NULL;
DROP INDEX fact_memory_superseded_by;
CREATE INDEX fact_memory_superseded_by ON fact_memory (user_id, superseded_by) WHERE superseded_by IS NOT NULL;
DROP INDEX conversational_context_user;

-- The look-back window (004), refreshed for one user's messages: every statement
-- names the user, so on Citus it runs on that user's shard.
CREATE FUNCTION conversational_context_refresh(uid text, ids bigint[]) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO conversational_context (message_id, user_id, context_tsv)
    SELECT m.id, m.user_id,
           setweight(m.search_tsv, 'A') || setweight(to_tsvector('english', coalesce(p.txt, '')), 'B')
    FROM conversational_memory m
    LEFT JOIN LATERAL (
        SELECT string_agg(left(b.content, 2000), ' ') AS txt FROM (
            SELECT c.content FROM conversational_memory c
            WHERE c.user_id = uid AND c.thread_id = m.thread_id
              AND (c.created_at, c.id) < (m.created_at, m.id)
            ORDER BY c.created_at DESC, c.id DESC LIMIT 2) b) p ON true
    WHERE m.user_id = uid AND m.id = ANY (ids)
    ON CONFLICT (user_id, message_id) DO UPDATE SET context_tsv = EXCLUDED.context_tsv;
$$;

CREATE OR REPLACE FUNCTION conversational_context_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(NEW.user_id,
        ARRAY[NEW.id] || conversational_successors(NEW.user_id, NEW.thread_id, NEW.created_at, NEW.id));
    RETURN NULL;
END
$$;

CREATE OR REPLACE FUNCTION conversational_context_after_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(OLD.user_id,
        conversational_successors(OLD.user_id, OLD.thread_id, OLD.created_at, OLD.id));
    RETURN NULL;
END
$$;

-- Citus refuses to update a distribution column, so OLD.user_id is NEW.user_id
-- there; on a single PostgreSQL a moved row refreshes both users' windows.
CREATE OR REPLACE FUNCTION conversational_context_after_edit() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(NEW.user_id,
        ARRAY[NEW.id] || conversational_successors(NEW.user_id, NEW.thread_id, NEW.created_at, NEW.id));
    PERFORM conversational_context_refresh(OLD.user_id,
        conversational_successors(OLD.user_id, OLD.thread_id, OLD.created_at, OLD.id));
    RETURN NULL;
END
$$;

DROP FUNCTION conversational_context_refresh(bigint[]);
