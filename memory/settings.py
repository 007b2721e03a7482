"""Settings, read once from the environment (``AGENTMEM_*``) with sane defaults.

Every knob that the design calls a "setting" lives here so a deployment can change it
without code: database URL, schema name, size limits, monitor thresholds, model
context windows and retention periods.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Any

from .errors import ConfigurationError

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


@dataclass(frozen=True)
class Settings:
    database_url: str | None = None
    data_dir: Path = field(default_factory=default_data_dir)
    schema: str = "agent_memory"
    pool_min_size: int = 1
    pool_max_size: int = 10

    # Input limits: anything larger is rejected with InvalidInputError, nothing stored.
    max_content_chars: int = 200_000
    max_tool_output_chars: int = 5_000_000
    max_id_chars: int = 200
    max_batch: int = 10_000

    # Context window monitor.
    default_context_window: int = 8_192
    model_context_windows: dict[str, int] = field(default_factory=lambda: dict(MODEL_CONTEXT_WINDOWS))
    warning_threshold: float = 0.50
    critical_threshold: float = 0.80
    hard_limit: float = 0.95
    reserved_output_tokens: int = 1_024
    safety_margin: float = 0.05

    # Durable facts.
    fact_max_chars: int = 180
    max_active_facts: int = 20
    # Cosine similarity to the closest active fact (see memory.fact_rules): at or above
    # ``fact_related_similarity`` a new fact may restate or contradict it, at or above
    # ``fact_duplicate_similarity`` it is a near-duplicate unless a value differs.
    fact_related_similarity: float = 0.55
    fact_duplicate_similarity: float = 0.90

    # Retention (days; 0 means keep forever), per table.
    retention_days: dict[str, int] = field(default_factory=lambda: {
        "conversational_memory": 0,
        "tool_log": 90,
        "summary_memory": 0,
        "entity_memory": 0,
    })

    # Search. ef_search 100: recall@10 0.84 vs 0.68 at pgvector's default 40 on 1M rows,
    # for ~2 ms more (bench/hnsw_scale.py).
    hnsw_ef_search: int = 100
    keyword_weight: float = 0.5

    # Embeddings. embedding_backend: "onnx" (int8 MiniLM under ONNX Runtime, exported
    # once into model_cache_dir; falls back to torch when ONNX Runtime is missing) or
    # "torch" (fp32 sentence-transformers). embedding_threads 0 keeps the runtime's
    # default (one per core).
    embedding_backend: str = "onnx"
    model_cache_dir: Path = field(default_factory=default_cache_dir)
    embedding_threads: int = 0
    embedding_batch_size: int = 64
    embedding_cache_size: int = 50_000

    # Tools: seconds a tool call may run before the model gets a ``tool_timeout`` error
    # (0: no limit, the tool runs in the caller's thread). ``register_tool(timeout=...)``
    # overrides it per tool; see toolbox.running for what happens to a tool that hangs.
    tool_timeout: float = 30.0

    @classmethod
    def from_env(cls, **overrides: Any) -> "Settings":
        """Build settings from the environment; keyword overrides win."""
        env = os.environ
        values: dict[str, Any] = {}
        url = env.get("AGENTMEM_DATABASE_URL") or env.get("DATABASE_URL")
        if url:
            values["database_url"] = url
        if env.get("AGENTMEM_DATA_DIR"):
            values["data_dir"] = Path(env["AGENTMEM_DATA_DIR"])
        if env.get("AGENTMEM_MODEL_CACHE_DIR"):
            values["model_cache_dir"] = Path(env["AGENTMEM_MODEL_CACHE_DIR"])
        simple = {f.name: f for f in fields(cls)}
        for name, f in simple.items():
            key = "AGENTMEM_" + name.upper()
            if name in ("database_url", "data_dir", "model_cache_dir") or key not in env:
                continue
            raw = env[key]
            default = getattr(cls(), name)
            try:
                if isinstance(default, bool):
                    values[name] = raw.lower() in ("1", "true", "yes", "on")
                elif isinstance(default, int):
                    values[name] = int(raw)
                elif isinstance(default, float):
                    values[name] = float(raw)
                elif isinstance(default, str):
                    values[name] = raw
            except ValueError as exc:
                raise ConfigurationError(f"{key}={raw!r} is not a valid {type(default).__name__}") from exc
        values.update(overrides)
        settings = cls(**values)
        settings.validate()
        return settings

    def validate(self) -> None:
        if not (0 < self.warning_threshold < self.critical_threshold <= self.hard_limit <= 1.0):
            raise ConfigurationError(
                "thresholds must satisfy 0 < warning < critical <= hard_limit <= 1, got "
                f"{self.warning_threshold}, {self.critical_threshold}, {self.hard_limit}"
            )
        if self.embedding_backend not in ("onnx", "torch"):
            raise ConfigurationError(
                f"embedding_backend {self.embedding_backend!r} (AGENTMEM_EMBEDDING_BACKEND): use 'onnx' "
                "(default) or 'torch'"
            )

    def __post_init__(self) -> None:
        # The one check every Settings passes, however built (from_env, the
        # constructor, with_): the schema name goes into SQL everywhere.
        check_schema_name(self.schema)

    def context_window(self, model: str | None) -> int:
        if model and model in self.model_context_windows:
            return self.model_context_windows[model]
        if model:
            for name, size in self.model_context_windows.items():
                if model.startswith(name):
                    return size
        return self.default_context_window

    def with_(self, **changes: Any) -> "Settings":
        return replace(self, **changes)
