"""Learn head and MLP masks of a classifier with the model sharded over several GPUs (FSDP2), the same-model teacher
and the paper's KL objective. Launch one process per GPU:

    torchrun --nproc_per_node=4 examples/prune_fsdp.py --model bert-base-cased --output runs/fsdp-bert
    accelerate launch --num_processes 4 examples/prune_fsdp.py --model bert-base-cased --output runs/fsdp-bert

`--model` is any sequence classifier (Hub id or folder; a fresh head is added to a base model, so fine-tune it
first for a real study); the data is the offline HANS-style generator. FSDP2 wraps every block Transformers names in
`_no_split_modules` (`fsdp_config={"version": 2}` is all it takes); the mask state stays whole on every process
(docs/guides/scaling.md). Rank 0 writes the mask artifact to `--output`. `--tiny` builds a 2-layer random BERT
instead, to try the launch on any machine: on CPUs accelerate falls back to DDP and says so.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

from hf_heuristic_core import PrunableModel, PruningConfig, generate_nli
from hf_heuristic_core.training.arguments import PruningArguments
from hf_heuristic_core.training.trainer import PruningTrainer

FSDP_CONFIG = {"version": 2}   # FSDP2, one unit per block of _no_split_modules, full resharding after forward


def load(name: str, tiny: bool):
    if tiny:
        from transformers import BertConfig, BertForSequenceClassification
        from hf_heuristic_core.offline_models import minilm_path
        tokenizer = AutoTokenizer.from_pretrained(minilm_path())
        torch.manual_seed(0)
        config = BertConfig(vocab_size=tokenizer.vocab_size, hidden_size=64, num_hidden_layers=2,
                            num_attention_heads=4, intermediate_size=128, num_labels=2)
        return BertForSequenceClassification(config), tokenizer
    return AutoModelForSequenceClassification.from_pretrained(name, num_labels=2), AutoTokenizer.from_pretrained(name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="bert-base-cased")
    parser.add_argument("--output", required=True)
    parser.add_argument("--target_sparsity", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--batch", type=int, default=32, help="per-process batch")
    parser.add_argument("--tiny", action="store_true", help="a 2-layer random BERT, 8 steps (to try the launch)")
    options = parser.parse_args()
    model, tokenizer = load(options.model, options.tiny)
    data = generate_nli(train_size=512 if options.tiny else 20_000, id_eval_size=32, ood_eval_size_per_subcase=8)
    train = data["train"].map(lambda b: tokenizer(b["premise"], b["hypothesis"], truncation=True, max_length=128),
                              batched=True, remove_columns=["premise", "hypothesis", "label", "heuristic", "subcase",
                                                            "subcase_full", "counter_heuristic"])
    prunable = PrunableModel(model, PruningConfig(ablation="zero"))
    steps = 8 if options.tiny else options.steps
    args = PruningArguments(output_dir=options.output, target_sparsity=options.target_sparsity, recipe="short",
                            max_steps=steps, sparsity_warmup_steps=steps // 2, per_device_train_batch_size=options.batch,
                            fsdp=True, fsdp_config=FSDP_CONFIG, activation_checkpointing=not options.tiny,
                            bf16=torch.cuda.is_available() and not options.tiny, use_cpu=not torch.cuda.is_available(),
                            ddp_backend=None if torch.cuda.is_available() else "gloo", save_strategy="no",
                            logging_steps=10, report_to="none", dataloader_drop_last=True)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=train,
                             data_collator=DataCollatorWithPadding(tokenizer))
    trainer.train()   # rank 0 writes the artifact (masks.safetensors, pruning_config.json) to --output
    if trainer.is_world_process_zero():
        print(f"masks written to {options.output}: sparsity {prunable.sparsity():.3f}, "
              f"FSDP {'on' if trainer.is_fsdp_enabled else 'off (not on accelerators)'}")


if __name__ == "__main__":
    main()
