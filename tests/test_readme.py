"""The README's commands and code blocks are what the project really does."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

import markdown_blocks

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()


def code_blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", README, flags=re.S)


def test_ci_runs_the_readme_test_command():
    bash = code_blocks("bash")
    test_commands = [b.strip() for b in bash if "pytest" in b]
    assert len(test_commands) == 1, "README must give exactly one test command"
    ci_lines = [line.strip() for line in (ROOT / ".ci" / "run").read_text().splitlines()]
    assert test_commands[0] in ci_lines


def test_readme_gives_exactly_two_setup_commands():
    setup = README.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    commands = re.findall(r"```bash\n(.*?)```", setup, flags=re.S)
    assert len(commands) == 2
    assert all(c.strip().startswith("pip install") and c.count("\n") == 1 for c in commands)
    assert commands[0].strip().endswith("hf-heuristic-core study"), "the main command runs the study"


def test_readme_figures_and_links_exist():
    for target in re.findall(r"\]\(((?:docs|examples)/[^)#]+)\)", README):
        assert (ROOT / target).is_file(), f"README links to a missing file: {target}"


PYTHON_BLOCKS = markdown_blocks.code_blocks(ROOT / "README.md")


def test_python_blocks_are_the_ones_run():
    assert [block.source for block in PYTHON_BLOCKS] == code_blocks("python")


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(PYTHON_BLOCKS)))
def test_readme_python_example_runs(index, tmp_path, monkeypatch):
    """Every ```python block of the README runs, unless marked `<!-- not-run: reason -->` just above it."""
    block = PYTHON_BLOCKS[index]
    if block.not_run is not None:
        pytest.skip(f"README.md:{block.line} is marked not-run: {block.not_run}")
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    exec(compile(block.source, f"README.md python block {index} ({block.label})", "exec"), namespace)
    if "reloaded" in namespace:  # the API example: a reloaded artifact reproduces the ablated logits
        import torch
        reloaded, batch = namespace["reloaded"], namespace["batch"]
        with torch.no_grad():
            assert torch.equal(reloaded(**batch).last_hidden_state, namespace["ablated"]), \
                "artifact round trip changed the outputs"
        assert namespace["model"].sparsity() == pytest.approx(1 / 78)
        assert not torch.equal(namespace["ablated"], namespace["full"])
