"""Cost of Subtask Induction's frozen transplant: build time, training-step overhead, extra memory, save time.

A GPT-2-config model (random source) gets a random weight mask keeping `--keep` of every Linear/Conv1D weight and of
the token embedding (the paper's subnetworks keep 3-8%). Compared per training step (forward + backward + AdamW with
weight decay): the same architecture as a plain model, the transplanted model (a `torch.where` parametrization on
every masked tensor), and the transplanted model after `merge_transplant` (plain again). One torch thread.

    python benchmarks/speed/bench_induction.py [--layers 4] [--hidden 256] [--keep 0.05] [--steps 30] [--json out.json]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time

import torch
from transformers import GPT2Config, GPT2LMHeadModel

from hf_heuristic_core import merge_transplant, transfer_subnetwork


class _Stepper:
    """One model with its AdamW; `step()` times one forward + backward + optimizer step."""

    def __init__(self, model, batch):
        self.model, self.batch = model.train(), batch
        self.optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-3,
                                           weight_decay=0.1)
        self.times: list[float] = []

    def step(self) -> None:
        start = time.perf_counter()
        self.model(**self.batch, labels=self.batch["input_ids"]).loss.backward()
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)
        self.times.append(time.perf_counter() - start)


def _interleaved_medians(models: dict, batch, steps: int) -> dict[str, float]:
    """Median step time per model, the models taking turns step by step so machine load hits all alike."""
    steppers = {name: _Stepper(model, batch) for name, model in models.items()}
    for _ in range(steps + 3):
        for stepper in steppers.values():
            stepper.step()
    return {name: statistics.median(s.times[3:]) for name, s in steppers.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--hidden", type=int, default=256)
    parser.add_argument("--vocab", type=int, default=1024)
    parser.add_argument("--keep", type=float, default=0.05)
    parser.add_argument("--steps", type=int, default=30)
    parser.add_argument("--batch", type=int, default=16)
    parser.add_argument("--seq", type=int, default=32)
    parser.add_argument("--json", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)

    config = GPT2Config(n_layer=args.layers, n_embd=args.hidden, n_head=4, n_inner=4 * args.hidden,
                        vocab_size=args.vocab, n_positions=args.seq, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    source = GPT2LMHeadModel(config)
    generator = torch.Generator().manual_seed(1)
    masks = {n: (torch.rand(p.shape, generator=generator) < args.keep).float()
             for n, p in source.named_parameters() if p.dim() == 2 and n != "transformer.wpe.weight"}
    batch = {"input_ids": torch.randint(0, args.vocab, (args.batch, args.seq), generator=generator)}

    start = time.perf_counter()
    model = transfer_subnetwork(source, masks, seed=0)
    build = time.perf_counter() - start
    params = sum(p.numel() * p.element_size() for p in model.parameters())
    buffers = sum(b.numel() * b.element_size() for n, b in model.named_buffers() if ".parametrizations." in n)
    with tempfile.TemporaryDirectory() as folder:
        start = time.perf_counter()
        model.save_pretrained(folder)
        save = time.perf_counter() - start

    torch.manual_seed(0)
    plain = GPT2LMHeadModel(config)
    merged = merge_transplant(transfer_subnetwork(source, masks, seed=0))
    steps = _interleaved_medians({"plain": plain, "transplanted": model, "merged": merged}, batch, args.steps)
    results = {
        "config": vars(args), "parameters": sum(p.numel() for p in source.parameters()),
        "kept_fraction_of_masked": model.subtask_induction["kept_fraction_of_masked"],
        "build_s": build, "save_s": save, "parameter_mb": params / 2**20, "transplant_buffer_mb": buffers / 2**20,
        **{f"step_s_{name}": value for name, value in steps.items()},
    }
    results["overhead"] = results["step_s_transplanted"] / results["step_s_plain"] - 1
    print(json.dumps(results, indent=2))
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
