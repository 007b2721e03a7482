"""A search is one round trip to the server, and a failure in it costs nothing else.

``memory.store.ops`` holds a search's settings back and sends BEGIN, the user scope
(row-level security), the HNSW settings, the statement and COMMIT together in psycopg's
pipeline mode. Round trips are counted from libpq's own trace of every pooled
connection: each ``ReadyForQuery`` the server sends ends one exchange the client waited
for (a simple query, or a pipeline up to its Sync).
"""

from __future__ import annotations

import asyncio
import os
import tempfile
import time
import uuid
from collections.abc import Iterator
from typing import Any

import psycopg
import pytest
from psycopg import sql

from memory import AgentMemError, HashEmbedder, MemoryManager, QueryTimeoutError
from memory.aio import AsyncMemoryManager, arun
from memory.store.ops import COMMIT, Op, Sql, run

from fix_search_shapes import analyze_messages, outnumbered

TURNS = ["I ran the Bergen marathon in October", "It rained the whole way along the harbour",
         "My pace was five minutes per kilometre", "Next year I want to run Oslo"]


class RoundTrips:
    """While active, trace every connection ``pool`` hands out (libpq's trace) and keep the messages."""

    def __init__(self, pool: Any) -> None:
        self.pool = pool
        self.lines: list[str] = []

    def __enter__(self) -> RoundTrips:
        self._file = tempfile.TemporaryFile(mode="w+")
        get, put = self.pool.getconn, self.pool.putconn

        def getconn(*a: Any, **kw: Any) -> Any:
            conn = get(*a, **kw)
            conn.pgconn.trace(self._file.fileno())
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
            return conn

        def putconn(conn: Any) -> None:
            conn.pgconn.untrace()
            put(conn)

        self.pool.getconn, self.pool.putconn = getconn, putconn
        return self

    def __exit__(self, *exc: object) -> None:
        del self.pool.getconn, self.pool.putconn  # the class's own methods again
        os.fsync(self._file.fileno())
        self._file.seek(0)
        self.lines = self._file.read().splitlines()
        self._file.close()

    @property
    def count(self) -> int:
        return sum(1 for line in self.lines if "\tReadyForQuery\t" in line)

    def sent(self) -> list[str]:
        """The statements the client sent (simple queries and the extended protocol's Parse), in order."""
        return [line for line in self.lines if line.startswith("F\t") and ("\tParse\t" in line or "\tQuery\t" in line)]


@pytest.fixture
def one_conn(settings: Any) -> Iterator[MemoryManager]:
    """A manager with a single pooled connection: whatever a call leaves on it, the next call gets."""
    mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1), embedder=HashEmbedder())
    yield mm
    mm.close()


def test_a_search_or_similarity_read_is_one_round_trip(mm: MemoryManager, user: str) -> None:
    mm.write_knowledge("Bergen is the rainiest city in Norway.", user_id=user)
    mm.write_entity("Bergen", "place", "a rainy city on the west coast", user_id=user)
    mm.write_messages([dict(role="user", content=t) for t in TURNS], user_id=user, thread_id="t")
    mm.search_memory("warm-up", user_id=user)  # the speaker names are cached from here on
    mm.search_memory("Bergen marathon", user_id=user)  # and this query's vector (see the next test)
    for similar, call in ((False, lambda: mm.search_memory("Bergen marathon", user_id=user)),
                          ("knowledge_stats", lambda: mm.read_knowledge("rain in Bergen", user_id=user)),
                          (True, lambda: mm.read_entities("rain", user_id=user)),
                          (True, lambda: mm.read_summary_memory("rain", user_id=user))):
        with RoundTrips(mm.db.pool) as trips:
            call()
        assert trips.count == 1, "\n".join(trips.lines)
        sent = trips.sent()
        # in this order, in one transaction: the scope the row-level policies read, the HNSW
        # settings (SET LOCAL, which Citus forwards) and the plan mode (a similarity read of rows
        # not seen yet is planned for its values; a search of a user known to be small asks for
        # the generic plan, unless the session chose a mode), the statement, the commit
        assert "BEGIN" in sent[0] and f"SET LOCAL agentmem.user_id = '{user}'" in sent[1], sent
        settings = [x for x in sent[2:-1] if "SET LOCAL" in x or "set_config('plan_cache_mode'" in x]
        assert sent[2:2 + len(settings)] == settings, sent  # the settings, then the statement
        assert any("hnsw.ef_search" in x for x in settings) and any("hnsw.iterative_scan" in x for x in settings)
        assert "COMMIT" in sent[-1], sent
        assert len(sent) - 3 - len(settings) in (0, 1), sent  # the statement is parsed once per connection
        if similar is True:  # planned for its values, whatever the connection prepared
            assert any("plan_cache_mode = force_custom_plan" in x for x in settings), sent
        elif similar:  # where the user's count is kept, the server picks by it
            assert any(similar in x and "set_config('plan_cache_mode'" in x for x in settings), sent
        else:  # seen by the warm-up: small
            assert any("force_generic_plan" in x for x in settings), sent
    assert mm.search_memory("Bergen marathon", user_id=user)[0].item.content == TURNS[0]


