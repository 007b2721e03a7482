"""The MCP server's identity rules and error texts, without a server (see test_mcp.py for the real one)."""

from __future__ import annotations

import secrets

import pytest

from memory.errors import (AccessDeniedError, ConfigurationError, DatabaseUnavailableError, FactTooLongError,
                           InvalidInputError, NotFoundError)
from memory.mcp.auth import bearer_token, stdio_identity, token_identity
from memory.mcp.failures import explain


def test_each_token_acts_for_exactly_its_user_and_nothing_else_acts_at_all() -> None:
    a, b = secrets.token_urlsafe(24), secrets.token_urlsafe(24)
    ident = token_identity({a: "alice", b: "bob"})
    assert ident.user_for({"authorization": f"Bearer {a}"}) == "alice"
    assert ident.user_for({"Authorization": f"bearer  {b} "}) == "bob"
    for headers in (None, {}, {"authorization": a}, {"authorization": f"Basic {a}"},
                    {"authorization": f"Bearer {a}x"}, {"authorization": f"Bearer {a[:-1]}"}, {"authorization": "Bearer "}):
        with pytest.raises(AccessDeniedError, match="no valid bearer token"):
            ident.user_for(headers)
    assert sorted(ident.users) == ["alice", "bob"]


def test_a_stdio_identity_ignores_headers_it_has_one_user() -> None:
    ident = stdio_identity("carol")
    assert ident.user_for(None) == "carol"
    assert ident.user_for({"authorization": "Bearer " + secrets.token_urlsafe(24)}) == "carol"
    with pytest.raises(InvalidInputError):
        stdio_identity("")


def test_http_needs_tokens_long_ones_and_never_echoes_them() -> None:
    with pytest.raises(ConfigurationError, match="AGENTMEM_MCP_TOKENS"):
        token_identity({})
    for weak in ("tiny7", "has a space in it, long enough"):
        with pytest.raises(ConfigurationError, match="shorter than 16 characters or holds whitespace") as info:
            token_identity({weak: "alice"})
        assert weak not in str(info.value) and "alice" in str(info.value)
    with pytest.raises(InvalidInputError):
        token_identity({secrets.token_urlsafe(24): "bad\x01user"})


def test_bearer_token_parsing() -> None:
    assert bearer_token({"authorization": "Bearer abc"}) == "abc"
    assert bearer_token({"authorization": "Token abc"}) is None
    assert bearer_token(None) is None


@pytest.mark.parametrize("exc, expected", [
    (NotFoundError("no summary x for this user"), "no summary x for this user. Fix: check the id"),
    (InvalidInputError("k must be >= 1"), "k must be >= 1. Fix: correct the argument"),
    (DatabaseUnavailableError("cannot connect to PostgreSQL"), "Fix: the memory database is unreachable"),
    (FactTooLongError("fact is 300 characters", hint="say it in at most 180"),
     "fact is 300 characters (fact_too_long). Fix: say it in at most 180"),
    (RuntimeError("boom"), "Internal error (RuntimeError): boom. Fix: this is a bug in agentmem"),
])
def test_every_failure_says_what_went_wrong_and_the_fix(exc: Exception, expected: str) -> None:
    assert expected in explain(exc)
