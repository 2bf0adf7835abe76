"""Peak memory of one pruning step: the one-copy KL step (same-model teacher) and what it takes to bring it to 0.65 of
the two-copy step (a separate frozen teacher copy, as in the paper's code).

Every configuration runs in a fresh process (peak RSS is per process: `VmHWM` from /proc/self/status), on random
weights of the BERT-base configuration (110M parameters), 2 optimizer steps at batch x length (default 32 x 128, the
paper's per-device batch and length):

    two_copies         teacher copy (eval, no grad) + masked student; plain KL                  (the reference)
    two_copies_ckpt    the same with activation checkpointing in the student                    (for comparison)
    one_copy           PruningTrainer, teacher='same_model' (masks disabled), plain KL
    one_copy_ckpt      + activation_checkpointing=True (recomputation replays each pass's masks)
    one_copy_ckpt_bf16 + teacher_logits_dtype='bfloat16'
    one_copy_ckpt_chunk + kl_chunk_size=1024
    one_copy_all       + all three

`--head seq`: BertForSequenceClassification (3 labels, the paper's setting; logits are tiny). `--head lm`:
BertForMaskedLM, per-token logits over the 30,522-token vocabulary (a decoder's situation: 500 MB of fp32 logits per
tensor at 32 x 128), where the KL options matter.

    python benchmarks/bench_memory.py --head seq --output benchmarks/results_memory_seq.json
    python benchmarks/bench_memory.py --head lm --output benchmarks/results_memory_lm.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import subprocess
import sys
import tempfile
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

CONFIGURATIONS = {
    "two_copies": {},
    "two_copies_ckpt": {"activation_checkpointing": True},
    "one_copy": {},
    "one_copy_ckpt": {"activation_checkpointing": True},
    "one_copy_ckpt_bf16": {"activation_checkpointing": True, "teacher_logits_dtype": "bfloat16"},
    "one_copy_ckpt_chunk": {"activation_checkpointing": True, "kl_chunk_size": 1024},
    "one_copy_all": {"activation_checkpointing": True, "teacher_logits_dtype": "bfloat16", "kl_chunk_size": 1024},
}


def status_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def build(head: str):
    import torch
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(num_labels=3)   # BERT-base: 12 layers x 12 heads, hidden 768, vocabulary 30,522
    return (BertForSequenceClassification if head == "seq" else BertForMaskedLM)(config).eval()


def batches(vocab: int, batch: int, seq: int, count: int):
    import torch
    generator = torch.Generator().manual_seed(0)
    return [{"input_ids": torch.randint(1000, vocab, (batch, seq), generator=generator),
             "attention_mask": torch.ones(batch, seq, dtype=torch.long)} for _ in range(count)]


def child(name: str, head: str, batch: int, seq: int, steps: int) -> dict:
    """One configuration in this (fresh) process; returns peak RSS and the step time."""
    import torch
    from datasets import Dataset

    from hf_heuristic_core import PrunableModel, PruningConfig
    from hf_heuristic_core.training.arguments import PruningArguments
    from hf_heuristic_core.training.losses import kl_to_teacher
    from hf_heuristic_core.training.trainer import PruningTrainer
    after_imports = status_mib("VmRSS")
    options = CONFIGURATIONS[name]
    model = build(head)
    data = batches(model.config.vocab_size, batch, seq, steps)
    times = []
    if name.startswith("two_copies"):
        teacher = copy.deepcopy(model).requires_grad_(False)
        if options.get("activation_checkpointing"):
            model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
        prunable = PrunableModel(model, PruningConfig(ablation="zero", init_mean=3.0))
        prunable.train_dropout = False
        prunable.train()
        optimizer = torch.optim.AdamW(prunable.mask_logits.parameters(), lr=0.1, weight_decay=0.0)
        for inputs in data:
            start = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            with torch.no_grad():
                target = teacher(**inputs).logits
            kl_to_teacher(prunable(**inputs).logits, target, inputs["attention_mask"]).backward()
            optimizer.step()
            times.append(time.perf_counter() - start)
    else:
        prunable = PrunableModel(model, PruningConfig(ablation="zero", init_mean=3.0))
        rows = {key: torch.cat([b[key] for b in data]).tolist() for key in ("input_ids", "attention_mask")}
        with tempfile.TemporaryDirectory() as folder:
            args = PruningArguments(output_dir=folder, per_device_train_batch_size=batch, max_steps=steps,
                                    use_cpu=True, report_to="none", disable_tqdm=True, save_strategy="no",
                                    logging_steps=steps, recipe="short", sparsity_warmup_steps=1,
                                    convergence_check=False, dataloader_drop_last=True, **options)
            trainer = PruningTrainer(model=prunable, args=args, train_dataset=Dataset.from_dict(rows))

            class Timer:   # step times from the Trainer's own loop
                def __init__(self):
                    self.last = None

                def on_step_begin(self, *a, **k):
                    self.last = time.perf_counter()

                def on_step_end(self, *a, **k):
                    times.append(time.perf_counter() - self.last)

            from transformers import TrainerCallback
            trainer.add_callback(type("StepTimer", (Timer, TrainerCallback), {})())
            trainer.train()
    return {"peak_rss_mib": status_mib("VmHWM"), "after_imports_rss_mib": after_imports,
            "step_s": times, "torch_threads": torch.get_num_threads()}


def run(name: str, head: str, batch: int, seq: int, steps: int, threads: int) -> dict:
    command = [sys.executable, __file__, "--child", name, "--head", head, "--batch", str(batch), "--seq", str(seq),
               "--steps", str(steps), "--threads", str(threads)]
    completed = subprocess.run(command, capture_output=True, text=True)
    if completed.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", choices=("seq", "lm"), default="seq")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--configurations", default=",".join(CONFIGURATIONS))
    parser.add_argument("--output", default=None, help="JSON file, rewritten after every configuration")
    parser.add_argument("--child", choices=list(CONFIGURATIONS), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        import torch
        torch.set_num_threads(args.threads)
        print(json.dumps(child(args.child, args.head, args.batch, args.seq, args.steps)))
        return
    report = {"head": args.head, "batch": args.batch, "seq": args.seq, "steps": args.steps, "threads": args.threads,
              "model": "random BERT-base (BertConfig())", "results": {}}
    for name in args.configurations.split(","):
        report["results"][name] = run(name, args.head, args.batch, args.seq, args.steps, args.threads)
        reference = report["results"].get("two_copies")
        if reference:
            for result in report["results"].values():
                result["ratio_to_two_copies"] = result["peak_rss_mib"] / reference["peak_rss_mib"]
                result["ratio_above_imports"] = ((result["peak_rss_mib"] - result["after_imports_rss_mib"]) /
                                                 (reference["peak_rss_mib"] - reference["after_imports_rss_mib"]))
        print(name, json.dumps(report["results"][name]), flush=True)
        if args.output:
            with open(args.output, "w") as handle:
                json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
