"""AgentMemStore against LangGraph's own InMemoryStore, and inside a LangGraph graph.

The differential test runs the same random sequence of store operations (hypothesis) on
both stores, on a schema of its own (cross-user searches and listings see every item of
the schema): get, put, delete, filtered search, semantic search scores, namespace
listings, and TTL. InMemoryStore has no TTL, so the test expires its items itself on
the same clock (an item lives while its expiry is later than now; a read that returns
it starts its TTL again), which is what AgentMemStore must do in SQL. InMemoryStore also
keeps listing a namespace after its last item is gone (and one a get merely looked
into); the model lists the namespaces that hold items, as LangGraph's PostgresStore does.
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest
from hypothesis import HealthCheck, given, settings as hsettings, strategies as st
from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage, HumanMessage
from langgraph.graph import END, START, MessagesState, StateGraph
from langgraph.store.base import BaseStore, PutOp, SearchOp
from langgraph.store.memory import InMemoryStore

from fix_schemas import own_schema_manager
from memory import AccessDeniedError, InvalidInputError, create_app_role
from memory.integrations.langgraph_store import AgentMemStore, StoreNamespaceError

TEXTS = ["the cat sleeps on the sofa", "invoice overdue for march", "python asyncio event loop",
         "hiking boots for winter", "the dog chases the cat"]
FILTERS = [None, {"tag": "red"}, {"n": {"$gt": 2}}, {"n": {"$lte": 3}}, {"meta": {"lang": "en"}},
           {"tag": {"$ne": "red"}}, {"missing": None}, {"n": 3}, {"tag": "red", "n": {"$gte": 1}},
           {"meta": {"lang": {"$eq": "fr"}}}, {"n": {"$gt": 1, "$lt": 4}}, {"color": {"$ne": "green"}},
           {"color": None}, {"color": {"$ne": None}}]


@pytest.fixture(scope="module")
def store_mm(settings, pg_uri):
    with own_schema_manager(settings, pg_uri, "lgstore") as manager:
        yield manager


class Clock:
    def __init__(self) -> None:
        self.now = datetime(2030, 1, 1, tzinfo=timezone.utc)

    def __call__(self) -> datetime:
        return self.now


def _embed_like(mm):
    """InMemoryStore's embedding function: agentmem's very embedder, so scores must agree."""
    return lambda texts: [[float(x) for x in v] for v in mm.embeddings.embed(list(texts))]


values = st.fixed_dictionaries(
    {"text": st.sampled_from(TEXTS), "n": st.integers(0, 5), "tag": st.sampled_from(["red", "blue"])},
    optional={"meta": st.fixed_dictionaries({"lang": st.sampled_from(["en", "fr"])}),
              "color": st.sampled_from(["green", "grey"])})
namespaces = st.tuples(st.sampled_from([0, 1]), st.sampled_from(["docs", "notes"]),
                       st.sampled_from([None, "x", "y"]))
keys = st.sampled_from(["k1", "k2", "k3"])
prefix_specs = st.sampled_from([(), (0,), (1,), (0, "docs"), (1, "notes"), (0, "docs", "x"), (0, "*"),
                                ("*", "docs")])
ops = st.one_of(
    st.tuples(st.just("put"), namespaces, keys, values, st.sampled_from([None, None, 1.0, 5.0])),
    st.tuples(st.just("delete"), namespaces, keys),
    st.tuples(st.just("get"), namespaces, keys, st.booleans()),
    st.tuples(st.just("search"), st.sampled_from([(), (0,), (1,), (0, "docs"), (1, "notes", "y")]),
              st.sampled_from(FILTERS), st.sampled_from([None, None, "cat", "invoice march", "winter boots"])),
    st.tuples(st.just("list"), prefix_specs, st.sampled_from([(), ("x",), ("*", "y"), ("docs",)]),
              st.sampled_from([None, 1, 2]), st.sampled_from([(100, 0), (2, 0), (2, 1)])),
    st.tuples(st.just("tick"), st.sampled_from([0.6, 3.0, 10.0])),
)


class Model:
    """InMemoryStore plus the expiry LangGraph leaves to the backend."""

    def __init__(self, store: InMemoryStore, clock: Clock) -> None:
        self.store, self.clock = store, clock
        self.expiry: dict[tuple[tuple[str, ...], str], tuple[datetime, float]] = {}
        self.live: set[tuple[tuple[str, ...], str]] = set()

    def delete(self, ns, key) -> None:
        self.store.delete(ns, key)
        self.expiry.pop((ns, key), None)
        self.live.discard((ns, key))

    def list_namespaces(self, *, prefix, suffix, max_depth, limit, offset) -> list[tuple[str, ...]]:
        """InMemoryStore's matching of prefix and suffix, over the namespaces that hold items."""
        matched = self.store.list_namespaces(prefix=prefix, suffix=suffix, limit=10**6)
        held = {ns for ns, _ in self.live}
        found = [ns for ns in matched if ns in held]
        if max_depth is not None:
            found = sorted({ns[:max_depth] for ns in found})
        return found[offset:offset + limit]

    def expire(self) -> None:
        for (ns, key), (at, _) in list(self.expiry.items()):
            if at <= self.clock.now:
                self.delete(ns, key)

    def touched(self, items: list[Any]) -> None:
        for item in items:
            entry = self.expiry.get((item.namespace, item.key))
            if entry:
                self.expiry[(item.namespace, item.key)] = (self.clock.now + timedelta(minutes=entry[1]), entry[1])

    def put(self, ns, key, value, ttl) -> None:
        self.store.put(ns, key, value)
        self.live.add((ns, key))
        self.expiry.pop((ns, key), None)
        if ttl:
            self.expiry[(ns, key)] = (self.clock.now + timedelta(minutes=ttl), ttl)


