"""The reference agent loop (``loop``) and the tools that expose memory to a model."""
