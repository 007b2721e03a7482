"""Entity memory: people, projects, ids and places the user mentioned.

Writing an entity that exists (same user, name and type) counts a mention and keeps
the longer description, so repeated mentions never duplicate rows.
"""

from __future__ import annotations

from typing import overload

from psycopg import sql
from psycopg.rows import class_row

from memory.store.ops import Op, Sql, run
from memory.tables.base import Table, select_list
from memory.retrieval.hits import Hit
from memory.store.rows import Entity
from memory.store.validation import check_text


_RECENT = sql.SQL("SELECT {cols} FROM entity_memory WHERE user_id = %s"
                  " ORDER BY last_seen DESC LIMIT %s").format(cols=select_list(Entity))


class Entities(Table):
    """``entity_memory``: people, projects, ids and places, one row per (user, name, type)."""

    def write_entity(self, name: str, entity_type: str = "unknown", description: str = "", *,
                     user_id: str) -> Entity:
        uid = self._uid(user_id)
        name = check_text(name, "name", max_chars=500)
        entity_type = check_text(entity_type, "entity_type", max_chars=100)
        description = check_text(description, "description", max_chars=self.settings.max_content_chars,
                                 allow_empty=True)
        vec = self._embed([f"{name} ({entity_type}): {description}"])[0]
        stmt = sql.SQL(
            "INSERT INTO entity_memory AS e (user_id, name, entity_type, description, embedding)"
            " VALUES (%s, %s, %s, %s, %s)"
            " ON CONFLICT (user_id, name, entity_type) DO UPDATE SET"
            " mention_count = e.mention_count + 1, last_seen = clock_timestamp(),"
            " description = CASE WHEN length(EXCLUDED.description) > length(e.description)"
            "   THEN EXCLUDED.description ELSE e.description END,"
            " embedding = CASE WHEN length(EXCLUDED.description) > length(e.description)"
            "   THEN EXCLUDED.embedding ELSE e.embedding END"
            " RETURNING {cols}"
        ).format(cols=select_list(Entity))
        with self.db.connection(uid) as conn, conn.cursor(row_factory=class_row(Entity)) as cur:
            row = cur.execute(stmt, (uid, name, entity_type, description, vec)).fetchone()
        assert row is not None
        return row

    @overload
    def read_entities(self, query: None = None, *, user_id: str, k: int = 10) -> list[Entity]: ...

    @overload
    def read_entities(self, query: str, *, user_id: str, k: int = 10) -> list[Hit[Entity]]: ...

    def read_entities(self, query: str | None = None, *, user_id: str,
                      k: int = 10) -> list[Entity] | list[Hit[Entity]]:
        """Entities relevant to ``query`` as hits, or (no query) the most recently seen ones as rows.

        A hit's ``score`` is ``vector + keyword_weight x keyword``, absolute (see
        ``Table._similar``); ``signals["vector"]``: cosine similarity of "name (type):
        description" to the query; ``signals["keyword"]``: IDF coverage of the query's words.
        """
        return run(self.db, self.read_entities_op(query, user_id=user_id, k=k))

    def read_entities_op(self, query: str | None = None, *, user_id: str,
                         k: int = 10) -> Op[list[Entity] | list[Hit[Entity]]]:
        uid = self._uid(user_id)
        if query is not None:
            return (yield from self._similar_op("entity_memory", Entity, query, sql.SQL("user_id = %(uid)s"),
                                                {"uid": uid}, k=self._k(k)))
        rows: list[Entity] = yield Sql(_RECENT, (uid, self._k(k)), Entity, user=uid)
        return rows
