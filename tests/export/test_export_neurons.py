"""Neuron-level slim export is exact: pruned intermediate neurons are sliced out of the MLP (rows of the input
projections, columns of the output projection), their means fold into the output bias, and the slim model's logits
equal the hooked subnetwork's in memory, after `load_slim`, and after a plain `AutoModel` reload where that applies."""

from __future__ import annotations

import pytest
import torch
import transformers
from tiny_models import INTERMEDIATE, make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim
from hf_heuristic_core.cli import main

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CAUSAL = ("gpt2", "llama", "qwen2")
TYPES = ("bert", "gpt2", "llama", "qwen2")   # Linear + post-LN, Conv1D, gated bias-free, gated with no bias flag


def _neuron_masks(uniform: bool) -> torch.Tensor:
    """4 layers x 48 neurons. Non-uniform: layer 0 keeps a random half, layer 1 none, layer 2 all, layer 3 five.
    Uniform: every layer keeps a different random 20."""
    generator = torch.Generator().manual_seed(3)
    masks = torch.zeros(4, INTERMEDIATE)
    if uniform:
        for layer in range(4):
            masks[layer, torch.randperm(INTERMEDIATE, generator=generator)[:20]] = 1
        return masks
    masks[0, torch.randperm(INTERMEDIATE, generator=generator)[:24]] = 1
    masks[2] = 1
    masks[3, [0, 7, 11, 30, 47]] = 1
    return masks


def _wrapped(model_type: str, ablation: str, masks: torch.Tensor, attn: str = "eager"):
    task = "causal_lm" if model_type in CAUSAL else "seq_cls"
    model = tiny_model(model_type, task=task, num_layers=4, attn_implementation=attn)
    prunable = PrunableModel(model, PruningConfig(granularity="neuron", ablation=ablation))
    batch = make_batch(model_type, batch_size=4, seq_len=9, padding="left" if task == "causal_lm" else "right")
    if ablation == "mean":
        prunable.compute_means([make_batch(model_type, batch_size=5, seq_len=9, seed=7)], show_progress=False)
    prunable.set_masks(neurons=masks)
    return prunable.eval(), batch


