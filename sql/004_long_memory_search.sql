-- agentmem schema, migration 004: long-memory search over past messages.
--
-- A chat turn is often too short to be found by keywords on its own ("Yes, I still use
-- it every day": what "it" is was said a turn earlier). Keyword search over messages
-- therefore reads a *context window*: the message itself (weight A) plus the two
-- messages before it in the same thread (weight B), while search returns the message.
-- The window looks back only: what a short turn refers to was said before it, and an
-- append-only window means a new message never rewrites an older row's window (on the
-- synthetic benchmark, previous-two and previous+next windows found the same evidence).
--
-- The window lives in a narrow side table rather than in a column of
-- conversational_memory, so maintaining it never rewrites a message row (which would
-- re-insert its embedding into the HNSW index). Row triggers keep it in step with every
-- writer (the library, LangChain, plain SQL): an insert writes the new row's window and,
-- if the message was backdated into the middle of a thread, refreshes the two rows after
-- it; a delete refreshes the two rows after the deleted one (so purged text does not
-- linger in a neighbour's window); a content edit refreshes the row and the two after
-- it. Summarizing a row (setting summary_id) changes nothing here: summarized messages
-- stay searchable.

CREATE TABLE conversational_context (
    message_id   bigint PRIMARY KEY REFERENCES conversational_memory (id) ON DELETE CASCADE,
    user_id      text NOT NULL,
    context_tsv  tsvector NOT NULL
);
CREATE INDEX conversational_context_tsv ON conversational_context USING gin (context_tsv);
CREATE INDEX conversational_context_user ON conversational_context (user_id);

-- Rows still waiting for their embedding (written with embed=False, filled in batches).
CREATE INDEX conversational_memory_unembedded ON conversational_memory (user_id, id)
    WHERE embedding IS NULL AND content <> '';

-- Recompute the windows of the given messages from the rows now before them.
CREATE FUNCTION conversational_context_refresh(ids bigint[]) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO conversational_context (message_id, user_id, context_tsv)
    SELECT m.id, m.user_id,
           setweight(m.search_tsv, 'A') || setweight(to_tsvector('english', coalesce(p.txt, '')), 'B')
    FROM conversational_memory m
    LEFT JOIN LATERAL (
        SELECT string_agg(left(b.content, 2000), ' ') AS txt FROM (
            SELECT c.content FROM conversational_memory c
            WHERE c.user_id = m.user_id AND c.thread_id = m.thread_id
              AND (c.created_at, c.id) < (m.created_at, m.id)
            ORDER BY c.created_at DESC, c.id DESC LIMIT 2) b) p ON true
    WHERE m.id = ANY (ids)
    ON CONFLICT (message_id) DO UPDATE SET context_tsv = EXCLUDED.context_tsv, user_id = EXCLUDED.user_id;
$$;

-- The (at most two) rows after a position in a thread: the rows whose window holds it.
CREATE FUNCTION conversational_successors(uid text, tid text, at timestamptz, mid bigint) RETURNS bigint[]
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT coalesce(array_agg(s.id), ARRAY[]::bigint[]) FROM (
        SELECT c.id FROM conversational_memory c
        WHERE c.user_id = uid AND c.thread_id = tid AND (c.created_at, c.id) > (at, mid)
        ORDER BY c.created_at, c.id LIMIT 2) s;
$$;

CREATE FUNCTION conversational_context_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(
        ARRAY[NEW.id] || conversational_successors(NEW.user_id, NEW.thread_id, NEW.created_at, NEW.id));
    RETURN NULL;
END
$$;

CREATE FUNCTION conversational_context_after_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(
        conversational_successors(OLD.user_id, OLD.thread_id, OLD.created_at, OLD.id));
    RETURN NULL;
END
$$;

CREATE FUNCTION conversational_context_after_edit() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(
        ARRAY[NEW.id] || conversational_successors(NEW.user_id, NEW.thread_id, NEW.created_at, NEW.id)
        || conversational_successors(OLD.user_id, OLD.thread_id, OLD.created_at, OLD.id));
    RETURN NULL;
END
$$;

CREATE TRIGGER conversational_context_insert AFTER INSERT ON conversational_memory
    FOR EACH ROW EXECUTE FUNCTION conversational_context_after_insert();
CREATE TRIGGER conversational_context_delete AFTER DELETE ON conversational_memory
    FOR EACH ROW EXECUTE FUNCTION conversational_context_after_delete();
CREATE TRIGGER conversational_context_edit AFTER UPDATE OF content, thread_id, created_at ON conversational_memory
    FOR EACH ROW WHEN (OLD.content IS DISTINCT FROM NEW.content OR OLD.thread_id IS DISTINCT FROM NEW.thread_id
                       OR OLD.created_at IS DISTINCT FROM NEW.created_at)
    EXECUTE FUNCTION conversational_context_after_edit();

-- Rows written before this migration.
SELECT conversational_context_refresh(ARRAY(SELECT id FROM conversational_memory));

-- conversational_context holds user data: under row-level security like every table
-- with a user_id (migration 003). The trigger functions run as the writing role, so the
-- app role refreshes only windows of its own user's rows.
SELECT agentmem_enable_row_security();
