"""Real English sentences for the benchmarks, with their MiniLM vectors cached.

No data set is downloaded: the sentences are harvested from the docstrings of
Python packages installed next to agentmem (the standard library and a fixed list
of site-packages), split into sentences, filtered to plain prose of 40-220
characters and de-duplicated. The order is deterministic (sorted files), so two
runs on the same environment see the same corpus.

Embedding a few thousand sentences with MiniLM takes a minute on two cores, so
vectors are cached in ``/tmp/agentmem-bench/`` keyed by a hash of the sentences
and the model name; delete that directory to re-embed.
"""

from __future__ import annotations

import ast
import hashlib
import importlib.util
import re
import sysconfig
from pathlib import Path

import numpy as np

CACHE_DIR = Path("/tmp/agentmem-bench")
PACKAGES = ["sqlalchemy", "numpy", "psycopg", "langchain_core", "pandas", "torch", "IPython", "jinja2",
            "hypothesis", "matplotlib"]
_SPLIT = re.compile(r"(?<=[.!?])\s+(?=[A-Z])")
_PROSE = re.compile(r"^[A-Z][A-Za-z0-9 ,;:'()\-]+[.!?]$")


def _files() -> list[Path]:
    roots = [Path(sysconfig.get_paths()["stdlib"])]
    for name in PACKAGES:
        spec = importlib.util.find_spec(name)
        if spec and spec.submodule_search_locations:
            roots.extend(Path(p) for p in spec.submodule_search_locations)
    files: list[Path] = []
    for root in roots:
        files.extend(p for p in sorted(root.rglob("*.py")) if "test" not in p.as_posix().lower())
    return files


def sentences(limit: int) -> list[str]:
    """Up to ``limit`` distinct prose sentences from installed docstrings."""
    seen: set[str] = set()
    out: list[str] = []
    for path in _files():
        try:
            tree = ast.parse(path.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, OSError, ValueError):
            continue
        for node in ast.walk(tree):
            if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            doc = ast.get_docstring(node)
            if not doc:
                continue
            for para in doc.split("\n\n"):
                text = " ".join(para.split())
                for sent in _SPLIT.split(text):
                    if 40 <= len(sent) <= 220 and _PROSE.match(sent) and sent.count(" ") >= 6 and sent not in seen:
                        seen.add(sent)
                        out.append(sent)
                        if len(out) >= limit:
                            return out
    return out


def embed_cached(texts: list[str], embedder, tag: str) -> np.ndarray:
    """MiniLM vectors of ``texts`` (unit length, float32), cached on disk."""
    key = hashlib.sha256(("\x1f".join([embedder.name, *texts])).encode()).hexdigest()[:16]
    path = CACHE_DIR / f"{tag}-{key}.npy"
    if path.exists():
        return np.load(path)
    vecs = np.asarray(embedder.embed(texts), dtype=np.float32)
    CACHE_DIR.mkdir(parents=True, exist_ok=True)
    np.save(path, vecs)
    return vecs


def keywords(sentence: str, n: int = 3) -> str:
    """A short keyword query: the ``n`` longest distinct words of a sentence."""
    words = sorted({w.lower() for w in re.findall(r"[A-Za-z]{4,}", sentence)}, key=lambda w: (-len(w), w))
    return " ".join(words[:n])
