"""Reproduction of Csordás et al., *Are Neural Nets Modular?*, Table 1 and Fig. 2 (double addition, FNN).

Protocol of the authors' code (`RobertCsordas/modules`: `dataset/tuple_arithmetic.py`, `tasks/tuple_ff.py`,
`interfaces/feedforward/tuple_arithmetic.py`, `tasks/task.py`, `masked_model.py`, `main.py`,
`sweeps/tuple_feedforward_big.yaml`), each step checked against it:

- Data: a + b mod 100 and c + d mod 100; every number as 2 one-hot digits (ones digit first), 80 inputs; outputs
  `[pair, digit, 10]` = 40. A fixed train set of 1,000,000 tuples sampled with replacement, a 10,000-tuple
  validation set (their `TupleArithmetic("valid", ...)`) on which every accuracy is measured; accuracy of a pair =
  both digits right.
- One forward pass per pair, the other pair's inputs zeroed (`FFTupleArithmeticDatasetInterface.create_input`);
  pair p's prediction is read from pass p's pair-p outputs. This holds in base training, mask training and
  evaluation. Mask training on pair p uses only pass p (the other pass does not reach their restricted loss, so
  leaving it out changes no gradient).
- Base model: FNN with ReLU, PyTorch's default Linear init, Adam lr 1e-3, batch 128, gradient clipping 1.0, CE mean
  over both pairs' digits, then frozen.
- Masks: `PrunableModel(granularity="weight", relaxation="gumbel_sigmoid", mask_bias=False)`: every Linear weight,
  biases not masked (`bias_no_mask: 1` in their sweep), logits start at 2 (their `mask_init`; keep probability
  0.881), tau 1, 4 mask samples per batch (one per quarter of the batch), straight-through hard samples, Adam lr
  1e-2, penalty alpha * sum(logits) / batch with alpha 4e-4, a fresh mask (and optimizer) per pair trained on that
  pair's loss alone; evaluation masks 1[l > 0].
- Gradient clipping as theirs (`--clip_scope all`, the default): `Task.clip_gradients` clips the norm of all of
  `MaskedModel.parameters()` to 1.0. Their mask optimizer holds only the active mask set, so its `zero_grad` never
  clears the frozen weights' and biases' `.grad`: those keep accumulating every mask step (from the last base step's
  clipped gradient on), count in the norm, and are rescaled in place by every clip, as are the earlier stages' last
  mask gradients. The weights stay frozen (no optimizer holds them). `--clip_scope masks` clips the trained logits
  alone (this script before issue #38; their norm, 0.01-0.03, never reaches 1.0, so that clip never acts).
- Table 1: every mask and its inversion (1 - M on every masked weight; biases untouched) on both pairs. Fig. 2:
  per-layer shared fraction / IoU of the two pair masks. `--reference_mask` also trains their stage-0 mask on the
  full task and adds their Table 3 (hidden layers inverted, the full-task mask on the input and output layers).

Where this differs from the paper (CPU budget; all are flags):

| setting | paper / code | default here | why |
|---|---|---|---|
| hidden layers | 2000, 2000, 2000, 2000 (`layer_sizes`) | 400, 400, 128 | a mask step costs ~12M weights there |
| base steps | 20,000 (`stop_after`) | 20,000 | same |
| mask steps | 20,000 per mask (`step_per_mask`) | 20,000 (`--mask_steps`) | same: the inversion still rose at 10k (seed 0) |
| seeds | 10 (`sweep_id_for_grid_search`) | 3 | CPU budget |
| stages before the pair masks | their tuple task always trains the full-task mask first | only with `--reference_mask` | CPU budget; with `--clip_scope all` the accumulated gradients then start at the base's last step, not at the end of that stage |

The saturation of the inversion is measured, not assumed: every `--eval_every` mask steps the current 1[l > 0] mask
and its inversion are scored on both pairs (`curve` in the JSON).

    python benchmarks/reproductions/repro_csordas_double_addition.py --seeds 0,1,2 --run_dir runs/csordas \\
        --output benchmarks/reproductions/results/repro_csordas_double_addition/w400-400-128_3seeds.json

Resumable: the base model (with its last step's gradients) and every mask's logits, optimizer and clip state and curve
are checkpointed under `--run_dir`; a second call with the same arguments continues where the first stopped.
"""

