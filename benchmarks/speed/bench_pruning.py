"""Pruning-step benchmarks, reported as ratios measured in one run on one machine (absolute times are noisy).

(a) hook overhead: a masked training step (sampled masks, gradients into the mask logits, frozen weights) vs the plain
    model's forward + backward doing the same activation-gradient work (gradients into the input embeddings).
(b) one pruning step with cached teacher logits vs the two-model setup of the paper's code (a separate frozen
    teacher copy run every step).
(c) peak memory (RSS, measured in fresh subprocesses) of the same-model teacher vs two model copies.

    python benchmarks/speed/bench_pruning.py [--models minilm,bert-base] [--batch 8] [--seq 128] [--repeats 10]

`--baseline DIR` (with `--only a`) also times the masked step of another copy of the package (`DIR` holds its
`hf_heuristic_core/` folder, e.g. `git archive main hf_heuristic_core | tar -x -C DIR`), interleaved with this one's
in the same process: before/after ratios of a change to the hook path that share every bit of machine noise.
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402
from transformers import AutoConfig, AutoModelForSequenceClassification  # noqa: E402

from hf_heuristic_core import PrunableModel, PruningConfig  # noqa: E402
from hf_heuristic_core.training.trainer import kl_to_teacher  # noqa: E402


def load(name: str) -> torch.nn.Module:
    torch.manual_seed(0)
    if name == "minilm":
        from hf_heuristic_core.offline_models import minilm_path
        return AutoModelForSequenceClassification.from_pretrained(minilm_path(), num_labels=3)
    if name == "bert-base":  # BERT-base-sized random model (no BERT-base weights offline)
        config = AutoConfig.for_model("bert", hidden_size=768, num_attention_heads=12, num_hidden_layers=12,
                                      intermediate_size=3072, num_labels=3)
        return AutoModelForSequenceClassification.from_config(config)
    raise ValueError(f"unknown model {name!r}; use minilm or bert-base")


def batch_for(model: torch.nn.Module, batch: int, seq: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (batch, seq), generator=generator)
    return {"input_ids": ids, "attention_mask": torch.ones_like(ids)}


CLOCK = {"wall": time.perf_counter, "process": time.process_time}
clock = CLOCK["wall"]


def timed(fn, repeats: int) -> float:
    fn()  # warm-up
    times = []
    for _ in range(repeats):
        start = clock()
        fn()
        times.append(clock() - start)
    return statistics.median(times)


def wrapped(model: torch.nn.Module, inputs: dict[str, torch.Tensor]) -> PrunableModel:
    prunable = PrunableModel(model, PruningConfig(relaxation_settings={"init_mean": 3.0}))
    prunable.compute_means(inputs, show_progress=False)
    prunable.train_dropout = False
    return prunable.train()


def hook_overhead(name: str, batch: int, seq: int, repeats: int) -> dict[str, float]:
    model = load(name)
    inputs = batch_for(model, batch, seq)
    plain = copy.deepcopy(model).eval().requires_grad_(False)
    embeddings = plain.get_input_embeddings()

    def plain_step():
        embeds = embeddings(inputs["input_ids"]).detach().requires_grad_(True)
        plain(inputs_embeds=embeds, attention_mask=inputs["attention_mask"]).logits.sum().backward()

    prunable = wrapped(model, inputs)

    def masked_step():
        prunable.zero_grad(set_to_none=True)
        prunable(**inputs).logits.sum().backward()

    # Interleave the two measurements so machine load hits both alike.
    plain_times, masked_times = [], []
    for _ in range(3):
        plain_times.append(timed(plain_step, repeats))
        masked_times.append(timed(masked_step, repeats))
    t_plain, t_masked = min(plain_times), min(masked_times)
    return {"plain_fwd_bwd_s": t_plain, "masked_step_s": t_masked, "ratio": t_masked / t_plain}


def load_baseline(folder: str):
    """Another copy of the package, imported as `hhc_baseline` (its imports are relative)."""
    init = os.path.join(folder, "hf_heuristic_core", "__init__.py")
    spec = importlib.util.spec_from_file_location("hhc_baseline", init,
                                                  submodule_search_locations=[os.path.dirname(init)])
    module = importlib.util.module_from_spec(spec)
    sys.modules["hhc_baseline"] = module
    spec.loader.exec_module(module)
    return module


def hook_overhead_against(name: str, batch: int, seq: int, repeats: int, baseline) -> dict[str, float]:
    """(a) for this package and a baseline copy, interleaved: plain, baseline-masked and masked steps."""
    model = load(name)
    inputs = batch_for(model, batch, seq)
    plain = copy.deepcopy(model).eval().requires_grad_(False)
    embeddings = plain.get_input_embeddings()

    def plain_step():
        embeds = embeddings(inputs["input_ids"]).detach().requires_grad_(True)
        plain(inputs_embeds=embeds, attention_mask=inputs["attention_mask"]).logits.sum().backward()

    def masked(prunable):
        def step():
            prunable.zero_grad(set_to_none=True)
            prunable(**inputs).logits.sum().backward()
        return step

    ours = wrapped(copy.deepcopy(model), inputs)
    theirs = baseline.PrunableModel(copy.deepcopy(model), baseline.PruningConfig(init_mean=3.0))
    theirs.compute_means(inputs, show_progress=False)
    theirs.train_dropout = False
    theirs.train()
    steps = {"plain": plain_step, "baseline": masked(theirs), "current": masked(ours)}
    times: dict[str, list[float]] = {key: [] for key in steps}
    for _ in range(3):
        for key, step in steps.items():
            times[key].append(timed(step, repeats))
    best = {key: min(values) for key, values in times.items()}
    return {"plain_fwd_bwd_s": best["plain"], "baseline_masked_step_s": best["baseline"],
            "masked_step_s": best["current"], "ratio": best["current"] / best["plain"],
            "baseline_ratio": best["baseline"] / best["plain"],
            "current_over_baseline": best["current"] / best["baseline"]}


def teacher_cost(name: str, batch: int, seq: int, repeats: int) -> dict[str, float]:
    model = load(name)
    inputs = batch_for(model, batch, seq)
    teacher_copy = copy.deepcopy(model).eval().requires_grad_(False)
    prunable = wrapped(model, inputs)
    with torch.no_grad(), prunable.masks_disabled():
        cached = prunable(**inputs).logits
    optimizer = torch.optim.AdamW([p for p in prunable.parameters() if p.requires_grad], lr=0.1, weight_decay=0.0)

    def step(teacher_logits_fn):
        optimizer.zero_grad(set_to_none=True)
        teacher = teacher_logits_fn()
        kl_to_teacher(prunable(**inputs).logits, teacher).backward()
        optimizer.step()

    def with_copy():
        with torch.no_grad():
            return teacher_copy(**inputs).logits

    cached_times, copy_times = [], []
    for _ in range(3):
        cached_times.append(timed(lambda: step(lambda: cached), repeats))
        copy_times.append(timed(lambda: step(with_copy), repeats))
    t_cached, t_copy = min(cached_times), min(copy_times)
    return {"cached_teacher_step_s": t_cached, "two_model_step_s": t_copy, "ratio": t_cached / t_copy}


def _status_mib(field: str) -> float:
    """VmHWM / VmRSS of this process (ru_maxrss would carry the parent's high-water mark across exec)."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def peak_memory_child(name: str, batch: int, seq: int, setup: str, checkpointing: bool) -> None:
    """Runs in a fresh process: one model (same-model teacher) or two copies; prints peak RSS in MiB."""
    baseline = _status_mib("VmRSS")
    model = load(name)
    if checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    inputs = batch_for(model, batch, seq)
    teacher_copy = copy.deepcopy(model).eval().requires_grad_(False) if setup == "two_copies" else None
    prunable = wrapped(model, inputs)
    for _ in range(3):
        prunable.zero_grad(set_to_none=True)
        with torch.no_grad():
            if teacher_copy is not None:
                teacher = teacher_copy(**inputs).logits
            else:
                with prunable.masks_disabled():
                    teacher = prunable(**inputs).logits
        kl_to_teacher(prunable(**inputs).logits, teacher).backward()
    peak = _status_mib("VmHWM")
    print(json.dumps({"peak_rss_mib": peak, "after_imports_rss_mib": baseline}))


def peak_memory(name: str, batch: int, seq: int, checkpointing: bool = False) -> dict[str, float]:
    results = {}
    for setup in ("same_model", "two_copies"):
        command = [sys.executable, __file__, "--child", setup, "--models", name, "--batch", str(batch),
                   "--seq", str(seq)] + (["--gradient-checkpointing"] if checkpointing else [])
        output = subprocess.run(command, check=True, capture_output=True, text=True).stdout
        results[setup] = json.loads(output.strip().splitlines()[-1])
    same, two = results["same_model"], results["two_copies"]
    return {"same_model_peak_mib": same["peak_rss_mib"], "two_copies_peak_mib": two["peak_rss_mib"],
            "ratio_total": same["peak_rss_mib"] / two["peak_rss_mib"],
            "ratio_above_imports": (same["peak_rss_mib"] - same["after_imports_rss_mib"])
            / (two["peak_rss_mib"] - two["after_imports_rss_mib"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--models", default="minilm,bert-base")
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--gradient-checkpointing", action="store_true",
                        help="Memory benchmark with gradient checkpointing in both setups.")
    parser.add_argument("--only", default="abc", help="Which benchmarks to run, e.g. 'c'.")
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads (default: torch's).")
    parser.add_argument("--clock", choices=sorted(CLOCK), default="wall",
                        help="wall time, or this process's CPU time (steadier on a machine other jobs load; with "
                             "--threads 1, since idle threads may spin).")
    parser.add_argument("--baseline", help="Folder holding another hf_heuristic_core/ to time against (with a).")
    parser.add_argument("--child", choices=["same_model", "two_copies"], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        peak_memory_child(args.models, args.batch, args.seq, args.child, args.gradient_checkpointing)
        return
    torch.set_num_threads(args.threads or max(1, torch.get_num_threads()))
    global clock
    clock = CLOCK[args.clock]
    report = {"torch_threads": torch.get_num_threads(), "batch": args.batch, "seq": args.seq, "clock": args.clock}
    for name in args.models.split(","):
        report[name] = {}
        if "a" in args.only and args.baseline:
            report[name]["a_hook_overhead"] = hook_overhead_against(name, args.batch, args.seq, args.repeats,
                                                                    load_baseline(args.baseline))
        elif "a" in args.only:
            report[name]["a_hook_overhead"] = hook_overhead(name, args.batch, args.seq, args.repeats)
        if "b" in args.only:
            report[name]["b_cached_vs_two_models"] = teacher_cost(name, args.batch, args.seq, args.repeats)
        if "c" in args.only:
            report[name]["c_peak_memory"] = peak_memory(name, args.batch, args.seq)
            report[name]["c_peak_memory_gradient_checkpointing"] = peak_memory(name, args.batch, args.seq, True)
        print(json.dumps({name: report[name]}, indent=2), flush=True)
    print(json.dumps(report))


if __name__ == "__main__":
    main()
