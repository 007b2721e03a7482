"""Migration 016: a row's embedding stays in the row (toast_tuple_target), not in TOAST."""

from __future__ import annotations

import psycopg
from psycopg import sql

from memory.store import migrations

#: Long enough that row + embedding pass PostgreSQL's default toast_tuple_target (2032 bytes).
LONG = " ".join(f"harbour{i} lantern{i % 7} ferry" for i in range(60))


def _out_of_line(conn: psycopg.Connection, table: str, key: str, value: object) -> bool:
    """Whether the row's embedding is kept in the table's TOAST relation."""
    row = conn.execute(sql.SQL("SELECT pg_column_toast_chunk_id(embedding) IS NOT NULL FROM {} WHERE {} = %s")
                       .format(sql.Identifier(table), sql.Identifier(key)), (value,)).fetchone()
    assert row is not None
    return bool(row[0])


def _schema_conn(mm) -> psycopg.Connection:
    conn = psycopg.connect(mm.db.conninfo, autocommit=True)
    conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(mm.db.schema)))
    return conn


def test_every_table_with_an_embedding_keeps_rows_whole_up_to_a_page(schema_mm):
    with _schema_conn(schema_mm) as conn:
        (block,) = conn.execute("SELECT current_setting('block_size')::int").fetchone()
        targets = dict(conn.execute(
            "SELECT c.relname, (SELECT option_value FROM pg_options_to_table(c.reloptions)"
            "                   WHERE option_name = 'toast_tuple_target')"
            " FROM pg_class c JOIN pg_attribute a ON a.attrelid = c.oid AND a.attname = 'embedding'"
            " WHERE c.relnamespace = current_schema()::regnamespace AND c.relkind = 'r'").fetchall())
    assert {"conversational_memory", "knowledge_memory", "summary_memory", "fact_memory",
            "toolbox_memory", "store_vectors"} <= set(targets)
    assert set(targets.values()) == {str(block - 32)}


def test_a_long_message_and_passage_keep_their_embedding_in_the_row(schema_mm, user, thread):
    msg = schema_mm.write_conversational_memory("user", LONG, user_id=user, thread_id=thread)
    passage = schema_mm.write_knowledge(LONG, user_id=user)
    with _schema_conn(schema_mm) as conn:
        (size,) = conn.execute("SELECT pg_column_size(m.*) FROM conversational_memory m WHERE id = %s",
                               (msg.id,)).fetchone()
        assert size > 2032  # past PostgreSQL's default target: would have gone out of line
        assert not _out_of_line(conn, "conversational_memory", "id", msg.id)
        assert not _out_of_line(conn, "knowledge_memory", "id", passage.id)
        # The same row under PostgreSQL's default: its embedding goes to TOAST (what 016 changed).
        conn.execute("ALTER TABLE knowledge_memory RESET (toast_tuple_target)")
        default = schema_mm.write_knowledge(LONG + " again", user_id=user)
        assert _out_of_line(conn, "knowledge_memory", "id", default.id)
    hits = schema_mm.read_knowledge("harbour5 lantern5", user_id=user, k=5)
    assert {h.item.id for h in hits} == {passage.id, default.id}


def test_a_row_longer_than_a_page_is_still_written_whole(schema_mm, user, thread):
    """Past the target the long values still go out of line: nothing is refused or cut."""
    text = " ".join(f"word{i}" for i in range(4000))  # ~35 KB
    msg = schema_mm.write_conversational_memory("user", text, user_id=user, thread_id=thread)
    with _schema_conn(schema_mm) as conn:
        (content, toasted) = conn.execute(
            "SELECT content, pg_column_toast_chunk_id(content) IS NOT NULL FROM conversational_memory"
            " WHERE id = %s", (msg.id,)).fetchone()
    assert content == text and toasted


def test_partitioned_tables_take_it_on_their_leaf_partitions(pg_uri, fresh_schema):
    """A partitioned table has no storage parameters of its own (Citus-like stand-ins, a DBA's
    partitioning): the migration sets it on every leaf, nested ones too, and leaves tables
    without an embedding alone."""
    text = next(m for m in migrations.discover() if m.version == 16).text
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE SCHEMA {}").format(sql.Identifier(fresh_schema)))
        conn.execute(sql.SQL("SET search_path TO {}, public").format(sql.Identifier(fresh_schema)))
        conn.execute("CREATE TABLE p (user_id text, embedding vector(3)) PARTITION BY HASH (user_id)")
        conn.execute("CREATE TABLE p0 PARTITION OF p FOR VALUES WITH (MODULUS 2, REMAINDER 0)")
        conn.execute("CREATE TABLE p1 PARTITION OF p FOR VALUES WITH (MODULUS 2, REMAINDER 1)"
                     " PARTITION BY LIST (user_id)")
        conn.execute("CREATE TABLE p1a PARTITION OF p1 DEFAULT")
        conn.execute("CREATE TABLE plain_rows (x int)")
        conn.execute(migrations.compose(text, 3))
        (block,) = conn.execute("SELECT current_setting('block_size')::int").fetchone()
        options = dict(conn.execute("SELECT relname, reloptions::text FROM pg_class"
                                    " WHERE relnamespace = current_schema()::regnamespace AND relkind IN ('r', 'p')"))
    leaf = f"{{toast_tuple_target={block - 32}}}"
    assert options == {"p": None, "p1": None, "p0": leaf, "p1a": leaf, "plain_rows": None}
