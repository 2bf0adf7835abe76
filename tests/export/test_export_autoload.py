"""Uneven (free-layout) slim folders of the Llama family through plain `AutoModel*.from_pretrained` once
`hf_heuristic_core` is imported (`export.autoload`, transformers' patch mapping): logits equal `load_slim`'s, a
process without the package fails loudly, and canaries turn red when transformers can build such a folder itself."""

from __future__ import annotations

import importlib
import io
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
from tiny_models import make_batch, one_torch_thread, shared_model_builds, tiny_model  # noqa: F401
from transformers import AutoModel, AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import hf_heuristic_core
from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, save_slim
from hf_heuristic_core.export.autoload import (
    AUTOLOAD_MODEL_TYPES,
    SCHEMA_KEY,
    autoload_registered,
    register_autoload,
    unregister_autoload,
)

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

LAYERS = 4
# (model type, ablation, granularity)
CASES = [(t, "zero", "unit") for t in AUTOLOAD_MODEL_TYPES] + [("llama", "mean", "unit"), ("qwen3", "mean", "unit"),
                                                               ("llama", "mean", "neuron"), ("qwen2", "zero", "neuron")]
STOCK_ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}


def _uneven_masks(prunable: PrunableModel, granularity: str) -> dict[str, torch.Tensor]:
    """Layer 0 keeps 3 of 4 heads (a partly kept key/value group), layer 1 none, layer 2 all, layer 3 one; the MLP
    of layer 1 is removed (or, for neurons, each layer keeps a different number)."""
    heads = torch.ones(LAYERS, prunable.num_heads)
    heads[0, 0] = 0
    heads[1] = 0
    heads[3, 1:] = 0
    if granularity == "neuron":
        neurons = torch.ones_like(prunable.get_masks()["neurons"])
        for layer in range(LAYERS):
            neurons[layer, : 3 * layer + 1] = 0
        return {"neurons": neurons}
    return {"heads": heads, "mlps": torch.tensor([1.0, 0.0, 1.0, 1.0])}


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cases = {}
    for model_type, ablation, granularity in CASES:
        model = tiny_model(model_type, task="causal_lm", num_layers=LAYERS, seed=3)
        prunable = PrunableModel(model, PruningConfig(ablation=ablation, granularity=granularity))
        batch = make_batch(model_type, batch_size=3, seq_len=8, padding="left", seed=5)
        if ablation == "mean":
            prunable.compute_means([make_batch(model_type, batch_size=4, seq_len=9, seed=11)], show_progress=False)
        prunable.set_masks(**_uneven_masks(prunable, granularity))
        with torch.no_grad():
            hooked = prunable(**batch).logits
        slim = prunable.export_slim()
        folder = tmp_path_factory.mktemp(f"{model_type}-{ablation}-{granularity}") / "slim"
        save_slim(slim, folder)
        cases[(model_type, ablation, granularity)] = {"folder": folder, "batch": batch, "hooked": hooked,
                                                      "slim": slim}
    return cases


def _real(diff: torch.Tensor, mask: torch.Tensor) -> float:
    return float(diff.abs()[mask.bool()].max())


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_automodel_after_import_equals_load_slim(exported, case):
    data = exported[case]
    info = data["slim"].config.hf_heuristic_core_slim
    assert info["stock"] is False   # an uneven layout: no stock config states it
    auto = AutoModelForCausalLM.from_pretrained(data["folder"]).eval()
    reference = load_slim(data["folder"])
    assert type(auto) is type(reference)
    assert {n: tuple(p.shape) for n, p in auto.named_parameters()} == \
        {n: tuple(p.shape) for n, p in reference.named_parameters()}
    batch = data["batch"]
    with torch.no_grad():
        ours, theirs = auto(**batch).logits, reference(**batch).logits
        base = AutoModel.from_pretrained(data["folder"]).eval()(**batch).last_hidden_state
        reference_base = reference.model(**batch).last_hidden_state
    assert float((ours - theirs).abs().max()) <= 1e-6
    assert float((base - reference_base).abs().max()) <= 1e-6
    assert _real(ours - data["hooked"], batch["attention_mask"]) <= 1e-5   # and the hooked subnetwork's


def test_automodel_after_import_generates_like_load_slim(exported):
    data = exported[("llama", "zero", "unit")]
    auto = AutoModelForCausalLM.from_pretrained(data["folder"]).eval()
    reference = load_slim(data["folder"])
    prompt = data["batch"]["input_ids"][2:, 2:]   # the unpadded row
    settings = {"max_new_tokens": 6, "do_sample": False, "pad_token_id": 0}
    assert torch.equal(auto.generate(prompt, **settings), reference.generate(prompt, **settings))


