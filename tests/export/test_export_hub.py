"""`push_slim_to_hub` commits exactly the slim folder, against huggingface_hub's HTTP layer and a mock Hub."""

from __future__ import annotations

import torch
from test_artifacts import TOKEN, hub  # noqa: F401  (fixture)
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401

from hf_heuristic_core import PrunableModel, PruningConfig, load_slim, push_slim_to_hub


def test_push_slim_to_hub(hub, tmp_path, one_torch_thread):  # noqa: F811
    prunable = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="zero"))
    prunable.set_masks(heads=torch.tensor([[1., 0, 0, 1], [0, 0, 0, 0]]), mlps=torch.tensor([1., 0]))
    prunable.eval()
    slim = prunable.export_slim()
    push_slim_to_hub(slim, "me/slim-gpt2", token=TOKEN, commit_message="slim")
    (commit,) = hub.commits
    assert commit["repo_id"] == "me/slim-gpt2"
    assert set(commit["files"]) == {"config.json", "model.safetensors", "generation_config.json", "README.md",
                                    "modeling_hf_heuristic_core_slim.py"}   # uneven: the folder's own code too
    for name, data in commit["files"].items():
        (tmp_path / name).write_bytes(data)
    batch = make_batch("gpt2", padding="left")
    with torch.no_grad():
        difference = (load_slim(tmp_path)(**batch).logits - slim(**batch).logits)[batch["attention_mask"].bool()]
    assert difference.abs().max() <= 1e-5   # the reload may pick another attention implementation (sdpa)
