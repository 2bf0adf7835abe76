"""Peak memory of one pruning step: the one-copy KL step (same-model teacher) and what it takes to bring it to 0.65 of
the two-copy step (a separate frozen teacher copy, as in the paper's code).

Every configuration runs `PruningTrainer` for one optimizer step in a fresh process (peak RSS is per process:
`VmHWM` from /proc/self/status) on random weights of the BERT-base configuration (110M parameters), at batch x length
32 x 128 by default (the paper's per-device batch and length). The two-copy configurations are the same trainer
whose teacher is a deep copy of the model (`TwoCopyTrainer`), so the harness is identical and only the teacher
differs. glibc's malloc is told to return every large block when it is freed (`MALLOC_MMAP_THRESHOLD_=65536` in
the children; by default its threshold grows and freed tensors stay in the process), so the high-water mark follows
the live tensors instead of the allocator's history.

    two_copies          teacher copy (eval, no grad) + masked student; plain KL                (the reference)
    two_copies_ckpt     the same with activation checkpointing in the student                  (for comparison)
    one_copy            teacher='same_model' (masks disabled), plain KL
    one_copy_ckpt       + activation_checkpointing=True (recomputation replays each pass's masks)
    one_copy_ckpt_bf16  + teacher_logits_dtype='bfloat16'
    one_copy_ckpt_chunk + kl_chunk_size=1024
    one_copy_all        + all three

`--head seq`: BertForSequenceClassification (3 labels, the paper's setting; logits are tiny). `--head lm`:
BertForMaskedLM, per-token logits over the 30,522-token vocabulary (a decoder's situation: 500 MB of fp32 logits per
tensor at 32 x 128), where the KL options matter.

    python benchmarks/speed/bench_memory.py --head seq \\
        --output benchmarks/speed/results/bench_memory/bert-base_seq_b32_cpu_t2.json
    python benchmarks/speed/bench_memory.py --head lm \\
        --output benchmarks/speed/results/bench_memory/bert-base_lm_b32_cpu_t2.json
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
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
    """One configuration in this (fresh) process; returns peak RSS and the step times."""
    import torch
    from datasets import Dataset
    from transformers import TrainerCallback

    from hf_heuristic_core import PrunableModel, PruningConfig
    from hf_heuristic_core.training.arguments import PruningArguments
    from hf_heuristic_core.training.trainer import PruningTrainer

    class TwoCopyTrainer(PruningTrainer):
        """The paper code's setup: the teacher is a separate frozen copy of the model."""

        teacher_copy: torch.nn.Module

        def teacher_logits(self, inputs, example_index, student_like=None):
            with torch.no_grad():
                return self.teacher_copy(**inputs).logits.detach()

    times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, *args, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, *args, **kwargs):
            times.append(time.perf_counter() - self.start)

    after_imports = status_mib("VmRSS")
    options = CONFIGURATIONS[name]
    model = build(head)
    teacher = copy.deepcopy(model).requires_grad_(False) if name.startswith("two_copies") else None
    prunable = PrunableModel(model, PruningConfig(ablation="zero", relaxation_settings={"init_mean": 3.0}))
    data = batches(model.config.vocab_size, batch, seq, steps)
    rows = {key: torch.cat([b[key] for b in data]).tolist() for key in ("input_ids", "attention_mask")}
    with tempfile.TemporaryDirectory() as folder:
        args = PruningArguments(output_dir=folder, per_device_train_batch_size=batch, max_steps=steps, use_cpu=True,
                                report_to="none", disable_tqdm=True, save_strategy="no", logging_steps=steps,
                                recipe="short", sparsity_warmup_steps=1, convergence_check=False,
                                dataloader_drop_last=True, **options)
        trainer_class = TwoCopyTrainer if teacher is not None else PruningTrainer
        trainer = trainer_class(model=prunable, args=args, train_dataset=Dataset.from_dict(rows),
                                callbacks=[StepTimer()])
        trainer.teacher_copy = teacher
        before_training = status_mib("VmRSS")
        trainer.train()
    return {"peak_rss_mib": status_mib("VmHWM"), "after_imports_rss_mib": after_imports,
            "before_training_rss_mib": before_training, "step_s": times, "torch_threads": torch.get_num_threads()}


def run(name: str, head: str, batch: int, seq: int, steps: int, threads: int) -> dict:
    command = [sys.executable, __file__, "--child", name, "--head", head, "--batch", str(batch), "--seq", str(seq),
               "--steps", str(steps), "--threads", str(threads)]
    env = {**os.environ, "MALLOC_MMAP_THRESHOLD_": "65536"}   # see the module docstring
    completed = subprocess.run(command, capture_output=True, text=True, env=env)
    if completed.returncode != 0:
        raise RuntimeError(f"{name} failed:\n{completed.stderr[-3000:]}")
    return json.loads(completed.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--head", choices=("seq", "lm"), default="seq")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--steps", type=int, default=1)
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
              "model": "random BERT-base (BertConfig())", "malloc": "MALLOC_MMAP_THRESHOLD_=65536", "results": {}}
    for name in args.configurations.split(","):
        report["results"][name] = run(name, args.head, args.batch, args.seq, args.steps, args.threads)
        reference = report["results"].get("two_copies")
        if reference:
            for result in report["results"].values():
                result["ratio_to_two_copies"] = result["peak_rss_mib"] / reference["peak_rss_mib"]
                result["ratio_above_imports"] = ((result["peak_rss_mib"] - result["after_imports_rss_mib"]) /
                                                 (reference["peak_rss_mib"] - reference["after_imports_rss_mib"]))
                result["step_ratio_to_two_copies"] = (statistics.median(result["step_s"]) /
                                                      statistics.median(reference["step_s"]))
        print(name, json.dumps(report["results"][name]), flush=True)
        if args.output:
            with open(args.output, "w") as handle:
                json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