def test_the_per_layer_schema_records_each_layers_widths(exported):
    data = exported[("llama", "zero", "unit")]
    raw = json.loads((data["folder"] / "config.json").read_text())
    assert "per_layer_config" not in raw   # transformers 5.24 cannot build it (see the canaries below)
    heads, kv, width = raw["num_attention_heads"], raw["num_key_value_heads"], raw["intermediate_size"]
    assert (heads, kv) == (4, 2)
    # layer 0 keeps heads 1, 2, 3: group 0 is padded with a zero head, so 4 query slots and 2 kv heads as before
    # (not listed); layer 1: no head (zero-width attention, no placeholder: the cache reads its length from layer 0)
    # and no MLP; layer 2 unchanged; layer 3: head 0
    assert len(raw["hf_heuristic_core_slim"]["layers"][0]["query_slots"]) == 4
    assert raw[SCHEMA_KEY] == {"1": {"num_attention_heads": 0, "num_key_value_heads": 0, "intermediate_size": 0},
                               "3": {"num_attention_heads": 1, "num_key_value_heads": 1}}
    assert width == 48
    neurons = json.loads((exported[("llama", "mean", "neuron")]["folder"] / "config.json").read_text())
    assert {k: v["intermediate_size"] for k, v in neurons[SCHEMA_KEY].items()} == \
        {str(layer): width - (3 * layer + 1) for layer in range(LAYERS)}


def test_the_model_card_says_how_it_loads(exported):
    card = (exported[("qwen2", "zero", "unit")]["folder"] / "README.md").read_text()
    assert "after `import hf_heuristic_core`" in card and "AutoModel.from_pretrained" in card


def test_other_models_are_untouched_by_the_patch(exported, tmp_path):
    """A plain model loads as before, and models built directly keep their hidden states although transformers
    retargets the output recorders to the registered stand-in."""
    assert autoload_registered("llama")
    model = tiny_model("llama", task="causal_lm", num_layers=2, seed=1)
    model.save_pretrained(tmp_path / "plain")
    loaded = AutoModelForCausalLM.from_pretrained(tmp_path / "plain", attn_implementation="eager").eval()
    AutoModelForCausalLM.from_pretrained(exported[("llama", "zero", "unit")]["folder"])   # retargets the recorders
    batch = make_batch("llama", batch_size=2, seq_len=5)
    with torch.no_grad():
        assert torch.equal(loaded(**batch).logits, model.eval()(**batch).logits)
        fresh = LlamaForCausalLM(model.config).eval()(**batch, output_hidden_states=True)
    assert type(loaded.model.layers[0]).__name__ == "LlamaDecoderLayer"
    assert type(loaded.model.layers[0]).__module__ == "transformers.models.llama.modeling_llama"
    assert len(fresh.hidden_states) == 3


def test_an_edited_layout_is_refused(exported, tmp_path):
    folder = tmp_path / "edited"
    shutil.copytree(exported[("llama", "zero", "unit")]["folder"], folder)
    raw = json.loads((folder / "config.json").read_text())
    raw[SCHEMA_KEY]["3"]["num_attention_heads"] = 2
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="disagrees with its slim layout; the folder was edited"):
        AutoModelForCausalLM.from_pretrained(folder)
    raw[SCHEMA_KEY]["3"]["num_attention_heads"] = 1
    raw["hf_heuristic_core_slim"]["model_type"] = "qwen2"
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="layout in this config is for a 'qwen2' model"):
        AutoModelForCausalLM.from_pretrained(folder)
    # transformers restores the patched classes only after a successful init; the refusal puts them back itself, or
    # every later Llama model of the process fails to pickle ("not the same object as ...LlamaDecoderLayer").
    for module_name, class_name in AUTOLOAD_MODEL_TYPES.values():
        assert getattr(importlib.import_module(module_name), class_name).__module__ == module_name
    torch.save(tiny_model("llama", task="causal_lm", num_layers=2), io.BytesIO())


def test_without_the_patch_automodel_refuses_and_load_slim_still_works(exported):
    folder = exported[("mistral", "zero", "unit")]["folder"]
    try:
        unregister_autoload()
        assert not autoload_registered("mistral")
        for module_name, class_name in AUTOLOAD_MODEL_TYPES.values():   # even after a load that raised, patched
            assert getattr(importlib.import_module(module_name), class_name).__module__ == module_name
        with pytest.raises(RuntimeError, match="ignore_mismatched_sizes"):
            AutoModelForCausalLM.from_pretrained(folder)
        assert load_slim(folder) is not None
    finally:
        hf_heuristic_core._autoload_hook.install()
        for model_type in AUTOLOAD_MODEL_TYPES:
            register_autoload(model_type)
    assert autoload_registered("mistral")


STOCK_LOAD = textwrap.dedent("""
    import json, sys, torch
    from transformers import AutoModelForCausalLM
    results = {}
    for name, folder, batch_file, reference_file in json.loads(sys.argv[1]):
        try:
            model = AutoModelForCausalLM.from_pretrained(folder).eval()
        except Exception as err:
            result = {"error": type(err).__name__ + ": " + str(err)[-300:]}
        else:
            with torch.no_grad():
                logits = model(**torch.load(batch_file)).logits
            reference = torch.load(reference_file)
            same = logits.shape == reference.shape and float((logits - reference).abs().max()) <= 1e-5
            result = {"error": None, "same_logits": bool(same)}
        results[name] = result
    results["package_imported"] = "hf_heuristic_core" in sys.modules
    print(json.dumps(results))
""")