from __future__ import annotations

import argparse
import functools
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import torch
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.analysis.subtasks import (
    invert_masks,
    mask_overlap,
    sharing_fractions,
)
from hf_heuristic_core.io_utils import atomic_write_text, check_run_settings
from hf_heuristic_core.training.objectives import sparsity_penalty

PAIRS = 2
DIGITS = 2
PAPER_TABLE1 = {"M_pair1": (1.00, 0.01), "NOT M_pair1": (0.20, 0.94), "M_pair2": (0.01, 1.00),
                "NOT M_pair2": (0.92, 0.21)}
PAPER_TABLE1_STD = {"NOT M_pair1": (0.127, 0.067), "NOT M_pair2": (0.105, 0.110)}
PAPER_TABLE3 = {"NOT M_pair1 (I/O: full-task mask)": (0.07, 0.62), "NOT M_pair2 (I/O: full-task mask)": (0.63, 0.08)}


# ---------------------------------------------------------------------------------------------------------- data
def tuples(n: int, seed: int) -> torch.Tensor:
    """`[n, pairs, 2]` numbers in [0, 100), drawn like their `TupleArithmetic.generate` (numpy RandomState)."""
    state = np.random.RandomState(seed)
    return torch.from_numpy(np.concatenate([state.randint(0, 100, (n, 1, 2)) for _ in range(PAIRS)], 1))


