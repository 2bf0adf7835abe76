"""Uniform layouts (`PruningConfig.uniform_layers`): the same heads count (whole key/value groups) and MLP width in
every layer, exported as a stock config that plain transformers loads in a process that never imports this package,
with the hooked subnetwork's logits."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
import torch
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, save_slim
from hf_heuristic_core.errors import ExportError, UsageError

pytestmark = pytest.mark.usefixtures("one_torch_thread")

CAUSAL = ("gpt2", "llama", "mistral", "qwen2", "qwen3")
# (model type, ablation, granularity): mean ablation where a stock config has a bias for every folded mean
CASES = [(t, "zero", "unit") for t in ("bert", "roberta", "gpt2", "llama", "mistral", "qwen2", "qwen3")] \
    + [(t, "mean", "unit") for t in ("bert", "roberta", "gpt2", "llama", "qwen3")] \
    + [("llama", "mean", "neuron"), ("bert", "mean", "neuron"), ("qwen2", "zero", "neuron"), ("gpt2", "zero", "neuron")]


def _prunable(model_type: str, ablation: str, granularity: str = "unit", seed: int = 0, layers: int = 4):
    task = "causal_lm" if model_type in CAUSAL else "seq_cls"
    model = tiny_model(model_type, task=task, num_layers=layers, seed=seed)
    prunable = PrunableModel(model, PruningConfig(ablation=ablation, granularity=granularity, uniform_layers=True))
    if ablation == "mean":
        prunable.compute_means([make_batch(model_type, batch_size=5, seq_len=9, seed=seed + 7)], show_progress=False)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for _, logits in prunable.mask_logits.items():
            logits.copy_(torch.randn(logits.shape, generator=generator))
    return prunable


def _batch(model_type: str, seed: int = 0) -> dict:
    padding = "left" if model_type in CAUSAL else "right"
    return make_batch(model_type, batch_size=4, seq_len=9, padding=padding, seed=seed)


def _real_token_diff(reference: torch.Tensor, other: torch.Tensor, attention_mask: torch.Tensor) -> float:
    diff = (reference - other).abs()
    return float((diff[attention_mask.bool()] if diff.dim() == 3 else diff).max())


# ---------------------------------------------------------------- binarization


@pytest.mark.parametrize("sparsity", [0.2, 0.5, 0.7])
def test_uniform_heads_keep_whole_best_groups_in_every_layer(sparsity):
    """Llama tiny: 4 query heads in 2 key/value groups. Every layer keeps the same number of whole groups, and they
    are the layer's best by mean logit (checked against a per-layer brute force)."""
    prunable = _prunable("llama", "zero")
    logits = prunable.mask_logits["heads"].detach().clone()
    prunable.pruning_config.uniform_layers = False
    free_masks = prunable.get_masks(sparsity=sparsity)
    prunable.pruning_config.uniform_layers = True
    masks = prunable.get_masks(sparsity=sparsity)
    heads = masks["heads"]
    kept_groups = heads.reshape(4, 2, 2)
    assert all(float(g.sum()) in (0.0, 2.0) for layer in kept_groups for g in layer)   # whole groups only
    counts = heads.sum(dim=1)
    assert len(set(counts.tolist())) == 1 and len(set(masks["mlps"].tolist())) == 1
    group_scores = logits.reshape(4, 2, 2).mean(dim=2)
    per_layer = int(counts[0]) // 2
    for layer in range(4):
        best = set(torch.argsort(group_scores[layer], descending=True, stable=True)[:per_layer].tolist())
        assert {g for g in range(2) if kept_groups[layer, g].sum() == 2} == best
    # the budget: within one unit per layer and kind of the free masks' kept units
    free_kept = float(free_masks["heads"].sum() + free_masks["mlps"].sum())
    assert abs(float(heads.sum() + masks["mlps"].sum()) - free_kept) <= 4 * 2 + 4


