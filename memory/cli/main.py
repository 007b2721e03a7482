"""The ``agentmem`` command line: thin commands over library functions.

Every command parses its options, calls one library function and formats the
result: a rich table for people, or with ``--json`` (on every listing) JSON only on
stdout, for pipes. Progress and spinners go to stderr.

Errors are one line on stderr, ``agentmem: error: ...``, never a traceback, with an
exit code saying what kind:

====  =======================================================
0     done
1     error (database, model, configuration, conflict, ...)
2     bad usage or invalid input (click's own usage errors too)
3     not found (thread, summary, user, benchmark)
130   interrupted
====  =======================================================

Users. Commands that act on one user's memory (``show``, ``consolidate``, ``expand``,
``search``) take ``--user``, defaulting to ``$AGENTMEM_USER``, else ``default``.
The DBA listings (``status``, ``threads``) span every user unless ``--user`` is given.
``facts USER`` and ``forget-user USER`` name the user explicitly: no default for a
deletion. ``purge`` spans users (retention is a deployment policy).
"""

from __future__ import annotations

import functools
import subprocess
import sys
import threading
from typing import Any
from collections.abc import Callable, Sequence

import click

from memory.cli.bench import bench_dir, bench_scripts, pump
from memory.cli.output import STATUS_STYLE, console, emit_json, jsonable, one_line, short, spinner, styled, table, when
from memory.errors import AgentMemError, InvalidInputError, NotFoundError
from memory.settings import Settings

EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_NOT_FOUND = 3
EXIT_INTERRUPTED = 130

KINDS = ("messages", "summaries", "facts")


