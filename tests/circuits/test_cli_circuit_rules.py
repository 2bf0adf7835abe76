"""`hf-heuristic-core circuit` under the output-folder rules, with its task taken right (a GGUF Llama is a causal LM)
and its scores checked against the model's shape. The cases of the new-user trial (#36): an export over its own
importance file, into its mask artifact, into a slim model's folder; a SmolLM2-shaped importance file exported with
another model's --model; faithfulness of the README's GGUF causal LM (a tiny GGUF here; the real SmolLM2 in the slow test)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.export import export_mib_circuits
from hf_heuristic_core.circuits.mib import MibConfig, read_mib_circuit
from hf_heuristic_core.cli import main
from hf_heuristic_core.run_folder import read_record
from tiny_gguf import write_lm_prompts, write_tiny_gguf
from tiny_models import tiny_model

IMPORTANCE_FILE = Path("importances", "ioi_tiny", "importances.json")
SCORES = {"heads": torch.tensor([[0.1, 0.9, 0.2, 0.3], [0.8, 0.4, 0.5, 0.05]]), "mlps": torch.tensor([0.7, 0.6])}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A tiny GGUF Llama (2 layers x 4 heads), LM prompts for it, an importance file of its shape and one of a
    3-layer model's, and a tiny GPT-2 mask artifact (2 x 4) with its model folder."""
    root = tmp_path_factory.mktemp("circuit-rules")
    folder, name = write_tiny_gguf(root / "gguf")
    export_mib_circuits(root / "fits", MibConfig(2, 4, 32), SCORES, "ioi_tiny", circuits=False)
    three = {"heads": torch.rand(3, 4, generator=torch.Generator().manual_seed(0)), "mlps": torch.rand(3)}
    export_mib_circuits(root / "three_layers", MibConfig(3, 4, 32), three, "ioi_tiny", circuits=False)
    gpt2 = tiny_model("gpt2", task="causal_lm")
    gpt2.save_pretrained(root / "gpt2")
    prunable = PrunableModel(gpt2, PruningConfig(ablation="zero"))
    with torch.no_grad():
        prunable.mask_logits.heads.copy_(SCORES["heads"])
        prunable.mask_logits.mlps.copy_(SCORES["mlps"])
    prunable.save_pretrained(root / "artifact")
    return {"gguf": folder, "gguf_file": name, "prompts": write_lm_prompts(root / "prompts.jsonl"),
            "fits": root / "fits" / IMPORTANCE_FILE, "three": root / "three_layers" / IMPORTANCE_FILE,
            "gpt2": root / "gpt2", "artifact": root / "artifact"}


def _run(argv, capsys) -> tuple[int, str]:
    code = main([str(a) for a in argv])
    captured = capsys.readouterr()
    return code, captured.err + captured.out


def test_export_over_its_own_importance_file_is_refused_and_the_file_kept(files, tmp_path, capsys):
    run = tmp_path / "x"
    assert main(["circuit", "export", "--scores", str(files["artifact"]), "--output_dir", str(run), "--name",
                 "ioi_tiny"]) == 0
    kept = (run / IMPORTANCE_FILE).read_bytes()
    for extra in ([], ["--overwrite_output_dir", "true"]):
        code, text = _run(["circuit", "export", "--scores", run / IMPORTANCE_FILE, "--sizes", "0.5", "--name",
                           "ioi_tiny", "--output_dir", run, *extra], capsys)
        assert code == 2 and f"holds this command's input --scores {run / IMPORTANCE_FILE}" in text
    assert (run / IMPORTANCE_FILE).read_bytes() == kept
    code, text = _run(["circuit", "export", "--scores", files["artifact"], "--output_dir", files["artifact"]],
                      capsys)
    assert code == 2 and "is this command's input --scores" in text
    assert sorted(p.name for p in files["artifact"].iterdir()) == ["README.md", "masks.safetensors",
                                                                   "pruning_config.json"]


