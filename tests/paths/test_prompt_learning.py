"""PEFT prompt tuning and prefix tuning (the wrappers that feed the model virtual tokens, and for prefix tuning of an
encoder call its body directly) through every causal-LM, sequence-classification and seq2seq-LM class of every model
type in the map: with every unit zero-ablated no site sees an unmasked value, through the wrapper, the PEFT model
and its `generate()`. Prefix tuning is skipped where PEFT itself cannot run it (transformers 5.24 renamed
`past_key_values` to `cache`; PEFT 0.21 refuses encoder classifiers), and prompt tuning where the model itself
cannot take input embeddings (BART- and T5-style sequence classifiers)."""

from __future__ import annotations

import pytest
import torch

from auto_classes import (Row, SiteProbe, build, inputs_for, rows, set_all_masks,
                          shared_model_builds)  # noqa: F401  (fixture)
from hf_heuristic_core import PrunableModel, PruningConfig
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from tiny_models import skip_unless_peft_prefix_tuning_runs

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

peft = pytest.importorskip("peft")

TASK_TYPES = {"causal_lm": "CAUSAL_LM", "seq_cls": "SEQ_CLS", "seq2seq_lm": "SEQ_2_SEQ_LM"}
ROWS = [(row, task) for row in rows() for task in TASK_TYPES if task in row.tasks]
FAST = {"llama-LlamaForCausalLM", "bert-BertForSequenceClassification", "opt-OPTForCausalLM",
        "t5-T5ForConditionalGeneration"}
CASES = [pytest.param(row, task, method, id=f"{row.id}-{method}",
                      marks=() if row.id in FAST else pytest.mark.slow)
         for row, task in ROWS for method in ("prompt", "prefix")]


def _wrap(row: Row, task: str, method: str):
    model = build(row)
    settings = {"task_type": TASK_TYPES[task], "num_virtual_tokens": 3}
    config = peft.PromptTuningConfig(**settings) if method == "prompt" else peft.PrefixTuningConfig(**settings)
    torch.manual_seed(4)
    try:
        wrapped = peft.get_peft_model(model, config)
    except ValueError as error:   # PEFT refuses the model itself
        pytest.skip(f"PEFT cannot {method}-tune {row.class_name}: {error}")
    return model, wrapped


@pytest.mark.parametrize("row, task, method", CASES)
def test_prompt_learning_wrappers_are_masked(row, task, method):
    model, wrapped = _wrap(row, task, method)
    inputs = {k: v for k, v in inputs_for(model, row, padded=False).items() if k != "decoder_input_ids"}
    if task == "seq2seq_lm":
        inputs["labels"] = torch.randint(5, 99, (inputs["input_ids"].shape[0], 4),
                                         generator=torch.Generator().manual_seed(2))
    if method == "prefix":
        skip_unless_peft_prefix_tuning_runs(wrapped, inputs)
    try:   # (no library code involved: the PEFT model on its own)
        with torch.no_grad():
            wrapped(**inputs)
    except NotImplementedError as error:   # e.g. BART-style classifiers take no input embeddings
        pytest.skip(f"{row.class_name} cannot run {method} tuning at all: {error}")
    prunable = PrunableModel(wrapped, PruningConfig(ablation="zero")).eval()
    set_all_masks(prunable, 0)
    probe = SiteProbe(model)
    calls = [("wrapper", lambda: prunable(**inputs)), ("peft model", lambda: wrapped(**inputs))]
    if task != "seq_cls":
        generation = {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}
        calls.append(("peft generate", lambda: wrapped.generate(**generation, max_new_tokens=2, do_sample=False)))
        calls.append(("wrapper generate", lambda: prunable.generate(**generation, max_new_tokens=2,
                                                                     do_sample=False)))
    for name, call in calls:
        probe.clear()
        with torch.no_grad():
            call()
        assert probe.expected(model) <= set(probe.seen), f"{row.id} {method} via {name}: sites never ran"
        assert not probe.nonzero(), f"{row.id} {method} via {name}: {sorted(probe.nonzero())}"
