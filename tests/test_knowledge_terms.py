"""The postings of migration 013 (``knowledge_terms``), on a real Postgres.

``knowledge_terms`` holds one row per (user, stemmed word, passage), kept by triggers on
``knowledge_memory`` in the writing transaction; ``read_knowledge``'s indexed shape takes
each word's rows and frequency from it. These tests check that it always holds exactly
the words of the passages (insert, edit, move, metadata edit, delete, truncate, and the
fill of passages written before the migration), per user, and that reads through it rank
like the exact shape.
"""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memory import HashEmbedder, MemoryManager, Settings
from memory.store import migrations
from memory.store.rows import KnowledgeItem

from fix_schemas import migrations_before

#: The postings a passage's words give, derived from knowledge_memory itself.
DERIVED = ("SELECT k.user_id, w.term, k.id FROM {s}.knowledge_memory k,"
           " unnest(tsvector_to_array(k.search_tsv)) AS w(term) WHERE k.user_id = ANY(%(users)s)")
STORED = "SELECT user_id, term, id FROM {s}.knowledge_terms WHERE user_id = ANY(%(users)s)"


def postings(conn: psycopg.Connection, schema: str, users: list[str]) -> tuple[set[Any], set[Any]]:
    """(the postings stored, the postings the passages' words give) of ``users``."""
    def rows(text: str) -> set[Any]:
        return set(conn.execute(sql.SQL(text).format(s=sql.Identifier(schema)), {"users": users}).fetchall())
    return rows(STORED), rows(DERIVED)


def word() -> str:
    return "wombat" + uuid.uuid4().hex[:8]


@pytest.fixture
def owner(pg_uri: str) -> Any:
    with psycopg.connect(pg_uri, autocommit=True) as conn:
        yield conn


def test_postings_follow_every_write(mm: MemoryManager, owner: psycopg.Connection, user: str) -> None:
    schema, other = mm.db.schema, f"other-{uuid.uuid4().hex[:8]}"
    users = [user, other]
    w = word()
    rows = mm.write_knowledge_batch([{"content": f"the {w} crossed the harbour"},
                                     {"content": "tide tables for the harbour"},
                                     {"content": f"{w} sightings are rare"}], user_id=user)
    mm.write_knowledge(f"{w} in another user's notes", user_id=other)
    stored, derived = postings(owner, schema, users)
    assert stored == derived and (user, "harbour", rows[0].id) in stored and len(stored) > 8

    def step(statement: str, *params: Any) -> None:
        owner.execute(sql.SQL(statement).format(s=sql.Identifier(schema)), params)
        stored, derived = postings(owner, schema, users)
        assert stored == derived, statement

    step("UPDATE {s}.knowledge_memory SET content = 'quay cranes at dawn' WHERE user_id = %s AND id = %s",
         user, rows[0].id)
    assert (user, "harbour", rows[0].id) not in postings(owner, schema, users)[0]
    step("UPDATE {s}.knowledge_memory SET metadata = '{{\"k\": 1}}'::jsonb WHERE user_id = %s", user)
    step("UPDATE {s}.knowledge_memory SET user_id = %s WHERE user_id = %s AND id = %s", other, user, rows[1].id)
    assert any(u == other and i == rows[1].id for u, _, i in postings(owner, schema, users)[0])
    step("DELETE FROM {s}.knowledge_memory WHERE user_id = %s AND id = %s", user, rows[2].id)
    mm.forget_user(user_id=other)
    stored, derived = postings(owner, schema, users)
    assert stored == derived and {u for u, _, _ in stored} == {user}


def test_truncate_empties_the_postings(schema_mm: MemoryManager, owner: psycopg.Connection, user: str) -> None:
    schema_mm.write_knowledge_batch([{"content": f"{word()} note {i}"} for i in range(3)], user_id=user)
    table = sql.Identifier(schema_mm.db.schema, "knowledge_terms")
    assert owner.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0] > 0
    owner.execute(sql.SQL("TRUNCATE {}").format(sql.Identifier(schema_mm.db.schema, "knowledge_memory")))
    assert owner.execute(sql.SQL("SELECT count(*) FROM {}").format(table)).fetchone()[0] == 0