def fail(message: str, code: int = EXIT_ERROR) -> None:
    click.echo(f"agentmem: error: {one_line(message)}", err=True)
    sys.exit(code)


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    """Library and database errors become one line on stderr and an exit code."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        import psycopg

        try:
            return func(*args, **kwargs)
        except NotFoundError as exc:
            fail(str(exc), EXIT_NOT_FOUND)
        except InvalidInputError as exc:
            fail(str(exc), EXIT_USAGE)
        except AgentMemError as exc:
            fail(str(exc), EXIT_ERROR)
        except psycopg.Error as exc:
            fail(f"database: {str(exc).splitlines()[0] if str(exc) else type(exc).__name__}", EXIT_ERROR)
        except KeyboardInterrupt:
            fail("interrupted", EXIT_INTERRUPTED)

    return wrapper


class LazyMiniLM:
    """The packaged MiniLM model on the configured backend, loaded on the first ``embed``.

    Most commands (status, threads, show, facts, purge, ...) never embed anything, so
    they never pay for loading the model; with the ONNX backend (the default, once its
    file is cached) the ones that do never import torch.
    """

    name = "all-MiniLM-L6-v2"
    dimension = 384
    in_process = True  # it loads one of the packaged local models

    def __init__(self, settings: Settings) -> None:
        import importlib.util

        self._settings = settings
        onnx = self._settings.embedding_backend == "onnx" and importlib.util.find_spec("onnxruntime") is not None
        self.backend = "onnx-int8" if onnx else "torch-fp32"
        self._model: Any = None

    def embed(self, texts: Sequence[str]) -> Any:
        if self._model is None:
            from memory.retrieval.choice import embedder_from_settings

            with spinner("loading the embedding model"):
                self._model = embedder_from_settings(self._settings)
            self.backend = self._model.backend
        return self._model.embed(texts)


def cli_settings() -> Settings:
    """The settings of this command, read from the environment once (per invocation) and passed down."""
    meta = click.get_current_context().meta
    if "agentmem.settings" not in meta:
        meta["agentmem.settings"] = Settings.from_env()
    settings: Settings = meta["agentmem.settings"]
    return settings


def cli_embedder(settings: Settings) -> Any:
    """What ``MemoryManager.open`` would use (setting ``embedder``), with MiniLM loaded lazily."""
    from memory.retrieval.choice import embedder_from_settings

    if settings.embedder == "minilm":
        return LazyMiniLM(settings)
    return embedder_from_settings(settings)


def open_manager(**kwargs: Any) -> Any:
    from memory.manager import MemoryManager

    settings = cli_settings()
    kwargs.setdefault("embedder", cli_embedder(settings))
    with spinner("opening agentmem (database and schema)"):
        return MemoryManager.open(settings, **kwargs)


json_option = click.option("--json", "as_json", is_flag=True, help="Print JSON (only) on stdout.")
user_option = click.option("--user", "-u", envvar="AGENTMEM_USER", default="default", show_default=True,
                           help="User whose memory to use (env AGENTMEM_USER).")
user_filter = click.option("--user", "-u", default=None, help="Only this user's threads (default: every user).")


# -- commands ------------------------------------------------------------------------------
@click.group()
@click.version_option(package_name="agentmem")
def main() -> None:
    """agentmem: durable memory for LLM agents in PostgreSQL + pgvector.

    Configuration comes from the environment: AGENTMEM_DATABASE_URL (else an embedded
    PostgreSQL), AGENTMEM_SCHEMA, AGENTMEM_USER, AGENTMEM_LLM_* (see the README).
    """
    import warnings

    from memory.errors import ConfigurationWarning

    def show(message: Any, category: Any, *args: Any, **kwargs: Any) -> None:
        if issubclass(category, ConfigurationWarning):
            click.echo(f"agentmem: warning: {one_line(str(message))}", err=True)
        else:
            previous(message, category, *args, **kwargs)

    previous = warnings.showwarning
    warnings.showwarning = show


@main.command()
@click.option("--status", "show_status", is_flag=True,
              help="List applied and pending migrations without applying anything.")
@json_option
@handle_errors
def init(show_status: bool, as_json: bool) -> None:
    """Create or upgrade the schema (starting the embedded server if no URL is set)."""
    if show_status:
        _migration_status(as_json)
        return
    with open_manager() as mm:
        applied = mm.db.applied
        if mm.db.embedded:
            from memory.store.embedded import PACKAGES, server_module

            where = f"embedded server ({PACKAGES[server_module()]})"
        else:
            where = "configured server"
        click.echo(f"schema {mm.db.schema!r} on the {where} is up to date"
                   + (f"; applied {', '.join(applied)}" if applied else ""))


def _migration_status(as_json: bool) -> None:
    from memory.store.db import resolve_conninfo
    from memory.store.migrations import status as migration_status

    settings = cli_settings()
    conninfo, _ = resolve_conninfo(settings)
    states = migration_status(conninfo, schema=settings.schema, connect_timeout=settings.connect_timeout,
                              directory=settings.sql_dir)
    if as_json:
        emit_json([{"version": s.version, "name": s.name, "state": s.state,
                    "applied_at": s.applied_at.isoformat() if s.applied_at else None} for s in states])
        return
    rows = [(f"{s.version:03d}", s.name, styled(s.state, _MIGRATION_STYLE.get(s.state, "")), when(s.applied_at))
            for s in states]
    table(f"migrations of schema {settings.schema!r}", ["version", "name", "state", "applied at"], rows)
    counts = {state: sum(1 for s in states if s.state == state)
              for state in ("applied", "pending", "changed", "missing")}
    click.echo(", ".join(f"{n} {state}" for state, n in counts.items() if n)
               + ("; run `agentmem init` to apply the pending ones" if counts["pending"] else ""))


_MIGRATION_STYLE = {"applied": "green", "pending": "yellow", "changed": "red", "missing": "magenta"}


@main.command()
@handle_errors
def demo() -> None:
    """Run a scripted session on the embedded defaults and print each stage."""
    from memory.cli.demo import run_demo

    with open_manager() as mm:
        run_demo(mm, click.echo)


@main.command()
@user_option
@click.option("--thread", "-t", default="chat", show_default=True, help="Conversation thread to continue.")
@click.option("--max-iterations", default=6, show_default=True, help="Tool-call rounds per turn.")
@handle_errors
def chat(user: str, thread: str, max_iterations: int) -> None:
    """Chat with the configured model, with memory and tools (Ctrl-D to quit)."""
    from memory.agent.loop import MemoryAgent
    from memory.llm.chat import chat_model_from_env

    model = chat_model_from_env(cli_settings())
    if model is None:
        fail("no chat model is configured: set AGENTMEM_LLM_MODEL (and AGENTMEM_LLM_BASE_URL for an "
             "OpenAI-compatible server such as Ollama, vLLM or llama.cpp; AGENTMEM_LLM_API_KEY if it needs one). "
             "`agentmem demo` runs a scripted session without a model.", EXIT_USAGE)
    with open_manager() as mm:
        agent = MemoryAgent(mm, model=model, summary_model=model, max_iterations=max_iterations)
        click.echo(f"chatting as {user!r} in thread {thread!r}; Ctrl-D to quit", err=True)
        while True:
            try:
                line = click.prompt("you", prompt_suffix="> ", default="", show_default=False)
            except (EOFError, click.Abort):
                click.echo("", err=True)
                return
            if not line.strip():
                continue
            result = agent.run(line, user_id=user, thread_id=thread)
            for c in result.tool_calls:
                click.echo(f"  [tool {c.name} -> {c.status}]", err=True)
            click.echo(f"  [context {result.status.percent:.0f} % {result.status.status}]", err=True)
            click.echo(f"agent> {result.answer}")




@main.command()
@user_filter
@click.option("--thread", "-t", default=None, help="Only this thread.")
@click.option("--context-window", type=int, default=None,
              help="Tokens of the context window the estimate is measured against "
                   "(default: AGENTMEM_DEFAULT_CONTEXT_WINDOW, 8192).")
@click.option("--model", default=None, help="Take the context window from this model's setting.")
@json_option
@handle_errors
def status(user: str | None, thread: str | None, context_window: int | None, model: str | None,
           as_json: bool) -> None:
    """Consolidation status per thread: summarized vs unsummarized rows and an estimated monitor status.

    Reads the view consolidation_status. The status estimates the unsummarized
    conversation alone (characters / 4) against the usable budget of the window.
    """
    from memory.store.views import consolidation_status

    with open_manager() as mm:
        window = context_window if context_window is not None else (
            mm.settings.context_window(model) if model else None)
        rows = consolidation_status(mm.db, mm.settings, user_id=user, thread_id=thread, context_window=window)
    if as_json:
        return emit_json(rows)
    if not rows:
        click.echo("no threads" + (f" for user {user!r}" if user else ""))
        return
    table(f"consolidation status (estimate, {rows[0].context_window:,}-token window)",
          ["user", "thread", "msgs", "live", "summarized", "summaries", "oldest live", "~tokens", "usage %",
           "status"],
          [(r.user_id, r.thread_id, r.total_messages, r.unsummarized_messages, r.summarized_messages, r.summaries,
            when(r.oldest_unsummarized_at), r.est_unsummarized_tokens, r.est_usage_percent,
            styled(r.monitor_status, STATUS_STYLE.get(r.monitor_status, ""))) for r in rows])


@main.command()
@user_filter
@json_option
@handle_errors
def threads(user: str | None, as_json: bool) -> None:
    """Threads with their message counts, most recent first."""
    with open_manager() as mm:
        rows = mm.list_threads(user_id=user)
    if as_json:
        return emit_json(rows)
    if not rows:
        click.echo("no threads" + (f" for user {user!r}" if user else ""))
        return
    table(None, ["user", "thread", "msgs", "live", "summarized", "first", "last"],
          [(r["user_id"], r["thread_id"], r["total"], r["unsummarized"], r["summarized"], when(r["first_at"]),
            when(r["last_at"])) for r in rows])


@main.command()
@click.argument("thread")
@user_option
@click.option("--live", is_flag=True, help="Only the working set (unsummarized messages).")
@click.option("--full", is_flag=True, help="Print whole messages instead of one line each.")
@json_option
@handle_errors
def show(thread: str, user: str, live: bool, full: bool, as_json: bool) -> None:
    """Messages of THREAD in order, with the summary each consolidated one belongs to."""
    with open_manager() as mm:
        rows = mm.read_thread(thread_id=thread, user_id=user, include_summarized=not live)
    if not rows and not live:
        raise NotFoundError(f"thread {thread!r} has no messages for user {user!r}")
    if as_json:
        return emit_json(rows)
    table(f"thread {thread} (user {user}): {len(rows)} messages",
          ["id", "time", "role", "summary", "content"],
          [(m.id, when(m.created_at), m.role, str(m.summary_id)[:8] if m.summary_id else "live",
            m.content if full else short(m.content, 70)) for m in rows])


@main.command()
@click.argument("threads", nargs=-1)
@user_option
@click.option("--all-threads", is_flag=True, help="Every thread of the user with unsummarized messages.")
@click.option("--keep-recent", type=click.IntRange(min=0), default=0, show_default=True,
              help="Leave the last N turns of each thread live.")
@json_option
@handle_errors
def consolidate(threads: tuple[str, ...], user: str, all_threads: bool, keep_recent: int, as_json: bool) -> None:
    """Summarise the unsummarized whole turns of THREADS and write the summary id back.

    Uses the chat model configured by AGENTMEM_LLM_* when there is one, else the
    extractive summariser (offline, invents nothing).
    """
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from memory.llm.chat import chat_model_from_env

    if not threads and not all_threads:
        raise click.UsageError("name at least one THREAD, or use --all-threads")
    model = chat_model_from_env(cli_settings())
    results = []
    with open_manager() as mm:
        names = list(threads)
        if all_threads:
            names += [r["thread_id"] for r in mm.list_threads(user_id=user)
                      if r["unsummarized"] and r["thread_id"] not in names]
        progress = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=console(stderr=True), transient=True, disable=as_json)
        with progress:
            task = progress.add_task("consolidating", total=len(names))
            for name in names:
                progress.update(task, description=f"consolidating {name}")
                r = mm.summarize_conversation(thread_id=name, user_id=user, keep_recent=keep_recent, model=model)
                results.append({"thread_id": name, "status": r.status,
                                "summary_id": r.summary.summary_id if r.summary else None,
                                "label": r.summary.description if r.summary else None,
                                "source_count": len(r.source_ids) if r.summarized else 0,
                                "source_tokens": r.source_tokens, "summary_tokens": r.summary_tokens,
                                "method": r.method, "kept_turns": r.kept_turns, "message": r.message})
                progress.advance(task)
    if as_json:
        emit_json(results)
    else:
        table(None, ["thread", "status", "summary id", "messages", "tokens before → after", "method"],
              [(r["thread_id"], r["status"], r["summary_id"] or "", r["source_count"],
                f"{r['source_tokens']} → {r['summary_tokens']}" if r["status"] == "summarized" else "",
                r["method"] or "") for r in results])
    conflicts = [r["thread_id"] for r in results if r["status"] == "conflict"]
    if conflicts:
        fail(f"consolidation conflicted (another consolidation ran at the same time; nothing written) "
             f"for: {', '.join(conflicts)}")


@main.command()
@click.argument("summary_id")
@user_option
@json_option
@handle_errors
def expand(summary_id: str, user: str, as_json: bool) -> None:
    """A summary and every original message it replaced, in order."""
    with open_manager() as mm:
        expanded = mm.expand_summary(summary_id, user_id=user)
    if as_json:
        return emit_json({"summary": expanded.summary, "messages": expanded.messages})
    out = console()
    out.print(styled(expanded.summary.reference, "bold"))
    out.print(expanded.summary.content, markup=False)
    table(f"original messages ({len(expanded.messages)})", ["id", "time", "role", "content"],
          [(m.id, when(m.created_at), m.role, m.content) for m in expanded.messages])


@main.command()
@click.argument("summary_id")
@user_option
@json_option
@handle_errors
def unconsolidate(summary_id: str, user: str, as_json: bool) -> None:
    """Undo a consolidation: clear the marks on its messages and drop the summary (one transaction)."""
    with open_manager() as mm:
        cleared = mm.undo_consolidation(summary_id, user_id=user)
    if as_json:
        return emit_json({"summary_id": summary_id, "messages_restored": cleared})
    console().print(f"summary {summary_id} dropped; {cleared} messages are live again")


@main.command()
@click.argument("query")
@user_option
@click.option("--type", "kinds", type=click.Choice(KINDS), multiple=True,
              help="Search only these kinds (repeatable; default: all).")
@click.option("--thread", "-t", default=None, help="Only this thread (facts are left out).")
@click.option("-k", "k", type=click.IntRange(min=1, max=1000), default=10, show_default=True,
              help="Number of hits.")
@json_option
@handle_errors
def search(query: str, user: str, kinds: tuple[str, ...], thread: str | None, k: int, as_json: bool) -> None:
    """Search the user's past messages, summaries and facts (one ranked list)."""
    with open_manager() as mm, spinner("searching"):
        hits = mm.search_memory(query, user_id=user, k=k, scope=list(kinds) or None, thread_id=thread)
    if as_json:
        # flat rows for pipes: the found row's fields, then its score and signals
        return emit_json([{**jsonable(h.item), "score": h.score, "signals": h.signals} for h in hits])
    if not hits:
        click.echo("no hits")
        return
    table(f"{len(hits)} hits for {query!r}", ["kind", "score", "time", "thread", "summary", "content"],
          [(h.item.kind, f"{h.score:.3f}", when(h.item.created_at), h.item.thread_id or "",
            str(h.item.summary_id)[:8] if h.item.summary_id else "", short(h.item.content, 70)) for h in hits])


