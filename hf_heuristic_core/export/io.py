"""Saving, reloading and pushing slim models; a slim folder and a mask artifact refuse to pass for each other.

`save_slim` writes the model (`save_pretrained`: safetensors + config with the layout), the tokenizer it is given
and a model card into a temp folder beside the target and renames it into place, so a failed save never leaves a
half-written folder; the folder and its files get the modes of an ordinary `save_pretrained` (the umask's), not the
temp folder's private 0700 / 0600. It replaces
only a previous slim export: a folder holding anything else is refused unless asked (and then nothing is deleted),
and the mask artifact the model came from is never written over (before, export emptied the target folder, even
when it was the masks folder).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..architectures.registry import ARCHITECTURES
from ..config import CONFIG_NAME as MASK_CONFIG_NAME
from ..errors import ArtifactError, ExportError
from ..io_utils import ordinary_permissions, swap_folder
from .per_layer import write_per_layer_schema
from .remote_code import MODELING_FILE, layout_record, write_remote_code
from .shrink import shrink_notes
from .slim import SLIM_KEY, parameter_count, rebuild_to_layout, slim_info

__all__ = ["load_slim", "push_slim_to_hub", "save_slim", "slim_card_text"]

MODEL_CONFIG_NAME = "config.json"


def slim_card_text(model: nn.Module) -> str:
    """A model card saying what was removed, how many parameters remain and how to load the folder."""
    info = slim_info(model)
    base = info["source"].get("base_model") or "unknown"
    params = info["parameters"]
    heads = [len(layer["kept_heads"]) for layer in info["layers"]]
    mlps = sum(1 for layer in info["layers"] if layer["keep_mlp"])
    cls = type(model).__name__
    if info["stock"]:
        load = ["from transformers import AutoModel  # or the task class, e.g. " + cls,
                "", 'model = AutoModel.from_pretrained("<this repo or folder>")']
        how = ("Every layer has the same widths and the config states them, so this folder loads with plain "
               "`transformers` (`AutoModelFor*.from_pretrained`); hf_heuristic_core is not needed.")
    elif "modules" in info:
        load = ["from transformers import AutoModel  # or the task class, e.g. " + cls,
                "", 'model = AutoModel.from_pretrained("<this repo or folder>", trust_remote_code=True)',
                "# or, with hf_heuristic_core installed: hf_heuristic_core.load_slim(\"<this repo or folder>\")"]
        how = (f"Layers differ in width (or the config cannot state the head width or a needed bias), which a stock "
               f"config cannot say, so the config keeps the original shapes plus the per-layer layout, and the folder "
               f"carries its own modeling code (`{MODELING_FILE}`, torch and transformers only): "
               "`AutoModelFor*.from_pretrained(..., trust_remote_code=True)` builds each layer to its recorded shapes "
               "before the weights load; hf_heuristic_core is not needed. Without `trust_remote_code=True`, "
               "`from_pretrained` refuses the weight shapes.")
    else:
        load = ["from hf_heuristic_core import load_slim", "", 'model = load_slim("<this repo or folder>")']
        how = ("Layers differ in width (or the architecture's config cannot state the head width or a needed bias), "
               "so the config keeps the original shapes plus the per-layer layout, and the folder loads with "
               "`hf_heuristic_core.load_slim`; plain `from_pretrained` refuses its weight shapes.")
    lines = [
        "---", "library_name: transformers", "tags:", "- pruning", "- heuristic-core", "- slim",
        *([f"base_model: {base}"] if base != "unknown" and not os.path.isabs(base) else []), "---", "",
        f"# Slim subnetwork of `{base}`", "",
        ("Pruned attention heads, MLP blocks and MLP neurons physically removed with hf_heuristic_core; the "
         "ablated units' "
         f"{'mean activations are' if info['ablation'] == 'mean' else 'zero outputs are'} folded into biases, so the "
         "outputs equal those of the hooked subnetwork (to float rounding)."), "",
        "| field | value |", "|---|---|",
        f"| model class | {cls} ({info['model_type']}) |",
        f"| parameters | {params['slim']:,} of {params['original']:,} ({params['slim'] / params['original']:.1%}) |",
        f"| heads kept per layer | {heads} of {info['num_heads']} |",
        f"| MLP blocks kept | {mlps} of {len(info['layers'])} |",
        *([f"| MLP neurons kept per layer | {[layer['intermediate'] for layer in info['layers']]} |"]
          if any(layer.get("neurons") is not None for layer in info["layers"]) else []),
        f"| ablation folded | {info['ablation']} |",
        f"| masks from | {info['source'].get('masks') or 'in-memory masks'} |",
        f"| loads with | {_loads_with(info)} |",
        "", how, "", *[f"**Not removed.** {note}" for note in shrink_notes(info)],
        *([""] if shrink_notes(info) else []), "```python", *load, "```", "",
    ]
    return "\n".join(lines)


def _loads_with(info: dict[str, Any]) -> str:
    if info["stock"]:
        return "plain transformers"
    if "modules" in info:
        return "`AutoModel*.from_pretrained(..., trust_remote_code=True)` (the folder's own code), or load_slim"
    return "hf_heuristic_core.load_slim"


# Files a slim export writes (save_pretrained + card); a folder of only these (plus hidden files and the run record)
# is a previous export that a new one may replace as a whole.
SLIM_FILES = re.compile(r"^(config\.json|generation_config\.json|README\.md|model(-\d+-of-\d+)?\.safetensors|"
                        r"modeling_hf_heuristic_core_slim\.py|"
                        r"model\.safetensors\.index\.json|hf_heuristic_core_run\.json|"
                        r"tokenizer\.json|tokenizer_config\.json|special_tokens_map\.json|added_tokens\.json|"
                        r"vocab\.txt|vocab\.json|merges\.txt|tokenizer\.model|spiece\.model|"
                        r"sentencepiece\.bpe\.model|chat_template\.(jinja|json))$")
MODEL_FILES = re.compile(r"^(config\.json|.*\.safetensors|.*\.bin|.*\.index\.json|.*\.gguf)$")


def folder_state(target: Path) -> str:
    """"new" (absent, empty, or only hidden files / a run record), "slim" (a previous slim export and nothing else) or
    "other" (anything else: another model, a mask artifact, unrelated files)."""
    if not target.exists():
        return "new"
    visible = [p for p in target.iterdir() if not p.name.startswith(".")]
    if all(p.name == "hf_heuristic_core_run.json" for p in visible):
        return "new"
    if all(p.is_file() and SLIM_FILES.match(p.name) for p in visible) and _is_slim_config(target):
        return "slim"
    return "other"


def _is_slim_config(folder: Path) -> bool:
    try:
        return SLIM_KEY in json.loads((folder / MODEL_CONFIG_NAME).read_text())
    except (OSError, ValueError):
        return False


def _check_not_source(model: nn.Module, target: Path) -> None:
    """The masks a slim model came from must survive its export (an export into the masks folder replaced them)."""
    source = (slim_info(model) or {}).get("source", {}).get("masks")
    if not source or not Path(source).expanduser().exists():
        return
    masks, folder = Path(source).expanduser().resolve(), target.expanduser().resolve()
    if masks == folder or folder in masks.parents:
        raise ExportError(f"The output folder {target} {'is' if masks == folder else 'holds'} the mask artifact "
                          f"{source} this slim model came from; writing there would replace it. Choose another "
                          "output folder.")


def save_slim(model: nn.Module, save_directory: str | os.PathLike, overwrite: bool = False, tokenizer: Any = None,
              **save_kwargs: Any) -> Path:
    """Write a slim model (from `export_slim`), its card and `tokenizer` (any object with `save_pretrained`, e.g. the
    source model's tokenizer: `transformers.pipeline(task, model=folder)` needs one in the folder). A generation
    config the model carries is written by `save_pretrained`.

    Into a new or empty folder, or over a previous slim export, the folder appears complete or not at all (written
    beside it, then swapped in). A folder holding anything else is refused unless `overwrite=True`, which writes the
    slim files into it and deletes nothing; a folder holding another model's weights or config is refused even then
    (the two models' files would mix), as is the mask artifact the slim model came from."""
    if slim_info(model) is None:
        raise ExportError("This model was not made by export_slim (its config has no slim layout); save a plain "
                          "model with model.save_pretrained(dir), or masks with PrunableModel.save_pretrained(dir).")
    target = Path(save_directory)
    _check_not_source(model, target)
    state = folder_state(target)
    if state == "other":
        visible = sorted(p.name for p in target.iterdir() if not p.name.startswith("."))
        clashing = [name for name in visible if MODEL_FILES.match(name)]
        if not overwrite:
            raise ExportError(f"{target} is not empty and holds no previous slim export ({', '.join(visible[:6])}"
                              f"{' ...' if len(visible) > 6 else ''}); choose another folder, or pass overwrite=True "
                              "(--overwrite_output_dir) to write the slim model into it (nothing is deleted).")
        if clashing:
            raise ExportError(f"{target} holds another model's or artifact's files ({', '.join(clashing[:6])}); the "
                              "slim model's files would mix with them. Choose another (or an empty) folder.")
    info = slim_info(model)
    if not info["stock"] and "modules" not in info:   # reloaded from a folder saved before folders carried code
        info.update(layout_record(model, ARCHITECTURES[info["model_type"]]))
    target.parent.mkdir(parents=True, exist_ok=True)
    temp = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        model.save_pretrained(temp, **save_kwargs)
        if tokenizer is not None:
            tokenizer.save_pretrained(temp)
        write_per_layer_schema(temp / MODEL_CONFIG_NAME)
        if not info["stock"]:
            write_remote_code(temp, info["model_type"], temp / MODEL_CONFIG_NAME)
        (temp / "README.md").write_text(slim_card_text(model))
        ordinary_permissions(temp)
        if state == "other":   # overwrite: file by file, each replaced atomically, nothing else touched
            for path in sorted(temp.iterdir(), key=lambda p: p.name == MODEL_CONFIG_NAME):   # config last
                os.replace(path, target / path.name)
        else:
            if target.exists():
                for path in target.iterdir():   # keep the run record and hidden files (a lock) across the swap
                    if path.is_file() and (path.name.startswith(".") or path.name == "hf_heuristic_core_run.json"):
                        _keep(path, temp / path.name)
            swap_folder(temp, target)
    finally:
        if temp.exists():
            shutil.rmtree(temp, ignore_errors=True)
    return target


def _keep(path: Path, destination: Path) -> None:
    """Carry `path` into the folder that replaces its own: as a hard link (the same file, so the operating-system lock
    a running claim holds on `.hf_heuristic_core.lock` stays held after the swap; a copy would be a new, unlocked
    file), or as a copy where links are not possible."""
    try:
        os.link(path, destination)
    except OSError:
        shutil.copy2(path, destination)


def _read_config(directory: Path) -> dict[str, Any]:
    path = directory / MODEL_CONFIG_NAME
    if not path.is_file():
        if (directory / MASK_CONFIG_NAME).is_file():
            raise ExportError(f"{directory} is a mask artifact (it has {MASK_CONFIG_NAME}), not a slim model. Load it "
                              "with PrunableModel.from_pretrained(base_model, masks=dir), then export_slim().")
        raise ExportError(f"{directory} has no {MODEL_CONFIG_NAME}, so it is not a saved slim model.")
    return json.loads(path.read_text())


def _resolve(dir_or_repo_id: str | os.PathLike, **hub_kwargs: Any) -> Path:
    path = Path(dir_or_repo_id)
    if path.exists():
        return path
    from huggingface_hub import snapshot_download
    return Path(snapshot_download(str(dir_or_repo_id), **hub_kwargs))


def _state_dict(directory: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file
    index = directory / "model.safetensors.index.json"
    files = sorted(set(json.loads(index.read_text())["weight_map"].values())) if index.is_file() \
        else ["model.safetensors"]
    state: dict[str, torch.Tensor] = {}
    for name in files:
        state.update(load_file(str(directory / name)))
    return state


def load_slim(dir_or_repo_id: str | os.PathLike, model_class: Any = None, **hub_kwargs: Any) -> nn.Module:
    """Rebuild a slim model saved by `save_slim` (a folder or a Hub repo id), in eval mode."""
    import transformers
    directory = _resolve(dir_or_repo_id, **hub_kwargs)
    raw = _read_config(directory)
    info = raw.get(SLIM_KEY)
    if info is None:
        raise ExportError(f"{directory} holds a model that was not exported by hf_heuristic_core (no "
                          f"'{SLIM_KEY}' in its config.json); load it with AutoModel*.from_pretrained.")
    names = raw.get("architectures") or []
    if model_class is None:   # a folder saved from a model its own code built names `Slim<stock class>`
        stock = [n for name in names for n in (name, name.removeprefix("Slim"))]
        model_class = next((getattr(transformers, n) for n in stock if hasattr(transformers, n)), None)
    if model_class is None:
        raise ExportError(f"{directory}/config.json names no transformers model class ({names}); pass "
                          "load_slim(dir, model_class=...).")
    if info.get("stock"):
        return model_class.from_pretrained(directory).eval()
    config = transformers.AutoConfig.from_pretrained(directory)
    model = model_class(config)
    rebuild_to_layout(model, info)
    state = _state_dict(directory)
    dtype = next(iter(state.values())).dtype
    model.to(dtype)
    missing, unexpected = model.load_state_dict(state, strict=False)
    model.tie_weights()
    loaded = {p.data_ptr() for name, p in model.named_parameters(remove_duplicate=False) if name in state}
    untied = [name for name, p in model.named_parameters(remove_duplicate=False)
              if name in missing and p.data_ptr() not in loaded]
    if unexpected or untied:
        raise ArtifactError(f"The weights in {directory} do not fit the recorded layout (unexpected: "
                            f"{sorted(unexpected)[:5]}, missing: {untied[:5]}); the folder is corrupt or was edited.")
    if parameter_count(model) != info["parameters"]["slim"]:
        raise ArtifactError(f"{directory}: the rebuilt model has {parameter_count(model):,} parameters, the export "
                            f"recorded {info['parameters']['slim']:,}; the folder is corrupt or was edited.")
    return model.eval()


def push_slim_to_hub(model: nn.Module, repo_id: str, private: bool | None = None, token: str | None = None,
                     commit_message: str = "Upload slim subnetwork", revision: str | None = None,
                     tokenizer: Any = None):
    """Save into a temp folder (with `tokenizer`, if given) and upload it as one commit (like the masks'
    `push_to_hub`)."""
    from huggingface_hub import HfApi
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        save_slim(model, Path(folder) / "slim", tokenizer=tokenizer)
        return api.upload_folder(repo_id=repo_id, folder_path=str(Path(folder) / "slim"),
                                 commit_message=commit_message, revision=revision)
