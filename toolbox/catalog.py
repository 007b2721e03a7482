"""Read-only view of the stored tool catalogue (``toolbox_memory``), for the CLI.

A :class:`~toolbox.Toolbox` can only retrieve and run the tools its own process
registered: it holds the functions. The ``agentmem tools`` command is a process of
its own with no functions, so it reads the rows every process of a deployment has
stored in ``toolbox_memory`` instead: what is described there, per namespace.
Searching ranks those rows as :meth:`Toolbox.retrieve` does (the same index over the
stored embeddings and texts, ``index.py``), over every stored tool of the namespace.
Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from psycopg.rows import class_row

from memory import MemoryManager
from memory.retrieval.hits import Hit
from memory.store.validation import check_id, check_positive_int, check_text

from . import store
from .index import IndexedTool, ToolIndex
from .ranking import rank_many


@dataclass
class StoredTool:
    namespace: str
    name: str
    description: str
    parameters: list[str]
    augmented: bool
    queries: int
    updated_at: datetime


_LIST = ("SELECT namespace, name, description,"
         " coalesce(ARRAY(SELECT jsonb_object_keys(coalesce(json_schema -> 'properties', jsonb_build_object())))"
         ", ARRAY[]::text[]) AS parameters,"
         " augmented, jsonb_array_length(queries) AS queries, updated_at FROM toolbox_memory")


def list_tools(mm: MemoryManager, namespace: str | None = None) -> list[StoredTool]:
    """Stored tools (of one namespace, or all), by namespace and name."""
    with mm.db.connection() as conn, conn.cursor(row_factory=class_row(StoredTool)) as cur:
        if namespace is None:
            return cur.execute(_LIST + " ORDER BY namespace, name").fetchall()
        ns = check_id(namespace, "namespace")
        return cur.execute(_LIST + " WHERE namespace = %s ORDER BY name", (ns,)).fetchall()


def search_tools(mm: MemoryManager, query: str, namespace: str = "default", k: int = 5) -> list[Hit[StoredTool]]:
    """The ``k`` stored tools of ``namespace`` most relevant to ``query``, as hits (ranked like ``retrieve``)."""
    query = check_text(query, "query", max_chars=mm.settings.max_content_chars)
    k = check_positive_int(k, "k", maximum=1000)
    ns = check_id(namespace, "namespace")
    tools = {t.name: t for t in list_tools(mm, ns)}
    rows = [r for r in store.fetch_many(mm.db, ns) if r.name in tools]
    if not rows:
        return []
    index = ToolIndex([IndexedTool(r.name, r.description, r.json_schema, list(r.queries), r.category, r.embedding)
                       for r in rows])
    return [Hit(tools[rows[position].name], score, signals)
            for position, score, signals in rank_many(index, mm.embeddings, [query], k)[0]]
