-- agentmem schema, migration 009: a message may carry its speaker's name.
--
-- Conversations with more than one human (a group chat, two people talking through an
-- agent) need the speaker of each turn; OpenAI messages carry it as `name`. The name
-- is kept apart from the content, so the content stays what was said, and search uses
-- it as its own signal (a question about "Melanie" favours what Melanie said) and in
-- the keyword text of the message (weight A of the look-back window of 004/008).
-- (psycopg sql.SQL template: no literal braces in this file.)

ALTER TABLE conversational_memory ADD COLUMN name text;

-- The distinct speakers of a user, read by a loose index scan before a search.
CREATE INDEX conversational_memory_names ON conversational_memory (user_id, name) WHERE name IS NOT NULL;

-- The look-back window (008) with the message's own speaker name at weight A.
CREATE OR REPLACE FUNCTION conversational_context_refresh(uid text, ids bigint[]) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO conversational_context (message_id, user_id, context_tsv)
    SELECT m.id, m.user_id,
           setweight(m.search_tsv || to_tsvector('english', coalesce(m.name, '')), 'A')
           || setweight(to_tsvector('english', coalesce(p.txt, '')), 'B')
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

-- A renamed speaker refreshes the message's window like a content edit does.
DROP TRIGGER conversational_context_edit ON conversational_memory;
CREATE TRIGGER conversational_context_edit AFTER UPDATE OF content, thread_id, created_at, name
    ON conversational_memory
    FOR EACH ROW WHEN (OLD.content IS DISTINCT FROM NEW.content OR OLD.thread_id IS DISTINCT FROM NEW.thread_id
                       OR OLD.created_at IS DISTINCT FROM NEW.created_at OR OLD.name IS DISTINCT FROM NEW.name)
    EXECUTE FUNCTION conversational_context_after_edit();
