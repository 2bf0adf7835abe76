"""Fine-tuning a base model into the checkpoints that `prune` and `effective-size` read: the study's first step and
`hf-heuristic-core finetune`, written once.

A stock `transformers.Trainer` run, with what pruning later needs:

- **fp32 weights** whatever the checkpoint stores: transformers 5 loads a bf16 checkpoint (SmolLM2, Llama) as bf16,
  and AdamW steps of lr 1e-5 on bf16 weights are mostly rounded away;
- **a padding token** for decoder tokenizers (Llama, SmolLM2, GPT-2 have none; batches of pairs need one), and its
  id in the config (decoder classifiers read the last non-padding token);
- **checkpoint disk**: the need is checked before the first step (`finetune_checkpoints`), and every checkpoint but the
  newest keeps its weights only (effective size reads nothing else; the newest keeps its resume state);
- **a final model** in `OUTPUT_DIR/final` with its tokenizer, which `prune --model` takes as it is;
- **readable files**: transformers 5 writes `model.safetensors` with mode 0600 (through a temp file), which hides
  the checkpoints and the final model from colleagues on a shared filesystem; they get the umask's modes instead.
"""

from __future__ import annotations

import logging
import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["FINAL_DIR", "FINETUNE_TASKS", "check_sees_only_the_past", "ensure_padding_token", "finetune",
           "load_finetune_model", "planned_checkpoints"]

logger = logging.getLogger(__name__)

FINAL_DIR = "final"
FINETUNE_TASKS = {"sequence_classification": "AutoModelForSequenceClassification",
                  "causal_lm": "AutoModelForCausalLM"}


def ensure_padding_token(tokenizer: Any) -> None:
    """Pad with the end-of-sequence token when the tokenizer has no padding token (decoders), as their classifiers
    expect; a tokenizer with neither cannot batch, which is said with the fix."""
    if tokenizer.pad_token is None:
        if tokenizer.eos_token is None:
            raise ValueError("The tokenizer has neither a padding nor an end-of-sequence token, so batches cannot be "
                             "padded; save the model's tokenizer with a pad_token and pass that folder as --model.")
        tokenizer.pad_token = tokenizer.eos_token
        logger.info("The tokenizer has no padding token; padding with its end-of-sequence token %r.",
                    tokenizer.eos_token)


def load_finetune_model(source: str | os.PathLike, task: str = "sequence_classification",
                        num_labels: int | None = None, tokenizer: Any = None,
                        label_names: Sequence[str] | None = None, **hf_kwargs: Any):
    """The model to fine-tune, in fp32: a classifier with `num_labels` (named by `label_names`, if given; a fresh
    head when the checkpoint has none or another width) or a causal LM; the tokenizer's padding id in its config."""
    import torch
    import transformers
    if task not in FINETUNE_TASKS:
        raise ValueError(f"Fine-tuning task {task!r} is not one of {', '.join(FINETUNE_TASKS)}.")
    kwargs: dict[str, Any] = {}
    if task == "sequence_classification" and num_labels:
        kwargs["num_labels"] = int(num_labels)
        if label_names:
            kwargs["id2label"] = dict(enumerate(label_names))
            kwargs["label2id"] = {name: index for index, name in enumerate(label_names)}
    model_class = getattr(transformers, FINETUNE_TASKS[task])
    model = model_class.from_pretrained(source, dtype=torch.float32, **kwargs, **hf_kwargs)
    if hf_kwargs.get("gguf_file"):   # dequantized floats; the GGUF quantizer marker makes the Trainer refuse them
        from .artifacts import plain_gguf_model  # lazy: this module loads without torch
        plain_gguf_model(model)
    if task == "causal_lm":
        check_sees_only_the_past(model, source)
    if tokenizer is not None and model.config.pad_token_id is None:
        model.config.pad_token_id = tokenizer.pad_token_id
    return model


