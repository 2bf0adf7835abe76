"""A mask artifact of a model read from a GGUF file records that file (`base_model_gguf_file`), so that
`PrunableModel.from_pretrained(artifact)` and `export` without `--gguf_file` read the same model again; an artifact
saved before the file was recorded fails with a message naming `gguf_file=` / `--gguf_file`, and loads with it.
On a tiny random GGUF Llama (`tests/tiny_gguf.py`), so each load takes a fraction of a second."""

from __future__ import annotations

import json

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.cli import main
from hf_heuristic_core.errors import ArtifactError
from tiny_gguf import write_tiny_gguf

HEADS = torch.tensor([[1.0, 1, 0, 0], [1, 1, 1, 1]])   # whole key/value groups (2 query heads each)
MLPS = torch.tensor([1.0, 0])


@pytest.fixture(scope="module")
def gguf_artifact(tmp_path_factory):
    """(model folder, GGUF file name, artifact folder) of fixed unit masks on the tiny GGUF Llama."""
    root = tmp_path_factory.mktemp("gguf")
    folder, name = write_tiny_gguf(root / "model")
    prunable = PrunableModel.from_pretrained(str(folder), PruningConfig(ablation="zero"), gguf_file=name)
    prunable.set_masks(heads=HEADS, mlps=MLPS)
    prunable.save_pretrained(root / "masks")
    return folder, name, root / "masks"


def _older(artifact, tmp_path):
    """The same artifact as a release before this one wrote it: no base_model_gguf_file."""
    import shutil
    older = tmp_path / "older"
    shutil.copytree(artifact, older)
    saved = json.loads((older / "pruning_config.json").read_text())
    del saved["base_model_gguf_file"]
    (older / "pruning_config.json").write_text(json.dumps(saved))
    return older


def test_the_artifact_records_the_gguf_file_and_loads_again_without_it(gguf_artifact):
    folder, name, artifact = gguf_artifact
    saved = json.loads((artifact / "pruning_config.json").read_text())
    assert saved["base_model_gguf_file"] == name and saved["base_model_name_or_path"] == str(folder)
    card = (artifact / "README.md").read_text()
    assert f'gguf_file="{name}"' in card and f"GGUF file `{name}`" in card
    again = PrunableModel.from_pretrained(str(artifact)).eval()
    assert type(again.model).__name__ == "LlamaForCausalLM"
    assert again.pruning_config.base_model_gguf_file == name
    masks = again.get_masks(binary=True)
    assert torch.equal(masks["heads"], HEADS) and torch.equal(masks["mlps"], MLPS)


def test_a_model_not_read_from_gguf_records_none_even_with_a_gguf_artifacts_settings(gguf_artifact, tmp_path):
    from tiny_models import tiny_model
    tiny_model("llama", task="causal_lm").save_pretrained(tmp_path / "plain")
    settings = PruningConfig.from_pretrained(gguf_artifact[2]).settings_only()
    assert settings.base_model_gguf_file == gguf_artifact[1]
    prunable = PrunableModel.from_pretrained(str(tmp_path / "plain"), settings)
    assert prunable.pruning_config.base_model_gguf_file is None   # what was loaded, not what the settings said


def test_export_without_gguf_file_reads_the_recorded_one(gguf_artifact, tmp_path, capsys):
    folder, _, artifact = gguf_artifact
    out = tmp_path / "slim"
    assert main(["export", "--model", str(folder), "--masks", str(artifact), "--output_dir", str(out)]) == 0, \
        capsys.readouterr().err
    assert "slim model (LlamaForCausalLM)" in capsys.readouterr().out
    config = json.loads((out / "config.json").read_text())
    assert config["num_hidden_layers"] == 2 and config["hf_heuristic_core_slim"]


