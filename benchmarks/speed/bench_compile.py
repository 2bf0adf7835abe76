"""torch.compile: compiled / eager step time of a hooked model and of the plain model, measured in one process with
the two interleaved (ratios, not absolute times: this machine is shared).

The hooked step is a masked training step (sampled hard-concrete masks, gradient into the mask logits, frozen
weights); the plain step is the unmasked model's forward + backward doing the same activation-gradient work
(gradient into the input embeddings). Both compile the same way, `training.compile.compile_blocks` (every
transformer block, inductor by default), after a warm-up that compiles every graph.

    python benchmarks/speed/bench_compile.py --layers 6 --hidden 384 --batch 8 --seq 128 --threads 2 \
        --output benchmarks/speed/results/bench_compile/bert-6x384_b8_cpu_t2.json
    python benchmarks/speed/bench_compile.py --device cuda --layers 12 --hidden 768 --batch 32 --seq 128    # BERT-base
"""

from __future__ import annotations

import argparse
import copy
import json
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")

import torch  # noqa: E402

from hf_heuristic_core import PrunableModel, PruningConfig  # noqa: E402
from hf_heuristic_core.training.compile import compile_blocks  # noqa: E402


def build(layers: int, hidden: int, device: str) -> torch.nn.Module:
    from transformers import BertConfig, BertForSequenceClassification
    torch.manual_seed(0)
    config = BertConfig(num_hidden_layers=layers, hidden_size=hidden, num_attention_heads=hidden // 64,
                        intermediate_size=4 * hidden, num_labels=3)
    return BertForSequenceClassification(config).eval().to(device)


def steps(layers: int, hidden: int, batch: int, seq: int, device: str, compiled: bool, backend: str):
    model = build(layers, hidden, device)
    generator = torch.Generator(device=device).manual_seed(0)
    ids = torch.randint(1000, model.config.vocab_size, (batch, seq), generator=generator, device=device)
    mask = torch.ones_like(ids)
    plain = copy.deepcopy(model).requires_grad_(False)
    embeddings = plain.get_input_embeddings()
    prunable = PrunableModel(model, PruningConfig(ablation="zero", relaxation_settings={"init_mean": 3.0}))
    prunable.train_dropout = False
    prunable.generator = torch.Generator(device=device).manual_seed(0)
    prunable.train()
    if compiled:
        compile_blocks(plain, backend=backend)
        compile_blocks(prunable, backend=backend)

    def plain_step():
        embeds = embeddings(ids).detach().requires_grad_(True)
        plain(inputs_embeds=embeds, attention_mask=mask).logits.sum().backward()

    def hooked_step():
        prunable.zero_grad(set_to_none=True)
        prunable(input_ids=ids, attention_mask=mask).logits.sum().backward()

    return plain_step, hooked_step


def timed(step, repeats: int, device: str) -> float:
    times = []
    for _ in range(repeats):
        if device == "cuda":
            torch.cuda.synchronize()
        start = time.perf_counter()
        step()
        if device == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--hidden", type=int, default=384)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--seq", type=int, default=128)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--backend", default="inductor")
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    eager = steps(args.layers, args.hidden, args.batch, args.seq, args.device, False, args.backend)
    compiled = steps(args.layers, args.hidden, args.batch, args.seq, args.device, True, args.backend)
    start = time.perf_counter()
    for step in compiled:   # warm-up: compiles every graph (forward and backward)
        step()
        step()
    compile_s = time.perf_counter() - start
    from torch._dynamo.utils import counters
    graphs_after_warm_up = dict(counters["stats"])
    for step in eager:
        step()
    results = {name: {"eager": [], "compiled": []} for name in ("plain", "hooked")}
    for _ in range(args.rounds):   # interleaved, so machine load hits all four alike
        for index, name in enumerate(("plain", "hooked")):
            results[name]["eager"].append(timed(eager[index], args.repeats, args.device))
            results[name]["compiled"].append(timed(compiled[index], args.repeats, args.device))
    report = {"device": args.device if args.device == "cpu" else torch.cuda.get_device_name(),
              "torch": torch.__version__, "threads": args.threads, "backend": args.backend,
              "model": f"random BERT, {args.layers} layers x hidden {args.hidden}", "batch": args.batch,
              "seq": args.seq, "warm_up_compile_s": compile_s,
              # Dynamo's counters after the warm-up and after timing: equal means no graph was compiled while timing.
              "dynamo_stats_after_warm_up": graphs_after_warm_up, "dynamo_stats_after_timing": dict(counters["stats"]),
              "dynamo_frames": dict(counters["frames"]), "graph_breaks": dict(counters["graph_break"])}
    for name, times in results.items():
        eager_s, compiled_s = min(times["eager"]), min(times["compiled"])
        report[name] = {"eager_s": eager_s, "compiled_s": compiled_s, "compiled_over_eager": compiled_s / eager_s}
    report["hooked_over_plain"] = {"eager": report["hooked"]["eager_s"] / report["plain"]["eager_s"],
                                   "compiled": report["hooked"]["compiled_s"] / report["plain"]["compiled_s"]}
    print(json.dumps(report, indent=2))
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(report, handle, indent=2)


if __name__ == "__main__":
    main()
