"""`hf-heuristic-core study`: the heuristic-core study end to end, resumable, on a laptop CPU by default.

1. Fine-tune (real MiniLM + fresh 2-way head, on generated NLI data where lexical overlap almost always works), saving
   checkpoints and tracking effective size (ID / OOD / mixed) with `EffectiveSizeCallback` and the nested search.
2. Prune the final model at two sparsities x several seeds (`prune_many`), evaluating ID and each OOD subcase.
3. Analyze (`analyze`): head frequency and the joint heatmap, the core and its chance baseline, Spearman between the
   sparsities, an ablation table of core heads, attention patterns of core heads, control subnetworks.
4. Write `report.md`, `report.json`, figures and every mask artifact under `--output_dir`.

Every step skips what a previous (interrupted) run already finished. `--config` takes a YAML/JSON file of the same
fields (see `examples/paper_bert_mnli.yaml` for the paper-scale run).
"""

from __future__ import annotations

import json
import logging
import os
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from ..io_utils import atomic_write_text
from ..tokenizer_loading import check_tokenizer, load_tokenizer
from ..search.defaults import DEFAULT_STRATEGY
from ..training.recipes import get_recipe
from ..config import PruningConfig

logger = logging.getLogger(__name__)



@dataclass
class StudyArguments:
    """Every part of the study can be swapped; the defaults run on 2 idle CPU cores in about 15 minutes (909 s on
    2026-12-02, docs/guides/study.md)."""

    output_dir: str = field(default="runs/study", metadata={"help": "Where everything is written (resumable)."})
    model: str = field(default="minilm", metadata={
        "help": "'minilm' (the offline all-MiniLM-L6-v2 wheel), a Hub id or a folder. An already fine-tuned "
                "sequence classifier skips fine-tuning (see --finetune)."})
    finetune: str = field(default="auto", metadata={
        "help": "auto (fine-tune unless --model is already a sequence classifier), always or never."})
    train: str | None = field(default=None, metadata={"help": "Training data (Hub id or files); default generated."})
    id_eval: str | None = field(default=None, metadata={"help": "In-domain evaluation data; default generated."})
    ood_eval: str | None = field(default=None, metadata={
        "help": "Out-of-domain data, split per subcase, e.g. ../shared/data/hans or 'hans'; default generated."})
    train_size: int = field(default=4000, metadata={"help": "Generated training examples."})
    id_eval_size: int = field(default=400, metadata={"help": "Generated in-domain evaluation examples."})
    ood_per_case: int = field(default=60, metadata={"help": "Examples per OOD subcase."})
    counter_heuristic_fraction: float = field(default=0.05, metadata={
        "help": "Share of generated training examples on which the lexical-overlap heuristic is wrong."})
    max_length: int = field(default=40, metadata={"help": "Tokenizer truncation length (the paper: 128)."})
    num_labels: int = field(default=2, metadata={"help": "Labels of the fresh classification head."})
    finetune_steps: int = field(default=240, metadata={"help": "Fine-tuning steps."})
    finetune_batch_size: int = field(default=32, metadata={"help": "Fine-tuning batch size."})
    finetune_learning_rate: float = field(default=5e-5, metadata={"help": "Fine-tuning learning rate."})
    checkpoint_every: int = field(default=40, metadata={"help": "Save a checkpoint every N fine-tuning steps."})
    track_effective_size: bool = field(default=True, metadata={"help": "Track effective size over checkpoints."})
    effective_size_sparsities: str = field(default="0.1,0.2,0.3,0.4,0.5,0.6,0.7", metadata={
        "help": "Sparsity levels of the effective-size search."})
    effective_size_steps: int = field(default=100, metadata={
        "help": "Pruning steps of one search run (nested/climb: per seed; grid: per sparsity and seed)."})
    effective_size_seeds: str = field(default="0,1,2", metadata={
        "help": "Pruning seeds of the effective-size search (the paper's 3); each seed repeats the search, and the "
                "report shows the mean and min-max band. One seed ('0') is about 3x faster."})
    effective_size_strategy: str = field(default=DEFAULT_STRATEGY, metadata={
        "help": "nested (one run at the highest level, every level from its final ranking: fastest), climb (one run "
                "whose target climbs through the levels) or grid (the paper's: one run per level)."})
    sparsities: str = field(default="0.5,0.7", metadata={"help": "Sparsities of the multi-seed pruning."})
    seeds: str = field(default="0,1,2,3", metadata={"help": "Seeds of the multi-seed pruning."})
    prune_steps: int = field(default=200, metadata={"help": "Pruning steps per run."})
    prune_batch_size: int = field(default=16, metadata={"help": "Pruning batch size."})
    pruning_recipe: str = field(default="short", metadata={
        "help": "short (init 3, expected-L0 penalty, multiplier lr 0.1: works in a few hundred steps) or paper "
                "(the paper's recipe: init 10, sampled penalty, multiplier lr 1.0; needs ~9000 steps)."})
    means_examples: int = field(default=256, metadata={"help": "Training examples for mean activations."})
    ablation_non_core_sample: int = field(default=16, metadata={
        "help": "Non-core heads ablated one at a time for the 'average non-core head' row (0 = all)."})
    max_core_units: int = field(default=8, metadata={"help": "At most this many core heads in the ablation table."})
    analyze: bool = field(default=True, metadata={
        "help": "Analyze the runs (report/: tables, figures, ablation table, attention patterns) and measure the slim "
                "model. --no_analyze stops after pruning: run `hf-heuristic-core analyze OUTPUT_DIR/runs` later, or "
                "the study again without it (finished steps are skipped)."})
    device: str = field(default="auto", metadata={"help": "auto (cuda when present), cuda or cpu."})
    seed: int = field(default=0, metadata={"help": "Seed of data generation and fine-tuning."})
    config: str | None = field(default=None, metadata={
        "help": "YAML/JSON file with any of these fields (e.g. examples/paper_bert_mnli.yaml); flags given with it "
                "win."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write into an --output_dir that holds another study (other settings) or other files (nothing is "
                "deleted). A study with the same settings resumes without it; --seeds and --sparsities may grow."})

    def __post_init__(self) -> None:
        if self.config:
            defaults = {f.name: f.default for f in fields(self)}
            for key, value in self.read_config(self.config).items():
                if getattr(self, key) == defaults[key]:   # values given explicitly win over the file
                    setattr(self, key, value)
        if self.finetune not in ("auto", "always", "never"):
            raise ValueError(f"--finetune must be auto, always or never, got {self.finetune!r}.")
        if self.pruning_recipe not in ("short", "paper"):
            raise ValueError(f"--pruning_recipe must be short or paper, got {self.pruning_recipe!r}.")
        if self.device not in ("auto", "cuda", "cpu"):
            raise ValueError(f"--device must be auto, cuda or cpu, got {self.device!r}.")
        self._check_lists()

    def _check_lists(self) -> None:
        """Comma-separated levels and seeds are parsed now, so a typo fails before minutes of fine-tuning."""
        for name, parse, example in (("sparsities", self.floats, "0.5,0.7"),
                                     ("effective_size_sparsities", self.floats, "0.1,0.3,0.5"),
                                     ("seeds", self.ints, "0,1,2,3"), ("effective_size_seeds", self.ints, "0,1,2")):
            text = getattr(self, name)
            try:
                values = parse(text)
            except ValueError:
                raise ValueError(f"--{name} {text!r} is not a comma-separated list of "
                                 f"{'numbers' if parse == self.floats else 'integers'}, e.g. {example}.") from None
            if not values:
                raise ValueError(f"--{name} is empty; pass e.g. {example}.")
            if parse == self.floats and not all(_is_fraction(v) for v in values):
                raise ValueError(f"--{name} {text!r}: every level is a fraction in [0, 1) (0.5 for 50%), "
                                 f"e.g. {example}.")

    @classmethod
    def read_config(cls, path: str | os.PathLike) -> dict[str, Any]:
        """The fields of a YAML/JSON study file, lists joined into the flags' comma-separated form."""
        text = Path(path).read_text()
        if str(path).endswith((".yaml", ".yml")):
            import yaml
            values = yaml.safe_load(text) or {}
        else:
            values = json.loads(text)
        if not isinstance(values, dict):
            raise ValueError(f"{path}: a study file is a mapping of field: value, got {type(values).__name__}.")
        known = {f.name for f in fields(cls)} - {"config"}
        unknown = sorted(set(values) - known)
        if unknown:
            raise ValueError(f"{path}: unknown study field(s) {unknown}; known: {sorted(known)}.")
        return {key: ",".join(map(str, value)) if isinstance(value, list) else value for key, value in values.items()}

    def floats(self, text: str) -> list[float]:
        return [float(v) for v in str(text).split(",") if v.strip()]

    def ints(self, text: str) -> list[int]:
        return [int(v) for v in str(text).split(",") if v.strip()]

    @property
    def use_cpu(self) -> bool:
        import torch
        if self.device == "cuda" and not torch.cuda.is_available():
            raise RuntimeError("--device cuda was given but torch sees no CUDA device.")
        return self.device == "cpu" or (self.device == "auto" and not torch.cuda.is_available())


def _model_source(args: StudyArguments) -> str:
    if args.model == "minilm":
        from ..offline_models import minilm_path  # lazy: `--help` does not load it
        return str(minilm_path())
    return args.model


def _needs_finetuning(args: StudyArguments, source: str) -> bool:
    if args.finetune != "auto":
        return args.finetune == "always"
    import transformers
    config = transformers.AutoConfig.from_pretrained(source)
    return not any("ForSequenceClassification" in name for name in (config.architectures or []))


def _done(marker: Path) -> bool:
    return marker.is_file()


def _mark(marker: Path, info: dict[str, Any]) -> None:
    atomic_write_text(marker, json.dumps(info, indent=2, default=str) + "\n")


# Study flags that do not change what an existing study folder holds: more seeds or sparsities add runs, the
# analysis is redone every time (or skipped), and the device does not change the numbers' meaning.
NOT_IDENTITY = ("output_dir", "config", "overwrite_output_dir", "seeds", "sparsities", "device", "max_core_units",
                "ablation_non_core_sample", "analyze")


def study_identity(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if k not in NOT_IDENTITY}


def _legacy_study(folder: Path) -> dict[str, Any] | None:
    """The settings of a study folder written before run records (its study_args.json)."""
    try:
        return study_identity(json.loads((folder / "study_args.json").read_text()))
    except (OSError, ValueError):
        return None


def run_study(args: StudyArguments) -> dict[str, Any]:
    """Claim the output folder (a study of other settings there is refused, see `run_folder`), then run or resume
    the study; returns the paths and headline numbers."""
    from ..run_folder import claim_output_dir  # lazy: `--help` does not load it
    inputs = [("--model", args.model if args.model != "minilm" else None), ("--train", args.train),
              ("--id_eval", args.id_eval), ("--ood_eval", args.ood_eval), ("--config", args.config)]
    with claim_output_dir(args.output_dir, "study", study_identity(asdict(args)), overwrite=args.overwrite_output_dir,
                          inputs=inputs, legacy_settings=_legacy_study) as claim:
        check_tokenizer(_model_source(args), flag="--model")   # before anything is written: no claim is left
        summary = _run_study(args)
        claim.finish()
    return summary


def _run_study(args: StudyArguments) -> dict[str, Any]:
    import torch
    import transformers

    from .data import build_study_data, tokenize  # lazy: `--help` does not load it
    out = Path(args.output_dir)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "study_args.json", json.dumps(asdict(args), indent=2) + "\n")
    timings: dict[str, float] = {}
    start = time.time()
    torch.manual_seed(args.seed)

    source = _model_source(args)
    tokenizer = load_tokenizer(source, "--model")
    _ensure_padding_token(tokenizer)
    data = build_study_data(args.train, args.id_eval, args.ood_eval, train_size=args.train_size,
                            id_eval_size=args.id_eval_size, ood_per_case=args.ood_per_case,
                            counter_heuristic_fraction=args.counter_heuristic_fraction, seed=args.seed,
                            max_length=args.max_length)
    train = tokenize(data.train, tokenizer, args.max_length)
    eval_sets = {name: tokenize(subset, tokenizer, args.max_length) for name, subset in data.eval_sets().items()}
    groups = data.cases
    collator = transformers.DataCollatorWithPadding(tokenizer)
    train_inputs = train.remove_columns("labels")
    # Pruning runs see steps x batch examples; caching teacher logits for more would only cost time.
    search_inputs = _head(train_inputs, args.effective_size_steps * args.prune_batch_size)
    prune_inputs = _head(train_inputs, args.prune_steps * args.prune_batch_size)

    # 1. Fine-tune, with checkpoints and effective-size tracking.
    finetune_dir = out / "finetune"
    final_dir = finetune_dir / "final"
    if _needs_finetuning(args, source):
        if not _done(final_dir / "done.json"):
            t0 = time.time()
            _finetune(args, source, train, eval_sets, groups, search_inputs, collator, tokenizer, finetune_dir)
            timings["finetune_and_effective_size"] = time.time() - t0
        model_path = final_dir
    else:
        model_path = Path(source) if Path(source).exists() else source
    effective = None
    if args.track_effective_size and (finetune_dir / "effective_size.json").exists() or \
            (args.track_effective_size and any(finetune_dir.glob("checkpoint-*"))):
        t0 = time.time()
        effective = _track(args, finetune_dir, search_inputs, eval_sets, groups, collator)
        timings["effective_size_remaining"] = time.time() - t0

    # 2. Prune the final model at two sparsities x seeds.
    from ..analysis.prune_many import prune_many
    t0 = time.time()
    recipe = get_recipe(args.pruning_recipe)
    recipe_config = PruningConfig().with_settings(**recipe.config)
    overrides = {**recipe.arguments, "recipe": recipe.name,
                 "max_steps": args.prune_steps, "sparsity_warmup_steps": max(1, args.prune_steps // 2),
                 "per_device_train_batch_size": args.prune_batch_size, "use_cpu": args.use_cpu,
                 "report_to": "none", "save_strategy": "no", "disable_tqdm": True, "logging_steps": 50}
    runs = prune_many(str(model_path), prune_inputs, eval_sets, out / "runs", args.floats(args.sparsities),
                      args.ints(args.seeds), pruning_config=recipe_config, pruning_overrides=overrides,
                      data_collator=collator, tokenizer=tokenizer, means_examples=args.means_examples,
                      data_spec=data.spec, overwrite_output_dir=args.overwrite_output_dir)
    timings["prune_many"] = time.time() - t0

    # 3. Analyze (unless --no_analyze).
    report = slim = None
    if args.analyze:
        from ..analysis.report import analyze
        t0 = time.time()
        report = analyze(out / "runs", output_dir=out / "report", model=str(model_path), tokenizer=tokenizer,
                         eval_sets=eval_sets, non_core_sample=args.ablation_non_core_sample or None,
                         max_core_units=args.max_core_units or None, seed=args.seed)
        timings["analyze"] = time.time() - t0
        from .slim_report import study_slim_report  # lazy: `--help` does not load it
        t0 = time.time()
        slim = study_slim_report(model_path, out / "runs", eval_sets, groups,
                                 device="cpu" if args.use_cpu else "cuda")
        timings["slim_report"] = time.time() - t0
    timings["total"] = time.time() - start
    from ..finetune_checkpoints import folder_bytes  # lazy: `--help` does not load it

    # 4. The study report.
    summary = {"output_dir": str(out), "model": str(model_path), "data": data.description, "groups": groups,
               "timings_s": timings, "effective_size_file": str(finetune_dir / "effective_size.json")
               if effective is not None else None, "runs_dir": str(out / "runs"),
               "analysis_report": str(out / "report" / "report.md") if args.analyze else None,
               "disk_mb": round(folder_bytes(out) / 2**20, 1),
               "slim": slim}
    write_study_report(out, summary, effective, report, runs)
    return summary


def _ensure_padding_token(tokenizer) -> None:
    """`finetuning.ensure_padding_token` (the study's batches of pairs need a padding token)."""
    from ..finetuning import ensure_padding_token  # lazy: `--help` does not load it
    ensure_padding_token(tokenizer)


def _head(dataset, count: int):
    return dataset.select(range(min(len(dataset), max(count, 1))))


def _finetune(args, source, train, eval_sets, groups, train_inputs, collator, tokenizer, finetune_dir: Path) -> None:
    """Fine-tune with `finetuning.finetune` (the same run as `hf-heuristic-core finetune`), tracking effective size
    at every checkpoint."""
    import transformers

    from ..finetuning import FINAL_DIR, finetune, load_finetune_model  # lazy: `--help` does not load it
    from ..search.callback import EffectiveSizeCallback  # lazy: `--help` does not load it
    model = load_finetune_model(source, "sequence_classification", args.num_labels, tokenizer)
    callbacks: list[Any] = []
    if args.track_effective_size:
        callbacks.append(EffectiveSizeCallback(eval_sets, train_inputs, groups,
                                               **_search_arguments(args, finetune_dir, collator)))
    training_args = transformers.TrainingArguments(
        output_dir=str(finetune_dir), max_steps=args.finetune_steps, per_device_train_batch_size=args.finetune_batch_size,
        learning_rate=args.finetune_learning_rate, warmup_steps=10, save_strategy="steps",
        save_steps=args.checkpoint_every, logging_steps=args.checkpoint_every, report_to="none",
        use_cpu=args.use_cpu, seed=args.seed, disable_tqdm=False)
    resume = any(finetune_dir.glob("checkpoint-*"))
    finetune(model, training_args, train, tokenizer=tokenizer, data_collator=collator, callbacks=callbacks,
             resume=True if resume else None)
    _mark(finetune_dir / FINAL_DIR / "done.json", {"steps": args.finetune_steps})


def _short_config():
    return PruningConfig().with_settings(**get_recipe("short").config)


def _search_arguments(args: StudyArguments, finetune_dir: Path, collator) -> dict[str, Any]:
    """The effective-size search settings, shared by the live callback and the tracker that finishes after a crash
    (the tracker refuses to resume a results file written under other settings)."""
    overrides = dict(get_recipe(args.pruning_recipe).arguments)
    overrides.update({"recipe": args.pruning_recipe, "per_device_train_batch_size": args.prune_batch_size, "use_cpu": args.use_cpu})
    return {"strategy": args.effective_size_strategy, "sparsities": args.floats(args.effective_size_sparsities),
            "seeds": args.ints(args.effective_size_seeds), "steps_per_run": args.effective_size_steps,
            "results_file": finetune_dir / "effective_size.json", "collate_fn": collator,
            "pruning_config": None if args.pruning_recipe == "paper" else _short_config(),
            "pruning_overrides": overrides}


def _track(args, finetune_dir: Path, train_inputs, eval_sets, groups, collator):
    from ..search.tracking import track_effective_size  # lazy: `--help` does not load it
    return track_effective_size(finetune_dir, train_inputs, eval_sets, groups,
                                **_search_arguments(args, finetune_dir, collator))


def write_study_report(out: Path, summary: dict[str, Any], effective: Any, report: dict[str, Any] | None,
                       runs: Any) -> None:
    """`report.md` / `report.json` at the top of the study folder: the fine-tuning curve, effective size, and the
    multi-seed analysis (whose own report, with every table and figure, is under `report/`). Without `report`
    (--no_analyze) the analysis section is left out, also when `report/` holds one from an earlier run: it may
    describe other runs."""
    lines = ["# Heuristic-core study", "", f"Model: `{summary['model']}`", "",
             "Data: " + ", ".join(f"{k}={v}" for k, v in summary["data"].items() if k != "ood_cases"), "",
             "Timings (s): " + ", ".join(f"{k} {v:.0f}" for k, v in summary["timings_s"].items()), "",
             *([f"Disk: {summary['disk_mb']:.0f} MB under `{summary['output_dir']}`", ""] if "disk_mb" in summary
               else [])]
    if effective is not None:
        from ..search.tracking import summary_table  # lazy: `--help` does not load it
        lines += ["## Effective size over fine-tuning", "", summary_table(effective), "",
                  "![effective size](finetune/effective_size.png)", ""]
    analysis_md = out / "report" / "report.md"
    if report is not None and analysis_md.is_file():
        text = analysis_md.read_text()
        lines += ["## Multi-seed analysis of the final model", "",
                  text.replace("](", "](report/").replace("](report/http", "](http")]
    from .slim_report import slim_report_lines  # lazy: `--help` does not load it
    lines += slim_report_lines(summary.get("slim"))
    if report is None:
        lines += ["## Multi-seed analysis", "", f"Not run (--no_analyze): `hf-heuristic-core analyze {out / 'runs'}` "
                  "writes it, or the study again without --no_analyze.", ""]
    atomic_write_text(out / "report.md", "\n".join(lines) + "\n")
    atomic_write_text(out / "report.json", json.dumps({"study": summary, "analysis": report}, indent=2,
                                                      default=str) + "\n")


def _is_fraction(value: float) -> bool:
    """The package's one sparsity rule (relaxations.binarize.check_sparsity), as a yes/no for the list check."""
    from ..relaxations.binarize import check_sparsity  # lazy: `--help` does not load it
    try:
        check_sparsity(value)
    except ValueError:
        return False
    return True
