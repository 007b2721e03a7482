"""The ``agentmem`` command line (``main``), its output helpers and the demo."""
