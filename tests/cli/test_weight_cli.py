"""`prune --granularity weight ...` and `subtasks` end to end on a tiny BERT with a real tokenizer."""

from __future__ import annotations

import json

import pytest
import torch
import transformers
from safetensors import safe_open

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.cli import main
from hf_heuristic_core.cli.prune import parse_layers


@pytest.fixture(scope="module")
def tiny_bert_dir(tmp_path_factory):
    from hf_heuristic_core.offline_models import minilm_path
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_path())
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=16, num_attention_heads=2,
                                     num_hidden_layers=2, intermediate_size=24, num_labels=2,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    folder = tmp_path_factory.mktemp("tiny-bert")
    transformers.BertForSequenceClassification(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def sentence_file(tmp_path):
    data = tmp_path / "train.jsonl"
    rows = [{"sentence": f"the cat number {i} sat on the mat", "label": i % 2} for i in range(16)]
    data.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    return data


def test_parse_layers():
    assert parse_layers("0,2-4") == [0, 2, 3, 4]
    with pytest.raises(ValueError, match="'x' is not a layer index"):
        parse_layers("1,x")


def test_prune_cli_learns_gumbel_weight_masks_on_the_task_loss(tiny_bert_dir, tmp_path, capsys):
    data = sentence_file(tmp_path)
    output = tmp_path / "run"
    code = main(["prune", "--model", str(tiny_bert_dir), "--dataset", str(data), "--granularity", "weight",
                 "--relaxation", "gumbel_sigmoid", "--target_modules", "query,value", "--layers_to_transform", "1",
                 "--objective", "task", "--sparsity_control", "penalty", "--output_dir", str(output),
                 "--max_steps", "2", "--per_device_train_batch_size", "8", "--report_to", "none", "--use_cpu",
                 "--disable_tqdm", "true", "--save_strategy", "no", "--convergence_check", "false"])
    assert code == 0
    config = json.loads((output / "pruning_config.json").read_text())
    assert (config["granularity"], config["relaxation"], config["ablation"]) == ("weight", "gumbel_sigmoid", "zero")
    assert set(config["mask_shapes"]) == {"bert.encoder.layer.1.attention.self.query.weight",
                                          "bert.encoder.layer.1.attention.self.value.weight"}
    with safe_open(str(output / "masks.safetensors"), framework="pt") as handle:
        assert all(key.startswith("packed.") for key in handle.keys())
    capsys.readouterr()


def test_subtasks_cli_writes_overlap_and_sharing(tiny_bert_dir, tmp_path, capsys):
    folders = []
    for name, keep in (("A", [1, 1, 0, 0]), ("B", [1, 0, 1, 0])):
        pm = PrunableModel(transformers.BertForSequenceClassification.from_pretrained(tiny_bert_dir),
                           PruningConfig(granularity="weight", target_modules=["query"]))
        pm.set_masks({k: torch.tensor(keep, dtype=torch.float32).repeat(s[0] * s[1] // 4).view(s)
                      for k, s in pm.mask_shapes().items()})
        pm.save_pretrained(tmp_path / name)
        folders.append(str(tmp_path / name))
    code = main(["subtasks", "--masks", *folders, "--names", "A", "B", "--output_dir", str(tmp_path / "out"),
                 "--figure", "false"])
    assert code == 0
    summary = json.loads((tmp_path / "out" / "subtasks.json").read_text())
    total = summary["overlap"]["A vs B"]["total"]
    assert total["iou"] == pytest.approx(1 / 3) and total["iomin"] == pytest.approx(1 / 2)
    # each mask keeps half of every tensor and a quarter is kept by both: half of each mask's entries are shared
    # (the total used to be the IoU, 1/3, which is now sharing_over_union)
    assert summary["sharing"]["A"]["total"] == pytest.approx(1 / 2)
    assert summary["sharing_over_union"]["A"] == pytest.approx(1 / 3)
    assert "| IoU |" in (tmp_path / "out" / "subtasks.md").read_text()
    assert "Shared fraction (total over layers, of each mask's kept entries): A 0.500, B 0.500" in \
        capsys.readouterr().out


def test_prune_cli_stores_weight_mask_logits_in_bf16_when_asked(tiny_bert_dir, tmp_path, capsys):
    data = sentence_file(tmp_path)
    output = tmp_path / "run"
    code = main(["prune", "--model", str(tiny_bert_dir), "--dataset", str(data), "--granularity", "weight",
                 "--relaxation", "continuous_sparsification", "--target_modules", "query",
                 "--logits_dtype", "bfloat16", "--objective", "task", "--sparsity_control", "penalty",
                 "--output_dir", str(output), "--max_steps", "2", "--per_device_train_batch_size", "8",
                 "--report_to", "none", "--use_cpu", "--disable_tqdm", "true", "--save_strategy", "no",
                 "--convergence_check", "false"])
    assert code == 0
    config = json.loads((output / "pruning_config.json").read_text())
    assert config["granularity_settings"]["logits_dtype"] == "bfloat16"
    assert config["relaxation"] == "continuous_sparsification"
    capsys.readouterr()
    assert main(["prune", "--model", str(tiny_bert_dir), "--dataset", str(data), "--logits_dtype", "bfloat16",
                 "--output_dir", str(tmp_path / "unit"), "--max_steps", "1"]) == 2
    assert "--logits_dtype='bfloat16' is a setting of the 'weight' granularity" in capsys.readouterr().err
