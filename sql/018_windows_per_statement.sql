-- agentmem schema, migration 018: the windows of an INSERT's messages are written by one
-- statement, and a refresh finds its messages by their key.
--
-- The insert trigger of 004/008 ran once per message and refreshed three windows (the
-- message's and the two after it in its thread), each found by
-- `m.user_id = uid AND m.id = ANY (ids)`. PostgreSQL 18 planned that lookup as a scan of
-- the user's whole range of the thread index (user_id, thread_id, created_at, id),
-- filtering on id, rather than three probes of the primary key (user_id, id): 144 buffers
-- for three ids at 20,000 messages of one user, 1.2 ms a message. So writing to a user
-- grew dearer with every message the user had: 1,000-message calls into one user (hash
-- vectors, embed=False) took 0.25 ms a message at first and 2.14 ms at 40,000 messages,
-- in new sessions as in old ones (scratch run).
--
-- Now the refresh joins its ids to the primary key, and the insert trigger runs once per
-- statement, over its rows (a transition table): per user of the statement, one refresh
-- of the new messages and of the (at most two) older messages after each new one in its
-- thread (a message backdated into a thread), so each window is computed once, not three
-- times (the messages after one: conversational_successors of 004). The same 40,000
-- messages took 0.12-0.19 ms a message throughout. With LoCoMo's
-- turns written into an HNSW index that did not hold their vectors, database time fell
-- from about 1.03 to 0.98 ms a message, and without the vector index from 0.36 to 0.25.
-- Each statement names one user (a loop over the users of the writing statement, one in
-- every write agentmem makes), so on Citus it runs on that user's shard. The delete and
-- edit triggers (004/008/009) call the same refresh.
-- (psycopg sql.SQL template: no literal braces in this file.)

CREATE OR REPLACE FUNCTION conversational_context_refresh(uid text, ids bigint[]) RETURNS void
LANGUAGE sql SET search_path FROM CURRENT AS $$
    INSERT INTO conversational_context (message_id, user_id, context_tsv, prev_id)
    SELECT m.id, m.user_id,
           setweight(m.search_tsv || to_tsvector('english', coalesce(m.name, '')), 'A')
           || setweight(to_tsvector('english', coalesce(p.txt, '')), 'B'), p.prev_id
    FROM (SELECT DISTINCT i.id FROM unnest(ids) AS i(id)) i
    JOIN conversational_memory m ON m.user_id = uid AND m.id = i.id
    LEFT JOIN LATERAL (
        SELECT string_agg(left(b.content, 2000), ' ') AS txt, (array_agg(b.id))[1] AS prev_id FROM (
            SELECT c.id, c.content FROM conversational_memory c
            WHERE c.user_id = uid AND c.thread_id = m.thread_id
              AND (c.created_at, c.id) < (m.created_at, m.id)
            ORDER BY c.created_at DESC, c.id DESC LIMIT 2) b) p ON true
    ON CONFLICT (user_id, message_id) DO UPDATE SET context_tsv = EXCLUDED.context_tsv, prev_id = EXCLUDED.prev_id
    WHERE (conversational_context.context_tsv, conversational_context.prev_id)
          IS DISTINCT FROM (EXCLUDED.context_tsv, EXCLUDED.prev_id);
$$;

CREATE OR REPLACE FUNCTION conversational_context_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    u text;
BEGIN
    FOR u IN SELECT DISTINCT n.user_id FROM new_rows n ORDER BY 1 LOOP
        PERFORM conversational_context_refresh(u, ARRAY(
            SELECT n.id FROM new_rows n WHERE n.user_id = u
            UNION
            SELECT unnest(conversational_successors(u, n.thread_id, n.created_at, n.id)) FROM new_rows n
            WHERE n.user_id = u));
    END LOOP;
    RETURN NULL;
END
$$;

DROP TRIGGER conversational_context_insert ON conversational_memory;
CREATE TRIGGER conversational_context_insert AFTER INSERT ON conversational_memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION conversational_context_after_insert();