def check_sees_only_the_past(model: Any, source: str | os.PathLike) -> None:
    """Refuse a "causal LM" whose prediction at a token depends on later tokens. An encoder loaded as one (BERT's
    `BertLMHeadModel` without `is_decoder`, which transformers only warns about) attends both ways, so
    language-model training teaches it to copy the next token: a model that looks trained and predicts nothing.
    Two 3-token inputs that differ only in their last token must give the same logits at the first two positions."""
    import torch
    vocab = model.get_input_embeddings().num_embeddings
    if vocab < 4:
        return
    device = next(model.parameters()).device
    ids = torch.tensor([[0, 1, 2], [0, 1, 3]], device=device)
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(input_ids=ids).logits.float()
    finally:
        model.train(was_training)
    if not torch.allclose(logits[0, :2], logits[1, :2], rtol=1e-4, atol=1e-5):
        raise ValueError(f"task 'causal_lm' (--task causal_lm): {source} ({model.config.model_type}) is not a causal "
                         "LM: its prediction at a token changes with the tokens after it (an encoder such as BERT "
                         "attends both ways), so language-model training would teach it to copy the next token. "
                         "Fine-tune a decoder (GPT-2, Llama, Qwen2, ...) as a causal LM, or this model with --task "
                         "sequence_classification.")


def planned_checkpoints(args: Any, train_rows: int) -> tuple[int, int]:
    """(optimizer steps, steps between checkpoints) of a run, for the disk check; no checkpoints: every = steps."""
    per_step = args.per_device_train_batch_size * max(args.gradient_accumulation_steps, 1) * max(args.world_size, 1)
    per_epoch = max(1, math.ceil(train_rows / per_step))
    steps = int(args.max_steps) if args.max_steps and args.max_steps > 0 else \
        math.ceil(per_epoch * args.num_train_epochs)
    strategy = str(getattr(args.save_strategy, "value", args.save_strategy))
    if strategy == "steps":
        every = math.ceil(args.save_steps * steps) if args.save_steps < 1 else int(args.save_steps)
    elif strategy == "epoch":
        every = per_epoch
    else:
        every = steps + 1
    return steps, max(1, every)


def _ordinary_permissions_callback():
    """A `TrainerCallback` giving each new checkpoint the umask's modes (see the module docstring)."""
    from transformers import TrainerCallback

    from .io_utils import ordinary_permissions

    class OrdinaryPermissions(TrainerCallback):
        def on_save(self, args, state, control, **kwargs):
            folder = Path(args.output_dir) / f"checkpoint-{state.global_step}"
            if state.is_world_process_zero and folder.is_dir():
                ordinary_permissions(folder)
            return control

    return OrdinaryPermissions()


def finetune(model: Any, args: Any, train_dataset: Any, *, tokenizer: Any, data_collator: Any = None,
             eval_dataset: Any = None, callbacks: Sequence[Any] = (), resume: str | bool | None = None,
             compute_metrics: Any = None, tokenizer_in_checkpoints: bool = False):
    """Train `model` with the stock `Trainer` (see the module docstring) and save the final model with its tokenizer
    into `args.output_dir/final` (where prune and effective-size look for it); returns the trainer. Callbacks with a `bind(trainer)`
    method (the effective-size tracker) are bound before training. `tokenizer_in_checkpoints` saves the tokenizer
    into every `checkpoint-*` as well, so each one loads on its own."""
    import transformers

    from .io_utils import ordinary_permissions
    from .finetune_checkpoints import KeepResumeStateInNewestCheckpoint, check_disk_for_checkpoints
    steps, every = planned_checkpoints(args, len(train_dataset))
    need = check_disk_for_checkpoints(model, steps, every, args.output_dir)
    logger.info("Fine-tuning will write %d checkpoints, %.1f GiB in all (%.1f GiB available).", need["checkpoints"],
                need["total"] / 2**30, need["available"] / 2**30)
    trainer = transformers.Trainer(model=model, args=args, train_dataset=train_dataset, eval_dataset=eval_dataset,
                                   data_collator=data_collator, compute_metrics=compute_metrics,
                                   processing_class=tokenizer if tokenizer_in_checkpoints else None,
                                   callbacks=[KeepResumeStateInNewestCheckpoint(), _ordinary_permissions_callback(),
                                              *callbacks])
    for callback in callbacks:
        if hasattr(callback, "bind"):
            callback.bind(trainer)
    trainer.train(resume_from_checkpoint=resume)
    final = Path(args.output_dir) / FINAL_DIR
    trainer.save_model(str(final))
    tokenizer.save_pretrained(str(final))
    if args.should_save:   # also checkpoints an interrupted earlier run saved before it could fix them
        for folder in [final, *Path(args.output_dir).glob("checkpoint-*")]:
            ordinary_permissions(folder)
    return trainer
