"""`hf-heuristic-core circuit`: MIB-format circuits, attribution scores and faithfulness curves.

    hf-heuristic-core circuit export --scores runs/sp50-seed0 --output_dir mib/ioi_smollm2
    hf-heuristic-core circuit attribute --model M --dataset ioi --method integrated_gradients --output_dir OUT
    hf-heuristic-core circuit faithfulness --model M --dataset nli --scores OUT/importances.json,runs/sp50-seed0 \
        --output_dir curves
    hf-heuristic-core circuit faithfulness --model M --dataset nli --runs_dir runs   # every run; analyze shows it

`--help` is drawn from the dataclass below without importing torch.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .help import render_help, wants_help
from ..config import PruningConfig
from ..io_utils import atomic_write_text
from .checks import check_model_source

ACTIONS = {
    "export": "write a ranking (--scores) as MIB's importance file plus binary circuits at MIB's sizes",
    "attribute": "score every head and MLP block by attribution patching or integrated gradients (MIB JSON)",
    "faithfulness": "MIB's faithfulness curve, CPR and CMD of rankings (--scores, or every run of --runs_dir)",
}
DESCRIPTION = ("Circuits in MIB's circuit-localization format: export, attribution baseline, faithfulness curves.\n"
               + "\n".join(f"  {name:<13} {text}" for name, text in ACTIONS.items()))
PROG = "hf-heuristic-core circuit {export,attribute,faithfulness}"


@dataclass
class CircuitArguments:
    """Flags of `hf-heuristic-core circuit` (the action may also be given as the first positional argument)."""

    action: str | None = field(default=None, metadata={"help": "export, attribute or faithfulness."})
    output_dir: str | None = field(default=None, metadata={"help": "Where the files go."})
    scores: str | None = field(default=None, metadata={
        "help": "Rankings, comma-separated: mask artifact folders (ranked by their logits) or MIB importance .json "
                "files. export takes one."})
    model: str | None = field(default=None, metadata={
        "help": "Hub id or folder of the model (attribute, faithfulness; export reads the model's config only)."})
    gguf_file: str | None = field(default=None, metadata={"help": "GGUF file inside --model, if any."})
    dataset: str | None = field(default=None, metadata={
        "help": "ioi (generated IOI prompts, causal LMs), nli (generated HANS-style NLI, classifiers), or a Hub id / "
                "local files (classifier: text + label columns; LM: text, answer, foil columns)."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    split: str = field(default="train", metadata={"help": "Split of --dataset."})
    text_columns: str | None = field(default=None, metadata={"help": "Classifier text column(s), comma-separated."})
    num_examples: int = field(default=200, metadata={"help": "Examples scored (and averaged over)."})
    max_length: int = field(default=64, metadata={"help": "Tokenizer truncation length."})
    seed: int = field(default=0, metadata={"help": "Seed of the generated data."})
    ablation: str = field(default="mean", metadata={
        "help": "mean, zero or resample: what replaces a unit outside the circuit (mean: over --dataset, as MIB)."})
    method: str = field(default="integrated_gradients", metadata={
        "help": "attribute: patching (one backward pass per batch) or integrated_gradients."})
    ig_steps: int = field(default=5, metadata={"help": "attribute: integrated-gradients steps (MIB's default 5)."})
    sizes: str = field(default="submission", metadata={
        "help": "export: circuit sizes, 'submission' (0, 0.1, ..., 50%%: MIB's leaderboard files), 'curve' (0.1 .. "
                "100%%: MIB's evaluation points) or fractions '0.01,0.1'."})
    edges: str = field(default="all", metadata={
        "help": "all: write every edge of MIB's graph (in_graph from the nodes), none: 'edges': {} (smaller)."})
    absolute: bool = field(default=False, metadata={"help": "Rank by |score| (MIB's --absolute)."})
    runs_dir: str | None = field(default=None, metadata={
        "help": "faithfulness: rank by every run of a prune_many folder and write RUNS_DIR/circuits/curves.json, "
                "which analyze reports."})
    random_seeds: str = field(default="0,1,2", metadata={
        "help": "faithfulness: seeds of random rankings drawn as the chance baseline ('' for none)."})
    batch_size: int = field(default=16, metadata={"help": "Batch size."})
    device: str | None = field(default=None, metadata={"help": "Device, e.g. cuda (default: cpu)."})


def circuit_help() -> str:
    return render_help(PROG, DESCRIPTION, [("circuit", CircuitArguments, None)],
                       epilog="Dashes and underscores both work; booleans take true/false.")


def parse_circuit_args(argv: Sequence[str]) -> CircuitArguments:
    from transformers import HfArgumentParser
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--action", argv[0], *argv[1:]]
    parser = HfArgumentParser(CircuitArguments, prog=PROG, description=DESCRIPTION)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    if args.action not in ACTIONS:
        raise UsageError(f"circuit: give the action first, one of {sorted(ACTIONS)} (got {args.action!r}); e.g. "
                         "hf-heuristic-core circuit export --scores DIR --output_dir OUT.")
    if args.ablation not in ("mean", "zero", "resample"):
        raise UsageError(f"--ablation {args.ablation!r} is not one of mean, zero, resample.")
    if args.edges not in ("all", "none"):
        raise UsageError(f"--edges {args.edges!r} is not one of all, none.")
    if args.num_examples < 2 or args.batch_size < 1 or args.ig_steps < 1:
        raise UsageError("--num_examples must be >= 2, --batch_size and --ig_steps >= 1.")
    return args


def circuit_command(argv: Sequence[str]) -> int:
    argv = list(argv)
    if wants_help(argv):
        print(circuit_help())
        return 0
    args = parse_circuit_args(argv)
    summary = {"export": run_export, "attribute": run_attribute, "faithfulness": run_faithfulness}[args.action](args)
    for line in summary.get("lines", []):
        print(line)
    return 0


# ------------------------------------------------------------------ helpers
def _require(args: CircuitArguments, *names: str) -> None:
    missing = [f"--{n}" for n in names if not getattr(args, n)]
    if missing:
        raise UsageError(f"circuit {args.action} needs {', '.join(missing)}; see `hf-heuristic-core circuit --help`.")


def _sizes(text: str) -> tuple[float, ...]:
    # lazy: `--help` does not load it
    from ..circuits.ranking import MIB_CURVE_SIZES, MIB_SUBMISSION_SIZES
    if text == "submission":
        return MIB_SUBMISSION_SIZES
    if text == "curve":
        return MIB_CURVE_SIZES
    try:
        sizes = tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError as err:
        raise UsageError(f"--sizes {text!r}: give 'submission', 'curve' or fractions like 0.01,0.1.") from err
    if not sizes or any(not 0 <= s <= 1 for s in sizes):
        raise UsageError(f"--sizes {text!r}: sizes are fractions in [0, 1] (0.05 for 5%).")
    return sizes


def _load(args: CircuitArguments) -> tuple[Any, Any, bool]:
    """The wrapped model (masks disabled until a circuit is applied), its tokenizer, and whether it is a causal LM."""
    import transformers

    from ..model import PrunableModel  # lazy: `--help` does not load it
    check_model_source(args.model, args.gguf_file)
    kwargs = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    config = transformers.AutoConfig.from_pretrained(args.model, **kwargs)
    names = " ".join(getattr(config, "architectures", None) or [])
    causal = "ForCausalLM" in names or "LMHeadModel" in names
    model_class = transformers.AutoModelForCausalLM if causal else transformers.AutoModelForSequenceClassification
    tokenizer = transformers.AutoTokenizer.from_pretrained(args.model, **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    prunable = PrunableModel.from_pretrained(args.model, PruningConfig(ablation=args.ablation),
                                             model_class=model_class, **kwargs)
    if getattr(prunable.config, "pad_token_id", None) is None:
        prunable.config.pad_token_id = tokenizer.pad_token_id
    if args.device:
        prunable.to(args.device)
    return prunable.eval(), tokenizer, causal


def _data(args: CircuitArguments, prunable: Any, tokenizer: Any, causal: bool) -> tuple[Any, Any]:
    import transformers

    from ..circuits.tasks import circuit_task_data  # lazy: `--help` does not load it
    data = circuit_task_data(args.dataset, tokenizer, causal_lm=causal, size=args.num_examples, seed=args.seed,
                             max_length=args.max_length, text_columns=args.text_columns, split=args.split,
                             dataset_config=args.dataset_config)
    collator = transformers.DataCollatorWithPadding(tokenizer)
    if args.ablation == "mean":   # means over the scored data itself, as MIB's mean ablation takes them
        prunable.compute_means(data.remove_columns([c for c in data.column_names if c in ("labels", "answer_id",
                                                                                           "foil_id")]),
                               batch_size=args.batch_size, collate_fn=collator, show_progress=False)
    return data, collator


# ------------------------------------------------------------------ actions
def run_export(args: CircuitArguments) -> dict[str, Any]:
    from ..circuits.export import export_mib_circuits  # lazy: `--help` does not load it
    from ..circuits.sources import load_unit_scores  # lazy: `--help` does not load it
    _require(args, "scores", "output_dir")
    if "," in args.scores:
        raise UsageError("circuit export writes one ranking; pass one --scores source.")
    cfg = _export_config(args)
    scores = load_unit_scores(args.scores, {"heads": (cfg.n_layers, cfg.n_heads), "mlps": (cfg.n_layers,)})
    written = export_mib_circuits(args.output_dir, cfg, scores, _sizes(args.sizes), args.absolute, args.edges)
    lines = [f"MIB importance file: {written['importances']} ({written['n_scored']} scored units)"]
    lines += [f"  circuit {fraction:.1%}: {entry['units']} units -> {Path(entry['path']).name}"
              for fraction, entry in written["circuits"].items()]
    return {**written, "lines": lines}


def _export_config(args: CircuitArguments) -> Any:
    """MIB's cfg from the model's config (`--model`), else from the artifact or MIB file given as --scores."""
    # lazy: `--help` does not load it
    from ..circuits.mib import MibConfig, parallel_attn_mlp, read_mib_circuit
    source = Path(args.scores)
    if source.suffix == ".json" and source.is_file():
        return read_mib_circuit(source).cfg
    from ..artifacts import read_artifact  # lazy: `--help` does not load it
    config = read_artifact(source).config
    if not (config.num_layers and config.num_heads):
        raise UsageError(f"{source}: the artifact does not record num_layers / num_heads; re-save it with a current "
                         "version, or export from a MIB .json file.")
    hf_config = None
    model = args.model or config.base_model_name_or_path
    if model:
        try:
            import transformers
            kwargs = {"gguf_file": args.gguf_file} if args.gguf_file else {}
            hf_config = transformers.AutoConfig.from_pretrained(model, **kwargs)
        except (OSError, ValueError):
            hf_config = None   # the model type's default residual layout is used
    return MibConfig(int(config.num_layers), int(config.num_heads), int(config.hidden_size or 0),
                     parallel_attn_mlp(config.model_type, hf_config))


def run_attribute(args: CircuitArguments) -> dict[str, Any]:
    from ..circuits.attribution import attribution_scores  # lazy: `--help` does not load it
    from ..circuits.export import export_mib_circuits  # lazy: `--help` does not load it
    from ..circuits.mib import mib_config  # lazy: `--help` does not load it
    from ..circuits.ranking import MIB_SUBMISSION_SIZES  # lazy: `--help` does not load it
    _require(args, "model", "dataset", "output_dir")
    prunable, tokenizer, causal = _load(args)
    data, collator = _data(args, prunable, tokenizer, causal)
    result = attribution_scores(prunable, data, method=args.method, steps=args.ig_steps, ablation=args.ablation,
                                batch_size=args.batch_size, collate_fn=collator)
    written = export_mib_circuits(args.output_dir, mib_config(prunable), result.scores, MIB_SUBMISSION_SIZES,
                                  args.absolute, args.edges)
    info = {**result.describe(), "model": args.model, "dataset": args.dataset, "num_examples": args.num_examples}
    atomic_write_text(Path(args.output_dir) / "attribution.json", json.dumps(info, indent=2) + "\n")
    lines = [f"{args.method} scores of {written['n_scored']} units ({result.examples} examples, "
             f"{result.forward_backward_passes} forward+backward passes, {result.seconds:.1f} s)",
             f"MIB importance file: {written['importances']} (+ {len(written['circuits'])} binary circuits)"]
    return {**written, **info, "lines": lines}


def run_faithfulness(args: CircuitArguments) -> dict[str, Any]:
    # lazy: `--help` does not load it
    from ..circuits.report import CURVES_NAME, curves_document, write_curves
    _require(args, "model", "dataset")
    if not (args.scores or args.runs_dir):
        raise UsageError("circuit faithfulness needs --scores (rankings) or --runs_dir (every run of a prune_many "
                         "folder).")
    if not (args.output_dir or args.runs_dir):
        raise UsageError("circuit faithfulness needs --output_dir (or --runs_dir, whose circuits/ folder is used).")
    prunable, tokenizer, causal = _load(args)
    data, collator = _data(args, prunable, tokenizer, causal)
    seeds = [int(s) for s in args.random_seeds.split(",") if s.strip()]
    rankings, groups = _rankings(args, prunable)
    document = curves_document(prunable, data, rankings, groups, ablation=args.ablation, random_seeds=seeds,
                               batch_size=args.batch_size, collate_fn=collator,
                               description={"model": args.model, "dataset": args.dataset,
                                            "num_examples": args.num_examples, "seed": args.seed})
    out = Path(args.output_dir) if args.output_dir else Path(args.runs_dir) / "circuits"
    figure = write_curves(out, document)
    lines = [f"faithfulness curves: {out / CURVES_NAME} (figure {figure})",
             f"m(full) = {document['m_full']:.4g}, m(empty) = {document['m_empty']:.4g} ({args.ablation} ablation, "
             f"{document['examples']} examples)"]
    for name, curve in document["curves"].items():
        lines.append(f"  {name:<32} CPR {curve['cpr']:.3f}  CMD {curve['cmd']:.3f}")
    return {**document, "lines": lines}


def _rankings(args: CircuitArguments, prunable: Any) -> tuple[dict[str, Any], dict[str, str]]:
    from ..circuits.sources import load_unit_scores  # lazy: `--help` does not load it
    rankings: dict[str, Any] = {}
    groups: dict[str, str] = {}
    for source in [s.strip() for s in (args.scores or "").split(",") if s.strip()]:
        name = Path(source).name if Path(source).is_dir() else Path(source).stem
        name = name if name not in rankings else source
        rankings[name] = load_unit_scores(source, prunable.mask_shapes())
        groups[name] = name
    if args.runs_dir:
        from ..analysis.results import collect_results  # lazy: `--help` does not load it
        results = collect_results(Path(args.runs_dir)).results
        if not results:
            raise UsageError(f"--runs_dir {args.runs_dir} holds no finished runs (sp*-seed*/result.json).")
        for row in results:
            rankings[row["run"]] = load_unit_scores(Path(args.runs_dir) / row["run"], prunable.mask_shapes())
            groups[row["run"]] = f"learned masks, {row['sparsity']:.0%} sparsity"
    return rankings, groups