def test_export_into_a_slim_models_folder_needs_overwrite_and_deletes_nothing(files, tmp_path, capsys):
    slim = tmp_path / "slim"
    slim.mkdir()
    (slim / "config.json").write_text("{}")
    (slim / "notes.txt").write_text("mine")
    argv = ["circuit", "export", "--scores", files["fits"], "--sizes", "0.5", "--output_dir", slim]
    code, text = _run(argv, capsys)
    assert code == 2 and "no run of 'circuit export' recorded its files (config.json, notes.txt)" in text
    assert sorted(p.name for p in slim.iterdir()) == ["config.json", "notes.txt"]
    assert _run([*argv, "--overwrite_output_dir", "true"], capsys)[0] == 0
    assert (slim / "notes.txt").read_text() == "mine" and (slim / "circuits" / "ioi_tiny" /
                                                            "circuit_50.json").is_file()


def test_the_same_export_repeats_another_is_refused_naming_the_difference(files, tmp_path, capsys):
    out = tmp_path / "mib"
    argv = ["circuit", "export", "--scores", files["fits"], "--sizes", "0.5", "--output_dir", out]
    assert _run(argv, capsys)[0] == 0 and _run(argv, capsys)[0] == 0
    assert read_record(out)["kind"] == "circuit export" and read_record(out)["finished"] is True
    code, text = _run([*argv[:-4], "--sizes", "0.1", "--output_dir", out], capsys)
    assert code == 2 and "settings differ: sizes: '0.5' -> '0.1'" in text
    code, text = _run(["circuit", "faithfulness", "--model", files["gpt2"], "--dataset", files["prompts"],
                       "--scores", files["fits"], "--output_dir", out], capsys)
    assert code == 2 and "another command ('circuit export', not 'circuit faithfulness')" in text
    # A folder written before run records, of the files this export writes (or an earlier version's one-folder
    # layout), is its own.
    legacy = tmp_path / "legacy"
    export_mib_circuits(legacy, MibConfig(2, 4, 32), SCORES, "ioi_tiny", sizes=[0.5])
    (legacy / "circuit_50.json").write_text("{}")
    assert _run([*argv[:-1], legacy], capsys)[0] == 0


def test_export_refuses_a_model_of_another_shape_naming_both(files, tmp_path, capsys):
    """A 3-layer importance file with a 2-layer --model wrote circuits of the file's shape and said nothing."""
    out = tmp_path / "mib"
    code, text = _run(["circuit", "export", "--scores", files["three"], "--model", files["gpt2"], "--output_dir",
                       out], capsys)
    assert code == 2
    assert (f"--scores {files['three']} rank units of 3 layers x 4 heads, d_model 32, but --model {files['gpt2']} "
            "has 2 layers x 4 heads, d_model 32: the scores were made for another model.") in text
    assert not out.exists()   # refused after the claim: no folder, no record left behind
    assert _run(["circuit", "export", "--scores", files["fits"], "--model", files["gpt2"], "--output_dir", out],
                capsys)[0] == 0
    assert read_mib_circuit(out / IMPORTANCE_FILE).cfg.n_layers == 2
    # A GPT-2 artifact with a Llama of the same shape as --model: another model all the same.
    code, text = _run(["circuit", "export", "--scores", files["artifact"], "--model", files["gguf"], "--gguf_file",
                       files["gguf_file"], "--output_dir", tmp_path / "llama"], capsys)
    assert code == 2 and f"were made on a 'gpt2' model, but --model {files['gguf']} is 'llama'" in text


def test_faithfulness_refuses_scores_of_another_shape_before_loading_the_model(files, tmp_path, capsys):
    out = tmp_path / "curves"
    code, text = _run(["circuit", "faithfulness", "--model", files["gguf"], "--gguf_file", files["gguf_file"],
                       "--dataset", files["prompts"], "--scores", f"{files['fits']},{files['three']}",
                       "--output_dir", out], capsys)
    assert code == 2
    assert (f"--scores {files['three']} do not fit --model {files['gguf']}: {files['three']}: heads scores have "
            "shape (3, 4) (layers x heads), but this model's heads are (2, 4)") in text
    assert "LOAD REPORT" not in text and not out.exists()