def encode(numbers: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """One-hot digits `[n, pairs, 2, DIGITS, 10]` (ones digit first) and target digits `[n, pairs, DIGITS]`."""
    digits = torch.stack([numbers % 10, numbers // 10], -1)
    sums = numbers.sum(-1) % 100
    return nn.functional.one_hot(digits, 10).float(), torch.stack([sums % 10, sums // 10], -1)


def pass_input(onehot: torch.Tensor, pair: int) -> torch.Tensor:
    """Their `create_input(data, tuple=pair)`: every other pair's one-hots zeroed, flattened to 80 inputs."""
    x = torch.zeros_like(onehot)
    x[:, pair] = onehot[:, pair]
    return x.flatten(1)


def pair_logits(model: nn.Module, onehot: torch.Tensor, pair: int) -> torch.Tensor:
    """Pair `pair`'s `[n, DIGITS, 10]` logits from its own pass."""
    return model(pass_input(onehot, pair)).view(-1, PAIRS, DIGITS, 10)[:, pair]


@torch.no_grad()
def accuracy(model: nn.Module, data: tuple[torch.Tensor, torch.Tensor], batch: int = 2500) -> list[float]:
    """Per pair, the share of tuples with both digits right (one pass per pair)."""
    onehot, target = data
    right = torch.zeros(PAIRS)
    for start in range(0, len(target), batch):
        for pair in range(PAIRS):
            logits = pair_logits(model, onehot[start:start + batch], pair)
            right[pair] += float((logits.argmax(-1) == target[start:start + batch, pair]).all(-1).sum())
    return (right / len(target)).tolist()


def pairs_loss(model: nn.Module, onehot: torch.Tensor, target: torch.Tensor, pairs: tuple[int, ...]) -> torch.Tensor:
    """Their loss: CE averaged over the digits of the pairs trained on, each pair from its own pass."""
    logits = torch.stack([pair_logits(model, onehot, p) for p in pairs], 1)
    return nn.functional.cross_entropy(logits.reshape(-1, 10), target[:, list(pairs)].reshape(-1))


# ---------------------------------------------------------------------------------------------------------- model
def build_net(hidden: list[int], seed: int, inputs: int = PAIRS * 2 * DIGITS * 10,
              outputs: int = PAIRS * DIGITS * 10) -> nn.Sequential:
    """Their `FeedforwardModel`: Linear layers (PyTorch's default init) with ReLU between them."""
    torch.manual_seed(seed)
    widths = [inputs, *hidden, outputs]
    layers: list[nn.Module] = []
    for i, (a, b) in enumerate(zip(widths, widths[1:])):
        layers += [nn.Linear(a, b)] + ([nn.ReLU()] if i < len(widths) - 2 else [])
    return nn.Sequential(*layers)


class Stage(NamedTuple):
    """One training stage: the rows it samples batches from, the mean loss of a batch of rows, and the offset that
    seeds its sampler and mask noise (double addition: 1 + sum of the pair indices, as before issue #38)."""
    name: str
    rows: torch.Tensor
    loss: Callable[[nn.Module, torch.Tensor], torch.Tensor]
    seed_offset: int


def sample_rows(rows: torch.Tensor, sampler: np.random.RandomState, batch: int) -> torch.Tensor:
    """A batch drawn with replacement (their `InfiniteSampler(replacement=True)`)."""
    return rows[torch.from_numpy(sampler.randint(0, len(rows), batch)).to(rows.device)]


def train_base(net: nn.Module, stage: Stage, args: argparse.Namespace, seed: int) -> None:
    """Adam 1e-3, clipping over all parameters; the last step's clipped gradients stay in `.grad` (their mask
    stages start from them)."""
    sampler = np.random.RandomState(seed)
    optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)
    for step in range(args.base_steps):
        loss = stage.loss(net, sample_rows(stage.rows, sampler, args.batch))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(net.parameters(), args.grad_clip)
        optimizer.step()
        if step % 2000 == 0:
            print(f"  base step {step}: loss {loss.item():.4f}", flush=True)


CLIP_SCOPES = ("all", "masks")


class GradientClip:
    """The mask stages' gradient clipping. `all` is theirs (`clip_grad_norm_(MaskedModel.parameters(), clip)`): the
    norm covers the trained logits, the frozen parameters' gradients (never zeroed, so they accumulate over the mask
    steps) and the earlier stages' last logit gradients, and the clip rescales every one of them in place. `masks`
    covers the trained logits only. Its state (accumulated and earlier gradients) goes into each mask checkpoint."""

    def __init__(self, scope: str, max_norm: float, frozen: dict[str, nn.Parameter]) -> None:
        if scope not in CLIP_SCOPES:
            raise SystemExit(f"--clip_scope {scope!r}: give one of {CLIP_SCOPES}.")
        self.scope, self.max_norm = scope, max_norm
        self.frozen_names, self.frozen = list(frozen), list(frozen.values())
        self.earlier: list[torch.Tensor] = []       # the earlier stages' last logit gradients
        self.coefficients: list[float] = []         # one per clip since the last `take_coefficients`
        for parameter in self.frozen:                # `all`: backward must reach them (no optimizer holds them)
            parameter.requires_grad_(scope == "all")

    def __call__(self, logits: list[torch.Tensor]) -> float:
        """Clip in place; return the factor applied (1.0 where the norm is within `max_norm`)."""
        grads = [p.grad for p in logits if p.grad is not None]
        if self.scope == "all":
            grads += [p.grad for p in self.frozen if p.grad is not None] + self.earlier
        total = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.detach().float()) for g in grads]))
        factor = torch.clamp(self.max_norm / (total + 1e-6), max=1.0)
        for grad in grads:
            grad.detach().mul_(factor.to(grad.dtype))
        self.coefficients.append(float(factor))
        return self.coefficients[-1]

    def take_coefficients(self) -> dict[str, float]:
        """Mean factor and share of clipped steps since the last call (recorded in each curve point)."""
        values, self.coefficients = self.coefficients, []
        return {"clip_factor_mean": float(np.mean(values)) if values else 1.0,
                "clipped_share": float(np.mean([v < 1.0 for v in values])) if values else 0.0}

    def end_stage(self, logits: list[torch.Tensor]) -> None:
        """Their finished mask set keeps its last gradient, which stays in the norm of the later stages."""
        if self.scope == "all":
            self.earlier += [p.grad.detach().clone() for p in logits if p.grad is not None]

    def state_dict(self, logits: list[torch.Tensor]) -> dict[str, Any]:
        return {"frozen": [None if p.grad is None else p.grad.detach().clone() for p in self.frozen],
                "earlier": self.earlier, "logits": [None if p.grad is None else p.grad.detach().clone() for p in logits]}

    def load_state_dict(self, state: dict[str, Any], logits: list[torch.Tensor]) -> None:
        for parameter, grad in zip([*self.frozen, *logits], [*state["frozen"], *state["logits"]]):
            parameter.grad = grad
        self.earlier = list(state["earlier"])


