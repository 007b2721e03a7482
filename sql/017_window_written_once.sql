-- agentmem schema, migration 017: a message's search window is written once.
--
-- The insert trigger of 004/008 refreshes the new message's window and the windows of
-- the two messages after it in its thread (for a message backdated into the middle of a
-- thread). Row triggers of a multi-row INSERT fire after the whole statement, when every
-- row of it is visible, so for messages written together (write_messages sends each
-- pipeline stage as one INSERT) the two messages after each one were rows of the same
-- statement: each window was written by the trigger of the row two before it, then
-- rewritten with the same text by the next row's trigger and by its own (100 messages in
-- one call: 100 inserts and 191 updates of conversational_context). The updates left dead
-- rows behind, which VACUUM makes reusable but does not give back, and cost the writer:
-- written through write_messages in 2,000-row calls, 40,000 messages of one user took
-- 0.63 ms a message of database and driver time against 0.45 with this change, and their
-- windows 49 MB against 24 (scratch run, interleaved; bench/sizing.py at 20,000 messages:
-- the table 43.2 MB against 15.3, a message with everything it costs 14,516 bytes
-- against 13,081). A user's windows also lay on more pages, which the first search of
-- that user reads in.
--
-- A refresh now writes a window only where its text or its previous turn changed: a
-- window already written from the same rows is left as it is (locked by ON CONFLICT, not
-- rewritten), so the trigger of each row still computes the three windows, but each is
-- written once. The same holds for the refreshes of an edit or a delete: only the windows
-- that change are written. (Skipping, in the insert trigger, the rows that have no window
-- yet was tried first: its probe of conversational_context was planned once per session
-- while the table was small, and as a sequential scan it made a load of one user's
-- messages several times slower until the table was analyzed again.)

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
    ON CONFLICT (user_id, message_id) DO UPDATE SET context_tsv = EXCLUDED.context_tsv, prev_id = EXCLUDED.prev_id
    WHERE (conversational_context.context_tsv, conversational_context.prev_id)
          IS DISTINCT FROM (EXCLUDED.context_tsv, EXCLUDED.prev_id);
$$;