@main.command()
@click.argument("user")
@click.option("--history", is_flag=True, help="Every version (superseded and retired too), from fact_history.")
@json_option
@handle_errors
def facts(user: str, history: bool, as_json: bool) -> None:
    """Durable facts of USER (active ones; --history for every version)."""
    from memory.store.views import fact_history

    with open_manager() as mm:
        rows: list[Any] = fact_history(mm.db, user_id=user) if history else mm.read_facts(user_id=user)
    if as_json:
        return emit_json(rows)
    if not rows:
        click.echo(f"no facts for user {user!r}")
        return
    if history:
        table(f"fact history of {user}", ["chain", "v", "status", "category", "content", "valid from", "valid to"],
              [(str(r.chain_id)[:8], r.version, r.status, r.category, r.content, when(r.valid_from),
                when(r.valid_to)) for r in rows])
    else:
        table(f"active facts of {user}", ["id", "category", "content", "since"],
              [(str(r.id), r.category, r.content, when(r.valid_from)) for r in rows])


@main.group()
def tools() -> None:
    """The stored tool catalogue (toolbox_memory), read-only.

    A Toolbox retrieves the tools its own process registered; this command is a
    process of its own, so it reads the rows every process stored, per namespace.
    """


def _tool_rows(rows: Sequence[Any], scores: Sequence[float] | None = None) -> None:
    cols = ["namespace", "name", "parameters", "description"] + (["score"] if scores is not None else [])
    table(None, cols, [(t.namespace, t.name, ", ".join(t.parameters), short(t.description, 60))
                       + ((f"{scores[i]:.3f}",) if scores is not None else ()) for i, t in enumerate(rows)])


