-- agentmem schema, migration 012: each user's message count, kept on write.
--
-- search_memory's indexed shape (a user with a long history) weighs each query word by
-- its IDF, which needs N, the user's number of messages. Counting them per search read
-- the user's whole index (~7 ms at 100k messages); conversational_stats holds the count,
-- kept by statement-level triggers in the transaction of the write itself, so the count
-- and the rows never drift apart: an INSERT adds its rows per user, a DELETE (forget_user,
-- retention, a thread's deletion, plain SQL) subtracts them, an UPDATE that moves a row
-- to another user moves it in the counts too, TRUNCATE empties the counts. One statement
-- of the trigger per writing statement (not per row), its users in one order (no
-- deadlock between two writers of the same users). Consolidation (summary_id) changes
-- nothing here: a summarized message is still searched.
-- The table holds user data (a count per user): per-user, under row-level security,
-- keyed by user_id (one shard on Citus), like every per-user table (migrations 007, 008).
-- The trigger functions run as the writing role, so the app role counts only its own
-- user's rows. (psycopg sql.SQL template: no literal braces in this file.)

CREATE TABLE conversational_stats (
    user_id   text PRIMARY KEY,
    messages  bigint NOT NULL DEFAULT 0 CHECK (messages >= 0)
);

CREATE FUNCTION conversational_stats_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO conversational_stats AS s (user_id, messages)
    SELECT n.user_id, count(*) FROM new_rows n GROUP BY n.user_id ORDER BY n.user_id
    ON CONFLICT (user_id) DO UPDATE SET messages = s.messages + EXCLUDED.messages;
    RETURN NULL;
END
$$;

-- A user whose count row was removed first (forget_user deletes every per-user table)
-- has nothing left to subtract from: the row is gone either way.
CREATE FUNCTION conversational_stats_after_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    d record;
BEGIN
    FOR d IN SELECT o.user_id, count(*) AS n FROM old_rows o GROUP BY o.user_id ORDER BY o.user_id LOOP
        UPDATE conversational_stats SET messages = greatest(messages - d.n, 0) WHERE user_id = d.user_id;
    END LOOP;
    RETURN NULL;
END
$$;

-- Rare (Citus refuses to update a distribution column): a row given to another user.
CREATE FUNCTION conversational_stats_after_move() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    UPDATE conversational_stats SET messages = greatest(messages - 1, 0) WHERE user_id = OLD.user_id;
    INSERT INTO conversational_stats AS s (user_id, messages) VALUES (NEW.user_id, 1)
    ON CONFLICT (user_id) DO UPDATE SET messages = s.messages + 1;
    RETURN NULL;
END
$$;

CREATE FUNCTION conversational_stats_after_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    DELETE FROM conversational_stats;
    RETURN NULL;
END
$$;

CREATE TRIGGER conversational_stats_insert AFTER INSERT ON conversational_memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION conversational_stats_after_insert();
CREATE TRIGGER conversational_stats_delete AFTER DELETE ON conversational_memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION conversational_stats_after_delete();
CREATE TRIGGER conversational_stats_move AFTER UPDATE OF user_id ON conversational_memory
    FOR EACH ROW WHEN (OLD.user_id IS DISTINCT FROM NEW.user_id) EXECUTE FUNCTION conversational_stats_after_move();
CREATE TRIGGER conversational_stats_truncate AFTER TRUNCATE ON conversational_memory
    FOR EACH STATEMENT EXECUTE FUNCTION conversational_stats_after_truncate();

-- Rows written before this migration.
INSERT INTO conversational_stats (user_id, messages)
SELECT user_id, count(*) FROM conversational_memory GROUP BY user_id;

INSERT INTO agentmem_tables (table_name, kind, added_in) VALUES ('conversational_stats', 'user', 12);

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
        WHERE c.oid = 'conversational_memory'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON conversational_stats TO %s', r.grantee);
    END LOOP;
END
$$;
