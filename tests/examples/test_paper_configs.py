"""The paper-scale example configs run end to end on a tiny slice, so a real GPU run cannot fail after hours on a
path nothing exercised.

`hf-heuristic-core study --config examples/<file>.yaml` is run here exactly as the file is written, except for the
keys in `SCALE` (how long and how big: steps, levels, seeds, examples; the model, replaced by a tiny random model of
the same family; the device). Every stage the file enables runs: fine-tuning with checkpoints, the effective-size
grid at every checkpoint, multi-seed pruning with the paper's recipe, the analysis (ablations, attention patterns) and
the slim export. MNLI and HANS come from `datasets.load_dataset` with the Hub schemas (tests/examples/
paper_config_fixtures.py), so the files' `mnli` / `hans` ids go through the same loaders as on the real run.
tests/gpu/test_paper_configs_gpu.py runs the same with `device: cuda`.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

sys.path.insert(0, str(Path(__file__).parent))
import paper_config_fixtures as fixtures  # noqa: E402

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
CONFIGS = {"paper_bert_mnli.yaml": fixtures.tiny_bert, "paper_smollm2_mnli.yaml": fixtures.tiny_llama}
# The only keys the test changes; they set sizes, not which code runs (the model: same family, tiny, random).
SCALE = {"finetune_steps": 4, "checkpoint_every": 2, "effective_size_sparsities": "0.3,0.6",
         "effective_size_seeds": "42,43", "effective_size_steps": 2, "seeds": "42,43", "prune_steps": 4,
         "ood_per_case": 4, "ablation_non_core_sample": 2, "max_core_units": 2}
DATA_SIZES = {"train": 64, "validation": 16, "hans_per_subcase": 6}


def run_example(name: str, folder: Path, device: str, monkeypatch) -> tuple[Path, dict]:
    """Run the study of examples/`name` on the tiny slice; returns the study folder and the file's settings."""
    import datasets

    from hf_heuristic_core.cli import main
    monkeypatch.setattr(datasets, "load_dataset", fixtures.fake_load_dataset(DATA_SIZES))
    settings = fixtures.read_config(EXAMPLES / name)
    model = CONFIGS[name](folder / "model")
    out = folder / "study"
    flags = [item for key, value in {**SCALE, "model": str(model), "device": device}.items()
             for item in (f"--{key}", str(value))]
    previous = torch.get_num_threads()
    torch.set_num_threads(1)   # tiny matmuls: thread hand-off costs dominate on a shared 2-core machine
    try:
        assert main(["study", "--config", str(EXAMPLES / name), "--output_dir", str(out), *flags]) == 0
    finally:
        torch.set_num_threads(previous)
    return out, settings


def check_study(out: Path, settings: dict, device: str) -> None:
    recorded = json.loads((out / "study_args.json").read_text())
    for key, value in settings.items():   # everything but the scale keys ran as the file says
        if key in SCALE or key in ("model", "device"):
            continue
        expected = ",".join(map(str, value)) if isinstance(value, list) else value
        assert recorded[key] == expected, key
    assert recorded["device"] == device

    # 1. Fine-tuning: a fresh head with the file's labels, checkpoints, effective size at each (the grid strategy).
    final = json.loads((out / "finetune" / "final" / "config.json").read_text())
    assert len(final["id2label"]) == settings["num_labels"] and final["pad_token_id"] is not None
    assert final["dtype"] == "float32"   # fine-tuned in fp32 even from a bf16 checkpoint (the decoder's)
    assert sorted(p.name for p in (out / "finetune").glob("checkpoint-*")) == ["checkpoint-2", "checkpoint-4"]
    effective = json.loads((out / "finetune" / "effective_size.json").read_text())
    assert effective["settings"]["strategy"] == settings["effective_size_strategy"] == "grid"
    assert effective["settings"]["seeds"] == [42, 43] and len(effective["checkpoints"]) == 2
    groups = json.loads((out / "report.json").read_text())["study"]["groups"]
    assert groups["id"] == ["mnli_matched", "mnli_mismatched"]
    assert sorted(groups["ood"]) == ["constituent_cn_embedded_under_if", "constituent_cn_embedded_under_verb",
                                     "lexical_overlap_ln_preposition", "lexical_overlap_ln_subject-object_swap"]

    # 2. Pruning with the paper's recipe at the file's sparsities x the scaled seeds.
    runs = sorted(p.name for p in (out / "runs").iterdir() if p.name.startswith("sp"))
    levels = [round(100 * s) for s in settings["sparsities"]]
    assert runs == [f"sp{level}-seed{seed}" for level in levels for seed in (42, 43)]
    manifest = json.loads((out / "runs" / "manifest.json").read_text())
    assert manifest["pruning_overrides"]["recipe"] == "paper"
    assert manifest["pruning_config"]["relaxation_settings"]["init_mean"] == 10.0
    assert manifest["pruning_overrides"]["per_device_train_batch_size"] == settings["prune_batch_size"]

    # 3. Analysis and 4. the slim report.
    report = (out / "report.md").read_text()
    assert "## Effective size over fine-tuning" in report and "## Multi-seed analysis" in report
    assert (out / "report" / "ablation_table.png").is_file()
    assert any((out / "report").glob("attention-*.png"))
    slim = json.loads((out / "report.json").read_text())["study"]["slim"]
    assert slim["parameters"]["slim"] < slim["parameters"]["full"]
    assert all(entry["disagreements"] == 0 for entry in slim["per_set"].values())


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_example_config_runs_end_to_end_on_a_tiny_slice(name, tmp_path, monkeypatch):
    out, settings = run_example(name, tmp_path, "cpu", monkeypatch)
    check_study(out, settings, "cpu")


