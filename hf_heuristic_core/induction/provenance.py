"""Where a transplanted model came from, and saving it as a normal checkpoint plus that record.

`attach_provenance` stores the record as `model.subtask_induction` (a JSON-able dict: source, arm, seed, relaxation,
granularity, kept fraction per tensor and per layer) and gives the instance a `save_pretrained` that writes

- the model's effective weights under the original parameter names (`effective_state_dict`), loadable
  by `AutoModel*.from_pretrained(dir)` / `type(model).from_pretrained(dir)` as a plain model;
- `subtask_induction.json` (the record) and a model card `README.md` that summarizes it;
- `subtask_induction_gates.safetensors`: which entries were frozen, so `load_transplanted(dir)` can reload the model
  frozen again for further training (the frozen values are the saved weights themselves).
"""

from __future__ import annotations

import json
import os
import re
import types
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..errors import ArtifactError
from ..granularity import granularity_for_kinds
from ..granularity.weight.selection import layer_of
from ..io_utils import atomic_write, atomic_write_text
from .freezing import accept_plain_state_dicts, frozen_gates, install_transplant
from .gates import tensor_slots

__all__ = ["CARD_NAME", "GATES_NAME", "RECORD_NAME", "attach_provenance", "effective_state_dict", "load_transplanted",
           "provenance_record"]

RECORD_NAME = "subtask_induction.json"
GATES_NAME = "subtask_induction_gates.safetensors"
CARD_NAME = "README.md"
FORMAT = "hf_heuristic_core.subtask_induction/1"


def provenance_record(model: nn.Module, *, source: nn.Module | None, arm: str, seed: int,
                      gates: Mapping[str, torch.Tensor], masks: Mapping[str, Any] | None = None, config: Any = None,
                      source_name: str | None = None, relaxation: str | None = None,
                      carry: tuple[str, int] = ("subnetwork", 0)) -> dict[str, Any]:
    """The JSON-able record of one transplant (see the module docstring). `carry`: the transplant variant
    (`transfer.CARRY_CHOICES`; recorded as None for the full and scratch arms, where it does not apply) and how many
    source entries outside the masked tensors were copied in, trainable (0 unless the variant is "source")."""
    carry, carried_entries = carry
    tensors = {name: {"kept": int(g.sum()), "total": g.numel()} for name, g in gates.items()}
    layers: dict[str, dict[str, int]] = {}
    for name, counts in tensors.items():
        layer = layer_of(name)
        entry = layers.setdefault("none" if layer is None else str(layer), {"kept": 0, "total": 0})
        entry["kept"] += counts["kept"]
        entry["total"] += counts["total"]
    for entry in [*tensors.values(), *layers.values()]:
        entry["fraction"] = entry["kept"] / entry["total"] if entry["total"] else 0.0
    kept = sum(t["kept"] for t in tensors.values())
    masked = sum(t["total"] for t in tensors.values())
    all_params = sum(p.numel() for p in model.parameters())
    source_config = getattr(source, "config", None)
    if source_name is None and source_config is not None:
        source_name = getattr(source_config, "name_or_path", None) or getattr(source_config, "_name_or_path", None)
    granularity = config if isinstance(config, str) else getattr(config, "granularity", None)
    if relaxation is None and config is not None and not isinstance(config, str):
        relaxation = getattr(config, "relaxation", None)
    mask_counts = {k: {"kept": int(torch.as_tensor(v).bool().sum()), "total": torch.as_tensor(v).numel()}
                   for k, v in (masks or {}).items()} if arm not in ("full", "scratch") else {}
    if granularity is None and mask_counts:
        granularity = granularity_for_kinds(mask_counts)
    return {
        "format": FORMAT, "arm": arm, "seed": seed, "source": source_name or None,
        "carry": None if arm in ("full", "scratch") else carry, "carried_entries": int(carried_entries),
        "source_class": type(source).__name__ if source is not None else None,
        "granularity": granularity, "relaxation": relaxation,
        "kept_entries": kept, "masked_entries": masked, "model_entries": all_params,
        "kept_fraction_of_masked": kept / masked if masked else 0.0,
        "kept_fraction_of_model": kept / all_params if all_params else 0.0,
        "masks": mask_counts, "layers": layers, "tensors": tensors,
    }


def attach_provenance(model: nn.Module, carry: str = "subnetwork", carried_entries: int = 0, **record: Any) -> None:
    """Record where `model` came from and make its `save_pretrained` write the plain checkpoint + record."""
    model.subtask_induction = provenance_record(model, carry=(carry, carried_entries), **record)
    if hasattr(type(model), "save_pretrained"):
        model.save_pretrained = types.MethodType(_save_pretrained, model)


def _save_pretrained(self: nn.Module, save_directory: str | os.PathLike, *args: Any, **kwargs: Any) -> Any:
    """`save_pretrained` of the model's class with the effective weights under the plain names (a Trainer's
    `state_dict=` holds parametrized names and is replaced), then the provenance files."""
    kwargs["state_dict"] = effective_state_dict(self)
    result = type(self).save_pretrained(self, save_directory, *args, **kwargs)
    write_provenance(Path(save_directory), self.subtask_induction, frozen_gates(self))
    return result


_ORIGINAL = re.compile(r"^(?:(.*)\.)?parametrizations\.([^.]+)\.original$")
_PARAMETRIZATION_STATE = re.compile(r"(?:^|\.)parametrizations\.[^.]+\.\d+\.")


