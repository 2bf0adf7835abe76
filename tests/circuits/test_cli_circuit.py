"""`hf-heuristic-core circuit`: fast help, export from a mask artifact, the errors, and attribute + faithfulness on
the real MiniLM (slow)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.mib import read_mib_circuit
from hf_heuristic_core.circuits.warm_start import warm_start_logits
from hf_heuristic_core.cli import main
from hf_heuristic_core.cli.circuit import CircuitArguments, circuit_help
from hf_heuristic_core.errors import UsageError
from tiny_models import tiny_model


def test_help_lists_every_flag_without_importing_torch():
    from transformers import HfArgumentParser
    parser = HfArgumentParser(CircuitArguments)
    accepted = {o for a in parser._actions for o in a.option_strings
                if o.startswith("--") and "-" not in o[2:] and not o.startswith("--no_")} - {"--help"}
    listed = {line.split()[0] for line in circuit_help().splitlines() if line.startswith("  --")}
    assert listed == accepted
    code = ("import sys; from hf_heuristic_core.cli import main; assert main(['circuit', '--help']) == 0; "
            "heavy = [m for m in ('torch', 'transformers', 'datasets') if m in sys.modules]; "
            "assert not heavy, heavy")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "faithfulness" in done.stdout and "--scores" in done.stdout


def _artifact(tmp_path):
    prunable = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="zero"))
    scores = {"heads": torch.tensor([[0.1, 0.9, 0.2, 0.3], [0.8, 0.4, 0.5, 0.05]]), "mlps": torch.tensor([0.7, 0.6])}
    warm_start_logits(prunable, scores, spread=2.0)
    prunable.save_pretrained(tmp_path / "artifact")
    return tmp_path / "artifact", scores


def test_export_from_a_mask_artifact(tmp_path, capsys):
    artifact, scores = _artifact(tmp_path)
    out = tmp_path / "mib"
    assert main(["circuit", "export", "--scores", str(artifact), "--output_dir", str(out), "--name", "ioi_tiny"]) == 0
    printed = capsys.readouterr().out
    assert "10 scored units" in printed and "circuit 50%: 5 units" in printed and "a leaderboard folder" in printed
    importances = read_mib_circuit(out / "importances" / "ioi_tiny" / "importances.json")
    assert (importances.cfg.n_layers, importances.cfg.n_heads) == (2, 4)
    # The logits keep the ranking of the scores they were set from, and the exported scores keep the logits'.
    assert torch.equal(torch.argsort(importances.scores["heads"].flatten()),
                       torch.argsort(scores["heads"].flatten()))
    circuits = out / "circuits" / "ioi_tiny"
    assert sorted(p.name for p in circuits.iterdir()) == sorted([
        "circuit_0.1.json", "circuit_0.2.json", "circuit_0.5.json", "circuit_1.json", "circuit_2.json",
        "circuit_5.json", "circuit_10.json", "circuit_20.json", "circuit_50.json"])
    ten = read_mib_circuit(circuits / "circuit_10.json")       # int(0.1 * 10) = 1 unit: the best head, a0.h1
    assert ten.scores is None and int(ten.in_graph["heads"].sum() + ten.in_graph["mlps"].sum()) == 1
    assert bool(ten.in_graph["heads"][0, 1]) and ten.edge_count == 110
    half = read_mib_circuit(circuits / "circuit_50.json")      # 5 units: 0.9, 0.8, 0.7 (m0), 0.6 (m1), 0.5
    assert half.in_graph["mlps"].tolist() == [True, True]
    assert half.in_graph["heads"].tolist() == [[False, True, False, False], [True, False, True, False]]
    # This tiny graph's 0.1% circuit cannot hold under 0.1% of 110 edges: said, not hidden.
    assert "NOT a leaderboard folder" in printed and "over its size" in printed
    # The evaluation sizes from the export folder itself; the name derived when not given, and said so.
    assert main(["circuit", "export", "--scores", str(out), "--output_dir", str(tmp_path / "curve"), "--sizes",
                 "curve", "--write", "circuits"]) == 0
    assert "--name" in capsys.readouterr().out
    written = list((tmp_path / "curve" / "circuits").iterdir())
    assert [p.name for p in written] == ["ioi_tiny"]         # the name of the export it comes from
    assert read_mib_circuit(written[0] / "circuit_100.json").edge_count == 110
    assert not (tmp_path / "curve" / "importances").exists()


@pytest.mark.parametrize("argv, message", [
    (["circuit", "export", "--output_dir", "x"], "needs --scores"),
    (["circuit", "export", "--scores", "a,b", "--output_dir", "x"], "one ranking"),
    (["circuit", "--scores", "a"], "give the action first"),
    (["circuit", "faithfulness", "--model", "m", "--dataset", "ioi", "--output_dir", "o"], "needs --scores"),
    (["circuit", "export", "--scores", "s", "--output_dir", "o", "--ablation", "half"], "--ablation 'half'"),
    (["circuit", "export", "--scores", "s", "--output_dir", "o", "--edges", "none"], "MIB scores as empty"),
    (["circuit", "export", "--scores", "s", "--output_dir", "o", "--write", "all"], "--write 'all'"),
    (["circuit", "export", "--scores", "s", "--output_dir", "o", "--name", "ioi"], "<task>_<model>"),
    (["circuit", "faithfulness", "--model", "m", "--dataset", "ioi", "--scores", "s", "--output_dir", "o",
      "--absolute", "true"], "no longer applies"),
])
def test_errors_name_the_flag(argv, message):
    from hf_heuristic_core.cli.circuit import circuit_command
    with pytest.raises(UsageError, match=message):
        circuit_command(argv[1:])


def test_export_refuses_bad_sizes(tmp_path):
    artifact, _ = _artifact(tmp_path)
    from hf_heuristic_core.cli.circuit import circuit_command
    with pytest.raises(UsageError, match="fractions in"):
        circuit_command(["export", "--scores", str(artifact), "--output_dir", str(tmp_path / "o"), "--sizes", "5"])


@pytest.mark.slow
def test_attribute_then_faithfulness_on_minilm(minilm_dir, tmp_path, capsys):
    scores_dir = tmp_path / "attr"
    common = ["--model", str(minilm_dir), "--dataset", "nli", "--num_examples", "16", "--batch_size", "8",
              "--ablation", "zero",
              "--task", "sequence_classification"]   # its config names no head (BertModel): auto refuses it
    assert main(["circuit", "attribute", *common, "--method", "patching", "--output_dir", str(scores_dir),
                 "--edges", "none", "--write", "importances", "--name", "nli_minilm"]) == 0
    info = json.loads((scores_dir / "attribution.json").read_text())
    assert info["method"] == "patching" and info["examples"] == 16 and info["forward_backward_passes"] == 2
    importances = read_mib_circuit(scores_dir / "importances" / "nli_minilm" / "importances.json")
    assert (importances.cfg.n_layers, importances.cfg.n_heads, importances.cfg.d_model) == (6, 12, 384)
    assert bool(torch.isfinite(importances.scores["heads"]).all())
    curves = tmp_path / "curves"
    assert main(["circuit", "faithfulness", *common, "--scores", str(scores_dir),
                 "--random_seeds", "0", "--output_dir", str(curves)]) == 0
    document = json.loads((curves / "curves.json").read_text())
    assert set(document["curves"]) == {"attr", "random-seed0"}
    assert document["curves"]["attr"]["units"] == [0, 0, 0, 0, 1, 3, 7, 15, 39, 78]
    assert document["curves"]["attr"]["faithfulness"][-1] == pytest.approx(1.0)
    assert document["curves"]["attr"]["faithfulness_absolute"][-1] == pytest.approx(1.0)
    assert document["curves"]["attr"]["mib_cmd"] is True
    assert (curves / "faithfulness_curves.png").is_file()
    assert "CPR" in capsys.readouterr().out
