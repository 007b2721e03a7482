"""The hand-written tool catalogue (``data/tool_catalogue.txt``) as real Python functions.

Each catalogue entry becomes a function with a real signature (type hints, defaults),
a Google-style docstring and a name, built without ``exec``: the toolbox describes it
exactly as it would describe a hand-written function. The entry's ``aug`` lines are
what :class:`ScriptedAugmenter` answers when the toolbox asks for an augmentation:
a scripted stand-in for an LLM, so the benchmark shows the mechanics offline. Its
``dev`` and ``test`` lines are held-out requests labelled with the right tool.
"""

from __future__ import annotations

import inspect
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Literal

from langchain_core.language_models import SimpleChatModel

CATALOGUE = Path(__file__).resolve().parent / "data" / "tool_catalogue.txt"

_TYPES: dict[str, Any] = {"str": str, "int": int, "float": float, "bool": bool, "list": list[str], "dict": dict}


@dataclass
class Param:
    name: str
    hint: Any
    default: Any = inspect.Parameter.empty
    doc: str = ""


@dataclass
class CatalogueTool:
    name: str
    domain: str
    summary: str
    params: list[Param]
    aug: list[str] = field(default_factory=list)
    dev: list[str] = field(default_factory=list)
    test: list[str] = field(default_factory=list)

    @property
    def docstring(self) -> str:
        lines = [self.summary]
        documented = [p for p in self.params if p.doc]
        if documented:
            lines += ["", "Args:"] + [f"    {p.name}: {p.doc}" for p in documented]
        return "\n".join(lines)


def _param(spec: str) -> Param:
    name, _, rest = spec.strip().partition(":")
    typ, _, doc = rest.partition(":")
    typ, has_default, default = typ.partition("=")
    enum = re.fullmatch(r"enum\((.*)\)", typ.strip())
    hint = Literal[tuple(v.strip() for v in enum.group(1).split(","))] if enum else _TYPES[typ.strip()]  # type: ignore[misc]
    value: Any = inspect.Parameter.empty
    if has_default:
        default = default.strip()
        if hint is bool:
            value = default == "true"
        elif hint in (int, float):
            value = hint(default) if default else None
        elif default == "[]":
            value = None
        else:
            value = default or None
        if value is None:
            hint = hint | None
    return Param(name.strip(), hint, value, doc.strip())


def load(path: Path = CATALOGUE) -> list[CatalogueTool]:
    tools: list[CatalogueTool] = []
    domain = ""
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if line.startswith("## "):
            domain = line[3:].strip()
        elif not line or line.startswith("#"):
            continue
        elif " | " in line:
            name, summary, params = (part.strip() for part in line.split(" | "))
            tools.append(CatalogueTool(name, domain, summary, [_param(p) for p in params.split(";") if p.strip()]))
        else:
            key, _, text = line.partition(":")
            getattr(tools[-1], key.strip()).extend(q.strip() for q in text.split(";") if q.strip())
    return tools


def make_function(tool: CatalogueTool, *, name: str | None = None, summary: str | None = None) -> Callable[..., Any]:
    """A function with ``tool``'s signature and docstring; calling it echoes its arguments."""
    def function(**kwargs: Any) -> str:
        return json.dumps({"tool": function.__name__, "args": kwargs}, default=str)

    params = [inspect.Parameter(p.name, inspect.Parameter.KEYWORD_ONLY, default=p.default, annotation=p.hint)
              for p in tool.params]
    function.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    function.__annotations__ = {p.name: p.hint for p in tool.params} | {"return": str}
    function.__name__ = function.__qualname__ = name or tool.name
    doc = tool.docstring if summary is None else tool.docstring.replace(tool.summary, summary, 1)
    function.__doc__ = doc
    return function


class ScriptedAugmenter(SimpleChatModel):
    """A fake chat model that answers the toolbox's augmentation prompt from the catalogue.

    It keeps the docstring's summary as the description and returns the entry's ``aug``
    requests as example queries: the part of augmentation an LLM would add. Labelled
    as scripted wherever its figures are printed.
    """

    answers: dict[str, str] = {}
    calls: int = 0

    @classmethod
    def from_catalogue(cls, tools: list[CatalogueTool]) -> "ScriptedAugmenter":
        return cls(answers={t.name: json.dumps({"description": t.summary, "queries": t.aug}) for t in tools})

    @property
    def _llm_type(self) -> str:
        return "scripted-augmenter"

    def _call(self, messages: Any, stop: Any = None, run_manager: Any = None, **kwargs: Any) -> str:
        self.calls += 1
        prompt = str(messages[-1].content)
        match = re.search(r"^Tool name: (\S+)", prompt, re.MULTILINE)
        return self.answers.get(match.group(1) if match else "", "I cannot help with that.")