def test_uniform_budget_picks_the_closest_total_and_keeps_the_kinds_split():
    """Hand-worked: 4 layers x 2 groups of 2 heads, free masks keep 6 heads (1.5 groups per layer -> 1 or 2) and
    2 MLP blocks (0.5 per layer -> 0 or 1). Totals: (1, 0) 8, (1, 1) 12, (2, 0) 16, (2, 1) 20; free total 8 ->
    (1, 0)."""
    from hf_heuristic_core.relaxations.uniform import per_layer_counts
    prunable = _prunable("llama", "zero")
    kinds = prunable.mask_state.kinds
    free = {"heads": torch.tensor([[1., 1, 1, 1], [1., 1, 0, 0], [0., 0, 0, 0], [0., 0, 0, 0]]),
            "mlps": torch.tensor([1., 1, 0, 0])}
    assert per_layer_counts(kinds, free) == {"heads": 1, "mlps": 0}
    free["mlps"] = torch.tensor([1., 1, 1, 1])   # total 10: (1, 0) 8 and (1, 1) 12 tie; smaller per-kind error wins
    assert per_layer_counts(kinds, free) == {"heads": 1, "mlps": 1}


def test_uniform_neurons_keep_the_same_best_neurons_count_per_layer():
    prunable = _prunable("llama", "zero", granularity="neuron")
    logits = prunable.mask_logits["neurons"].detach().clone()
    masks = prunable.get_masks(sparsity=0.6)["neurons"]
    counts = masks.sum(dim=1)
    assert counts.tolist() == [19.0] * 4   # 48 neurons, 40% kept: 19.2 per layer rounds to 19
    for layer in range(4):
        kept = logits[layer][masks[layer] == 1]
        assert float(kept.min()) >= float(logits[layer][masks[layer] == 0].max())


def test_forced_units_the_uniform_layout_would_drop_are_refused():
    prunable = _prunable("llama", "zero")
    prunable.force_units(heads=[(0, 0), (0, 2)], keep=True)   # both groups of layer 0 kept, but the budget is 1 group
    with pytest.raises(UsageError, match="overrides forced units"):
        prunable.get_masks(sparsity=0.6)


def test_uniform_layers_needs_unit_or_neuron_masks():
    with pytest.raises(ValueError, match="uniform_layers .* needs granularity='neuron' or 'unit'; 'weight' masks"):
        PruningConfig(granularity="weight", uniform_layers=True)


def test_prune_cli_flag_reaches_the_pruning_config():
    from hf_heuristic_core.cli.prune import parse_prune_arguments, selection_settings
    script, _ = parse_prune_arguments(["--model", "m", "--dataset", "d.jsonl", "--output_dir", "o",
                                       "--uniform_layers"])
    assert PruningConfig(**selection_settings(script)).uniform_layers is True
    script, _ = parse_prune_arguments(["--model", "m", "--dataset", "d.jsonl", "--output_dir", "o"])
    assert PruningConfig(**selection_settings(script)).uniform_layers is False


# ---------------------------------------------------------------- export and stock reload