def test_an_older_artifact_names_the_flag_that_loads_it(gguf_artifact, tmp_path, capsys):
    folder, name, artifact = gguf_artifact
    older = _older(artifact, tmp_path)
    with pytest.raises(ArtifactError, match=rf"gguf_file={name!r}.*--gguf_file {name}.*does not record its GGUF"):
        PrunableModel.from_pretrained(str(older))
    loaded = PrunableModel.from_pretrained(str(older), gguf_file=name)
    assert torch.equal(loaded.get_masks(binary=True)["heads"], HEADS)
    out = tmp_path / "slim"
    assert main(["export", "--model", str(folder), "--masks", str(older), "--output_dir", str(out)]) == 2
    err = capsys.readouterr().err
    assert f"--model {folder} holds GGUF file(s) ['{name}'] and no config.json; name the file to read: --gguf_file " \
           f"{name}." in err
    assert not out.exists()   # refused after the claim: no folder left behind
    assert main(["export", "--model", str(folder), "--masks", str(older), "--gguf_file", name, "--output_dir",
                 str(out)]) == 0


def test_prune_and_circuit_name_gguf_file_for_a_folder_of_gguf_files(gguf_artifact, tmp_path, capsys):
    folder, name, _ = gguf_artifact
    (tmp_path / "d.jsonl").write_text('{"text": "ab"}\n')
    assert main(["prune", "--model", str(folder), "--dataset", str(tmp_path / "d.jsonl"), "--target_sparsity", "0.5",
                 "--output_dir", str(tmp_path / "p")]) == 2
    assert f"name the file to read: --gguf_file {name}." in capsys.readouterr().err
    assert main(["circuit", "attribute", "--model", str(folder), "--dataset", "ioi", "--output_dir",
                 str(tmp_path / "a")]) == 2
    assert f"name the file to read: --gguf_file {name}." in capsys.readouterr().err
    assert not (tmp_path / "a").exists() and not (tmp_path / "p").exists()


def test_circuit_export_of_a_gguf_artifact_reads_its_base_model(gguf_artifact, tmp_path, capsys):
    """Without --model, circuit export reads the recorded base model's config (from its GGUF file) for the
    residual layout; with the GGUF folder as --model, the recorded file is used too."""
    from hf_heuristic_core.circuits.mib import read_mib_circuit
    folder, name, artifact = gguf_artifact
    for extra in ([], ["--model", str(folder)]):
        out = tmp_path / f"mib{len(extra)}"
        assert main(["circuit", "export", "--scores", str(artifact), "--edges", "none", "--write", "importances",
                     "--name", "ioi_tiny", "--output_dir", str(out), *extra]) == 0, capsys.readouterr().err
        cfg = read_mib_circuit(out / "importances" / "ioi_tiny" / "importances.json").cfg
        assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.parallel_attn_mlp) == (2, 4, 32, False)


def test_a_moved_gguf_folder_passed_with_masks_reads_the_recorded_file(gguf_artifact, tmp_path):
    """The base model given by hand (the GGUF folder moved or copied): `from_pretrained(folder, masks=artifact)`
    failed, saying the artifact does not record its GGUF file (it does) and suggesting a call that reads the old
    folder. Now the recorded file is read from the folder given; a folder without it is told which file was recorded,
    and the moved base model's error no longer blames a relative path."""
    import shutil
    folder, name, artifact = gguf_artifact
    copy = tmp_path / "copy"
    shutil.copytree(folder, copy)
    loaded = PrunableModel.from_pretrained(str(copy), masks=str(artifact))
    assert loaded.pruning_config.base_model_gguf_file == name
    assert torch.equal(loaded.get_masks(binary=True)["heads"], HEADS)
    other = tmp_path / "other"
    other.mkdir()
    shutil.copy(copy / name, other / "renamed.gguf")
    with pytest.raises(ArtifactError, match=rf"from_pretrained\('{other}', masks='{artifact}', "
                                            rf"gguf_file='renamed.gguf'\).*The artifact records '{name}', which this "
                                            "folder does not hold"):
        PrunableModel.from_pretrained(str(other), masks=str(artifact))
    moved = tmp_path / "moved-artifact"
    shutil.copytree(artifact, moved)
    config = json.loads((moved / "pruning_config.json").read_text())
    config["base_model_name_or_path"] = str(tmp_path / "gone")
    (moved / "pruning_config.json").write_text(json.dumps(config))
    with pytest.raises(ArtifactError, match="records: moved or deleted") as error:
        PrunableModel.from_pretrained(str(moved))
    assert "relative path" not in str(error.value)
