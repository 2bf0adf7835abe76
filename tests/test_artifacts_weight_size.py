"""Weight-mask artifacts are about n_params / 8 bytes: a fixed mask equal to the binary mask is stored once (before,
both were packed, twice the documented size), and artifacts that stored both still load the same masks."""

from __future__ import annotations

import json

import pytest
import torch
from safetensors import safe_open
from safetensors.torch import save_file

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.artifact_packing import FIXED_AS_MASK, pack_weight_tensors
from hf_heuristic_core.artifacts import MASKS_NAME, read_artifact
from hf_heuristic_core.cli.prune import units_line
from hf_heuristic_core.errors import ArtifactError
from tiny_models import tiny_model


def _fixed_weight_model() -> tuple[PrunableModel, dict[str, torch.Tensor]]:
    """A weight-mask model whose masks are fixed (as at the end of a pruning run), about half the weights kept."""
    pm = PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="weight", relaxation="gumbel_sigmoid"))
    generator = torch.Generator().manual_seed(0)
    masks = {kind: (torch.rand(logit.shape, generator=generator) > 0.5).float()
             for kind, logit in pm.mask_logits.items()}
    pm.set_masks(masks)
    return pm, masks


def test_a_finished_weight_artifact_stores_each_mask_once_at_about_n_params_over_8(tmp_path):
    pm, masks = _fixed_weight_model()
    pm.save_pretrained(tmp_path)
    entries = sum(mask.numel() for mask in masks.values())
    with safe_open(str(tmp_path / MASKS_NAME), framework="pt") as handle:
        keys, metadata = list(handle.keys()), handle.metadata()
        payload = sum(handle.get_tensor(key).numel() for key in keys)
    assert sorted(keys) == sorted(f"packed.mask.{kind}" for kind in masks)   # no packed.fixed.* beside them
    assert payload == sum((m.numel() + 7) // 8 for m in masks.values()) and payload < entries / 8 + len(masks)
    assert sorted(json.loads(metadata[FIXED_AS_MASK])) == sorted(masks)
    artifact = read_artifact(tmp_path)
    for kind, mask in masks.items():
        assert torch.equal(artifact.masks[kind], mask) and torch.equal(artifact.tensors[f"fixed.{kind}"], mask)
    fresh = PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="weight", relaxation="gumbel_sigmoid"))
    fresh.load_masks(tmp_path)
    fixed = fresh.mask_state.fixed.as_dict()
    assert all(torch.equal(fixed[kind].cpu(), mask) for kind, mask in masks.items())


def test_an_artifact_that_packed_both_the_mask_and_the_fixed_mask_still_loads(tmp_path):
    pm, masks = _fixed_weight_model()
    pm.save_pretrained(tmp_path)
    # Rewrite the masks file as the code before issue #36 did: both tensors packed, no metadata entry.
    tensors = pm.mask_state_dict()
    tensors.update({f"mask.{kind}": mask for kind, mask in masks.items()})
    old = pack_weight_tensors(tensors, set(masks), include_logits=False)
    with safe_open(str(tmp_path / MASKS_NAME), framework="pt") as handle:
        metadata = {k: v for k, v in handle.metadata().items() if k != FIXED_AS_MASK}
    save_file(old, str(tmp_path / MASKS_NAME), metadata=metadata)
    assert sum(key.startswith("packed.fixed.") for key in old) == len(masks)
    artifact = read_artifact(tmp_path)
    assert all(torch.equal(artifact.tensors[f"fixed.{kind}"], mask) for kind, mask in masks.items())
    fresh = PrunableModel(tiny_model("gpt2"), PruningConfig(granularity="weight", relaxation="gumbel_sigmoid"))
    fresh.load_masks(tmp_path)
    assert all(torch.equal(fresh.get_masks()[kind], mask) for kind, mask in masks.items())


def test_a_corrupt_fixed_as_mask_entry_is_named(tmp_path):
    pm, _ = _fixed_weight_model()
    pm.save_pretrained(tmp_path)
    with safe_open(str(tmp_path / MASKS_NAME), framework="pt") as handle:
        tensors = {key: handle.get_tensor(key) for key in handle.keys()}
        metadata = dict(handle.metadata())
    save_file(tensors, str(tmp_path / MASKS_NAME), metadata={**metadata, FIXED_AS_MASK: "not json"})
    with pytest.raises(ArtifactError, match="metadata entry 'fixed_as_mask' is not a JSON list"):
        read_artifact(tmp_path)
    save_file({k: v for k, v in tensors.items() if not k.startswith("packed.mask.")}, str(tmp_path / MASKS_NAME),
              metadata=metadata)
    with pytest.raises(ArtifactError, match="holds no binary mask for it"):
        read_artifact(tmp_path)


def test_the_summary_names_weights_and_units_instead_of_dashes():
    weights = {"units_kept": 40, "units_total": 96, "granularity": "weight",
               "h.0.attn.c_attn.weight_kept": 30, "h.0.attn.c_attn.weight_total": 64,
               "h.0.mlp.c_fc.weight_kept": 10, "h.0.mlp.c_fc.weight_total": 32}
    assert units_line(weights) == "units kept          40 of 96 (weights, in 2 masked tensors)"
    units = {"units_kept": 5, "units_total": 10, "heads_kept": 4, "heads_total": 8, "mlps_kept": 1, "mlps_total": 2}
    assert units_line(units) == "units kept          5 of 10 (heads 4/8, MLPs 1/2)"
    only_mlps = {"units_kept": 1, "units_total": 2, "mlps_kept": 1, "mlps_total": 2}
    assert units_line(only_mlps) == "units kept          1 of 2 (MLPs 1/2)"
    neurons = {"units_kept": 50, "units_total": 96, "neurons_kept": 50, "neurons_total": 96}
    assert units_line(neurons) == "units kept          50 of 96 (MLP neurons 50/96)"
