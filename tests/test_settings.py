"""Settings: every value validated at start, one-line errors, dict settings, misspellings warned."""

from __future__ import annotations

import typing
import uuid
import warnings
from dataclasses import fields
from pathlib import Path

import pytest
from click.testing import CliRunner

from memory import ConfigurationError, ConfigurationWarning, Settings
from memory.cli.main import main
from memory.settings import RETENTION_TABLES, env_name

URL = {"AGENTMEM_DATABASE_URL": "postgresql://nobody@127.0.0.1:1/none"}


def load(**env: str) -> Settings:
    return Settings.from_env({**URL, **env})


def one_line_error(env: dict[str, str]) -> str:
    with pytest.raises(ConfigurationError) as info:
        Settings.from_env(env)
    message = str(info.value)
    assert "\n" not in message
    return message


@pytest.mark.parametrize("name, value, allowed", [
    ("AGENTMEM_POOL_MAX_SIZE", "0", ">= 1"),
    ("AGENTMEM_EMBEDDING_BATCH_SIZE", "0", ">= 1"),
    ("AGENTMEM_MAX_CONTENT_CHARS", "-5", ">= 1"),
    ("AGENTMEM_MAX_CONTENT_CHARS", "lots", "an integer"),
    ("AGENTMEM_POOL_MIN_SIZE", "-1", ">= 0"),
    ("AGENTMEM_WARNING_THRESHOLD", "1.5", "<= 1"),
    ("AGENTMEM_SAFETY_MARGIN", "1", "< 1"),
    ("AGENTMEM_HNSW_EF_SEARCH", "5000", "<= 1000"),
    ("AGENTMEM_LLM_TIMEOUT", "0", "> 0"),
    ("AGENTMEM_LLM_TIMEOUT", "nan", "a number"),
    ("AGENTMEM_KEYWORD_WEIGHT", "inf", "a number"),
    ("AGENTMEM_RETENTION_DAYS", "tool_log=-3", ">= 0"),
    ("AGENTMEM_RETENTION_DAYS", "tool_log", "key=value"),
    ("AGENTMEM_RETENTION_DAYS", "[1, 2]", "key=value"),
    ("AGENTMEM_MODEL_CONTEXT_WINDOWS", "big=0", ">= 1"),
])
def test_a_bad_value_is_one_line_naming_variable_value_and_rule(name: str, value: str, allowed: str) -> None:
    message = one_line_error({**URL, name: value})
    assert message.startswith(f"{name}=") and value in message and allowed in message, message


@pytest.mark.parametrize("f", [f for f in fields(Settings)
                               if typing.get_type_hints(Settings)[f.name] in (int, float, int | None)],
                         ids=lambda f: f.name)
def test_every_numeric_setting_is_checked_generically(f) -> None:
    """Whatever numeric field exists (others add fields later), junk and negatives are refused."""
    for value in ("abc", "-1", "1e400" if typing.get_type_hints(Settings)[f.name] is float else "1.5"):
        message = one_line_error({**URL, env_name(f.name): value})
        assert env_name(f.name) in message
    with pytest.raises(ConfigurationError, match=f.name):
        Settings(**{f.name: -1})  # built in code: the same rules
    with pytest.raises(ConfigurationError, match=f.name):
        Settings(**{f.name: "12"})  # a string where a number belongs


def test_the_pool_minimum_cannot_exceed_the_maximum() -> None:
    assert "AGENTMEM_POOL_MIN_SIZE" in one_line_error({**URL, "AGENTMEM_POOL_MIN_SIZE": "5",
                                                       "AGENTMEM_POOL_MAX_SIZE": "2"})


def test_valid_values_are_parsed_by_type(tmp_path: Path) -> None:
    s = load(AGENTMEM_POOL_MAX_SIZE="3", AGENTMEM_WARNING_THRESHOLD="0.4", AGENTMEM_LLM_TIMEOUT="2.5",
             AGENTMEM_LLM_MAX_TOKENS="64", AGENTMEM_DATA_DIR=str(tmp_path / "d"), AGENTMEM_SCHEMA="mem_x")
    assert (s.pool_max_size, s.warning_threshold, s.llm_timeout, s.llm_max_tokens) == (3, 0.4, 2.5, 64)
    assert s.data_dir == tmp_path / "d" and s.schema == "mem_x"
    assert load(AGENTMEM_POOL_MAX_SIZE="").pool_max_size == Settings().pool_max_size  # empty means unset


