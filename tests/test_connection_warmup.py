"""Each new pooled connection loads what a search needs before it is handed out (``memory.store.db._warm``).

What a backend has loaded shows in its own memory contexts (``pg_backend_memory_contexts``:
one ``index info`` context per index whose catalog entry it holds, one ``TS dictionary``
per text search dictionary), read here on a connection nothing else has used yet.
"""

from __future__ import annotations

import asyncio
import uuid

import psycopg
from psycopg import sql

from memory import HashEmbedder, MemoryManager, Settings, create_app_role
from memory.aio import AsyncMemoryManager

#: What a search reads: the message table's HNSW index, the postings' keys, the english stemmer.
LOADED = {("index info", "conversational_memory_embedding"), ("index info", "conversational_terms_pkey"),
          ("index info", "knowledge_memory_embedding"), ("TS dictionary", "english_stem")}

CONTEXTS = ("SELECT name, ident FROM pg_backend_memory_contexts"
            " WHERE name IN ('index info', 'TS dictionary')")


def test_a_new_connection_has_the_search_catalogs_loaded(settings: Settings, fresh_schema: str) -> None:
    mm = MemoryManager.open(settings.with_(schema=fresh_schema, pool_min_size=1, pool_max_size=1),
                            embedder=HashEmbedder())
    try:
        with mm.db.pool.connection() as conn:  # configured, never used by the library
            loaded = set(conn.execute(CONTEXTS).fetchall())
    finally:
        mm.close()
    assert LOADED <= loaded


def test_a_new_async_connection_too(settings: Settings, fresh_schema: str) -> None:
    async def contexts() -> set[tuple[str, str]]:
        amm = await AsyncMemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
        try:
            async with amm.adb.pool.connection() as conn:
                cur = await conn.execute(CONTEXTS)
                return set(await cur.fetchall())
        finally:
            await amm.close()

    assert LOADED <= asyncio.run(contexts())


def test_a_role_that_may_not_read_every_table_still_connects_and_searches(
        settings: Settings, pg_uri: str, fresh_schema: str) -> None:
    """The warming reads only the tables the role may read: a table withheld from it (here the
    knowledge passages) neither fails the connection nor the searches that do not need it."""
    MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder()).close()
    role = f"r_{uuid.uuid4().hex[:10]}"
    app = create_app_role(pg_uri, role, "pw", schema=fresh_schema)
    try:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("REVOKE SELECT ON {} FROM {}").format(
                sql.Identifier(fresh_schema, "knowledge_memory"), sql.Identifier(role)))
        mm = MemoryManager.open(settings.with_(schema=fresh_schema, database_url=app.conninfo, pool_max_size=1),
                                embedder=HashEmbedder())
        try:
            mm.write_messages([{"role": "user", "content": "the heron nests by the weir"}], user_id="u1",
                              thread_id="t")
            hits = mm.search_memory("where does the heron nest", user_id="u1", k=3)
        finally:
            mm.close()
        assert [h.item.content for h in hits][:1] == ["the heron nests by the weir"]
    finally:
        with psycopg.connect(pg_uri, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP OWNED BY {}").format(sql.Identifier(role)))
            conn.execute(sql.SQL("DROP ROLE {}").format(sql.Identifier(role)))
