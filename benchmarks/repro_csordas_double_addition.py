"""CPU-scale reproduction of Csordás et al., *Are Neural Nets Modular?*, Table 1 (double addition, FNN).

Task: a + b mod 100 and c + d mod 100 with separate inputs and outputs (80 inputs = 4 numbers x 2 digits one-hot,
40 outputs = 2 results x 2 digits x 10 classes). A feed-forward net (default hidden 800, 800, 256 as in the paper) is
trained on both pairs, then frozen. Gumbel-sigmoid weight masks (p = 0.9 init, tau 1, 4 mask samples per batch, Adam
1e-2, penalty alpha on the logits' sum / batch size, biases masked) are learned for pair 1 alone and for pair 2
alone, each on its own task loss, through `PrunableModel(granularity="weight", relaxation="gumbel_sigmoid")`.

The paper: the pair-1 mask scores ~1% on pair 2; the inverted pair-1 mask scores 20 +/- 12.7% on pair 1 and
94 +/- 6.7% on pair 2. Printed here: accuracy (both digits right) of every mask and its inversion on both pairs, and
the per-layer IoU and shared fraction of the two masks (the paper: first and last layers share ~nothing).

    python benchmarks/repro_csordas_double_addition.py --output benchmarks/results_repro_csordas.json
"""

from __future__ import annotations

import argparse
import json
import time

import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.subtasks import invert_masks, mask_overlap, sharing_fractions
from hf_heuristic_core.training.objectives import sparsity_penalty


def batch(n: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    numbers = torch.randint(0, 100, (n, 4), generator=generator)
    digits = torch.stack([numbers // 10, numbers % 10], -1).view(n, 8)            # a1 a0 b1 b0 c1 c0 d1 d0
    x = nn.functional.one_hot(digits, 10).float().view(n, 80)
    sums = torch.stack([(numbers[:, 0] + numbers[:, 1]) % 100, (numbers[:, 2] + numbers[:, 3]) % 100], 1)
    y = torch.stack([sums // 10, sums % 10], -1).view(n, 4)                       # s1 tens, s1 ones, s2 tens, s2 ones
    return x, y


def losses(logits: torch.Tensor, y: torch.Tensor, pairs: tuple[int, ...]) -> torch.Tensor:
    logits = logits.view(-1, 4, 10)
    heads = [2 * p + d for p in pairs for d in (0, 1)]
    return nn.functional.cross_entropy(logits[:, heads].reshape(-1, 10), y[:, heads].reshape(-1))


@torch.no_grad()
def accuracy(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> list[float]:
    right = model(x).view(-1, 4, 10).argmax(-1) == y
    return [float((right[:, 2 * p] & right[:, 2 * p + 1]).float().mean()) for p in (0, 1)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hidden", default="800,800,256")
    parser.add_argument("--base_steps", type=int, default=3000)
    parser.add_argument("--mask_steps", type=int, default=2000)
    parser.add_argument("--alpha", type=float, default=4e-4)
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--output", default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    generator = torch.Generator().manual_seed(args.seed)
    widths = [80, *[int(w) for w in args.hidden.split(",")], 40]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
    net = nn.Sequential(*layers)
    start = time.time()
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for step in range(args.base_steps):
        x, y = batch(args.batch, generator)
        loss = losses(net(x), y, (0, 1))
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 500 == 0:
            print(f"base step {step}: loss {loss.item():.3f}", flush=True)
    test_x, test_y = batch(5000, torch.Generator().manual_seed(12345))
    net.eval().requires_grad_(False)
    base_acc = accuracy(net, test_x, test_y)
    print(f"base model: pair 1 {base_acc[0]:.3f}, pair 2 {base_acc[1]:.3f} ({time.time() - start:.0f} s)", flush=True)

    config = PruningConfig(granularity="weight", relaxation="gumbel_sigmoid", mask_bias=True, mask_samples=4)
    pm = PrunableModel(net, config)
    pm.generator = torch.Generator().manual_seed(args.seed + 1)
    masks, results = {}, {"base": base_acc}
    for pair in (0, 1):
        pm.clear_masks()
        pm.reset_masks(args.seed + pair)
        optimizer = torch.optim.Adam([p for _, p in pm.mask_logits.items()], lr=1e-2)
        pm.train()
        for step in range(args.mask_steps):
            x, y = batch(args.batch, generator)
            loss = 0.0
            for chunk_x, chunk_y in zip(x.chunk(4), y.chunk(4)):   # one mask sample per chunk
                loss = loss + losses(pm(chunk_x), chunk_y, (pair,)) / 4
            loss = loss + sparsity_penalty(pm, args.alpha, args.batch)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if step % 500 == 0:
                print(f"mask pair {pair + 1} step {step}: loss {loss.item():.3f}, kept "
                      f"{1 - float(pm.expected_sparsity().detach()):.3f}", flush=True)
        pm.eval()
        mask = pm.get_masks(binary=True)                   # 1[l > 0]
        masks[f"pair{pair + 1}"] = mask
        with pm.masks_applied(mask):
            results[f"M_pair{pair + 1}"] = accuracy(pm, test_x, test_y)
        with pm.masks_applied(invert_masks(mask)):
            results[f"NOT M_pair{pair + 1}"] = accuracy(pm, test_x, test_y)
        kept = sum(float(m.sum()) for m in mask.values()) / sum(m.numel() for m in mask.values())
        results[f"kept_pair{pair + 1}"] = kept
        print(f"pair {pair + 1} mask keeps {kept:.3f}: M -> {results[f'M_pair{pair + 1}']}, NOT M -> "
              f"{results[f'NOT M_pair{pair + 1}']}", flush=True)
    overlap = mask_overlap(masks["pair1"], masks["pair2"])
    sharing = sharing_fractions(masks)
    results["iou_per_layer"] = {k: v["iou"] for k, v in overlap.items()}
    results["shared_fraction_pair1"] = sharing["pair1"]
    results["seconds"] = time.time() - start
    results["settings"] = vars(args)
    print("\n| mask | pair 1 acc | pair 2 acc |\n|---|---|---|")
    for name in ("base", "M_pair1", "NOT M_pair1", "M_pair2", "NOT M_pair2"):
        print(f"| {name} | {results[name][0]:.3f} | {results[name][1]:.3f} |")
    print("\nper-layer IoU of the two masks: " + ", ".join(f"{k} {v:.2f}" for k, v in results["iou_per_layer"].items()))
    print(f"total {results['seconds']:.0f} s")
    if args.output:
        with open(args.output, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
