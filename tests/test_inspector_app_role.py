"""The inspector through the application role: row-level security keeps each user's pages to that user.

`agentmem ui` runs as a subprocess connected as a non-owner app role (``create_app_role``),
on a schema of its own with two users. The user-scoped pages work; another user's
summary is not found (the policies hide its rows, the reads filter by user as well);
the overview, which reads the owner-only DBA views, says to use the owner's URL.
"""

from __future__ import annotations

import uuid
from typing import Any, Iterator
from urllib.parse import urlencode

import httpx
import pytest

from fix_inspector import UiServer
from fix_schemas import own_schema_manager
from memory import Settings, create_app_role


@pytest.fixture(scope="module")
def setup(settings: Settings, pg_uri: str) -> Iterator[dict[str, Any]]:
    with own_schema_manager(settings, pg_uri, "uir") as mm:
        ids = {}
        for user in ("alice", "bob"):
            mm.write_messages([{"role": "user" if i % 2 == 0 else "assistant", "content": f"{user} says {i}"}
                               for i in range(6)], user_id=user, thread_id="t")
            result = mm.summarize_conversation(user_id=user, thread_id="t", keep_recent=1)
            assert result.summary is not None
            ids[user] = result.summary.summary_id
        role = create_app_role(pg_uri, "agentmem_ui_test", f"ui-{uuid.uuid4().hex}", schema=mm.db.schema)
        with UiServer(role.conninfo, mm.db.schema) as server:
            yield {"server": server, "ids": ids}


def get(setup: dict[str, Any], path: str, **params: Any) -> httpx.Response:
    return httpx.get(setup["server"].base + path + "?" + urlencode(params), timeout=60)


def test_the_users_own_pages_work_through_the_app_role(setup: dict[str, Any]) -> None:
    page = get(setup, "/thread", user="alice", thread="t")
    assert page.status_code == 200 and "alice says 5" in page.text and "bob says" not in page.text
    summary = get(setup, "/summary", user="alice", id=setup["ids"]["alice"])
    assert summary.status_code == 200 and "alice says 0" in summary.text
    usage = get(setup, "/thread/usage", user="alice", thread="t")
    assert usage.status_code == 200 and usage.text.count('class="point') == 3


def test_another_users_summary_is_not_found_through_the_app_role(setup: dict[str, Any]) -> None:
    for path in ("/summary", "/summary/sources"):
        page = get(setup, path, user="alice", id=setup["ids"]["bob"])
        assert page.status_code == 404 and "bob says" not in page.text


def test_the_overview_asks_for_the_owner(setup: dict[str, Any]) -> None:
    page = get(setup, "/")
    assert page.status_code == 403 and "schema owner" in page.text and "AGENTMEM_DATABASE_URL" in page.text