def _brief(items) -> list[tuple[tuple[str, ...], str, Any]]:
    return sorted((i.namespace, i.key, i.value) for i in items)


@hsettings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture,
                                                                  HealthCheck.too_slow])
@given(st.lists(ops, min_size=1, max_size=25))
def test_same_results_as_langgraphs_in_memory_store(store_mm, sequence):
    with psycopg.connect(store_mm.db.conninfo, autocommit=True) as conn:  # this schema is the test's own
        conn.execute(psycopg.sql.SQL("DELETE FROM {}.store_memory").format(psycopg.sql.Identifier(store_mm.db.schema)))
    users = [f"u{uuid.uuid4().hex[:8]}", f"v{uuid.uuid4().hex[:8]}"]
    clock = Clock()
    ours = AgentMemStore(store_mm, index={"fields": ["text"]}, clock=clock)
    model = Model(InMemoryStore(index={"dims": store_mm.db.dimension, "embed": _embed_like(store_mm),
                                       "fields": ["text"]}), clock)

    def ns_of(spec):
        return tuple(x for x in (users[spec[0]],) + spec[1:] if x is not None)

    def prefix_of(spec):
        return tuple(users[x] if isinstance(x, int) else x for x in spec)

    for op in sequence:
        kind = op[0]
        if kind == "put":
            _, spec, key, value, ttl = op
            ours.put(ns_of(spec), key, value, ttl=ttl)
            model.put(ns_of(spec), key, value, ttl)
        elif kind == "delete":
            ours.delete(ns_of(op[1]), op[2])
            model.delete(ns_of(op[1]), op[2])
        elif kind == "get":
            _, spec, key, refresh = op
            got, want = ours.get(ns_of(spec), key, refresh_ttl=refresh), model.store.get(ns_of(spec), key)
            assert (got is None) == (want is None), op
            if want is not None:
                assert (got.namespace, got.key, got.value) == (want.namespace, want.key, want.value)
                if refresh:
                    model.touched([want])
        elif kind == "search":
            _, spec, filt, query = op
            got = ours.search(prefix_of(spec), filter=filt, query=query, limit=100)
            want = model.store.search(prefix_of(spec), filter=filt, query=query, limit=100)
            assert _brief(got) == _brief(want), op
            if query:
                mine = {(i.namespace, i.key): i.score for i in got}
                for i in want:
                    assert mine[(i.namespace, i.key)] == pytest.approx(i.score, abs=1e-4)
                scores = [i.score for i in got]
                assert scores == sorted(scores, reverse=True)
            model.touched(want)
        elif kind == "list":
            _, prefix, suffix, depth, (limit, offset) = op
            kwargs: dict[str, Any] = dict(max_depth=depth, limit=limit, offset=offset)
            got = ours.list_namespaces(prefix=prefix_of(prefix) or None, suffix=suffix or None, **kwargs)
            want = model.list_namespaces(prefix=prefix_of(prefix) or None, suffix=suffix or None, **kwargs)
            assert got == want, op
        else:
            clock.now += timedelta(minutes=op[1])
            model.expire()