RELOAD = textwrap.dedent("""
    import json, sys
    import torch, transformers
    results = {}
    for folder, task in json.loads(sys.argv[1]):
        cls = transformers.AutoModelForCausalLM if task == "causal_lm" else \\
            transformers.AutoModelForSequenceClassification
        model = cls.from_pretrained(folder).eval()
        batch = torch.load(folder + "/../batch.pt")
        with torch.no_grad():
            torch.save(model(**batch).logits, folder + "/../stock_logits.pt")
        config = model.config
        results[folder] = {"class": type(model).__name__, "parameters": sum(p.numel() for p in model.parameters()),
                           "heads": getattr(config, "num_attention_heads", None),
                           "kv_heads": getattr(config, "num_key_value_heads", None),
                           "intermediate": getattr(config, "intermediate_size", getattr(config, "n_inner", None))}
    results["package_imported"] = any(name.startswith("hf_heuristic_core") for name in sys.modules)
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """Every case exported once at 50% sparsity, its hooked logits kept, then one fresh interpreter (no
    hf_heuristic_core import) loads every folder with AutoModelFor*.from_pretrained."""
    root = tmp_path_factory.mktemp("uniform")
    cases = {}
    for index, (model_type, ablation, granularity) in enumerate(CASES):
        prunable = _prunable(model_type, ablation, granularity, seed=index)
        masks = prunable.get_masks(sparsity=0.5)
        prunable.set_masks(**masks)
        prunable.eval()
        batch = _batch(model_type, seed=index)
        with torch.no_grad():
            hooked = prunable(**batch).logits
            with prunable.masks_disabled():
                full = prunable(**batch).logits
        slim = prunable.export_slim()
        folder = root / f"case{index}" / "slim"
        save_slim(slim, folder)
        torch.save(batch, folder.parent / "batch.pt")
        cases[(model_type, ablation, granularity)] = {
            "folder": str(folder), "hooked": hooked, "full": full, "batch": batch, "masks": masks,
            "task": "causal_lm" if model_type in CAUSAL else "seq_cls", "slim": slim, "prunable": prunable}
    argv = json.dumps([(case["folder"], case["task"]) for case in cases.values()])
    result = subprocess.run([sys.executable, "-c", RELOAD, argv], capture_output=True, text=True, timeout=600,
                            env={"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1",
                                 "PYTHONPATH": ""})
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    return cases, loaded


def test_the_reload_process_never_imported_the_package(exported):
    assert exported[1]["package_imported"] is False


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_stock_reload_equals_the_hooked_subnetwork(exported, case):
    cases, loaded = exported
    data = cases[case]
    info = data["slim"].config.hf_heuristic_core_slim
    assert info["stock"] is True and info["uniform"] is True
    stock = torch.load(f"{data['folder']}/../stock_logits.pt")
    mask = data["batch"]["attention_mask"]
    assert _real_token_diff(data["full"], data["hooked"], mask) > 1e-3   # the masks matter
    assert _real_token_diff(data["hooked"], stock, mask) <= 1e-5
    assert loaded[data["folder"]]["class"] == type(data["slim"]).__name__
    assert loaded[data["folder"]]["parameters"] == sum(p.numel() for p in data["slim"].parameters())


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2", "qwen3"])
def test_gqa_config_states_the_kept_whole_groups(exported, model_type):
    """Under GQA the stock config names the kept query heads, the kept key/value groups and keeps head_dim."""
    cases, loaded = exported
    data = cases[(model_type, "zero", "unit")]
    heads = data["masks"]["heads"]
    kept = int(heads[0].sum())
    config = loaded[data["folder"]]
    assert (config["heads"], config["kv_heads"]) == (kept, kept // 2)
    assert data["slim"].config.head_dim == (16 if model_type == "qwen3" else 8)
    mlp_kept = bool(data["masks"]["mlps"][0])
    assert config["intermediate"] == (48 if mlp_kept else 0)


@pytest.mark.parametrize("model_type", ["bert", "roberta", "gpt2"])
def test_hidden_over_heads_configs_keep_full_width_attention_with_zeroed_heads(exported, model_type):
    """BERT / RoBERTa / GPT-2 derive the head width from hidden / heads, so a stock config cannot state fewer heads
    of the same width: the uniform export keeps all 4 head slots, the pruned ones' weights zero."""
    cases, loaded = exported
    data = cases[(model_type, "mean", "unit")]
    assert loaded[data["folder"]]["heads"] == 4
    pruned = (data["masks"]["heads"][0] == 0).nonzero().flatten().tolist()
    assert pruned
    slim = data["slim"]
    layer = slim.base_model.h[0] if model_type == "gpt2" else slim.base_model.encoder.layer[0]
    output = layer.attn.c_proj.weight.t() if model_type == "gpt2" else layer.attention.output.dense.weight
    for head in pruned:
        assert float(output[:, head * 8:(head + 1) * 8].detach().abs().max()) == 0.0


def test_neuron_export_states_one_intermediate_size(exported):
    cases, loaded = exported
    for model_type in ("llama", "bert", "qwen2", "gpt2"):
        data = next(v for k, v in cases.items() if k[0] == model_type and k[2] == "neuron")
        kept = int(data["masks"]["neurons"][0].sum())
        assert loaded[data["folder"]]["intermediate"] == kept < 48


# ---------------------------------------------------------------- refusals


def test_non_uniform_masks_with_uniform_asked_are_refused():
    prunable = _prunable("llama", "zero")
    prunable.set_masks(heads=torch.tensor([[1., 1, 0, 0], [1., 1, 1, 1], [0., 0, 1, 1], [1., 1, 0, 0]]))
    with pytest.raises(ExportError, match=r"heads kept per layer \[2, 4, 2, 2\].*uniform_layers"):
        prunable.export_slim()
    assert prunable.export_slim(uniform=False).config.hf_heuristic_core_slim["stock"] is False


def test_part_of_a_key_value_group_is_refused():
    prunable = _prunable("llama", "zero")
    prunable.set_masks(heads=torch.tensor([[1., 0, 1, 0]] * 4))
    with pytest.raises(ExportError, match=r"keep part of a key/value group"):
        prunable.export_slim()


def test_mlp_blocks_kept_in_some_layers_only_are_refused():
    prunable = _prunable("bert", "zero")
    prunable.set_masks(mlps=torch.tensor([1., 0, 1, 1]))
    with pytest.raises(ExportError, match=r"MLP blocks kept per layer \[1, 0, 1, 1\]"):
        prunable.export_slim()


@pytest.mark.parametrize("model_type", ["qwen2", "mistral"])
def test_a_mean_with_no_stock_bias_home_is_refused(model_type):
    """Qwen2 / Mistral output projections have no bias in any stock config, so folded head means cannot be stated."""
    prunable = _prunable(model_type, "mean")
    prunable.set_masks(**prunable.get_masks(sparsity=0.5))
    with pytest.raises(ExportError, match=r"o_proj\.bias.*ablation='zero'"):
        prunable.export_slim()
    assert prunable.export_slim(uniform=False).config.hf_heuristic_core_slim["stock"] is False


def test_uniform_heads_that_do_not_divide_the_hidden_size_fall_back_to_a_load_slim_folder(tmp_path):
    """Llama multi-head (4 heads of 8, hidden 32) keeping 3 heads in every layer: the same widths everywhere, but
    Llama's config validation refuses hidden_size % heads != 0, so no stock folder can state it. The export says so
    (a load_slim folder, or an ExportError when uniform is asked for) instead of failing inside save_slim."""
    from hf_heuristic_core import export_slim, load_slim
    model = tiny_model("llama", task="causal_lm", num_key_value_heads=4)
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    heads = torch.ones(prunable.mask_shapes()["heads"])
    heads[:, -1] = 0
    masks = {"heads": heads, "mlps": torch.ones(prunable.mask_shapes()["mlps"])}
    with pytest.raises(ExportError, match="cannot load this 'llama' slim model: its config cannot state"):
        export_slim(prunable, masks, uniform=True)
    slim = export_slim(prunable, masks, uniform=False)
    assert slim.config.hf_heuristic_core_slim["stock"] is False
    save_slim(slim, tmp_path / "slim")
    batch = _batch("llama")
    with torch.no_grad(), prunable.masks_applied(masks):
        hooked = prunable(**batch).logits
    with torch.no_grad():
        reloaded = load_slim(tmp_path / "slim")(**batch).logits
    assert _real_token_diff(hooked, reloaded, batch["attention_mask"]) < 1e-4
