"""Mask artifacts: `pruning_config.json` + `masks.safetensors` + a README model card. Kilobytes, never weights.

Every file is written to a temp file and renamed, so a failed save never damages an artifact already on disk.
Loading checks that the artifact was made with the same granularity for a model of the same type and mask shapes.

Format 2 stores, per mask kind, `logits.<kind>`, `forced.<kind>`, `fixed.<kind>`, `means.<kind>` and the binarized
`mask.<kind>`. Format 1 (release 0.1: heads and MLP blocks only) stored the logits as `log_alpha.<kind>`; it is
read as format 2. Weight masks (granularity "weight") are bit-packed as `packed.mask.<kind>` / `packed.fixed.<kind>`
(`artifact_packing`; a fixed mask equal to the binary mask is stored once), and the metadata names the granularity, relaxation and ablation; the relaxation's constants
and schedule state (e.g. `cs_beta`) are in `pruning_config.json`.
"""

from __future__ import annotations

import json
import os
import re
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from .config import CONFIG_NAME, PruningConfig
from .errors import ArtifactError, MaskShapeError
from .granularity.unit.granularity import UnitGranularity
from .artifact_packing import FIXED_AS_MASK, fixed_as_mask, pack_weight_tensors, unpack_tensors
from .io_utils import atomic_write_many
from .run_folder import read_record
from .verdicts import verdict_line

MASKS_NAME = "masks.safetensors"
CARD_NAME = "README.md"
FORMAT = "hf_heuristic_core.masks"
FORMAT_VERSION = "2"
READABLE_VERSIONS = ("1", "2")


@dataclass
class MaskArtifact:
    """An artifact read without any model: enough for the multi-seed analyses. `masks` holds the binarized mask of
    every kind; `heads` / `mlps` are those of the unit granularity's single-stack kinds."""

    config: PruningConfig
    masks: dict[str, torch.Tensor]
    tensors: dict[str, torch.Tensor]
    metadata: dict[str, str]

    @property
    def heads(self) -> torch.Tensor | None:
        return self.masks.get(UnitGranularity.head_kind)

    @property
    def mlps(self) -> torch.Tensor | None:
        return self.masks.get(UnitGranularity.block_kind)


def upgrade_mask_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Format-1 keys (`log_alpha.<kind>`) under their format-2 names (`logits.<kind>`)."""
    return {("logits." + key[len("log_alpha."):] if key.startswith("log_alpha.") else key): value
            for key, value in state.items()}


def save_artifact(model: Any, save_directory: str | os.PathLike, sparsity: float | None = None,
                  extra_metadata: dict[str, Any] | None = None, base_model: str | None = None,
                  include_logits: bool | None = None) -> Path:
    """Write the artifact of a `PrunableModel` into `save_directory` (created if needed).

    `base_model`: the Hub id of the base model, for a model loaded from a local folder; it is stored in
    `pruning_config.json` (`extra["base_model_hub_id"]`), named by the card, and kept for later saves.
    Weight masks are bit-packed (`artifact_packing`); their fp32 logits are kept only with `include_logits=True`
    (default: always for unit and neuron masks, never for weight masks, whose logits are 32x the packed masks).
    """
    if base_model is not None:
        set_base_model_hub_id(model.pruning_config, base_model)
    absolute_base_model(model.pruning_config)
    directory = Path(save_directory)
    directory.mkdir(parents=True, exist_ok=True)
    masks = model.get_masks(binary=True, sparsity=sparsity)
    tensors = model.mask_state_dict()
    tensors.update({f"mask.{kind}": mask.float().contiguous() for kind, mask in masks.items()})
    weight_kinds = set(model.kinds) if model.granularity.keyed_by_parameter else set()
    fixed_once = fixed_as_mask(tensors, weight_kinds)
    if weight_kinds:
        tensors = pack_weight_tensors(tensors, weight_kinds, bool(include_logits), skip_fixed=fixed_once)
    report = model.sparsity_report(masks)
    metadata = {
        "format": FORMAT, "format_version": FORMAT_VERSION,
        "sparsity": repr(report["sparsity"]), "sparsity_params": repr(report["sparsity_params"]),
        "means": json.dumps(model.means_info, default=str),
        "granularity": model.pruning_config.granularity, "relaxation": model.pruning_config.relaxation,
        "ablation": model.pruning_config.ablation,
        **({FIXED_AS_MASK: json.dumps(fixed_once)} if fixed_once else {}),
        **{k: json.dumps(v, default=str) for k, v in (extra_metadata or {}).items()},
    }
    config_text = json.dumps(model.pruning_config.to_dict(), indent=2, sort_keys=True) + "\n"
    card_text = model_card_text(model, report)
    atomic_write_many({
        directory / MASKS_NAME: lambda tmp: save_file(tensors, tmp, metadata=metadata),
        directory / CONFIG_NAME: lambda tmp: Path(tmp).write_text(config_text),
        directory / CARD_NAME: lambda tmp: Path(tmp).write_text(card_text),
    })
    return directory


def _shape_text(granularity: Any, config: PruningConfig) -> str:
    """The mask shapes in words, as the granularity puts them, else each kind's shape."""
    text = granularity.shape_text(config)
    return text or ", ".join(f"{kind} {shape}" for kind, shape in (config.mask_shapes or {}).items())