@pytest.mark.parametrize("filt", FILTERS[1:] + [{"meta": {}}, {"meta": {"lang": {"$ne": "en"}}}, {"n": 3.0},
                                                {"list": [1, 2]}, {"list": {"$eq": [1]}}, {"meta": "en"}])
def test_each_filter_selects_what_in_memory_store_selects(mm, user, filt):
    """Every filter form on items that have, lack or differ in each field (the random test may miss a case)."""
    items = [{"text": "a", "n": 0, "tag": "red"}, {"text": "b", "n": 3, "tag": "blue", "color": "green"},
             {"text": "c", "n": 5, "tag": "red", "color": None, "meta": {"lang": "en"}},
             {"text": "d", "n": 2, "tag": "red", "color": "grey", "meta": {"lang": "fr"}, "list": [1, 2]},
             {"text": "e", "n": 3.5, "tag": "blue", "meta": {}, "list": [1]}]
    ours, theirs = AgentMemStore(mm), InMemoryStore()
    for i, value in enumerate(items):
        ours.put((user, "f"), f"k{i}", value)
        theirs.put((user, "f"), f"k{i}", value)
    want = sorted(i.key for i in theirs.search((user,), filter=filt, limit=50))
    assert sorted(i.key for i in ours.search((user,), filter=filt, limit=50)) == want


def test_an_item_past_its_ttl_is_gone_and_one_read_in_time_lives_on(store_mm, user):
    clock = Clock()
    store = AgentMemStore(store_mm, clock=clock)
    store.put((user, "a"), "short", {"v": 1}, ttl=1.0)
    store.put((user, "a"), "kept", {"v": 2}, ttl=1.0)
    store.put((user, "a"), "forever", {"v": 3})
    clock.now += timedelta(seconds=50)
    assert store.get((user, "a"), "kept") is not None  # refreshes: lives until 1:50
    assert store.get((user, "a"), "short", refresh_ttl=False) is not None  # no refresh: still due at 1:00
    clock.now += timedelta(seconds=20)
    assert store.get((user, "a"), "short") is None
    assert {i.key for i in store.search((user,))} == {"kept", "forever"}
    assert store.list_namespaces(prefix=(user,)) == [(user, "a")]
    clock.now += timedelta(minutes=2)
    assert {i.key for i in store.search((user,))} == {"forever"}


def test_expired_items_are_purged_and_searches_refresh_their_ttl(mm, user, sql_conn):
    clock = Clock()
    store = AgentMemStore(mm, clock=clock, ttl={"default_ttl": 10.0})
    store.put((user, "m"), "a", {"x": 1})
    store.put((user, "m"), "b", {"x": 2}, ttl=None)
    clock.now += timedelta(minutes=9)
    assert [i.key for i in store.search((user, "m"), filter={"x": 1})] == ["a"]  # refreshed to 19 min
    clock.now += timedelta(minutes=9)
    assert store.get((user, "m"), "a") is not None
    rows = sql_conn.execute("SELECT key, expires_at FROM store_memory WHERE user_id = %s ORDER BY key",
                            (user,)).fetchall()
    assert rows == [("a", clock.now + timedelta(minutes=10)), ("b", None)]
    counts = mm.purge_expired(now=clock.now + timedelta(minutes=11))
    assert counts["store_memory"] >= 1
    assert sql_conn.execute("SELECT key FROM store_memory WHERE user_id = %s", (user,)).fetchall() == [("b",)]


def test_semantic_ranking_matches_in_memory_store_with_minilm(real_mm, user):
    docs = {"pets": "My cat likes to sleep on the warm windowsill", "tax": "The quarterly VAT return is due in April",
            "trip": "We are hiking in the Alps next summer", "code": "A Python generator yields values lazily"}
    ours = AgentMemStore(real_mm, index={"fields": ["text"]})
    theirs = InMemoryStore(index={"dims": 384, "embed": _embed_like(real_mm), "fields": ["text"]})
    for key, text in docs.items():
        ours.put((user, "docs"), key, {"text": text})
        theirs.put((user, "docs"), key, {"text": text})
    for query, best in [("kitten napping", "pets"), ("paying sales tax", "tax"), ("mountain holiday", "trip"),
                        ("lazy iteration in python", "code")]:
        got = ours.search((user, "docs"), query=query, limit=4)
        want = theirs.search((user, "docs"), query=query, limit=4)
        assert [i.key for i in got] == [i.key for i in want]
        assert got[0].key == best
        assert [i.score for i in got] == pytest.approx([i.score for i in want], abs=1e-4)


