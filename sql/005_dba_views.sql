-- agentmem schema, migration 005: views for DBAs.
--
-- Read them with plain SQL, e.g.  SELECT * FROM agent_memory.consolidation_status;
-- Every view is bound to this schema when it is created (table references and the
-- regclass constants below are stored as OIDs), so it reads the right tables whatever
-- the reader's search_path.
--
--   consolidation_status  one row per (user, thread): messages total / unsummarized /
--                         summarized, summaries, oldest unsummarized message, estimated
--                         tokens of the unsummarized conversation and a monitor status
--   summary_lineage       one row per summary: label, source rows, time range, tokens
--   table_sizes           one row per table: exact row count, rows added in the last
--                         day / week, bytes (table, indexes, TOAST), dead tuples,
--                         last (auto)vacuum and analyze
--   memory_growth         rows added per day and table (the memory tables)
--   fact_history          every version of every fact, chained by superseded_by
--
-- The monitor status here is an ESTIMATE of the conversation alone: SQL cannot run the
-- model's tokenizer, so tokens are ceil(characters / 4) of the unsummarized messages'
-- content, measured against the usable budget the Python monitor uses,
--     (context window - reserved output) x (1 - safety margin),
-- with status ok < warning threshold <= warning < critical threshold <= critical.
-- The numbers come from session settings with defaults equal to agentmem's defaults:
--     agentmem.context_window (8192), agentmem.reserved_output_tokens (1024),
--     agentmem.safety_margin (0.05), agentmem.warning_threshold (0.5),
--     agentmem.critical_threshold (0.8)
-- e.g.  SET agentmem.context_window = 128000;  or  ALTER DATABASE ... SET ...
-- The real context of a turn also holds instructions, tools, retrieved memory and
-- summaries; MemoryManager.monitor_context_window measures that, with the tokenizer.
--
-- Views run with their owner's rights, which bypass row-level security: they are for
-- the schema owner (DBA) and are never granted to the application role (see
-- memory.store.isolation). (psycopg sql.SQL template: no literal braces in this file.)

-- SQL-standard function bodies (RETURN ...): parsed once, bound to this schema's
-- objects, so they work whatever the caller's search_path.
CREATE FUNCTION agentmem_setting(name text, fallback numeric) RETURNS numeric
LANGUAGE sql STABLE
RETURN coalesce(nullif(current_setting('agentmem.' || name, true), '')::numeric, fallback);

CREATE FUNCTION agentmem_context_window() RETURNS integer
LANGUAGE sql STABLE
RETURN agentmem_setting('context_window', 8192)::integer;

CREATE FUNCTION agentmem_estimate_tokens(chars bigint) RETURNS bigint
LANGUAGE sql IMMUTABLE
RETURN ceil(coalesce(chars, 0) / 4.0)::bigint;

-- (window - reserved output) x (1 - margin), the reserve capped at half the window.
CREATE FUNCTION agentmem_usable_budget(context_window integer DEFAULT agentmem_context_window()) RETURNS integer
LANGUAGE sql STABLE
RETURN greatest(1, floor((context_window - least(agentmem_setting('reserved_output_tokens', 1024), context_window / 2))
                         * (1 - agentmem_setting('safety_margin', 0.05))))::integer;

CREATE FUNCTION agentmem_monitor_status(tokens bigint, context_window integer DEFAULT agentmem_context_window())
RETURNS text
LANGUAGE sql STABLE
RETURN CASE
    WHEN tokens::numeric / agentmem_usable_budget(context_window) < agentmem_setting('warning_threshold', 0.5)
        THEN 'ok'
    WHEN tokens::numeric / agentmem_usable_budget(context_window) < agentmem_setting('critical_threshold', 0.8)
        THEN 'warning'
    ELSE 'critical'
END;

CREATE VIEW consolidation_status AS
WITH msgs AS (
    SELECT user_id, thread_id,
           count(*) AS total_messages,
           count(*) FILTER (WHERE summary_id IS NULL) AS unsummarized_messages,
           count(*) FILTER (WHERE summary_id IS NOT NULL) AS summarized_messages,
           min(created_at) FILTER (WHERE summary_id IS NULL) AS oldest_unsummarized_at,
           max(created_at) AS last_message_at,
           coalesce(sum(char_length(content)) FILTER (WHERE summary_id IS NULL), 0) AS unsummarized_chars
    FROM conversational_memory
    GROUP BY user_id, thread_id
),
sums AS (
    SELECT user_id, thread_id, count(*) AS summaries, max(created_at) AS last_summary_at
    FROM summary_memory
    WHERE thread_id IS NOT NULL
    GROUP BY user_id, thread_id
),
joined AS (
    SELECT coalesce(m.user_id, s.user_id) AS user_id,
           coalesce(m.thread_id, s.thread_id) AS thread_id,
           coalesce(m.total_messages, 0) AS total_messages,
           coalesce(m.unsummarized_messages, 0) AS unsummarized_messages,
           coalesce(m.summarized_messages, 0) AS summarized_messages,
           coalesce(s.summaries, 0) AS summaries,
           m.oldest_unsummarized_at,
           m.last_message_at,
           s.last_summary_at,
           coalesce(m.unsummarized_chars, 0) AS unsummarized_chars
    FROM msgs m FULL JOIN sums s ON s.user_id = m.user_id AND s.thread_id = m.thread_id
)
SELECT user_id, thread_id, total_messages, unsummarized_messages, summarized_messages, summaries,
       oldest_unsummarized_at, last_message_at, last_summary_at, unsummarized_chars,
       agentmem_estimate_tokens(unsummarized_chars) AS est_unsummarized_tokens,
       agentmem_context_window() AS context_window,
       round(100.0 * agentmem_estimate_tokens(unsummarized_chars) / agentmem_usable_budget(), 1)
           AS est_usage_percent,
       agentmem_monitor_status(agentmem_estimate_tokens(unsummarized_chars)) AS monitor_status
