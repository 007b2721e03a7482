"""One module per memory table: how its rows are written, read and searched.

``conversation`` (every message), ``summaries``, ``workflows``, ``knowledge``,
``entities``, ``facts`` (with ``fact_rules``: restate, keep or supersede),
``corrections``, ``tool_log``; ``search`` ranks a user's messages, summaries and
facts as one list; ``retention`` expires rows and forgets users; ``vectorstore``
opens a table as a LangChain vector store. ``base`` holds what they share.
"""