def _convergence_rows(convergence: dict[str, Any] | None) -> list[str]:
    """The card's verdict row: converged, NOT converged or inconclusive (older artifacts stored an inconclusive check
    as `converged: true`; `verdict_status` reads them right)."""
    if not convergence:
        return []
    return [f"| convergence check | {verdict_line(convergence)} |"]


def _constraint_rows(constraint: dict[str, Any] | None, report: dict[str, Any]) -> list[str]:
    """The card's row saying what moved the sparsity (`--uniform_layers`), for the masks it was recorded for only
    (masks set since then have another sparsity: no row rather than a stale reason)."""
    if not constraint or not constraint.get("reason") or \
            abs(float(constraint.get("sparsity", -1)) - report["sparsity"]) > 1e-9:
        return []
    return [f"| sparsity moved by a constraint | {constraint['reason']} |"]


HUB_ID_KEY = "base_model_hub_id"
HUB_ID_PLACEHOLDER = "<Hub id of the base model>"


def is_local_base_model(name: str | None) -> bool:
    """A base model that only exists on this machine: an existing folder, or a name no Hub id can have."""
    return bool(name) and (_looks_like_local_path(str(name)) or Path(str(name)).expanduser().exists())


def set_base_model_hub_id(config: PruningConfig, hub_id: str) -> None:
    """Record the base model's Hub id (checked: `name` or `namespace/name`, not a local path)."""
    if not isinstance(hub_id, str) or _looks_like_local_path(hub_id):
        raise ArtifactError(f"base_model={hub_id!r} is not a Hub id; pass the id the base model has on the Hub, "
                            "e.g. base_model='sentence-transformers/all-MiniLM-L6-v2'.")
    config.extra[HUB_ID_KEY] = hub_id


def absolute_base_model(config: PruningConfig) -> None:
    """Record a base model loaded from a local folder by its absolute path, so the artifact finds it from any working
    directory (a relative path only resolves from where the model was loaded). Hub ids are kept as they are."""
    name = config.base_model_name_or_path
    if name and not os.path.isabs(os.path.expanduser(str(name))) and Path(str(name)).expanduser().is_dir():
        config.base_model_name_or_path = str(Path(str(name)).expanduser().resolve())


def base_model_source(config: PruningConfig) -> str | None:
    """Where to load an artifact's base model from: the recorded folder when it exists here, else the Hub id."""
    local, hub_id = config.base_model_name_or_path, config.extra.get(HUB_ID_KEY)
    if hub_id and (not local or (is_local_base_model(local) and not Path(local).expanduser().exists())):
        return hub_id
    return local


def card_base_model(config: PruningConfig) -> tuple[str | None, str | None]:
    """(Hub id the card can name or None, the local folder it cannot share or None)."""
    name, hub_id = config.base_model_name_or_path, config.extra.get(HUB_ID_KEY)
    if hub_id:
        return hub_id, None
    if name and is_local_base_model(name):
        return None, name
    return name, None