@pytest.fixture(scope="module")
def stock_loads(exported, tmp_path_factory) -> dict[str, dict]:
    """What one process without the package (stock transformers) makes of two folders: the slim folder itself
    ("slim"), and the same folder with our per-layer schema written as transformers' own `per_layer_config`
    ("per_layer"); one launch for both (starting the interpreter is most of the time)."""
    root = tmp_path_factory.mktemp("stock")
    folder = root / "per_layer"
    shutil.copytree(exported[("llama", "zero", "unit")]["folder"], folder)
    raw = json.loads((folder / "config.json").read_text())
    raw["per_layer_config"] = raw.pop(SCHEMA_KEY)
    del raw["hf_heuristic_core_slim"]
    (folder / "config.json").write_text(json.dumps(raw))
    loads = []
    for name, data, target in (("slim", exported[("llama", "mean", "unit")], None),
                               ("per_layer", exported[("llama", "zero", "unit")], folder)):
        torch.save(data["batch"], root / f"{name}-batch.pt")
        with torch.no_grad():
            torch.save(load_slim(data["folder"])(**data["batch"]).logits, root / f"{name}-reference.pt")
        loads.append((name, str(target or data["folder"]), str(root / f"{name}-batch.pt"),
                      str(root / f"{name}-reference.pt")))
    result = subprocess.run([sys.executable, "-c", STOCK_LOAD, json.dumps(loads)], check=False, capture_output=True,
                            text=True, timeout=600, env=STOCK_ENV, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["package_imported"] is False
    return loaded


def test_a_process_without_the_package_fails_loudly(stock_loads):
    """Never silent wrong logits: stock transformers refuses the folder's weight shapes."""
    loaded = stock_loads["slim"]
    assert loaded["error"] is not None and "ignore_mismatched_sizes" in loaded["error"], loaded


def test_canary_stock_transformers_cannot_build_the_per_layer_config(stock_loads):
    """RED means transformers now builds uneven layers from `per_layer_config` by itself: then save_slim should write
    its schema (`SCHEMA_KEY`) as `per_layer_config`, and the patch in export/autoload.py can go."""
    loaded = stock_loads["per_layer"]
    assert loaded["error"] is not None or not loaded["same_logits"], (
        "transformers now loads an uneven per_layer_config folder with the right logits and no patch: write "
        "per_layer_config in save_slim and remove the patch in hf_heuristic_core/export/autoload.py")


def test_canary_per_layer_widths_are_configuration_only():
    """What transformers 5.24 does with per-layer widths (why the schema is kept under our own key). RED means it
    changed: re-check whether `per_layer_config` can be written directly (see the canary above)."""
    small = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 48, "num_hidden_layers": 2,
             "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 8}
    with pytest.raises(Exception, match="num_attention_heads"):
        LlamaConfig(**small, per_layer_config={1: {"num_attention_heads": 2}})   # fails the config's validation
    for overrides in ({"intermediate_size": 24}, {"num_key_value_heads": 1}):
        config = LlamaConfig(**small, per_layer_config={1: overrides})           # validates ...
        with pytest.raises(Exception, match="per-layer attribute"):
            LlamaForCausalLM(config)                                              # ... but no model builds from it


AFTER_IMPORT = textwrap.dedent("""
    import json, sys
    folder, batch_file, reference_file, order = sys.argv[1:5]
    if order == "transformers first":
        from transformers import AutoModelForCausalLM
        import transformers.models.llama.modeling_llama
    import hf_heuristic_core
    heavy = [name for name in ("torch", "transformers.models.llama.modeling_llama") if name in sys.modules]
    import torch
    from transformers import AutoModelForCausalLM
    model = AutoModelForCausalLM.from_pretrained(folder).eval()
    with torch.no_grad():
        logits = model(**torch.load(batch_file)).logits
    print(json.dumps({"heavy_after_import": heavy,
                      "diff": float((logits - torch.load(reference_file)).abs().max())}))
""")


@pytest.mark.parametrize("order", ["package first", "transformers first"])
def test_the_import_registers_the_patch_in_a_fresh_process(exported, tmp_path, order):
    """`import hf_heuristic_core` stays light (the patch waits for transformers to import the modeling module),
    and works whichever is imported first."""
    data = exported[("llama", "mean", "unit")]
    torch.save(data["batch"], tmp_path / "batch.pt")
    with torch.no_grad():
        torch.save(load_slim(data["folder"])(**data["batch"]).logits, tmp_path / "reference.pt")
    env = {**STOCK_ENV, "PYTHONPATH": str(Path(hf_heuristic_core.__file__).parents[1])}
    result = subprocess.run([sys.executable, "-c", AFTER_IMPORT, str(data["folder"]), str(tmp_path / "batch.pt"),
                             str(tmp_path / "reference.pt"), order], check=False, capture_output=True, text=True,
                            timeout=600,
                            env=env, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded["diff"] <= 1e-6
    if order == "package first":
        assert loaded["heavy_after_import"] == []
