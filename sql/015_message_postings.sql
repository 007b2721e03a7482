-- agentmem schema, migration 015: the words of each message's keyword window as postings,
-- and the turn before each message on its window row.
--
-- search_memory over a long history (the indexed shape of memory.tables.search) takes
-- each query word's number of messages and, for the words it looks up, the messages that
-- have them. Through the gin index on conversational_context that cost a read of the
-- word's whole posting list (every user's rows with the word: a common word's ran to
-- 10,000 entries, 1.6 ms, at 100k messages of one user) and a heap fetch of each row
-- taken, and how common a word is came from matching a sample of 1,000 windows per search
-- (2.4 ms). conversational_terms holds one row per (user, stemmed word, message whose
-- window has it): its primary key answers "how many of this user's messages have the
-- word, counted up to N", "the first N of them" and "how many of the user's first S
-- messages have it" by index-only scans within one user's key range (one shard on Citus),
-- whatever the word. A message's words are the lexemes of its window (migrations 004,
-- 009: its own text and speaker name, and the two turns before it), the words the exact
-- shape and the indexed shape's scores match.
-- It is derived data, kept in the transaction of the write by triggers
-- on conversational_context (itself kept by the triggers of 004/008/009 on
-- conversational_memory): an INSERT adds the words of its rows, a DELETE (forget_user,
-- retention, a deleted message, plain SQL) removes them, an UPDATE of a window (a message
-- inserted before it, edited or deleted) replaces them, TRUNCATE empties it. The
-- triggers run as the writing role, under its row-level security, so the app role
-- maintains only its own user's postings. Existing windows are filled in below.
-- Its cost is space: about one row per word of each window, ~40 per LoCoMo turn, 4.5 KB
-- a message with the key (bench/sizing.py). The gin index on conversational_context is
-- dropped: nothing searches through it any more.
-- Per-user like every per-user table (migrations 007, 008): user_id leads the key,
-- row-level security, forget_user; no foreign key (the triggers keep it exact).
--
-- Second, each window row keeps the id of the turn just before its message in the thread
-- (prev_id): the refresh that builds the window finds it anyway, and the indexed shape
-- read it through the thread index once per candidate (two statements, ~100 probes a
-- search at 100k messages). Every change that moves a message's predecessor (a message
-- inserted before it, deleted, edited in time or thread) refreshes its window already.
-- (psycopg sql.SQL template: no literal braces in this file.)

ALTER TABLE conversational_context ADD COLUMN prev_id bigint;

-- The look-back window of 009, and now the turn just before the message (the first of the
-- two turns the window reads, newest first).
CREATE OR REPLACE FUNCTION conversational_context_refresh(uid text, ids bigint[]) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO conversational_context (message_id, user_id, context_tsv, prev_id)
    SELECT m.id, m.user_id,
           setweight(m.search_tsv || to_tsvector('english', coalesce(m.name, '')), 'A')
           || setweight(to_tsvector('english', coalesce(p.txt, '')), 'B'), p.prev_id
    FROM conversational_memory m
    LEFT JOIN LATERAL (
        SELECT string_agg(left(b.content, 2000), ' ') AS txt, (array_agg(b.id))[1] AS prev_id FROM (
            SELECT c.id, c.content FROM conversational_memory c
            WHERE c.user_id = uid AND c.thread_id = m.thread_id
              AND (c.created_at, c.id) < (m.created_at, m.id)
            ORDER BY c.created_at DESC, c.id DESC LIMIT 2) b) p ON true
    WHERE m.user_id = uid AND m.id = ANY (ids)
    ON CONFLICT (user_id, message_id) DO UPDATE SET context_tsv = EXCLUDED.context_tsv, prev_id = EXCLUDED.prev_id;
$$;

UPDATE conversational_context c SET prev_id = t.prev
FROM (SELECT user_id, id, lag(id) OVER (PARTITION BY user_id, thread_id ORDER BY created_at, id) AS prev
      FROM conversational_memory) t
WHERE c.user_id = t.user_id AND c.message_id = t.id AND t.prev IS NOT NULL;

