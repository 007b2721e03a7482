-- agentmem schema, migration 017: a message's search window is written once.
--
-- The insert trigger of 004/008 refreshes the new message's window and the windows of
-- the two messages after it in its thread, for a message backdated into the middle of
-- a thread. Row triggers of a multi-row INSERT fire after the whole statement, when
-- every row of it is visible, so for messages written together (write_messages sends
-- each pipeline stage as one INSERT) the two messages after each one were rows of the
-- same statement: their windows were written early by the trigger of the row before
-- them, then again by the next row's, then by their own. Every window was written three
-- times, an insert and two updates (100 messages in one call: 100 inserts and 191
-- updates of conversational_context), with the same text each time. The updates left
-- dead rows behind, which VACUUM makes reusable but does not give back: after
-- bench/sizing.py's load of 20,000 messages the table took 43.2 MB for 15.3 MB of rows
-- written once (2,316 bytes a window instead of 842; a message with everything it costs,
-- 14,516 bytes instead of 12,868), and a user's windows lay on more pages, which the
-- first search of that user reads in.
--
-- Now a following message's window is refreshed only if it already has one: a message
-- without a window is a row of the same statement whose own trigger, still to fire,
-- writes it from the same rows. A message backdated before rows written by an earlier
-- statement refreshes theirs as before (tests/test_search_memory.py). A message loaded
-- with triggers off (session_replication_role = replica) gets no window, as before; it
-- is no longer given one as a side effect of a later insert in front of it.

CREATE OR REPLACE FUNCTION conversational_context_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    PERFORM conversational_context_refresh(NEW.user_id, ARRAY[NEW.id] || ARRAY(
        SELECT s.id FROM unnest(conversational_successors(NEW.user_id, NEW.thread_id, NEW.created_at, NEW.id)) AS s(id)
        WHERE EXISTS (SELECT 1 FROM conversational_context x WHERE x.user_id = NEW.user_id AND x.message_id = s.id)));
    RETURN NULL;
END
$$;
