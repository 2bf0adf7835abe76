"""Reproduction of Csordás et al., *Are Neural Nets Modular?*, Table 2 (addition / multiplication, FNN).

Protocol of the authors' code (`RobertCsordas/modules`: `dataset/double_op.py`, `dataset/helpers/split_digits.py`,
`interfaces/feedforward/add_mul.py`, `tasks/add_mul.py`, `tasks/add_mul_ff.py`, `tasks/task.py`,
`sweeps/addmul_feedforward_big.yaml`, `paper/plot_addmul_performance.py`, `paper/plot_addmul_iou.py`):

- Data (`AddMul`): two numbers a, b in [0, 100) and an operation (0 = add, 1 = mul), drawn as
  `RandomState(0x12345678 + ["train", "test", "valid"].index(set))`: `randint(0, 100, (n, 2))`, then
  `randint(0, 2, (n,))`; 1,000,000 training rows, 10,000 validation rows. The target is (a + b) mod 100 or
  (a * b) mod 100 as 2 digits, ones first.
- Input (`FFAddMulInterface.create_input`): one-hot digits of a then b, ones first (40), then the operation one-hot
  (2): 42 inputs. Output: 2 digits x 10 classes, CE averaged over the digits; a row is right when both digits are.
- Base model, masks, penalty, clipping and evaluation as in `repro_csordas_double_addition.py` (shared code), with
  their add/mul sweep's penalty weight 1e-4 (`mask_loss_weight`, against 4e-4 for double addition).
- Stages (`AddMulTask`, `ANALYZE_TRAIN_SET = True`): a mask on the whole training set (their "verify" stage), then
  one on the addition rows only, then one on the multiplication rows only, a fresh mask and optimizer each.
- Table 2 (`plot_addmul_performance.py`): accuracy on the addition and on the multiplication validation rows of the
  full net / full-task mask, of the + mask, its inversion (not +), of the * mask and its inversion (not *). Also
  their Fig. (`plot_addmul_iou.py`, `plot_mask_sharing`): per layer, the weights each mask keeps, IoU and
  intersection over the smaller mask (IoMin) of the + and * masks.

Where this differs (CPU budget; all are flags): hidden 400,400,128 here by default (paper 2000 x 4), 3 seeds (paper
10). Their stage runs `step_per_mask + 1` steps and reports the last periodic validation (every 1,000 steps); here
exactly `--mask_steps`, scored at the end.

    python benchmarks/reproductions/repro_csordas_add_mul.py --seeds 0,1,2 --run_dir runs/csordas_add_mul \\
        --output benchmarks/reproductions/results/repro_csordas_add_mul/w400-400-128_3seeds.json
"""

from __future__ import annotations

import functools
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

sys.path.insert(0, str(Path(__file__).resolve().parent))
import repro_csordas_double_addition as shared  # a sibling script (benchmarks/ is not a package)

OPS = ("add", "mul")
N_DIGITS = 2
SETS = ("train", "test", "valid")       # their DoubleOpDataset.SETS: the index offsets the data seed
INPUTS = 2 * N_DIGITS * 10 + len(OPS)
OUTPUTS = N_DIGITS * 10
# The paper's Table 2, FNN rows (accuracy on the add rows, on the mul rows; mean and std over their 10 seeds, from
# percentages). Their "Full" column is read from the unmasked run in paper/plot_addmul_performance.py: compare it to
# "base"; "M_full" (the full-task mask) has no column there.
PAPER_TABLE2: dict[str, tuple[float, float]] = {"base": (1.00, 1.00), "M_add": (1.00, 0.00), "NOT M_add": (0.13, 0.69),
                                                "M_mul": (0.01, 1.00), "NOT M_mul": (0.20, 0.17)}
PAPER_TABLE2_STD: dict[str, tuple[float, float]] = {"base": (0.0, 0.002), "M_add": (0.0, 0.0),
                                                    "NOT M_add": (0.055, 0.097), "M_mul": (0.0, 0.0),
                                                    "NOT M_mul": (0.070, 0.058)}
RUN_DIR_SETTINGS = shared.RUN_DIR_SETTINGS


# ---------------------------------------------------------------------------------------------------------- data
def dataset(name: str, n: int) -> torch.Tensor:
    """Rows `[a, b, op]` of their `AddMul(name, n, 2)`, in their order."""
    state = np.random.RandomState(0x12345678 + SETS.index(name))
    numbers = state.randint(0, 10 ** N_DIGITS, (n, 2))
    ops = state.randint(0, len(OPS), (n,))
    return torch.from_numpy(np.concatenate([numbers, ops[:, None]], 1))