def test_the_migration_fills_the_postings_of_passages_written_before(
        pg_uri: str, settings: Settings, fresh_schema: str, tmp_path: Path, owner: psycopg.Connection) -> None:
    old = migrations_before(13, tmp_path)
    fake = HashEmbedder()
    migrations.migrate(pg_uri, schema=fresh_schema, dimension=fake.dimension, model_name=fake.name, directory=old)
    owner.execute(sql.SQL("INSERT INTO {} (user_id, content) VALUES ('ann', 'otters hold hands'),"
                          " ('ann', 'sea otters sleep'), ('bo', 'river otters')").format(
        sql.Identifier(fresh_schema, "knowledge_memory")))
    mm = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=fake)  # applies 013
    try:
        stored, derived = postings(owner, fresh_schema, ["ann", "bo"])
        assert stored == derived and len(stored) == 8  # otter hold hand, sea otter sleep, river otter
        assert [h.item.content for h in mm.read_knowledge("sleeping otters", user_id="ann", k=1)] == [
            "sea otters sleep"]
    finally:
        mm.close()


def similar(mm: MemoryManager, query: str, user: str, *, shape: str, k: int = 5) -> list[Any]:
    return mm.knowledge._similar("knowledge_memory", KnowledgeItem, query, sql.SQL("user_id = %(uid)s"),
                                 {"uid": user}, k=k, shape=shape, postings="knowledge_terms")


def test_a_rare_word_among_common_ones_finds_its_row_through_the_postings(
        small_bounds: MemoryManager, user: str) -> None:
    mm = small_bounds
    a, b, c, rare = word(), word(), word(), word()
    mm.write_knowledge_batch([{"content": f"{a} {b} {c} entry {i}"} for i in range(40)], user_id=user)
    target = mm.write_knowledge(f"{a} beside the {rare}", user_id=user).id
    # 41 rows > 12: read_knowledge takes the indexed shape; each common word brings 4 rows
    hits = mm.read_knowledge(f"{a} {b} {c} {rare}", user_id=user, k=5)
    assert hits[0].item.id == target
    assert [h.item.id for h in hits] == [h.item.id for h in similar(mm, f"{a} {b} {c} {rare}", user,
                                                                     shape="indexed")]


def test_every_candidate_gets_its_real_keyword_signal(small_bounds: MemoryManager, user: str) -> None:
    """A row found by the vector half only (outside the keyword half's best) keeps its keyword signal."""
    mm = small_bounds
    a, b = word(), word()
    mm.write_knowledge_batch([{"content": f"{a} {b} note {i}"} for i in range(25)], user_id=user)
    target = mm.write_knowledge(f"{a} alone", user_id=user).id
    query = f"{a} {b}"
    with mm.db.connection(user) as conn:  # the nearest row to the query, by construction
        conn.execute("UPDATE knowledge_memory SET embedding = %s WHERE user_id = %s AND id = %s",
                     (mm.embeddings.embed_one(query), user, target))
    for shape in ("exact", "indexed"):
        hits = {h.item.id: h for h in similar(mm, query, user, shape=shape, k=5)}
        # 25 rows have both words: the keyword half's best 20 are all of them, not the target
        assert hits[target].signals["vector"] == pytest.approx(1.0), shape
        both = [h.signals["keyword"] for i, h in hits.items() if i != target]
        assert 0 < hits[target].signals["keyword"] < min(both), shape


def test_postings_keep_users_apart(small_bounds: MemoryManager, user: str) -> None:
    mm = small_bounds
    w, other = word(), f"other-{uuid.uuid4().hex[:8]}"
    mine = {r.id for r in mm.write_knowledge_batch([{"content": f"{w} fact {i}"} for i in range(20)], user_id=user)}
    before = [(h.item.id, h.score) for h in similar(mm, f"{w} fact", user, shape="indexed", k=20)]
    mm.write_knowledge_batch([{"content": f"{w} fact {i} of theirs"} for i in range(40)], user_id=other)
    after = similar(mm, f"{w} fact", user, shape="indexed", k=20)
    assert {h.item.id for h in after} == mine
    assert [(h.item.id, h.score) for h in after] == before  # frequencies and counts are this user's own