@tools.command("list")
@click.option("--namespace", "-n", default=None, help="Only this toolbox namespace (default: all).")
@json_option
@handle_errors
def tools_list(namespace: str | None, as_json: bool) -> None:
    """Every stored tool, by namespace and name."""
    from toolbox.catalog import list_tools

    with open_manager() as mm:
        rows = list_tools(mm, namespace)
    if as_json:
        return emit_json(rows)
    if not rows:
        click.echo("no tools stored" + (f" in namespace {namespace!r}" if namespace else ""))
        return
    _tool_rows(rows)


@tools.command("search")
@click.argument("query")
@click.option("--namespace", "-n", default="default", show_default=True, help="Toolbox namespace.")
@click.option("-k", "k", type=click.IntRange(min=1, max=1000), default=5, show_default=True, help="Number of tools.")
@json_option
@handle_errors
def tools_search(query: str, namespace: str, k: int, as_json: bool) -> None:
    """The stored tools most relevant to QUERY (ranked like Toolbox.retrieve)."""
    from toolbox.catalog import search_tools

    with open_manager() as mm, spinner("searching tools"):
        hits = search_tools(mm, query, namespace, k)
    if as_json:
        return emit_json([{**jsonable(h.item), "score": h.score, "signals": h.signals} for h in hits])
    if not hits:
        click.echo(f"no tools stored in namespace {namespace!r}")
        return
    _tool_rows([h.item for h in hits], [h.score for h in hits])


