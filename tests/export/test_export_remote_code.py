"""Uneven slim folders carry their own modeling code (`auto_map`, `export/remote_code.py`): stock transformers builds
them with `trust_remote_code=True`, in a process that cannot import this package, with `load_slim`'s logits and
`generate()` tokens, for every model type with a slim map. Importing the package patches nothing outside it.
Canaries turn red when transformers can build a per-layer folder by itself."""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import transformers
from auto_classes import tiny_config as auto_tiny_config
from tiny_models import make_batch, one_torch_thread, shared_model_builds, tiny_model  # noqa: F401
from transformers import AutoModelForCausalLM, LlamaConfig, LlamaForCausalLM

import hf_heuristic_core
from hf_heuristic_core import (
    PrunableModel,
    PruningConfig,
    load_slim,
    save_slim,
    slim_model_types,
)
from hf_heuristic_core.export.per_layer import SCHEMA_KEY
from hf_heuristic_core.export.remote_code import MODELING_FILE, head_classes

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

LAYERS = 4
ENCODERS_TASK, DECODERS_TASK = "seq_cls", "causal_lm"
# (model type, ablation, granularity): every slim type with zero ablation, and the folded-mean and neuron layouts
CASES = [(t, "zero", "unit") for t in slim_model_types()] + [
    ("llama", "mean", "unit"), ("qwen3", "mean", "unit"), ("phi3", "mean", "unit"), ("gpt2", "mean", "unit"),
    ("bert", "mean", "unit"), ("llama", "mean", "neuron"), ("qwen2", "zero", "neuron")]
STOCK_ENV = {"HF_HUB_OFFLINE": "1", "PATH": "/usr/bin:/bin", "OMP_NUM_THREADS": "1", "PYTHONPATH": ""}


def _is_decoder(model_type: str) -> bool:
    return "AutoModelForCausalLM" in head_classes(model_type) and model_type not in (
        "bert", "roberta", "xlm-roberta", "electra", "camembert")


def _model(model_type: str) -> torch.nn.Module:
    task = DECODERS_TASK if _is_decoder(model_type) else ENCODERS_TASK
    try:
        return tiny_model(model_type, task=task, num_layers=LAYERS, seed=3)
    except KeyError:   # no hand-written tiny config: the auto-class matrix's, at this file's depth
        config = copy.deepcopy(auto_tiny_config(model_type))
        config.num_hidden_layers, config.num_labels = LAYERS, 3
        torch.manual_seed(3)
        return getattr(transformers, head_classes(model_type)["AutoModelForSequenceClassification"])(config).eval()


def _batch(model_type: str, **kwargs) -> dict[str, torch.Tensor]:
    # camembert has no hand-written tiny config; its auto-class config has RoBERTa's vocabulary size and pad id
    return make_batch("roberta" if model_type == "camembert" else model_type, **kwargs)


def _uneven_masks(prunable: PrunableModel, granularity: str) -> dict[str, torch.Tensor]:
    """Layer 0 drops head 0 (part of a key/value group), layer 1 keeps no head and no MLP, layer 2 all, layer 3 one
    head; neurons: each layer keeps a different number."""
    if granularity == "neuron":
        neurons = torch.ones_like(prunable.get_masks()["neurons"])
        for layer in range(LAYERS):
            neurons[layer, : 3 * layer + 1] = 0
        return {"neurons": neurons}
    heads = torch.ones(LAYERS, prunable.num_heads)
    heads[0, 0] = 0
    heads[1] = 0
    heads[3, 1:] = 0
    return {"heads": heads, "mlps": torch.tensor([1.0, 0.0, 1.0, 1.0])}