class Watching(HashEmbedder):
    """A hash embedder that, while it embeds a query, reads what the server is doing for the other
    connections: whether a search's keyword half has reached the server, and run, before the
    query's vector exists. That statement's text (the first 1 KB, as ``pg_stat_activity`` keeps
    it) is the only one reading the user's rows as ``SELECT m.id AS key, coalesce(``; a backend
    that has run a statement of a pipeline and waits for the next message is active in ``ClientRead``."""

    def __init__(self, conninfo: str) -> None:
        super().__init__()
        self.conninfo, self.seen = conninfo, []

    def embed(self, texts: list[str]) -> list[Any]:
        with psycopg.connect(self.conninfo, autocommit=True) as conn:
            for _ in range(200):  # until that statement has run, or 2 s
                row = conn.execute("SELECT state, wait_event FROM pg_stat_activity WHERE pid <> pg_backend_pid()"
                                   " AND strpos(query, 'SELECT m.id AS key, coalesce(') > 0").fetchone()
                if row == ("active", "ClientRead"):
                    break
                time.sleep(0.01)
            self.seen.append(row)
        return super().embed(texts)


def test_a_search_of_a_small_history_runs_its_keyword_half_while_the_query_is_embedded(settings: Any,
                                                                                       user: str) -> None:
    """One exchange when the query's vector is not known yet: BEGIN, the user scope, the settings
    and the keyword half go out before the model is called, and the server has run that statement
    by the time the model returns; the rest of the search (which needs the vector) and COMMIT go
    out right behind it, in the same pipeline, before the client reads a row."""
    watching = Watching(settings.database_url)
    mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1), embedder=watching)
    try:
        mm.write_messages([dict(role="user", content=t) for t in TURNS], user_id=user, thread_id="t")
        mm.search_memory("warm-up", user_id=user)  # the speaker names are cached from here on
        watching.seen.clear()
        with RoundTrips(mm.db.pool) as trips:
            hits = mm.search_memory("Bergen marathon", user_id=user)
        assert watching.seen == [("active", "ClientRead")]  # the keyword half had run on the server
        assert trips.count == 1, "\n".join(trips.lines)
        sent, got = "\n".join(trips.sent()), "\n".join(line for line in trips.lines if line.startswith("B\t"))
        # the transaction's opening (both statements read one state), then COMMIT at the end
        assert "BEGIN" in sent and f"SET LOCAL agentmem.user_id = '{user}'" in sent and "REPEATABLE READ" in sent
        assert "COMMIT" in trips.sent()[-1], sent
        # the keyword half: its best rows, and a head row with every row's score and the user's message
        # count; the rest: the nearest rows
        assert '"kw"' in got and '"pending"' in got and '"vs"' in got, got
        assert hits[0].item.content == TURNS[0]
        assert [(h.item.id, h.score) for h in hits] == \
            [(h.item.id, h.score) for h in mm.search_memory("Bergen marathon", user_id=user)]  # cached: one statement
    finally:
        mm.close()


