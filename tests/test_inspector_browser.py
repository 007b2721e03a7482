"""The inspector end to end: `agentmem ui` as a real subprocess, driven in headless Chromium.

One schema of its own is seeded through the MemoryManager (two users; a thread with
tool calls, consolidated except its last turns; a 130-message thread consolidated into
one summary; a fact superseded and one retired), then two servers run on it: one
read-only, one started with ``--allow-writes``. Tests that write use their own thread
or user, so every test holds in any order.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator

import psycopg
import pytest
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as EC
from selenium.webdriver.support.ui import WebDriverWait

from fix_inspector import UiServer, chromium
from fix_schemas import own_schema_manager
from memory import MemoryManager, Settings

pytestmark = pytest.mark.slow


def turn(i: int) -> list[dict[str, Any]]:
    """A user question, a tool call, its result and the answer."""
    return [
        {"role": "user", "content": f"Question {i}: export job EXP-{2290 + i} failed with disk quota exceeded"},
        {"role": "assistant", "content": "", "tool_calls": [{"id": f"c{i}", "name": "check_quota",
                                                             "args": {"job": f"EXP-{2290 + i}"}}]},
        {"role": "tool", "content": f"quota 98% used on volume v{i}", "tool_call_id": f"c{i}",
         "tool_name": "check_quota"},
        {"role": "assistant", "content": f"Volume v{i} is full; lower the retention to 7 days."},
    ]


def chat(n: int, prefix: str) -> list[dict[str, Any]]:
    return [{"role": "user" if i % 2 == 0 else "assistant", "content": f"{prefix} message {i}"} for i in range(n)]


class Seed:
    def __init__(self, mm: MemoryManager) -> None:
        self.mm = mm
        self.alice, self.bob = f"alice-{uuid.uuid4().hex[:6]}", f"bob-{uuid.uuid4().hex[:6]}"
        mm.write_messages(user_id=self.alice, thread_id="support-1", messages=[m for i in range(6) for m in turn(i)])
        self.support = mm.summarize_conversation(thread_id="support-1", user_id=self.alice, keep_recent=2).summary
        mm.write_messages(user_id=self.alice, thread_id="long", messages=chat(130, "long"))
        self.long = mm.summarize_conversation(thread_id="long", user_id=self.alice).summary
        mm.write_messages(user_id=self.bob, thread_id="b1", messages=chat(4, "bob's private"))
        self.bobs = mm.summarize_conversation(thread_id="b1", user_id=self.bob).summary
        first = mm.remember("stable_fact", "Lives in Berlin", user_id=self.alice).fact
        self.moved = mm.remember("stable_fact", "Lives in Munich", user_id=self.alice, replaces=first.id).fact
        gone = mm.remember("preference", "Likes weekly digest emails", user_id=self.alice).fact
        mm.forget(gone.id, user_id=self.alice)
        mm.remember("preference", "Prefers metric units", user_id=self.alice)

    def marked(self, summary_id: Any) -> list[int]:
        with self.mm.db.connection(self.alice) as conn:
            return [r[0] for r in conn.execute("SELECT id FROM conversational_memory WHERE summary_id = %s"
                                               " ORDER BY created_at, id", (summary_id,))]


@pytest.fixture(scope="module")
def seed(settings: Settings, pg_uri: str) -> Iterator[Seed]:
    with own_schema_manager(settings, pg_uri, "ui") as mm:
        yield Seed(mm)


@pytest.fixture(scope="module")
def read_only(seed: Seed, pg_uri: str) -> Iterator[UiServer]:
    with UiServer(pg_uri, seed.mm.db.schema) as server:
        yield server


@pytest.fixture(scope="module")
def writable(seed: Seed, pg_uri: str) -> Iterator[UiServer]:
    with UiServer(pg_uri, seed.mm.db.schema, "--allow-writes") as server:
        yield server


@pytest.fixture(scope="module")
def browser() -> Iterator[Any]:
    driver = chromium()
    yield driver
    driver.quit()


def open_page(browser: Any, server: UiServer, path: str) -> Any:
    browser.get(server.base + path)
    return browser


def texts(browser: Any, css: str) -> list[str]:
    return [e.text for e in browser.find_elements(By.CSS_SELECTOR, css)]


def q(**params: Any) -> str:
    from urllib.parse import urlencode

    return urlencode(params)


def wait(browser: Any, condition: Any, seconds: float = 30) -> Any:
    return WebDriverWait(browser, seconds).until(condition)


# -- every page --------------------------------------------------------------------------
def test_the_overview_lists_users_and_threads_with_their_counts(seed: Seed, read_only: UiServer, browser) -> None:
    open_page(browser, read_only, "/?" + q(q=seed.alice))
    rows = {tuple(r.text.split()[:6]) for r in browser.find_elements(By.CSS_SELECTOR, "#threads tr")[1:]}
    # user, thread, total, unsummarized, summarized, summaries
    assert (seed.alice, "support-1", "24", "8", "16", "1") in rows
    assert (seed.alice, "long", "130", "0", "130", "1") in rows
    assert not any(seed.bob in r for r in rows)  # the filter keeps alice's threads
    assert seed.alice in texts(browser, "#users td a")
    assert browser.find_elements(By.CSS_SELECTOR, "svg.chart rect")  # growth and size charts drawn
    assert "conversational_memory" in " ".join(texts(browser, "#tables td"))
    # sortable: by total messages ascending puts support-1 (24) before long (130)
    open_page(browser, read_only, "/?" + q(q=seed.alice, sort="total_messages", dir="asc"))
    threads = [r.text.split()[1] for r in browser.find_elements(By.CSS_SELECTOR, "#threads tr")[1:]]
    # other tests of this module may add threads of their own to alice: compare the seeded two
    assert [t for t in threads if t in ("support-1", "long")] == ["support-1", "long"]


def test_the_thread_page_draws_summaries_the_working_set_and_tool_results(seed: Seed, read_only: UiServer,
                                                                          browser) -> None:
    open_page(browser, read_only, "/thread?" + q(user=seed.alice, thread="support-1"))
    card = browser.find_element(By.CSS_SELECTOR, f"[data-summary='{seed.support.summary_id}']")
    assert seed.support.description in card.text and "replaced 16 messages" in card.text
    live_ids = [int(e.get_attribute("data-id")) for e in browser.find_elements(By.CSS_SELECTOR, "#items > .msg.live")]
    with seed.mm.db.connection(seed.alice) as conn:
        expected = [r[0] for r in conn.execute(
            "SELECT id FROM conversational_memory WHERE user_id = %s AND thread_id = 'support-1' AND summary_id IS NULL"
            " AND role <> 'tool' ORDER BY id", (seed.alice,))]
    assert live_ids == expected  # tool results sit inside their call, not as rows of their own
    call = browser.find_element(By.CSS_SELECTOR, "#items [data-call='c5']")
    assert "check_quota" in call.text and "quota 98% used on volume v5" in call.find_element(By.CSS_SELECTOR,
                                                                                              ".result").text
    # every row, with the boundary of the consolidation drawn before its first row
    open_page(browser, read_only, "/thread?" + q(user=seed.alice, thread="support-1", raw=1))
    bounds = [e.get_attribute("data-boundary") for e in browser.find_elements(By.CSS_SELECTOR, "[data-boundary]")]
    assert bounds == [str(seed.support.summary_id), "live"]


def test_the_summary_page_shows_sections_and_lineage(seed: Seed, read_only: UiServer, browser) -> None:
    open_page(browser, read_only, "/summary?" + q(user=seed.alice, id=seed.support.summary_id))
    assert browser.find_element(By.ID, "label").text == seed.support.description
    assert texts(browser, "#sections h3") == ["Technical Information", "Emotional Context",
                                             "Entities & References", "Action Items & Decisions"]
    lineage = browser.find_element(By.ID, "lineage").text
    s = seed.support
    assert "16 messages point at it now" in lineage
    assert f"{s.source_tokens:,} → {s.summary_tokens:,}" in lineage
    assert f"{s.source_tokens / s.summary_tokens:.2f}×" in lineage
    shown = browser.find_elements(By.CSS_SELECTOR, "#originals [data-id]")
    assert sorted(int(e.get_attribute("data-id")) for e in shown) == seed.marked(s.summary_id)
    call = browser.find_element(By.CSS_SELECTOR, "#originals [data-call='c0']")  # results stay with their call
    assert "quota 98% used on volume v0" in call.find_element(By.CSS_SELECTOR, ".result").text
    assert not browser.find_elements(By.ID, "undo")  # read-only: no undo button


def test_the_facts_page_shows_active_superseded_and_retired_with_chains(seed: Seed, read_only: UiServer,
                                                                       browser) -> None:
    open_page(browser, read_only, "/facts?" + q(user=seed.alice))
    chains = browser.find_elements(By.CSS_SELECTOR, "#chains .chain")
    by_text = {c.find_element(By.TAG_NAME, "strong").text: c for c in chains}
    assert set(by_text) == {"Lives in Munich", "Likes weekly digest emails", "Prefers metric units"}
    moved = by_text["Lives in Munich"]
    assert [v.text.split()[0] for v in moved.find_elements(By.CSS_SELECTOR, "li.version")] == ["superseded", "active"]
    assert "Lives in Berlin" in moved.text and "superseded by “Lives in Munich”" in moved.text
    assert by_text["Likes weekly digest emails"].find_element(By.CSS_SELECTOR, ".badge").text == "retired"
    assert by_text["Prefers metric units"].find_element(By.CSS_SELECTOR, ".badge").text == "active"


def test_the_search_page_shows_each_hits_signals_and_where_it_lives(seed: Seed, read_only: UiServer,
                                                                    browser) -> None:
    open_page(browser, read_only, "/search?" + q(user=seed.alice, q="volume v5 quota", messages=1))
    hits = seed.mm.search_memory(query="volume v5 quota", user_id=seed.alice, k=21, scope=["messages"])
    rows = browser.find_elements(By.CSS_SELECTOR, "#hits tr.hit")
    assert len(rows) == min(20, len(hits)) > 0
    first = rows[0].find_elements(By.TAG_NAME, "td")
    top = hits[0]
    assert [c.text for c in first[2:5]] == [f"{top.score:.3f}", f"{top.signals['vector']:.3f}", f"{top.signals['keyword']:.3f}"]
    assert top.item.thread_id in first[7].text
    assert top.item.content[:30] in first[8].text
    assert not browser.find_elements(By.CSS_SELECTOR, "#hits tr.hit.summary")  # only messages were ticked


def test_the_usage_page_charts_every_turn(seed: Seed, read_only: UiServer, browser) -> None:
    open_page(browser, read_only, "/thread/usage?" + q(user=seed.alice, thread="support-1"))
    points = browser.find_elements(By.CSS_SELECTOR, "#usage-chart circle.point")
    assert len(points) == 6  # six user turns
    assert len(browser.find_elements(By.CSS_SELECTOR, "#usage-chart line.consolidation")) == 1
    tokens = [int(r.find_elements(By.TAG_NAME, "td")[2].text.replace(",", ""))
              for r in browser.find_elements(By.CSS_SELECTOR, "#usage tr")[1:]]
    assert tokens == sorted(tokens) and tokens[0] > 0  # turns were written before the consolidation


def test_the_user_page_lists_only_that_users_threads(seed: Seed, read_only: UiServer, browser) -> None:
    open_page(browser, read_only, "/user?" + q(user=seed.bob))
    assert [r.text.split()[0] for r in browser.find_elements(By.CSS_SELECTOR, "#threads tr")[1:]] == ["b1"]


# -- the must-show cases ---------------------------------------------------------------------
def test_a_summary_expands_in_place_to_its_originals(seed: Seed, read_only: UiServer, browser) -> None:
    open_page(browser, read_only, "/thread?" + q(user=seed.alice, thread="long"))
    card = browser.find_element(By.CSS_SELECTOR, f"[data-summary='{seed.long.summary_id}']")
    card.find_element(By.CSS_SELECTOR, "details > summary").click()
    wait(browser, lambda d: len(card.find_elements(By.CSS_SELECTOR, ".originals .msg")) == 100)
    card.find_element(By.CSS_SELECTOR, "button.more").click()  # the next page of originals, in place
    wait(browser, lambda d: len(card.find_elements(By.CSS_SELECTOR, ".originals .msg")) == 130)
    ids = [int(e.get_attribute("data-id")) for e in card.find_elements(By.CSS_SELECTOR, ".originals .msg")]
    assert ids == seed.marked(seed.long.summary_id)
    assert browser.current_url.endswith(q(user=seed.alice, thread="long"))  # still the thread page


def test_undo_in_write_mode_marks_the_rows_unsummarized_again(seed: Seed, writable: UiServer, browser) -> None:
    mm, thread = seed.mm, f"undo-{uuid.uuid4().hex[:6]}"
    mm.write_messages(user_id=seed.alice, thread_id=thread, messages=chat(6, "undo"))
    summary = mm.summarize_conversation(thread_id=thread, user_id=seed.alice).summary
    sources = seed.marked(summary.summary_id)
    assert len(sources) == 6
    open_page(browser, writable, "/summary?" + q(user=seed.alice, id=summary.summary_id))
    browser.find_element(By.CSS_SELECTOR, "#undo button").click()
    wait(browser, EC.presence_of_element_located((By.ID, "note")))
    assert "6 messages are unsummarized again" in browser.find_element(By.ID, "note").text
    assert seed.marked(summary.summary_id) == []
    assert [m.id for m in mm.read_conversational_memory(thread_id=thread, user_id=seed.alice)] == sources
    assert mm.read_summaries(user_id=seed.alice, thread_id=thread) == []
    live = [int(e.get_attribute("data-id")) for e in browser.find_elements(By.CSS_SELECTOR, "#items > .msg.live")]
    assert live == sources  # the thread page now shows them in the working set


def test_consolidating_from_the_browser_marks_the_rows(seed: Seed, writable: UiServer, browser) -> None:
    mm, thread = seed.mm, f"cons-{uuid.uuid4().hex[:6]}"
    mm.write_messages(user_id=seed.alice, thread_id=thread, messages=chat(8, "cons"))
    open_page(browser, writable, "/thread?" + q(user=seed.alice, thread=thread))
    box = browser.find_element(By.CSS_SELECTOR, "#consolidate input[name=keep_recent]")
    box.clear()
    box.send_keys("1")
    browser.find_element(By.CSS_SELECTOR, "#consolidate button").click()
    wait(browser, EC.presence_of_element_located((By.ID, "note")))
    assert "consolidated 6 messages" in browser.find_element(By.ID, "note").text
    [summary] = mm.read_summaries(user_id=seed.alice, thread_id=thread)
    assert len(seed.marked(summary.summary_id)) == 6
    assert len(mm.read_conversational_memory(thread_id=thread, user_id=seed.alice)) == 2  # the last turn stays live


def test_forgetting_a_user_needs_the_typed_user_id(seed: Seed, writable: UiServer, browser) -> None:
    mm, victim = seed.mm, f"gone-{uuid.uuid4().hex[:6]}"
    mm.write_messages(user_id=victim, thread_id="t", messages=chat(2, "forget me"))
    open_page(browser, writable, "/forget?" + q(user=victim))
    browser.find_element(By.CSS_SELECTOR, "#forget input[name=confirm]").send_keys(victim[:-1])  # a typo
    browser.find_element(By.CSS_SELECTOR, "#forget button").click()
    wait(browser, EC.presence_of_element_located((By.ID, "error")))
    assert "nothing was deleted" in browser.find_element(By.ID, "error").text
    assert len(mm.read_thread(thread_id="t", user_id=victim)) == 2
    open_page(browser, writable, "/forget?" + q(user=victim))
    browser.find_element(By.CSS_SELECTOR, "#forget input[name=confirm]").send_keys(victim)
    browser.find_element(By.CSS_SELECTOR, "#forget button").click()
    wait(browser, EC.presence_of_element_located((By.ID, "note")))
    assert f"forgot user {victim!r}" in browser.find_element(By.ID, "note").text
    assert mm.read_thread(thread_id="t", user_id=victim) == []


def test_the_read_only_mode_refuses_writes(seed: Seed, read_only: UiServer, browser) -> None:
    open_page(browser, read_only, "/thread?" + q(user=seed.alice, thread="support-1"))
    assert not browser.find_elements(By.ID, "consolidate")
    before = seed.marked(seed.support.summary_id)
    # a write posted anyway (as a form would) is refused and changes nothing
    for path, body in (("/summary/undo", q(user=seed.alice, id=seed.support.summary_id, form_key="x")),
                       ("/thread/consolidate", q(user=seed.alice, thread="support-1", method="extractive")),
                       ("/forget", q(user=seed.alice, confirm=seed.alice))):
        status, text = browser.execute_async_script(
            "const done = arguments[arguments.length - 1];"
            "fetch(arguments[0], {method: 'POST', body: arguments[1],"
            " headers: {'Content-Type': 'application/x-www-form-urlencoded'}})"
            ".then(r => r.text().then(t => done([r.status, t])));", path, body)
        assert status == 403 and "started read-only: nothing was changed" in text, (path, status)
    assert seed.marked(seed.support.summary_id) == before
    assert seed.mm.read_summary_by_id(summary_id=seed.support.summary_id, user_id=seed.alice)
    assert len(seed.mm.read_thread(thread_id="support-1", user_id=seed.alice)) == 24


def test_another_users_summary_id_is_not_found(seed: Seed, read_only: UiServer, browser) -> None:
    for path in ("/summary", "/summary/sources"):
        open_page(browser, read_only, path + "?" + q(user=seed.alice, id=seed.bobs.summary_id))
        assert browser.find_element(By.TAG_NAME, "h1").text == "not found"
        assert "bob's private" not in browser.page_source
    status = browser.execute_async_script(
        "const done = arguments[arguments.length - 1]; fetch(arguments[0]).then(r => done(r.status));",
        "/summary?" + q(user=seed.alice, id=seed.bobs.summary_id))
    assert status == 404
    open_page(browser, read_only, "/summary?" + q(user=seed.bob, id=seed.bobs.summary_id))
    assert browser.find_element(By.ID, "label").text == seed.bobs.description  # its owner sees it


def test_a_write_from_another_site_is_refused(seed: Seed, writable: UiServer) -> None:
    """A form posted without this inspector's form key (another page, a stale one) changes nothing."""
    import httpx

    before = seed.marked(seed.support.summary_id)
    for key in ("", "guessed"):
        r = httpx.post(writable.base + "/summary/undo", data={"user": seed.alice, "id": str(seed.support.summary_id),
                                                              "form_key": key})
        assert r.status_code == 403 and "did not come from this inspector" in r.text
    assert seed.marked(seed.support.summary_id) == before