def train_mask(pm: PrunableModel, stage: Stage, score: Callable[[nn.Module], list[float]],
               args: argparse.Namespace, seed: int, folder: Path, clip: GradientClip) -> dict[str, Any]:
    """One mask on `stage`'s loss, checkpointed every `eval_every` steps; returns its final masks and curve."""
    name = stage.name
    checkpoint = folder / f"mask_{name}.pt"
    pm.clear_masks()
    pm.reset_masks(seed)
    logits = [p for _, p in pm.mask_logits.items()]
    optimizer = torch.optim.Adam(logits, lr=args.mask_lr)
    sampler = np.random.RandomState(seed + 7919 * stage.seed_offset)
    pm.generator = torch.Generator(device=stage.rows.device).manual_seed(seed + 104729 * stage.seed_offset)
    state = {"step": 0, "curve": [], "seconds": 0.0}
    if checkpoint.exists():
        saved = torch.load(checkpoint, weights_only=False, map_location=stage.rows.device)
        pm.load_mask_state_dict(saved["logits"])
        optimizer.load_state_dict(saved["optimizer"])
        sampler.set_state(saved["sampler"])
        pm.generator.set_state(saved["generator"].cpu())
        clip.load_state_dict(saved["clip"], logits)
        state = saved["state"]
        print(f"  mask {name}: resumed at step {state['step']}", flush=True)
    if state["step"] > args.mask_steps:
        raise SystemExit(f"{checkpoint} is at mask step {state['step']}, past --mask_steps {args.mask_steps}; its "
                         "masks are not the ones asked for. Give a new --run_dir or --mask_steps >= that step.")
    start = time.time() - state["seconds"]
    pm.train()
    while state["step"] < args.mask_steps:
        rows = sample_rows(stage.rows, sampler, args.batch)
        loss = sum(stage.loss(pm, part) * len(part) for part in rows.chunk(args.mask_samples)) / len(rows)
        loss = loss + sparsity_penalty(pm, args.alpha, args.batch)
        optimizer.zero_grad()
        loss.backward()
        clip(logits)
        optimizer.step()
        state["step"] += 1
        if state["step"] % args.eval_every == 0 or state["step"] == args.mask_steps:
            pm.eval()
            current = pm.get_masks(binary=True)
            point = {"step": state["step"], **score_mask(pm, current, score), **clip.take_coefficients()}
            pm.train()
            torch.save({k: v.bool() for k, v in current.items()}, folder / f"masks_{name}_step{state['step']}.pt")
            state["curve"].append(point)
            state["seconds"] = time.time() - start
            print(f"  mask {name} step {point['step']}: kept {point['kept']:.3f}, M {fmt(point['M'])}, "
                  f"NOT M {fmt(point['NOT_M'])}, clip factor {point['clip_factor_mean']:.3f} "
                  f"({state['seconds']:.0f} s)", flush=True)
            torch.save({"logits": pm.mask_state_dict(), "optimizer": optimizer.state_dict(),
                        "sampler": sampler.get_state(), "generator": pm.generator.get_state(),
                        "clip": clip.state_dict(logits), "state": state}, checkpoint.with_suffix(".tmp"))
            checkpoint.with_suffix(".tmp").replace(checkpoint)
    pm.eval()
    clip.end_stage(logits)
    return {"masks": pm.get_masks(binary=True), "curve": state["curve"], "seconds": state["seconds"]}


def kept_fraction(masks: dict[str, torch.Tensor]) -> float:
    return sum(float(m.sum()) for m in masks.values()) / sum(m.numel() for m in masks.values())


def score_mask(pm: PrunableModel, masks: dict[str, torch.Tensor], score: Callable[[nn.Module], list[float]]
               ) -> dict[str, Any]:
    """A mask and its inversion (1 - M on every masked weight), each scored by `score`."""
    with pm.masks_applied(masks):
        own = score(pm)
    with pm.masks_applied(invert_masks(masks)):
        inverted = score(pm)
    return {"M": own, "NOT_M": inverted, "kept": kept_fraction(masks)}


def fmt(values: list[float]) -> str:
    return "/".join(f"{v:.3f}" for v in values)