def _auto_class(folder) -> type:
    name = json.loads((folder / "config.json").read_text())["architectures"][0]
    auto = next(auto for auto, cls in head_classes(json.loads((folder / "config.json").read_text())["model_type"])
                .items() if cls == name and auto != "AutoModelForPreTraining")
    return getattr(transformers, auto)


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    cases = {}
    for model_type, ablation, granularity in CASES:
        model = _model(model_type)
        prunable = PrunableModel(model, PruningConfig(ablation=ablation, granularity=granularity))
        padding = "left" if _is_decoder(model_type) else "right"
        batch = _batch(model_type, batch_size=3, seq_len=8, padding=padding, seed=5)
        if ablation == "mean":
            prunable.compute_means([_batch(model_type, batch_size=4, seq_len=9, seed=11)], show_progress=False)
        prunable.set_masks(**_uneven_masks(prunable, granularity))
        with torch.no_grad():
            hooked = prunable(**batch).logits
        slim = prunable.export_slim()
        # a distinct folder name per case: transformers caches remote code under the folder's name
        folder = tmp_path_factory.mktemp("slim") / f"slim-{model_type}-{ablation}-{granularity}"
        save_slim(slim, folder)
        reference = load_slim(folder)
        with torch.no_grad():
            expected = reference(**batch).logits
        cases[(model_type, ablation, granularity)] = {"folder": folder, "batch": batch, "hooked": hooked,
                                                      "slim": slim, "reference": reference, "expected": expected}
    return cases


def _real(diff: torch.Tensor, mask: torch.Tensor) -> float:
    return float((diff.abs()[mask.bool()] if diff.dim() == 3 else diff.abs()).max())


def _module_state(model: torch.nn.Module) -> dict[str, tuple]:
    """Each module's class name, parameter shapes and integer / boolean attributes (what its forward reads)."""
    state = {}
    for name, module in model.named_modules():
        plain = {k: v for k, v in vars(module).items() if isinstance(v, (int, bool)) and not k.startswith("_")}
        params = {k: tuple(p.shape) for k, p in module.named_parameters(recurse=False)}
        config = getattr(module, "config", None)
        heads = getattr(config, "num_attention_heads", None) if module is not model else None
        state[name] = (type(module).__name__.removeprefix("Slim") if module is model else type(module).__name__,
                       params, plain, heads)
    return state


@pytest.mark.parametrize("case", CASES, ids=["-".join(c) for c in CASES])
def test_remote_code_builds_the_same_model_as_load_slim(exported, case):
    data = exported[case]
    info = data["slim"].config.hf_heuristic_core_slim
    assert info["stock"] is False and info["modules"]   # an uneven layout: no stock config states it
    folder, batch = data["folder"], data["batch"]
    assert (folder / MODELING_FILE).is_file()
    auto = _auto_class(folder).from_pretrained(folder, trust_remote_code=True).eval()
    reference = data["reference"]
    assert type(auto).__name__ == f"Slim{type(reference).__name__}"
    assert isinstance(auto, type(reference))
    assert _module_state(auto) == _module_state(reference)
    with torch.no_grad():
        ours = auto(**batch).logits
        base = transformers.AutoModel.from_pretrained(folder, trust_remote_code=True).eval()(**batch)
        reference_base = reference.base_model(**batch)
    assert float((ours - data["expected"]).abs().max()) <= 1e-6
    assert float((base.last_hidden_state - reference_base.last_hidden_state).abs().max()) <= 1e-6
    assert _real(ours - data["hooked"], batch["attention_mask"]) <= 1e-5   # and the hooked subnetwork's


def test_a_model_its_own_code_built_saves_and_reloads_both_ways(exported, tmp_path):
    """save_pretrained of a model built by the folder's code names `Slim<class>`; load_slim reads that folder, and
    save_slim of that model writes a folder that loads both ways again."""
    data = exported[("gpt2", "mean", "unit")]
    auto = AutoModelForCausalLM.from_pretrained(data["folder"], trust_remote_code=True).eval()
    auto.save_pretrained(tmp_path / "resaved")
    save_slim(auto, tmp_path / "slim_again")
    for folder in (tmp_path / "resaved", tmp_path / "slim_again"):
        assert json.loads((folder / "config.json").read_text())["architectures"] == ["SlimGPT2LMHeadModel"]
        for model in (load_slim(folder),
                      AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True).eval()):
            with torch.no_grad():
                assert float((model(**data["batch"]).logits - data["expected"]).abs().max()) <= 1e-6


