"""Registration, augmentation, content-hash reuse and retrieval (hash embedder, real PostgreSQL)."""

from __future__ import annotations

import dataclasses
import json
import logging
import uuid
from typing import Any, Literal

import numpy as np
import pytest
from langchain_core.language_models.fake_chat_models import FakeListChatModel

from memory import Hit, InvalidInputError, MemoryManager
from toolbox import Tool, Toolbox, ToolNotRegisteredError


class CountingFake(FakeListChatModel):
    """LangChain's scripted fake chat model, counting the calls it answers."""

    calls: int = 0

    def _call(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        return super()._call(*args, **kwargs)


class FailingModel(CountingFake):
    def _call(self, *args: Any, **kwargs: Any) -> str:
        self.calls += 1
        raise RuntimeError("model down")


GOOD_ANSWER = json.dumps({
    "description": "Tells the current weather (temperature, rain, wind) for any city.",
    "queries": ["is it raining in Oslo", "how warm is it in Rome right now", "is it raining in Oslo"],
})


@pytest.fixture
def ns() -> str:
    return f"ns-{uuid.uuid4().hex[:10]}"


def get_weather(city: str, unit: Literal["celsius", "fahrenheit"] = "celsius") -> str:
    """Get the current weather for a city.

    Args:
        city: City name.
        unit: Temperature unit.
    """
    return f"sunny in {city}"


def stored(sql_conn: Any, ns: str, name: str) -> dict[str, Any] | None:
    cur = sql_conn.execute(
        "SELECT description, queries, search_text, content_hash, augmented, embedding::text, docstring"
        " FROM toolbox_memory WHERE namespace = %s AND name = %s", (ns, name))
    row = cur.fetchone()
    if row is None:
        return None
    return dict(zip(["description", "queries", "search_text", "hash", "augmented", "embedding", "docstring"], row))


def test_register_tool_as_bare_decorator_decorator_with_arguments_and_call(mm: MemoryManager, ns: str,
                                                                          sql_conn: Any) -> None:
    tb = Toolbox(mm, namespace=ns)

    @tb.register_tool
    def getStockPrice(ticker: str) -> float:
        """Latest stock price of a ticker."""
        return 1.0

    @tb.register_tool(name="convert_currency")
    def convert(amount: float, to: str) -> float:
        """Convert money to another currency."""
        return amount

    returned = tb.register_tool(get_weather)
    assert returned is get_weather  # the function comes back unchanged
    assert getStockPrice("X") == 1.0 and convert(2.0, "EUR") == 2.0
    assert sorted(t.name for t in tb.tools) == ["convert_currency", "getStockPrice", "get_weather"]
    row = stored(sql_conn, ns, "getStockPrice")
    assert row is not None and row["search_text"].startswith("get stock price\nLatest stock price of a ticker.")
    assert row["augmented"] is False and row["docstring"] == "Latest stock price of a ticker."
    tool = tb.get("get_weather")
    assert tool.json_schema["required"] == ["city"]
    assert tool.openai_schema["function"]["name"] == "get_weather"


def test_augmentation_stores_description_and_queries_and_embeds_exactly_the_search_text(
        mm: MemoryManager, ns: str, sql_conn: Any) -> None:
    fake = CountingFake(responses=[GOOD_ANSWER])
    tb = Toolbox(mm, namespace=ns, llm=fake)
    tb.register_tool(get_weather, augment=True)
    assert fake.calls == 1
    tool = tb.get("get_weather")
    assert tool.augmented and tool.description.startswith("Tells the current weather")
    assert tool.queries == ["is it raining in Oslo", "how warm is it in Rome right now"]  # deduplicated
    row = stored(sql_conn, ns, "get_weather")
    assert row is not None
    lines = row["search_text"].splitlines()
    assert lines[0] == "get weather" and lines[1] == tool.description
    assert lines[2].startswith("Parameters: city: City name; unit: Temperature unit, one of celsius, fahrenheit")
    assert lines[3:] == tool.queries
    expected = mm.embeddings.embed([row["search_text"]])[0]
    got = np.array(json.loads(row["embedding"]), dtype=np.float32)
    assert np.allclose(got, expected, atol=1e-6)


def test_reregistering_an_unchanged_tool_makes_no_llm_call_and_no_embedding(mm: MemoryManager, ns: str,
                                                                           sql_conn: Any) -> None:
    fake = CountingFake(responses=[GOOD_ANSWER])
    Toolbox(mm, namespace=ns, llm=fake).register_tool(get_weather, augment=True)
    before = stored(sql_conn, ns, "get_weather")
    assert fake.calls == 1
    texts_before = mm.embeddings.texts_embedded
    restarted = Toolbox(mm, namespace=ns, llm=fake)  # a new process would start like this
    restarted.register_tool(get_weather, augment=True)
    assert fake.calls == 1
    assert mm.embeddings.texts_embedded == texts_before
    assert restarted.get("get_weather").queries == ["is it raining in Oslo", "how warm is it in Rome right now"]
    assert stored(sql_conn, ns, "get_weather") == before

    def get_weather_v2(city: str) -> str:
        """Get the current weather and the air quality for a city."""
        return city
    restarted.register_tool(get_weather_v2, augment=True, name="get_weather")
    assert fake.calls == 2  # a changed docstring re-augments
    after = stored(sql_conn, ns, "get_weather")
    assert after is not None and after["hash"] != before["hash"]
    assert after["docstring"] == "Get the current weather and the air quality for a city."
    count = sql_conn.execute("SELECT count(*) FROM toolbox_memory WHERE namespace = %s", (ns,)).fetchone()[0]
    assert count == 1


@pytest.mark.parametrize("answer", [
    "Sure! Here is a great description of the tool.",
    '{"description": 5, "queries": "not a list"}',
    '{"description": "unterminated',
    "[1, 2, 3]",
    "",
])
def test_a_malformed_answer_falls_back_to_the_docstring(mm: MemoryManager, ns: str, answer: str,
                                                        sql_conn: Any) -> None:
    fake = CountingFake(responses=[answer])
    tb = Toolbox(mm, namespace=ns, llm=fake)
    tb.register_tool(get_weather, augment=True)
    tool = tb.get("get_weather")
    assert fake.calls == 1
    assert tool.description == "Get the current weather for a city."
    assert tool.queries == [] and tool.augmented is False
    assert stored(sql_conn, ns, "get_weather")["augmented"] is False  # type: ignore[index]


def test_a_fenced_answer_with_chatter_is_still_read(mm: MemoryManager, ns: str) -> None:
    answer = 'Here you go:\n```json\n{"description": "Weather now.", "queries": ["rain in Oslo?", 7, ""]}\n```'
    tb = Toolbox(mm, namespace=ns, llm=CountingFake(responses=[answer]))
    tb.register_tool(get_weather, augment=True)
    assert tb.get("get_weather").description == "Weather now."
    assert tb.get("get_weather").queries == ["rain in Oslo?"]


def test_a_failing_model_falls_back_and_a_later_registration_retries(mm: MemoryManager, ns: str) -> None:
    failing = FailingModel(responses=["unused"])
    tb = Toolbox(mm, namespace=ns, llm=failing)
    tb.register_tool(get_weather, augment=True)
    assert failing.calls == 1 and tb.get("get_weather").augmented is False
    fake = CountingFake(responses=[GOOD_ANSWER])
    Toolbox(mm, namespace=ns, llm=fake).register_tool(get_weather, augment=True)
    assert fake.calls == 1  # not augmented yet, so a working model is asked


def test_no_llm_falls_back_to_the_docstring_and_says_so_once(mm: MemoryManager, ns: str,
                                                            caplog: pytest.LogCaptureFixture) -> None:
    tb = Toolbox(mm, namespace=ns)

    def send_email(to: str, body: str) -> None:
        """Send an email."""
    with caplog.at_level(logging.WARNING, logger="toolbox"):
        tb.register_tool(get_weather, augment=True)
        tb.register_tool(send_email, augment=True)
    messages = [r.getMessage() for r in caplog.records if "no LLM configured" in r.getMessage()]
    assert len(messages) == 1
    assert tb.get("send_email").description == "Send an email." and not tb.get("send_email").augmented


def test_retrieval_never_returns_a_tool_not_registered_in_this_process(mm: MemoryManager, ns: str) -> None:
    other = Toolbox(mm, namespace=ns)  # another process sharing the namespace

    def refund_payment(payment_id: str) -> str:
        """Refund a card payment to the customer."""
        return payment_id
    other.register_tool(refund_payment)
    mine = Toolbox(mm, namespace=ns)
    mine.register_tool(get_weather)
    for mode in ("hybrid", "vector", "keyword"):
        names = mine.retrieve("refund the card payment", k=5, mode=mode).names
        assert "refund_payment" not in names
    assert other.retrieve("refund the card payment", k=5).names == ["refund_payment"]
    mine.unregister("get_weather")
    assert mine.retrieve("weather in Paris") == []


def test_retrieve_ranks_by_meaning_and_words_and_always_adds_pinned_tools(mm: MemoryManager, ns: str) -> None:
    tb = Toolbox(mm, namespace=ns)

    def send_email(to: str, subject: str, body: str) -> None:
        """Send an email message to a recipient."""

    def summarize_and_store(text: str) -> str:
        """Consolidate the conversation into a summary."""
        return text

    def translate_text(text: str, target_language: str) -> str:
        """Translate text into another language."""
        return text
    tb.register_tools([send_email, summarize_and_store, translate_text])
    tb.register_tool(get_weather)
    assert {"score", "signals"}.isdisjoint(f.name for f in dataclasses.fields(Tool))  # a plain row
    top = tb.retrieve("forecasts and weather for Paris", k=1)
    assert top.names == ["get_weather"]
    assert isinstance(top[0], Hit) and top[0].item is tb.get("get_weather") and top.tools == [top[0].item]
    assert top[0].score == top.best_score and top[0].score > 0 and top[0].matched_by[0] == "vector"
    kw = tb.retrieve("emails", k=1, mode="keyword")  # stemming: "emails" finds "email"
    assert kw.names == ["send_email"]
    tb.pin("summarize_and_store")
    offered = tb.retrieve("translate this into French", k=1)
    assert offered.names == ["translate_text", "summarize_and_store"]
    # the pinned tool is added after the ranking, said to be pinned, and leaves best_score to the ranked tool
    assert offered[1].signals == {"pinned": 1.0} and offered[1].score == 0.0
    assert offered.best_score == offered[0].score and "pinned" not in offered[0].signals
    ranked_pin = tb.retrieve("summarize and store", k=1)
    assert ranked_pin.names == ["summarize_and_store"]  # a pinned tool is not repeated
    assert "pinned" not in ranked_pin[0].signals and ranked_pin[0].score > 0  # it was ranked on its merits
    tb.unpin("summarize_and_store")
    assert tb.retrieve("translate this into French", k=1).names == ["translate_text"]
    with pytest.raises(ToolNotRegisteredError):
        tb.pin("no_such_tool")
    with pytest.raises(InvalidInputError):
        tb.retrieve("", k=3)
    with pytest.raises(InvalidInputError):
        tb.retrieve("x", k=0)


def test_openai_schema_binds_to_chat_openai(mm: MemoryManager, ns: str) -> None:
    from langchain_openai import ChatOpenAI

    tb = Toolbox(mm, namespace=ns)
    tb.register_tool(get_weather)
    tools = tb.retrieve("weather", k=3)
    bound = ChatOpenAI(model="gpt-4o-mini", api_key="unused").bind_tools([t.openai_schema for t in tools.tools])
    sent = bound.kwargs["tools"]  # type: ignore[attr-defined]
    assert sent == [tb.get("get_weather").openai_schema]
    assert sent[0]["function"]["parameters"]["properties"]["unit"]["enum"] == ["celsius", "fahrenheit"]


def test_an_unstorable_docstring_is_rejected_before_anything_is_written(mm: MemoryManager, ns: str,
                                                                      sql_conn: Any) -> None:
    def fine(x: int) -> int:
        """Fine tool."""
        return x

    def broken(x: int) -> int:
        return x
    broken.__doc__ = "Has a NUL \x00 byte."
    tb = Toolbox(mm, namespace=ns)
    with pytest.raises(InvalidInputError, match="NUL"):
        tb.register_tools([fine, broken])
    assert len(tb) == 0
    assert sql_conn.execute("SELECT count(*) FROM toolbox_memory WHERE namespace = %s", (ns,)).fetchone()[0] == 0
