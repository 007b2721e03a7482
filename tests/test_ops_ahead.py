"""``Ahead`` with ``then``, on both drivers: the statements that need the call's result go out right
behind it, in the first statements' pipeline, before any of their rows is read; they run in the same
transaction (they see what the first statements set), and a ``last`` one ends it.

The first statement sleeps on the server; the call is instant. The statements after it are made
(``then``) while the server still sleeps: the client did not wait for the first statement's rows.
Without pipelining (``PIPELINE`` off, an older libpq) they are made after the first statement's rows
came back, and still run in its transaction.
"""

from __future__ import annotations

import asyncio
import os
import threading
import time
from contextlib import ExitStack
from datetime import datetime

import pytest
from psycopg import sql

from memory import MemoryManager, Settings
from memory.errors import AgentMemError
from memory.aio import AsyncMemoryManager, arun
from memory.retrieval.embeddings import HashEmbedder
from memory.store import ops
from memory.store.ops import Ahead, Call, Sql, run

SLEEP = 0.4
FIRST = sql.SQL("SELECT set_config('agentmem.ahead_test', 'handed over', true) AS handed, pg_sleep(%s),"
                " clock_timestamp() AS done")
AFTER = sql.SQL("SELECT current_setting('agentmem.ahead_test', true) AS seen, %s::text AS made_from")
SETTING = sql.SQL("SELECT current_setting('agentmem.ahead_test', true) AS seen")


def ahead_op(user: str, made: list[float]):
    def then(called: str) -> list[Sql]:
        made.append(time.time())
        return [Sql(sql.SQL("SET LOCAL statement_timeout = '5s'"), fetch="none", user=user),  # a held one, in its place
                Sql(AFTER, (called,), dict, "one", user, last=True)]

    called, rows = yield Ahead((Sql(FIRST, (SLEEP,), dict, "one", user),), Call(lambda: "the call's result"), then)
    return called, rows


def check(result, made: list[float], pipelined: bool) -> None:
    called, (first, after) = result
    assert called == "the call's result"
    assert first["handed"] == "handed over" and isinstance(first["done"], datetime)
    # the statement after the call ran in the first's transaction, and was made from the call's result
    assert after == {"seen": "handed over", "made_from": "the call's result"}
    [at] = made
    if pipelined:  # made while the server was still running the first statement (its clock, this machine's)
        assert at < first["done"].timestamp() - SLEEP / 2, (at, first["done"].timestamp())
    else:
        assert at >= first["done"].timestamp()