def test_a_data_dir_that_cannot_be_a_directory_is_refused_without_a_url(tmp_path: Path) -> None:
    message = one_line_error({"AGENTMEM_DATA_DIR": "/dev/null/x"})
    assert "AGENTMEM_DATA_DIR" in message and "/dev/null" in message and "not a directory" in message
    (tmp_path / "file").write_text("x")
    assert "not a directory" in one_line_error({"AGENTMEM_DATA_DIR": str(tmp_path / "file" / "sub")})
    assert Settings.from_env({"AGENTMEM_DATA_DIR": str(tmp_path / "new" / "dir")}).data_dir == tmp_path / "new" / "dir"
    load(AGENTMEM_DATA_DIR="/dev/null/x")  # unused when a server URL is set: no error


def test_the_embedded_server_refuses_an_unusable_data_dir_cleanly() -> None:
    from memory.store.embedded import start_server

    with pytest.raises(ConfigurationError, match="AGENTMEM_DATA_DIR"):
        start_server(Path("/dev/null/x/y"))


@pytest.mark.parametrize("raw", ["tool_log=7,conversational_memory=30", "tool_log = 7; conversational_memory=30",
                                 '{"tool_log": 7, "conversational_memory": 30}', "tool_log=7,conversational=30"])
def test_dict_settings_are_parsed_and_keep_the_other_defaults(raw: str) -> None:
    days = load(AGENTMEM_RETENTION_DAYS=raw).retention_days
    default = Settings().retention_days
    assert days["tool_log"] == 7 and days["conversational_memory"] == 30
    assert {k: v for k, v in days.items() if k not in ("tool_log", "conversational_memory")} == \
        {k: v for k, v in default.items() if k not in ("tool_log", "conversational_memory")}
    windows = load(AGENTMEM_MODEL_CONTEXT_WINDOWS="my-model=32000").model_context_windows
    assert windows["my-model"] == 32000 and windows["gpt-4o"] == Settings().model_context_windows["gpt-4o"]


def test_an_unknown_dict_key_is_refused_with_the_nearest_name() -> None:
    message = one_line_error({**URL, "AGENTMEM_RETENTION_DAYS": "tool_logs=7"})
    assert "tool_logs" in message and "did you mean tool_log" in message
    for table in RETENTION_TABLES:
        assert table in message


def test_a_misspelt_variable_warns_with_the_nearest_name() -> None:
    with pytest.warns(ConfigurationWarning, match="AGENTMEM_POOL_MAX_SIZ .*did you mean AGENTMEM_POOL_MAX_SIZE"):
        s = load(AGENTMEM_POOL_MAX_SIZ=uuid.uuid4().hex)
    assert s.pool_max_size == Settings().pool_max_size
    with pytest.warns(ConfigurationWarning, match="did you mean AGENTMEM_LLM_TIMEOUT"):
        load(AGENTMEM_LLM_TIMOUT=uuid.uuid4().hex)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load(AGENTMEM_USER="x", AGENTMEM_EMBEDDER="hash", AGENTMEM_LLM_TIMEOUT="3")  # known: no warning


@pytest.mark.parametrize("name, value", [("AGENTMEM_POOL_MAX_SIZE", "0"), ("AGENTMEM_EMBEDDING_BATCH_SIZE", "0"),
                                         ("AGENTMEM_MAX_CONTENT_CHARS", "-5"), ("AGENTMEM_RETENTION_DAYS", "x=1")])
def test_cli_reports_a_bad_setting_in_one_line(name: str, value: str) -> None:
    result = CliRunner().invoke(main, ["status"], env={**URL, name: value, "AGENTMEM_EMBEDDER": "hash"})
    assert result.exit_code == 1, result.output
    err = result.stderr.strip()
    assert err.startswith(f"agentmem: error: {name}=") and "\n" not in err, err
    assert "Traceback" not in result.output


def test_cli_data_dir_error_is_one_line() -> None:
    result = CliRunner().invoke(main, ["status"], env={"AGENTMEM_DATABASE_URL": None, "DATABASE_URL": None,
                                                       "AGENTMEM_DATA_DIR": "/dev/null/x",
                                                       "AGENTMEM_EMBEDDER": "hash"})
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert result.stderr.strip().startswith("agentmem: error: AGENTMEM_DATA_DIR=") and "\n" not in result.stderr.strip()


def test_cli_warns_about_a_misspelt_variable_in_one_line() -> None:
    value = uuid.uuid4().hex  # a value no other test used: warned once per process and value
    result = CliRunner().invoke(main, ["status"], env={**URL, "AGENTMEM_SCHEMAA": value, "AGENTMEM_EMBEDDER": "hash"})
    lines = [ln for ln in result.stderr.splitlines() if "warning" in ln]
    assert lines == ["agentmem: warning: AGENTMEM_SCHEMAA is not an agentmem setting and is ignored; "
                     "did you mean AGENTMEM_SCHEMA?"]
