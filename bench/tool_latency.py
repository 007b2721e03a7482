"""Toolbox.retrieve latency of this tree against another checkout, interleaved under the same load.

The machine is shared and its load changes by the minute, so two runs at two times
compare nothing. Here both trees run at once: each in its own worker process (its own
``PYTHONPATH``, its own embedded PostgreSQL, the same MiniLM backend), both register
the same catalogue, and the parent sends them the same requests one by one,
alternating which tree goes first, so both see the same load at the same moment.
Each worker times ``Toolbox.retrieve(request, k)`` end to end (the request's
embedding included: every request is distinct, so no embedding cache hit).

Catalogue and requests: ToolBench's 2,479 APIs and its 765 test requests from
``../shared/data`` (``bench/public_retrieval.py``), registered as that bench does
(``register_schemas`` with the API's tool as category) in a tree that has it, else as
Python functions with the same name, description and parameters (the only way the
older toolbox registers a tool). ``--catalogue tools181`` uses the project's 181-tool
catalogue (``bench/data/tool_catalogue.txt``) and its dev and test requests instead.

Printed: p50 / p95 / mean per tree, the ratio new / old, and how often the two agree
on the first tool (a check that both ranked the same catalogue).

    python bench/tool_latency.py --compare-with /work/wt/t13before       # ~8-12 min on 2 loaded cores
    python bench/tool_latency.py --compare-with ../old --catalogue tools181 --queries 200
"""

from __future__ import annotations

import inspect
import json
import keyword
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
_REPLY = "@@"


# -- the worker: runs inside the tree under test (only memory/toolbox APIs both trees have) ----------------
def _identifier(name: str, taken: set[str]) -> str:
    ident = re.sub(r"\W+", "_", name).strip("_") or "arg"
    if ident[0].isdigit() or keyword.iskeyword(ident):
        ident = f"p_{ident}"
    base, n = ident, 2
    while ident in taken:
        ident, n = f"{base}_{n}", n + 1
    taken.add(ident)
    return ident


def _function(schema: dict[str, Any]) -> Any:
    """A Python function with ``schema``'s name, description and parameters (for a toolbox without schemas)."""
    fn = schema["function"]
    props = fn["parameters"].get("properties", {})
    required = set(fn["parameters"].get("required", []))
    kinds = {"string": str, "number": float, "integer": int, "boolean": bool}
    params, docs, taken = [], [], set()
    for pname, prop in props.items():
        ident = _identifier(pname, taken)
        hint: Any = kinds.get(prop.get("type", "string"), str)
        default: Any = inspect.Parameter.empty
        if pname not in required:
            hint, default = hint | None, None
        params.append(inspect.Parameter(ident, inspect.Parameter.KEYWORD_ONLY, default=default, annotation=hint))
        if prop.get("description"):
            docs.append(f"    {ident}: {' '.join(str(prop['description']).split())}")

    def function(**kwargs: Any) -> str:
        return json.dumps(kwargs, default=str)

    function.__signature__ = inspect.Signature(params, return_annotation=str)  # type: ignore[attr-defined]
    function.__annotations__ = {p.name: p.annotation for p in params} | {"return": str}
    function.__name__ = function.__qualname__ = fn["name"]
    description = " ".join((fn.get("description") or "").split()) or fn["name"].replace("_", " ")
    function.__doc__ = description + ("\n\nArgs:\n" + "\n".join(docs) if docs else "")
    return function


def _names(hits: Any) -> list[str]:
    """Tool names of a retrieve() result, whatever its item type (Tool, or a hit holding one)."""
    out = []
    for h in hits:
        item = getattr(h, "item", h)
        out.append(str(getattr(item, "name", getattr(h, "name", ""))))
    return out


def worker(uri: str, catalogue_path: str) -> None:
    from memory import MemoryManager, Settings
    from toolbox import Toolbox

    spec = json.loads(Path(catalogue_path).read_text())
    mm = MemoryManager.open(Settings.from_env(database_url=uri, schema="latency", pool_max_size=4))
    tb = Toolbox(mm, namespace="latency")
    start = time.perf_counter()
    if hasattr(tb, "register_schemas") and spec["categories"]:
        tb.register_schemas(spec["schemas"], categories=spec["categories"])
        how = "register_schemas"
    else:
        tb.register_tools([_function(s) for s in spec["schemas"]])
        how = "register_tools"
    tb.retrieve("warm up the model and the connection pool", 5)
    _reply({"ready": True, "tools": len(tb), "how": how, "register_s": time.perf_counter() - start})
    for line in sys.stdin:
        request = json.loads(line)
        if request.get("stop"):
            break
        t0 = time.perf_counter()
        hits = tb.retrieve(request["q"], request["k"])
        ms = (time.perf_counter() - t0) * 1000.0
        _reply({"ms": ms, "names": _names(hits)[:1]})
    mm.close()


def _reply(payload: dict[str, Any]) -> None:
    sys.stdout.write(_REPLY + json.dumps(payload) + "\n")
    sys.stdout.flush()


