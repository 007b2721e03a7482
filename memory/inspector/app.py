"""The inspector's web application: Starlette, server-rendered Jinja2 pages, no assets fetched.

``create_app(mm, config)`` returns an ASGI app over one :class:`~memory.MemoryManager`.
Every page reads through :mod:`memory.inspector.queries` (paged, user-scoped) or the
manager; every write goes through the manager's own methods, called with keywords.

Who may do what:

* **Reading** needs nothing more when the app listens on loopback; a request whose
  ``Host`` is not a loopback name is refused there (a web page elsewhere cannot reach
  the inspector by DNS rebinding). With a token configured (``AGENTMEM_UI_TOKEN``,
  required to listen on any other address) every request must carry it: ``Authorization:
  Bearer <token>``, or once ``?token=<token>`` in the browser, which sets a cookie.
* **Writing** (consolidate, undo, forget a user) only when started with
  ``--allow-writes``; otherwise every write answers 403 and changes nothing. A write is
  a POST carrying this process's form key (a page of this app rendered it), so another
  site cannot post a form to it.
"""

from __future__ import annotations

import hmac
import ipaddress
import secrets
from dataclasses import dataclass
from typing import Any
from collections.abc import Awaitable, Callable
from urllib.parse import parse_qs, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from memory.errors import AccessDeniedError, AgentMemError, InvalidInputError, NotFoundError
from memory.inspector import pages

TOKEN_COOKIE = "agentmem_ui_token"
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "::1")


@dataclass(frozen=True)
class InspectorConfig:
    """How the app was started: writes allowed, the access token, the address it listens on."""

    allow_writes: bool = False
    token: str | None = None
    host: str = "127.0.0.1"
    page_size: int = 100


def is_loopback(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def _host_name(header: str) -> str:
    if header.startswith("["):
        return header[1:].split("]", 1)[0]
    return header.rsplit(":", 1)[0] if header.count(":") == 1 else header


class Guard:
    """ASGI middleware: the token (when configured) and, on loopback, the Host header."""

    def __init__(self, app: ASGIApp, config: InspectorConfig) -> None:
        self.app, self.config = app, config

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        host = _host_name(request.headers.get("host", ""))
        if is_loopback(self.config.host) and not is_loopback(host):
            await _plain(403, "this inspector listens on loopback only; open it as http://127.0.0.1:PORT/")(
                scope, receive, send)
            return
        token = self.config.token
        if token:
            given = request.query_params.get("token")
            if given is not None and request.method == "GET" and hmac.compare_digest(given, token):
                rest = [(k, v) for k, v in request.query_params.multi_items() if k != "token"]
                target = request.url.path + ("?" + urlencode(rest) if rest else "")
                response = RedirectResponse(target, status_code=303)
                response.set_cookie(TOKEN_COOKIE, token, httponly=True, samesite="strict")
                await response(scope, receive, send)
                return
            auth = request.headers.get("authorization", "")
            presented = auth[7:] if auth.lower().startswith("bearer ") else request.cookies.get(TOKEN_COOKIE, "")
            if not hmac.compare_digest(presented.encode(), token.encode()):
                await _plain(401, "this inspector needs its token: open it once as ...?token=<AGENTMEM_UI_TOKEN>, "
                                  "or send Authorization: Bearer <token>")(scope, receive, send)
                return
        await self.app(scope, receive, send)


def _plain(status: int, text: str) -> Response:
    return Response(text + "\n", status_code=status, media_type="text/plain")


class Inspector:
    """Routes, templates and the write checks around one manager."""

    def __init__(self, mm: Any, config: InspectorConfig) -> None:
        self.mm, self.config = mm, config
        self.form_key = secrets.token_urlsafe(24)
        self.env = Environment(loader=PackageLoader("memory.inspector", "templates"),
                               autoescape=select_autoescape(["html"]), trim_blocks=True, lstrip_blocks=True)
        self.env.globals.update(url=url, writes=config.allow_writes, form_key=self.form_key)
        self.env.filters.update(pages.FILTERS)

    def render(self, template: str, code: int = 200, /, **values: Any) -> HTMLResponse:
        return HTMLResponse(self.env.get_template(template).render(**values), status_code=code)

    def page(self, build: Callable[..., tuple[str, dict[str, Any]]]) -> Callable[[Request], Awaitable[Response]]:
        """A GET endpoint: ``build(mm, params, config)`` in a worker thread, then its template."""

        async def endpoint(request: Request) -> Response:
            template, values = await run_in_threadpool(build, self.mm, request.query_params, self.config)
            return self.render(template, **values)

        return endpoint

    def action(self, do: Callable[..., str]) -> Callable[[Request], Awaitable[Response]]:
        """A write endpoint: refused unless writes are allowed and the form is this app's."""

        async def endpoint(request: Request) -> Response:
            if not self.config.allow_writes:
                return self.render("error.html", 403, title="read-only", message=(
                    "This inspector was started read-only: nothing was changed. Restart it with "
                    "`agentmem ui --allow-writes` to consolidate, undo or forget."))
            form = {k: v[-1] for k, v in parse_qs((await request.body()).decode("utf-8", "replace"),
                                                  keep_blank_values=True).items()}
            if not hmac.compare_digest(form.get("form_key", ""), self.form_key):
                return self.render("error.html", 403, title="refused", message=(
                    "This form did not come from this inspector (or it was restarted since): reload the page "
                    "and try again. Nothing was changed."))
            target = await run_in_threadpool(do, self.mm, {**dict(request.query_params), **form})
            return RedirectResponse(target, status_code=303)

        return endpoint

    def error(self, status: int, title: str) -> Callable[[Request, Exception], Awaitable[Response]]:
        async def handler(request: Request, exc: Exception) -> Response:
            return self.render("error.html", status, title=title, message=str(exc))

        return handler


def url(path: str, **params: Any) -> str:
    """``path`` with the non-empty ``params`` as its query string."""
    kept = {k: str(v) for k, v in params.items() if v is not None and v != ""}
    return path + ("?" + urlencode(kept) if kept else "")


def create_app(mm: Any, config: InspectorConfig | None = None) -> ASGIApp:
    """The inspector over ``mm`` (see the module docstring for what ``config`` allows)."""
    config = config or InspectorConfig()
    app = Inspector(mm, config)
    routes = [
        Route("/", app.page(pages.overview)),
        Route("/user", app.page(pages.user)),
        Route("/thread", app.page(pages.thread)),
        Route("/thread/usage", app.page(pages.usage)),
        Route("/summary", app.page(pages.summary)),
        Route("/summary/sources", app.page(pages.sources)),
        Route("/facts", app.page(pages.facts)),
        Route("/search", app.page(pages.search)),
        Route("/forget", app.page(pages.forget_form)),
        Route("/thread/consolidate", app.action(pages.consolidate), methods=["POST"]),
        Route("/summary/undo", app.action(pages.undo), methods=["POST"]),
        Route("/forget", app.action(pages.forget), methods=["POST"]),
    ]
    handlers: dict[Any, Any] = {
        NotFoundError: app.error(404, "not found"),
        InvalidInputError: app.error(400, "invalid request"),
        AccessDeniedError: app.error(403, "access denied"),
        AgentMemError: app.error(500, "error"),
    }
    starlette = Starlette(routes=routes, exception_handlers=handlers)
    return Guard(starlette, config)