@pytest.mark.parametrize("name, model, gigabytes", [
    ("paper_bert_mnli.yaml", "bert", (53.0, 55.0)),      # bert-base-cased: 122 checkpoints of 433 MB
    ("paper_smollm2_mnli.yaml", "smollm2", (29.0, 31.0)),  # SmolLM2-360M in fp32: 18 checkpoints of 1.45 GB
])
def test_example_config_checkpoints_fit_a_gpu_machine_disk(name, model, gigabytes, tmp_path):
    """What the fine-tuning checkpoints of the full-size run take (the study checks it against the free disk before
    the first step); measured on the real models' shapes, built on the meta device."""
    from transformers import AutoModelForSequenceClassification, BertConfig, LlamaConfig

    from hf_heuristic_core.study.checkpoints import check_disk_for_checkpoints, checkpoint_disk_need
    settings = fixtures.read_config(EXAMPLES / name)
    config = (BertConfig(vocab_size=28996, num_labels=3) if model == "bert" else
              LlamaConfig(vocab_size=49152, hidden_size=960, intermediate_size=2560, num_hidden_layers=32,
                          num_attention_heads=15, num_key_value_heads=5, tie_word_embeddings=True, num_labels=3))
    with torch.device("meta"):
        classifier = AutoModelForSequenceClassification.from_config(config, dtype=torch.float32)
    parameters = sum(p.numel() for p in classifier.parameters())
    need = checkpoint_disk_need(4 * parameters, parameters, settings["finetune_steps"], settings["checkpoint_every"])
    assert gigabytes[0] < need["total"] / 1e9 < gigabytes[1]
    assert need["total"] < 0.9 * 64 * 2**30   # the lent GPU machines have 64 GiB of disk
    with pytest.raises(OSError, match="raise --checkpoint_every"):
        check_disk_for_checkpoints(classifier, 10**9, 1, tmp_path)


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_example_config_changes_nothing_but_scale_in_the_test(name):
    """The test's overrides are sizes only: the file sets every other study field it sets, and parses as is."""
    from hf_heuristic_core.study import StudyArguments
    settings = fixtures.read_config(EXAMPLES / name)
    assert {"model", "device", "finetune", "train", "id_eval", "ood_eval", "pruning_recipe",
            "effective_size_strategy"} <= set(settings)
    assert set(SCALE) <= {f.name for f in StudyArguments.__dataclass_fields__.values()}
    assert not set(SCALE) & {"finetune", "train", "id_eval", "ood_eval", "pruning_recipe", "effective_size_strategy",
                             "track_effective_size", "max_length", "num_labels", "sparsities"}
    parsed = StudyArguments(config=str(EXAMPLES / name))
    assert parsed.device == "cuda" and parsed.pruning_recipe == "paper" and parsed.finetune == "always"