# ---------------------------------------------------------------------------------------------------------- runs
class Seeded(NamedTuple):
    """What every experiment's seed starts from: the wrapped base model, its clip and the output so far."""
    pm: PrunableModel
    clip: GradientClip
    out: dict[str, Any]
    folder: Path
    start: float


def prepare_seed(seed: int, args: argparse.Namespace, net: nn.Module, base: Stage,
                 score: Callable[[nn.Module], list[float]]) -> Seeded:
    """Train (or load) the base model with its last step's gradients, freeze it, wrap it in weight masks."""
    folder = Path(args.run_dir) / f"seed{seed}"
    folder.mkdir(parents=True, exist_ok=True)
    base_file = folder / "base.pt"
    start = time.time()
    frozen = dict(net.named_parameters())
    if base_file.exists():
        saved = torch.load(base_file, weights_only=False, map_location=args.device)
        net.load_state_dict(saved["state_dict"])
        if "last_grads" not in saved:
            raise SystemExit(f"{base_file} has no last-step gradients (an older revision of this script); "
                             "give a new --run_dir.")
        for name, grad in saved["last_grads"].items():
            frozen[name].grad = grad
        base_seconds = saved["seconds"]
    else:
        train_base(net, base, args, seed)
        base_seconds = time.time() - start
        torch.save({"state_dict": net.state_dict(), "seconds": base_seconds,
                    "last_grads": {name: p.grad for name, p in frozen.items()}}, folder / "base.tmp")
        (folder / "base.tmp").replace(base_file)
    net.eval().requires_grad_(False)
    out: dict[str, Any] = {"seed": seed, "base": score(net), "base_seconds": base_seconds}
    print(f"seed {seed}: base model {fmt(out['base'])} ({base_seconds:.0f} s)", flush=True)
    config = PruningConfig(granularity="weight", relaxation="gumbel_sigmoid", granularity_settings={"mask_bias": False},
                           mask_samples=args.mask_samples,
                           relaxation_settings={"gumbel_init_prob": 1 / (1 + math.exp(-args.mask_init))})
    pm = PrunableModel(net, config)
    out["masked_weights"] = pm.granularity.selection_summary()["masked_entries"]
    clip = GradientClip(args.clip_scope, args.grad_clip, frozen)
    return Seeded(pm, clip, out, folder, start)


def train_stages(seeded: Seeded, stages: list[Stage], score: Callable[[nn.Module], list[float]],
                 args: argparse.Namespace, seed: int) -> dict[str, dict[str, torch.Tensor]]:
    """One mask per stage, in order (the clip's accumulated gradients carry over); fills `seeded.out`."""
    masks, out = {}, seeded.out
    for stage in stages:
        trained = train_mask(seeded.pm, stage, score, args, seed, seeded.folder, seeded.clip)
        masks[stage.name] = trained["masks"]
        final = trained["curve"][-1]
        name = stage.name
        out[f"M_{name}"], out[f"NOT M_{name}"], out[f"kept_{name}"] = final["M"], final["NOT_M"], final["kept"]
        out[f"curve_{name}"] = [dict(point) for point in trained["curve"]]
        out[f"mask_seconds_{name}"] = trained["seconds"]
    return masks


def run_seed(seed: int, args: argparse.Namespace, train: torch.Tensor, valid: Any) -> dict[str, Any]:
    hidden = [int(w) for w in args.hidden.split(",")]
    score = functools.partial(accuracy, data=valid)
    def pairs_stage(name: str, pairs: tuple[int, ...]) -> Stage:
        return Stage(name, train, lambda model, rows: pairs_loss(model, *encode(rows), pairs), 1 + sum(pairs))
    seeded = prepare_seed(seed, args, build_net(hidden, seed).to(args.device),
                          pairs_stage("base", tuple(range(PAIRS))), score)
    stages = ([pairs_stage("full", tuple(range(PAIRS)))] if args.reference_mask else []) + \
        [pairs_stage(f"pair{p + 1}", (p,)) for p in range(PAIRS)]
    masks = train_stages(seeded, stages, score, args, seed)
    pm, out, folder = seeded.pm, seeded.out, seeded.folder
    overlap = mask_overlap(masks["pair1"], masks["pair2"])
    out["iou_per_layer"] = {k: v["iou"] for k, v in overlap.items()}
    out["iou_per_layer_by_step"] = {}
    for point in out["curve_pair1"]:
        files = [folder / f"masks_{name}_step{point['step']}.pt" for name in ("pair1", "pair2")]
        if all(f.exists() for f in files):
            early = [torch.load(f, weights_only=False, map_location=args.device) for f in files]
            out["iou_per_layer_by_step"][point["step"]] = {k: v["iou"] for k, v in mask_overlap(*early).items()}
    out["shared_fraction_per_layer"] = sharing_fractions({"pair1": masks["pair1"], "pair2": masks["pair2"]})
    if args.reference_mask:
        io_layers = [kinds for kinds in masks["full"] if kinds.startswith(("0.", f"{2 * len(hidden)}."))]
        for name in ("pair1", "pair2"):
            variant = {k: masks["full"][k].float() if k in io_layers else 1.0 - v.float()
                       for k, v in masks[name].items()}
            with pm.masks_applied(variant):
                out[f"NOT M_{name} (I/O: full-task mask)"] = accuracy(pm, valid)
    out["seconds"] = time.time() - seeded.start
    return out