@pytest.mark.parametrize("pipelined", [True, False])
def test_the_statements_after_the_call_go_out_behind_it_in_the_same_transaction(
        mm: MemoryManager, user: str, pipelined: bool, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(ops, "PIPELINE", pipelined and ops.PIPELINE)
    made: list[float] = []
    check(run(mm.db, ahead_op(user, made)), made, pipelined and ops.PIPELINE)
    # the last of them ended the transaction: its setting is gone, and the connection is back in the pool
    with mm.db.connection(user) as conn:
        assert conn.execute(SETTING).fetchone()[0] in (None, "")
    assert mm.db.pool.get_stats()["pool_available"] >= 1


@pytest.mark.parametrize("pipelined", [True, False])
def test_the_async_driver_sends_them_the_same_way(settings: Settings, user: str, pipelined: bool,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    import memory.aio as aio

    monkeypatch.setattr(aio, "PIPELINE", pipelined and aio.PIPELINE)

    async def scenario() -> None:
        async with await AsyncMemoryManager.open(settings.with_(pool_max_size=1), embedder=HashEmbedder()) as amm:
            made: list[float] = []
            check(await arun(amm.adb, ahead_op(user, made)), made, pipelined and ops.PIPELINE)
            async with amm.adb.pool.connection() as conn:  # the only connection: the transaction was ended
                cur = await conn.execute(SETTING)
                assert (await cur.fetchone())[0] in (None, "")

    asyncio.run(scenario())


# After idle time the first statements go out from a helper thread while the call runs (``ops.SENDER``);
# back to back the caller sends them itself. Either way: the same results, errors and transaction.

@pytest.fixture(params=["after idle time", "back to back"])
def regime(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The time since the process's last ``Ahead`` step, set for the step the test runs: long (the helper
    thread sends) or none (the caller does)."""
    monkeypatch.setattr(ops.SENDER, "ended", float("-inf") if request.param == "after idle time" else time.monotonic())
    monkeypatch.setattr(ops, "IDLE_S", 3600.0)  # so a slow test machine cannot make "back to back" idle
    return str(request.param)


def sending_threads(monkeypatch: pytest.MonkeyPatch) -> dict[str, set[str]]:
    """The threads each statement's text (its first 30 characters) was sent from, filled as they go out."""
    seen: dict[str, set[str]] = {}
    plain = ops.prepare

    def recording(q: Sql) -> bool | None:
        text = q.stmt if isinstance(q.stmt, str) else q.stmt.as_string()  # a raw statement is text already
        seen.setdefault(text[:30], set()).add(threading.current_thread().name)
        return plain(q)

    monkeypatch.setattr(ops, "prepare", recording)
    return seen


def test_after_idle_time_the_first_statements_are_sent_beside_the_call(
        mm: MemoryManager, user: str, regime: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = sending_threads(monkeypatch)
    made: list[float] = []
    check(run(mm.db, ahead_op(user, made)), made, ops.PIPELINE)
    first, after = seen[FIRST.as_string()[:30]], seen[AFTER.as_string()[:30]]
    caller = {threading.current_thread().name}
    assert after == caller  # the statements made from the call's result: always the caller's
    if regime == "after idle time":
        assert len(first) == 1 and first != caller and next(iter(first)).startswith("agentmem-send")
    else:
        assert first == caller
    assert ops.SENDER.ended > time.monotonic() - 60  # the step's end is kept for the next one


def test_a_search_returns_the_same_hits_whichever_thread_sent_its_first_statements(
        settings: Settings, user: str, monkeypatch: pytest.MonkeyPatch) -> None:
    seen = sending_threads(monkeypatch)
    monkeypatch.setattr(ops, "IDLE_S", 3600.0)
    hits, senders = {}, {}
    # no vector cache: every search embeds its query, so its keyword half goes out ahead of the model
    with MemoryManager.open(settings.with_(embedding_cache_size=0, pool_max_size=2), embedder=HashEmbedder()) as mm:
        mm.write_messages([{"role": "user", "content": text} for text in (
            "I moved to Bergen in March", "my sister runs the Oslo marathon", "the office is in Bryggen now",
            "we adopted a cat called Pepper", "the Bergen rain never stops")], user_id=user, thread_id="t")
        for regime, ended in (("after idle time", float("-inf")), ("back to back", time.monotonic())):
            seen.clear()
            monkeypatch.setattr(ops.SENDER, "ended", ended)
            hits[regime] = [(h.item.id, h.score) for h in mm.search_memory("where does she live, Bergen?",
                                                                          user_id=user, k=3)]
            senders[regime] = set().union(*seen.values())
    caller = threading.current_thread().name
    assert any(name.startswith("agentmem-send") for name in senders["after idle time"]), senders
    assert senders["back to back"] == {caller}
    assert hits["after idle time"] == hits["back to back"] and len(hits["back to back"]) == 3


class CallFailed(Exception):
    pass


def failing_op(user: str, first: sql.Composable, params: tuple, call_fails: bool):
    def call() -> str:
        if call_fails:
            raise CallFailed("the model failed")
        return "made"

    yield Ahead((Sql(sql.SQL("SELECT set_config('agentmem.ahead_test', 'handed over', true)"), fetch="one", user=user),
                 Sql(first, params, fetch="one", user=user)), Call(call),
                lambda _: [Sql(AFTER, ("x",), dict, "one", user, last=True)])


@pytest.mark.parametrize("failing", ["the call", "a statement on the server", "a statement's parameters"])
def test_a_failure_beside_the_helper_thread_rolls_back_and_gives_the_connection_back(
        mm: MemoryManager, user: str, regime: str, failing: str) -> None:
    first, params = {"the call": (SETTING, None), "a statement on the server": (sql.SQL("SELECT 1 / %s"), (0,)),
                     "a statement's parameters": (sql.SQL("SELECT %s::text"), (object(),))}[failing]
    expected: type[BaseException] = CallFailed if failing == "the call" else AgentMemError
    with pytest.raises(expected):
        run(mm.db, failing_op(user, first, params, call_fails=failing == "the call"))
    # every connection is back in the pool, usable, and holds nothing of the failed transaction
    stats = mm.db.pool.get_stats()
    assert stats["pool_available"] == stats["pool_size"]
    with ExitStack() as held_all:
        conns = [held_all.enter_context(mm.db.connection(user)) for _ in range(stats["pool_size"])]
        assert [conn.execute(SETTING).fetchone()[0] in (None, "") for conn in conns] == [True] * len(conns)


def test_a_forked_child_sends_from_a_helper_thread_of_its_own() -> None:
    sender = ops._Sender()
    assert sender.submit(lambda: None).result(timeout=10) is None  # the parent's helper thread exists now
    pid = os.fork()
    if pid == 0:  # the child: the parent's helper thread did not come along; a new one must run the send
        ran = threading.Event()
        sending = sender.submit(ran.set)
        os._exit(0 if sending is not None and ran.wait(10) else 1)
    _, status = os.waitpid(pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
