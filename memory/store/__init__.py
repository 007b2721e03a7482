"""The database: where it is, the schema on it, who may see which rows.

Connection strings (``conninfo``), the embedded server (``embedded``), the pool
(``db``), forward-only migrations (``migrations``), tenant isolation (``isolation``),
scale-out checks (``distribution``), the DBA views (``views``), the typed rows
(``rows``, ``shapes``, ``dates``) and the input checks run before any SQL
(``validation``). Nothing here knows about embeddings or memory types.
"""