SATURATION_TOLERANCE = 0.02


def inversion_saturates_at_step(steps: list[int], values: list[float],
                                tolerance: float = SATURATION_TOLERANCE) -> int | None:
    """The first checkpoint step from which the curve has stopped rising: no later checkpoint is more than
    `tolerance` above that step's value or any checkpoint in between (so a dip followed by a climb of more than
    `tolerance` still counts as rising). None where it has not stopped: its last checkpoint rises more than
    `tolerance` above the one before, or there is a single checkpoint (nothing shows a stop). Being within
    `tolerance` of the last value is not the rule: every curve's last checkpoint is, a still-rising one included."""
    for start in range(len(values) - 1):       # the last checkpoint alone cannot show that the curve stopped
        lowest = values[start]
        for value in values[start + 1:]:
            if value > lowest + tolerance:
                break
            lowest = min(lowest, value)
        else:
            return steps[start]
    return None


def summarize(runs: list[dict[str, Any]]) -> dict[str, Any]:
    """Mean, std and min-max over seeds of every Table-1 cell, the per-layer IoU and the saturation step."""
    def stats(values: list[float]) -> dict[str, float]:
        t = torch.tensor(values, dtype=torch.float64)
        return {"mean": float(t.mean()), "std": float(t.std()) if len(values) > 1 else 0.0,
                "min": float(t.min()), "max": float(t.max())}
    table = {}
    for row in ("base", "M_pair1", "NOT M_pair1", "M_pair2", "NOT M_pair2", "NOT M_pair1 (I/O: full-task mask)",
                "NOT M_pair2 (I/O: full-task mask)", "M_full", "NOT M_full"):
        if row in runs[0]:
            table[row] = [stats([run[row][p] for run in runs]) for p in range(PAIRS)]
    iou = {layer: stats([run["iou_per_layer"][layer] for run in runs]) for layer in runs[0]["iou_per_layer"]}
    kept = {name: stats([run[f"kept_{name}"] for run in runs]) for name in ("pair1", "pair2")}
    inversion = "NOT M_pair1"
    curve_steps = [point["step"] for point in runs[0]["curve_pair1"]]
    mean_curve = [float(np.mean([run["curve_pair1"][i]["NOT_M"][1] for run in runs])) for i in range(len(curve_steps))]
    saturated = inversion_saturates_at_step(curve_steps, mean_curve)
    goal = {"NOT M_pair1 on pair 2 >= 0.90": table[inversion][1]["mean"] >= 0.90,
            "M_pair1 on pair 1 >= 0.95": table["M_pair1"][0]["mean"] >= 0.95,
            "M_pair1 on pair 2 <= 0.02": table["M_pair1"][1]["mean"] <= 0.02}
    by_step = {}
    for i, step in enumerate(curve_steps):
        cells = {}
        for name in ("pair1", "pair2"):
            for key, row in (("M", f"M_{name}"), ("NOT_M", f"NOT M_{name}")):
                cells[row] = [float(np.mean([run[f"curve_{name}"][i][key][p] for run in runs])) for p in range(PAIRS)]
            cells[f"kept_{name}"] = float(np.mean([run[f"curve_{name}"][i]["kept"] for run in runs]))
        ious = [run["iou_per_layer_by_step"].get(step) or run["iou_per_layer_by_step"].get(str(step)) for run in runs]
        if all(ious):
            cells["iou_per_layer"] = {layer: float(np.mean([v[layer] for v in ious])) for layer in ious[0]}
        by_step[step] = cells
    return {"table": table, "iou_per_layer": iou, "kept": kept, "by_step": by_step,
            "inversion_curve_mean": dict(zip(curve_steps, mean_curve)),
            "inversion_saturates_at_step": saturated, "goal": goal}


