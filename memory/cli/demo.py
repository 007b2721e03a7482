"""``agentmem demo``: a scripted multi-turn session on the embedded defaults.

Everything real but the model: the embedded PostgreSQL, the packaged MiniLM
embeddings, the toolbox's retrieval among a dozen tools, the context builder, the
monitor, consolidation with summary_id write-back and expansion. The model is
:class:`~memory.llm.scripted.ScriptedChatModel`, labelled as such: each turn has a plan
(which tool it would like, with which arguments), and it calls that tool only if the
toolbox's retrieval actually offered it; when the monitor's status line reads
warning or critical it first calls ``summarize_and_store`` itself, as a real model
is instructed to. A deliberately small context window makes that happen within a
few turns. Each stage is printed; the SQL counts at the end are read from the tables.
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from typing import Any
from collections.abc import Callable, Sequence

from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage

from memory.agent.loop import MemoryAgent
from memory.manager import MemoryManager
from memory.llm.scripted import LABEL, ScriptedChatModel

DEMO_MODEL = "scripted-demo"
DEMO_WINDOW = 3_000  # tokens: small on purpose, so consolidation shows within a few turns


# -- the demo's tools (plain typed functions; the docstring is what retrieval sees) ----------

def get_weather(city: str) -> str:
    """Current weather conditions and temperature for a city."""
    return f"{city}: 6 C, light snow, wind 20 km/h"


def convert_currency(amount: float, source: str, target: str) -> str:
    """Convert an amount of money from one currency to another at today's rate."""
    rates = {("EUR", "NOK"): 11.6, ("USD", "EUR"): 0.92, ("NOK", "EUR"): 0.086}
    rate = rates.get((source.upper(), target.upper()), 1.0)
    return f"{amount:g} {source.upper()} = {amount * rate:,.2f} {target.upper()} (rate {rate})"


def search_flights(origin: str, destination: str, date: str) -> str:
    """Find flights between two airports on a date, with prices."""
    return f"{origin}->{destination} on {date}: SK4021 07:10 (1,240 NOK), DY612 12:45 (980 NOK)"


def book_hotel(city: str, nights: int) -> str:
    """Reserve a hotel room in a city for a number of nights."""
    return f"Booked Hotel Bristol, {city}, {nights} nights, confirmation HB-{7000 + nights}"


def check_order_status(order_id: str) -> str:
    """Look up the shipping status of a customer order by its order number."""
    return f"Order {order_id}: shipped 2026-11-25 via PostNord, tracking PN55512, arriving 2026-12-01"


def create_ticket(title: str, priority: str) -> str:
    """Open a support ticket in the helpdesk with a title and a priority."""
    return f"Ticket INC-4471 created: {title} (priority {priority})"


def translate_text(text: str, language: str) -> str:
    """Translate a piece of text into another language."""
    return f"[{language}] {text}"


def calendar_free_slots(day: str) -> str:
    """List the free slots in the user's calendar on a given day."""
    return f"{day}: free 09:00-10:30 and 14:00-16:00"


def send_email(to: str, subject: str, body: str) -> str:
    """Send an e-mail message to a recipient."""
    return f"Sent '{subject}' to {to}"


def restart_service(service: str) -> str:
    """Restart a server-side service or daemon by name."""
    return f"{service} restarted, healthy after 4 s"


def stock_price(ticker: str) -> str:
    """Latest share price of a company by its stock ticker symbol."""
    return f"{ticker.upper()}: 212.40 USD (+0.8 %)"


def unit_convert(value: float, from_unit: str, to_unit: str) -> str:
    """Convert a measurement between units such as km and miles or kg and pounds."""
    factors = {("km", "miles"): 0.621371, ("kg", "lb"): 2.20462}
    return f"{value:g} {from_unit} = {value * factors.get((from_unit, to_unit), 1.0):.2f} {to_unit}"


DEMO_TOOLS: list[Callable[..., str]] = [get_weather, convert_currency, search_flights, book_hotel, check_order_status,
                                       create_ticket,
              translate_text, calendar_free_slots, send_email, restart_service, stock_price, unit_convert]