def test_a_layer_width_that_is_no_multiple_of_the_head_count(tmp_path):
    """Heads of width 9 (hidden 36, 4 heads): a layer keeping 3 heads has 27 output-projection inputs, which no
    width check dividing by the head count accepts (with the 4 x 8 tiny configs every kept count divides; the real
    MiniLM's 4 of 12 heads of width 32 found the module record resolving the slim model's pruned widths)."""
    prunable = PrunableModel(tiny_model("bert", num_layers=2, hidden_size=36, seed=3), PruningConfig(ablation="zero"))
    prunable.set_masks(heads=torch.tensor([[1.0, 1.0, 1.0, 0.0], [0.0, 1.0, 0.0, 0.0]]))
    batch = _batch("bert", batch_size=2, seq_len=6)
    with torch.no_grad():
        hooked = prunable.eval()(**batch).logits
    save_slim(prunable.export_slim(), tmp_path / "slim-width9")
    auto = transformers.AutoModelForSequenceClassification.from_pretrained(tmp_path / "slim-width9",
                                                                          trust_remote_code=True).eval()
    assert auto.bert.encoder.layer[0].attention.output.dense.in_features == 27
    with torch.no_grad():
        assert float((auto(**batch).logits - hooked).abs().max()) <= 1e-5


def test_a_uniform_folder_stays_code_free(tmp_path):
    prunable = PrunableModel(tiny_model("llama", task="causal_lm", num_layers=2), PruningConfig(ablation="zero"))
    heads = torch.ones(2, prunable.num_heads)
    heads[:, 2:] = 0   # one whole key/value group in every layer: a stock config states it
    prunable.set_masks(heads=heads)
    slim = prunable.export_slim()
    save_slim(slim, tmp_path / "slim")
    raw = json.loads((tmp_path / "slim" / "config.json").read_text())
    assert raw["hf_heuristic_core_slim"]["stock"] is True
    assert "auto_map" not in raw and "modules" not in raw["hf_heuristic_core_slim"]
    assert not (tmp_path / "slim" / MODELING_FILE).exists()


def test_a_folder_without_its_module_record_is_refused(exported, tmp_path):
    folder = tmp_path / "edited"
    shutil.copytree(exported[("llama", "zero", "unit")]["folder"], folder)
    raw = json.loads((folder / "config.json").read_text())
    del raw["hf_heuristic_core_slim"]["modules"]
    (folder / "config.json").write_text(json.dumps(raw))
    with pytest.raises(ValueError, match="no 'hf_heuristic_core_slim.modules' record.*load_slim"):
        AutoModelForCausalLM.from_pretrained(folder, trust_remote_code=True)
    assert load_slim(folder) is not None   # the layout itself is intact: load_slim rebuilds from it


def test_a_folder_saved_before_folders_carried_code_is_upgraded_by_saving_it_again(exported, tmp_path):
    """A folder of an earlier version (no module record, no code, no auto_map): load_slim, then save_slim writes the
    record and the code, and the new folder loads through transformers alone."""
    data = exported[("qwen2", "zero", "neuron")]
    old = tmp_path / "old"
    shutil.copytree(data["folder"], old)
    raw = json.loads((old / "config.json").read_text())
    del raw["hf_heuristic_core_slim"]["modules"], raw["hf_heuristic_core_slim"]["attributes"], raw["auto_map"]
    (old / "config.json").write_text(json.dumps(raw))
    (old / MODELING_FILE).unlink()
    save_slim(load_slim(old), tmp_path / "upgraded")
    new = json.loads((tmp_path / "upgraded" / "config.json").read_text())
    original = json.loads((data["folder"] / "config.json").read_text())
    for key in ("modules", "attributes"):
        assert new["hf_heuristic_core_slim"][key] == original["hf_heuristic_core_slim"][key]
    auto = AutoModelForCausalLM.from_pretrained(tmp_path / "upgraded", trust_remote_code=True).eval()
    with torch.no_grad():
        assert float((auto(**data["batch"]).logits - data["expected"]).abs().max()) <= 1e-6


