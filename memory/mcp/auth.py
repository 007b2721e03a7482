"""Who an MCP call acts for: one user over stdio, one user per bearer token over HTTP.

The model never names the user. A stdio server is started for one user (``agentmem mcp
--user U``) by whoever launches it, and every call acts for that user. An HTTP server
may serve several users, so it never serves anyone unauthenticated: each request must
carry ``Authorization: Bearer <token>``, and the setting ``mcp_tokens``
(``AGENTMEM_MCP_TOKENS=token=user,...``) maps each token to exactly one user. The
check runs twice: :class:`BearerAuth` refuses a request without a known token before
the MCP layer sees it (401), and every tool and resource resolves its user from the
token of the request that carries the call (:meth:`Identity.user_for`), so a session
opened with one token cannot be used to act for the user of another.

Tokens are compared by their SHA-256 digests (a dictionary lookup of the digest, so the
time taken says nothing about how much of a token matched) and never logged.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any
from collections.abc import Awaitable, Callable

from memory.errors import AccessDeniedError, ConfigurationError
from memory.store.validation import check_id

#: The shortest token accepted: a guessable token would make user isolation a formality.
MIN_TOKEN_CHARS = 16
TOKEN_HINT = "make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'"


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).digest()


@dataclass(frozen=True)
class Identity:
    """The user of a stdio server, or the token -> user map of an HTTP server."""

    user: str | None = None
    _by_digest: Mapping[bytes, str] = field(default_factory=dict, repr=False)

    @property
    def needs_token(self) -> bool:
        return self.user is None

    @property
    def users(self) -> list[str]:
        return [self.user] if self.user is not None else sorted(set(self._by_digest.values()))

    def token_user(self, token: str | None) -> str | None:
        """The user ``token`` stands for, or None."""
        if not token:
            return None
        return self._by_digest.get(_digest(token))

    def user_for(self, headers: Mapping[str, str] | None) -> str:
        """The user a call acts for: the fixed user, or the one its request's bearer token names."""
        if self.user is not None:
            return self.user
        user = self.token_user(bearer_token(headers))
        if user is None:
            raise AccessDeniedError("this request carries no valid bearer token, so it acts for no user: send "
                                    "'Authorization: Bearer <token>' with a token the server's AGENTMEM_MCP_TOKENS "
                                    "maps")
        return user


def stdio_identity(user: str) -> Identity:
    return Identity(user=check_id(user, "user"))


def token_identity(tokens: Mapping[str, str]) -> Identity:
    """The identity of an HTTP server; a ConfigurationError for no tokens or an unusable one."""
    if not tokens:
        raise ConfigurationError(
            "agentmem mcp --http serves no one without authentication: set AGENTMEM_MCP_TOKENS to "
            f"token=user pairs (each token one user; {TOKEN_HINT})")
    by_digest: dict[bytes, str] = {}
    for n, (token, user) in enumerate(tokens.items(), 1):
        if len(token) < MIN_TOKEN_CHARS or any(c.isspace() or ord(c) < 32 for c in token):
            # The token itself is never echoed: it is a secret.
            raise ConfigurationError(
                f"AGENTMEM_MCP_TOKENS: token {n} (of user {user!r}) is shorter than {MIN_TOKEN_CHARS} characters "
                f"or holds whitespace; use a long random token ({TOKEN_HINT})")
        by_digest[_digest(token)] = check_id(user, "user of an AGENTMEM_MCP_TOKENS token")
    return Identity(user=None, _by_digest=by_digest)


def bearer_token(headers: Mapping[str, str] | None) -> str | None:
    if not headers:
        return None
    value = headers.get("authorization") or headers.get("Authorization") or ""
    scheme, _, token = value.strip().partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


ASGIApp = Callable[[dict[str, Any], Callable[[], Awaitable[Any]], Callable[[Any], Awaitable[None]]], Awaitable[None]]


class BearerAuth:
    """ASGI middleware: an HTTP request without a token of ``identity`` gets 401 and goes no further."""

    def __init__(self, app: ASGIApp, identity: Identity) -> None:
        self.app = app
        self.identity = identity

    async def __call__(self, scope: dict[str, Any], receive: Callable[[], Awaitable[Any]],
                       send: Callable[[Any], Awaitable[None]]) -> None:
        if scope.get("type") == "http":
            headers = {k.decode("latin-1").lower(): v.decode("latin-1") for k, v in scope.get("headers", [])}
            if self.identity.token_user(bearer_token(headers)) is None:
                await _refuse(send)
                return
        await self.app(scope, receive, send)


async def _refuse(send: Callable[[Any], Awaitable[None]]) -> None:
    body = json.dumps({
        "error": "unauthorized",
        "message": "agentmem's MCP server needs a bearer token: send 'Authorization: Bearer <token>' with a token "
                   "that AGENTMEM_MCP_TOKENS maps to your user",
    }).encode()
    await send({"type": "http.response.start", "status": 401,
                "headers": [(b"content-type", b"application/json"), (b"www-authenticate", b'Bearer realm="agentmem"'),
                            (b"content-length", str(len(body)).encode())]})
    await send({"type": "http.response.body", "body": body})