@dataclass
class Step:
    message: str
    tool: str | None = None
    args: dict[str, Any] | None = None


SCRIPT = [
    Step("Hi, I'm Dana from Northwind. I'm flying to Oslo next week: what's the weather there right now?",
         "get_weather", {"city": "Oslo"}),
    Step("Find me flights from Bergen to Oslo on 2026-12-03, please.",
         "search_flights", {"origin": "BGO", "destination": "OSL", "date": "2026-12-03"}),
    Step("How much is 250 euros in Norwegian kroner?",
         "convert_currency", {"amount": 250, "source": "EUR", "target": "NOK"}),
    Step("Book a hotel room in Oslo for 3 nights.", "book_hotel", {"city": "Oslo", "nights": 3}),
    Step("Also, where is my order ORD-88231? It hasn't arrived.", "check_order_status", {"order_id": "ORD-88231"}),
    Step("Open a support ticket about the late order, high priority.",
         "create_ticket", {"title": "Order ORD-88231 late", "priority": "high"}),
    Step("Which slots are free in my calendar on Thursday?", "calendar_free_slots", {"day": "Thursday"}),
    Step("Email the itinerary to dana@northwind.example with the subject 'Oslo trip'.",
         "send_email", {"to": "dana@northwind.example", "subject": "Oslo trip", "body": "Flights, hotel HB-7003"}),
    Step("Show me the original messages behind the earlier summary of our conversation.", "expand_summary", None),
]

_SUMMARY_ID = re.compile(r"\[Summary ID: ([0-9a-f-]{36})\]")
_STATUS = re.compile(r"## Context Status\n.*\((?:[\d.]+ %), (warning|critical)\)")


def _since_last_human(messages: Sequence[BaseMessage]) -> tuple[str, list[ToolMessage], str]:
    system = next((str(m.content) for m in messages if isinstance(m, SystemMessage)), "")
    last = max(i for i, m in enumerate(messages) if isinstance(m, HumanMessage))
    return str(messages[last].content), [m for m in messages[last + 1:] if isinstance(m, ToolMessage)], system


def _call(name: str, args: dict[str, Any]) -> AIMessage:
    return AIMessage("", tool_calls=[{"name": name, "args": args, "id": f"call_{uuid.uuid4().hex[:10]}",
                                      "type": "tool_call"}])


def demo_rule(script: Sequence[Step]) -> Callable[[Sequence[BaseMessage], Sequence[dict[str, Any]]], AIMessage | None]:
    plans = {s.message: s for s in script}

    def rule(messages: Sequence[BaseMessage], tools: Sequence[dict[str, Any]]) -> AIMessage | None:
        question, results, system = _since_last_human(messages)
        offered = {t.get("function", t)["name"] for t in tools}
        called = {m.name for m in results}
        if _STATUS.search(system) and "summarize_and_store" in offered and "summarize_and_store" not in called:
            return _call("summarize_and_store", {})
        step = plans.get(question)
        if step and step.tool and step.tool not in called:
            if step.tool not in offered:
                return AIMessage(f"{LABEL} retrieval did not offer {step.tool}, so I cannot do that.")
            args = step.args
            if step.tool == "expand_summary":
                ids = _SUMMARY_ID.findall(system)
                if not ids:
                    return AIMessage(f"{LABEL} there is no summary to expand yet.")
                args = {"summary_id": ids[-1]}
            return _call(step.tool, dict(args or {}))
        return None  # default rule: answer by quoting the tool results

    return rule


