"""The DBA views of migration 005, read with plain SQL and through memory.store.views."""

from __future__ import annotations

import math
from typing import Iterator

import psycopg
import pytest
from psycopg import sql
from psycopg.rows import dict_row

from memory import HashEmbedder, MemoryManager, Settings
from memory.store import views
from memory.consolidation.monitor import status_for, usable_budget

MESSAGES = [("user", "The nightly export EXP-2291 failed on rpt-03."), ("assistant", "Which error did it report?"),
            ("user", "Disk quota exceeded, the volume has 500 GB."), ("assistant", "Lower the retention to 7 days."),
            ("user", "Done, thanks.")]


@pytest.fixture
def vmm(settings: Settings, fresh_schema: str) -> Iterator[MemoryManager]:
    """A manager on a schema of its own: table-wide views see only this test's rows."""
    mm = MemoryManager.open(settings.with_(schema=fresh_schema), embedder=HashEmbedder())
    yield mm
    mm.close()


@pytest.fixture
def other_path(pg_uri: str) -> Iterator[psycopg.Connection]:
    """A connection whose search_path does NOT include the agentmem schema: DBA's psql."""
    with psycopg.connect(pg_uri, autocommit=True, row_factory=dict_row) as conn:
        conn.execute("SET search_path TO public")
        yield conn


def select(conn: psycopg.Connection, schema: str, view: str, where: str = "", *params: object) -> list[dict]:
    stmt = sql.SQL("SELECT * FROM {}").format(sql.Identifier(schema, view)) + sql.SQL(where)  # type: ignore[arg-type]
    return conn.execute(stmt, params).fetchall()


def test_views_exist_after_migrating_an_empty_schema(vmm: MemoryManager, other_path: psycopg.Connection) -> None:
    names = {r["table_name"] for r in other_path.execute(
        "SELECT table_name FROM information_schema.views WHERE table_schema = %s", (vmm.db.schema,))}
    assert set(views.VIEWS) <= names
    for view in views.VIEWS:
        assert select(other_path, vmm.db.schema, view) is not None


def test_consolidation_status_from_any_search_path(vmm: MemoryManager, other_path: psycopg.Connection) -> None:
    s = vmm.db.schema
    vmm.write_messages([{"role": r, "content": c} for r, c in MESSAGES], user_id="ann", thread_id="t1")
    vmm.write_messages([{"role": "user", "content": "y" * 4001}], user_id="ann", thread_id="t2")
    vmm.write_messages([{"role": "user", "content": "hello"}], user_id="bob", thread_id="t1")
    res = vmm.summarize_conversation(thread_id="t1", user_id="ann", keep_recent=1)
    live = vmm.read_conversational_memory(thread_id="t1", user_id="ann")

    rows = {(r["user_id"], r["thread_id"]): r for r in select(other_path, s, "consolidation_status")}
    assert set(rows) == {("ann", "t1"), ("ann", "t2"), ("bob", "t1")}
    t1 = rows[("ann", "t1")]
    assert (t1["total_messages"], t1["summarized_messages"], t1["unsummarized_messages"], t1["summaries"]) == (
        len(MESSAGES), len(res.source_ids), len(live), 1)
    assert t1["oldest_unsummarized_at"] == live[0].created_at
    assert t1["est_unsummarized_tokens"] == math.ceil(sum(len(m.content) for m in live) / 4)
    # default window and thresholds are agentmem's defaults
    d = Settings()
    t2 = rows[("ann", "t2")]
    assert t2["est_unsummarized_tokens"] == 1001 and t2["context_window"] == d.default_context_window
    assert t2["monitor_status"] == status_for(1001 / usable_budget(None, d), d)
    # a session setting changes the window: 2048 -> usable 972 -> 103 % -> critical
    other_path.execute("SET agentmem.context_window = 2048")
    t2 = select(other_path, s, "consolidation_status", " WHERE user_id = %s AND thread_id = %s", "ann", "t2")[0]
    assert t2["monitor_status"] == "critical" and float(t2["est_usage_percent"]) == round(100 * 1001 / 972, 1)
    other_path.execute("SET agentmem.warning_threshold = 0.1; SET agentmem.critical_threshold = 0.2")
    other_path.execute("SET agentmem.context_window = 16384")
    t2 = select(other_path, s, "consolidation_status", " WHERE user_id = %s AND thread_id = %s", "ann", "t2")[0]
    assert t2["monitor_status"] == "ok"  # 1001 / 14591 = 6.9 %
    other_path.execute("SET agentmem.context_window = 8192")
    t2 = select(other_path, s, "consolidation_status", " WHERE user_id = %s AND thread_id = %s", "ann", "t2")[0]
    assert t2["monitor_status"] == "warning"  # 1001 / 6809 = 14.7 %


def test_status_through_the_library_uses_settings(vmm: MemoryManager) -> None:
    vmm.write_messages([{"role": "user", "content": "z" * 8000}], user_id="ann", thread_id="big")  # 2000 tokens
    s = vmm.settings
    for window in (2_000, 4_096, 32_768):
        row = views.consolidation_status(vmm.db, s, user_id="ann", context_window=window)[0]
        assert row.monitor_status == status_for(2000 / usable_budget(None, s.with_(default_context_window=window)), s)
    custom = s.with_(warning_threshold=0.01, critical_threshold=0.02)
    assert views.consolidation_status(vmm.db, custom, user_id="ann", context_window=32_768)[0].monitor_status == \
        "critical"


