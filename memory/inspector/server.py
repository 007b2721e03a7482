"""Serving the inspector: which addresses are allowed, then uvicorn.

The inspector shows every user's memory, so it listens on 127.0.0.1 by default. Any
other address (``0.0.0.0``, a LAN address) is refused unless a token is configured
(``AGENTMEM_UI_TOKEN``, at least 16 characters), which every request must then carry.
"""

from __future__ import annotations

from typing import Any
from collections.abc import Callable

from memory.errors import ConfigurationError
from memory.inspector.app import InspectorConfig, create_app, is_loopback

MIN_TOKEN_CHARS = 16


def check_bind(host: str, token: str | None) -> None:
    """ConfigurationError unless ``host`` is loopback or a usable token is set."""
    if token is not None and len(token) < MIN_TOKEN_CHARS:
        raise ConfigurationError(
            f"AGENTMEM_UI_TOKEN is {len(token)} characters: use at least {MIN_TOKEN_CHARS} random ones "
            "(e.g. `python -c 'import secrets; print(secrets.token_urlsafe(24))'`)")
    if not is_loopback(host) and not token:
        raise ConfigurationError(
            f"the inspector shows every user's memory: it listens on {host!r} only with a token. Set "
            "AGENTMEM_UI_TOKEN (at least 16 random characters) or keep the default --host 127.0.0.1")


def serve(mm: Any, config: InspectorConfig, port: int, *, announce: Callable[[str], None] = print) -> None:
    """Run the inspector over ``mm`` until interrupted (checks the address first)."""
    import uvicorn

    check_bind(config.host, config.token)
    app = create_app(mm, config)
    shown = f"[{config.host}]" if ":" in config.host else config.host
    mode = "writes allowed" if config.allow_writes else "read-only"
    announce(f"agentmem ui: http://{shown}:{port}/ ({mode}{', token required' if config.token else ''}); "
             "Ctrl-C to stop")
    uvicorn.run(app, host=config.host, port=port, log_level="warning", access_log=False)