def run_demo(mm: MemoryManager, echo: Callable[[str], None] = print) -> dict[str, Any]:
    """Run the scripted session; return the figures it printed (for tests)."""
    from toolbox import Toolbox

    settings = mm.settings.with_(model_context_windows={**mm.settings.model_context_windows, DEMO_MODEL: DEMO_WINDOW},
                                 reserved_output_tokens=256)
    mm = MemoryManager(mm.db, mm.embeddings, settings)
    user, thread = f"demo-{uuid.uuid4().hex[:8]}", "trip-planning"
    echo("agentmem demo — every part real except the model, which is SCRIPTED (not an LLM): it calls a tool")
    echo("only when the toolbox's retrieval offered it, and consolidates when the monitor says so.\n")
    tb = Toolbox(mm, namespace="demo")
    for fn in DEMO_TOOLS:
        tb.register_tool(fn)
    mm.write_knowledge_batch([
        {"content": "Northwind employees fly economy on flights shorter than six hours.", "source": "travel-policy.md"},
        {"content": "Hotel stays in Oslo are reimbursed up to 1,800 NOK per night.", "source": "travel-policy.md"},
        {"content": "Late orders older than five days get a high-priority ticket.", "source": "support.md"},
    ], user_id=user)
    model = ScriptedChatModel(rules=[demo_rule(SCRIPT)])
    agent = MemoryAgent(mm, tb, model, model_name=DEMO_MODEL, k_tools=3, extract_with_model=False)
    echo(f"user {user}, thread {thread}; {len(DEMO_TOOLS)} tools registered + the memory tools; "
         f"context window {DEMO_WINDOW} tokens (usable {agent_budget(mm)}).\n")
    figures: dict[str, Any] = {"turns": [], "consolidations": 0, "expansions": 0}
    for n, step in enumerate(SCRIPT, 1):
        result = agent.run(step.message, user_id=user, thread_id=thread)
        s = result.status
        echo(f"── turn {n}: {step.message}")
        echo(f"   retrieved tools: {', '.join(result.tools_offered)}")
        echo(f"   context: {s.tokens:,}/{s.max_tokens:,} tokens ({s.percent:.0f} %, {s.status}, "
             f"{s.method}); prompt sent {result.context_tokens:,} tokens incl. tool schemas")
        for c in result.tool_calls:
            echo(f"   called {c.name}({_args(c.args)}) -> {c.status}: {_short(c.content)}")
            if c.name == "summarize_and_store" and c.status == "ok":
                figures["consolidations"] += 1
                echo("   ↳ agent-triggered consolidation: older turns replaced by a [Summary ID] reference")
            if c.name == "expand_summary" and c.status == "ok":
                figures["expansions"] += 1
                sid = c.args.get("summary_id", "")
                originals = mm.read_conversations_by_summary_id(sid, user_id=user)
                echo(f"   ↳ expansion returned the summary and its {len(originals)} original messages, in order")
        if result.auto_consolidated is not None:
            echo(f"   safety net consolidated: {result.auto_consolidated.message}")
        echo(f"   answer: {_short(result.answer, 160)}\n")
        figures["turns"].append({"status": s.status, "percent": round(s.percent, 1), "tokens": s.tokens,
                                 "tools_offered": result.tools_offered,
                                 "tools_called": [c.name for c in result.tool_calls]})
    with mm.db.connection(user) as conn:
        counts = conn.execute(
            "SELECT count(*), count(*) FILTER (WHERE summary_id IS NOT NULL),"
            " count(*) FILTER (WHERE summary_id IS NULL),"
            " (SELECT count(*) FROM summary_memory WHERE user_id = %s AND thread_id = %s)"
            " FROM conversational_memory WHERE user_id = %s AND thread_id = %s",
            (user, thread, user, thread)).fetchone()
    assert counts is not None  # an aggregate always returns one row
    total, summarized, unsummarized, summaries = counts
    echo("── SQL: SELECT count(*) FILTER (WHERE summary_id IS NOT NULL) ... FROM conversational_memory")
    echo(f"   thread {thread}: {total} messages = {summarized} summarized + {unsummarized} unsummarized; "
         f"{summaries} summary row(s); nothing deleted")
    figures.update(total=total, summarized=summarized, unsummarized=unsummarized, summaries=summaries,
                   user=user, thread=thread)
    return figures


def agent_budget(mm: MemoryManager) -> int:
    from memory.consolidation.monitor import usable_budget

    return usable_budget(DEMO_MODEL, mm.settings)


def _args(args: dict[str, Any]) -> str:
    return ", ".join(f"{k}={v!r}" for k, v in args.items())


def _short(text: str, width: int = 110) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= width else flat[:width - 1] + "…"
