"""Model cards of masks made from a local base model: the card says the base is local and asks for its Hub id, which
`save_pretrained(..., base_model=...)` / `push_to_hub(..., base_model=...)` record; `push_to_hub` warns without it."""

from __future__ import annotations

import json
import warnings

import pytest
from test_artifacts import TOKEN, hub  # noqa: F401  (fixture: the in-process mock Hub)
from tiny_models import make_batch, tiny_model

from hf_heuristic_core import ArtifactError, PrunableModel, PruningConfig
from hf_heuristic_core.artifacts import HUB_ID_PLACEHOLDER, base_model_source


@pytest.fixture
def local_pruned(tmp_path):
    """Masks on a model loaded from a local folder (so the config records the folder as the base model)."""
    tiny_model("bert").save_pretrained(tmp_path / "base")
    pm = PrunableModel.from_pretrained(str(tmp_path / "base"), PruningConfig())
    pm.compute_means([make_batch("bert")], show_progress=False)
    return pm.eval()


def _front_matter(card: str) -> str:
    return card.split("---")[1]


def test_card_of_a_local_base_model_says_so_and_asks_for_the_hub_id(local_pruned, tmp_path):
    local = str(tmp_path / "base")
    assert local_pruned.pruning_config.base_model_name_or_path == local
    local_pruned.save_pretrained(tmp_path / "masks")
    card = (tmp_path / "masks" / "README.md").read_text()
    assert "base_model:" not in _front_matter(card)
    assert f"**The base model is a local folder** (`{local}`)" in card
    assert 'base_model="namespace/name"' in card
    assert f'PrunableModel.from_pretrained("{HUB_ID_PLACEHOLDER}"' in card
    assert f'from_pretrained("{local}"' not in card


def test_base_model_argument_names_the_hub_model_and_is_kept(local_pruned, tmp_path):
    local_pruned.save_pretrained(tmp_path / "masks", base_model="google/bert_uncased_L-2_H-32")
    card = (tmp_path / "masks" / "README.md").read_text()
    assert "base_model: google/bert_uncased_L-2_H-32" in _front_matter(card)
    assert 'PrunableModel.from_pretrained("google/bert_uncased_L-2_H-32"' in card
    assert "local folder" not in card
    saved = json.loads((tmp_path / "masks" / "pruning_config.json").read_text())
    assert saved["extra"]["base_model_hub_id"] == "google/bert_uncased_L-2_H-32"
    assert saved["base_model_name_or_path"] == str(tmp_path / "base")   # still loadable here
    local_pruned.save_pretrained(tmp_path / "again")                    # remembered for later saves
    assert "base_model: google/bert_uncased_L-2_H-32" in (tmp_path / "again" / "README.md").read_text()


def test_a_path_is_not_accepted_as_the_hub_id(local_pruned, tmp_path):
    with pytest.raises(ArtifactError, match=r"base_model='/tmp/x/model' is not a Hub id; pass the id"):
        local_pruned.save_pretrained(tmp_path / "masks", base_model="/tmp/x/model")
    assert not (tmp_path / "masks").exists()


def test_loading_an_artifact_uses_the_folder_here_and_the_hub_id_elsewhere(tmp_path):
    config = PruningConfig(base_model_name_or_path=str(tmp_path / "gone"), extra={"base_model_hub_id": "org/name"})
    assert base_model_source(config) == "org/name"
    (tmp_path / "gone").mkdir()
    assert base_model_source(config) == str(tmp_path / "gone")
    assert base_model_source(PruningConfig(base_model_name_or_path="org/other")) == "org/other"


def test_push_to_hub_warns_about_a_local_base_model(hub, local_pruned):  # noqa: F811
    with pytest.warns(UserWarning, match="base model is the local folder .*pass base_model='namespace/name'"):
        local_pruned.push_to_hub("me/masks", token=TOKEN)
    assert "base_model:" not in _front_matter(hub.commits[-1]["files"]["README.md"].decode())


def test_push_to_hub_with_base_model_names_it_without_warning(hub, local_pruned):  # noqa: F811
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)
        local_pruned.push_to_hub("me/masks", token=TOKEN, base_model="org/tiny-bert")
    card = hub.commits[-1]["files"]["README.md"].decode()
    assert "base_model: org/tiny-bert" in _front_matter(card)
    config = json.loads(hub.commits[-1]["files"]["pruning_config.json"])
    assert config["extra"]["base_model_hub_id"] == "org/tiny-bert"