def print_summary(summary: dict[str, Any]) -> None:
    print("\n| mask | pair 1 | pair 2 | paper pair 1 / pair 2 |\n|---|---|---|---|")
    for row, cells in summary["table"].items():
        paper = PAPER_TABLE1.get(row) or PAPER_TABLE3.get(row)
        paper_text = f"{paper[0]:.2f} / {paper[1]:.2f}" if paper else "-"
        print(f"| {row} | " + " | ".join(f"{c['mean']:.3f} ± {c['std']:.3f} ({c['min']:.3f}-{c['max']:.3f})"
                                         for c in cells) + f" | {paper_text} |")
    print("per-layer IoU: " + ", ".join(f"{k} {v['mean']:.3f}" for k, v in summary["iou_per_layer"].items()))
    print(f"inversion (NOT M_pair1 on pair 2) by mask step: {summary['inversion_curve_mean']}")
    step = summary["inversion_saturates_at_step"]
    print(f"saturates (no later rise above {SATURATION_TOLERANCE}) at step {step}" if step is not None else
          f"not saturated (the last checkpoint rises more than {SATURATION_TOLERANCE}, or there is only one)")
    print(f"goal: {summary['goal']}")


# Settings that decide what a run directory's checkpoints are (--mask_steps may grow: a resumed mask trains on).
# eval_every decides the steps of a mask's saved curve and of its masks_*_step*.pt files: resumed with another, a
# curve would mix spacings and summarize() would average seeds' points of different steps.
# clip_scope decides every mask gradient; experiment keeps the add/mul script (a sibling) out of these directories.
RUN_DIR_SETTINGS = ("hidden", "base_steps", "alpha", "mask_lr", "mask_init", "mask_samples", "grad_clip", "batch",
                    "train_size", "valid_size", "eval_every", "clip_scope", "experiment")


def check_run_dir(folder: Path, args: argparse.Namespace, settings: tuple[str, ...] = RUN_DIR_SETTINGS) -> None:
    """Refuse to resume a run directory made with other settings; record them on first use."""
    check_run_settings(folder, {key: getattr(args, key) for key in settings}, "seed*/base.pt")


def merge_outputs(paths: list[str], settings: tuple[str, ...] = RUN_DIR_SETTINGS,
                  summarize_runs: Callable[[list[dict[str, Any]]], dict[str, Any]] | None = None) -> dict[str, Any]:
    """One result from the --output files of several runs of one setting (e.g. one process per seed on a GPU)."""
    results = [json.loads(Path(path).read_text()) for path in paths]
    keys = [*settings, "mask_steps", "reference_mask"]
    first = {k: results[0]["settings"].get(k) for k in keys}
    for path, result in zip(paths, results):
        mine = {k: result["settings"].get(k) for k in keys}
        if mine != first:
            raise SystemExit(f"--merge: {path} was made with other settings ({mine} vs {first}).")
    runs = sorted((run for result in results for run in result["runs"]), key=lambda run: run["seed"])
    seeds = [run["seed"] for run in runs]
    if len(set(seeds)) != len(seeds):
        raise SystemExit(f"--merge: a seed appears twice ({seeds}).")
    merged = {k: v for k, v in results[0].items() if k not in ("runs", "summary", "seconds")}
    merged["settings"] = {**results[0]["settings"], "seeds": ",".join(map(str, seeds)), "output": None}
    return {**merged, "runs": runs, "summary": (summarize_runs or summarize)(runs), "merged_from": paths,
            "seconds_per_file": dict(zip(paths, (r["seconds"] for r in results)))}


