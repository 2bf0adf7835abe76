"""compute_means from DataLoaders and datasets, get_means/set_means per kind, and means saved with their token
count, fingerprint and base model.

Every reference is computed by hand or by editing weights / own hooks, never through the package's mask
code. (Moved from tests/test_model.py.)
"""

from __future__ import annotations

import copy
import json

import pytest
import torch
from safetensors import safe_open

from hf_heuristic_core import PrunableModel, PruningConfig

from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import HEAD_DIM, HEADS, LAYERS, VOCAB, ManualMeans, make_batch, tiny_model

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _wrap(model, **config) -> PrunableModel:
    return PrunableModel(model, PruningConfig(**config))


def test_compute_means_accepts_dataloader_and_datasets(tmp_path):
    datasets = pytest.importorskip("datasets")
    model = tiny_model("bert")
    generator = torch.Generator().manual_seed(0)
    lengths = [5, 3, 7, 2, 6]
    rows = [{"input_ids": torch.randint(3, VOCAB, (n,), generator=generator).tolist(), "label": i % 3}
            for i, n in enumerate(lengths)]
    # Reference batches: right-padded with the model's pad id, batch size 2.
    padded = []
    for start in range(0, len(rows), 2):
        chunk = rows[start:start + 2]
        width = max(len(r["input_ids"]) for r in chunk)
        ids = torch.tensor([r["input_ids"] + [0] * (width - len(r["input_ids"])) for r in chunk])
        mask = torch.tensor([[1] * len(r["input_ids"]) + [0] * (width - len(r["input_ids"])) for r in chunk])
        padded.append({"input_ids": ids, "attention_mask": mask})
    manual = ManualMeans(copy.deepcopy(model), "bert").run(padded)
    assert manual.count == sum(lengths)

    pm = _wrap(copy.deepcopy(model))
    info = pm.compute_means(datasets.Dataset.from_list(rows), batch_size=2, show_progress=False)
    assert info["token_count"] == sum(lengths)
    torch.testing.assert_close(pm.get_means()["heads"].double(), manual.heads(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(pm.get_means()["mlps"].double(), manual.mlps(), atol=1e-5, rtol=1e-5)

    loader = torch.utils.data.DataLoader([{**b, "labels": torch.zeros(len(b["input_ids"]), dtype=torch.long)}
                                          for b in padded], batch_size=None)
    pm2 = _wrap(copy.deepcopy(model))
    info2 = pm2.compute_means(loader, show_progress=False)
    assert info2["token_count"] == sum(lengths)
    torch.testing.assert_close(pm2.get_means()["heads"].double(), manual.heads(), atol=1e-5, rtol=1e-5)
    assert info2["data_fingerprint"] == info["data_fingerprint"]  # same tokens, same fingerprint

    pm3 = _wrap(copy.deepcopy(model))
    other = pm3.compute_means([make_batch("bert", seed=9)], show_progress=False)
    assert other["data_fingerprint"] != info["data_fingerprint"]


@pytest.mark.parametrize("granularity", ["unit", "neuron"])
def test_get_means_mirrors_set_means_by_kind(granularity):
    pm = PrunableModel(tiny_model("bert"), PruningConfig(granularity=granularity, ablation="mean"))
    assert pm.get_means() == {}
    generator = torch.Generator().manual_seed(0)
    shapes = {kind: pm.kinds[kind].means_shape for kind in pm.kinds}
    means = {kind: torch.randn(shape, generator=generator, dtype=torch.float64) for kind, shape in shapes.items()}
    first = next(iter(means))
    pm.set_means({first: means[first]})
    assert list(pm.get_means()) == [first]   # kinds without means are left out
    pm.set_means(means)
    got = pm.get_means()
    assert set(got) == set(shapes)
    for kind, value in means.items():
        assert got[kind].dtype == torch.float32 and tuple(got[kind].shape) == shapes[kind]
        assert torch.equal(got[kind], value.float())
    got[first].add_(1.0)   # a copy: editing it leaves the model's means alone
    assert torch.equal(pm.get_means()[first], means[first].float())
    pm.set_means(pm.get_means())
    assert all(torch.equal(pm.get_means()[k], means[k].float()) for k in means)
    if granularity == "unit":   # the two-tensor form of set_means reads back by kind
        pm.set_means(means["heads"] * 2, means["mlps"] * 3)
        assert torch.equal(pm.get_means()["heads"], (means["heads"] * 2).float())
        assert torch.equal(pm.get_means()["mlps"], (means["mlps"] * 3).float())


def test_means_saved_with_token_count_fingerprint_and_base_model(tmp_path):
    model = tiny_model("bert")
    model.save_pretrained(tmp_path / "base")
    reloaded = type(model).from_pretrained(tmp_path / "base")
    pm = _wrap(reloaded)
    batch = make_batch("bert")
    info = pm.compute_means([batch], show_progress=False)
    assert info["token_count"] == int(batch["attention_mask"].sum())
    assert isinstance(info["data_fingerprint"], str) and len(info["data_fingerprint"]) >= 16
    assert info["base_model"] == str(tmp_path / "base")
    pm.save_pretrained(tmp_path / "artifact")
    with safe_open(str(tmp_path / "artifact" / "masks.safetensors"), framework="pt") as handle:
        metadata = handle.metadata()
        assert set(handle.keys()) >= {"means.heads", "means.mlps", "logits.heads", "logits.mlps"}
    saved = json.loads(metadata["means"])
    assert saved["token_count"] == info["token_count"]
    assert saved["data_fingerprint"] == info["data_fingerprint"]
    assert saved["base_model"] == str(tmp_path / "base")
    assert "base_model_revision" in saved
    config = json.loads((tmp_path / "artifact" / "pruning_config.json").read_text())
    assert config["base_model_name_or_path"] == str(tmp_path / "base")
    assert (config["model_type"], config["num_layers"], config["num_heads"], config["head_dim"]) == \
        ("bert", LAYERS, HEADS, HEAD_DIM["bert"])
