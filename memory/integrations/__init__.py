"""Framework adapters, each a thin layer over the front door, each an optional extra.

- :mod:`memory.integrations.langgraph_store`: ``AgentMemStore``, a LangGraph ``BaseStore``
  (``pip install 'agentmem[langgraph]'``);
- :mod:`memory.integrations.bigtool`: the Toolbox as langgraph-bigtool's tool retrieval
  (``agentmem[langgraph]``);
- :mod:`memory.integrations.agents_session`: ``AgentMemSession``, an OpenAI Agents SDK
  ``Session`` with consolidation (``agentmem[agents]``);
- :mod:`memory.integrations.chat_history`: ``AgentMemChatMessageHistory``, a LangChain
  ``BaseChatMessageHistory`` (langchain-core, a core dependency).

This package imports none of them: ``import memory`` works without the extras, and a
module whose framework is missing raises :class:`memory.integrations.MissingExtraError`
(an ``ImportError``) saying which extra to install.
"""

from memory.integrations._extras import MissingExtraError

__all__ = ["MissingExtraError"]