def test_items_of_several_fields_rank_by_their_best_field_and_unindexed_ones_come_last(mm, user):
    store = AgentMemStore(mm, index={"fields": ["title", "tags[*]"]})
    store.put((user, "n"), "a", {"title": "invoice march", "tags": ["billing", "overdue"]})
    store.put((user, "n"), "b", {"title": "garden", "tags": ["roses", "tulips"]})
    store.put((user, "n"), "c", {"title": "tulips"}, index=False)
    hits = store.search((user, "n"), query="tulips", limit=10)
    assert [h.key for h in hits] == ["b", "a", "c"]
    assert hits[0].score == pytest.approx(1.0, abs=1e-5) and hits[2].score is None


def test_a_put_replaces_the_items_vectors(mm, user, sql_conn):
    store = AgentMemStore(mm, index={"fields": ["text"]})
    store.put((user, "n"), "a", {"text": "red apples"})
    store.put((user, "n"), "a", {"other": "no text now"})
    assert sql_conn.execute("SELECT count(*) FROM store_vectors WHERE user_id = %s", (user,)).fetchone() == (0,)
    assert store.search((user, "n"), query="red apples")[0].score is None


def test_reads_in_a_batch_see_the_store_before_its_puts(mm, user):
    store = AgentMemStore(mm)
    store.put((user, "n"), "a", {"v": 0})
    results = store.batch([PutOp((user, "n"), "a", {"v": 1}), SearchOp((user,), filter={"v": 0}),
                           PutOp((user, "n"), "a", {"v": 2})])
    assert [i.value for i in results[1]] == [{"v": 0}]
    assert store.get((user, "n"), "a").value == {"v": 2}


def test_without_a_query_the_most_recently_updated_come_first_and_pages_follow(mm, user):
    store = AgentMemStore(mm)
    for k in "abcde":
        store.put((user, "p"), k, {"k": k})
    store.put((user, "p"), "b", {"k": "b2"})
    assert [i.key for i in store.search((user,), limit=10)] == ["b", "e", "d", "c", "a"]
    assert [i.key for i in store.search((user,), limit=2, offset=2)] == ["d", "c"]


def test_the_namespace_names_the_user_and_bad_input_is_refused(mm, user, sql_conn):
    store = AgentMemStore(mm, user_at=1)
    store.put(("memories", user), "k", {"v": 1})
    assert sql_conn.execute("SELECT user_id, namespace FROM store_memory WHERE user_id = %s",
                            (user,)).fetchall() == [(user, ["memories", user])]
    with pytest.raises(StoreNamespaceError, match="names no user"):
        store.put(("memories",), "k", {"v": 1})
    with pytest.raises(StoreNamespaceError):  # LangGraph's own rule, as an AgentMemError
        store.put(("memories", "a.b"), "k", {"v": 1})
    with pytest.raises(InvalidInputError, match="ttl"):
        store.put(("memories", user), "k", {"v": 1}, ttl=-1)
    with pytest.raises(InvalidInputError, match="NUL"):
        store.put(("memories", user), "k", {"v": "a\x00b"})
    with pytest.raises(InvalidInputError, match="operator"):
        store.search(("memories", user), filter={"v": {"$in": [1]}})
    with pytest.raises(InvalidInputError, match="compares numbers"):
        store.search(("memories", user), filter={"v": {"$gt": "a"}})
    assert store.get(("memories", user), "k").value == {"v": 1}  # nothing changed by the refused calls


