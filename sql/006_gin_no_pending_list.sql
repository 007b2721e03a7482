-- agentmem schema, migration 006: full-text indexes of rarely-written tables skip the
-- GIN pending list.
--
-- With fastupdate on (the default), new rows wait in a pending list that every
-- keyword search scans linearly until VACUUM merges it. Measured at 10k knowledge rows
-- (bench/search_latency.py): the keyword half took 11.3 ms with 378 pending pages and
-- 0.09 ms once merged. These tables are written far less often than they are
-- searched, so each insert pays the merge instead. conversational_memory keeps the
-- default: it takes every message, and its keyword search runs on the window table (004).

ALTER INDEX knowledge_memory_tsv SET (fastupdate = off);
ALTER INDEX summary_memory_tsv SET (fastupdate = off);
ALTER INDEX workflow_memory_tsv SET (fastupdate = off);
ALTER INDEX entity_memory_tsv SET (fastupdate = off);
ALTER INDEX fact_memory_tsv SET (fastupdate = off);
ALTER INDEX toolbox_memory_tsv SET (fastupdate = off);
SELECT gin_clean_pending_list(i::regclass)
  FROM unnest(ARRAY['knowledge_memory_tsv', 'summary_memory_tsv', 'workflow_memory_tsv', 'entity_memory_tsv',
                    'fact_memory_tsv', 'toolbox_memory_tsv']) AS i;
