"""agentmem's migrations as package data: this folder is installed as ``memory.sql``.

The numbered files are read with ``importlib.resources`` by ``memory/store/migrations.py``;
this file only makes the folder an importable package in every kind of install.
"""