CREATE TABLE conversational_terms (
    user_id     text NOT NULL,
    term        text NOT NULL,
    message_id  bigint NOT NULL,
    CONSTRAINT conversational_terms_pkey PRIMARY KEY (user_id, term, message_id)
);

-- Row-level triggers: a window is written one message at a time (the refresh of 004/008/009
-- runs once per message written), and per statement with transition tables they cost
-- 1.6 ms a message (each refresh statement fired the INSERT and the UPDATE trigger and
-- planned their queries anew), about five times the rest of the write path's database
-- work. Each statement names the row's own user, so on Citus it runs on that user's shard.
CREATE FUNCTION conversational_terms_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    INSERT INTO conversational_terms (user_id, term, message_id)
    SELECT NEW.user_id, w.term, NEW.message_id FROM unnest(tsvector_to_array(NEW.context_tsv)) AS w(term);
    RETURN NULL;
END
$$;

-- forget_user deletes a user's postings in one range first (memory.tables.retention): then
-- each window's delete finds the user has none left and probes no further.
CREATE FUNCTION conversational_terms_after_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    IF EXISTS (SELECT 1 FROM conversational_terms WHERE user_id = OLD.user_id) THEN
        DELETE FROM conversational_terms t USING unnest(tsvector_to_array(OLD.context_tsv)) AS w(term)
        WHERE t.user_id = OLD.user_id AND t.term = w.term AND t.message_id = OLD.message_id;
    END IF;
    RETURN NULL;
END
$$;

-- A rewritten window: the words it lost go, the words it gained come; a window given to
-- another user or message (plain SQL) moves all of them.
CREATE FUNCTION conversational_terms_after_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    moved boolean := NEW.user_id IS DISTINCT FROM OLD.user_id OR NEW.message_id IS DISTINCT FROM OLD.message_id;
    old_terms text[] := tsvector_to_array(OLD.context_tsv);
    new_terms text[] := tsvector_to_array(NEW.context_tsv);
BEGIN
    DELETE FROM conversational_terms t USING unnest(old_terms) AS w(term)
    WHERE t.user_id = OLD.user_id AND t.term = w.term AND t.message_id = OLD.message_id
      AND (moved OR NOT w.term = ANY (new_terms));
    INSERT INTO conversational_terms (user_id, term, message_id)
    SELECT NEW.user_id, w.term, NEW.message_id FROM unnest(new_terms) AS w(term)
    WHERE moved OR NOT w.term = ANY (old_terms);
    RETURN NULL;
END
$$;

CREATE FUNCTION conversational_terms_after_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    TRUNCATE conversational_terms;
    RETURN NULL;
END
$$;

CREATE TRIGGER conversational_terms_insert AFTER INSERT ON conversational_context
    FOR EACH ROW EXECUTE FUNCTION conversational_terms_after_insert();
CREATE TRIGGER conversational_terms_delete AFTER DELETE ON conversational_context
    FOR EACH ROW EXECUTE FUNCTION conversational_terms_after_delete();
CREATE TRIGGER conversational_terms_update AFTER UPDATE ON conversational_context
    FOR EACH ROW WHEN (OLD.context_tsv IS DISTINCT FROM NEW.context_tsv OR OLD.user_id IS DISTINCT FROM NEW.user_id
                       OR OLD.message_id IS DISTINCT FROM NEW.message_id)
    EXECUTE FUNCTION conversational_terms_after_update();
CREATE TRIGGER conversational_terms_truncate AFTER TRUNCATE ON conversational_context
    FOR EACH STATEMENT EXECUTE FUNCTION conversational_terms_after_truncate();

INSERT INTO conversational_terms (user_id, term, message_id)
SELECT c.user_id, w.term, c.message_id FROM conversational_context c, unnest(tsvector_to_array(c.context_tsv)) AS w(term);

DROP INDEX conversational_context_tsv;

INSERT INTO agentmem_tables (table_name, kind, added_in) VALUES ('conversational_terms', 'user', 15);

SELECT agentmem_enable_row_security();

-- A role that writes messages (the app role of memory.store.isolation) maintains their
-- postings through the triggers, under row-level security.
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'conversational_context'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON conversational_terms TO %s', r.grantee);
    END LOOP;
END
$$;