def test_a_knowledge_read_of_a_large_store_sends_its_keyword_half_ahead_too(settings: Any, user: str) -> None:
    """read_knowledge of a store last seen above the switch point: one exchange for a query to embed
    as for one whose vector is cached (the keyword half goes out before the model, the rest, which
    reads the words' IDFs and the best passages by them that the keyword half handed over, right
    behind it); the same hits either way."""
    mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1, similar_exact_max_rows=4),
                            embedder=HashEmbedder())
    try:
        mm.write_knowledge_batch([{"content": f"{t} ({i})"} for i, t in enumerate(TURNS * 3)], user_id=user)
        mm.read_knowledge("warm-up", user_id=user)  # seen: 12 passages, above the switch point
        with RoundTrips(mm.db.pool) as sized:  # the first read of a large store reads the table's size
            mm.read_knowledge("warm-up again", user_id=user)
        assert sized.count == 2 and sum("pg_stat_get_live_tuples" in line for line in sized.sent()) == 1
        with RoundTrips(mm.db.pool) as trips:  # which it keeps for a while
            ahead = mm.read_knowledge("Bergen marathon", user_id=user)
        assert trips.count == 1, "\n".join(trips.lines)
        assert any('"idfs"' in line for line in trips.lines if line.startswith("B\t")), trips.lines
        assert "COMMIT" in trips.sent()[-1]
        with RoundTrips(mm.db.pool) as trips:
            cached = mm.read_knowledge("Bergen marathon", user_id=user)
        assert trips.count == 1
        assert ahead and [(h.item.id, h.score) for h in ahead] == [(h.item.id, h.score) for h in cached]
    finally:
        mm.close()


def test_several_queries_of_one_call_are_one_transaction_and_agree_with_one_each(mm: MemoryManager,
                                                                                 user: str) -> None:
    mm.write_messages([dict(role="user", content=t) for t in TURNS], user_id=user, thread_id="t")
    queries = ["Bergen marathon", "pace per kilometre", "Oslo next year"]
    many = mm.search_memory_many(queries, user_id=user, k=3)
    one = [mm.search_memory(q, user_id=user, k=3) for q in queries]
    assert [[(h.item.id, h.score) for h in hits] for hits in many] == \
        [[(h.item.id, h.score) for h in hits] for hits in one]
    assert many[0][0].item.content == TURNS[0]


def _timing_out(user: str) -> Op[Any]:
    """A pipelined transaction whose statement the server cancels."""
    yield Sql("SET LOCAL statement_timeout = 1", fetch="none", user=user)
    return (yield Sql("SELECT pg_sleep(0.5)", user=user, last=True))


def _bad_setting(user: str) -> Op[Any]:
    """A pipelined transaction whose held setting the server refuses."""
    yield Sql("SET LOCAL hnsw.ef_search = 0", fetch="none", user=user)
    return (yield Sql("SELECT 1", user=user, last=True))


def _assert_clean(mm: MemoryManager, user: str) -> None:
    """The one pooled connection is as the pool expects: in no transaction, not in autocommit,
    carrying none of the failed transaction's settings; and a search on it works."""
    with mm.db.connection() as conn:
        assert conn.autocommit is False
        timeout, ef, scope = conn.execute(
            "SELECT current_setting('statement_timeout'), current_setting('hnsw.ef_search'),"
            " current_setting('agentmem.user_id', true)").fetchone()
        assert conn.info.transaction_status == psycopg.pq.TransactionStatus.INTRANS  # psycopg opened one
        assert (timeout, ef, scope or "") == ("0", "40", "")  # the server's defaults
    assert mm.search_memory("Bergen marathon", user_id=user)[0].item.content == TURNS[0]


@pytest.mark.parametrize("op, error", [(_timing_out, QueryTimeoutError), (_bad_setting, AgentMemError)])
def test_a_failure_inside_a_pipelined_transaction_raises_and_leaves_the_connection_usable(
        one_conn: MemoryManager, user: str, op: Any, error: type[AgentMemError]) -> None:
    mm = one_conn
    mm.write_messages([dict(role="user", content=t) for t in TURNS], user_id=user, thread_id="t")
    with RoundTrips(mm.db.pool) as trips, pytest.raises(error) as raised:
        run(mm.db, op(user))
    assert isinstance(raised.value.__cause__, psycopg.Error)  # the driver's error, translated
    # it went through the pipeline: BEGIN as one of its statements (extended protocol), not
    # psycopg's own BEGIN (a simple query, a round trip of its own)
    assert any("\tParse\t" in line and "BEGIN" in line for line in trips.lines), trips.lines
    _assert_clean(mm, user)


def test_the_async_driver_pipelines_and_recovers_the_same_way(settings: Any, one_conn: MemoryManager,
                                                              user: str) -> None:
    one_conn.write_messages([dict(role="user", content=t) for t in TURNS], user_id=user, thread_id="t")

    async def go() -> tuple[list[Any], list[Any]]:
        amm = await AsyncMemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1),
                                            embedder=HashEmbedder())
        try:
            with pytest.raises(QueryTimeoutError):
                await arun(amm.adb, _timing_out(user))
            async with amm.adb.connection() as conn:
                assert conn.autocommit is False
                cur = await conn.execute("SELECT current_setting('statement_timeout')")
                assert await cur.fetchone() == ("0",)
            return await amm.search_memory("Bergen marathon", user_id=user), \
                one_conn.search_memory("Bergen marathon", user_id=user)
        finally:
            await amm.close()

    mine, sync = asyncio.run(go())
    assert [(h.item.id, h.score) for h in mine] == [(h.item.id, h.score) for h in sync]
    assert mine[0].item.content == TURNS[0]


