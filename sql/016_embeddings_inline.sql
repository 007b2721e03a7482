-- agentmem schema, migration 016: a row's embedding stays in the row.
--
-- PostgreSQL moves a row's long values out of line (TOAST) once the row passes about
-- 2 KB (toast_tuple_target, 2032 bytes by default), the largest first; pgvector's type
-- asks for exactly that (storage EXTERNAL). A MiniLM embedding is 1,544 bytes, so a
-- message or passage of a few hundred characters, with its full-text vector, went over:
-- its embedding was kept in the table's TOAST relation, and every distance computed to
-- it cost a probe of the TOAST index and a read of another page. At LoCoMo size that
-- was 32 % of the messages and 44 % of the passages. Reading a user's every row (the
-- exact shape of memory.tables.search and base) and scoring the indexed shape's
-- candidates paid it per row. With every embedding in its row (bench/inline_embeddings.py,
-- three interleaved pairs, LoCoMo size) the p50 own time of search_memory was 2-17 % lower
-- and of read_knowledge 11-22 %; at 100k passages of one user, read_knowledge's
-- statement after the model executed in 1.19 ms instead of 1.67 (EXPLAIN ANALYZE).
--
-- The tables with an embedding column set toast_tuple_target to its largest value (the
-- block size less the page's header and one line pointer: 8160 on the usual 8 KB
-- block): a row is left whole up to that size, and only a longer one has values moved
-- out, the largest first (a content longer than the embedding before it). The cost is
-- space: rows of about 2 KB fill a page less evenly, and a row's text is no longer
-- compressed to bring it under 2 KB (bench/sizing.py: a message with its window and
-- postings 4 % more, a summary 22 % more; +10 % for passages at 100k rows, table and
-- TOAST together).
--
-- The setting applies to rows written from now on. Rows written before keep their
-- embedding out of line until rewritten: VACUUM FULL (or pg_repack) of the table moves
-- them back in; it takes an exclusive lock, so it is left to the operator (README, "For
-- DBAs"). A partitioned table takes the setting on each leaf partition (it has none of
-- its own). Citus propagates an ALTER TABLE ... SET of a distributed table to its shards
-- (not run on a cluster here).

DO $$
DECLARE
    t record;
    target integer := current_setting('block_size')::integer - 32;
BEGIN
    FOR t IN
        SELECT coalesce(leaf.relid, c.oid)::regclass AS tbl
        FROM pg_class c
        JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding' AND NOT a.attisdropped
        LEFT JOIN LATERAL pg_partition_tree(c.oid) leaf ON c.relkind = 'p'
        WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind IN ('r', 'p')
          AND NOT c.relispartition AND (leaf.relid IS NULL OR leaf.isleaf)
    LOOP
        EXECUTE format('ALTER TABLE %s SET (toast_tuple_target = %s)', t.tbl, target);
    END LOOP;
END
$$;