def test_the_model_card_says_how_it_loads(exported):
    card = (exported[("qwen2", "zero", "unit")]["folder"] / "README.md").read_text()
    assert "trust_remote_code=True" in card and MODELING_FILE in card and "not needed" in card


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


# One fresh interpreter in which `import hf_heuristic_core` fails: each folder through stock transformers' auto
# classes, with and without trust_remote_code, generation, and a save_pretrained of the loaded model reloaded.
STOCK_LOAD = textwrap.dedent("""
    import json, sys
    sys.modules["hf_heuristic_core"] = None   # any import of the package raises ImportError
    import torch, transformers
    results = {}
    for name, folder, auto, batch_file, generate, resave in json.loads(sys.argv[1]):
        cls = getattr(transformers, auto)
        result = {}
        try:
            cls.from_pretrained(folder).eval()
        except Exception as err:
            result["stock_error"] = type(err).__name__ + ": " + str(err)[-300:]
        else:
            result["stock_error"] = None
        batch = torch.load(batch_file)
        try:
            model = cls.from_pretrained(folder, trust_remote_code=True).eval()
        except Exception as err:
            result["remote_error"] = type(err).__name__ + ": " + str(err)[-300:]
        else:
            result["remote_error"] = None
            result["class"] = type(model).__name__
            with torch.no_grad():
                torch.save(model(**batch).logits, batch_file + ".logits")
            if generate:
                prompt = batch["input_ids"][2:, 2:]   # the unpadded row
                tokens = model.generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
                result["generated"] = tokens.tolist()
            if resave:
                model.save_pretrained(resave)
                again = cls.from_pretrained(resave, trust_remote_code=True).eval()
                with torch.no_grad():
                    result["resaved_diff"] = float((again(**batch).logits - model(**batch).logits).abs().max())
        results[name] = result
    results["package_imported"] = "hf_heuristic_core" in sys.modules and sys.modules["hf_heuristic_core"] is not None
    print(json.dumps(results))
""")
IN_FRESH_PROCESS = [("llama", "mean", "unit"), ("qwen2", "zero", "neuron"), ("gpt2", "zero", "unit"),
                    ("bert", "mean", "unit")]