def test_a_pipelined_search_reads_only_its_users_rows_under_row_level_security(settings: Any, pg_uri: str,
                                                                               user: str) -> None:
    """Through a role the policies apply to, the user scope sent in the pipeline is what lets a
    user see their own rows, and only theirs."""
    from memory.store.isolation import create_app_role

    owner = MemoryManager.open(settings, embedder=HashEmbedder())
    try:
        role = create_app_role(pg_uri, f"app_{uuid.uuid4().hex[:8]}", uuid.uuid4().hex, schema=owner.db.schema)
        other = f"other-{uuid.uuid4().hex[:8]}"
        owner.write_messages([dict(role="user", content=t) for t in TURNS], user_id=user, thread_id="t")
        owner.write_messages([dict(role="user", content="Bergen marathon: the other user's secret")],
                             user_id=other, thread_id="t")
        app = MemoryManager.open(settings, embedder=HashEmbedder(), conninfo=role.conninfo)
        try:
            app.search_memory("warm-up", user_id=user)  # the speaker names are cached from here on
            with RoundTrips(app.db.pool) as trips:
                mine = app.search_memory("Bergen marathon", user_id=user, k=10)
            assert trips.count == 1  # the keyword half sent while the query is embedded, the rest behind it
            assert mine and {h.item.content for h in mine} <= set(TURNS)
            theirs = app.search_memory("Bergen marathon", user_id=other, k=10)
            assert [h.item.content for h in theirs] == ["Bergen marathon: the other user's secret"]
        finally:
            app.close()
    finally:
        owner.close()


def _plans(mm: MemoryManager) -> tuple[int, int]:
    """(generic, custom) plans made of the prepared search statements on the one pooled connection."""
    with mm.db.connection() as conn:
        row = conn.execute("SELECT coalesce(sum(generic_plans), 0), coalesce(sum(custom_plans), 0)"
                           " FROM pg_prepared_statements WHERE statement LIKE 'WITH terms AS%'").fetchone()
    return int(row[0]), int(row[1])


@pytest.mark.parametrize("rows, small", [(len(TURNS), True), (20, False)])
def test_a_large_history_is_planned_for_its_values_a_small_one_generically_from_its_first_search(
        settings: Any, user: str, rows: int, small: bool) -> None:
    """A user's first search reads the user's message count with the speaker names, so it is
    planned as the history needs from the start: a small one by the generic plan at once (both
    statements of the exact shape in two), a large one's keyword half (key probes only, see
    test_search_size_hint) generically and what needs the vector for its values. From then on
    (the query's vector cached: one statement) a large history is planned anew each time (never
    PostgreSQL's generic plan, blind to its size), a small one by the generic plan, not after
    five plans of its own."""
    mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1, search_exact_max_rows=12),
                            embedder=HashEmbedder())
    forced = "SET LOCAL plan_cache_mode = force_custom_plan"
    try:
        outnumbered(mm, user, rows)  # not the plan-free statement of a user holding half the table
        mm.write_messages([dict(role="user", content=f"{TURNS[i % len(TURNS)]} ({i})") for i in range(rows)],
                          user_id=user, thread_id="t")
        with RoundTrips(mm.db.pool) as trips:
            first = mm.search_memory("Bergen marathon", user_id=user)
        assert sum(forced in line for line in trips.sent()) == (0 if small else 1)
        assert _plans(mm) == ((2, 0) if small else (1, 1))
        with RoundTrips(mm.db.pool) as trips:
            again = [mm.search_memory("Bergen marathon", user_id=user) for _ in range(7)]
        assert sum(forced in line for line in trips.sent()) == (0 if small else 7)
        assert _plans(mm) == ((9, 0) if small else (1, 8))
        assert all([(h.item.id, h.score) for h in hits] == [(h.item.id, h.score) for h in first] for hits in again)
    finally:
        mm.close()


