"""The postings and the turn before of migration 015, on a real Postgres.

``conversational_terms`` holds one row per (user, stemmed word, message whose keyword window
has it) and each window row the id of the turn before its message (``prev_id``), both kept
by triggers in the writing transaction; ``search_memory``'s indexed shape reads a word's
messages and frequency from the postings and a candidate's turn before from its window row.
These tests check that both always hold exactly what the messages give (in order, out of
order, edited, moved to another thread, renamed speaker, deleted, truncated, and filled in
for messages written before the migration), per user, and that a long history is searched
through them.
"""

from __future__ import annotations

import uuid
from datetime import datetime, timedelta, UTC
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager, Settings
from memory.store import migrations

from fix_schemas import migrations_before
from fix_search_shapes import one_conn  # noqa: F401  (a fixture)

#: The postings the windows' words give, derived from conversational_context itself.
DERIVED = ("SELECT c.user_id, w.term, c.message_id FROM {s}.conversational_context c,"
           " unnest(tsvector_to_array(c.context_tsv)) AS w(term) WHERE c.user_id = ANY(%(users)s)")
STORED = "SELECT user_id, term, message_id FROM {s}.conversational_terms WHERE user_id = ANY(%(users)s)"
#: Each message's turn before in its thread, from the messages, and as the window rows hold it.
PREV = ("SELECT user_id, id, lag(id) OVER (PARTITION BY user_id, thread_id ORDER BY created_at, id)"
        " FROM {s}.conversational_memory WHERE user_id = ANY(%(users)s)")
STORED_PREV = "SELECT user_id, message_id, prev_id FROM {s}.conversational_context WHERE user_id = ANY(%(users)s)"


def derived_state(conn: psycopg.Connection, schema: str, users: list[str]) -> dict[str, tuple[set[Any], set[Any]]]:
    """(stored, derived from the source) for the postings and for the turns before, of ``users``."""
    def rows(text: str) -> set[Any]:
        return set(conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), {"users": users}).fetchall())
    return {"postings": (rows(STORED), rows(DERIVED)), "prev": (rows(STORED_PREV), rows(PREV))}


def assert_exact(conn: psycopg.Connection, schema: str, users: list[str], step: str) -> set[Any]:
    state = derived_state(conn, schema, users)
    for what, (stored, derived) in state.items():
        assert stored == derived, f"{what} after {step}"
    return state["postings"][0]


@pytest.fixture
def owner(pg_uri: str) -> Any:
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        yield conn


def test_postings_and_turns_before_follow_every_write(mm: MemoryManager, owner: psycopg.Connection,
                                                       user: str) -> None:
    schema, other = mm.db.schema, f"other-{uuid.uuid4().hex[:8]}"
    users = [user, other]
    at = datetime(2025, 3, 1, tzinfo=UTC)
    rows = mm.write_messages([dict(role="user", content="The otters crossed the harbour", created_at=at),
                              dict(role="assistant", content="Tide tables for the harbour", created_at=at
                                   + timedelta(minutes=2)),
                              dict(role="user", content="Wombat sightings are rare", created_at=at
                                   + timedelta(minutes=4))], user_id=user, thread_id="t")
    mm.write_conversational_memory("user", "otters in another user's notes", user_id=other, thread_id="t")
    stored = assert_exact(owner, schema, users, "the first writes")
    # a word of the first turn is in the second's window too (the turns before it)
    assert {(user, "harbour", rows[0].id), (user, "otter", rows[1].id)} <= stored

    def step(statement: str, *params: Any) -> set[Any]:
        owner.execute(sql.SQL(statement).format(s=sql.Identifier(schema)), params)
        return assert_exact(owner, schema, users, statement)

    # a message written between two others: the windows and turns before after it change
    between = mm.write_conversational_memory("user", "Quay cranes at dawn", user_id=user, thread_id="t",
                                             created_at=at + timedelta(minutes=1))
    assert_exact(owner, schema, users, "a message written out of order")
    assert (user, "quay", rows[2].id) in step(
        "UPDATE {s}.conversational_memory SET content = 'quay cranes at night' WHERE user_id = %s AND id = %s",
        user, between.id)
    step("UPDATE {s}.conversational_memory SET name = 'Ingrid' WHERE user_id = %s AND id = %s", user, rows[1].id)
    step("UPDATE {s}.conversational_memory SET thread_id = 'u' WHERE user_id = %s AND id = %s", user, rows[1].id)
    step("UPDATE {s}.conversational_memory SET created_at = %s WHERE user_id = %s AND id = %s",
         at - timedelta(days=1), user, rows[2].id)
    step("DELETE FROM {s}.conversational_memory WHERE user_id = %s AND id = %s", user, rows[0].id)
    mm.forget_user(user_id=other)
    stored = assert_exact(owner, schema, users, "forget_user")
    assert {u for u, _, _ in stored} == {user}


