"""Every ```python block of the documentation pages runs (README.md's are run by tests/test_readme.py).

Blocks of one page run in order in one namespace, as a reader would paste them, in a fresh working folder. A block
that needs real weights, a GPU, the Hub or a long run is marked with `<!-- not-run: reason -->` just above it; any
unmarked block that raises fails the test with its page and line.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path

import pytest

from markdown_blocks import code_blocks, markers

ROOT = Path(__file__).resolve().parents[2]
PAGES = sorted((ROOT / "docs").rglob("*.md"))
PAGES_WITH_CODE = [page for page in PAGES if any(block.not_run is None for block in code_blocks(page))]
REAL_WEIGHTS = ("minilm_path", "smollm2_gguf")


def _page_param(page: Path):
    """Pages whose examples load the installed real models are `slow`, like the other real-model tests."""
    real = any(name in block.source for block in code_blocks(page) for name in REAL_WEIGHTS)
    return pytest.param(page, marks=[pytest.mark.slow] if real else [], id=str(page.relative_to(ROOT)))


def _check_pruning_guide(namespace: dict, folder: Path) -> None:
    """The PruningTrainer example reaches its target and a meaningful verdict, and saves masks only."""
    report = namespace["model"].sparsity_report()
    assert report["units_kept"] == 39 and report["units_total"] == 78
    assert (folder / "runs" / "minilm-50" / "masks.safetensors").is_file()
    assert not (folder / "runs" / "minilm-50" / "model.safetensors").exists()
    # A meaningful verdict: the example trains the head first (an untrained head made it "inconclusive").
    assert namespace["trainer"].convergence.status != "inconclusive"


def _check_masks_guide(namespace: dict, folder: Path) -> None:
    """The API example: a reloaded artifact reproduces the ablated outputs."""
    import torch
    with torch.no_grad():
        assert torch.equal(namespace["reloaded"](**namespace["batch"]).last_hidden_state, namespace["ablated"])
    assert namespace["model"].sparsity() == pytest.approx(1 / 78)
    assert not torch.equal(namespace["ablated"], namespace["full"])


# What a page's examples must have done, beyond running without an error.
PAGE_CHECKS = {"docs/guides/pruning.md": _check_pruning_guide, "docs/guides/masks.md": _check_masks_guide}


def test_every_not_run_marker_gives_a_reason_and_stands_above_a_python_block():
    for page in [ROOT / "README.md", *PAGES]:
        found = markers(page)
        assert all(reason for _, reason in found), f"{page}: a not-run marker without a reason"
        marked = [block for block in code_blocks(page) if block.not_run is not None]
        assert len(marked) == len(found), f"{page}: a not-run marker that is not just above a ```python block"


@pytest.mark.parametrize("page", [_page_param(page) for page in PAGES_WITH_CODE])
def test_python_blocks_of_the_page_run(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("MPLBACKEND", "Agg")
    # The page runs as a script would: its own module (dataclasses defined on a page look their module up), and
    # none of this file's `from __future__` settings.
    module = types.ModuleType("__docs__")
    monkeypatch.setitem(sys.modules, "__docs__", module)
    namespace: dict = module.__dict__
    assert PAGES_WITH_CODE, "no documentation page has a python block to run"
    for block in code_blocks(page, root=ROOT):
        if block.not_run is not None:
            continue
        try:
            exec(compile(block.source, block.label, "exec", dont_inherit=True), namespace)
        except Exception as error:
            raise AssertionError(f"the python block at {block.label} fails: {error!r}. Fix it, or mark it with "
                                 "<!-- not-run: reason --> just above if it needs real weights, a GPU, the Hub or "
                                 "a long run.") from error
    check = PAGE_CHECKS.get(str(page.relative_to(ROOT)))
    if check is not None:
        check(namespace, tmp_path)


def test_every_page_check_names_a_page():
    assert all((ROOT / page).is_file() for page in PAGE_CHECKS)