def model_card_text(model: Any, report: dict[str, Any]) -> str:
    """A short Hub model card: what the masks belong to and how much they keep. A base model known only by a local
    folder is not named as the card's base model: the card says so and asks for the Hub id."""
    config = model.pruning_config
    hub_id, local = card_base_model(config)
    base = hub_id or HUB_ID_PLACEHOLDER
    gguf = config.base_model_gguf_file
    gguf_argument = f", gguf_file=\"{gguf}\"" if gguf else ""
    title = f"`{hub_id}`" if hub_id else "a local model"
    local_note = [] if not local else [
        f"> **The base model is a local folder** (`{local}`), which nobody else can load. Re-save with the base "
        "model's Hub id: `save_pretrained(dir, base_model=\"namespace/name\")` or "
        "`push_to_hub(repo_id, base_model=\"namespace/name\")`.", ""]
    lines = [
        "---", "library_name: hf_heuristic_core", "tags:", "- pruning", "- attention-heads", "- heuristic-core",
        *([f"base_model: {hub_id}"] if hub_id else []), "---", "",
        f"# Pruning masks for {title}", "", *local_note,
        "Structured pruning masks (attention heads and MLP blocks) made with hf_heuristic_core. This repository holds "
        "masks only, not model weights.", "",
        "| field | value |", "|---|---|",
        f"| base model | `{hub_id or local or 'unknown'}`{' (local folder)' if local else ''} "
        f"(revision `{config.base_model_revision or 'unknown'}`"
        f"{f', GGUF file `{gguf}`' if gguf else ''}) |",
        f"| model type | {config.model_type} ({_shape_text(model.granularity, config)}) |",
        f"| granularity, relaxation | {config.granularity}, {config.relaxation} |",
        f"| units kept | {report['units_kept']} of {report['units_total']} |",
        *([f"| weights kept | {report['units_kept']} of {report['units_total']} in "
           f"{len(model.enabled_kinds())} tensors (bit-packed masks) |"] if model.granularity.keyed_by_parameter else
          [f"| {model.kinds[kind].title or kind} kept | {report[f'{kind}_kept']} of {report[f'{kind}_total']} |"
           for kind in model.enabled_kinds()]),
        f"| sparsity (units) | {report['sparsity']:.4f} |",
        f"| sparsity (parameters) | {report['sparsity_params']:.4f} |",
        *_constraint_rows(config.extra.get("sparsity_constraint"), report),
        f"| ablation | {config.ablation} |",
        *_convergence_rows(config.extra.get("convergence")),
        f"| mean activations | {'included' if model.has_means else 'not included'}"
        f"{' (' + str(model.means_info.get('token_count')) + ' tokens)' if model.has_means else ''} |",
        "", "## Use", "", "```python", "from hf_heuristic_core import PrunableModel", "",
        f"model = PrunableModel.from_pretrained(\"{base}\", masks=\"<this repo or folder>\"{gguf_argument})",
        "model.eval()", "```", "",
    ]
    return "\n".join(lines)


def resolve_artifact_dir(dir_or_repo_id: str | os.PathLike, must_exist: bool = True,
                         revision: str | None = None, token: str | None = None,
                         cache_dir: str | None = None) -> Path | None:
    """A local folder holding `pruning_config.json`, downloading from the Hub when given a repo id.

    With `must_exist=False`, returns None when the location is not a mask artifact (e.g. it is a model).
    """
    path = Path(dir_or_repo_id)
    if path.exists():
        if (path / CONFIG_NAME).is_file():
            return path
        if not must_exist:
            return None
        if _is_slim_folder(path):
            raise ArtifactError(f"{path} holds a slim model exported by hf_heuristic_core, not masks; load it with "
                                "hf_heuristic_core.load_slim(dir).")
        raise ArtifactError(f"{path} has no {CONFIG_NAME}, so it is not a hf_heuristic_core mask artifact. Save one "
                            "with PrunableModel.save_pretrained(dir).")
    repo_id = str(dir_or_repo_id)
    if _looks_like_local_path(repo_id):
        if not must_exist:
            return None
        raise ArtifactError(f"No mask artifact at {repo_id}: the folder does not exist.")
    from huggingface_hub import hf_hub_download
    from huggingface_hub.errors import EntryNotFoundError, RepositoryNotFoundError
    try:
        config_path = hf_hub_download(repo_id, CONFIG_NAME, revision=revision, token=token, cache_dir=cache_dir)
    except EntryNotFoundError as err:
        if not must_exist:
            return None
        raise ArtifactError(f"The Hub repo '{repo_id}' has no {CONFIG_NAME}, so it holds no hf_heuristic_core masks. "
                            "Check the repo id, or push masks with PrunableModel.push_to_hub(repo_id).") from err
    except RepositoryNotFoundError as err:
        if not must_exist:
            return None
        raise ArtifactError(f"No Hub repo '{repo_id}' (or no access to it), and no local folder of that name.") from err
    except Exception as err:  # offline, network errors: a model id that is not an artifact must still load
        if not must_exist:
            return None
        raise ArtifactError(f"Could not fetch {CONFIG_NAME} of '{repo_id}' from the Hub ({err}).") from err
    hf_hub_download(repo_id, MASKS_NAME, revision=revision, token=token, cache_dir=cache_dir)
    return Path(config_path).parent