def test_summary_lineage(vmm: MemoryManager, other_path: psycopg.Connection) -> None:
    vmm.write_messages([{"role": r, "content": c} for r, c in MESSAGES], user_id="ann", thread_id="t1")
    res = vmm.summarize_conversation(thread_id="t1", user_id="ann", keep_recent=1)
    src = [m for m in vmm.read_thread(thread_id="t1", user_id="ann") if m.summary_id]
    [row] = select(other_path, vmm.db.schema, "summary_lineage")
    assert row["summary_id"] == res.summary.summary_id and row["label"] == res.summary.description
    assert row["source_rows"] == row["recorded_source_count"] == len(res.source_ids) and row["sources_intact"]
    assert (row["first_message_id"], row["last_message_id"]) == (src[0].id, src[-1].id)
    assert (row["first_message_at"], row["last_message_at"]) == (src[0].created_at, src[-1].created_at)
    assert row["source_tokens"] == res.source_tokens and row["method"] == res.method
    # a source row deleted behind consolidation's back shows up as not intact
    with vmm.db.connection() as conn:
        conn.execute("DELETE FROM conversational_memory WHERE id = %s", (src[0].id,))
    [lin] = views.summary_lineage(vmm.db, user_id="ann")
    assert lin.source_rows == len(src) - 1 and not lin.sources_intact


def test_table_sizes_counts_exactly(vmm: MemoryManager, other_path: psycopg.Connection) -> None:
    vmm.write_messages([{"role": r, "content": c} for r, c in MESSAGES], user_id="ann", thread_id="t1")
    vmm.write_knowledge("Invoices are generated monthly.", user_id="ann", source="billing.md")
    rows = {r["table_name"]: r for r in select(other_path, vmm.db.schema, "table_sizes")}
    for table in ("conversational_memory", "knowledge_memory", "summary_memory", "fact_memory", "tool_log"):
        exact = other_path.execute(sql.SQL("SELECT count(*) AS n FROM {}").format(
            sql.Identifier(vmm.db.schema, table))).fetchone()["n"]
        assert rows[table]["row_count"] == exact
    assert rows["conversational_memory"]["row_count"] == len(MESSAGES)
    assert rows["conversational_memory"]["rows_last_day"] == len(MESSAGES)
    assert rows["conversational_memory"]["total_bytes"] >= rows["conversational_memory"]["table_bytes"] > 0
    assert rows["schema_migrations"]["rows_last_day"] is None  # not dated by created_at
    lib = views.table_sizes(vmm.db)
    assert [t.total_bytes for t in lib] == sorted((t.total_bytes for t in lib), reverse=True)


def test_fact_history_chains(vmm: MemoryManager, other_path: psycopg.Connection) -> None:
    a = vmm.remember("preference", "I prefer tea in the morning", user_id="ann")
    b = vmm.remember("preference", "I prefer coffee in the morning", user_id="ann")
    c = vmm.remember("stable_fact", "Lives in Lisbon", user_id="ann")
    vmm.forget(c.fact.id, user_id="ann")
    assert b.action == "superseded"
    rows = select(other_path, vmm.db.schema, "fact_history", " ORDER BY chain_id, version")
    by_id = {r["fact_id"]: r for r in rows}
    assert by_id[a.fact.id]["status"] == "superseded" and by_id[a.fact.id]["version"] == 1
    assert by_id[a.fact.id]["superseded_by_content"] == "I prefer coffee in the morning"
    assert by_id[b.fact.id]["status"] == "active" and by_id[b.fact.id]["version"] == 2
    assert by_id[b.fact.id]["chain_id"] == a.fact.id
    assert by_id[c.fact.id]["status"] == "retired" and by_id[c.fact.id]["chain_id"] == c.fact.id
    assert len(rows) == 3


def test_memory_growth(vmm: MemoryManager, other_path: psycopg.Connection) -> None:
    vmm.write_messages([{"role": r, "content": c} for r, c in MESSAGES], user_id="ann", thread_id="t1")
    rows = select(other_path, vmm.db.schema, "memory_growth", " WHERE table_name = %s", "conversational_memory")
    assert sum(r["rows_added"] for r in rows) == len(MESSAGES)


def readme_examples() -> list[tuple[list[str], list[str]]]:
    """(statements, column headers) of each psql example in the README's DBA section."""
    from pathlib import Path

    text = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = text[text.index("## For DBAs"):]
    section = section[:section.index("\n## ", 1)]
    examples: list[tuple[list[str], list[str]]] = []
    statements: list[str] = []
    current: str | None = None
    for line in section.splitlines():
        if line.startswith("=> "):
            current = line[3:]
        elif current is not None and not current.endswith(";"):
            current += " " + line.strip()
        elif "|" in line and statements:
            examples.append((statements, [c.strip() for c in line.split("|")]))
            statements = []
        if current is not None and current.endswith(";"):
            statements.append(current)
            current = None
    return examples


def test_readme_documents_every_view_with_runnable_examples(mm: MemoryManager, sql_conn: psycopg.Connection) -> None:
    from pathlib import Path

    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    for view in views.VIEWS:
        assert f"`{view}`" in readme, view
    examples = readme_examples()
    assert len(examples) >= 3 and any("consolidation_status" in " ".join(s) for s, _ in examples)
    assert mm.db.schema == "agent_memory"  # the README's queries name the default schema
    with sql_conn.transaction():
        for statements, header in examples:
            for statement in statements:
                cur = sql_conn.execute(statement.encode())
            assert [d.name for d in cur.description] == header, statements[-1]
            sql_conn.execute("RESET agentmem.context_window")
