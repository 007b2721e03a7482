"""The real HTTP path: ChatOpenAI against a local OpenAI-compatible server.

The server (tests/fix_llama.py) is llama.cpp's, serving SmolLM2-135M-Instruct. The
model is far too small to answer well: this checks the plumbing, not quality.
"""

from __future__ import annotations

import pytest

from fix_llama import needs_llama
from memory.agent.loop import MemoryAgent
from memory.llm.chat import chat_model_from_env, complete
from toolbox import Toolbox

pytestmark = needs_llama


@pytest.fixture
def http_model(llama_url, monkeypatch):
    monkeypatch.setenv("AGENTMEM_LLM_BASE_URL", llama_url)
    monkeypatch.setenv("AGENTMEM_LLM_MODEL", "smollm2")
    monkeypatch.setenv("AGENTMEM_LLM_TIMEOUT", "300")
    monkeypatch.setenv("AGENTMEM_LLM_MAX_TOKENS", "48")
    return chat_model_from_env()


def test_chat_model_from_env_talks_http(http_model):
    from langchain_openai import ChatOpenAI

    assert isinstance(http_model, ChatOpenAI)
    text = complete(http_model, "Say hello.")
    assert isinstance(text, str) and text.strip()


def test_agent_turn_over_http(mm, http_model, user, thread):
    def get_weather(city: str) -> str:
        """Current weather for a city."""
        return f"{city}: 12 C, cloudy"

    tb = Toolbox(mm, namespace="http-test")
    tb.register_tool(get_weather)
    agent = MemoryAgent(mm, tb, http_model, model_name="smollm2", max_iterations=2,
                        max_seconds=900, extract_with_model=False)
    result = agent.run("What is the weather in Paris?", user_id=user, thread_id=thread)
    assert result.answer.strip()
    assert result.iterations >= 1
    assert "get_weather" in result.tools_offered
    stored = mm.read_conversational_memory(thread_id=thread, user_id=user)
    assert stored[0].role == "user" and stored[0].content == "What is the weather in Paris?"
    assert stored[-1].role == "assistant" and stored[-1].content == result.answer
    # whatever the small model did with the tool, every call it made was executed and logged
    assert len(mm.read_tool_log(user_id=user, thread_id=thread)) == len(result.tool_calls)
