-- agentmem schema, migration 004: long-memory search over past messages.
--
-- A chat turn is often too short to be found by keywords on its own ("Yes, I still use
-- it every day": what "it" is was said a turn earlier). Keyword search over messages
-- therefore reads a *context window*: the message itself (weight A) plus its previous
-- and next message in the same thread (weight B), while search returns the message.
--
-- The window lives in a narrow side table rather than in a column of
-- conversational_memory: a new message changes its predecessor's window, and updating
-- a conversational_memory row would re-insert its embedding into the HNSW index (the
-- gin-indexed column makes the update non-HOT). Updating this table touches only its
-- own two indexes. Triggers keep it in step with every writer (the library, LangChain,
-- plain SQL): inserts refresh the new rows and their neighbours, deletes refresh the
-- neighbours of what was removed (so purged text does not linger in a neighbour's
-- window), and content edits refresh the edited row and its neighbours. Summarizing a
-- row (setting summary_id) changes nothing here: summarized messages stay searchable.

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

-- Recompute the windows of the given messages from their current neighbours.
CREATE FUNCTION conversational_context_refresh(ids bigint[]) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO conversational_context (message_id, user_id, context_tsv)
    SELECT m.id, m.user_id,
           setweight(to_tsvector('english', left(m.content, 20000)), 'A')
           || setweight(to_tsvector('english', coalesce(left(p.content, 2000), '')), 'B')
           || setweight(to_tsvector('english', coalesce(left(n.content, 2000), '')), 'B')
    FROM conversational_memory m
    LEFT JOIN LATERAL (
        SELECT c.content FROM conversational_memory c
        WHERE c.user_id = m.user_id AND c.thread_id = m.thread_id AND (c.created_at, c.id) < (m.created_at, m.id)
        ORDER BY c.created_at DESC, c.id DESC LIMIT 1) p ON true
    LEFT JOIN LATERAL (
        SELECT c.content FROM conversational_memory c
        WHERE c.user_id = m.user_id AND c.thread_id = m.thread_id AND (c.created_at, c.id) > (m.created_at, m.id)
        ORDER BY c.created_at, c.id LIMIT 1) n ON true
    WHERE m.id = ANY (ids)
    ON CONFLICT (message_id) DO UPDATE SET context_tsv = EXCLUDED.context_tsv, user_id = EXCLUDED.user_id;
$$;

-- The nearest existing neighbours (before and after) of positions in threads.
CREATE FUNCTION conversational_neighbours(uids text[], tids text[], ats timestamptz[], mids bigint[])
RETURNS SETOF bigint
LANGUAGE sql STABLE SET search_path FROM CURRENT AS $$
    SELECT nb.id FROM unnest(uids, tids, ats, mids) AS r(user_id, thread_id, created_at, id)
    CROSS JOIN LATERAL (
        (SELECT c.id FROM conversational_memory c
         WHERE c.user_id = r.user_id AND c.thread_id = r.thread_id AND (c.created_at, c.id) < (r.created_at, r.id)
         ORDER BY c.created_at DESC, c.id DESC LIMIT 1)
        UNION ALL
        (SELECT c.id FROM conversational_memory c
         WHERE c.user_id = r.user_id AND c.thread_id = r.thread_id AND (c.created_at, c.id) > (r.created_at, r.id)
         ORDER BY c.created_at, c.id LIMIT 1)
    ) nb;
$$;

CREATE FUNCTION conversational_context_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(ARRAY(
        SELECT id FROM new_rows
        UNION
        SELECT conversational_neighbours(
            (SELECT array_agg(user_id) FROM new_rows), (SELECT array_agg(thread_id) FROM new_rows),
            (SELECT array_agg(created_at) FROM new_rows), (SELECT array_agg(id) FROM new_rows))));
    RETURN NULL;
END
$$;

CREATE FUNCTION conversational_context_after_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(ARRAY(
        SELECT conversational_neighbours(
            (SELECT array_agg(user_id) FROM old_rows), (SELECT array_agg(thread_id) FROM old_rows),
            (SELECT array_agg(created_at) FROM old_rows), (SELECT array_agg(id) FROM old_rows))));
    RETURN NULL;
END
$$;

CREATE FUNCTION conversational_context_after_edit() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(ARRAY(
        SELECT NEW.id
        UNION
        SELECT conversational_neighbours(ARRAY[NEW.user_id], ARRAY[NEW.thread_id], ARRAY[NEW.created_at],
                                         ARRAY[NEW.id])
        UNION
        SELECT conversational_neighbours(ARRAY[OLD.user_id], ARRAY[OLD.thread_id], ARRAY[OLD.created_at],
                                         ARRAY[OLD.id])));
    RETURN NULL;
END
$$;

CREATE TRIGGER conversational_context_insert AFTER INSERT ON conversational_memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION conversational_context_after_insert();
CREATE TRIGGER conversational_context_delete AFTER DELETE ON conversational_memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION conversational_context_after_delete();
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
