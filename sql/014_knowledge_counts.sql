-- agentmem schema, migration 014: each user's number of knowledge passages, kept on write.
--
-- read_knowledge over many passages of one user (the indexed shape of
-- memory.tables.base) weighs each query word by its IDF, which needs N, the user's
-- number of passages, and picks its shape by that number too. Counting them per read
-- walked the user's index (up to 10,000 entries, ~2.5 ms of a ~15 ms read at 100k
-- passages, and the shape's count another 0.8 ms); knowledge_stats holds the count, kept
-- by statement-level triggers in the transaction of the write itself, so the count and
-- the passages never drift apart: an INSERT adds its rows per user, a DELETE
-- (forget_user, retention, plain SQL) subtracts them, an UPDATE that gives a row to
-- another user moves it, TRUNCATE empties the counts.
--
-- A single count row per user would be a hot row: every write of the user would update
-- it and hold its lock to the end of the transaction, so two concurrent writers of one
-- user would wait for each other. The count is therefore spread over up to 16 slots per
-- user, a transaction writing its own (its transaction id modulo 16): concurrent writers
-- mostly touch different rows, and the user's count is the sum of its slots (a slot may
-- be negative after deletes; the sum never is). A read sums at most 16 rows of the
-- primary key.
--
-- Per-user like every per-user table (migrations 007, 008): user_id leads the key,
-- row-level security, forget_user (which deletes this table before knowledge_memory, see
-- memory.tables.retention.DERIVED_TABLES; a delete finding no count row of its user left
-- writes none back). The trigger functions run as the writing role, so the app role
-- counts only its own user's passages. (psycopg sql.SQL template: no literal braces in
-- this file.)

CREATE TABLE knowledge_stats (
    user_id   text NOT NULL,
    slot      smallint NOT NULL CHECK (slot >= 0 AND slot < 16),
    passages  bigint NOT NULL DEFAULT 0,
    CONSTRAINT knowledge_stats_pkey PRIMARY KEY (user_id, slot)
);

-- Each statement names one user (a loop over the writing statement's users, in one
-- order), so on Citus it runs on that user's shard and two writers never deadlock.
CREATE FUNCTION knowledge_stats_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
BEGIN
    FOR d IN SELECT n.user_id, count(*) AS n FROM new_rows n GROUP BY n.user_id ORDER BY n.user_id LOOP
        INSERT INTO knowledge_stats AS s (user_id, slot, passages) VALUES (d.user_id, txid_current() % 16, d.n)
        ON CONFLICT (user_id, slot) DO UPDATE SET passages = s.passages + EXCLUDED.passages;
    END LOOP;
    RETURN NULL;
END
$$;

-- A user whose count rows were removed first (forget_user) has nothing left to subtract
-- from: no row is written back.
CREATE FUNCTION knowledge_stats_after_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
BEGIN
    FOR d IN SELECT o.user_id, count(*) AS n FROM old_rows o GROUP BY o.user_id ORDER BY o.user_id LOOP
        INSERT INTO knowledge_stats AS s (user_id, slot, passages)
        SELECT d.user_id, txid_current() % 16, -d.n
        WHERE EXISTS (SELECT 1 FROM knowledge_stats k WHERE k.user_id = d.user_id)
        ON CONFLICT (user_id, slot) DO UPDATE SET passages = s.passages + EXCLUDED.passages;
    END LOOP;
    RETURN NULL;
END
$$;

-- Rare (Citus refuses to update a distribution column): a row given to another user.
CREATE FUNCTION knowledge_stats_after_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO knowledge_stats AS s (user_id, slot, passages)
    SELECT OLD.user_id, txid_current() % 16, -1
    WHERE EXISTS (SELECT 1 FROM knowledge_stats k WHERE k.user_id = OLD.user_id)
    ON CONFLICT (user_id, slot) DO UPDATE SET passages = s.passages - 1;
    INSERT INTO knowledge_stats AS s (user_id, slot, passages) VALUES (NEW.user_id, txid_current() % 16, 1)
    ON CONFLICT (user_id, slot) DO UPDATE SET passages = s.passages + 1;
    RETURN NULL;
END
$$;

CREATE FUNCTION knowledge_stats_after_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM knowledge_stats;
    RETURN NULL;
END
$$;

CREATE TRIGGER knowledge_stats_insert AFTER INSERT ON knowledge_memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION knowledge_stats_after_insert();
CREATE TRIGGER knowledge_stats_delete AFTER DELETE ON knowledge_memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION knowledge_stats_after_delete();
CREATE TRIGGER knowledge_stats_move AFTER UPDATE OF user_id ON knowledge_memory
    FOR EACH ROW WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id) EXECUTE FUNCTION knowledge_stats_after_move();
CREATE TRIGGER knowledge_stats_truncate AFTER TRUNCATE ON knowledge_memory
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_stats_after_truncate();

-- The passages already written.
INSERT INTO knowledge_stats (user_id, slot, passages)
SELECT user_id, 0, count(*) FROM knowledge_memory GROUP BY user_id;

INSERT INTO agentmem_tables (table_name, kind, added_in) VALUES ('knowledge_stats', 'user', 14);

SELECT agentmem_enable_row_security();

-- Roles create_app_role already set up get the same rights on the new table as on the
-- other per-user tables (create_app_role grants them to roles made from now on).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'knowledge_memory'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON knowledge_stats TO %s', r.grantee);
    END LOOP;
END
$$;
