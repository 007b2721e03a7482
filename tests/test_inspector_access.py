"""Who can reach `agentmem ui`: loopback by default, any other address only with a token.

Each test starts the command as a real subprocess on an empty schema of its own and
talks HTTP to it (no browser needed to check status codes).
"""

from __future__ import annotations

import secrets
from typing import Iterator

import httpx
import pytest

from fix_inspector import UiServer
from fix_schemas import own_schema_manager
from memory import Settings


@pytest.fixture(scope="module")
def schema(settings: Settings, pg_uri: str) -> Iterator[str]:
    with own_schema_manager(settings, pg_uri, "uia") as mm:
        yield mm.db.schema


def test_another_address_without_a_token_is_refused(schema: str, pg_uri: str) -> None:
    done = UiServer(pg_uri, schema, host="0.0.0.0").run()
    assert done.returncode == 1
    assert "AGENTMEM_UI_TOKEN" in done.stderr and "Traceback" not in done.stderr


def test_a_short_token_is_refused(schema: str, pg_uri: str) -> None:
    done = UiServer(pg_uri, schema, host="0.0.0.0", env={"AGENTMEM_UI_TOKEN": "short"}).run()
    assert done.returncode == 1 and "at least 16" in done.stderr


def test_with_a_token_every_request_must_carry_it(schema: str, pg_uri: str) -> None:
    token = secrets.token_urlsafe(24)
    with UiServer(pg_uri, schema, host="0.0.0.0", env={"AGENTMEM_UI_TOKEN": token}) as server:
        base = f"http://127.0.0.1:{server.port}"
        assert httpx.get(base + "/").status_code == 401
        near_miss = token[:-1] + ("y" if token.endswith("x") else "x")  # differs in its last character only
        assert httpx.get(base + "/", headers={"Authorization": "Bearer " + near_miss}).status_code == 401
        assert httpx.get(base + "/?token=wrong-wrong-wrong-wrong").status_code == 401
        assert httpx.get(base + "/", headers={"Authorization": "Bearer " + token}).status_code == 200
        with httpx.Client() as browser:  # once ?token=, then the cookie it sets
            first = browser.get(base + "/?q=x&token=" + token)
            assert first.status_code == 303 and first.headers["location"] == "/?q=x"
            assert browser.get(base + "/?q=x").status_code == 200


def test_on_loopback_a_foreign_host_name_is_refused(schema: str, pg_uri: str) -> None:
    """A page elsewhere cannot reach the local inspector by pointing its own name at 127.0.0.1."""
    with UiServer(pg_uri, schema) as server:
        assert httpx.get(server.base + "/").status_code == 200
        assert httpx.get(server.base + "/", headers={"Host": f"localhost:{server.port}"}).status_code == 200
        refused = httpx.get(server.base + "/", headers={"Host": f"attacker.example:{server.port}"})
        assert refused.status_code == 403 and "loopback only" in refused.text