def _counts_table(title: str, counts: dict[str, int]) -> None:
    table(title, ["table", "rows deleted"], [(t, n) for t, n in counts.items()] + [("total", sum(counts.values()))])


@main.command("forget-user")
@click.argument("user")
@click.option("--yes", "-y", is_flag=True, help="Do not ask for confirmation.")
@json_option
@handle_errors
def forget_user(user: str, yes: bool, as_json: bool) -> None:
    """Delete every row of USER in every table (vectors, summaries, tool logs included)."""
    from memory.tables.retention import rows_of_user

    with open_manager() as mm:
        uid = mm.user(user).user_id
        with mm.db.connection(uid) as conn:  # scoped: through the app role, RLS shows only this user's rows
            held = {t: n for t, n in rows_of_user(conn, mm.db.schema, user_id=uid).items() if n}
        if not held:
            raise NotFoundError(f"user {user!r} has no rows")
        if not yes:
            listing = ", ".join(f"{t} {n}" for t, n in held.items())
            click.confirm(f"Delete {sum(held.values())} rows of user {user!r} ({listing})? This cannot be undone",
                          abort=True, err=True)
        with spinner(f"forgetting {user}"):
            counts = mm.forget_user(user_id=user)
    if as_json:
        return emit_json({"user_id": user, "deleted": counts, "total": sum(counts.values())})
    _counts_table(f"forgot user {user}", {t: n for t, n in counts.items() if n})