# -- the parent ---------------------------------------------------------------------------------------------
class Worker:
    """One tree's worker process: ``script --worker uri data_path`` with ``PYTHONPATH`` = the tree."""

    def __init__(self, label: str, tree: Path, uri: str, catalogue_path: Path, script: Path | None = None) -> None:
        self.label, self.tree = label, tree
        env = dict(os.environ, PYTHONPATH=str(tree))
        self.proc = subprocess.Popen([sys.executable, str(script or Path(__file__).resolve()), "--worker", uri,
                                      str(catalogue_path)], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, env=env, cwd=str(tree))

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(_REPLY):
                return json.loads(line[len(_REPLY):])
        raise RuntimeError(f"the {self.label} worker ({self.tree}) stopped (exit {self.proc.wait()})")

    def ask(self, q: str, k: int, **more: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"q": q, "k": k, **more}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def stop(self) -> None:
        if self.proc.poll() is None and self.proc.stdin is not None:
            self.proc.stdin.write(json.dumps({"stop": True}) + "\n")
            self.proc.stdin.close()
        self.proc.wait(timeout=120)


def _catalogue(name: str) -> tuple[dict[str, Any], list[str]]:
    sys.path.insert(0, str(HERE))
    if name == "toolbench":
        from public_retrieval import TOOLBENCH, load_toolbench, openai_schema, tool_names

        if not TOOLBENCH.is_dir():
            raise SystemExit(f"{TOOLBENCH} not found: the ToolBench dev data is read from ../shared/data (see "
                             "its README); nothing was measured")
        apis, queries = load_toolbench()
        keys = list(apis)
        names = tool_names(keys)
        schemas = [openai_schema(k, apis[k], n) for k, n in zip(keys, names, strict=True)]
        return {"schemas": schemas, "categories": [k[0] for k in keys]}, [q for _, q, _ in queries]
    from tool_catalogue import load

    tools = load()
    kinds = {str: "string", int: "integer", float: "number", bool: "boolean"}
    schemas = []
    for t in tools:
        props = {p.name: {"type": kinds.get(p.hint, "string"), **({"description": p.doc} if p.doc else {})}
                 for p in t.params}
        required = [p.name for p in t.params if p.default is inspect.Parameter.empty]
        schemas.append({"type": "function", "function": {"name": t.name, "description": t.summary,
                                                         "parameters": {"type": "object", "properties": props,
                                                                        "required": required}}})
    return {"schemas": schemas, "categories": []}, [q for t in tools for q in t.dev + t.test]


def main() -> None:
    if len(sys.argv) == 4 and sys.argv[1] == "--worker":
        worker(sys.argv[2], sys.argv[3])
        return
    sys.path.insert(0, str(HERE))
    from _common import base_parser, embedded_server, log, percentiles, print_load, print_table, write_json

    parser = base_parser(__doc__.splitlines()[0])
    parser.add_argument("--compare-with", metavar="PATH", required=True, type=Path,
                        help="another checkout of the project (e.g. a detached worktree of the 'before' commit)")
    parser.add_argument("--catalogue", choices=("toolbench", "tools181"), default="toolbench")
    parser.add_argument("--queries", type=int, default=0, help="requests timed (0: all of the catalogue's)")
    parser.add_argument("--k", type=int, default=5)
    args = parser.parse_args()
    old_tree = args.compare_with.resolve()
    if not (old_tree / "toolbox" / "toolbox.py").is_file():
        raise SystemExit(f"{old_tree} is not a checkout of this project (no toolbox/toolbox.py)")
    spec, queries = _catalogue(args.catalogue)
    if args.queries:
        queries = queries[:args.queries]
    catalogue_path = Path(f"/tmp/tool_latency_{os.getpid()}.json")
    catalogue_path.write_text(json.dumps(spec))
    lat: dict[str, list[float]] = {"new": [], "old": []}
    agree = 0
    try:
        with embedded_server() as uri_new, embedded_server() as uri_old:
            workers = {"new": Worker("new", ROOT, uri_new, catalogue_path),
                       "old": Worker("old", old_tree, uri_old, catalogue_path)}
            try:
                ready = {label: w.read() for label, w in workers.items()}  # both register at once
                for label, r in ready.items():
                    log(f"{label} ({workers[label].tree}): {r['tools']} tools by {r['how']} in "
                        f"{r['register_s']:.0f}s")
                for i, q in enumerate(queries):
                    order = ("new", "old") if i % 2 == 0 else ("old", "new")
                    answers = {label: workers[label].ask(q, args.k) for label in order}
                    for label, a in answers.items():
                        lat[label].append(a["ms"] / 1000.0)
                    agree += answers["new"]["names"] == answers["old"]["names"]
            finally:
                for w in workers.values():
                    w.stop()
    finally:
        catalogue_path.unlink(missing_ok=True)
    stats = {label: percentiles(v) for label, v in lat.items()}
    ratio = {key: stats["new"][key] / stats["old"][key] for key in ("p50_ms", "p95_ms", "mean_ms")}
    print_table(f"Toolbox.retrieve(request, k={args.k}) per request, embedding included: {len(queries)} "
                f"{args.catalogue} requests, interleaved (new: {ROOT}; old: {old_tree})",
                ["tree", "p50 ms", "p95 ms", "mean ms"],
                [[label, s["p50_ms"], s["p95_ms"], s["mean_ms"]] for label, s in stats.items()]
                + [["ratio new / old", ratio["p50_ms"], ratio["p95_ms"], ratio["mean_ms"]]])
    print(f"same first tool in both trees: {agree}/{len(queries)}")
    print_load()
    write_json(args.json, {"catalogue": args.catalogue, "queries": len(queries), "k": args.k, "new": stats["new"],
                           "old": stats["old"], "ratio": ratio, "same_first_tool": agree,
                           "trees": {"new": str(ROOT), "old": str(old_tree)}})


if __name__ == "__main__":
    main()
