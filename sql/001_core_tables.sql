-- agentmem schema, migration 001: the eight memory tables.
--
-- This file is a psycopg sql.SQL template: {dim} is the embedding dimension fixed at
-- the first migration (recorded in agentmem_meta). The runner sets search_path to the
-- agentmem schema (then the schema holding the vector extension), so names here are
-- unqualified. Forward-only: never edit a migration that has shipped; add a new one.

CREATE TABLE summary_memory (
    summary_id        uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id           text NOT NULL,
    thread_id         text,
    description       text NOT NULL,
    content           text NOT NULL,
    source_count      integer NOT NULL DEFAULT 0,
    first_message_at  timestamptz,
    last_message_at   timestamptz,
    source_tokens     integer,
    summary_tokens    integer,
    metadata          jsonb NOT NULL DEFAULT jsonb_build_object(),
    created_at        timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at        timestamptz,
    embedding         vector({dim}),
    search_tsv        tsvector GENERATED ALWAYS AS (to_tsvector('english', description || ' ' || content)) STORED
);
CREATE INDEX summary_memory_user_thread ON summary_memory (user_id, thread_id, created_at);
CREATE INDEX summary_memory_embedding ON summary_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX summary_memory_tsv ON summary_memory USING gin (search_tsv);

CREATE TABLE conversational_memory (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       text NOT NULL,
    thread_id     text NOT NULL,
    role          text NOT NULL CHECK (role IN ('system', 'user', 'assistant', 'tool')),
    content       text NOT NULL,
    tool_call_id  text,
    tool_name     text,
    tool_args     jsonb,
    tool_calls    jsonb,
    metadata      jsonb NOT NULL DEFAULT jsonb_build_object(),
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    summary_id    uuid REFERENCES summary_memory (summary_id) ON DELETE SET NULL,
    expires_at    timestamptz,
    embedding     vector({dim}),
    search_tsv    tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
);
-- The working set every turn reads: unsummarized rows of one thread, in order.
CREATE INDEX conversational_memory_working_set
    ON conversational_memory (user_id, thread_id, created_at, id) WHERE summary_id IS NULL;
CREATE INDEX conversational_memory_thread ON conversational_memory (user_id, thread_id, created_at, id);
CREATE INDEX conversational_memory_summary ON conversational_memory (summary_id) WHERE summary_id IS NOT NULL;
CREATE INDEX conversational_memory_embedding ON conversational_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX conversational_memory_tsv ON conversational_memory USING gin (search_tsv);

CREATE TABLE workflow_memory (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id        text,                          -- NULL: published as shared
    name           text NOT NULL,
    description    text NOT NULL,
    query          text NOT NULL DEFAULT '',
    steps          jsonb NOT NULL DEFAULT jsonb_build_array(),
    outcome        text NOT NULL DEFAULT '',
    success_count  integer NOT NULL DEFAULT 1,
    use_count      integer NOT NULL DEFAULT 0,
    metadata       jsonb NOT NULL DEFAULT jsonb_build_object(),
    created_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at     timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_used_at   timestamptz,
    expires_at     timestamptz,
    embedding      vector({dim}),
    search_tsv     tsvector GENERATED ALWAYS AS (to_tsvector('english', name || ' ' || description || ' ' || query)) STORED
);
CREATE INDEX workflow_memory_user ON workflow_memory (user_id, created_at);
CREATE INDEX workflow_memory_embedding ON workflow_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX workflow_memory_tsv ON workflow_memory USING gin (search_tsv);

CREATE TABLE fact_memory (
    id                 uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id            text NOT NULL,
    category           text NOT NULL CHECK (category IN ('preference', 'constraint', 'stable_fact')),
    content            text NOT NULL,
    valid_from         timestamptz NOT NULL DEFAULT clock_timestamp(),
    valid_to           timestamptz,
    superseded_by      uuid REFERENCES fact_memory (id) ON DELETE SET NULL,
    source_message_id  bigint,
    metadata           jsonb NOT NULL DEFAULT jsonb_build_object(),
    created_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at         timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at         timestamptz,
    embedding          vector({dim}),
    search_tsv         tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
);
CREATE INDEX fact_memory_active ON fact_memory (user_id, category) WHERE valid_to IS NULL;
CREATE INDEX fact_memory_embedding ON fact_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX fact_memory_tsv ON fact_memory USING gin (search_tsv);

CREATE TABLE knowledge_memory (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id       text NOT NULL,
    content       text NOT NULL,
    source        text NOT NULL DEFAULT '',
    metadata      jsonb NOT NULL DEFAULT jsonb_build_object(),
    content_hash  text,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at    timestamptz,
    embedding     vector({dim}),
    search_tsv    tsvector GENERATED ALWAYS AS (to_tsvector('english', content)) STORED
);
CREATE INDEX knowledge_memory_user ON knowledge_memory (user_id, created_at);
CREATE INDEX knowledge_memory_embedding ON knowledge_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX knowledge_memory_tsv ON knowledge_memory USING gin (search_tsv);

CREATE TABLE entity_memory (
    id             uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    user_id        text NOT NULL,
    name           text NOT NULL,
    entity_type    text NOT NULL DEFAULT 'unknown',
    description    text NOT NULL DEFAULT '',
    mention_count  integer NOT NULL DEFAULT 1,
    first_seen     timestamptz NOT NULL DEFAULT clock_timestamp(),
    last_seen      timestamptz NOT NULL DEFAULT clock_timestamp(),
    metadata       jsonb NOT NULL DEFAULT jsonb_build_object(),
    expires_at     timestamptz,
    embedding      vector({dim}),
    search_tsv     tsvector GENERATED ALWAYS AS (to_tsvector('english', name || ' ' || description)) STORED,
    UNIQUE (user_id, name, entity_type)
);
CREATE INDEX entity_memory_embedding ON entity_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX entity_memory_tsv ON entity_memory USING gin (search_tsv);

-- Tools are shared by a deployment, keyed by a toolbox namespace: no user_id.
CREATE TABLE toolbox_memory (
    id            uuid PRIMARY KEY DEFAULT gen_random_uuid(),
    namespace     text NOT NULL DEFAULT 'default',
    name          text NOT NULL,
    docstring     text NOT NULL DEFAULT '',
    description   text NOT NULL DEFAULT '',
    json_schema   jsonb NOT NULL,
    queries       jsonb NOT NULL DEFAULT jsonb_build_array(),
    search_text   text NOT NULL DEFAULT '',
    content_hash  text NOT NULL,
    augmented     boolean NOT NULL DEFAULT false,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    updated_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    embedding     vector({dim}),
    search_tsv    tsvector GENERATED ALWAYS AS (to_tsvector('english', search_text)) STORED,
    UNIQUE (namespace, name)
);
CREATE INDEX toolbox_memory_embedding ON toolbox_memory USING hnsw (embedding vector_cosine_ops);
CREATE INDEX toolbox_memory_tsv ON toolbox_memory USING gin (search_tsv);

CREATE TABLE tool_log (
    id            bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    user_id       text NOT NULL,
    thread_id     text,
    tool_call_id  text,
    tool_name     text NOT NULL,
    args          jsonb,
    output        text,
    status        text NOT NULL CHECK (status IN ('ok', 'error')),
    error         text,
    duration_ms   double precision,
    created_at    timestamptz NOT NULL DEFAULT clock_timestamp(),
    expires_at    timestamptz
);
CREATE INDEX tool_log_user_thread ON tool_log (user_id, thread_id, created_at);
