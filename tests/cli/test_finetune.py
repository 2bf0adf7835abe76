"""`hf-heuristic-core finetune`: a base model and a dataset become the checkpoints `prune` and `effective-size` read
(`checkpoint-*` with the tokenizer, the newest with its resume state, and `final/`), in a claimed output folder,
resumable; every error path says what to do. A tiny random BERT with MiniLM's tokenizer, a few steps."""

from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
import torch
import transformers

from hf_heuristic_core.cli import main
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def base(tmp_path_factory, minilm_dir):
    """A tiny base model (BertModel: no task head, like MiniLM) with MiniLM's tokenizer, 48 NLI-style rows with string
    labels, and the same model saved without a tokenizer."""
    folder = tmp_path_factory.mktemp("finetune")
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_attention_heads=4,
                                     num_hidden_layers=2, intermediate_size=37, max_position_embeddings=64,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    torch.manual_seed(0)
    model = transformers.BertModel(config)
    model.save_pretrained(folder / "base")
    tokenizer.save_pretrained(folder / "base")
    model.save_pretrained(folder / "no-tokenizer")
    rows = [{"premise": f"the doctor {i} saw the actor", "hypothesis": f"the actor {i % 5} saw the doctor",
             "label": "entailment" if i % 3 else "contradiction"} for i in range(48)]
    (folder / "train.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (folder / "bad.jsonl").write_text("\n".join(json.dumps({"sentence": "a b", "label": v}) for v in (0, 1, -1)))
    return folder


def _finetune(base: Path, output: Path, *extra: str) -> list[str]:
    return ["finetune", "--model", str(base / "base"), "--dataset", str(base / "train.jsonl"), "--output_dir",
            str(output), "--max_steps", "4", "--save_steps", "2", "--per_device_train_batch_size", "8",
            "--max_length", "16", "--eval_fraction", "0.25", "--use_cpu", "--report_to", "none", "--disable_tqdm",
            "true", "--logging_strategy", "no", "--learning_rate", "1e-3", "--seed", "3", *extra]


def _umask() -> int:
    current = os.umask(0)
    os.umask(current)
    return current


def _error(capsys) -> str:
    return " ".join(capsys.readouterr().err.split())


def test_finetune_writes_the_checkpoints_and_final_model_that_prune_reads(base, tmp_path, capsys, monkeypatch):
    out = tmp_path / "ft"
    # Interrupt the run after its first checkpoint, as a kill would.
    from hf_heuristic_core.study import checkpoints
    saves = []

    def interrupt(self, args, state, control, **kwargs):
        saves.append(state.global_step)
        raise KeyboardInterrupt
    monkeypatch.setattr(checkpoints.KeepResumeStateInNewestCheckpoint, "on_save", interrupt)
    assert main(_finetune(base, out)) == 130 and saves == [2]
    assert (out / "checkpoint-2" / "optimizer.pt").is_file() and not (out / "final").exists()
    monkeypatch.undo()

    steps = []
    original = transformers.Trainer.training_step

    def counted(self, *args, **kwargs):
        steps.append(self.state.global_step)
        return original(self, *args, **kwargs)
    monkeypatch.setattr(transformers.Trainer, "training_step", counted)
    assert main(_finetune(base, out, "--resume_from_checkpoint", "last")) == 0
    assert steps == [2, 3]   # resumed after step 2: two more steps, not four
    printed = capsys.readouterr().out
    assert f"final model         {out / 'final'} (with its tokenizer)" in printed
    assert f"checkpoints         2 under {out} (checkpoint-2 .. checkpoint-4)" in printed
    assert "classes             2 (contradiction, entailment)" in printed
    assert "evaluation          accuracy " in printed and ", loss " in printed
    assert "on 12 examples held out of" in printed and "the model was trained on the other 36" in printed
    assert f"hf-heuristic-core prune --model {out / 'final'}" in printed
    # The older checkpoint keeps its weights only, the newest its resume state; both load with their tokenizer.
    assert not (out / "checkpoint-2" / "optimizer.pt").exists() and (out / "checkpoint-4" / "optimizer.pt").is_file()
    for folder in ("checkpoint-2", "checkpoint-4", "final"):
        assert {"config.json", "model.safetensors", "tokenizer.json"} <= {p.name for p in (out / folder).iterdir()}
        # transformers writes model.safetensors 0600; the run gives it the umask's mode (the tests run under 022)
        assert stat.S_IMODE((out / folder / "model.safetensors").stat().st_mode) == 0o666 & ~_umask()
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["architectures"] == ["BertForSequenceClassification"]
    assert config["id2label"] == {"0": "contradiction", "1": "entailment"}
    record = json.loads((out / "hf_heuristic_core_run.json").read_text())
    assert record["kind"] == "finetune" and record["finished"] and record["summary"]["steps"] == 4

    monkeypatch.undo()
    pruned = tmp_path / "pruned"
    assert main(["prune", "--model", str(out / "final"), "--dataset", str(base / "train.jsonl"), "--output_dir",
                 str(pruned), "--max_steps", "2", "--per_device_train_batch_size", "8", "--means_examples", "8",
                 "--max_length", "16", "--use_cpu", "--disable_tqdm", "true", "--save_strategy", "no",
                 "--convergence_subnetworks", "2", "--convergence_batches", "1"]) == 0
    assert (pruned / "masks.safetensors").is_file()
    # Other settings in the same folder are another run: refused, naming the difference.
    assert main(_finetune(base, out, "--learning_rate", "1e-4")) == 2
    assert "settings differ: learning_rate: 0.001 -> 0.0001" in _error(capsys)


@pytest.mark.parametrize("extra, message", [
    (["--do_predict", "true"], "--do_predict is not used by finetune: finetune does not predict; drop the flag."),
    (["--task", "token_classification"], "--task 'token_classification' is not one of sequence_classification, "
                                         "causal_lm (token classification needs word-aligned labels"),
    (["--num_labels", "1"], "--num_labels 1: a classification head needs at least 2 classes"),
    (["--lerning_rate", "1"], "unknown flag(s) --lerning_rate (did you mean --learning_rate?); see "
                              "`hf-heuristic-core finetune --help`."),
    (["--eval_fraction", "1.5"], "--eval_fraction 1.5 must be a fraction in (0, 1)"),
    (["--resume_from_checkpoint", "last"], "--resume_from_checkpoint last: no checkpoint-* folder under"),
])
def test_bad_flags_are_refused_with_the_fix(base, tmp_path, capsys, extra, message):
    assert main(_finetune(base, tmp_path / "out", *extra)) == 2
    assert message in _error(capsys)
    assert not (tmp_path / "out").exists()   # a refused run leaves no claimed folder behind


def test_bad_inputs_are_refused_with_the_fix(base, tmp_path, capsys):
    args = [a for a in _finetune(base, tmp_path / "o") if a not in ("--eval_fraction", "0.25")]
    assert main([*args, "--eval_strategy", "steps"]) == 2
    assert "--eval_strategy steps needs evaluation data: pass --eval_split or --eval_fraction 0.1." in _error(capsys)
    assert main([*args, "--do_eval", "true"]) == 2
    assert "--do_eval needs evaluation data" in _error(capsys)
    no_tokenizer = [a.replace(str(base / "base"), str(base / "no-tokenizer")) for a in args]
    assert main(no_tokenizer) == 2
    assert f"--model {base / 'no-tokenizer'} holds no tokenizer" in _error(capsys)
    bad = [a.replace(str(base / "train.jsonl"), str(base / "bad.jsonl")) for a in args]
    assert main(bad) == 2
    assert "The 'label' column holds values that are not class ids: [-1]" in _error(capsys)
    assert main(["finetune", "--model", str(base / "base"), "--dataset", str(base / "train.jsonl")]) == 2
    assert "finetune needs --output_dir DIR" in _error(capsys)
    # prune refuses a model folder without a tokenizer too (transformers 5 would build an empty one).
    assert main(["prune", "--model", str(base / "no-tokenizer"), "--dataset", str(base / "train.jsonl"),
                 "--task", "sequence_classification", "--output_dir", str(tmp_path / "p"), "--use_cpu"]) == 2
    error = _error(capsys)
    assert "holds no tokenizer" in error and "reads every word as unknown" in error


def test_help_lists_every_accepted_flag_without_importing_torch(monkeypatch, capsys):
    from transformers import HfArgumentParser, TrainingArguments

    from hf_heuristic_core.cli.finetune import FinetuneScriptArguments
    parser = HfArgumentParser((FinetuneScriptArguments, TrainingArguments))
    accepted = {o for a in parser._actions for o in a.option_strings
                if o.startswith("--") and "-" not in o[2:] and not o.startswith("--no_")} - {"--help"}
    # Import the command afresh with torch and datasets unimportable and transformers a stand-in that fails on any
    # use (its spec stays findable: help reads TrainingArguments' source, not the module). In-process, so no
    # subprocess; test_help.py's subprocess check covers the other commands the same way.
    import types
    for name in ("torch", "datasets"):
        monkeypatch.setitem(sys.modules, name, None)

    class Untouchable(types.ModuleType):
        def __getattr__(self, name):
            raise AssertionError(f"finetune --help used transformers.{name}")
    stand_in = Untouchable("transformers")
    stand_in.__spec__ = sys.modules["transformers"].__spec__
    monkeypatch.setitem(sys.modules, "transformers", stand_in)
    import hf_heuristic_core.cli.flags as flags_package
    # Help is drawn from the flags module, imported afresh here; the package attribute is put back afterwards too,
    # so later tests see the one module the run imported.
    monkeypatch.setattr(flags_package, "finetune", flags_package.finetune)
    monkeypatch.delitem(sys.modules, "hf_heuristic_core.cli.flags.finetune")
    monkeypatch.delitem(sys.modules, "hf_heuristic_core.cli.finetune")         # the run: --help must not load it
    assert main(["finetune", "--help"]) == 0
    assert "hf_heuristic_core.cli.finetune" not in sys.modules
    listed = {line.split()[0] for line in capsys.readouterr().out.splitlines() if line.startswith("  --")}
    assert listed >= accepted and "--num_labels" in listed


# ------------------------------------------------------------------ issue #36 review
def test_finetune_reads_a_gguf_model_and_writes_a_plain_folder(tmp_path, capsys):
    """The GGUF error of every command named `--gguf_file`, which finetune did not have: a GGUF base model (the
    README's SmolLM2 is one) could not be fine-tuned at all. Now it is read dequantized and the final model is a
    plain folder (no GGUF quantizer left in its config) that prune reads."""
    from tiny_gguf import write_tiny_gguf
    folder, name = write_tiny_gguf(tmp_path / "gguf")
    rows = [{"text": f"ab c{chr(97 + i % 20)} d", "label": i % 2} for i in range(16)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    out = tmp_path / "ft"
    argv = ["finetune", "--model", str(folder), "--dataset", str(tmp_path / "data.jsonl"), "--output_dir", str(out),
            "--max_steps", "1", "--save_strategy", "no", "--per_device_train_batch_size", "8", "--max_length", "8",
            "--use_cpu", "--report_to", "none", "--disable_tqdm", "true"]
    assert main(argv) == 2
    assert f"name the file to read: --gguf_file {name}" in _error(capsys)   # a flag finetune now has
    assert main([*argv, "--gguf_file", name]) == 0, _error(capsys)
    config = json.loads((out / "final" / "config.json").read_text())
    assert config["architectures"] == ["LlamaForSequenceClassification"] and "quantization_config" not in config
    assert (out / "final" / "tokenizer.json").is_file()
    assert json.loads((out / "hf_heuristic_core_run.json").read_text())["settings"]["gguf_file"] == name


def test_study_does_not_name_a_gguf_flag_it_lacks(tmp_path, capsys):
    """study has no --gguf_file; its GGUF error named that flag, so following it failed with 'unknown flag'."""
    from tiny_gguf import write_tiny_gguf
    folder, name = write_tiny_gguf(tmp_path / "gguf")
    assert main(["study", "--model", str(folder), "--output_dir", str(tmp_path / "study")]) == 2
    error = _error(capsys)
    assert "reads no GGUF file (it has no --gguf_file)" in error
    assert f"hf-heuristic-core finetune --model {folder} --gguf_file {name}" in error
    assert not (tmp_path / "study").exists()


def test_a_finetune_run_folder_or_a_mask_artifact_as_model_names_the_folder_to_pass(base, tmp_path, capsys):
    """`prune --model runs/ft` (the run folder, not its final model) was told only that the folder has no
    config.json; the message now names runs/ft/final. A mask artifact passed as --model names its base model."""
    run = tmp_path / "ft"
    (run / "final").mkdir(parents=True)
    (run / "final" / "config.json").write_text("{}")
    (run / "hf_heuristic_core_run.json").write_text(json.dumps({"format": "hf_heuristic_core.run/1",
                                                                "kind": "finetune", "settings": {}}))
    artifact = tmp_path / "masks"
    artifact.mkdir()
    (artifact / "pruning_config.json").write_text(json.dumps({"base_model_name_or_path": "/models/base"}))
    prune = ["prune", "--dataset", str(base / "train.jsonl"), "--output_dir", str(tmp_path / "p")]
    assert main([*prune, "--model", str(run)]) == 2
    assert f"it is a finetune run's folder: pass its final model, --model {run / 'final'}" in _error(capsys)
    assert main([*prune, "--model", str(artifact)]) == 2
    assert "it is a mask artifact (masks only): pass the model its masks were learned on, --model /models/base" in \
        _error(capsys)


def test_causal_lm_fine_tuning_of_an_encoder_is_refused(base, tmp_path, capsys):
    """`--task causal_lm` on BERT loaded a `BertLMHeadModel` without `is_decoder` (transformers only warns) and
    trained it: every position sees the next token, so the run "learned" to copy it and exited 0."""
    text = tmp_path / "text.jsonl"
    text.write_text("\n".join(json.dumps({"text": f"the doctor {i} saw the actor"}) for i in range(16)) + "\n")
    args = [a.replace(str(base / "train.jsonl"), str(text)) for a in _finetune(base, tmp_path / "lm")
            if a not in ("--eval_fraction", "0.25")]
    assert main([*args, "--task", "causal_lm"]) == 2
    error = _error(capsys)
    assert "is not a causal LM: its prediction at a token changes with the tokens after it" in error
    assert "--task sequence_classification" in error and not (tmp_path / "lm").exists()


def test_a_decoder_passes_the_causal_check():
    from hf_heuristic_core.finetuning import check_sees_only_the_past
    model = transformers.GPT2LMHeadModel(transformers.GPT2Config(n_layer=1, n_head=2, n_embd=16, vocab_size=20))
    check_sees_only_the_past(model, "gpt2")   # no error
    assert model.training   # its mode is given back
