"""A memory inspector in the browser: ``agentmem ui``.

A small local web app (Starlette, server-rendered Jinja2 pages, inline CSS and SVG
charts, one short inline script; nothing fetched from the internet) over one
:class:`~memory.MemoryManager`: the overview of users and threads (the
``consolidation_status`` view), a thread with its consolidation boundaries and its
summaries expandable in place, a summary's sections and lineage, a user's fact chains,
``search_memory`` with each hit's signals, and context usage per turn. Read-only unless
started with ``--allow-writes``; bound to 127.0.0.1 unless a token is configured.

``memory.inspector.app`` holds the app and its guards, ``pages`` what each page shows,
``queries`` the paged reads, ``charts`` the SVG, ``server`` the command's checks and
uvicorn. Needs the ``ui`` extra (``pip install agentmem[ui]``).
"""

from memory.inspector.app import InspectorConfig, create_app
from memory.inspector.server import serve

__all__ = ["InspectorConfig", "create_app", "serve"]
