"""Docstrings as tool descriptions: the prose, and one line per parameter.

A tool's docstring is its description and its parameter documentation. Three
common layouts are understood, so existing functions can be registered as they are:

* Google: an ``Args:`` (or ``Arguments:`` / ``Parameters:``) section with
  ``name (type): text`` entries, continuation lines indented deeper;
* Sphinx / reST: ``:param name: text`` fields (``:type name:`` is ignored: hints win);
* NumPy: a ``Parameters`` heading underlined with dashes, ``name : type`` lines with
  the text indented below.

Sections that are not prose (``Returns:``, ``Raises:``, ``Examples:``...) are left
out of the description: the model needs what the tool does and when to use it.
"""

from __future__ import annotations

import inspect
import re
from dataclasses import dataclass, field

_PARAM_HEADINGS = {"args", "arguments", "parameters", "params", "keyword args", "keyword arguments"}
_OTHER_HEADINGS = {"returns", "return", "yields", "raises", "raise", "examples", "example", "notes", "note",
                   "see also", "attributes", "warnings", "warning", "references", "todo"}
_GOOGLE_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?:\(([^)]*)\))?\s*:\s*(.*)$")
_SPHINX_FIELD = re.compile(r"^:(param|parameter|arg|argument|key|keyword)\s+(?:[^:]*\s)?(\w+)\s*:\s*(.*)$")
_SPHINX_OTHER = re.compile(r"^:(type|rtype|returns?|raises?|yields?)\b")
_NUMPY_ENTRY = re.compile(r"^\*{0,2}(\w+)\s*(?::.*)?$")


@dataclass
class ParsedDocstring:
    description: str = ""
    params: dict[str, str] = field(default_factory=dict)

    @property
    def summary(self) -> str:
        """The first paragraph, on one line."""
        return self.description.split("\n\n", 1)[0].replace("\n", " ").strip()


def _heading(line: str) -> str | None:
    stripped = line.strip()
    if stripped.endswith(":") and stripped[:-1].strip().lower() in _PARAM_HEADINGS | _OTHER_HEADINGS:
        return stripped[:-1].strip().lower()
    return None


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def parse_docstring(doc: str | None) -> ParsedDocstring:
    """Split a docstring into its prose and its per-parameter descriptions."""
    lines = inspect.cleandoc(doc or "").splitlines()
    prose: list[str] = []
    params: dict[str, str] = {}
    section: str | None = None  # the heading we are under, None for prose
    current: str | None = None  # the parameter whose text continues
    entry_indent = 0
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.strip()
        nxt = lines[i + 1].strip() if i + 1 < len(lines) else ""
        # NumPy heading: a word line underlined by dashes.
        if stripped and nxt and set(nxt) == {"-"} and len(nxt) >= 3:
            name = stripped.lower()
            section = "numpy" if name in _PARAM_HEADINGS else "other"
            current, i = None, i + 2
            entry_indent = _indent(lines[i]) if i < len(lines) else 0
            continue
        heading = _heading(line)
        if heading is not None:
            section = "params" if heading in _PARAM_HEADINGS else "other"
            current = None
            entry_indent = -1
            i += 1
            continue
        sphinx = _SPHINX_FIELD.match(stripped)
        if sphinx:
            section, current = "sphinx", sphinx.group(2)
            params[current] = sphinx.group(3).strip()
            i += 1
            continue
        if _SPHINX_OTHER.match(stripped):
            section, current = "sphinx", None
            i += 1
            continue
        if section is None:
            prose.append(line)
        elif section == "params" and stripped and 0 <= _indent(line) < entry_indent:
            section, current = None, None  # dedent below the entries: prose again
            prose.append(line)
        elif section == "params" and stripped:
            if entry_indent < 0:
                entry_indent = _indent(line)
            google = _GOOGLE_ENTRY.match(stripped)
            if _indent(line) <= entry_indent and google:
                current = google.group(1)
                params[current] = google.group(3).strip()
            elif current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif section == "numpy" and stripped:
            numpy = _NUMPY_ENTRY.match(stripped)
            if _indent(line) <= entry_indent and numpy:
                current = numpy.group(1)
                params[current] = ""
            elif current is not None:
                params[current] = (params[current] + " " + stripped).strip()
        elif section == "sphinx" and stripped and current is not None and _indent(line) > 0:
            params[current] = (params[current] + " " + stripped).strip()
        elif section == "sphinx" and stripped and _indent(line) == 0:
            section, current = None, None
            prose.append(line)
        elif not stripped and section == "params":
            current = None
        i += 1
    description = re.sub(r"\n{3,}", "\n\n", "\n".join(prose)).strip()
    return ParsedDocstring(description=description, params={k: " ".join(v.split()) for k, v in params.items()})