def _is_slim_folder(path: Path) -> bool:
    try:
        return "hf_heuristic_core_slim" in json.loads((path / "config.json").read_text())
    except (OSError, ValueError):
        return False


def _looks_like_local_path(name: str) -> bool:
    """Hub repo ids are `name` or `owner/name`; anything else can only be a local path."""
    return re.fullmatch(r"[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?", name) is None


def _check_methods_registered(config_file: Path) -> None:
    """An artifact of a relaxation or granularity registered from outside the package reads only once that method is
    registered again; say so, rather than calling the file corrupt."""
    try:
        raw = json.loads(config_file.read_text())
    except (OSError, ValueError):
        return   # the config reader says what is wrong with the file itself
    from .granularity import GRANULARITY_SETTINGS
    from .relaxations import RELAXATION_SETTINGS
    for field, registry, register in (("relaxation", RELAXATION_SETTINGS, "register_relaxation"),
                                      ("granularity", GRANULARITY_SETTINGS, "register_granularity")):
        name = raw.get(field) if isinstance(raw, dict) else None
        if isinstance(name, str) and name not in registry:
            raise ArtifactError(f"{config_file} names the {field} {name!r}, which is not registered in this process "
                                f"(registered: {registry.names()}). Import the module that registers it "
                                f"({register}({name!r}, ...)) before reading the artifact.")


def read_artifact(dir_or_repo_id: str | os.PathLike, **hub_kwargs: Any) -> MaskArtifact:
    """Read an artifact's config, binary masks and tensors without loading any model."""
    directory = resolve_artifact_dir(dir_or_repo_id, **hub_kwargs)
    _check_methods_registered(directory / CONFIG_NAME)
    try:
        config = PruningConfig.from_pretrained(directory)
    except (ValueError, TypeError) as err:
        raise ArtifactError(f"{directory / CONFIG_NAME} is corrupt or was not written by hf_heuristic_core ({err}). "
                            "Re-save the artifact.") from err
    masks_path = directory / MASKS_NAME
    if not masks_path.is_file():
        raise ArtifactError(f"{masks_path} is missing: the artifact is partial. Re-save it with save_pretrained().")
    try:
        tensors = load_file(str(masks_path))
        from safetensors import safe_open
        with safe_open(str(masks_path), framework="pt") as handle:
            metadata = dict(handle.metadata() or {})
    except (SafetensorError, OSError, ValueError) as err:
        raise ArtifactError(f"{masks_path} is corrupt or partial ({err}). Re-save the artifact.") from err
    version = metadata.get("format_version")
    try:
        fixed_kinds = json.loads(metadata.get(FIXED_AS_MASK) or "[]")
    except ValueError as err:
        raise ArtifactError(f"{masks_path}: its metadata entry {FIXED_AS_MASK!r} is not a JSON list ({err}); the "
                            "artifact is corrupt. Re-save it.") from err
    tensors = unpack_tensors(tensors, config.mask_shapes, fixed_kinds)
    masks = {key[len("mask."):]: value for key, value in tensors.items() if key.startswith("mask.")}
    version_1_kinds = set(UnitGranularity.mask_kinds)    # format 1 always held both unit kinds
    if metadata.get("format") != FORMAT or not masks or (version == "1" and not version_1_kinds <= set(masks)):
        raise ArtifactError(f"{masks_path} is not a hf_heuristic_core mask file (missing format tag or masks).")
    if version not in READABLE_VERSIONS:
        raise ArtifactError(f"{masks_path} has format version {version!r}; this release reads {READABLE_VERSIONS}. "
                            "Upgrade hf_heuristic_core to load it.")
    for name, tensor in tensors.items():
        if not torch.isfinite(tensor).all():
            raise ArtifactError(f"{masks_path}: '{name}' contains NaN or inf values (a diverged pruning run?). "
                                "Re-run pruning or load another artifact.")
    return MaskArtifact(config, masks, upgrade_mask_state(tensors), metadata)