@main.command()
@json_option
@handle_errors
def purge(as_json: bool) -> None:
    """Delete expired rows (expires_at passed, or older than the retention days) in every table."""
    with open_manager() as mm, spinner("purging expired rows"):
        counts = mm.purge_expired()
    if as_json:
        return emit_json({"deleted": counts, "total": sum(counts.values())})
    _counts_table("purged expired rows", counts)


@main.command("publish-workflow")
@click.argument("workflow_id")
@user_option
@json_option
@handle_errors
def publish_workflow(workflow_id: str, user: str, as_json: bool) -> None:
    """Copy USER's workflow WORKFLOW_ID into the shared workflows every user reads (schema owner only)."""
    with open_manager() as mm:
        row = mm.publish_workflow(workflow_id, user_id=user)
    if as_json:
        return emit_json(row)
    console().print(f"published workflow {workflow_id} of {user} as shared workflow {row.id} ({row.name})")


@main.command("create-app-role")
@click.argument("role")
@click.option("--password", prompt=True, hide_input=True, confirmation_prompt=True, envvar="AGENTMEM_APP_PASSWORD",
              help="Password of the role (prompted; env AGENTMEM_APP_PASSWORD).")
@click.option("--tool-registrar", is_flag=True,
              help="Also let the role register tools (write toolbox_memory): for a deploy job, not the app.")
@json_option
@handle_errors
def create_app_role(role: str, password: str, tool_registrar: bool, as_json: bool) -> None:
    """Create the non-owner login ROLE applications connect as; row-level security binds it.

    Run as the schema owner. Point the application's AGENTMEM_DATABASE_URL at the
    role: every transaction then sees only the rows of the user it is scoped to, and
    the shared rows (tools, shared workflows) are read-only for it.
    """
    from memory.store.isolation import create_app_role as create

    with open_manager() as mm:
        made = create(mm.db.conninfo, role, password, schema=mm.db.schema, tool_registrar=tool_registrar)
    out = {"role": made.name, "schema": mm.db.schema, "row_level_security": made.user_tables,
           "shared_tables": made.shared_tables, "read_only_tables": made.read_only_tables,
           "tool_registrar": made.tool_registrar}
    if as_json:
        return emit_json(out)
    shared_access = "read only (owner writes)" + ("; toolbox_memory read/write (registrar)" if tool_registrar else "")
    table(f"role {made.name} on schema {mm.db.schema}", ["tables", "access"],
          [(", ".join(made.user_tables), "read/write, own rows only (row-level security)"),
           (", ".join(made.shared_tables), shared_access + ", no user data"),
           (", ".join(made.read_only_tables), "read only")])


@main.command()
@click.option("--dry-run", is_flag=True, help="Check the schema and list the plan; change nothing (no Citus needed).")
@json_option
@handle_errors
def distribute(dry_run: bool, as_json: bool) -> None:
    """Distribute the schema on a Citus cluster: per-user tables by user_id, colocated; the rest as reference tables.

    Run against the Citus coordinator as the schema owner, after init. Refuses, with
    nothing changed, when the citus extension is missing or the schema breaks a rule
    Citus enforces. Runs sql/citus_distribute.sql (the same script a DBA can run with psql).
    """
    from memory.store.distribution import distribute as run

    with open_manager() as mm:
        done = run(mm.db.conninfo, mm.db.schema, dry_run=dry_run)
    if as_json:
        return emit_json(done)
    title = (f"plan for schema {done.schema} (dry run, nothing changed)" if dry_run
             else f"schema {done.schema} distributed (citus {done.citus_version})")
    table(title, ["step", "table", "as", "colocated with"],
          [(s.step, s.table_name, s.kind, s.colocate_with or "") for s in done.steps])