@pytest.mark.parametrize("config, task, expected", [
    ({"model_type": "bert", "architectures": ["BertForSequenceClassification"]}, "auto", False),
    ({"model_type": "gpt2", "architectures": ["GPT2LMHeadModel"]}, "auto", True),
    ({"model_type": "bert", "architectures": ["BertModel"]}, "sequence_classification", False),
    ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "causal_lm", True),
])
def test_the_task_comes_from_the_flag_or_the_head(config, task, expected):
    from transformers import AutoConfig

    from hf_heuristic_core.cli.circuit import CircuitArguments, resolve_circuit_task
    hf_config = AutoConfig.for_model(config.pop("model_type"), **config)
    assert resolve_circuit_task(CircuitArguments(action="attribute", model="m", task=task), hf_config) is expected


def test_the_task_of_a_headless_config_comes_from_a_scores_artifact_or_is_refused(files):
    from transformers import AutoConfig

    from hf_heuristic_core.cli.circuit import CircuitArguments, resolve_circuit_task
    from hf_heuristic_core.errors import UsageError
    headless = AutoConfig.for_model("gpt2", architectures=["GPT2Model"])
    with pytest.raises(UsageError, match="cannot tell whether --model m is a causal LM or a sequence classifier.*"
                                         "pass --task causal_lm or --task sequence_classification"):
        resolve_circuit_task(CircuitArguments(action="faithfulness", model="m", scores=str(files["fits"])), headless)
    # The artifact was made on a GPT2LMHeadModel: a causal LM.
    args = CircuitArguments(action="faithfulness", model="m", scores=f"{files['fits']},{files['artifact']}")
    assert resolve_circuit_task(args, headless) is True
    token = AutoConfig.for_model("bert", architectures=["BertForTokenClassification"])
    with pytest.raises(UsageError, match="is a token_classification model; circuits score"):
        resolve_circuit_task(CircuitArguments(action="attribute", model="m"), token)


def test_a_bad_task_flag_is_refused(capsys):
    code, text = _run(["circuit", "attribute", "--model", "m", "--dataset", "ioi", "--output_dir", "o", "--task",
                       "seq2seq"], capsys)
    assert code == 2 and "--task 'seq2seq' is not one of auto, causal_lm, sequence_classification" in text


def test_attribute_and_faithfulness_run_on_a_gguf_causal_lm(files, tmp_path, capsys):
    """The GGUF config names no class: it used to load as a sequence classifier and then fail for wanting a causal
    LM. --task auto now reads it as the causal LM it is."""
    common = ["--model", files["gguf"], "--gguf_file", files["gguf_file"], "--dataset", files["prompts"],
              "--num_examples", "8", "--batch_size", "8", "--ablation", "zero"]
    attr = tmp_path / "attr"
    code, text = _run(["circuit", "attribute", *common, "--method", "patching", "--output_dir", attr], capsys)
    assert code == 0, text
    info = json.loads((attr / "attribution.json").read_text())
    assert info["task"] == "causal_lm" and info["gguf_file"] == files["gguf_file"] and info["examples"] == 8
    name = f"{files['prompts'].stem}_gguf"                  # derived: the --dataset's and the --model's names
    assert read_mib_circuit(attr / "importances" / name / "importances.json").cfg.n_layers == 2
    assert len(list((attr / "circuits" / name).iterdir())) == 9
    curves = tmp_path / "curves"
    code, text = _run(["circuit", "faithfulness", *common, "--scores", attr / "importances" / name /
                       "importances.json", "--random_seeds",
                       "0", "--output_dir", curves], capsys)
    assert code == 0, text
    document = json.loads((curves / "curves.json").read_text())
    assert document["description"]["task"] == "causal_lm" and document["metric"] == "logit_difference"
    assert set(document["curves"]) == {"importances", "random-seed0"}
    assert document["curves"]["importances"]["faithfulness"][-1] == pytest.approx(1.0)
    assert read_record(curves)["kind"] == "circuit faithfulness" and read_record(curves)["finished"] is True


