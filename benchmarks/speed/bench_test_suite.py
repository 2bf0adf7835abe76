"""Where the test suite's time goes: run the README's test command with a JUnit report, then summarise it.

    python benchmarks/speed/bench_test_suite.py --run \\
        --output benchmarks/speed/results/bench_test_suite/$(git rev-parse --short HEAD)_cpu.json     # runs the suite
    python benchmarks/speed/bench_test_suite.py --junit report.xml --output results.json            # an existing report
    python benchmarks/speed/bench_test_suite.py --junit report.xml --write-durations                # tests/durations.json

`--run` runs `python -m pytest -n 2 tests` (the README's command, after its install step) with
`--junitxml` and times the whole command (wall clock). The summary: wall time, the sum of the test times (each test's
setup + call + teardown, as pytest's JUnit report counts them), the time per test folder and per file, and the
slowest tests. Printed as Markdown tables for docs/benchmarks/test_suite.md; `--output` keeps the numbers as JSON.
`--write-durations` stores the seconds per test file in tests/durations.json, from which tests/conftest.py starts the
longest files first (a stale file only makes the two workers finish less evenly).
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ElementTree
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]   # benchmarks/speed/ -> the repository root


def run_suite(junit: Path, extra: list[str]) -> dict:
    """The README's test command with a JUnit report; its wall time and exit status."""
    command = [sys.executable, "-m", "pytest", "-n", "2", "tests", "-q", "-p", "no:cacheprovider",
               f"--junitxml={junit}", *extra]
    start = time.time()
    done = subprocess.run(command, cwd=ROOT, env={**os.environ, "HF_HUB_OFFLINE": "1"}, check=False)
    return {"command": " ".join(["python", *command[1:]]), "wall_s": round(time.time() - start, 1),
            "exit_code": done.returncode, "load_average_after": os.getloadavg()}


def read_cases(junit: Path) -> list[tuple[float, str, str]]:
    """(seconds, file, test name) per test case of a JUnit report."""
    cases = []
    for case in ElementTree.parse(junit).getroot().iter("testcase"):
        module = case.get("classname", "")
        path = module.replace(".", "/") + ".py"
        cases.append((float(case.get("time") or 0.0), path, case.get("name", "")))
    return cases


def summarise(cases: list[tuple[float, str, str]], slowest: int) -> dict:
    by_folder: collections.Counter = collections.Counter()
    by_file: collections.Counter = collections.Counter()
    counts: collections.Counter = collections.Counter()
    for seconds, path, _ in cases:
        parts = path.split("/")
        by_folder["/".join(parts[:2]) if len(parts) > 2 else parts[0] + "/ (top level)"] += seconds
        by_file[path] += seconds
        counts[path] += 1
    ranked = sorted(cases, reverse=True)
    return {"tests": len(cases), "sum_s": round(sum(c[0] for c in cases), 1),
            "folders": {k: round(v, 1) for k, v in by_folder.most_common()},
            "files": [{"file": k, "tests": counts[k], "seconds": round(v, 1)} for k, v in by_file.most_common(30)],
            "slowest": [{"test": f"{path}::{name}", "seconds": round(seconds, 1)}
                        for seconds, path, name in ranked[:slowest]]}


def markdown(summary: dict) -> str:
    lines = ["| folder | seconds |", "| --- | ---: |"]
    lines += [f"| `{k}` | {v:.0f} |" for k, v in summary["folders"].items()]
    lines += ["", "| test | seconds |", "| --- | ---: |"]
    lines += [f"| `{row['test']}` | {row['seconds']:.1f} |" for row in summary["slowest"]]
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--run", action="store_true", help="run the suite (else read --junit)")
    parser.add_argument("--junit", type=Path, help="an existing JUnit XML report")
    parser.add_argument("--slowest", type=int, default=30)
    parser.add_argument("--output", type=Path, help="write the numbers as JSON")
    parser.add_argument("--write-durations", action="store_true",
                        help="store the seconds per test file in tests/durations.json (the order tests/conftest.py "
                             "runs the files in)")
    parser.add_argument("pytest_args", nargs="*", help="extra pytest arguments (after --)")
    args = parser.parse_args()
    run = None
    if args.run:
        junit = args.junit or Path(tempfile.mkdtemp()) / "suite.xml"
        run = run_suite(junit, args.pytest_args)
    elif args.junit is None:
        parser.error("give --run or --junit REPORT.xml")
    else:
        junit = args.junit
    summary = summarise(read_cases(junit), args.slowest)
    result = {"run": run, **summary}
    print(json.dumps({k: v for k, v in result.items() if k in ("run", "tests", "sum_s")}, indent=2))
    print(markdown(summary))
    if args.output:
        args.output.write_text(json.dumps(result, indent=2) + "\n")
    if args.write_durations:
        per_file: collections.Counter = collections.Counter()
        for seconds, path, _ in read_cases(junit):
            per_file[path] += seconds
        (ROOT / "tests" / "durations.json").write_text(
            json.dumps({path: round(value, 1) for path, value in sorted(per_file.items())}, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