def check_compatible(model: Any, config: PruningConfig, source: str) -> None:
    """Refuse an artifact made with another granularity or for a model of another type or shape."""
    own = model.pruning_config
    if config.granularity != own.granularity:
        raise ArtifactError(f"The masks at {source} are {config.granularity!r} masks, but this model was wrapped with "
                            f"PruningConfig(granularity={own.granularity!r}); wrap it with "
                            f"granularity={config.granularity!r} to load them.")
    mismatches = []
    if config.model_type is not None and own.model_type is not None and config.model_type != own.model_type:
        mismatches.append(f"model_type: artifact {config.model_type!r} vs model {own.model_type!r}")
    for key in ("num_layers", "num_heads", "head_dim"):   # the facts both formats record
        saved, current = getattr(config, key), getattr(own, key)
        if saved is not None and current is not None and saved != current:
            mismatches.append(f"{key}: artifact {saved!r} vs model {current!r}")
    shapes = model.mask_shapes()
    for kind, shape in (config.mask_shapes or {}).items():
        if kind not in shapes:
            mismatches.append(f"the artifact has {kind!r} masks, the model's kinds are {list(shapes)}")
        elif tuple(shape) != tuple(shapes[kind]):
            mismatches.append(f"{kind} masks: artifact {list(shape)} vs model {list(shapes[kind])}")
    if mismatches:
        raise ArtifactError(f"The masks at {source} were made for another model ({'; '.join(mismatches)}; artifact "
                            f"base model: {config.base_model_name_or_path}). Load them into a matching model.")


def load_artifact_into(model: Any, dir_or_repo_id: str | os.PathLike, **hub_kwargs: Any) -> None:
    artifact = read_artifact(dir_or_repo_id, **hub_kwargs)
    check_compatible(model, artifact.config, str(dir_or_repo_id))
    try:
        model.load_mask_state_dict(artifact.tensors)
        without_logits = {kind: mask for kind, mask in artifact.masks.items()
                          if f"logits.{kind}" not in artifact.tensors and f"fixed.{kind}" not in artifact.tensors
                          and kind in model.enabled_kinds()}
        if without_logits:   # packed weight masks saved without logits: the saved binary masks are the masks
            model.set_masks(without_logits)
    except MaskShapeError as err:
        raise ArtifactError(f"The masks at {dir_or_repo_id} do not fit this model: {err}") from err
    means_info = artifact.metadata.get("means")
    if means_info:
        model.means_info = json.loads(means_info)
    saved = artifact.config
    for key in ("ablation", "binarization", "binarization_scope", "uniform_layers", "threshold", "eval_mask"):
        setattr(model.pruning_config, key, getattr(saved, key))


def push_artifact_to_hub(model: Any, repo_id: str, private: bool | None = None, token: str | None = None,
                         commit_message: str = "Upload pruning masks", revision: str | None = None, **save_kwargs: Any):
    """Save into a temp folder and upload it as one commit; returns huggingface_hub's `CommitInfo`.

    Warns when the base model is known only by a local folder: pass `base_model="namespace/name"` (kept in the
    artifact) so the card names a model others can load.
    """
    import warnings

    from huggingface_hub import HfApi
    if save_kwargs.get("base_model") is not None:
        set_base_model_hub_id(model.pruning_config, save_kwargs.pop("base_model"))
    local = card_base_model(model.pruning_config)[1]
    if local:
        warnings.warn(f"push_to_hub({repo_id!r}): the base model is the local folder {local}, so the card cannot "
                      "tell others which model the masks belong to; pass base_model='namespace/name' (its Hub id).",
                      UserWarning, stacklevel=3)
    api = HfApi(token=token)
    api.create_repo(repo_id, private=private, exist_ok=True)
    with tempfile.TemporaryDirectory() as folder:
        save_artifact(model, folder, **save_kwargs)
        return api.upload_folder(repo_id=repo_id, folder_path=folder, commit_message=commit_message,
                                 revision=revision)