@pytest.mark.slow
def test_faithfulness_on_the_readmes_smollm2(smollm2_dir, tmp_path, capsys):
    """The README's SmolLM2-135M from the command line, --task auto, IOI prompts through its real tokenizer. Its
    weights come from the shipped GGUF, read once per session (`smollm2_dir`): reading the file takes the circuit
    command three parses of 15-60 s each, and what is GGUF-specific (a config naming no class read as the causal LM
    it is, the tokenizer and weights read with --gguf_file) is the tiny-GGUF test above."""
    scores = {"heads": torch.rand(30, 9, generator=torch.Generator().manual_seed(0)), "mlps": torch.rand(30)}
    export_mib_circuits(tmp_path / "rank", MibConfig(30, 9, 576), scores, "ioi_smollm2", circuits=False)
    code, text = _run(["circuit", "faithfulness", "--model", smollm2_dir, "--dataset", "ioi",
                       "--num_examples", "4", "--batch_size", "4", "--ablation", "zero", "--random_seeds", "",
                       "--scores", tmp_path / "rank", "--output_dir", tmp_path / "curves"],
                      capsys)
    assert code == 0, text
    document = json.loads((tmp_path / "curves" / "curves.json").read_text())
    assert document["description"]["task"] == "causal_lm" and document["n_units"] == 30 * 10
    assert Path(tmp_path / "curves" / "faithfulness_curves.png").is_file()


# ------------------------------------------------------------------ issue #36 review
def test_a_headless_classifier_config_is_not_given_a_random_head_from_an_artifact(tmp_path, capsys):
    """`faithfulness --model BASE --scores ARTIFACT` with the base model (`BertModel`) instead of the fine-tuned
    classifier the artifact was made on: --task auto took the artifact's class and scored a random head (CPR 1.7,
    m(full) = -3e-6, exit 0), where the guide says a config naming no head is refused."""
    from transformers import AutoConfig

    from hf_heuristic_core.cli.circuit import CircuitArguments, resolve_circuit_task
    from hf_heuristic_core.errors import UsageError
    classifier = tiny_model("bert", task="seq_cls")
    PrunableModel(classifier, PruningConfig(ablation="zero")).save_pretrained(tmp_path / "artifact")
    args = CircuitArguments(action="faithfulness", model="base", scores=str(tmp_path / "artifact"))
    headless = AutoConfig.for_model("bert", architectures=["BertModel"])
    with pytest.raises(UsageError, match=r"--model base has no classification head \(config.architectures "
                                         r"\['BertModel'\]\), but --scores .* was made on a "
                                         "BertForSequenceClassification.*--task sequence_classification"):
        resolve_circuit_task(args, headless)
    # A config that names no class at all (e.g. read from a GGUF file) still takes the artifact's task.
    assert resolve_circuit_task(args, AutoConfig.for_model("bert")) is False
    # A headless decoder gets an LM head from its tied embeddings, not a random one; an untied one would not.
    lm_args = CircuitArguments(action="faithfulness", model="base", scores=str(tmp_path / "lm"))
    PrunableModel(tiny_model("llama", task="causal_lm"), PruningConfig(ablation="zero")).save_pretrained(
        tmp_path / "lm")
    assert resolve_circuit_task(lm_args, AutoConfig.for_model("llama", architectures=["LlamaModel"],
                                                              tie_word_embeddings=True)) is True
    with pytest.raises(UsageError, match="has no language-model head"):
        resolve_circuit_task(lm_args, AutoConfig.for_model("llama", architectures=["LlamaModel"],
                                                           tie_word_embeddings=False))


def test_a_model_folder_without_a_tokenizer_is_refused_before_loading(files, tmp_path, capsys):
    """The tiny GPT-2 folder holds no tokenizer: transformers 5 would build an empty one and every prompt would be
    scored as unknown tokens, exit 0. Nothing is claimed: the corrected run may use the folder."""
    out = tmp_path / "curves"
    code, text = _run(["circuit", "faithfulness", "--model", files["gpt2"], "--dataset", files["prompts"],
                       "--scores", files["artifact"], "--random_seeds", "", "--output_dir", out], capsys)
    assert code == 2 and f"--model {files['gpt2']} holds no tokenizer" in text
    assert not out.exists() or not any(out.iterdir())
