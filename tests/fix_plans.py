"""Reading the generic plans of the plan-free statements (``memory.tables.base.NO_SORT``)."""

from __future__ import annotations

from psycopg import sql

from memory import MemoryManager


def generic_plan(mm: MemoryManager, text: str, sort: str = "off") -> str:
    """``EXPLAIN (GENERIC_PLAN)`` of a statement text, with sorting on or off for it."""
    with mm.db.pool.connection() as conn:
        conn.execute(sql.SQL("SET LOCAL enable_sort = {}").format(sql.Literal(sort)))
        return "\n".join(r[0] for r in conn.execute("EXPLAIN (GENERIC_PLAN) " + text).fetchall())


def scans(plan: str, table: str) -> set[str]:
    """How a plan reads ``table``: each scan node on it by name, a bitmap index scan's with its index."""
    found = set()
    for line in plan.splitlines():
        node = line.split("  (")[0].strip(" ->")  # e.g. "Index Scan using t_pkey on t x"
        if node.startswith(f"Bitmap Index Scan on {table}_"):
            found.add("Bitmap Index Scan " + node.split(" on ")[1])
        elif "Scan" in node and (node.endswith(f" on {table}") or f" on {table} " in node):
            found.add(node.split(" on ")[0])
    return found