@pytest.mark.parametrize("holds_half", [False, True])
def test_a_search_of_a_large_history_is_one_round_trip_its_plan_settings_behind_the_embedding(
        settings: Any, fresh_schema: str, user: str, holds_half: bool) -> None:
    """The indexed shape in two statements runs its keyword half on the generic plan, and what needs
    the vector for its values, or, for a user holding half of the messages table, unplanned with
    sorting off: either setting goes out with the second statement, behind the embedding in the
    first one's pipeline, not as an exchange of its own. Both find what the one statement (the
    query's vector cached) finds."""
    mm = MemoryManager.open(settings.with_(schema=fresh_schema, pool_min_size=1, pool_max_size=1,
                                           search_exact_max_rows=4), embedder=HashEmbedder())
    try:
        if holds_half:
            mm.write_messages([dict(role="user", content="a neighbour's line")], user_id=f"{user}-n", thread_id="t")
        else:
            outnumbered(mm, user, len(TURNS) * 3)
        mm.write_messages([dict(role="user", content=f"{t} ({i})") for i, t in enumerate(TURNS * 3)],
                          user_id=user, thread_id="t")
        if holds_half:
            analyze_messages(mm)
        with RoundTrips(mm.db.pool) as warm:  # seen: 12 messages, above the switch point
            mm.search_memory("warm-up", user_id=user)
        with RoundTrips(mm.db.pool) as trips:
            hits = mm.search_memory("Bergen marathon", user_id=user)
        # the table's size is read by a statement of its own, and then kept for a while
        assert [sum("pg_stat_get_live_tuples" in line for line in t.sent()) for t in (warm, trips)] == [1, 0]
        assert trips.count == 1, "\n".join(trips.lines)
        assert any('"idfs"' in line for line in trips.lines if line.startswith("B\t"))  # the indexed keyword half
        sent = trips.sent()
        custom = [line for line in sent if "plan_cache_mode = force_custom_plan" in line]
        unsorted = [line for line in sent if "enable_sort = off" in line]
        assert (bool(custom), bool(unsorted)) == (not holds_half, holds_half), sent
        assert all("\tParse\t" in line for line in custom + unsorted), sent  # statements of the pipeline
        assert "COMMIT" in sent[-1], sent
        assert hits[0].item.content.startswith(TURNS[0])
        assert [(h.item.id, h.score) for h in hits] == \
            [(h.item.id, h.score) for h in mm.search_memory("Bergen marathon", user_id=user)]  # one statement
    finally:
        mm.close()


def _held_in_open_transaction(user: str, channel: str, end: str) -> Op[Any]:
    """A transaction that holds statements once it is open: a setting for the statement after it,
    and a NOTIFY (delivered only if the transaction that ran it commits) before its end."""
    yield Sql("SELECT 1", fetch="one", user=user)  # opens the transaction
    yield Sql("SET LOCAL statement_timeout = 4321", fetch="none", user=user)
    got = yield Sql("SELECT current_setting('statement_timeout')", fetch="one", user=user, last=end == "last")
    if end != "last":
        yield Sql("SELECT 2 AS again", fetch="one", user=user)
        yield Sql(sql.SQL("NOTIFY {}, 'held'").format(sql.Identifier(channel)), fetch="none", user=user)
        if end == "commit":
            yield COMMIT
    return got[0]


@pytest.mark.parametrize("end", ["last", "commit", "return"])
@pytest.mark.parametrize("driver", ["sync", "async"])
def test_a_statement_held_in_an_open_transaction_goes_out_before_the_next_one_or_the_commit(
        settings: Any, pg_uri: str, user: str, driver: str, end: str) -> None:
    """Both drivers: a held statement in an open transaction takes effect for the statement after
    it, and one left when the transaction ends still runs in it, before its commit."""
    channel = f"held_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(pg_uri, autocommit=True) as listener:
        listener.execute(sql.SQL("LISTEN {}").format(sql.Identifier(channel)))
        if driver == "sync":
            mm = MemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1), embedder=HashEmbedder())
            try:
                got = run(mm.db, _held_in_open_transaction(user, channel, end))
            finally:
                mm.close()
        else:
            async def go() -> Any:
                amm = await AsyncMemoryManager.open(settings.with_(pool_min_size=1, pool_max_size=1),
                                                    embedder=HashEmbedder())
                try:
                    return await arun(amm.adb, _held_in_open_transaction(user, channel, end))
                finally:
                    await amm.close()

            got = asyncio.run(go())
        assert got == "4321ms"
        notes = [n.payload for n in listener.notifies(timeout=1.0, stop_after=1)] if end != "last" else []
    assert notes == ([] if end == "last" else ["held"])
