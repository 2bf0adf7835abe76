"""The fenced code blocks of a Markdown page, and which of them are marked as not run.

A block is run by the documentation tests unless the line just above it (blank lines aside) is an HTML comment
`<!-- not-run: reason -->`; the reason is required and should say what the block needs (real weights, a GPU, the
Hub, a long run).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

FENCE = re.compile(r"^(?P<indent>[ \t]*)```(?P<language>[\w+-]*)[^\n]*\n(?P<source>.*?)^(?P=indent)```[ \t]*$",
                   re.S | re.M)
MARKER = re.compile(r"<!--\s*not-run\s*:(?P<reason>.*?)-->", re.S)


@dataclass(frozen=True)
class CodeBlock:
    page: str
    line: int  # 1-based line of the opening fence
    language: str
    source: str
    not_run: str | None  # the reason, when the block is marked as not run

    @property
    def label(self) -> str:
        return f"{self.page}:{self.line}"


def code_blocks(path: Path, language: str = "python", root: Path | None = None) -> list[CodeBlock]:
    text = path.read_text()
    page = str(path.relative_to(root)) if root else path.name
    blocks = []
    for match in FENCE.finditer(text):
        if match["language"] != language:
            continue
        before = text[:match.start()].rstrip()
        last = before.rsplit("\n", 1)[-1].strip()
        marker = MARKER.fullmatch(last)
        blocks.append(CodeBlock(page, text.count("\n", 0, match.start()) + 1, language,
                                textwrap.dedent(match["source"]), marker["reason"].strip() if marker else None))
    return blocks


def markers(path: Path) -> list[tuple[int, str]]:
    """Every not-run marker on a page: (line, reason)."""
    text = path.read_text()
    return [(text.count("\n", 0, m.start()) + 1, m["reason"].strip()) for m in MARKER.finditer(text)]
