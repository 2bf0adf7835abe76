"""Every ```python block of the documentation pages runs (README.md's are run by tests/test_readme.py).

Blocks of one page run in order in one namespace, as a reader would paste them, in a fresh working folder. A block
that needs real weights, a GPU, the Hub or a long run is marked with `<!-- not-run: reason -->` just above it; any
unmarked block that raises fails the test with its page and line.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from markdown_blocks import code_blocks, markers

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
PAGES_WITH_CODE = [page for page in PAGES if any(block.not_run is None for block in code_blocks(page))]


def test_every_not_run_marker_gives_a_reason_and_stands_above_a_python_block():
    for page in [ROOT / "README.md", *PAGES]:
        found = markers(page)
        assert all(reason for _, reason in found), f"{page}: a not-run marker without a reason"
        marked = [block for block in code_blocks(page) if block.not_run is not None]
        assert len(marked) == len(found), f"{page}: a not-run marker that is not just above a ```python block"


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=lambda page: str(page.relative_to(ROOT)))
def test_python_blocks_of_the_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    namespace: dict = {"__name__": "__docs__"}
    assert PAGES_WITH_CODE, "no documentation page has a python block to run"
    for block in code_blocks(page, root=ROOT):
        if block.not_run is not None:
            continue
        try:
            exec(compile(block.source, block.label, "exec"), namespace)
        except Exception as error:
            raise AssertionError(f"the python block at {block.label} fails: {error!r}. Fix it, or mark it with "
                                 "<!-- not-run: reason --> just above if it needs real weights, a GPU, the Hub or "
                                 "a long run.") from error