def test_through_the_app_role_each_transaction_sees_its_users_items_only(settings, pg_uri):
    """The namespace names the user of each transaction; row-level security keeps the others out of it."""
    with own_schema_manager(settings, pg_uri, "lgrls") as owner:
        role = create_app_role(pg_uri, f"agentmem_lg_{uuid.uuid4().hex[:6]}", "pw", schema=owner.db.schema)
        AgentMemStore(owner).put(("alice", "m"), "k", {"secret": "alice's"})
        from memory import HashEmbedder, MemoryManager

        app = MemoryManager.open(settings.with_(schema=owner.db.schema, pool_max_size=2), embedder=HashEmbedder(),
                                 conninfo=role.conninfo)
        try:
            store = AgentMemStore(app, index={"fields": ["text"]})
            store.put(("bob", "m"), "k", {"text": "bob's note"})
            assert [i.value for i in store.search(("bob",), query="note")] == [{"text": "bob's note"}]
            assert store.list_namespaces(prefix=("bob",)) == [("bob", "m")]
            with app.db.connection("bob") as conn:  # raw SQL in bob's transaction
                assert conn.execute("SELECT DISTINCT user_id FROM store_memory").fetchall() == [("bob",)]
                assert conn.execute("SELECT DISTINCT user_id FROM store_vectors").fetchall() == [("bob",)]
            with pytest.raises(AccessDeniedError, match="names no user"):
                store.search(())
            with pytest.raises(AccessDeniedError):
                store.list_namespaces()
            with pytest.raises(AccessDeniedError):
                with app.db.connection("bob") as conn:
                    conn.execute("INSERT INTO store_memory (user_id, namespace, key, value)"
                                 " VALUES ('alice', ARRAY['alice'], 'planted', '{}'::jsonb)")
        finally:
            app.close()
        assert AgentMemStore(owner).get(("alice", "m"), "planted") is None


def test_forget_user_removes_the_users_store_items(mm, user, sql_conn):
    store = AgentMemStore(mm, index={"fields": ["text"]})
    store.put((user, "m"), "a", {"text": "remember me"})
    other = f"other-{uuid.uuid4().hex[:6]}"
    store.put((other, "m"), "a", {"text": "keep me"})
    counts = mm.forget_user(user_id=user)
    assert counts["store_memory"] == 1 and counts["store_vectors"] == 1
    assert store.get((user, "m"), "a") is None and store.get((other, "m"), "a") is not None


def test_async_entry_points_work(mm, user):
    store = AgentMemStore(mm)

    async def session() -> None:
        await store.aput((user, "m"), "a", {"v": 1})
        assert (await store.aget((user, "m"), "a")).value == {"v": 1}
        assert [i.key for i in await store.asearch((user,))] == ["a"]
        assert await store.alist_namespaces(prefix=(user,)) == [(user, "m")]
        await store.adelete((user, "m"), "a")
        assert await store.aget((user, "m"), "a") is None

    asyncio.run(session())


class RecordingChatModel(GenericFakeChatModel):
    """LangChain's fake chat model that also keeps the prompts it was given."""

    prompts: list[list[Any]] = []

    def _generate(self, messages, stop=None, run_manager=None, **kwargs):
        self.prompts.append(list(messages))
        return super()._generate(messages, stop=stop, run_manager=run_manager, **kwargs)


def test_a_langgraph_graph_reads_and_writes_memories_through_the_store(mm, user):
    model = RecordingChatModel(messages=iter([AIMessage(content="Noted: you like tea."),
                                              AIMessage(content="You like green tea.")]), prompts=[])

    def chat(state: MessagesState, config, *, store: BaseStore):
        uid = config["configurable"]["user_id"]
        question = state["messages"][-1].content
        memories = store.search((uid, "memories"), query=question, limit=3)
        notes = "\n".join(m.value["text"] for m in memories)
        answer = model.invoke([("system", f"Known about the user:\n{notes}")] + state["messages"])
        if question.lower().startswith("remember"):
            store.put((uid, "memories"), uuid.uuid4().hex, {"text": question})
        return {"messages": [answer]}

    graph = StateGraph(MessagesState).add_node("chat", chat).add_edge(START, "chat").add_edge("chat", END)
    app = graph.compile(store=AgentMemStore(mm, index={"fields": ["text"]}))
    config = {"configurable": {"user_id": user}}
    app.invoke({"messages": [HumanMessage("Remember that I like green tea")]}, config)
    out = app.invoke({"messages": [HumanMessage("What do I like to drink? tea?")]}, config)
    assert out["messages"][-1].content == "You like green tea."
    assert "I like green tea" not in model.prompts[0][0].content  # nothing known at first
    assert "Remember that I like green tea" in model.prompts[1][0].content  # the second turn read it back
    assert [i.value["text"] for i in AgentMemStore(mm).search((user, "memories"))] == ["Remember that I like green tea"]
