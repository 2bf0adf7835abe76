"""GPU benchmarks of issue #28, ready for a GPU machine (no GPU was lent to the session that wrote them).

(a) step time: a masked BERT-base training step (sampled hard-concrete masks, gradient into the mask logits, frozen
    weights) against the plain model's forward + backward doing the same activation-gradient work (gradient into the
    input embeddings). Goal: <= 1.10. Interleaved rounds, CUDA-event timing, median per round, best round.
(b) peak GPU memory (`torch.cuda.max_memory_allocated`, weights included) of one step: the two-copy step (separate
    teacher copy) against the one-copy step with each memory option. Goal: <= 0.65.
torch.compile (compiled / eager, hooked and plain): benchmarks/speed/bench_compile.py --device cuda.

    python benchmarks/speed/bench_gpu.py --only ab --output benchmarks/speed/results/bench_gpu/bert-base_seq_b32_gpu.json
    python benchmarks/speed/bench_gpu.py --only b --head lm          # per-token logits (30,522-token vocabulary)

Random weights of the BERT-base configuration (110M parameters), batch 32 x 128 by default.
"""

from __future__ import annotations

import argparse
import copy
import gc
import json
import os
import statistics

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from hf_heuristic_core import PrunableModel, PruningConfig  # noqa: E402
from hf_heuristic_core.training.losses import kl_to_teacher  # noqa: E402

MEMORY_CONFIGURATIONS = {
    "two_copies": {},
    "one_copy": {},
    "one_copy_ckpt": {"checkpointing": True},
    "one_copy_ckpt_bf16": {"checkpointing": True, "teacher_dtype": torch.bfloat16},
    "one_copy_ckpt_chunk": {"checkpointing": True, "chunk": 1024},
    "one_copy_all": {"checkpointing": True, "teacher_dtype": torch.bfloat16, "chunk": 1024},
}


def build(head: str = "seq", device: str = "cuda") -> torch.nn.Module:
    from transformers import BertConfig, BertForMaskedLM, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(num_labels=3)
    return (BertForSequenceClassification if head == "seq" else BertForMaskedLM)(config).eval().to(device)


def batch_for(model: torch.nn.Module, batch: int, seq: int) -> dict[str, torch.Tensor]:
    device = next(model.parameters()).device
    generator = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (batch, seq), generator=generator, device=device)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


def wrap(model: torch.nn.Module) -> PrunableModel:
    prunable = PrunableModel(model, PruningConfig(ablation="zero", relaxation_settings={"init_mean": 3.0}))
    prunable.train_dropout = False
    prunable.generator = torch.Generator(device=prunable.mask_logits_device).manual_seed(0)
    return prunable.train()


def cuda_time(step, repeats: int) -> float:
    step()
    torch.cuda.synchronize()
    times = []
    for _ in range(repeats):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        step()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1000)
    return statistics.median(times)


def step_functions(batch: int, seq: int):
    """(plain step, masked step) on BERT-base: the same activation-gradient work, with and without masks."""
    model = build()
    inputs = batch_for(model, batch, seq)
    plain = copy.deepcopy(model).requires_grad_(False)
    embeddings = plain.get_input_embeddings()
    prunable = wrap(model)

    def plain_step():
        embeds = embeddings(inputs["input_ids"]).detach().requires_grad_(True)
        plain(inputs_embeds=embeds, attention_mask=inputs["attention_mask"]).logits.sum().backward()

    def masked_step():
        prunable.zero_grad(set_to_none=True)
        prunable(**inputs).logits.sum().backward()

    return plain_step, masked_step


def step_time(batch: int, seq: int, repeats: int, rounds: int = 3) -> dict[str, float]:
    plain_step, masked_step = step_functions(batch, seq)
    plain, masked = [], []
    for _ in range(rounds):
        plain.append(cuda_time(plain_step, repeats))
        masked.append(cuda_time(masked_step, repeats))
    return {"plain_fwd_bwd_s": min(plain), "masked_step_s": min(masked), "ratio": min(masked) / min(plain),
            "goal": 1.10}


def peak_memory(name: str, head: str = "seq", batch: int = 32, seq: int = 128) -> int:
    """Peak bytes allocated during one step of configuration `name` (weights included)."""
    options = MEMORY_CONFIGURATIONS[name]
    gc.collect()
    torch.cuda.empty_cache()
    torch.cuda.reset_peak_memory_stats()
    model = build(head)
    inputs = batch_for(model, batch, seq)
    teacher = copy.deepcopy(model).requires_grad_(False) if name == "two_copies" else None
    prunable = wrap(model)
    if options.get("checkpointing"):
        prunable.activation_checkpointing_enable()
    optimizer = torch.optim.AdamW(prunable.mask_logits.parameters(), lr=0.1, weight_decay=0.0)
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad():
        if teacher is not None:
            target = teacher(**inputs).logits
        else:
            with prunable.masks_disabled():
                target = prunable(**inputs).logits
        target = target.to(options.get("teacher_dtype", target.dtype))
    kl_to_teacher(prunable(**inputs).logits, target, inputs["attention_mask"],
                  chunk_size=options.get("chunk")).backward()
    optimizer.step()
    torch.cuda.synchronize()
    peak = torch.cuda.max_memory_allocated()
    del model, teacher, prunable, optimizer, target, inputs
    gc.collect()
    torch.cuda.empty_cache()
    return peak


def memory(head: str, batch: int, seq: int) -> dict[str, dict[str, float]]:
    peaks = {name: peak_memory(name, head, batch, seq) for name in MEMORY_CONFIGURATIONS}
    return {name: {"peak_mib": value / 2**20, "ratio_to_two_copies": value / peaks["two_copies"]}
            for name, value in peaks.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--only", default="ab")
    parser.add_argument("--head", choices=("seq", "lm"), default="seq")
    parser.add_argument("--batch", type=int, default=32)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("bench_gpu.py needs a CUDA GPU.")
    report = {"device": torch.cuda.get_device_name(), "torch": torch.__version__, "batch": args.batch, "seq": args.seq,
              "head": args.head}
    if "a" in args.only:
        report["a_step_time"] = step_time(args.batch, args.seq, args.repeats)
    if "b" in args.only:
        report["b_peak_memory"] = memory(args.head, args.batch, args.seq)
    print(json.dumps(report, indent=2))
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
