"""PruningConfig: validation of every field, dict/JSON round trip, and what the wrapper records without touching
the caller's config.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import json

import pytest

from hf_heuristic_core import PrunableModel, PruningConfig

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import HEADS, HIDDEN, LAYERS, tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.mark.parametrize("kwargs, match", [
    ({"ablation": "noise"}, "ablation"),
    ({"binarization": "random"}, "binarization"),
    ({"binarization_scope": "per_head"}, "binarization_scope"),
    ({"eval_mask": "sampled"}, "eval_mask"),
    ({"prune_heads": False, "prune_mlps": False}, "prune_heads"),
    ({"limit_left": 0.1}, "limit_left"),
    ({"limit_right": 0.9}, "limit_right"),
    ({"temperature": 0.0}, "temperature"),
    ({"temperature": -1.0}, "temperature"),
    ({"eps": 0.0}, "eps"),
    ({"eps": 0.7}, "eps"),
    ({"init_std": -0.1}, "init_std"),
    ({"init_mean": float("nan")}, "init_mean"),
    ({"threshold": 0.0}, "threshold"),
    ({"threshold": 1.0}, "threshold"),
    ({"num_heads": 0}, "num_heads"),
])
def test_config_validation(kwargs, match):
    with pytest.raises(ValueError, match=match):
        PruningConfig(**kwargs)


def test_config_dict_and_json_round_trip(tmp_path):
    config = PruningConfig(ablation="resample", binarization="threshold", binarization_scope="per_layer",
                           threshold=0.3, eval_mask="soft", init_mean=3.0, init_std=0.5, prune_mlps=False,
                           layers_path="encoder.layer", attention_output="attention.output.dense",
                           mlp_output="output.dense", num_heads=4, extra={"seed": 3, "note": "x"})
    assert PruningConfig.from_dict(config.to_dict()) == config
    assert json.loads(json.dumps(config.to_dict())) == config.to_dict()
    path = config.save_pretrained(tmp_path)
    assert path == tmp_path / "pruning_config.json"
    assert {p.name for p in tmp_path.iterdir()} == {"pruning_config.json"}
    assert PruningConfig.from_pretrained(tmp_path) == config
    assert PruningConfig.from_pretrained(path) == config
    with pytest.raises(ValueError, match="unknown"):
        PruningConfig.from_dict({**config.to_dict(), "bogus": 1})
    with pytest.raises(ValueError, match="ablation"):
        PruningConfig.from_dict({**config.to_dict(), "ablation": "bogus"})
    path.write_text('{"ablation": "me')
    with pytest.raises(ValueError, match="JSON"):
        PruningConfig.from_pretrained(tmp_path)
    with pytest.raises(FileNotFoundError):
        PruningConfig.from_pretrained(tmp_path / "nowhere")


def test_wrapper_records_what_the_masks_are_for_without_touching_callers_config():
    config = PruningConfig(ablation="zero")
    pm = PrunableModel(tiny_model("qwen3"), config)
    assert config.model_type is None  # the caller's config is not mutated
    saved = pm.pruning_config
    assert (saved.model_type, saved.num_layers, saved.num_heads, saved.head_dim, saved.hidden_size) == \
        ("qwen3", LAYERS, HEADS, 16, HIDDEN)