FROM joined;

CREATE VIEW summary_lineage AS
SELECT s.summary_id, s.user_id, s.thread_id,
       s.description AS label,
       s.source_count AS recorded_source_count,
       coalesce(m.source_rows, 0) AS source_rows,
       coalesce(m.source_rows, 0) = s.source_count AS sources_intact,
       m.first_message_id, m.last_message_id,
       coalesce(m.first_message_at, s.first_message_at) AS first_message_at,
       coalesce(m.last_message_at, s.last_message_at) AS last_message_at,
       s.source_tokens, s.summary_tokens,
       round(s.source_tokens::numeric / nullif(s.summary_tokens, 0), 2) AS compression_ratio,
       s.metadata ->> 'method' AS method,
       s.created_at
FROM summary_memory s
LEFT JOIN (
    SELECT summary_id, count(*) AS source_rows, min(id) AS first_message_id, max(id) AS last_message_id,
           min(created_at) AS first_message_at, max(created_at) AS last_message_at
    FROM conversational_memory
    WHERE summary_id IS NOT NULL
    GROUP BY summary_id
) m ON m.summary_id = s.summary_id;

-- Exact counts need one statement per table (each count scans its table; the
-- statistics' estimate est_live_rows is beside it). A regclass prints qualified
-- whenever the reader's search_path would not find it, so the statement is exact.
CREATE FUNCTION agentmem_row_counts(tbl regclass, dated boolean,
                                    OUT row_count bigint, OUT rows_last_day bigint, OUT rows_last_week bigint)
LANGUAGE plpgsql STABLE AS $$
BEGIN
    IF dated THEN
        EXECUTE format('SELECT count(*), count(*) FILTER (WHERE created_at > now() - interval ''1 day''),'
                       ' count(*) FILTER (WHERE created_at > now() - interval ''7 days'') FROM %s', tbl)
            INTO row_count, rows_last_day, rows_last_week;
    ELSE
        EXECUTE format('SELECT count(*) FROM %s', tbl) INTO row_count;
    END IF;
END
$$;

CREATE VIEW table_sizes AS
WITH t AS (
    SELECT c.oid, c.relname, c.reltoastrelid,
           EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'created_at'
                   AND NOT a.attisdropped) AS dated
    FROM pg_class c
    WHERE c.relnamespace = (SELECT relnamespace FROM pg_class WHERE oid = 'conversational_memory'::regclass)
      AND c.relkind IN ('r', 'p') AND NOT c.relispartition
)
SELECT t.relname AS table_name,
       n.row_count, n.rows_last_day, n.rows_last_week,
       pg_total_relation_size(t.oid) AS total_bytes,
       pg_relation_size(t.oid) AS table_bytes,
       pg_indexes_size(t.oid) AS index_bytes,
       CASE WHEN t.reltoastrelid = 0 THEN 0 ELSE pg_total_relation_size(t.reltoastrelid) END AS toast_bytes,
       pg_size_pretty(pg_total_relation_size(t.oid)) AS total_size,
       s.n_live_tup AS est_live_rows,
       s.n_dead_tup AS dead_rows,
       greatest(s.last_vacuum, s.last_autovacuum) AS last_vacuum,
       greatest(s.last_analyze, s.last_autoanalyze) AS last_analyze
FROM t
CROSS JOIN LATERAL agentmem_row_counts(t.oid::regclass, t.dated) n
LEFT JOIN pg_stat_all_tables s ON s.relid = t.oid;

CREATE VIEW memory_growth AS
SELECT day, table_name, rows_added FROM (
    SELECT date_trunc('day', created_at) AS day, 'conversational_memory' AS table_name, count(*) AS rows_added
    FROM conversational_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'summary_memory', count(*) FROM summary_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'fact_memory', count(*) FROM fact_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'knowledge_memory', count(*) FROM knowledge_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'workflow_memory', count(*) FROM workflow_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', first_seen), 'entity_memory', count(*) FROM entity_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'toolbox_memory', count(*) FROM toolbox_memory GROUP BY 1
    UNION ALL
    SELECT date_trunc('day', created_at), 'tool_log', count(*) FROM tool_log GROUP BY 1
) g;

-- A chain starts at a fact no other fact was superseded into and follows superseded_by.
CREATE VIEW fact_history AS
WITH RECURSIVE chain AS (
    SELECT f.id AS chain_id, f.id, 1 AS version
    FROM fact_memory f
    WHERE NOT EXISTS (SELECT 1 FROM fact_memory p WHERE p.superseded_by = f.id)
    UNION ALL
    SELECT c.chain_id, f.superseded_by, c.version + 1
    FROM chain c JOIN fact_memory f ON f.id = c.id
    WHERE f.superseded_by IS NOT NULL
) CYCLE id SET is_cycle USING path
SELECT f.user_id, c.chain_id, c.version, f.id AS fact_id, f.category, f.content,
       CASE WHEN f.valid_to IS NULL THEN 'active'
            WHEN f.superseded_by IS NOT NULL THEN 'superseded'
            ELSE 'retired' END AS status,
       f.valid_from, f.valid_to, f.superseded_by,
       nxt.content AS superseded_by_content,
       f.source_message_id, f.created_at, f.updated_at
FROM chain c
JOIN fact_memory f ON f.id = c.id
LEFT JOIN fact_memory nxt ON nxt.id = f.superseded_by
WHERE NOT c.is_cycle;
