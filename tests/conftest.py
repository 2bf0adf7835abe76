"""Test-wide settings: offline Hub, one torch thread per xdist worker, the longest test files first, real-model
fixtures."""

from __future__ import annotations

import atexit
import os
import shutil
import sys
import tempfile
from pathlib import Path

# Shared test helpers (tiny_models.py) live beside this file; test modules import them by name.
sys.path.insert(0, str(Path(__file__).resolve().parent))

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
# Remote code of slim folders (trust_remote_code) is copied into this cache: one per test process, so two xdist
# workers never write the same cached module, and the user's cache is left alone.
_MODULES_CACHE = tempfile.mkdtemp(prefix="hf-modules-")
os.environ["HF_MODULES_CACHE"] = _MODULES_CACHE
atexit.register(shutil.rmtree, _MODULES_CACHE, ignore_errors=True)

import pytest  # noqa: E402
import torch  # noqa: E402

if os.environ.get("PYTEST_XDIST_WORKER"):
    torch.set_num_threads(1)

# Seconds each test file took in the last full measurement (benchmarks/speed/bench_test_suite.py --write-durations).
DURATIONS = Path(__file__).resolve().parent / "durations.json"
UNKNOWN_FILE_SECONDS_PER_TEST = 1.0


def pytest_collection_modifyitems(session, config, items):
    """The longest test files first, each file's tests together and in their own order. With whole files per worker
    in this order (`pytest_xdist_make_scheduler` below) each xdist worker takes the next file when it runs dry, so the long files
    start at once and the short ones fill the gaps: both workers finish together. A file the durations do not
    know counts one second per test."""
    import json
    try:
        seconds = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return
    import collections
    counts = collections.Counter(item.nodeid.split("::")[0] for item in items)   # paths relative to the rootdir
    weight = {path: seconds.get(path, UNKNOWN_FILE_SECONDS_PER_TEST * count) for path, count in counts.items()}
    order = {id(item): index for index, item in enumerate(items)}
    items.sort(key=lambda item: (-weight[item.nodeid.split("::")[0]], item.nodeid.split("::")[0], order[id(item)]))


_FROZEN_FOR: list = [None]   # the test module whose start last froze the heap


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item):
    """At the start of each test module (the previous module's fixtures are torn down by then), collect once and move
    every object still alive (imports, collected tests, session-wide builds) into the garbage collector's permanent
    generation. None of it is garbage, but every full collection walked all of it: transformers' `Trainer.train`
    starts with accelerate's `free_memory()`, a `gc.collect()`, and a worker holding 0.6-1.5 million tracked objects
    paid 0.4-1 s per call, about 260 calls per run. Objects a module creates are collected as before."""
    module = getattr(item, "module", None)
    if module is _FROZEN_FOR[0]:
        return
    _FROZEN_FOR[0] = module
    import gc
    gc.collect()   # only the objects since the last freeze; nothing collectable is frozen
    gc.freeze()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config, log):
    """Under -n 2 each worker takes whole test files (module fixtures built once), in the collected order (longest
    first): xdist's `--dist loadfile --no-loadscope-reorder`. Chosen here, not in setup.cfg's addopts, so a run with
    `-p no:xdist` (tests/gpu) still parses; an explicit `--dist` other than the default `load` is respected."""
    if config.getoption("dist") != "load":
        return None
    from xdist.scheduler import LoadFileScheduling
    config.option.loadscopereorder = False
    return LoadFileScheduling(config, log)


@pytest.fixture(scope="session")
def minilm_dir():
    """Folder of the real all-MiniLM-L6-v2 weights (installed by the README's test command)."""
    from hf_heuristic_core.offline_models import minilm_path
    return minilm_path()


@pytest.fixture(scope="session")
def smollm2_file():
    """(folder, file name) of the real SmolLM2-135M GGUF. Reading it costs 15-60 s (transformers' GGUF reader parses
    the whole file, tokenizer included, for the config alone): tests of GGUF loading itself read it; the others take
    `smollm2_dir`."""
    from hf_heuristic_core.offline_models import smollm2_gguf
    return smollm2_gguf()


