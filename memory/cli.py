"""The ``agentmem`` command line: thin commands over library functions.

Every command parses its options, calls one library function and formats the
result. Library errors (:class:`~memory.errors.AgentMemError`) become a one-line
message and a non-zero exit code, never a traceback.
"""

from __future__ import annotations

import functools
import sys
from typing import Any, Callable

import click

from .errors import AgentMemError

EXIT_ERROR = 1


def handle_errors(func: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except AgentMemError as exc:
            click.echo(f"agentmem: error: {exc}", err=True)
            sys.exit(EXIT_ERROR)

    return wrapper


def open_manager(**kwargs: Any) -> Any:
    from .manager import MemoryManager

    return MemoryManager.open(**kwargs)


@click.group()
@click.version_option(package_name="agentmem")
def main() -> None:
    """agentmem: durable memory for LLM agents in PostgreSQL + pgvector."""


@main.command()
@handle_errors
def init() -> None:
    """Create or upgrade the schema (starting the embedded server if no URL is set)."""
    with open_manager() as mm:
        applied = mm.db.applied
        where = "embedded server" if mm.db.embedded else "configured server"
        click.echo(f"schema {mm.db.schema!r} on the {where} is up to date"
                   + (f"; applied {', '.join(applied)}" if applied else ""))


@main.command()
@handle_errors
def demo() -> None:
    """Run a scripted session on the embedded defaults and print each stage."""
    from .demo import run_demo

    with open_manager() as mm:
        run_demo(mm, click.echo)


if __name__ == "__main__":  # pragma: no cover
    main()
