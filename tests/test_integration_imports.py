"""The adapters' frameworks are optional extras: ``import memory`` works without them.

Each check runs in a fresh interpreter whose meta path refuses the frameworks' packages,
as on a machine where the extra was never installed.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

BLOCKER = textwrap.dedent("""
    import importlib.abc, sys
    BLOCKED = {blocked!r}
    class Blocker(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in BLOCKED:
                raise ModuleNotFoundError(f"No module named {{name!r}} (hidden by the test)", name=name)
            return None
    sys.meta_path.insert(0, Blocker())
""")

EXTRAS = {
    "memory.integrations.langgraph_store": ("langgraph", ["langgraph"]),
    "memory.integrations.bigtool": ("langgraph", ["langgraph_bigtool"]),
    "memory.integrations.agents_session": ("agents", ["agents"]),
}


def _run(code: str, blocked: list[str]) -> dict:
    script = BLOCKER.format(blocked=blocked) + textwrap.dedent(code)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_memory_works_without_any_framework():
    result = _run("""
        import json, sys
        import memory, memory.integrations
        from memory.integrations.chat_history import AgentMemChatMessageHistory
        loaded = sorted({m.split(".")[0] for m in sys.modules} & {"langgraph", "langgraph_bigtool", "agents"})
        print(json.dumps({"loaded": loaded, "front": memory.MemoryManager.__name__}))
    """, ["langgraph", "langgraph_bigtool", "agents"])
    assert result == {"loaded": [], "front": "MemoryManager"}


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_an_adapter_without_its_framework_says_which_extra_to_install(module):
    extra, blocked = EXTRAS[module]
    result = _run(f"""
        import json
        from memory import AgentMemError
        from memory.integrations import MissingExtraError
        try:
            import {module}
        except ImportError as exc:
            print(json.dumps({{"types": [isinstance(exc, MissingExtraError), isinstance(exc, AgentMemError)],
                               "message": str(exc)}}))
        else:
            print(json.dumps({{"types": [], "message": "imported"}}))
    """, blocked)
    assert result["types"] == [True, True]
    assert f"pip install 'agentmem[{extra}]'" in result["message"]


@pytest.mark.parametrize("module", sorted(EXTRAS))
def test_with_the_extra_installed_the_adapter_imports(module):
    result = _run(f"""
        import json
        import {module}
        print(json.dumps({{"ok": True}}))
    """, [])
    assert result == {"ok": True}
