"""Retention: purge of expired rows, and forget_user over every table with a user_id."""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, timezone

import psycopg
import pytest
from psycopg import sql

from memory import ConfigurationError, DatabaseError, HashEmbedder, MemoryManager
from memory.store.isolation import user_tables
from memory.tables.retention import referencing_first, rows_of_user
from memory_data import populate


@pytest.fixture
def own_mm(settings, fresh_schema):
    """A manager on a schema of its own: these tests add tables and purge by date."""
    mm = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
    yield mm
    mm.close()


@pytest.fixture
def own_sql(own_mm):
    with psycopg.connect(own_mm.db.conninfo, autocommit=True) as conn:
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(own_mm.db.schema)))
        yield conn


def every_table_count(conn, schema: str, user: str) -> int:
    return sum(rows_of_user(conn, schema, user_id=user).values())


# -- forget_user ---------------------------------------------------------------------------
def test_forget_user_leaves_no_row_in_any_table(mm, sql_conn, thread):
    alice, bob = f"alice-{uuid.uuid4().hex[:8]}", f"bob-{uuid.uuid4().hex[:8]}"
    populate(mm, alice, thread, "forgetme")
    populate(mm, bob, thread, "keepme")
    bob_before = rows_of_user(sql_conn, mm.db.schema, user_id=bob)
    alice_before = rows_of_user(sql_conn, mm.db.schema, user_id=alice)
    counts = mm.forget_user(user_id=alice)
    assert set(counts) == set(user_tables(sql_conn, mm.db.schema))
    assert counts == alice_before  # it reports exactly what was there
    assert counts["conversational_memory"] == 5 and counts["summary_memory"] == 2 and counts["fact_memory"] == 1
    # The catalog-driven check: no table with a user_id column holds a row of Alice.
    assert rows_of_user(sql_conn, mm.db.schema, user_id=alice) == dict.fromkeys(counts, 0)
    assert rows_of_user(sql_conn, mm.db.schema, user_id=bob) == bob_before
    assert mm.forget_user(user_id=alice) == dict.fromkeys(counts, 0)


def test_forget_user_covers_a_table_a_later_migration_registers(own_mm, own_sql, thread):
    # What a later migration does: create the table and register it in agentmem_tables.
    own_sql.execute("CREATE TABLE audit_notes (id serial PRIMARY KEY, user_id text NOT NULL, note text)")
    own_sql.execute("INSERT INTO agentmem_tables (table_name, kind, added_in) VALUES ('audit_notes', 'user', 999)")
    # Another application's table in the same schema, with a user_id column too: not ours.
    own_sql.execute("CREATE TABLE their_notes (id serial PRIMARY KEY, user_id text NOT NULL, note text)")
    populate(own_mm, "carol", thread, "carolmark")
    own_sql.execute("INSERT INTO audit_notes (user_id, note) VALUES ('carol', 'a'), ('carol', 'b'), ('dave', 'c')")
    own_sql.execute("INSERT INTO their_notes (user_id, note) VALUES ('carol', 'theirs')")
    counts = own_mm.forget_user(user_id="carol")
    assert counts["audit_notes"] == 2 and "their_notes" not in counts
    assert every_table_count(own_sql, own_mm.db.schema, "carol") == 0
    assert own_sql.execute("SELECT user_id FROM audit_notes").fetchall() == [("dave",)]
    assert own_sql.execute("SELECT user_id, note FROM their_notes").fetchall() == [("carol", "theirs")]


def test_forget_user_is_one_transaction(own_mm, own_sql, thread):
    populate(own_mm, "erin", thread, "erinmark")
    before = rows_of_user(own_sql, own_mm.db.schema, user_id="erin")
    own_sql.execute(
        "CREATE FUNCTION refuse() RETURNS trigger LANGUAGE plpgsql AS $$ BEGIN RAISE EXCEPTION 'refused'; END $$")
    own_sql.execute("CREATE TRIGGER refuse BEFORE DELETE ON summary_memory FOR EACH ROW EXECUTE FUNCTION refuse()")
    with pytest.raises(DatabaseError, match="refused a statement") as err:  # the driver error wrapped, its cause kept
        own_mm.forget_user(user_id="erin")
    assert isinstance(err.value.__cause__, psycopg.errors.RaiseException)
    assert rows_of_user(own_sql, own_mm.db.schema, user_id="erin") == before  # nothing half-deleted


def test_referencing_tables_are_deleted_first():
    fks = [("conversational_memory", "summary_memory", "n", "summary_id", "summary_id", 1),
           ("conversational_context", "conversational_memory", "c", "message_id", "id", 1),
           ("fact_memory", "fact_memory", "n", "superseded_by", "id", 1)]
    order = referencing_first(["summary_memory", "conversational_memory", "conversational_context", "fact_memory"],
                              fks)
    assert order.index("conversational_context") < order.index("conversational_memory") < order.index(
        "summary_memory")


