"""The tiny study that `test_slim_report.py` and `test_analyze_study.py` read: a random 2-layer BERT classifier with
MiniLM's tokenizer (so the study skips fine-tuning), sparsity 0.5, seeds 0 and 1. Built once per test session across
xdist workers (`shared_builds.build_once`); tests read it and copy what they change."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import transformers

HIDDEN, HEADS, HEAD_DIM, INTERMEDIATE = 32, 4, 8, 48
# The generated data of the tiny study (an older manifest's data record must rebuild exactly these sets).
TINY_DATA = {"train_size": 48, "id_eval_size": 40, "ood_per_case": 3, "max_length": 24}


@pytest.fixture(scope="session")
def tiny_study(tmp_path_factory, minilm_dir) -> Path:
    """The finished study folder (`report.json`, `runs/`, `report/`)."""
    from shared_builds import build_once

    from hf_heuristic_core.study import StudyArguments
    from hf_heuristic_core.study.run import run_study

    def build(folder: Path) -> None:
        tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
        config = transformers.BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=HIDDEN,
                                         num_attention_heads=HEADS, num_hidden_layers=2,
                                         intermediate_size=INTERMEDIATE, max_position_embeddings=64, num_labels=2,
                                         initializer_range=0.2)
        transformers.set_seed(0)
        transformers.BertForSequenceClassification(config).save_pretrained(folder / "tiny_classifier")
        tokenizer.save_pretrained(folder / "tiny_classifier")
        previous = torch.get_num_threads()
        torch.set_num_threads(1)   # tiny matmuls: thread hand-off costs dominate on a shared 2-core machine
        try:
            run_study(StudyArguments(output_dir=str(folder / "study"), model=str(folder / "tiny_classifier"),
                                     sparsities="0.5", seeds="0,1", prune_steps=6, prune_batch_size=8,
                                     means_examples=16, ablation_non_core_sample=1, max_core_units=1, device="cpu",
                                     **TINY_DATA))
        finally:
            torch.set_num_threads(previous)

    return build_once(tmp_path_factory, "tiny-study", build) / "study"
