"""Text helpers of the reference pages' hook (``reference.py``): docstrings as Markdown,
tables, code blocks."""

from __future__ import annotations

import inspect
import json
import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|mod|data|attr|exc|obj):`(~?)([^`]+)`")


def md(text: str | None) -> str:
    """A docstring's reStructuredText as Markdown: roles and ``literals`` as code,
    ``::`` literal blocks fenced."""
    text = inspect.cleandoc(text or "")

    def role(m: re.Match) -> str:  # ~a.b.C shows as C, a.b.C as itself
        short, target = m.groups()
        return f"``{target.rsplit('.', 1)[-1] if short else target}``"

    text = _ROLE.sub(role, text).replace("``", "`")
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.rstrip().endswith("::"):
            head = line.rstrip()
            out.append(head[:-3] if head.endswith(" ::") else head[:-1])
            block: list[str] = []
            i += 1
            while i < len(lines) and (not lines[i].strip() or lines[i].startswith((" ", "\t"))):
                block.append(lines[i])
                i += 1
            while block and not block[-1].strip():
                block.pop()
            body = inspect.cleandoc("\n".join(block))
            out += ["", "```text", body, "```", ""]
            continue
        out.append(line)
        i += 1
    return "\n".join(out).strip() + "\n"


def inline(text: str) -> str:
    """A docstring fragment as one line of Markdown (roles and literals as code)."""
    return md(text).strip().replace("\n", " ") if text else ""


def shown(default: Any) -> str:
    """A default as a table shows it: ``unset`` for None, an Enum by its value."""
    if default is None:
        return "unset"
    return f"`{json.dumps(default) if default == '' else getattr(default, 'value', default)}`"


def cell(value: Any) -> str:
    """A value in a Markdown table cell (pipes escaped, one line)."""
    return str(value).replace("|", "\\|").replace("\n", " ")


def table(header: tuple[str, ...], rows: list[tuple[Any, ...]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def code(text: str, lang: str = "text") -> str:
    return f"```{lang}\n{text.rstrip()}\n```\n"


def kebab(name: str) -> str:
    return name.replace("_", "-")
