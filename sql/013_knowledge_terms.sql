-- agentmem schema, migration 013: the words of each knowledge passage as postings.
--
-- read_knowledge over many passages of one user (the indexed shape of
-- memory.tables.base) takes each query word's rows and each word's document frequency
-- from the index. The gin index on search_tsv spans every user and gives row
-- locations only: each of its candidates was a heap fetch and recheck (up to 500 a word,
-- most of the statement's time at 100k passages). knowledge_terms holds one row per
-- (user, stemmed word, passage): its primary key answers "the first N passages of this
-- user with this word" and "how many of the user's first S passages have it" by an
-- index-only scan, within one user's key range (one shard on Citus).
-- It is derived data, kept in the transaction of the write by statement-level triggers
-- on knowledge_memory: an INSERT adds the words of its rows, a DELETE (forget_user,
-- retention, plain SQL) removes them, an UPDATE that changes a row's words (its
-- content), its user or its id replaces them, TRUNCATE empties it. The triggers run as
-- the writing role, under its row-level security, so the app role maintains only its own
-- user's postings. A passage's words are its search_tsv lexemes, the same words the
-- gin index and the exact shape match. Existing passages are filled in below.
-- Per-user like every per-user table (migrations 007, 008): user_id leads the key,
-- row-level security, forget_user; no foreign key (the triggers keep it exact, and a
-- cascading key would need a second index on (user_id, id) on every write).
-- (psycopg sql.SQL template: no literal braces in this file.)

CREATE TABLE knowledge_terms (
    user_id  text NOT NULL,
    term     text NOT NULL,
    id       uuid NOT NULL,
    CONSTRAINT knowledge_terms_pkey PRIMARY KEY (user_id, term, id)
);

-- Each statement of the triggers names one user (a loop over the users of the writing
-- statement, one in every write agentmem makes), so on Citus it runs on that user's shard.
CREATE FUNCTION knowledge_terms_after_insert() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    u text;
BEGIN
    FOR u IN SELECT DISTINCT n.user_id FROM new_rows n ORDER BY 1 LOOP
        INSERT INTO knowledge_terms (user_id, term, id)
        SELECT u, w.term, n.id FROM new_rows n, unnest(tsvector_to_array(n.search_tsv)) AS w(term)
        WHERE n.user_id = u;
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION knowledge_terms_after_delete() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    u text;
BEGIN
    FOR u IN SELECT DISTINCT o.user_id FROM old_rows o ORDER BY 1 LOOP
        DELETE FROM knowledge_terms k USING old_rows o, unnest(tsvector_to_array(o.search_tsv)) AS w(term)
        WHERE k.user_id = u AND o.user_id = u AND k.term = w.term AND k.id = o.id;
    END LOOP;
    RETURN NULL;
END
$$;

-- Only rows whose words, user or id changed are touched (an edit of metadata or
-- expires_at costs two anti-joins and nothing else).
CREATE FUNCTION knowledge_terms_after_update() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
DECLARE
    u text;
BEGIN
    FOR u IN SELECT DISTINCT o.user_id FROM old_rows o ORDER BY 1 LOOP
        DELETE FROM knowledge_terms k USING old_rows o, unnest(tsvector_to_array(o.search_tsv)) AS w(term)
        WHERE k.user_id = u AND o.user_id = u AND k.term = w.term AND k.id = o.id
          AND NOT EXISTS (SELECT 1 FROM new_rows n
                          WHERE n.user_id = o.user_id AND n.id = o.id AND n.search_tsv = o.search_tsv);
    END LOOP;
    FOR u IN SELECT DISTINCT n.user_id FROM new_rows n ORDER BY 1 LOOP
        INSERT INTO knowledge_terms (user_id, term, id)
        SELECT u, w.term, n.id FROM new_rows n, unnest(tsvector_to_array(n.search_tsv)) AS w(term)
        WHERE n.user_id = u
          AND NOT EXISTS (SELECT 1 FROM old_rows o
                          WHERE o.user_id = n.user_id AND o.id = n.id AND o.search_tsv = n.search_tsv);
    END LOOP;
    RETURN NULL;
END
$$;

CREATE FUNCTION knowledge_terms_after_truncate() RETURNS trigger
LANGUAGE plpgsql SET search_path FROM CURRENT AS $$
BEGIN
    TRUNCATE knowledge_terms;
    RETURN NULL;
END
$$;

CREATE TRIGGER knowledge_terms_insert AFTER INSERT ON knowledge_memory
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION knowledge_terms_after_insert();
CREATE TRIGGER knowledge_terms_delete AFTER DELETE ON knowledge_memory
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION knowledge_terms_after_delete();
CREATE TRIGGER knowledge_terms_update AFTER UPDATE ON knowledge_memory
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_terms_after_update();
CREATE TRIGGER knowledge_terms_truncate AFTER TRUNCATE ON knowledge_memory
    FOR EACH STATEMENT EXECUTE FUNCTION knowledge_terms_after_truncate();

-- The passages already written.
INSERT INTO knowledge_terms (user_id, term, id)
SELECT k.user_id, w.term, k.id FROM knowledge_memory k, unnest(tsvector_to_array(k.search_tsv)) AS w(term);

INSERT INTO agentmem_tables (table_name, kind, added_in) VALUES ('knowledge_terms', 'user', 13);

SELECT agentmem_enable_row_security();

-- Roles create_app_role already set up get the same rights on the new table as on the
-- other per-user tables (create_app_role grants them to roles made from now on).
DO $$
DECLARE
    r record;
BEGIN
    FOR r IN
        SELECT DISTINCT a.grantee::regrole AS grantee
        FROM pg_class c, aclexplode(c.relacl) a
        WHERE c.oid = 'knowledge_memory'::regclass AND a.grantee <> c.relowner AND a.grantee <> 0
          AND a.privilege_type = 'INSERT'
    LOOP
        EXECUTE format('GRANT SELECT, INSERT, UPDATE, DELETE ON knowledge_terms TO %s', r.grantee);
    END LOOP;
END
$$;
