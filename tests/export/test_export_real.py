"""Slim export of real weights: MiniLM (BERT) keeps the hooked subnetwork's accuracy on HANS-style data, and
SmolLM2-135M (Llama, 9 query / 3 key-value heads) keeps its logits, in memory and after a reload."""

from __future__ import annotations

import pytest
import torch
from conftest import MAX_LENGTH

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim

pytestmark = pytest.mark.slow


def _random_masks(layers: int, heads: int, seed: int, keep: float = 0.5) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    head_mask = (torch.rand(layers, heads, generator=generator) < keep).float()
    head_mask[1] = 0                                     # a layer without heads
    mlp_mask = (torch.rand(layers, generator=generator) < keep).float()
    mlp_mask[2] = 0
    return {"heads": head_mask, "mlps": mlp_mask}


def test_minilm_slim_accuracy_equals_hooked(finetuned_minilm, nli_data, tmp_path):
    import transformers
    tokenizer = transformers.AutoTokenizer.from_pretrained(finetuned_minilm)
    model = transformers.AutoModelForSequenceClassification.from_pretrained(finetuned_minilm).eval()
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    train = nli_data["train"].select(range(256))
    prunable.compute_means([dict(tokenizer(train["premise"][i:i + 64], train["hypothesis"][i:i + 64], padding=True,
                                           truncation=True, max_length=MAX_LENGTH, return_tensors="pt"))
                            for i in range(0, 256, 64)], show_progress=False)
    prunable.set_masks(_random_masks(6, 12, seed=0))
    prunable.eval()
    slim = prunable.export_slim()
    save_slim(slim, tmp_path / "slim")
    reloaded = load_slim(tmp_path / "slim")
    data = nli_data["ood_eval"]
    hooked_pred, slim_pred, reload_pred, labels, worst = [], [], [], [], 0.0
    with torch.no_grad():
        for i in range(0, len(data), 64):
            rows = data[i:i + 64]
            batch = dict(tokenizer(rows["premise"], rows["hypothesis"], padding=True, truncation=True,
                                   max_length=MAX_LENGTH, return_tensors="pt"))
            hooked, ours = prunable(**batch).logits, slim(**batch).logits
            worst = max(worst, float((hooked - ours).abs().max()))
            hooked_pred += hooked.argmax(-1).tolist()
            slim_pred += ours.argmax(-1).tolist()
            reload_pred += reloaded(**batch).logits.argmax(-1).tolist()
            labels += rows["label"]
    assert worst <= 1e-4
    assert slim_pred == hooked_pred == reload_pred
    accuracy = sum(p == y for p, y in zip(slim_pred, labels)) / len(labels)
    assert accuracy == sum(p == y for p, y in zip(hooked_pred, labels)) / len(labels)
    assert sum(p.numel() for p in slim.parameters()) < 0.9 * sum(p.numel() for p in model.parameters())


def test_smollm2_slim_logits_equal_hooked(smollm2_dir, tmp_path):
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32).eval()
    ids = torch.tensor([[1, 504, 3458, 282, 260, 1345, 30, 2], [0, 0, 0, 1, 504, 3458, 30, 2]])
    mask = (ids != 0).long()
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    prunable.compute_means([{"input_ids": ids, "attention_mask": mask}], show_progress=False)
    masks = _random_masks(30, 9, seed=1)
    masks["heads"][4] = torch.tensor([1., 1, 1, 0, 0, 0, 1, 0, 0])   # a whole kv group gone, one group uneven
    prunable.set_masks(masks)
    prunable.eval()
    with torch.no_grad():
        hooked = prunable(input_ids=ids, attention_mask=mask).logits
        slim = prunable.export_slim()
        ours = slim(input_ids=ids, attention_mask=mask).logits
        save_slim(slim, tmp_path / "slim")
        again = load_slim(tmp_path / "slim")(input_ids=ids, attention_mask=mask).logits
    real = mask.bool()
    assert float((hooked - ours)[real].abs().max()) <= 1e-4
    assert float((hooked - again)[real].abs().max()) <= 1e-4
    assert len(slim.model.layers[4].self_attn.k_proj.weight) == 2 * 64   # groups 0 and 2 kept
