"""`hf-heuristic-core induce`: help without torch, a tiny end-to-end run, one-line errors."""

from __future__ import annotations

import json
import subprocess
import sys

from hf_heuristic_core.cli import command_help, main

TINY = ["--num_tokens", "10", "--eval_size", "20", "--epochs", "2", "--source_epochs", "2", "--mask_epochs", "1",
        "--layers", "1", "--hidden", "16", "--heads", "2", "--inner", "32", "--batch_size", "16"]


def test_help_lists_every_accepted_flag_without_importing_torch():
    from transformers import HfArgumentParser

    from hf_heuristic_core.cli.induce import InductionArguments
    parser = HfArgumentParser(InductionArguments)
    accepted = {o for a in parser._actions for o in a.option_strings
                if o.startswith("--") and "-" not in o[2:] and not o.startswith("--no_")} - {"--help"}
    listed = {line.split()[0] for line in command_help("induce").splitlines() if line.startswith("  --")}
    assert listed == accepted and "--arithmetic" in listed
    code = ("import sys; from hf_heuristic_core.cli import main; assert main(['induce', '--help']) == 0; "
            "heavy = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]; "
            "assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "Subtask Induction" in done.stdout


def test_tiny_arithmetic_run_end_to_end(tmp_path, capsys):
    out = tmp_path / "si"
    assert main(["induce", "--arithmetic", "--output_dir", str(out), "--arms", "subnetwork,random,scratch",
                 "--seeds", "0", "--ks", "3", "--figure", "false", *TINY]) == 0
    printed = capsys.readouterr().out
    assert "subnetwork k=3" in printed and "scratch k=3" in printed and "report.md" in printed
    report = json.loads((out / "report.json").read_text())
    assert [(r["arm"], r["k"]) for r in report["summary"]] == [("subnetwork", 3), ("random", 3), ("scratch", 3)]
    assert len(list((out / "runs").glob("*.json"))) == 3


def test_bad_arm_prints_one_line_and_fails(capsys):
    assert main(["induce", "--arithmetic", "--arms", "subnetwork,sideways"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert err.startswith("hf-heuristic-core induce: error: --arms 'subnetwork,sideways': unknown arm(s) ['sideways']")


def test_missing_source_and_masks_prints_one_line(capsys):
    assert main(["induce", "--output_dir", "x"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--arithmetic" in err
