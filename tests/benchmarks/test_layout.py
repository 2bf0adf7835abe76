"""The layout of `benchmarks/` (benchmarks/README.md): scripts in kind folders, each script's results beside it under
names that say what was measured, and every `benchmarks/...` path the docs, READMEs, tests, package and scripts name
exists, so a later move cannot break a link silently. Reads files only (well under a second)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from benchmark_scripts import BENCHMARKS, ROOT

KINDS = ("speed", "quality", "reproductions", "peers")
# A path that starts at the `benchmarks/` folder; not `docs/benchmarks/...` or `tests/benchmarks/...`.
PATH = re.compile(r"(?<![\w./$-])benchmarks/[\w./*-]*")
# The flag just before a path that a command writes (the file may not exist yet; its folder must).
OUTPUT_FLAG = re.compile(r"--(?:output|json|out|results)[ =\\\s]*$")
SETTING = re.compile(r"^[a-z0-9][a-z0-9.-]*(?:_[a-z0-9][a-z0-9.-]*)*\.json$")
HISTORY = re.compile(r"^(?:run\d*|rerun|redo|again|from\d+|before|after|partial|old|new|newer|latest|final|fixed|"
                     r"tmp|temp|copy|smoke|earlier|later|v\d+)$")
# Files this task may not edit that still name an old path; the lead changes them. Each entry must still be broken
# (the test says when to remove it).
PENDING: set[tuple[str, str]] = set()


def scanned_files() -> list[Path]:
    """Every file that may name a `benchmarks/...` path (CHANGELOG.md is history and keeps the old names)."""
    files = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "mkdocs.yml", ROOT / "setup.cfg",
             BENCHMARKS / "README.md", ROOT / "tests" / "README.md"]
    for folder, patterns in [("docs", ["*.md"]), ("tests", ["*.py"]), ("hf_heuristic_core", ["*.py"]),
                             ("examples", ["*.py", "*.yaml", "*.md"]), ("benchmarks", ["*.py"])]:
        for pattern in patterns:
            files += (ROOT / folder).rglob(pattern)
    this = Path(__file__).resolve()   # its own hand-made cases name missing paths on purpose
    return sorted({f for f in files if f.is_file() and "__pycache__" not in f.parts and f.resolve() != this})


def results_rule_problem(path: Path) -> str | None:
    """Why `path` (under benchmarks/) breaks the results rule, or None."""
    parts = path.relative_to(BENCHMARKS).parts
    if len(parts) != 4 or parts[0] not in KINDS or parts[1] != "results":
        return "results lie at benchmarks/<kind>/results/<script>/<setting>.json"
    kind, _, script, name = parts
    if not (BENCHMARKS / kind / f"{script}.py").is_file():
        return f"no script benchmarks/{kind}/{script}.py beside its results folder"
    if not SETTING.match(name):
        return "the name is lowercase facets joined by '_' (words by '-'), ending in .json"
    history = [word for word in re.split(r"[_-]", name[:-len(".json")]) if HISTORY.match(word)]
    if history:
        return f"the name tells history ({', '.join(history)}), not what was measured"
    return None


def broken_paths(text: str, source: str) -> list[str]:
    """The `benchmarks/...` paths named in `text` that do not resolve. `source` is the file's path relative to the
    root: in docs/ and mkdocs.yml, `benchmarks/x.md` may be a page link relative to docs/."""
    broken = []
    for match in PATH.finditer(text):
        name = match.group(0).rstrip(".")
        if "*" in name:
            if not list(ROOT.glob(name)):
                broken.append(f"{name} (matches nothing)")
            continue
        if (source.startswith("docs/") or source == "mkdocs.yml") and (ROOT / "docs" / name).exists():
            continue
        path = ROOT / name
        if path.exists():
            continue
        if OUTPUT_FLAG.search(text[max(0, match.start() - 40):match.start()]):
            problem = (results_rule_problem(path) if path.parent.is_dir()
                       else f"its folder {path.parent.relative_to(ROOT)} does not exist")
            if problem:
                broken.append(f"{name} (an output: {problem})")
            continue
        broken.append(name)
    return broken


def test_the_checks_catch_what_they_are_for():
    """The checkers against hand-made cases, so a checker that finds nothing cannot pass the real tests."""
    exists = "benchmarks/speed/bench_slim.py"
    assert broken_paths(f"run `python {exists}`", "docs/x.md") == []
    assert broken_paths("python benchmarks/bench_slim.py", "docs/x.md") == ["benchmarks/bench_slim.py"]
    assert broken_paths("see docs/benchmarks/none.md and tests/benchmarks/none.py", "README.md") == []
    assert broken_paths("written to `benchmarks/speed/bench_slim.py`.", "README.md") == []  # a sentence's full stop
    future = "benchmarks/speed/results/bench_slim/bert-base_cpu_t8.json"
    assert broken_paths(f"--json {future}", "docs/x.md") == []
    assert broken_paths(f"--json \\\n    {future}", "docs/x.md") == []
    assert broken_paths(f"read {future}", "docs/x.md") == [future]  # not an output: it must exist
    assert broken_paths("--output benchmarks/speed/results/bench_nothing/a.json", "x") == [
        "benchmarks/speed/results/bench_nothing/a.json (an output: its folder "
        "benchmarks/speed/results/bench_nothing does not exist)"]
    assert "history" in broken_paths("--json benchmarks/speed/results/bench_slim/bert_run2.json", "x")[0]
    assert broken_paths("benchmarks/reproductions/results/*/*.json", "x") == []
    assert broken_paths("benchmarks/speed/results/*/nothing_*.json", "x") == [
        "benchmarks/speed/results/*/nothing_*.json (matches nothing)"]
    assert broken_paths("[pages](benchmarks/index.md)", "docs/index.md") == []
    assert broken_paths("[pages](benchmarks/index.md)", "README.md") == ["benchmarks/index.md"]
    assert results_rule_problem(BENCHMARKS / "speed" / "results" / "bench_slim" / "Bert_T2.json")
    assert results_rule_problem(BENCHMARKS / "speed" / "results" / "bench_slim" / "bert_partial.json")
    assert results_rule_problem(BENCHMARKS / "speed" / "results_slim.json")
    assert results_rule_problem(BENCHMARKS / "speed" / "results" / "bench_slim" / "bert-base_cpu_t2_idle.json") is None


def test_every_named_benchmarks_path_exists():
    """Every `benchmarks/...` path in the docs, READMEs, tests, package, examples and scripts resolves."""
    found, broken, pending_seen = 0, [], set()
    for file in scanned_files():
        source = str(file.relative_to(ROOT))
        text = file.read_text()
        found += len(PATH.findall(text))
        for name in broken_paths(text, source):
            if (source, name) in PENDING:
                pending_seen.add((source, name))
            else:
                broken.append(f"{source}: {name}")
    assert found > 200, f"only {found} benchmarks/ paths found: the scan or its pattern is broken"
    assert not broken, ("paths under benchmarks/ that do not exist (see benchmarks/README.md for the layout; a "
                        "moved file's references must follow it):\n" + "\n".join(broken))
    fixed = PENDING - pending_seen
    assert not fixed, f"these references were fixed: remove them from PENDING in {__file__}: {sorted(fixed)}"


def test_scripts_are_in_kind_folders_and_listed():
    readme = (BENCHMARKS / "README.md").read_text()
    loose = sorted(p.name for p in BENCHMARKS.iterdir() if p.is_file() and p.name != "README.md")
    assert not loose, f"files directly under benchmarks/: {loose}; move each into a kind folder {KINDS}"
    folders = sorted(p.name for p in BENCHMARKS.iterdir() if p.is_dir() and p.name != "__pycache__")
    assert set(folders) == set(KINDS), f"benchmarks/ holds {folders}; the kinds are {KINDS} (benchmarks/README.md)"
    scripts = sorted(BENCHMARKS.glob("*/*.py"))
    assert len(scripts) >= 20
    for script in scripts:
        kind = script.parent.name
        row = next(line for line in readme.splitlines() if line.startswith(f"| `{kind}/` |"))
        assert f"`{script.name}`" in row, f"{script.relative_to(ROOT)} is not in benchmarks/README.md's {kind} row"
    deeper = [p for p in BENCHMARKS.glob("*/*/**/*.py") if "__pycache__" not in p.parts]
    assert not deeper, f"scripts below a kind folder: {deeper}"


def test_results_lie_beside_their_script_under_stable_names():
    results = [p for p in BENCHMARKS.rglob("*") if p.is_file() and p.suffix != ".py" and p.name != "README.md"
               and "__pycache__" not in p.parts]
    assert len(results) >= 60
    problems = [f"{p.relative_to(ROOT)}: {results_rule_problem(p)}" for p in results if results_rule_problem(p)]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("script", sorted(BENCHMARKS.glob("*/*.py")), ids=lambda p: p.stem)
def test_paths_a_script_builds_from_its_own_location_exist(script):
    """`Path(__file__).resolve().parents[n] / "x"` in a script (the repository root, tests/) points at something."""
    for n, name in re.findall(r'Path\(__file__\)\.resolve\(\)\.parents\[(\d)\](?:\s*/\s*"([\w.]+)")?',
                              script.read_text()):
        target = script.resolve().parents[int(n)] / name
        assert target.exists() and (name or (target / "pyproject.toml").exists() or (target / "setup.cfg").exists()), (
            f"{script.relative_to(ROOT)}: parents[{n}] / {name!r} is {target}, which is not the intended folder")
