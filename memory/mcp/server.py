"""``agentmem mcp``: agentmem's memory as a Model Context Protocol server (official ``mcp`` SDK).

Two transports:

- **stdio** (default): the client launches ``agentmem mcp --user U`` and talks over its
  stdin/stdout; the server acts for that one user. Nothing but protocol goes to stdout
  (logs go to stderr).
- **streamable HTTP** (``--http``): served by uvicorn on 127.0.0.1 unless ``--host``
  says otherwise, at ``/mcp``; every request needs a bearer token that
  ``AGENTMEM_MCP_TOKENS`` maps to one user (:mod:`memory.mcp.auth`).

The server starts serving before the database is needed (:mod:`memory.mcp.service`), and
every failure of a call is an MCP error result with its fix (:mod:`memory.mcp.failures`).
"""

from __future__ import annotations

import socket
import sys
import threading
from typing import Any

from memory.mcp.auth import BearerAuth
from memory.mcp.resources import register_resources
from memory.mcp.service import Service
from memory.mcp.tools import register_tools

INSTRUCTIONS = """\
agentmem is your durable memory of this user, kept across conversations.
Each turn: write_message the user's message to the thread, build_context for the request and read it
before answering, then write_message your answer. When build_context or context_status reports warning
or critical, call summarize_and_store for the thread; a [Summary ID: ...] reference can be opened with
expand_summary. Use search_memory for anything said earlier that is not in your context, remember for
durable facts (preferences, constraints, stable facts), recall and forget to manage them, and find_tools
to find tools for a request."""

HTTP_PATH = "/mcp"


def build_server(service: Service) -> Any:
    """An ``MCPServer`` with agentmem's tools and resources, acting through ``service``."""
    from mcp.server.mcpserver import MCPServer

    server = MCPServer("agentmem", instructions=INSTRUCTIONS, version=_version(), log_level="WARNING")
    register_tools(server, service)
    register_resources(server, service)
    return server


def run_stdio(service: Service) -> None:
    """Serve over stdin/stdout until the client closes them."""
    import anyio

    server = build_server(service)
    _warm_up(service)
    _say(f"serving user {service.identity.user!r} over stdio")
    try:
        anyio.run(server.run_stdio_async)
    finally:
        service.close()


def run_http(service: Service, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve streamable HTTP at ``http://host:port/mcp`` (port 0: any free port, announced on stderr)."""
    import anyio
    import uvicorn

    server = build_server(service)
    app = BearerAuth(server.streamable_http_app(streamable_http_path=HTTP_PATH, host=host), service.identity)
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)  # connections made once the address is announced wait in the backlog for uvicorn
    bound = sock.getsockname()[1]
    config = uvicorn.Config(app, log_level="warning", lifespan="on")
    _warm_up(service)
    shown = f"[{host}]" if ":" in host else host
    _say(f"serving {len(service.identity.users)} user(s) at http://{shown}:{bound}{HTTP_PATH} (bearer tokens from "
         "AGENTMEM_MCP_TOKENS)")
    try:
        anyio.run(lambda: uvicorn.Server(config).serve(sockets=[sock]))
    finally:
        sock.close()
        service.close()


def _warm_up(service: Service) -> None:
    """Open the database and load the model in the background, so the first call is fast."""
    threading.Thread(target=service.warm_up, name="agentmem-mcp-warm-up", daemon=True).start()


def _say(text: str) -> None:
    print(f"agentmem mcp: {text}", file=sys.stderr, flush=True)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("agentmem")
    except PackageNotFoundError:  # pragma: no cover - a source checkout without an install
        return "0"


def serve(*, user: str | None = None, http: bool = False, host: str = "127.0.0.1", port: int = 8765,
          namespace: str = "default", settings: Any | None = None) -> None:
    """What ``agentmem mcp`` runs: stdio for ``user`` (default ``$AGENTMEM_USER``, else ``default``), or HTTP."""
    from memory.errors import ConfigurationError, InvalidInputError
    from memory.mcp.auth import stdio_identity, token_identity
    from memory.settings import Settings
    from memory.store.validation import check_id

    settings = settings or Settings.from_env()
    namespace = check_id(namespace, "namespace")
    if http:
        if user is not None:
            raise InvalidInputError("--user is for stdio: over --http each bearer token names its user "
                                    "(AGENTMEM_MCP_TOKENS=token=user,...)")
        service = Service(settings, token_identity(settings.mcp_tokens), namespace=namespace)
        try:
            run_http(service, host, port)
        except OSError as exc:
            raise ConfigurationError(f"cannot serve on {host}:{port} ({exc.strerror or exc}): choose another "
                                     "--port or --host") from exc
        return
    identity = stdio_identity(user or settings.user or "default")
    run_stdio(Service(settings, identity, namespace=namespace))
