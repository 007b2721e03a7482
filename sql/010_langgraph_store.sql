-- agentmem schema, migration 010: the items of the LangGraph store (memory.integrations.langgraph_store).
--
-- store_memory holds one row per item: its namespace (the whole tuple, as text[]), key,
-- JSON value, and TTL (expires_at, refreshed from ttl_minutes on read). Every item
-- belongs to one user, named by the store's namespace convention (by default the
-- namespace's first element), so the primary key starts with user_id, like every
-- per-user table since migration 008.
-- store_vectors holds the embeddings of an item's indexed fields: one row per field
-- path ("text", "tags.0"), so an item indexed on several fields ranks by its best
-- field, as LangGraph's own stores do. Its foreign key names the user on both sides
-- (colocated on Citus) and cascades, so an item's vectors go with it.
-- Both are registered as per-user tables: row-level security (agentmem_own_rows),
-- forget_user and retention (expires_at) cover them with no code of their own.
-- (psycopg sql.SQL template: no literal braces in this file.)

CREATE TABLE store_memory (
    user_id      text NOT NULL,
    namespace    text[] NOT NULL CHECK (cardinality(namespace) > 0),
    key          text NOT NULL,
    value        jsonb NOT NULL,
    created_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at   timestamptz NOT NULL DEFAULT clock_timestamp(),
    ttl_minutes  double precision CHECK (ttl_minutes > 0),
    expires_at   timestamptz,
    CONSTRAINT store_memory_pkey PRIMARY KEY (user_id, namespace, key)
);
CREATE INDEX store_memory_updated ON store_memory (user_id, updated_at DESC);
CREATE INDEX store_memory_expires ON store_memory (expires_at) WHERE expires_at IS NOT NULL;

CREATE TABLE store_vectors (
    user_id     text NOT NULL,
    namespace   text[] NOT NULL,
    key         text NOT NULL,
    field_path  text NOT NULL,
    embedding   vector({dim}) NOT NULL,
    CONSTRAINT store_vectors_pkey PRIMARY KEY (user_id, namespace, key, field_path),
    CONSTRAINT store_vectors_item_fkey FOREIGN KEY (user_id, namespace, key)
        REFERENCES store_memory (user_id, namespace, key) ON DELETE CASCADE
);
-- Searches score a namespace's items exactly (the user's rows by key); HNSW, as on every
-- embedding column, for nearest-neighbour queries over the whole table.
CREATE INDEX store_vectors_embedding ON store_vectors USING hnsw (embedding vector_cosine_ops);

INSERT INTO agentmem_tables (table_name, kind, added_in) VALUES
    ('store_memory', 'user', 10),
    ('store_vectors', 'user', 10);

SELECT agentmem_enable_row_security();

-- Roles create_app_role already set up get the same rights on the new tables as on the
-- other per-user tables (create_app_role grants them to roles made from now on).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'conversational_memory'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON store_memory, store_vectors TO %s', r.grantee);
    END LOOP;
END
$$;
