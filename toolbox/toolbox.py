"""Toolbox: register hundreds of tools, hand the model the few that fit the request.

Registration describes a function (``schema.py``: JSON schema from the type hints,
description from the docstring), optionally asks an LLM once for a clearer
description and example user queries (``augment.py``), builds one search text
(``text.py``: name words + description + signature + queries), embeds it once and
upserts the row into ``toolbox_memory`` (``store.py``). A content hash over
everything that shapes the stored row (name, docstring, schema, augment flag,
embedding model) makes re-registering an unchanged tool free: no LLM call, no
embedding, one indexed read.

Retrieval embeds the request and scores every tool of this process on its signals
(vector, keyword, group), fused linearly (``index.py``, where the weights and the
measurements behind them are); each tool comes back as a ``Hit[Tool]`` (the tool, its
score, its signals) in a :class:`~toolbox.models.Retrieved` list that also says whether
any tool suits the request. Pinned tools are always added.

Execution (``calls.py``) validates a model's tool call against the schema the model
was shown, runs the function (sync or async), logs arguments, full output, status
and duration in ``tool_log``, and answers every mistake with a structured result
telling the model how to fix the call. Nothing the model or the tool does raises into
the loop (``KeyboardInterrupt`` excepted): a tool that hangs past its timeout, raises
``SystemExit``, or returns a value that cannot be printed is an error result too
(``running.py``).
"""

from __future__ import annotations

import difflib
import logging
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Any, TypeVar, overload
from collections.abc import Callable, Iterable, Sequence

from memory import ConfigurationError, InvalidInputError, MemoryManager
from memory.retrieval.hits import Hit
from memory.store.validation import check_id, check_json, check_number, check_positive_int, check_text

from . import store
from .augment import Augmentation, augment
from .calls import ParsedCall, check_arguments, convert_arguments, parse_call, render_output
from .errors import ToolNotRegisteredError
from .index import MODES, NO_TOOL_SCORE, IndexedTool, ToolIndex
from .models import PINNED, Retrieved, Tool, ToolResult
from .ranking import rank_many
from .running import MAX_ABANDONED, Outcome, arun_tool, run_tool, safe_repr, safe_str
from .schema import FunctionSpec, describe_function
from .schemas import describe_schema
from .text import content_hash, search_text

log = logging.getLogger("toolbox")

F = TypeVar("F", bound=Callable[..., Any])

#: The longest tool timeout accepted (seconds); longer ones are a mistake.
MAX_TIMEOUT = 86_400.0


def check_timeout(value: Any, field: str = "timeout", *, allow_zero: bool = False) -> float | None:
    """None, or seconds in (0, MAX_TIMEOUT] (0 too with ``allow_zero``: no limit)."""
    if value is None:
        return None
    seconds = check_number(value, field)
    if not (0 < seconds <= MAX_TIMEOUT or (allow_zero and seconds == 0)):
        low = "0 (no limit) or above" if allow_zero else "above 0"
        raise InvalidInputError(f"{field} must be a number of seconds, {low} and at most {MAX_TIMEOUT:g}; "
                                f"got {repr(value)[:40]}")
    return seconds



@dataclass
class _Pending:
    """A tool whose stored row must be (re)built: augmentation done, embedding pending."""

    spec: FunctionSpec
    func: Callable[..., Any] | None
    category: str
    hash: str
    aug: Augmentation
    text: str