def load_base_model(name_or_path: str | os.PathLike, model_class: Any = None, artifact: str | os.PathLike | None = None,
                    **hf_kwargs: Any):
    """Load a Transformers model with the class its config names (e.g. `BertForSequenceClassification`).
    `artifact`: the mask artifact the model is loaded for, named by the errors."""
    import transformers
    if _looks_like_local_path(str(name_or_path)) and not Path(str(name_or_path)).expanduser().exists():
        raise ArtifactError(_no_model_folder(name_or_path, artifact))
    check_gguf_named(name_or_path, hf_kwargs.get("gguf_file"), artifact)
    gguf = bool(hf_kwargs.get("gguf_file"))
    if gguf and "dtype" not in hf_kwargs and "torch_dtype" not in hf_kwargs:
        import torch
        hf_kwargs = {**hf_kwargs, "dtype": torch.float32}   # masks are learned against float weights
    if model_class is None:
        config = hf_kwargs.get("config") or transformers.AutoConfig.from_pretrained(name_or_path,
                                                                                   **_config_kwargs(hf_kwargs))
        names = getattr(config, "architectures", None) or []
        fallback = transformers.AutoModelForCausalLM if gguf and is_decoder_type(config.model_type) else \
            transformers.AutoModel   # a GGUF file names no class, only its architecture: a decoder is a causal LM
        model_class = next((getattr(transformers, n) for n in names if hasattr(transformers, n)), fallback)
    model = model_class.from_pretrained(name_or_path, **hf_kwargs)
    if gguf:
        plain_gguf_model(model)
    return model


def _no_model_folder(name_or_path: str | os.PathLike, artifact: str | os.PathLike | None) -> str:
    """Why a local base model is not found, and how to pass it: an artifact records an absolute path, so there the
    folder was moved or deleted; a relative path typed by hand resolves only from the working directory."""
    where = f" (the base model the mask artifact {artifact} records: moved or deleted?)" if artifact else ""
    if not os.path.isabs(os.path.expanduser(str(name_or_path))):
        where += f" (from {Path.cwd()}; a relative path only resolves from where it was typed)"
    return (f"No model folder at {name_or_path}{where}. Pass the base model explicitly (its folder or Hub id), e.g. "
            "PrunableModel.from_pretrained(MODEL, masks=ARTIFACT_DIR) or export --model MODEL.")


ENCODER_TYPES = {"bert", "roberta", "xlm-roberta", "electra", "camembert", "nomic_bert", "t5", "modernbert"}


def is_decoder_type(model_type: str | None) -> bool:
    """Whether a model type is a decoder-only language model (what a GGUF file of that architecture holds)."""
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES
    return bool(model_type) and model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in ENCODER_TYPES


def gguf_files(folder: str | os.PathLike) -> list[str]:
    """The `.gguf` files of a local model folder that has no `config.json` (a folder Transformers can only read
    with `gguf_file=`); empty for anything else."""
    path = Path(str(folder)).expanduser()
    if not path.is_dir() or (path / "config.json").is_file():
        return []
    return sorted(p.name for p in path.glob("*.gguf"))


def check_gguf_named(name_or_path: str | os.PathLike, gguf_file: str | None,
                     artifact: str | os.PathLike | None = None) -> None:
    """A folder that holds only GGUF files, loaded without naming one, fails in Transformers with "no file named
    model.safetensors" or "Unrecognized model"; say which argument fixes it instead."""
    found = [] if gguf_file else gguf_files(name_or_path)
    if not found:
        return
    what = f"the base model of the mask artifact {artifact}, " if artifact else ""
    older = _recorded_gguf_note(artifact) if artifact else ""
    masks = f", masks={str(artifact)!r}" if artifact else ""   # the folder itself: it may not be the recorded one
    call = f"PrunableModel.from_pretrained({str(name_or_path)!r}{masks}, gguf_file={found[0]!r})"
    raise ArtifactError(f"{name_or_path} ({what}a folder with no config.json) holds GGUF file(s) {found}: name the "
                        f"one to read, {call} (command line: --gguf_file {found[0]}).{older}")


def _recorded_gguf_note(artifact: str | os.PathLike) -> str:
    """What the artifact says about its GGUF file, for an error about a folder that does not hold it: the recorded
    name (the folder holds other GGUF files), or that it records none (saved before artifacts recorded it)."""
    try:
        saved = json.loads((Path(str(artifact)).expanduser() / CONFIG_NAME).read_text())
    except (OSError, ValueError):
        saved = {}
    name = saved.get("base_model_gguf_file") if isinstance(saved, dict) else None
    if name:
        return f" The artifact records {name!r}, which this folder does not hold."
    return (" The artifact does not record its GGUF file (saved before artifacts recorded it; re-save it, or pass "
            "the file).")