@pytest.fixture(scope="module")
def fresh_loads(exported, tmp_path_factory) -> dict[str, dict]:
    """What one process that cannot import the package makes of the folders in `IN_FRESH_PROCESS`, and of a copy
    of a folder with our per-layer schema written as transformers' own `per_layer_config` ("per_layer")."""
    root = tmp_path_factory.mktemp("fresh")
    per_layer = root / "per_layer"
    shutil.copytree(exported[("llama", "zero", "unit")]["folder"], per_layer)
    raw = json.loads((per_layer / "config.json").read_text())
    raw["per_layer_config"] = raw.pop(SCHEMA_KEY)
    for key in ("hf_heuristic_core_slim", "auto_map"):
        del raw[key]
    (per_layer / "config.json").write_text(json.dumps(raw))
    (per_layer / MODELING_FILE).unlink()
    loads = []
    for case in IN_FRESH_PROCESS:
        data, name = exported[case], "-".join(case)
        torch.save(data["batch"], root / f"{name}.pt")
        loads.append((name, str(data["folder"]), _auto_class(data["folder"]).__name__, str(root / f"{name}.pt"),
                      _is_decoder(case[0]), str(root / f"{name}-resaved") if case[0] == "llama" else None))
    torch.save(exported[("llama", "zero", "unit")]["batch"], root / "per_layer.pt")
    loads.append(("per_layer", str(per_layer), "AutoModelForCausalLM", str(root / "per_layer.pt"), False, None))
    env = {**STOCK_ENV, "HF_MODULES_CACHE": str(root / "modules")}
    result = subprocess.run([sys.executable, "-c", STOCK_LOAD, json.dumps(loads)], check=False, capture_output=True,
                            text=True, timeout=600, env=env, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    loaded = json.loads(result.stdout.strip().splitlines()[-1])
    assert loaded.pop("package_imported") is False
    for name, *_ in loads:
        if (root / f"{name}.pt.logits").exists():
            loaded[name]["logits"] = torch.load(root / f"{name}.pt.logits")
    return loaded


@pytest.mark.parametrize("case", IN_FRESH_PROCESS, ids=["-".join(c) for c in IN_FRESH_PROCESS])
def test_a_process_that_cannot_import_the_package_loads_the_folder(exported, fresh_loads, case):
    data, loaded = exported[case], fresh_loads["-".join(case)]
    assert loaded["remote_error"] is None, loaded
    assert loaded["class"] == f"Slim{type(data['reference']).__name__}"
    assert float((loaded["logits"] - data["expected"]).abs().max()) <= 1e-6
    # never silent wrong logits without the folder's code: stock transformers refuses the weight shapes
    assert loaded["stock_error"] is not None and "ignore_mismatched_sizes" in loaded["stock_error"], loaded
    if _is_decoder(case[0]):
        prompt = data["batch"]["input_ids"][2:, 2:]
        expected = data["reference"].generate(prompt, max_new_tokens=6, do_sample=False, pad_token_id=0)
        assert loaded["generated"] == expected.tolist()
    if case[0] == "llama":   # save_pretrained of the loaded model carries the code on (transformers copies it)
        assert loaded["resaved_diff"] == 0.0


def test_canary_stock_transformers_cannot_build_the_per_layer_config(fresh_loads, exported):
    """RED means transformers now builds uneven layers from `per_layer_config` by itself: then save_slim should write
    its schema (`SCHEMA_KEY`) as `per_layer_config`, and the Llama family's folders need no code of their own."""
    loaded = fresh_loads["per_layer"]
    expected = exported[("llama", "zero", "unit")]["expected"]
    same = loaded["remote_error"] is None and loaded["stock_error"] is None and \
        float((loaded["logits"] - expected).abs().max()) <= 1e-5
    assert not same, ("transformers now loads an uneven per_layer_config folder with the right logits: write "
                      "per_layer_config in save_slim (export/per_layer.py) and drop the Llama family's remote code")


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


IMPORT_CHANGES = textwrap.dedent("""
    import json, sys
    import transformers
    from transformers import AutoModelForCausalLM
    import transformers.models.llama.modeling_llama, transformers.models.bert.modeling_bert
    from transformers.monkey_patching import get_patch_mapping

    def snapshot():
        modules = {name: {key: id(value) for key, value in vars(module).items()}
                   for name, module in list(sys.modules.items())
                   if module is not None and (name == "transformers" or name.startswith("transformers.")
                                              or name == "torch" or name.startswith("torch."))}
        return {"meta_path": [repr(f) for f in sys.meta_path], "path_hooks": [repr(h) for h in sys.path_hooks],
                "patches": sorted(map(str, get_patch_mapping())), "modules": modules}

    before = snapshot()
    import hf_heuristic_core
    for name in ("PrunableModel", "PruningTrainer", "load_slim", "export_slim", "prune_many", "effective_size"):
        getattr(hf_heuristic_core, name)
    import hf_heuristic_core.cli, hf_heuristic_core.export
    after = snapshot()
    changed = sorted(f"{name}.{key}" for name, attrs in before["modules"].items()
                     for key, ident in attrs.items() if after["modules"].get(name, {}).get(key) != ident)
    print(json.dumps({key: [before[key], after[key]] for key in ("meta_path", "path_hooks", "patches")}
                     | {"changed": changed}))
""")


def test_importing_the_package_changes_nothing_outside_it():
    """No import hook, no registered transformers patch, and no attribute of an already imported transformers or
    torch module replaced, by the import and by the first use of the package's main names."""
    env = {**STOCK_ENV, "PYTHONPATH": str(Path(hf_heuristic_core.__file__).parents[1])}
    result = subprocess.run([sys.executable, "-c", IMPORT_CHANGES], check=False, capture_output=True, text=True,
                            timeout=600, env=env)
    assert result.returncode == 0, result.stderr[-3000:]
    seen = json.loads(result.stdout.strip().splitlines()[-1])
    for key in ("meta_path", "path_hooks", "patches"):
        before, after = seen[key]
        assert before == after, key
    assert seen["changed"] == []