def test_truncate_empties_the_postings(schema_mm: MemoryManager, owner: psycopg.Connection, user: str) -> None:
    schema_mm.write_messages([dict(role="user", content=f"note {i} about otters") for i in range(3)],
                             user_id=user, thread_id="t")
    table = sql.Identifier(schema_mm.db.schema, "conversational_terms")
    assert owner.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0] > 0
    owner.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(schema_mm.db.schema, "conversational_context")))
    assert owner.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0] == 0


def test_the_migration_fills_the_postings_and_turns_before_of_messages_written_before(
        pg_uri: str, settings: Settings, fresh_schema: str, tmp_path: Path, owner: psycopg.Connection) -> None:
    old = migrations_before(15, tmp_path)
    fake = HashEmbedder()
    migrations.migrate(pg_uri, schema=fresh_schema, dimension=fake.dimension, model_name=fake.name, directory=old)
    owner.execute(sql.SQL("INSERT INTO {} (user_id, thread_id, role, content, created_at) VALUES"
                          " ('ann', 't', 'user', 'sea otters hold hands', '2025-01-01'),"
                          " ('ann', 't', 'assistant', 'they sleep that way', '2025-01-02'),"
                          " ('ann', 'u', 'user', 'river otters', '2025-01-03'),"
                          " ('bo', 't', 'user', 'otters again', '2025-01-01')").format(
        sql.Identifier(fresh_schema, "conversational_memory")))
    mm = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=fake)  # applies 015
    try:
        stored = assert_exact(owner, fresh_schema, ["ann", "bo"], "the migration")
        (second,) = owner.execute(sql.SQL("SELECT id FROM {} WHERE content = 'they sleep that way'").format(
            sql.Identifier(fresh_schema, "conversational_memory"))).fetchone()
        assert ("ann", "otter", second) in stored  # from the turn before, in its window
        with owner.cursor() as cur:
            cur.execute(sql.SQL("SELECT message_id FROM {} WHERE prev_id IS NOT NULL").format(
                sql.Identifier(fresh_schema, "conversational_context")))
            assert cur.fetchall() == [(second,)]  # the only message with a turn before in its thread
    finally:
        mm.close()


def test_a_long_history_is_searched_through_the_postings(one_conn: MemoryManager, user: str) -> None:
    """Switch at 12 messages, 4 rows a looked-up word (``one_conn``), 50 nearest rows a search: a
    word in one message of 81, which the query's vector does not bring among its nearest, is
    looked up in the postings and found; the two-statement search and the one statement agree,
    for that query and for one of common words only."""
    mm = one_conn
    rare = "wombat" + uuid.uuid4().hex[:6]
    target = mm.write_messages([dict(role="user", content=f"harbour tide report number {i}") for i in range(80)]
                               + [dict(role="assistant", content=f"a {rare} walked past")], user_id=user,
                               thread_id="t")[-1]
    mm.search_memory("warm-up", user_id=user)  # seen large: the next searches take the indexed shape
    query = f"{rare} harbour tide report number"
    near = {h.item.message_id for h in mm.search_memory(query, user_id=user, k=50, scope="messages",
                                                         method="vector")}
    assert target.id not in near
    for q in (query, "harbour tide report"):
        hits = mm.search_memory(q, user_id=user, k=5, scope="messages")
        assert hits and [(h.item.id, round(h.score, 9)) for h in hits] == [
            (h.item.id, round(h.score, 9)) for h in mm.search_memory(q, user_id=user, k=5, scope="messages",
                                                                      shape="indexed")]
    # ranked by the keyword signal alone, the candidates of the same statements: the target first
    assert [h.item.message_id for h in mm.search_memory(query, user_id=user, k=1, scope="messages",
                                                        method="keyword")] == [target.id]