def _logits(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def _max_diff(reference: torch.Tensor, other: torch.Tensor, attention_mask: torch.Tensor) -> float:
    diff = (reference - other).abs()
    return float((diff[attention_mask.bool()] if diff.dim() == 3 else diff).max())


def _expected_parameters(model: torch.nn.Module, model_type: str, ablation: str, masks: torch.Tensor) -> int:
    """Original count minus the pruned neurons' rows and columns plus added biases, worked out from the config."""
    hidden = model.config.hidden_size
    gated = model_type in ("llama", "qwen2")
    inputs = 2 if gated else 1                 # gate and up
    in_bias = not gated                        # Llama / Qwen2 MLP projections have no bias
    total = sum(p.numel() for p in model.parameters())
    for layer in range(4):
        kept = int(masks[layer].sum())
        if kept == 0 and model_type == "gpt2":
            kept = 1                           # Conv1D cannot be zero-width: one zero placeholder neuron
        removed = INTERMEDIATE - kept
        total -= removed * (inputs * (hidden + in_bias) + hidden)
        if ablation == "mean" and gated and masks[layer].sum() < INTERMEDIATE:
            total += hidden                    # the down projection gets a bias to hold the folded means
    return total


@pytest.mark.parametrize("ablation", ["mean", "zero"])
@pytest.mark.parametrize("model_type", TYPES)
def test_neuron_slim_is_exact_and_survives_reload(model_type, ablation, tmp_path):
    masks = _neuron_masks(uniform=False)
    prunable, batch = _wrapped(model_type, ablation, masks)
    hooked = _logits(prunable, batch)
    with prunable.masks_disabled():   # the masks matter: otherwise equality would prove nothing
        assert _max_diff(hooked, _logits(prunable, batch), batch["attention_mask"]) > 1e-3
    slim = prunable.export_slim()
    assert type(slim) is type(prunable.model)
    assert _max_diff(hooked, _logits(slim, batch), batch["attention_mask"]) <= 1e-4
    assert sum(p.numel() for p in slim.parameters()) == _expected_parameters(prunable.model, model_type, ablation,
                                                                             masks)
    info = slim.config.hf_heuristic_core_slim
    assert info["stock"] is False   # layers differ in width
    assert [layer["neurons"] for layer in info["layers"]] == [
        [j for j in range(INTERMEDIATE) if masks[layer, j]] for layer in range(4)]
    assert [layer["intermediate"] for layer in info["layers"]] == [24, 1 if model_type == "gpt2" else 0, 48, 5]
    save_slim(slim, tmp_path / "slim")
    widths = [24, 1 if model_type == "gpt2" else 0, 48, 5]
    assert f"| MLP neurons kept per layer | {widths} |" in (tmp_path / "slim" / "README.md").read_text()
    reloaded = load_slim(tmp_path / "slim")
    assert _max_diff(hooked, _logits(reloaded, batch), batch["attention_mask"]) <= 1e-4
    assert sum(p.numel() for p in reloaded.parameters()) == sum(p.numel() for p in slim.parameters())


def test_mean_fold_by_hand_on_one_bert_layer():
    """b_down' = b_down + W_down[:, pruned] @ mean[pruned], checked on the weights themselves."""
    masks = _neuron_masks(uniform=False)
    prunable, _ = _wrapped("bert", "mean", masks)
    slim = prunable.export_slim()
    original = prunable.model.bert.encoder.layer[3].output.dense
    mean = prunable.get_means()["neurons"][3]
    pruned = masks[3] == 0
    expected = original.bias + original.weight[:, pruned] @ mean[pruned]
    dense = slim.bert.encoder.layer[3].output.dense
    assert torch.allclose(dense.bias, expected, atol=1e-6)
    assert torch.equal(dense.weight, original.weight[:, ~pruned])
    assert torch.equal(slim.bert.encoder.layer[3].intermediate.dense.weight,
                       prunable.model.bert.encoder.layer[3].intermediate.dense.weight[~pruned])


@pytest.mark.parametrize("model_type", ["bert", "llama"])
def test_sdpa_neuron_slim_is_exact(model_type):
    prunable, batch = _wrapped(model_type, "mean", _neuron_masks(uniform=False), attn="sdpa")
    assert _max_diff(_logits(prunable, batch), _logits(prunable.export_slim(), batch),
                     batch["attention_mask"]) <= 1e-4


@pytest.mark.parametrize("model_type, ablation", [("bert", "mean"), ("gpt2", "mean"), ("llama", "mean"),
                                                  ("llama", "zero")])
def test_uniform_neuron_counts_load_with_plain_automodel(model_type, ablation, tmp_path):
    """Every layer keeps 20 neurons and all heads: the stock config's intermediate size states it (Llama's folded
    means need `mlp_bias`, which also brings zero gate/up biases), so plain transformers loads the folder."""
    masks = _neuron_masks(uniform=True)
    prunable, batch = _wrapped(model_type, ablation, masks)
    hooked = _logits(prunable, batch)
    slim = prunable.export_slim()
    assert slim.config.hf_heuristic_core_slim["stock"] is True
    intermediate = {"gpt2": "n_inner"}.get(model_type, "intermediate_size")
    assert getattr(slim.config, intermediate) == 20
    save_slim(slim, tmp_path / "slim")
    auto = transformers.AutoModelForCausalLM if model_type in CAUSAL else \
        transformers.AutoModelForSequenceClassification
    plain = auto.from_pretrained(tmp_path / "slim").eval()
    assert _max_diff(hooked, _logits(plain, batch), batch["attention_mask"]) <= 1e-4
    hidden = prunable.model.config.hidden_size
    full = sum(p.numel() for p in prunable.model.parameters())
    if model_type == "llama":
        # gate, up (rows) and down (columns) lose 28 neurons x 32 per layer; mlp_bias adds 20 + 20 + 32 per layer
        expected = full - 4 * 3 * 28 * hidden + (4 * (20 + 20 + hidden) if ablation == "mean" else 0)
    else:
        expected = full - 4 * 28 * (2 * hidden + 1)   # input rows with their bias, output columns
    assert sum(p.numel() for p in plain.parameters()) == expected


def test_export_command_on_a_neuron_artifact(tmp_path, capsys):
    model = tiny_model("bert", num_layers=4)
    model.save_pretrained(tmp_path / "model")
    masks = _neuron_masks(uniform=False)
    prunable = PrunableModel(model, PruningConfig(granularity="neuron", ablation="mean"))
    batch = make_batch("bert", batch_size=4, seq_len=9)
    prunable.compute_means([batch], show_progress=False)
    prunable.set_masks(neurons=masks)
    prunable.save_pretrained(tmp_path / "masks")
    prunable.eval()
    hooked = _logits(prunable, batch)
    assert main(["export", "--model", str(tmp_path / "model"), "--masks", str(tmp_path / "masks"),
                 "--output-dir", str(tmp_path / "slim")]) == 0
    slim = load_slim(tmp_path / "slim")
    assert float((_logits(slim, batch) - hooked).abs().max()) <= 1e-4
    before = sum(p.numel() for p in model.parameters())
    after = before - (48 - 24 + 48 + 48 - 5) * (2 * 32 + 1)
    assert sum(p.numel() for p in slim.parameters()) == after
    assert f"parameters: {before:,} -> {after:,}" in capsys.readouterr().out


def test_non_binary_neuron_masks_are_refused():
    from hf_heuristic_core import ExportError
    prunable, _ = _wrapped("bert", "zero", torch.full((4, INTERMEDIATE), 0.5))
    with pytest.raises(ExportError, match="neurons mask is not binary"):
        prunable.export_slim()


def test_mean_ablation_without_neuron_means():
    from hf_heuristic_core import MissingMeansError
    prunable = PrunableModel(tiny_model("bert", num_layers=4), PruningConfig(granularity="neuron"))
    prunable.set_masks(neurons=_neuron_masks(uniform=False))
    with pytest.raises(MissingMeansError, match=r"no means for \['neurons'\]"):
        prunable.eval().export_slim()
