"""A scripted chat model for the offline demo and tests: no network, no weights.

It is *not* a language model. Each call looks at the conversation so far and the
tools bound to it, and follows simple rules: call the best tool it was offered
(the first one, since the toolbox ranks them) with arguments it can fill from the
user's message, then answer by quoting the tool's result. Every answer starts with
``[scripted model]`` so nobody mistakes its text for a real model's.
"""

from __future__ import annotations

import re
import uuid
from typing import Any
from collections.abc import Callable, Sequence

from langchain_core.callbacks import CallbackManagerForLLMRun
from langchain_core.language_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult

LABEL = "[scripted model]"

#: A rule: (messages, offered tool schemas) -> the next AIMessage, or None to fall through.
Rule = Callable[[Sequence[BaseMessage], Sequence[dict[str, Any]]], "AIMessage | None"]


def _last_human(messages: Sequence[BaseMessage]) -> tuple[int, str]:
    for i in range(len(messages) - 1, -1, -1):
        if isinstance(messages[i], HumanMessage):
            return i, str(messages[i].content)
    return -1, ""


def fill_arguments(schema: dict[str, Any], text: str) -> dict[str, Any]:
    """Arguments for a tool's required parameters, taken from ``text`` as plainly as possible."""
    params = schema.get("function", schema).get("parameters", {})
    props: dict[str, Any] = params.get("properties", {})
    args: dict[str, Any] = {}
    numbers = re.findall(r"-?\d+(?:\.\d+)?", text)
    for name in params.get("required", []):
        spec = props.get(name, {})
        kind = spec.get("type")
        if "enum" in spec:
            args[name] = spec["enum"][0]
        elif kind == "integer":
            args[name] = int(float(numbers.pop(0))) if numbers else 1
        elif kind == "number":
            args[name] = float(numbers.pop(0)) if numbers else 1.0
        elif kind == "boolean":
            args[name] = True
        elif kind == "array":
            args[name] = []
        elif kind == "object":
            args[name] = {}
        else:
            args[name] = text
    return args


def default_rule(messages: Sequence[BaseMessage], tools: Sequence[dict[str, Any]]) -> AIMessage:
    idx, question = _last_human(messages)
    results = [m for m in messages[idx + 1:] if isinstance(m, ToolMessage)]
    if results:
        quoted = "; ".join(f"{m.name or 'tool'} said: {str(m.content)[:300]}" for m in results)
        return AIMessage(f"{LABEL} {quoted}")
    if tools:
        schema = tools[0]
        name = schema.get("function", schema)["name"]
        call = {"name": name, "args": fill_arguments(schema, question), "id": f"call_{uuid.uuid4().hex[:12]}",
                "type": "tool_call"}
        return AIMessage("", tool_calls=[call])
    return AIMessage(f"{LABEL} I have no tool for this; you said: {question[:300]}")


class ScriptedChatModel(BaseChatModel):
    """Follows ``rules`` in order (the first that answers wins), then :func:`default_rule`."""

    rules: list[Any] = []
    bound_tools: list[dict[str, Any]] = []
    calls: int = 0

    @property
    def _llm_type(self) -> str:
        return "agentmem-scripted"

    @property
    def model_name(self) -> str:
        return "scripted"

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> ScriptedChatModel:
        schemas = [t if isinstance(t, dict) else getattr(t, "openai_schema", t) for t in tools]
        return self.model_copy(update={"bound_tools": list(schemas)})

    def _generate(self, messages: list[BaseMessage], stop: list[str] | None = None,
                  run_manager: CallbackManagerForLLMRun | None = None, **kwargs: Any) -> ChatResult:
        self.calls += 1
        answer = None
        for rule in self.rules:
            answer = rule(messages, self.bound_tools)
            if answer is not None:
                break
        if answer is None:
            answer = default_rule(messages, self.bound_tools)
        return ChatResult(generations=[ChatGeneration(message=answer)])