@pytest.fixture(scope="session")
def smollm2_dir(smollm2_file, tmp_path_factory):
    """The same SmolLM2-135M weights, dequantized to float32 once per test session and saved as a plain
    safetensors folder (config, weights, tokenizer) that loads in a second (`shared_builds`)."""
    from shared_builds import build_once

    def convert(folder):
        import transformers
        from safetensors.torch import save_model
        source, name = smollm2_file
        gguf = transformers.AutoModelForCausalLM.from_pretrained(source, gguf_file=name, dtype=torch.float32)
        config = gguf.config.to_dict()
        config.pop("quantization_config", None)   # float32 now; a GGUF-quantized model refuses save_pretrained
        config = transformers.LlamaConfig.from_dict(config)
        config.architectures = ["LlamaForCausalLM"]
        config.save_pretrained(folder)
        save_model(gguf, str(folder / "model.safetensors"), metadata={"format": "pt"})   # tied embeddings once
        transformers.AutoTokenizer.from_pretrained(source, gguf_file=name).save_pretrained(folder)

    return build_once(tmp_path_factory, "smollm2-float32", convert)


MAX_LENGTH = 40


@pytest.fixture(scope="session")
def tiny_bert_nli(tmp_path_factory, minilm_dir) -> Path:
    """A folder with `model/` (a random 2-layer BERT classifier, hidden 32, 4 heads, intermediate 37, no dropout,
    seed 0, saved with MiniLM's tokenizer) and `train.jsonl` (96 generated NLI pairs): the command-line tests' model
    and data, built once per session (`shared_builds`). Read-only."""
    from shared_builds import build_once

    def build(folder: Path) -> None:
        import transformers

        from hf_heuristic_core import generate_nli
        tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
        config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=32, num_attention_heads=4,
                                         num_hidden_layers=2, intermediate_size=37, max_position_embeddings=64,
                                         num_labels=2, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
        torch.manual_seed(0)
        transformers.BertForSequenceClassification(config).save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")
        generate_nli(train_size=96, id_eval_size=8, ood_eval_size_per_subcase=1, seed=0)["train"].to_json(
            str(folder / "train.jsonl"))

    return build_once(tmp_path_factory, "tiny-bert-nli", build)


@pytest.fixture(scope="session")
def nli_data():
    """Generated HANS-style NLI data (train 1024, id_eval 256, ood_eval 20 per subcase)."""
    from hf_heuristic_core import generate_nli
    return generate_nli(train_size=1024, id_eval_size=256, ood_eval_size_per_subcase=20, seed=0)


@pytest.fixture(scope="session")
def finetuned_minilm(minilm_dir, nli_data, tmp_path_factory):
    """MiniLM with a fresh 2-way head, fine-tuned for 2 epochs on 1024 generated NLI pairs (~30 s on 2 cores), built
    once per test session (the first xdist worker to ask builds it, the other reads it; `shared_builds`). Read-only:
    a test that writes into the model folder copies it first."""
    from shared_builds import build_once

    def fine_tune(folder):
        import transformers
        torch.manual_seed(0)
        tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
        train = nli_data["train"].map(
            lambda b: tokenizer(b["premise"], b["hypothesis"], truncation=True, max_length=MAX_LENGTH), batched=True,
            remove_columns=[c for c in nli_data["train"].column_names if c != "label"]).rename_column("label", "labels")
        model = transformers.AutoModelForSequenceClassification.from_pretrained(minilm_dir, num_labels=2)
        args = transformers.TrainingArguments(output_dir=str(folder / "run"), per_device_train_batch_size=32,
                                              num_train_epochs=2, learning_rate=1e-4, warmup_steps=5,
                                              report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True,
                                              seed=0)
        transformers.Trainer(model=model, args=args, train_dataset=train,
                             data_collator=transformers.DataCollatorWithPadding(tokenizer)).train()
        model.save_pretrained(folder / "model")
        tokenizer.save_pretrained(folder / "model")

    return build_once(tmp_path_factory, "finetuned-minilm", fine_tune) / "model"
