"""The data a circuit is scored on, tokenized with what the logit difference reads.

* `"ioi"`: the IOI-style template task (`circuits.ioi`), for causal LMs: `answer_id` / `foil_id`.
* `"nli"`: the study's generated HANS-style NLI pairs (`generate_nli`, its `id_eval` split: the training
  distribution), for sequence classifiers: `labels`.
* anything else: a Hub id, a `save_to_disk` folder or local files (`data.tables.load_table`). A classifier's table
  needs its text column(s) and a label column; a language model's table needs `text`, `answer` and `foil` columns
  (the prompt, the correct next token and the counterfactual one).
"""

from __future__ import annotations

from typing import Any

from ..errors import UsageError
from ..table_checks import load_dataset_checked
from .ioi import generate_ioi, tokenize_ioi
from ..data.generate import generate_nli
from ..data.tokenize import tokenize_dataset

__all__ = ["GENERATED_TASKS", "circuit_task_data"]

GENERATED_TASKS = ("ioi", "nli")


def circuit_task_data(source: str, tokenizer: Any, *, causal_lm: bool, size: int = 200, seed: int = 0,
                      max_length: int = 64, text_columns: str | None = None, split: str = "train",
                      dataset_config: str | None = None) -> Any:
    """At most `size` tokenized examples of `source` (see the module docstring)."""
    if source == "ioi":
        if not causal_lm:
            raise UsageError("--dataset ioi is a next-token task: it needs a causal language model (--model of a "
                             "*ForCausalLM); for a classifier use --dataset nli or your own labelled data.")
        return tokenize_ioi(generate_ioi(size, seed), tokenizer, max_length)
    if source == "nli":
        if causal_lm:
            raise UsageError("--dataset nli scores a sequence classifier's label logits; this model is a causal LM. "
                             "Use --dataset ioi, or a table with text, answer and foil columns.")
        data = generate_nli(train_size=0, id_eval_size=size, ood_eval_size_per_subcase=0, seed=seed)["id_eval"]
        return tokenize_dataset(data, tokenizer, None, max_length, keep_labels=True)
    table = load_dataset_checked(source, dataset_config, split, "--dataset")
    table = table.select(range(min(size, len(table))))
    if causal_lm:
        return tokenize_ioi(table, tokenizer, max_length)
    if not any(c in table.column_names for c in ("label", "labels")):
        raise UsageError(f"--dataset {source}: a classifier's logit difference needs a 'label' column; the table has "
                         f"{table.column_names}.")
    return tokenize_dataset(table, tokenizer, text_columns, max_length, keep_labels=True)