def test_shapes_agree_on_small_data(settings: Settings, user: str) -> None:
    """With bounds that cover every row (no sampling), the indexed shape through the postings
    returns what the exact shape returns, scores included."""
    mm = MemoryManager.open(settings.with_(similar_exact_max_rows=12, search_term_candidates=500,
                                           search_sample_rows=1000, pool_max_size=2), embedder=HashEmbedder())
    try:
        mm.write_knowledge_batch([{"content": t} for t in (
            "Bergen is the rainiest city in Norway.", "The Bergen marathon starts at the fish market.",
            "Tromso has northern lights from September to March.", "The fish market in Bergen opens at eight.",
            "Disk quota for EXP jobs was raised to 2 TB.", "Northern lights are best seen away from city lights.",
            "The export job EXP-2291 failed with disk quota exceeded.", "PostgreSQL 18 adds asynchronous I/O.",
            "Rain in Bergen falls on 240 days a year.", "The marathon route passes the harbour.",
            "Quota alerts go to the storage channel.", "Lights out at the fish market by six.",
            "The city council meets on Mondays.", "Norway's coast has many fjords.")], user_id=user)
        for q in ("fish market in Bergen", "disk quota EXP", "northern lights city", "rain Norway marathon"):
            exact, indexed = similar(mm, q, user, shape="exact", k=5), similar(mm, q, user, shape="indexed", k=5)
            assert [(h.item.id, round(h.score, 9)) for h in exact] == [
                (h.item.id, round(h.score, 9)) for h in indexed], q
    finally:
        mm.close()


def test_a_word_counts_all_its_rows_though_it_brings_only_the_pre_rankings_worth(settings: Settings, user: str) -> None:
    """A word with more rows than the pre-ranking keeps (4 x pool) but fewer than the per-word
    bound brings only that many as candidates, yet its document frequency is all its rows:
    every candidate's keyword signal is the exact shape's."""
    mm = MemoryManager.open(settings.with_(similar_exact_max_rows=12, search_term_candidates=500,
                                           search_sample_rows=1000, pool_max_size=2), embedder=HashEmbedder())
    try:
        a, b = word(), word()
        mm.write_knowledge_batch([{"content": f"{a} entry {i}" + (f" {b}" if i % 10 == 0 else "")}
                                  for i in range(150)] + [{"content": f"filler {i}"} for i in range(30)], user_id=user)
        # k=1: pool 20, 80 pre-ranked; the word has 150 rows (< 500: counted exactly)
        exact = {h.item.id: h.signals["keyword"] for h in similar(mm, f"{a} {b}", user, shape="exact", k=1)}
        indexed = similar(mm, f"{a} {b}", user, shape="indexed", k=1)
        assert indexed and indexed[0].item.id in exact
        assert indexed[0].signals["keyword"] == pytest.approx(exact[indexed[0].item.id])
        alone = [h for h in similar(mm, a, user, shape="indexed", k=1)]
        ref = {h.item.id: h.signals["keyword"] for h in similar(mm, a, user, shape="exact", k=20)}
        assert alone[0].signals["keyword"] == pytest.approx(ref[alone[0].item.id])
    finally:
        mm.close()


def test_a_row_with_every_common_word_is_brought_once_per_word(mm: MemoryManager, user: str) -> None:
    """The pre-ranking sums, per row, the IDF of each word that brought it. A row with every
    common word comes both from each word's postings and from the rows having them all
    (``all_common``); it must be counted once per word, or its words weigh double."""
    from memory.tables import base

    a, b = word(), word()
    ids = {r.id for r in mm.write_knowledge_batch([{"content": f"{a} {b} entry {i}"} for i in range(10)],
                                                  user_id=user)}
    ctes = ("WITH " + base.TERMS_CTE + ", lex AS (SELECT row_number() OVER () AS ord, lit::tsquery AS tq, term"
            " FROM terms WHERE %(hybrid)s)," + base._STATS_SIZE_CTE + "," + base._STATS_N_CTE
            + base._POSTINGS_WORDS + base._KEYWORD_REST.rstrip(","))

    def rows(select: str) -> list[Any]:
        stmt = sql.SQL(ctes + select).format(key=sql.Identifier("id"), tbl=sql.Identifier("knowledge_memory"),
                                             where=sql.SQL(base.USER_ROWS), post=sql.Identifier("knowledge_terms"),
                                             stats=sql.Identifier("knowledge_stats"))
        with mm.db.connection(user) as conn:
            return conn.execute(stmt, args).fetchall()

    # both words common (10 rows each, above a cap of 4), each bringing all its rows (80 a word)
    args = dict(uid=user, q=f"{a} {b}", hybrid=True, max_terms=8, cap=4, common_rows=80, sample=20,
                min_terms=2.0, prepool=80)
    brought = rows(" SELECT ord, key FROM brought")
    common = len(rows(" SELECT key FROM all_common"))
    assert common == 4  # the rows with both words were found apart too (up to the cap), all also brought by each word
    assert len(brought) == len(set(brought)) == 20
    assert {key for _, key in brought} == ids