def recorded_gguf_file(masks: str | os.PathLike, model: str | os.PathLike | None = None) -> str | None:
    """The GGUF file a local mask artifact's base model was read from (`base_model_gguf_file`), when `model` (default:
    the recorded base model) is a folder holding that file; None otherwise (a Hub artifact is not fetched for it)."""
    path = Path(str(masks)).expanduser() / CONFIG_NAME
    try:
        saved = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    name = saved.get("base_model_gguf_file") if isinstance(saved, dict) else None
    folder = model or saved.get("base_model_name_or_path")
    if not name or not folder or not (Path(str(folder)).expanduser() / name).is_file():
        return None
    return name


def plain_gguf_model(model: Any) -> Any:
    """A model read from a GGUF file holds dequantized float tensors but keeps the GGUF quantizer, which makes the
    Trainer refuse it ("cannot perform fine-tuning on purely quantized models") and blocks `save_pretrained`. Drop
    that marker (transformers' own `remove_quantization_config`), so the model is the plain float model it is."""
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is None:
        return model
    method = getattr(quantizer.quantization_config, "quant_method", None)
    if str(getattr(method, "value", method)) == "gguf":
        quantizer.remove_quantization_config(model)
    return model


def _config_kwargs(hf_kwargs: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in hf_kwargs.items()
            if k in ("revision", "token", "cache_dir", "trust_remote_code", "gguf_file", "local_files_only")}


def hub_kwargs(hf_kwargs: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of a model load that also locate an artifact on the Hub."""
    return {k: hf_kwargs[k] for k in ("revision", "token", "cache_dir") if k in hf_kwargs}


# ----------------------------------------------------------------------------------------------- finished artifacts
ALLOW_UNFINISHED_FLAG = "--allow_unfinished"


def unfinished_reasons(directory: str | os.PathLike, artifact: MaskArtifact | None = None) -> list[str]:
    """Why the artifact in `directory` is not a finished run's masks (empty when it is): a mid-run `checkpoint-N`
    (its masks are the logits binarized at the sparsity reached so far, not at the target), a run whose record says
    it did not finish, masks that were never fixed, or masks that are not binary."""
    folder = Path(directory)
    reasons: list[str] = []
    state = folder / "trainer_state.json"
    if state.is_file() or (folder / "pruning_state.pt").is_file():
        try:
            info = json.loads(state.read_text())
            where = f" (step {info.get('global_step')} of {info.get('max_steps')})"
        except (OSError, ValueError):
            where = ""
        reasons.append(f"it is a mid-run training checkpoint{where}: its masks are the logits binarized at the "
                       "sparsity reached so far, not the finished run's masks at its target")
    record = read_record(folder)
    if record is not None and record.get("kind") == "prune" and not record.get("finished"):
        reasons.append("the prune run that writes this folder has not finished (its run record says so)")
    if artifact is None and (folder / CONFIG_NAME).is_file() and (folder / MASKS_NAME).is_file():
        try:
            artifact = read_artifact(folder)
        except ArtifactError:
            artifact = None
    if artifact is not None:
        has_logits = any(key.startswith("logits.") for key in artifact.tensors)
        has_fixed = any(key.startswith("fixed.") for key in artifact.tensors)
        if has_logits and not has_fixed and not reasons:
            reasons.append("its masks were never fixed: they are learned logits binarized at their current expected "
                           "sparsity (a state saved during training), not a finished run's masks")
        for kind, mask in artifact.masks.items():
            fractional = int(((mask != 0) & (mask != 1)).sum())
            if fractional:
                reasons.append(f"its {kind} mask is not binary ({fractional} entries strictly between 0 and 1)")
    return reasons


def check_finished(directory: str | os.PathLike, allow_unfinished: bool = False, what: str = "--masks",
                   artifact: MaskArtifact | None = None) -> list[str]:
    """Refuse an unfinished artifact (see `unfinished_reasons`) unless `allow_unfinished`; returns the reasons (to
    be reported when allowed)."""
    reasons = unfinished_reasons(directory, artifact)
    if reasons and not allow_unfinished:
        raise ArtifactError(f"{what} {directory} is not a finished run's masks: {'; '.join(reasons)}. Use the "
                            "folder the finished run wrote (its --output_dir, not a checkpoint-N inside it), or pass "
                            f"{ALLOW_UNFINISHED_FLAG} to use these masks as they are.")
    return reasons
