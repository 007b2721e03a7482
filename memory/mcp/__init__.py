"""agentmem as an MCP server (``agentmem mcp``; needs the ``mcp`` extra): see :mod:`memory.mcp.server`."""

from memory.mcp.auth import Identity, stdio_identity, token_identity
from memory.mcp.server import build_server, run_http, run_stdio
from memory.mcp.service import Service

__all__ = ["Identity", "Service", "build_server", "run_http", "run_stdio", "stdio_identity", "token_identity"]