def common_parser(description: str, experiment: str, hidden: str, alpha: float, run_dir: str
                  ) -> argparse.ArgumentParser:
    """The flags both Csordás experiments share (their defaults differ only in width, alpha and folder)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hidden", default=hidden, help="hidden widths (paper: 2000,2000,2000,2000)")
    parser.add_argument("--base_steps", type=int, default=20000, help="paper: 20000")
    parser.add_argument("--mask_steps", type=int, default=20000, help="per mask (paper: 20000)")
    parser.add_argument("--alpha", type=float, default=alpha, help="penalty weight on sum(logits) / batch")
    parser.add_argument("--mask_lr", type=float, default=1e-2)
    parser.add_argument("--mask_init", type=float, default=2.0, help="initial logit (their mask_init)")
    parser.add_argument("--mask_samples", type=int, default=4)
    parser.add_argument("--grad_clip", type=float, default=1.0)
    parser.add_argument("--clip_scope", choices=CLIP_SCOPES, default="all",
                        help="all: theirs (logits + the frozen weights' accumulated gradients); masks: logits only")
    parser.add_argument("--batch", type=int, default=128)
    parser.add_argument("--seeds", default="0,1,2")
    parser.add_argument("--eval_every", type=int, default=1000, help="mask steps between inversion checkpoints")
    parser.add_argument("--train_size", type=int, default=1_000_000)
    parser.add_argument("--valid_size", type=int, default=10_000)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--device", default="cpu", help="cpu or cuda (data, model and masks all live there)")
    parser.add_argument("--run_dir", default=run_dir, help="checkpoints (resumable)")
    parser.add_argument("--output", default=None, help="results JSON, rewritten after every seed")
    parser.add_argument("--merge", nargs="+", default=None, metavar="JSON",
                        help="join the --output files of runs of one setting (other seeds) into --output and stop")
    parser.set_defaults(experiment=experiment)
    return parser


def run_seeds(args: argparse.Namespace, settings: tuple[str, ...], header: dict[str, Any],
              one_seed: Callable[[int], dict[str, Any]], summarize_runs: Callable[[list[dict[str, Any]]], dict[str, Any]],
              show: Callable[[dict[str, Any]], None]) -> None:
    """--merge, or every seed in turn, the results JSON rewritten after each."""
    if args.merge:
        merged = merge_outputs(args.merge, settings, summarize_runs)
        show(merged["summary"])
        if args.output:
            atomic_write_text(args.output, json.dumps(merged, indent=2) + "\n")
        return
    Path(args.run_dir).mkdir(parents=True, exist_ok=True)
    check_run_dir(Path(args.run_dir), args, settings)
    start = time.time()
    runs = []
    results: dict[str, Any] = {"settings": vars(args), **header,
                               "machine": {"device": args.device, "torch": torch.__version__, "gpu":
                                           torch.cuda.get_device_name() if args.device.startswith("cuda") else None}}
    for seed in (int(s) for s in args.seeds.split(",")):
        runs.append(one_seed(seed))
        results.update(runs=runs, summary=summarize_runs(runs), seconds=time.time() - start)
        if args.output:
            atomic_write_text(args.output, json.dumps(results, indent=2) + "\n")
    show(results["summary"])
    where = torch.cuda.get_device_name() if args.device.startswith("cuda") else f"{args.threads} CPU thread(s)"
    print(f"total {time.time() - start:.0f} s on {where}")


def main() -> None:
    parser = common_parser(__doc__.split("\n\n")[0], "double_addition", "400,400,128", 4e-4, "runs/repro_csordas")
    parser.add_argument("--reference_mask", action="store_true",
                        help="also train their stage-0 mask on the full task and score their Table 3 variant")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    if args.merge:
        run_seeds(args, RUN_DIR_SETTINGS, {}, lambda seed: {}, summarize, print_summary)
        return
    train = tuples(args.train_size, 0x12345678).to(args.device)
    valid = encode(tuples(args.valid_size, 0x12345678 + 2).to(args.device))
    header = {"paper_table1": PAPER_TABLE1, "paper_table1_std": PAPER_TABLE1_STD, "paper_table3": PAPER_TABLE3}
    run_seeds(args, RUN_DIR_SETTINGS, header, lambda seed: run_seed(seed, args, train, valid), summarize,
              print_summary)


if __name__ == "__main__":
    main()
