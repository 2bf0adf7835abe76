"""Start-up time of `import hf_heuristic_core` and of every `hf-heuristic-core ... --help`, each in a fresh process.

The goal (issue 14: under 2 s; issue 24: under 0.5 s) is met when no help imports torch, transformers or datasets:
the package and the CLI import them only when a command runs, help is drawn from the flag dataclasses, and `prune
--help-all` reads `TrainingArguments` from transformers' source instead of importing it. The script also says which
heavy modules each command loaded, so a regression names its cause.

    python benchmarks/speed/bench_cli_startup.py [--repeats 5] [--json results.json]

"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HEAVY = ("torch", "transformers", "datasets", "matplotlib")
CASES = {
    "import hf_heuristic_core": "import hf_heuristic_core",
    **{f"hf-heuristic-core {c}--help".replace("  ", " "): f"from hf_heuristic_core.cli import main; main({args!r})"
       for c, args in [("", ["--help"]), ("prune ", ["prune", "--help"]), ("study ", ["study", "--help"]),
                       ("effective-size ", ["effective-size", "--help"]), ("analyze ", ["analyze", "--help"]),
                       ("export ", ["export", "--help"]), ("subtasks ", ["subtasks", "--help"]),
                       ("induce ", ["induce", "--help"]),
                       ("circuit ", ["circuit", "--help"])]},
    "hf-heuristic-core prune --help-all": "from hf_heuristic_core.cli import main; main(['prune', '--help-all'])",
}
REPORT = "import sys; print('HEAVY=' + ','.join(m for m in {heavy!r} if m in sys.modules), file=sys.stderr)"


def measure(code: str) -> tuple[float, str]:
    """Wall time of a fresh interpreter running `code` (output discarded), and the heavy modules it loaded."""
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    start = time.perf_counter()
    program = f"try:\n    {code}\nfinally:\n    {REPORT.format(heavy=HEAVY)}"   # argparse help exits
    completed = subprocess.run([sys.executable, "-c", program], env=env, stdout=subprocess.DEVNULL,
                               stderr=subprocess.PIPE, text=True, check=False)
    elapsed = time.perf_counter() - start
    heavy = [line[6:] for line in completed.stderr.splitlines() if line.startswith("HEAVY=")]
    return elapsed, (heavy[-1] if heavy else "?") or "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--json", default=None, help="Also write the results here.")
    options = parser.parse_args()
    baseline, _ = measure("pass")
    rows = []
    for name, code in CASES.items():
        times = [measure(code)[0] for _ in range(options.repeats)]
        rows.append({"case": name, "median_s": statistics.median(times), "max_s": max(times),
                     "heavy_modules": measure(code)[1]})
    print(f"python -c pass: {baseline:.2f} s; {options.repeats} fresh processes per case; cpu count {os.cpu_count()}")
    print("| case | median (s) | max (s) | heavy modules loaded |\n|---|---|---|---|")
    for row in rows:
        print(f"| `{row['case']}` | {row['median_s']:.2f} | {row['max_s']:.2f} | {row['heavy_modules']} |")
    if options.json:
        with open(options.json, "w") as handle:
            json.dump({"baseline_s": baseline, "rows": rows}, handle, indent=2)


if __name__ == "__main__":
    main()