def digits(numbers: torch.Tensor) -> torch.Tensor:
    """Their `split_digits`: `[..., N_DIGITS]`, ones digit first."""
    return torch.stack([(numbers // 10 ** d) % 10 for d in range(N_DIGITS)], -1)


def encode(rows: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """`[n, 42]` inputs (digits of a, digits of b, operation) and `[n, 2]` target digits."""
    a, b, op = rows[:, 0], rows[:, 1], rows[:, 2]
    onehot = nn.functional.one_hot(digits(rows[:, :2]), 10).flatten(1)
    inputs = torch.cat([onehot, nn.functional.one_hot(op, len(OPS))], 1).float()
    result = torch.where(op == 0, a + b, a * b) % 10 ** N_DIGITS
    return inputs, digits(result)


def loss(model: nn.Module, rows: torch.Tensor) -> torch.Tensor:
    """`FFAddMulInterface.loss`: CE averaged over the result digits."""
    inputs, target = encode(rows)
    return nn.functional.cross_entropy(model(inputs).view(-1, 10), target.reshape(-1))


@torch.no_grad()
def accuracy(model: nn.Module, rows: torch.Tensor, batch: int = 2500) -> list[float]:
    """Share of rows with every digit right, on the addition rows and on the multiplication rows."""
    right = torch.zeros(len(OPS))
    count = torch.zeros(len(OPS))
    for start in range(0, len(rows), batch):
        part = rows[start:start + batch]
        inputs, target = encode(part)
        ok = (model(inputs).view(-1, N_DIGITS, 10).argmax(-1) == target).all(-1)
        for op in range(len(OPS)):
            right[op] += float(ok[part[:, 2] == op].sum())
            count[op] += float((part[:, 2] == op).sum())
    return (right / count.clamp(min=1)).tolist()


# ---------------------------------------------------------------------------------------------------------- runs
def overlap(first: dict[str, torch.Tensor], second: dict[str, torch.Tensor]) -> dict[str, dict[str, float]]:
    """Per layer and over all layers: weights kept by each mask, IoU and IoMin (`plot_addmul_iou.py`)."""
    def stats(a: torch.Tensor, b: torch.Tensor) -> dict[str, float]:
        a, b = a.bool(), b.bool()
        n_a, n_b, both, either = (float(x.sum()) for x in (a, b, a & b, a | b))
        return {"n_add": n_a, "n_mul": n_b, "iou": both / max(either, 1.0), "iomin": both / max(min(n_a, n_b), 1.0)}
    out = {kind: stats(first[kind], second[kind]) for kind in first}
    out["all"] = stats(torch.cat([first[k].flatten() for k in first]), torch.cat([second[k].flatten() for k in first]))
    return out


def run_seed(seed: int, args: Any, train: torch.Tensor, valid: torch.Tensor) -> dict[str, Any]:
    hidden = [int(w) for w in args.hidden.split(",")]
    score = functools.partial(accuracy, rows=valid)
    full = shared.Stage("full", train, loss, 1)
    seeded = shared.prepare_seed(seed, args, shared.build_net(hidden, seed, INPUTS, OUTPUTS).to(args.device), full,
                                 score)
    stages = [full] + [shared.Stage(op, train[train[:, 2] == i], loss, 2 + i) for i, op in enumerate(OPS)]
    masks = shared.train_stages(seeded, stages, score, args, seed)
    seeded.out["overlap"] = overlap(masks["add"], masks["mul"])
    seeded.out["seconds"] = time.time() - seeded.start
    return seeded.out


TABLE_ROWS = ("base", "M_full", "NOT M_full", "M_add", "NOT M_add", "M_mul", "NOT M_mul")


def stats(values: list[float]) -> dict[str, float]:
    t = torch.tensor(values, dtype=torch.float64)
    return {"mean": float(t.mean()), "std": float(t.std()) if len(values) > 1 else 0.0,
            "min": float(t.min()), "max": float(t.max())}


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Table 2 (each row: accuracy on the add rows, on the mul rows; mean, std, range over seeds) and the overlap."""
    table = {row: {op: stats([run[row][i] for run in runs]) for i, op in enumerate(OPS)} for row in TABLE_ROWS}
    layers = runs[0]["overlap"]
    sharing = {layer: {key: stats([run["overlap"][layer][key] for run in runs]) for key in layers[layer]}
               for layer in layers}
    kept = {name: stats([run[f"kept_{name}"] for run in runs]) for name in ("full", *OPS)}
    return {"table2": table, "overlap": sharing, "kept": kept, "seeds": len(runs)}


def print_summary(summary: dict[str, Any]) -> None:
    print("\n| mask | on add | on mul | paper on add / on mul |\n|---|---|---|---|")
    for row, cells in summary["table2"].items():
        paper = PAPER_TABLE2.get(row)
        paper_text = f"{paper[0]:.2f} / {paper[1]:.2f}" if paper else "-"
        print(f"| {row} | " + " | ".join(f"{c['mean']:.3f} ± {c['std']:.3f} ({c['min']:.3f}-{c['max']:.3f})"
                                         for c in cells.values()) + f" | {paper_text} |")
    print("add vs mul masks: " + ", ".join(f"{layer} IoU {v['iou']['mean']:.3f} IoMin {v['iomin']['mean']:.3f}"
                                           for layer, v in summary["overlap"].items()))


def main() -> None:
    parser = shared.common_parser(__doc__.split("\n\n")[0], "add_mul", "400,400,128", 1e-4,
                                  "runs/repro_csordas_add_mul")
    args = parser.parse_args()
    args.reference_mask = True         # their stage 0 (the full-task mask) always runs here
    torch.set_num_threads(args.threads)
    if args.merge:
        shared.run_seeds(args, RUN_DIR_SETTINGS, {}, lambda seed: {}, summarize, print_summary)
        return
    train = dataset("train", args.train_size).to(args.device)
    valid = dataset("valid", args.valid_size).to(args.device)
    shared.run_seeds(args, RUN_DIR_SETTINGS, {"paper_table2": PAPER_TABLE2, "paper_table2_std": PAPER_TABLE2_STD},
                     lambda seed: run_seed(seed, args, train, valid), summarize, print_summary)


if __name__ == "__main__":
    main()