@main.command()
@click.option("--user", "-u", default=None,
              help="User a stdio server acts for (default $AGENTMEM_USER, else 'default'); not with --http.")
@click.option("--http", "http", is_flag=True,
              help="Serve streamable HTTP at /mcp instead of stdio; bearer tokens map to users (AGENTMEM_MCP_TOKENS).")
@click.option("--host", default="127.0.0.1", show_default=True, help="Address --http binds.")
@click.option("--port", type=click.IntRange(0, 65535), default=8765, show_default=True,
              help="Port of --http (0: any free port, printed on stderr).")
@click.option("--namespace", "-n", default="default", show_default=True, help="Toolbox namespace of find_tools.")
@handle_errors
def mcp(user: str | None, http: bool, host: str, port: int, namespace: str) -> None:
    """Serve agentmem's memory over the Model Context Protocol (stdio for one user, or --http)."""
    from memory.errors import ConfigurationError

    try:
        from memory.mcp.server import serve
    except ImportError as exc:
        raise ConfigurationError(f"the MCP server needs the mcp package ({exc}): pip install 'agentmem[mcp]'") from exc
    serve(user=user, http=http, host=host, port=port, namespace=namespace)


@main.command()
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on; anything but loopback needs AGENTMEM_UI_TOKEN.")
@click.option("--port", "-p", type=click.IntRange(min=1, max=65535), default=8777, show_default=True,
              help="Port to listen on.")
@click.option("--allow-writes", is_flag=True,
              help="Allow consolidating threads, undoing consolidations and forgetting users from the browser.")
@handle_errors
def ui(host: str, port: int, allow_writes: bool) -> None:
    """Inspect memory in the browser: threads, consolidation boundaries, summaries, facts, search, usage.

    A local web app, read-only unless --allow-writes. It shows every user's memory
    (the overview reads the DBA views: run it with the schema owner's URL).
    """
    try:
        from memory.inspector import InspectorConfig, serve
        from memory.inspector.server import check_bind
    except ImportError as exc:
        fail(f"the inspector needs the ui extra ({exc.name} is missing): pip install 'agentmem[ui]'")
    from memory.settings import Settings

    token = Settings.from_env().ui_token
    check_bind(host, token)
    config = InspectorConfig(allow_writes=allow_writes, token=token, host=host)
    with open_manager() as mm:
        serve(mm, config, port, announce=lambda line: click.echo(line, err=True))


@main.command(context_settings={"ignore_unknown_options": True, "allow_interspersed_args": False})
@click.argument("name", required=False)
@click.argument("args", nargs=-1, type=click.UNPROCESSED)
@json_option
@handle_errors
def bench(name: str | None, args: tuple[str, ...], as_json: bool) -> None:
    """List the benchmarks in bench/, or run NAME with ARGS passed on (e.g. bench recall --help)."""
    directory = bench_dir(cli_settings().bench_dir)
    scripts = bench_scripts(directory)
    if name is None:
        if as_json:
            return emit_json([{"name": n, "description": d} for n, d in scripts.items()])
        table("benchmarks (agentmem bench NAME [ARGS...])", ["name", "description"], list(scripts.items()))
        return
    name = name.removesuffix(".py")
    if name not in scripts:
        raise NotFoundError(f"no benchmark {name!r}; available: {', '.join(scripts) or 'none'}")
    proc = subprocess.Popen([sys.executable, str(directory / f"{name}.py"), *args], cwd=directory.parent,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, bufsize=1)
    err_pump = threading.Thread(target=pump, args=(proc.stderr, True), daemon=True)
    err_pump.start()
    pump(proc.stdout, False)
    code = proc.wait()
    err_pump.join()
    if code:
        fail(f"benchmark {name} exited with status {code}", code if 0 < code < 128 else EXIT_ERROR)


if __name__ == "__main__":  # pragma: no cover
    main()