@torch.no_grad()
def effective_state_dict(model: nn.Module) -> dict[str, torch.Tensor]:
    """`model.state_dict()` as the plain model would have it: each parametrized tensor's effective value under its
    plain name (tied tensors share one value tensor), the parametrizations' buffers left out. The model itself is
    not changed (merging a deep copy would not do: the copy shares the parametrized class with the original)."""
    state: dict[str, torch.Tensor] = {}
    values: dict[int, torch.Tensor] = {}
    for key, tensor in model.state_dict().items():
        if _PARAMETRIZATION_STATE.search(key):
            continue
        match = _ORIGINAL.match(key)
        if match is None:
            state[key] = tensor
            continue
        prefix, attribute = match.groups()
        module = model.get_submodule(prefix or "")
        plist = module.parametrizations[attribute]
        if id(plist.original) not in values:
            values[id(plist.original)] = getattr(module, attribute).detach()
        state[f"{prefix}.{attribute}" if prefix else attribute] = values[id(plist.original)]
    return state


def write_provenance(directory: Path, record: Mapping[str, Any], gates: Mapping[str, torch.Tensor]) -> None:
    from safetensors.torch import save_file

    directory.mkdir(parents=True, exist_ok=True)
    packed = {name: gate.to(torch.uint8).contiguous() for name, gate in gates.items()}
    atomic_write(directory / GATES_NAME, lambda tmp: save_file(packed, tmp, metadata={"format": FORMAT}))
    atomic_write_text(directory / RECORD_NAME, json.dumps(record, indent=2) + "\n")
    atomic_write_text(directory / CARD_NAME, card_text(record))


def card_text(record: Mapping[str, Any]) -> str:
    """A short model card: what was transplanted from where, and how much."""
    source = record.get("source")
    front = ["---", "library_name: transformers", "tags:", "- subtask-induction", "- hf-heuristic-core"]
    if source and not os.path.isdir(str(source)) and "/" in str(source):
        front.append(f"base_model: {source}")
    front.append("---")
    arm = record["arm"]
    lines = [*front, "", "# Subtask Induction model", "",
             f"A model of the class `{record.get('source_class')}` built by `hf_heuristic_core` (arm **{arm}**, "
             + (f"fresh weights from seed {record['seed']}" if record["seed"] is not None else "into a given target")
             + f") from the source model `{source or 'unknown'}`.", ""]
    if arm in ("full", "scratch"):
        lines.append("Control arm: " + ("every weight copied from the source, all trainable." if arm == "full"
                                         else "the model's own fresh initialization; nothing transplanted."))
    else:
        lines += [(f"Granularity of the source masks: {record.get('granularity')}; relaxation: "
                   f"{record.get('relaxation') or 'not recorded'}."),
                  (f"Transplanted (frozen) entries: {record['kept_entries']} of the {record['masked_entries']} "
                   f"masked entries ({100 * record['kept_fraction_of_masked']:.2f}%), "
                   f"{100 * record['kept_fraction_of_model']:.2f}% of the model's {record['model_entries']} "
                   "parameters. " + _rest_of_model(record)), "",
                  "| layer | kept | of | % |", "|---|---:|---:|---:|"]
        lines += [f"| {layer} | {c['kept']} | {c['total']} | {100 * c['fraction']:.2f} |"
                  for layer, c in record["layers"].items()]
    lines += ["", (f"The weights are a normal checkpoint (effective weights). `{RECORD_NAME}` holds the full "
                   f"record, `{GATES_NAME}` which entries were frozen: "
                   "`hf_heuristic_core.load_transplanted(dir)` reloads the model with them frozen again."), ""]
    return "\n".join(lines)


def _rest_of_model(record: Mapping[str, Any]) -> str:
    """What the card says about the weights outside the subnetwork, per transplant variant."""
    if record.get("carry") == "source":
        return (f"Every tensor the masks do not cover ({record.get('carried_entries', 0)} entries: embeddings, "
                "LayerNorms, biases, head, ...) was copied from the source and trained (carry='source', the authors' "
                "transplant); the masked tensors' other entries are the fresh initialization named above.")
    return "Every other weight is the fresh initialization named above (carry='subnetwork')."


def load_transplanted(directory: str | os.PathLike, model_class: type | None = None, **kwargs: Any) -> nn.Module:
    """Reload a saved transplanted model with its frozen entries frozen again (the saved weights are both the
    frozen values and the trainable part's starting point). `model_class` defaults to the class named in the
    checkpoint's config (`config.architectures`)."""
    import transformers
    from safetensors.torch import load_file

    directory = Path(directory)
    if not (directory / GATES_NAME).is_file() or not (directory / RECORD_NAME).is_file():
        raise ArtifactError(f"{directory} has no {GATES_NAME} / {RECORD_NAME}: it was not saved from a model "
                            "built by transfer_subnetwork/build_arm. Load it with from_pretrained as a plain model.")
    if model_class is None:
        config = transformers.AutoConfig.from_pretrained(directory)
        names = getattr(config, "architectures", None) or []
        model_class = getattr(transformers, names[0], None) if names else None
        if model_class is None:
            raise ArtifactError(f"Cannot tell the model class of {directory} (config.architectures={names}); pass "
                                "model_class=.")
    model = model_class.from_pretrained(directory, **kwargs)
    model.train()
    gates = {name: gate.bool() for name, gate in load_file(str(directory / GATES_NAME)).items()}

    slots = tensor_slots(model)
    unknown = [name for name in gates if name not in slots]
    if unknown:
        raise ArtifactError(f"{GATES_NAME} names parameters the loaded model lacks: {unknown[:4]}.")
    install_transplant(slots, gates, {name: slots[name].parameter.detach().clone() for name in gates})
    accept_plain_state_dicts(model)
    record = json.loads((directory / RECORD_NAME).read_text())
    model.subtask_induction = record
    model.save_pretrained = types.MethodType(_save_pretrained, model)
    return model