# -- purge ---------------------------------------------------------------------------------
def test_purge_deletes_expired_rows_only(own_mm, own_sql, thread):
    past, future = datetime.now(timezone.utc) - timedelta(hours=1), datetime.now(timezone.utc) + timedelta(days=1)
    k = [own_mm.write_knowledge(f"note {i}", user_id="fay") for i in range(3)]
    own_sql.execute("UPDATE knowledge_memory SET expires_at = %s WHERE id = %s", (past, k[0].id))
    own_sql.execute("UPDATE knowledge_memory SET expires_at = %s WHERE id = %s", (future, k[1].id))
    counts = own_mm.purge_expired()
    assert counts["knowledge_memory"] == 1
    left = {r[0] for r in own_sql.execute("SELECT id FROM knowledge_memory")}
    assert left == {k[1].id, k[2].id}
    assert own_mm.purge_expired()["knowledge_memory"] == 0


def test_purge_applies_retention_days_by_age(own_mm, own_sql):
    assert own_mm.settings.retention_days["tool_log"] > 0
    days = own_mm.settings.retention_days["tool_log"]
    old = own_mm.write_tool_log("search", {"q": 1}, "old output", user_id="gus")
    new = own_mm.write_tool_log("search", {"q": 2}, "new output", user_id="gus")
    own_sql.execute("UPDATE tool_log SET created_at = now() - %s * interval '1 day' WHERE id = %s", (days + 1, old.id))
    assert own_mm.purge_expired()["tool_log"] == 1
    assert [r[0] for r in own_sql.execute("SELECT id FROM tool_log")] == [new.id]
    kept = own_mm.write_knowledge("kept forever", user_id="gus")  # knowledge has no retention period by default
    own_sql.execute("UPDATE knowledge_memory SET created_at = now() - interval '5000 days'")
    own_mm.purge_expired()
    assert own_sql.execute("SELECT id FROM knowledge_memory").fetchall() == [(kept.id,)]


def test_purge_keeps_a_summary_while_its_messages_live(own_mm, own_sql, thread):
    populate(own_mm, "hal", thread, "halmark")
    sid = own_sql.execute("SELECT summary_id FROM conversational_memory WHERE summary_id IS NOT NULL"
                          " LIMIT 1").fetchone()[0]
    own_sql.execute("UPDATE summary_memory SET expires_at = now() - interval '1 hour'")
    counts = own_mm.purge_expired()
    # The free-standing summary goes; the one its messages point to stays, so they stay summarized.
    assert counts["summary_memory"] == 1
    assert own_sql.execute("SELECT count(*) FROM conversational_memory WHERE summary_id = %s",
                           (sid,)).fetchone()[0] == 4
    own_sql.execute("UPDATE conversational_memory SET expires_at = now() - interval '1 hour'"
                    " WHERE summary_id IS NOT NULL")
    counts = own_mm.purge_expired()
    assert counts["conversational_memory"] == 4 and counts["summary_memory"] == 1
    assert own_sql.execute("SELECT count(*) FROM conversational_memory").fetchone()[0] == 1  # the live turn
    assert own_sql.execute("SELECT count(*) FROM conversational_memory WHERE summary_id IS NULL").fetchone()[0] == 1


def test_purge_rejects_an_unknown_table_in_settings(own_mm):
    bad = MemoryManager(own_mm.db, own_mm.embeddings,
                        own_mm.settings.with_(retention_days={"no_such_table": 3}))
    with pytest.raises(ConfigurationError):
        bad.purge_expired()


def test_forget_user_deletes_each_table_once(own_mm, own_sql, thread):
    """One DELETE statement per table, and nothing left. A statement trigger records the
    statements agentmem sent (a foreign key's cascade runs a DELETE of its own on the
    referencing table, under the client's statement on the referenced one: not counted)."""
    populate(own_mm, "ivy", thread, "ivymark")
    own_sql.execute("CREATE TABLE delete_statements (tbl text)")
    own_sql.execute("CREATE FUNCTION count_delete() RETURNS trigger LANGUAGE plpgsql AS $$"
                    " BEGIN IF position(TG_TABLE_NAME IN current_query()) > 0 THEN"
                    " INSERT INTO delete_statements VALUES (TG_TABLE_NAME); END IF;"
                    " RETURN NULL; END $$")
    tables = user_tables(own_sql, own_mm.db.schema)
    for table in tables:
        own_sql.execute(sql.SQL("CREATE TRIGGER count_delete AFTER DELETE ON {} FOR EACH STATEMENT"
                                " EXECUTE FUNCTION count_delete()").format(sql.Identifier(table)))
    counts = own_mm.forget_user(user_id="ivy")
    statements = [r[0] for r in own_sql.execute("SELECT tbl FROM delete_statements")]
    assert sorted(statements) == sorted(tables)  # each table once
    assert counts["conversational_memory"] == 5 and counts["conversational_context"] == 5
    assert every_table_count(own_sql, own_mm.db.schema, "ivy") == 0


def test_forget_user_empties_the_embedding_cache(mm, user, thread):
    secret = f"My passport number is P{uuid.uuid4().hex[:8]}"
    query = f"where is {secret}"
    mm.write_conversational_memory("user", secret, user_id=user, thread_id=thread)  # embeds "user: <secret>"
    mm.read_knowledge(query, user_id=user)  # a query is never a row, but its vector is cached too
    texts = [f"user: {secret}", query]
    embedded = mm.embeddings.texts_embedded
    mm.embeddings.embed(texts)
    assert mm.embeddings.texts_embedded == embedded  # both served from the cache
    mm.forget_user(user_id=user)
    mm.embeddings.embed(texts)
    assert mm.embeddings.texts_embedded == embedded + 2  # computed again: nothing of them was kept
