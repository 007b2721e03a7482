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
import time
from datetime import datetime

import pytest
from psycopg import sql

from memory import MemoryManager, Settings
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