class Toolbox:
    """A namespace of tools stored in ``toolbox_memory``, runnable by this process.

    ``llm``: a LangChain chat model used by ``register_tool(augment=True)``, e.g.
    ``memory.llm.chat.chat_model_from_env()``; with None, augmentation falls back to the
    docstring (and says so once per toolbox). ``output_limit``:
    outputs longer than this many characters reach the model as a preview plus the
    ``tool_log`` id of the full text. ``min_score``: the best score below which
    :meth:`retrieve` reports that no registered tool suits the request (calibrated:
    ``toolbox/index.py``).
    """

    def __init__(self, mm: MemoryManager, *, namespace: str = "default", llm: Any = None,
                 output_limit: int = 4_000, n_queries: int = 5, min_score: float = NO_TOOL_SCORE) -> None:
        self.mm = mm
        self.namespace = check_id(namespace, "namespace", max_chars=mm.settings.max_id_chars)
        self.llm = llm
        self.output_limit = check_positive_int(output_limit, "output_limit")
        self.n_queries = check_positive_int(n_queries, "n_queries", maximum=50)
        self.min_score = check_number(min_score, "min_score")
        self._tools: dict[str, Tool] = {}
        self._index: ToolIndex | None = None  # built on the first retrieval after a change
        self._pinned: list[str] = []
        self._lock = threading.RLock()
        self._said_no_llm = False
        self.llm_calls = 0  # augmentation calls made, for tests and benchmarks
        default = mm.settings.tool_timeout
        if isinstance(default, bool) or not isinstance(default, (int, float)) or not 0 <= default <= MAX_TIMEOUT:
            raise ConfigurationError(f"AGENTMEM_TOOL_TIMEOUT={default!r}: use seconds between 0 (no limit) and "
                                     f"{MAX_TIMEOUT:g}")
        #: Seconds a tool may run unless registered with its own ``timeout`` (None: no limit).
        self.tool_timeout: float | None = float(default) or None

    # -- registration ---------------------------------------------------------------
    @overload
    def register_tool(self, func: F, *, augment: bool = False, name: str | None = None,
                      timeout: float | None = None) -> F: ...

    @overload
    def register_tool(self, func: None = None, *, augment: bool = False, name: str | None = None,
                      timeout: float | None = None) -> Callable[[F], F]: ...

    def register_tool(self, func: Any = None, *, augment: bool = False, name: str | None = None,
                      timeout: float | None = None) -> Any:
        """Register ``func`` as a tool; works as ``@register_tool``, ``@register_tool(...)`` or a call.

        Returns the function unchanged. ``name`` overrides ``func.__name__`` (needed for
        lambdas, callable objects, or two tools from one function). ``timeout``: seconds
        this tool may run (default: ``settings.tool_timeout``, ``AGENTMEM_TOOL_TIMEOUT``);
        0 runs it in the caller's thread with no limit at all (for tools bound to their
        thread), which no per-call ``timeout`` can shorten.
        """
        if func is None:
            def decorator(f: F) -> F:
                self.register_tools([f], augment=augment, names=[name], timeout=timeout)
                return f
            return decorator
        self.register_tools([func], augment=augment, names=[name], timeout=timeout)
        return func

    def register_tools(self, funcs: Iterable[Callable[..., Any]], *, augment: bool = False,
                       names: Sequence[str | None] | None = None, timeout: float | None = None) -> list[Tool]:
        """Register many functions at once (one embedding batch); returns their tools.

        A tool whose stored row has the same content hash is reused as stored: no LLM
        call, no embedding. The exception: ``augment=True`` over a row whose augmentation
        fell back to the docstring is retried when a model is configured.
        """
        funcs = list(funcs)
        timeout = check_timeout(timeout, allow_zero=True)
        names = list(names) if names is not None else [None] * len(funcs)
        if len(names) != len(funcs):
            raise InvalidInputError("names must have one entry per function")
        # all described before anything is written
        specs = [describe_function(f, n) for f, n in zip(funcs, names, strict=False)]
        return self._register(specs, funcs, [""] * len(specs), augment=augment, timeout=timeout)

    def register_schema(self, schema: Any, handler: Callable[..., Any] | None = None, *,
                        category: str | None = None, augment: bool = False,
                        timeout: float | None = None) -> Tool:
        """Register a tool from its schema: OpenAI, MCP or a LangChain tool (see ``toolbox/schemas.py``).

        ``handler``: the function that runs a call (called with the arguments as keywords);
        None for a tool this process retrieves but does not run (a LangChain tool brings
        its own). The name and description are kept exactly as given. ``category``: the
        group the tool belongs to (MCP server, API, toolkit); indexed and a retrieval signal.
        """
        return self.register_schemas([schema], [handler], categories=[category], augment=augment,
                                     timeout=timeout)[0]

    def register_schemas(self, schemas: Iterable[Any], handlers: Sequence[Callable[..., Any] | None] | None = None,
                         *, categories: Sequence[str | None] | None = None, augment: bool = False,
                         timeout: float | None = None) -> list[Tool]:
        """Register many tools from schemas at once (one embedding batch); returns their tools."""
        schemas = list(schemas)
        handlers = list(handlers) if handlers is not None else [None] * len(schemas)
        cats = list(categories) if categories is not None else [None] * len(schemas)
        if len(handlers) != len(schemas) or len(cats) != len(schemas):
            raise InvalidInputError("handlers and categories must have one entry per schema")
        timeout = check_timeout(timeout, allow_zero=True)
        described = [describe_schema(s) for s in schemas]
        specs = [d.spec for d in described]
        funcs = [h if h is not None else d.handler for h, d in zip(handlers, described, strict=False)]
        for h in funcs:
            if h is not None and not callable(h):
                raise InvalidInputError(f"a handler must be callable, got {type(h).__name__}")
        limit = self.mm.settings.max_id_chars
        categories_ = [check_text(c, "category", max_chars=limit) if c else "" for c in cats]
        return self._register(specs, funcs, categories_, augment=augment, timeout=timeout)

    def _register(self, specs: list[FunctionSpec], funcs: Sequence[Callable[..., Any] | None], categories: list[str],
                  *, augment: bool, timeout: float | None) -> list[Tool]:
        seen: set[str] = set()
        for spec in specs:
            check_text(spec.docstring, f"docstring of {spec.name}", max_chars=self.mm.settings.max_content_chars,
                       allow_empty=True)
            if spec.name in seen:
                raise InvalidInputError(f"tool name {spec.name!r} appears twice in one registration")
            seen.add(spec.name)
        if augment and self.llm is None:
            self._say_no_llm()
        tools: list[Tool] = []
        pending: list[_Pending] = []
        model = self.mm.embeddings.name
        for spec, func, category in zip(specs, funcs, categories, strict=False):
            digest = content_hash(name=spec.name, docstring=spec.docstring, parameters=spec.parameters,
                                  augment=augment, model=model, category=category)
            row = store.fetch(self.mm.db, self.namespace, spec.name)
            if (row is not None and row.content_hash == digest and row.embedding is not None
                    and (not augment or row.augmented or self.llm is None)):
                tools.append(self._tool(spec, func, row))
                continue
            aug = self._augment(spec) if augment else Augmentation(spec.description)
            text = search_text(spec.name, aug.description, spec.parameters, aug.queries, category)
            pending.append(_Pending(spec, func, category, digest, aug, text))
        if pending:
            vectors = self.mm.embeddings.embed([p.text[:4000] for p in pending])
            for p, vec in zip(pending, vectors, strict=False):
                row = store.upsert(self.mm.db, namespace=self.namespace, name=p.spec.name,
                                   docstring=p.spec.docstring, description=p.aug.description,
                                   json_schema=p.spec.parameters, queries=p.aug.queries, search_text=p.text,
                                   content_hash=p.hash, augmented=p.aug.augmented, embedding=vec,
                                   category=p.category)
                tools.append(self._tool(p.spec, p.func, row))
        for tool in tools:
            tool.timeout = timeout
        with self._lock:
            for tool in tools:
                self._tools[tool.name] = tool
            self._index = None
        order = {s.name: i for i, s in enumerate(specs)}
        return sorted(tools, key=lambda t: order[t.name])

    def _tool(self, spec: FunctionSpec, func: Callable[..., Any] | None, row: store.ToolRow) -> Tool:
        return Tool(name=spec.name, description=row.description, json_schema=spec.parameters, func=func,
                    docstring=spec.docstring, queries=list(row.queries), augmented=row.augmented,
                    namespace=self.namespace, content_hash=row.content_hash, signature=spec.signature_text,
                    adapters=spec.adapters, category=row.category, embedding=row.embedding)

    def _say_no_llm(self) -> None:
        if not self._said_no_llm:
            self._said_no_llm = True
            log.warning("toolbox %r: no LLM configured, so augment=True uses the docstring as the description "
                        "(pass llm= to Toolbox to augment)", self.namespace)

    def _augment(self, spec: FunctionSpec) -> Augmentation:
        if self.llm is None:
            return Augmentation(spec.description, [], False, "no LLM configured")
        self.llm_calls += 1
        result = augment(self.llm, name=spec.name, signature=spec.signature_text, docstring=spec.docstring,
                         fallback=spec.description, n=self.n_queries)
        if not result.augmented:
            log.warning("toolbox %r: augmenting %r fell back to the docstring: %s", self.namespace, spec.name,
                        result.reason)
        return result

    # -- the registry ---------------------------------------------------------------
    @property
    def tools(self) -> list[Tool]:
        with self._lock:
            return list(self._tools.values())

    def get(self, name: str) -> Tool:
        with self._lock:
            tool = self._tools.get(name)
        if tool is None:
            raise ToolNotRegisteredError(f"no tool named {name!r} is registered in this toolbox")
        return tool

    def __contains__(self, name: object) -> bool:
        return name in self._tools

    def __len__(self) -> int:
        return len(self._tools)

    def unregister(self, name: str) -> None:
        """Stop offering ``name`` from this process (its stored row stays for other processes)."""
        with self._lock:
            self.get(name)
            del self._tools[name]
            self._index = None
            if name in self._pinned:
                self._pinned.remove(name)

    def pin(self, name: str) -> None:
        """Always include ``name`` in :meth:`retrieve` results (e.g. memory tools under pressure)."""
        with self._lock:
            self.get(name)
            if name not in self._pinned:
                self._pinned.append(name)

    def unpin(self, name: str) -> None:
        with self._lock:
            if name in self._pinned:
                self._pinned.remove(name)

    @property
    def pinned(self) -> list[str]:
        return list(self._pinned)

    # -- retrieval --------------------------------------------------------------------
    def retrieve(self, query: str, k: int = 5, *, mode: str = "hybrid") -> Retrieved:
        """The ``k`` registered tools most relevant to ``query``, best first, plus every pinned tool.

        Every tool is scored (``toolbox/index.py``: vector per request part, BM25F keywords,
        the tool's group), so the first tools never depend on ``k``. The result is a list
        of ``Hit[Tool]``: ``hit.item`` the tool, ``hit.score`` and ``hit.signals`` why it
        came back (a pinned tool added beyond the ranking: score 0.0, signals
        ``{"pinned": 1.0}``); ``.tools`` the tools to hand to the model. The list's
        ``suitable`` is False when the best score is below ``min_score``: no registered
        tool is likely to serve the request. ``mode``: ``"hybrid"`` (default), or
        ``"vector"`` / ``"keyword"`` alone (for comparison).
        """
        return self.retrieve_many([query], k, mode=mode)[0]

    def retrieve_many(self, queries: Sequence[str], k: int = 5, *,
                      mode: str = "hybrid") -> list[Retrieved]:
        """:meth:`retrieve` for each request, every request part embedded in one batch."""
        limit = self.mm.settings.max_content_chars
        queries = [check_text(q, "query", max_chars=limit) for q in queries]
        k = check_positive_int(k, "k", maximum=1000)
        if mode not in MODES:
            raise InvalidInputError(f"mode must be one of {', '.join(MODES)}; got {mode!r}")
        with self._lock:
            tools = list(self._tools.values())
            pinned = list(self._pinned)
            index = self._index
            if index is None or index.names != [t.name for t in tools]:
                index = self._index = ToolIndex([IndexedTool(t.name, t.description, t.json_schema, t.queries,
                                                             t.category, t.embedding) for t in tools])
        out = []
        for ranked in rank_many(index, self.mm.embeddings, queries, k, mode):
            result = Retrieved(Hit(tools[i], score, signals) for i, score, signals in ranked)
            chosen = {tools[i].name for i, _, _ in ranked}
            result.extend(Hit(t, 0.0, {PINNED: 1.0}) for t in tools if t.name in pinned and t.name not in chosen)
            result.best_score = ranked[0][1] if ranked else None
            result.suitable = bool(ranked) and ranked[0][1] >= self.min_score
            out.append(result)
        return out

    def calibrate_min_score(self, requests: Sequence[str], *, keep: float = 0.95) -> float:
        """Set ``min_score`` from requests this catalogue can answer: the score that keeps ``keep`` of them.

        The best score of a request depends on how the catalogue's descriptions and its
        users' requests are written (``toolbox/index.py``), so the "no suitable tool"
        threshold is best set from a sample of real requests. Returns the new threshold.
        """
        if not 0 < keep <= 1:
            raise InvalidInputError(f"keep must be a share in (0, 1], got {keep!r}")
        best = [r.best_score for r in self.retrieve_many(list(requests), 1) if r.best_score is not None]
        if not best:
            raise InvalidInputError("calibrate_min_score needs at least one request and one registered tool")
        best.sort()
        self.min_score = float(best[min(len(best) - 1, int((1 - keep) * len(best)))])
        return self.min_score

    async def aretrieve(self, query: str, k: int = 5, *, mode: str = "hybrid") -> Retrieved:
        """Async :meth:`retrieve`: the request's embedding and the ranking run in a worker thread."""
        import asyncio

        return await asyncio.to_thread(self.retrieve, query, k, mode=mode)

    def openai_tools(self, query: str, k: int = 5) -> list[dict[str, Any]]:
        """``retrieve`` as OpenAI tool schemas, ready for ``bind_tools`` or the API's ``tools=``."""
        return [hit.item.openai_schema for hit in self.retrieve(query, k)]

    # -- execution --------------------------------------------------------------------
    def execute(self, tool_call: Any, *, user_id: str, thread_id: str | None = None,
                timeout: float | None = None) -> ToolResult:
        """Run a model's tool call; every mistake comes back as a ToolResult, never raised.

        The call may run for the tool's timeout (``register_tool(timeout=...)``, else
        ``settings.tool_timeout``), or ``timeout`` seconds if that is shorter (the agent
        passes what is left of its turn); past it the model gets a ``tool_timeout`` error.
        Only ``KeyboardInterrupt`` is ever raised.
        """
        uid, tid = self._ids(user_id, thread_id)
        limit = check_timeout(timeout)
        start = time.perf_counter()
        call, tool, prepared = self._prepare(tool_call)
        if isinstance(prepared, ToolResult):
            return self._finish(prepared, call, uid, tid, start)
        assert tool is not None and tool.func is not None
        seconds = self._limit(tool, limit)
        outcome = run_tool(tool.func, prepared, seconds, name=tool.name)
        return self._finish(self._result(call, outcome, seconds), call, uid, tid, start)

    async def aexecute(self, tool_call: Any, *, user_id: str, thread_id: str | None = None,
                       timeout: float | None = None) -> ToolResult:
        """Async :meth:`execute`: awaits coroutine tools (cancelled at the timeout), runs sync ones in a thread."""
        import asyncio

        uid, tid = self._ids(user_id, thread_id)
        limit = check_timeout(timeout)
        start = time.perf_counter()
        call, tool, prepared = self._prepare(tool_call)
        if isinstance(prepared, ToolResult):
            return await asyncio.to_thread(self._finish, prepared, call, uid, tid, start)
        assert tool is not None and tool.func is not None
        seconds = self._limit(tool, limit)
        outcome = await arun_tool(tool.func, prepared, seconds)
        return await asyncio.to_thread(self._finish, self._result(call, outcome, seconds), call, uid, tid, start)

    def skip(self, tool_call: Any, *, user_id: str, thread_id: str | None = None,
             reason: str = "the turn's time limit was reached") -> ToolResult:
        """Answer (and log) a call without running it, e.g. when the turn has no time left."""
        uid, tid = self._ids(user_id, thread_id)
        start = time.perf_counter()
        call = parse_call(tool_call)
        fix = "Do not call tools again in this turn; answer the user with what you have."
        result = ToolResult("error", ToolResult.error_content("not_run", f"{call.name[:100]} was not run: {reason}",
                                                              fix), call.name, call.id, error="not_run", hint=fix)
        return self._finish(result, call, uid, tid, start)

    def _limit(self, tool: Tool, limit: float | None) -> float | None:
        if tool.timeout == 0:  # registered to run inline, unbounded
            return None
        own = tool.timeout if tool.timeout is not None else self.tool_timeout
        if own is None:
            return limit
        return own if limit is None else min(own, limit)

    def _result(self, call: ParsedCall, outcome: Outcome, seconds: float | None) -> ToolResult:
        if outcome.timed_out:
            return self._timed_out(call, seconds or 0.0)
        if outcome.busy:
            message = (f"{call.name} was not run: {MAX_ABANDONED} earlier calls of it are still running past their "
                       "timeout")
            fix = "The tool is stuck right now. Do not call it again in this turn; tell the user it is unavailable."
            return ToolResult("error", ToolResult.error_content("tool_unavailable", message, fix), call.name,
                              call.id, error="tool_unavailable", hint=fix)
        if outcome.error is not None:  # the tool's own failure goes back to the model
            return self._tool_error(call, outcome.error)
        return self._ok(call, outcome.value)

    def _ids(self, user_id: str, thread_id: str | None) -> tuple[str, str | None]:
        limit = self.mm.settings.max_id_chars
        return (check_id(user_id, "user_id", max_chars=limit),
                check_id(thread_id, "thread_id", max_chars=limit) if thread_id is not None else None)

    def _prepare(self, tool_call: Any) -> tuple[ParsedCall, Tool | None, dict[str, Any] | ToolResult]:
        call = parse_call(tool_call)
        tool = self._tools.get(call.name)
        if tool is None:
            return call, None, self._unknown_tool(call)
        if tool.func is None:
            fix = f"{tool.name} cannot be run by this agent right now; answer without it or use another tool."
            return call, tool, ToolResult("error", ToolResult.error_content(
                "no_handler", f"{tool.name} was registered from its schema without a handler", fix),
                tool.name, call.id, error="no_handler", hint=fix)
        problems = [call.problem] if call.problem else check_arguments(tool, call.args)
        if not problems:
            try:
                check_json(call.args, "arguments", max_chars=self.mm.settings.max_content_chars)
            except InvalidInputError as exc:
                problems = [str(exc)]
        kwargs: dict[str, Any] = {}
        if not problems:
            kwargs, problems = convert_arguments(tool, call.args)
        if problems:
            return call, tool, self._bad_arguments(call, tool, problems)
        return call, tool, kwargs

    def check_call(self, tool_call: Any) -> list[str]:
        """What is wrong with a model's tool call against the stored schema (empty: it may be run).

        For tools run outside this process (registered from a schema without a handler).
        """
        call = parse_call(tool_call)
        if call.problem:
            return [call.problem]
        tool = self._tools.get(call.name)
        if tool is None:
            return [f"there is no tool named {call.name[:100]!r}"]
        return check_arguments(tool, call.args)

    def _unknown_tool(self, call: ParsedCall) -> ToolResult:
        names = sorted(self._tools)
        close = difflib.get_close_matches(call.name, names, n=3, cutoff=0.5)
        message = "the tool call names no tool" if not call.name else f"there is no tool named {call.name[:100]!r}"
        fix = (f"Did you mean {' or '.join(repr(c) for c in close)}? " if close else "") + \
            "Call one of the tools you were given, with its exact name."
        available = names if len(names) <= 30 else names[:30] + ["..."]
        return ToolResult("error", ToolResult.error_content("unknown_tool", message, fix, available_tools=available),
                          call.name, call.id, error="unknown_tool", hint=fix)

    def _bad_arguments(self, call: ParsedCall, tool: Tool, problems: list[str]) -> ToolResult:
        shown = [p if len(p) <= 500 else p[:480] + " ... (cut)" for p in problems[:20]]
        message = f"the arguments of {tool.name} are invalid: " + "; ".join(shown)
        fix = (f"Call {tool.name} again with a JSON object matching its parameters: {tool.signature}. "
               "Required arguments must be present; use only the listed names and types.")
        return ToolResult("error", ToolResult.error_content("invalid_arguments", message, fix,
                                                            parameters=tool.json_schema),
                          tool.name, call.id, error="invalid_arguments", hint=fix)

    def _tool_error(self, call: ParsedCall, exc: BaseException) -> ToolResult:
        if isinstance(exc, SystemExit):
            message = f"{call.name} tried to end the program (SystemExit {safe_repr(exc.code)[:100]}); it was stopped"
        else:
            message = f"{call.name} raised {type(exc).__name__}: {safe_str(exc)[:1000]}"
        fix = ("The tool failed while running. Check the argument values against the tool description and "
               "retry with corrected values; if it fails again, tell the user what went wrong.")
        result = ToolResult("error", ToolResult.error_content("tool_error", message, fix), call.name, call.id,
                            error="tool_error", hint=fix)
        try:
            result.traceback = "".join(traceback.format_exception(exc))
        except Exception:  # noqa: BLE001 - a traceback of an exception that cannot be printed
            result.traceback = message
        return result

    def _timed_out(self, call: ParsedCall, seconds: float) -> ToolResult:
        message = f"{call.name} did not finish within {seconds:g} s and was abandoned; it returned nothing"
        fix = ("The tool is too slow or stuck right now. Do not call it again with the same arguments in this "
               "turn; answer with what you have, or tell the user it timed out.")
        return ToolResult("error", ToolResult.error_content("tool_timeout", message, fix, timeout_seconds=seconds),
                          call.name, call.id, error="tool_timeout", hint=fix)

    def _ok(self, call: ParsedCall, value: Any) -> ToolResult:
        return ToolResult("ok", render_output(value), call.name, call.id, output=value)

    def _finish(self, result: ToolResult, call: ParsedCall, uid: str, tid: str | None, start: float) -> ToolResult:
        """Log the call (arguments, output, status, duration) and cut a long output to a preview.

        An output longer than ``settings.max_tool_output_chars`` is stored cut, ending in a
        line that says how much was kept, and the preview says so too: never "stored in
        full" for an output that was not.
        """
        s = self.mm.settings
        result.duration_ms = (time.perf_counter() - start) * 1000.0
        total = len(result.content)
        stored = _storable_text(result.content) or ""
        kept, cut = len(stored), False
        if kept > s.max_tool_output_chars:
            cut = True
            note = f"\n[tool_log keeps the first {{kept:,}} of {total:,} characters of this output]"
            kept = s.max_tool_output_chars - len(note.format(kept=s.max_tool_output_chars))
            stored = stored[:kept] + note.format(kept=kept)
        args = call.args if isinstance(call.args, dict) and _storable(call.args, s.max_content_chars) else \
            {"unstorable_arguments": safe_repr(call.args)[:2000].replace("\x00", "\\x00")}
        error_text = None if result.ok else (result.traceback or result.content)
        name = "".join(c for c in (call.name or "(none)") if c.isprintable())[:s.max_id_chars] or "(none)"
        try:
            entry = self.mm.write_tool_log(
                name, args, stored, user_id=uid, thread_id=tid, status=result.status,
                error=_storable_text(error_text[:20_000] if error_text else None), duration_ms=result.duration_ms,
                tool_call_id=_short(_storable_text(call.id), s.max_id_chars))
            result.log_id = entry.id
        except Exception:  # a logging failure must not turn a tool result into a crash of the loop
            log.exception("toolbox %r: could not write tool_log for %r", self.namespace, name)
        if result.ok and total > self.output_limit:
            result.truncated = True
            if result.log_id is None:
                where = "the full output could not be stored"
            elif cut:
                where = f"tool_log id {result.log_id} keeps only the first {kept:,} characters"
            else:
                where = f"the full output is stored in tool_log id {result.log_id}"
            result.content = (result.content[:self.output_limit] +
                              f"\n\n[output truncated: showing {self.output_limit:,} of {total:,} characters; "
                              f"{where}]")
        return result


def _storable(value: Any, limit: int) -> bool:
    try:
        check_json(value, "value", max_chars=limit)
    except InvalidInputError:
        return False
    return True


def _storable_text(text: str | None) -> str | None:
    if text is None:
        return None
    if "\x00" in text:
        text = text.replace("\x00", "\\x00")
    return text if text.isascii() else text.encode("utf-8", "replace").decode("utf-8")


def _short(value: str | None, limit: int) -> str | None:
    return None if value is None else value[:limit]
