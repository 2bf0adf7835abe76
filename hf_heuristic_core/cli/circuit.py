"""`hf-heuristic-core circuit`: MIB-format circuits, attribution scores and faithfulness curves.

    hf-heuristic-core circuit export --scores runs/sp50-seed0 --name ioi_smollm2 --output_dir mib
    hf-heuristic-core circuit attribute --model M --dataset ioi --method integrated_gradients --output_dir OUT
    hf-heuristic-core circuit faithfulness --model M --dataset nli --scores OUT,runs/sp50-seed0 --output_dir curves
    hf-heuristic-core circuit faithfulness --model M --dataset nli --runs_dir runs   # every run; analyze shows it

export and attribute write MIB's two submission kinds into separate leaderboard folders,
`OUTPUT_DIR/importances/<name>/importances.json` and `OUTPUT_DIR/circuits/<name>/circuit_<percent>.json`
(`circuits.export`). Each action claims its output folder before it loads anything (`run_folder`: inputs are never
outputs, one writer at a time, another run's folder refused). The flags and `--help` live in `cli/flags/circuit.py`,
which imports no torch.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import transformers
from transformers import HfArgumentParser

from ..ablation.names import ABLATION_MODES
from ..analysis.results import collect_results
from ..artifacts import read_artifact, recorded_gguf_file
from ..circuits.attribution import attribution_scores
from ..circuits.export import (
    CIRCUITS_FOLDER,
    EXPORT_RECORD,
    IMPORTANCES_FOLDER,
    IMPORTANCES_NAME,
    check_submission_name,
    export_mib_circuits,
    scores_path,
)
from ..circuits.mib import MibConfig, MibFormatError, mib_config, parallel_attn_mlp, read_mib_circuit
from ..circuits.ranking import MIB_CURVE_SIZES, MIB_SUBMISSION_SIZES, size_label
from ..circuits.report import CURVES_NAME, FIGURE_STEM, curves_document, write_curves
from ..circuits.sources import load_unit_scores
from ..circuits.tasks import circuit_task_data
from ..config import CONFIG_NAME, PruningConfig
from ..errors import MaskShapeError, UsageError
from ..granularity.edge.graph import EdgeGraph
from ..granularity.edge.settings import EDGE_KIND
from ..io_utils import atomic_write_text
from ..model import PrunableModel
from ..run_folder import RECORD_NAME, claim_output_dir, local_paths
from ..tokenizer_loading import load_tokenizer
from .checks import check_model_source
from .export_checks import model_facts
from .flags.circuit import ACTIONS, DESCRIPTION, GENERATED, PROG, TASKS, CircuitArguments, circuit_help
from .help import wants_help
from .prune import resolve_task

__all__ = ["ACTIONS", "DESCRIPTION", "GENERATED", "IDENTITY", "PATH_FLAGS", "PROG", "TASKS", "CircuitArguments",
           "circuit_command", "circuit_help", "circuit_inputs", "config_shapes", "export_lines", "load_scores",
           "parse_circuit_args", "resolve_circuit_task", "run_attribute", "run_export", "run_faithfulness"]

# What decides each action's output (compared when a folder is written again); paths are compared absolute.
IDENTITY = {
    "export": ("scores", "model", "gguf_file", "sizes", "edges", "absolute", "name", "write", "level"),
    "attribute": ("model", "gguf_file", "task", "dataset", "dataset_config", "split", "text_columns", "num_examples",
                  "max_length", "seed", "ablation", "method", "ig_steps", "edges", "absolute", "name", "write",
                  "level"),
    "faithfulness": ("model", "gguf_file", "task", "dataset", "dataset_config", "split", "text_columns",
                     "num_examples", "max_length", "seed", "ablation", "scores", "runs_dir", "random_seeds",
                     "level"),
}
PATH_FLAGS = ("scores", "model", "dataset", "runs_dir")


def parse_circuit_args(argv: Sequence[str]) -> CircuitArguments:
    argv = list(argv)
    if argv and not argv[0].startswith("-"):
        argv = ["--action", argv[0], *argv[1:]]
    parser = HfArgumentParser(CircuitArguments, prog=PROG, description=DESCRIPTION)
    (args,) = parser.parse_args_into_dataclasses(args=argv)
    if args.action not in ACTIONS:
        raise UsageError(f"circuit: give the action first, one of {sorted(ACTIONS)} (got {args.action!r}); e.g. "
                         "hf-heuristic-core circuit export --scores DIR --output_dir OUT.")
    if args.ablation not in ABLATION_MODES:
        raise UsageError(f"--ablation {args.ablation!r} is not one of {', '.join(ABLATION_MODES)}.")
    if args.edges not in ("all", "none"):
        raise UsageError(f"--edges {args.edges!r} is not one of all, none.")
    if args.level not in ("auto", "node", "edge"):
        raise UsageError(f"--level {args.level!r} is not one of auto, node, edge.")
    if args.write not in ("both", "importances", "circuits"):
        raise UsageError(f"--write {args.write!r} is not one of both, importances, circuits.")
    if args.edges == "none" and args.write != "importances" and args.action in ("export", "attribute"):
        raise UsageError("--edges none writes binary circuits without edges, which MIB scores as empty (it reads a "
                         "binary circuit's membership from its edges: f = 0 at every size). Use --edges all, or "
                         "--write importances for an importance file without its edge list.")
    if args.absolute and args.action == "faithfulness":
        raise UsageError("circuit faithfulness draws both rankings and reports MIB's CPR (signed ranking) and CMD "
                         "(|score| ranking); --absolute no longer applies. Drop it.")
    if args.task not in TASKS:
        raise UsageError(f"--task {args.task!r} is not one of {', '.join(TASKS)} (circuits score a causal LM's next "
                         "token or a classifier's label).")
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


# ------------------------------------------------------------------ the output folder
def _claim(args: CircuitArguments, output_dir: str | Path) -> Any:
    """Claim the action's output folder (`run_folder.claim_output_dir`) before anything is loaded."""
    settings = {name: getattr(args, name) for name in IDENTITY[args.action]}
    settings.update({name: local_paths(settings[name]) for name in PATH_FLAGS if name in settings})
    return claim_output_dir(output_dir, f"circuit {args.action}", settings, overwrite=args.overwrite_output_dir,
                            inputs=circuit_inputs(args), own_files=lambda folder: _only_own_files(folder, args))


def circuit_inputs(args: CircuitArguments) -> list[tuple[str, Any]]:
    """Everything the action reads: each --scores source, --model, a local --dataset, --runs_dir and its runs."""
    pairs: list[tuple[str, Any]] = [("--scores", source) for source in _sources(args.scores)]
    pairs += [("--model", args.model), ("--runs_dir", args.runs_dir)]
    if args.dataset not in GENERATED:
        pairs.append(("--dataset", args.dataset))
    if args.runs_dir and Path(args.runs_dir).is_dir():
        pairs += [("--runs_dir", str(config.parent)) for config in sorted(Path(args.runs_dir).glob(
            f"*/{CONFIG_NAME}"))]
    return pairs


def _only_own_files(folder: Path, args: CircuitArguments) -> bool:
    """A folder written before run records, holding only files this action writes (so that all of them are
    replaced, none left from another ranking beside the new ones)."""
    if args.action == "faithfulness":
        own, folders = {CURVES_NAME, f"{FIGURE_STEM}.png", f"{FIGURE_STEM}.pdf"}, set()
    else:   # this layout, and the one-folder layout of earlier versions
        own = {EXPORT_RECORD, IMPORTANCES_NAME} | ({"attribution.json"} if args.action == "attribute" else set())
        folders = {IMPORTANCES_FOLDER, CIRCUITS_FOLDER}
    entries = [entry for entry in folder.iterdir() if not entry.name.startswith(".")]
    return all((entry.is_file() and (entry.name in own | {RECORD_NAME} or _old_circuit_file(entry.name)))
               or (entry.is_dir() and entry.name in folders) for entry in entries)


def _old_circuit_file(name: str) -> bool:
    """`circuit_<percent>.json`, as earlier versions wrote binary circuits beside the importance file."""
    return name.startswith("circuit_") and name.endswith(".json")


def _sources(text: str | None) -> list[str]:
    return [part.strip() for part in (text or "").split(",") if part.strip()]


# ------------------------------------------------------------------ helpers
def _require(args: CircuitArguments, *names: str) -> None:
    missing = [f"--{n}" for n in names if not getattr(args, n)]
    if missing:
        raise UsageError(f"circuit {args.action} needs {', '.join(missing)}; see `hf-heuristic-core circuit --help`.")


def _sizes(text: str) -> tuple[float, ...]:
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


def _model_config(model: str, gguf_file: str | None) -> Any:
    """The model's config (a GGUF file is parsed once for it), after checking that --model names a model."""
    check_model_source(model, gguf_file)
    return transformers.AutoConfig.from_pretrained(model, **({"gguf_file": gguf_file} if gguf_file else {}))


def resolve_circuit_task(args: CircuitArguments, config: Any) -> bool:
    """Whether the model is a causal LM: `--task`, else the head `config.architectures` names or a GGUF decoder's
    architecture (`prune`'s rule), else the model class a --scores artifact records when `--model` holds that head's
    weights; refused when none tells."""
    try:
        task = resolve_task(args, config)
    except UsageError:
        found = _task_of_artifacts(args)
        if found is None:
            names = getattr(config, "architectures", None)
            raise UsageError(f"--task auto cannot tell whether --model {args.model} is a causal LM or a sequence "
                             f"classifier (config.architectures {names}, model_type "
                             f"{getattr(config, 'model_type', None)!r}); pass --task causal_lm or --task "
                             "sequence_classification.") from None
        task = found[0]
        _refuse_a_random_head(args, config, *found)
    if task not in ("causal_lm", "sequence_classification"):
        raise UsageError(f"--model {args.model} is a {task} model; circuits score a causal LM's next token or a "
                         "sequence classifier's label. Pass --task causal_lm or sequence_classification to load it as "
                         "one of those.")
    return task == "causal_lm"


def _task_of_artifacts(args: CircuitArguments) -> tuple[str, str, str, str | None] | None:
    """(task, artifact, model class, base model) of the first --scores mask artifact whose recorded model class
    (`base_model_class`) names a task, if any."""
    for source in _sources(args.scores):
        try:
            saved = PruningConfig.from_pretrained(source)
        except (OSError, ValueError, TypeError):
            continue
        name = saved.base_model_class or ""
        if name.endswith(("ForCausalLM", "LMHeadModel")):
            return "causal_lm", source, name, saved.base_model_name_or_path
        if name.endswith("ForSequenceClassification"):
            return "sequence_classification", source, name, saved.base_model_name_or_path
    return None


def _refuse_a_random_head(args: CircuitArguments, config: Any, task: str, artifact: str, model_class: str,
                          base: str | None) -> None:
    """An artifact's class only tells the task of a model whose weights hold that head: a config naming a headless
    class (e.g. `BertModel`, a base model rather than the fine-tuned one) has no classifier weights, and no LM head
    unless it ties it to the embeddings. Loading it as the artifact's class would add a random head, and every
    score and curve would be noise (a CPR of 1.7 with m(full) = -3e-6 was printed with exit 0)."""
    names = getattr(config, "architectures", None)
    tied = bool(getattr(config, "tie_word_embeddings", False))
    if not names or (task == "causal_lm" and tied):
        return
    head = "language-model head" if task == "causal_lm" else "classification head"
    made_on = f" ({base})" if base else ""
    raise UsageError(f"--model {args.model} has no {head} (config.architectures {names}), but --scores {artifact} "
                     f"was made on a {model_class}{made_on}: loading --model as one would add a random {head}, so "
                     f"every score would be noise. Pass the model the masks were made on as --model, or --task {task} "
                     "to score a random head anyway.")


def config_shapes(config: Any) -> dict[str, tuple[int, ...]] | None:
    """The unit mask shapes a config implies (layers x query heads, layers), None when it does not say."""
    facts = model_facts(config)
    layers, heads = facts["num_layers"], facts["num_heads"]
    if not (isinstance(layers, int) and isinstance(heads, int)):
        return None
    return {"heads": (layers, heads), "mlps": (layers,)}


def _load_model(args: CircuitArguments, config: Any, causal: bool, level: str = "node") -> tuple[Any, Any]:
    """The wrapped model (masks disabled until a circuit is applied) and its tokenizer."""
    kwargs = {"gguf_file": args.gguf_file} if args.gguf_file else {}
    model_class = transformers.AutoModelForCausalLM if causal else transformers.AutoModelForSequenceClassification
    tokenizer = load_tokenizer(args.model, "--model", **kwargs)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    granularity = "edge" if level == "edge" else "unit"
    prunable = PrunableModel.from_pretrained(args.model, PruningConfig(ablation=args.ablation, granularity=granularity),
                                             model_class=model_class, config=config, **kwargs)
    if getattr(prunable.config, "pad_token_id", None) is None:
        prunable.config.pad_token_id = tokenizer.pad_token_id
    if args.device:
        prunable.to(args.device)
    return prunable.eval(), tokenizer


def _data(args: CircuitArguments, prunable: Any, tokenizer: Any, causal: bool) -> tuple[Any, Any]:
    data = circuit_task_data(args.dataset, tokenizer, causal_lm=causal, size=args.num_examples, seed=args.seed,
                             max_length=args.max_length, text_columns=args.text_columns, split=args.split,
                             dataset_config=args.dataset_config)
    collator = transformers.DataCollatorWithPadding(tokenizer)
    if args.ablation == "mean":   # means over the scored data itself, as MIB's mean ablation takes them
        prunable.compute_means(data.remove_columns([c for c in data.column_names if c in ("labels", "answer_id",
                                                                                           "foil_id")]),
                               batch_size=args.batch_size, collate_fn=collator, show_progress=False)
    return data, collator


def load_scores(args: CircuitArguments, source: str | Path, shapes: dict[str, tuple[int, ...]] | None,
                graph: Any = None) -> Any:
    """A ranking's scores, checked against the model's mask shapes; a mismatch names both shapes and the flags."""
    try:
        return load_unit_scores(source, shapes, graph)
    except MaskShapeError as err:
        raise UsageError(f"--scores {source} do not fit --model {args.model}: {err} Pass the scores made for this "
                         "model, or the model they were made for.") from None


# ------------------------------------------------------------------ actions
def run_export(args: CircuitArguments) -> dict[str, Any]:
    _require(args, "scores", "output_dir")
    if "," in args.scores:
        raise UsageError("circuit export writes one ranking; pass one --scores source.")
    sizes = _sizes(args.sizes)
    name = _submission_name(args)
    with _claim(args, args.output_dir) as claim:
        cfg = _export_config(args)
        graph = _scores_graph(args, cfg) if _level(args) == "edge" else None
        shapes = {EDGE_KIND: (graph.num_edges,)} if graph is not None else \
            {"heads": (cfg.n_layers, cfg.n_heads), "mlps": (cfg.n_layers,)}
        scores = load_scores(args, args.scores, shapes, graph)
        written = _export(args, cfg, scores, name, sizes, graph)
        claim.finish()
    return {**written, "lines": export_lines(written, args.name is None)}


def _export(args: CircuitArguments, cfg: Any, scores: Any, name: str, sizes: Sequence[float],
            graph: Any = None) -> dict[str, Any]:
    return export_mib_circuits(args.output_dir, cfg, scores, name, sizes, args.absolute, args.edges,
                               importances=args.write != "circuits", circuits=args.write != "importances",
                               graph=graph)


def _source_level(source: str | Path) -> str:
    """'edge' for an edge mask artifact or an edge-level MIB file (or an export folder of one), else 'node'."""
    path = scores_path(source)
    if path.is_dir():
        try:
            return "edge" if PruningConfig.from_pretrained(path).granularity == "edge" else "node"
        except (OSError, ValueError, TypeError):
            return "node"
    if path.suffix == ".json" and path.is_file():
        try:
            circuit = read_mib_circuit(path)
        except MibFormatError:
            return "node"     # the loader reports what is wrong with it
        return "edge" if circuit.scores is None and circuit.edge_scores is not None else "node"
    return "node"


def _level(args: CircuitArguments) -> str:
    """The circuit level: `--level`, else node for attribute, else the level of every --scores source (and every
    run of --runs_dir), which must agree."""
    if args.level != "auto" or args.action == "attribute":
        return "node" if args.level == "auto" else args.level
    sources = _sources(args.scores)
    if args.runs_dir and Path(args.runs_dir).is_dir():
        sources += [str(config.parent) for config in sorted(Path(args.runs_dir).glob(f"*/{CONFIG_NAME}"))]
    levels = {source: _source_level(source) for source in sources}
    if len(set(levels.values())) > 1:
        edge = [s for s, level in levels.items() if level == "edge"]
        node = [s for s, level in levels.items() if level == "node"]
        raise UsageError(f"--scores mix edge rankings ({', '.join(edge[:3])}) and node rankings "
                         f"({', '.join(node[:3])}); curves compare rankings of one level: pass them separately.")
    return next(iter(levels.values()), "node")


def _edge_graph(config: Any) -> Any:
    """The edge graph a model config implies (its query and key/value heads, and its residual layout)."""
    facts = model_facts(config)
    text = config.get_text_config() if hasattr(config, "get_text_config") else config
    kv = int(getattr(text, "num_key_value_heads", None) or facts["num_heads"])
    return EdgeGraph(facts["num_layers"], facts["num_heads"], kv, parallel_attn_mlp(facts["model_type"], config))


def _scores_graph(args: CircuitArguments, cfg: Any) -> Any:
    """The edge graph of an edge ranking being exported: from an artifact, its mask length; from a MIB file, MIB's
    ungrouped graph of its cfg."""
    source = scores_path(args.scores)
    if source.is_dir():
        shapes = PruningConfig.from_pretrained(source).mask_shapes or {}
        if EDGE_KIND not in shapes:
            raise UsageError(f"--scores {source}: the edge artifact records no mask shape; re-save it.")
        try:
            return EdgeGraph.matching(cfg.n_layers, cfg.n_heads, int(shapes[EDGE_KIND][0]), cfg.parallel_attn_mlp)
        except ValueError as err:
            raise UsageError(f"--scores {source}: {err}") from None
    return EdgeGraph(cfg.n_layers, cfg.n_heads, cfg.n_heads, cfg.parallel_attn_mlp)


def export_lines(written: dict[str, Any], name_derived: bool) -> list[str]:
    """What an export wrote, for the terminal: each folder, and per binary circuit its units and edge share."""
    lines = []
    if "importances" in written:
        what = "edges" if written.get("level") == "edge" else "units"
        lines.append(f"MIB importance file: {written['importances']} ({written['n_scored']} scored {what})")
    if "circuits" in written:
        valid = written["leaderboard_sizes"] and written["all_fit"]
        lines.append(f"MIB binary circuits: {written['circuits_folder']} ({len(written['circuits'])} files; "
                     + ("a leaderboard folder)" if valid else "NOT a leaderboard folder: "
                        + ("not MIB's nine sizes" if not written["leaderboard_sizes"] else
                           "a circuit holds more edges than its size allows") + ")"))
        for file_name, entry in written["circuits"].items():
            if written.get("level") == "edge":
                lines.append(f"  circuit {size_label(entry['fraction'])}: {entry['edges']} of {entry['edges_total']} "
                             f"edges ({entry['edge_share']:.3%}) -> {file_name}")
                continue
            note = "" if entry["fits"] else "  (over its size: the graph is too small)"
            if entry["units"] < entry["units_by_rank"]:
                note += f"  ({entry['units_by_rank']} by rank; fewer to stay within the edge bound)"
            lines.append(f"  circuit {size_label(entry['fraction'])}: {entry['units']} units, {entry['edges']} of "
                         f"{entry['edges_total']} edges ({entry['edge_share']:.3%}) -> {file_name}{note}")
    if name_derived:
        lines.append(f"Folder name {written['name']!r} was derived; MIB's leaderboard reads <task>_<model> from it "
                     "(e.g. ioi_gpt2): pass --name to choose it.")
    return lines


def _submission_name(args: CircuitArguments) -> str:
    """`--name`, checked; else the name of the export an importance file comes from; else `<task>_<model>` from
    --dataset (attribute; 'circuit' for export) and the model's or the scores' folder name."""
    if args.name is not None:
        try:
            return check_submission_name(args.name)
        except MibFormatError as err:
            raise UsageError(f"--name: {err}") from None
    source = scores_path(args.scores) if args.action == "export" and args.scores else None
    if source is not None and source.is_file():
        try:
            return check_submission_name(source.parent.name)   # importances/<name>/importances.json
        except MibFormatError:
            pass

    def part(text: str) -> str:
        cleaned = re.sub(r"[^A-Za-z0-9.\-]+", "-", text).strip("-.").lower()
        return cleaned or "model"
    task = args.dataset if args.dataset in GENERATED else (Path(args.dataset).stem if args.dataset else "circuit")
    model = args.model or args.scores or "model"
    return f"{part(task)}_{part(Path(str(model).rstrip('/')).name)}"


def _export_config(args: CircuitArguments) -> Any:
    """MIB's cfg: the shape of the scores (a MIB .json file's cfg, or the artifact's layers x heads), checked against
    `--model` when given (which then also says whether attention and MLP run in parallel); without `--model`, an
    artifact's base model config is read for that when it can be."""
    source = scores_path(args.scores)
    model, gguf_file, model_type = args.model, args.gguf_file, None
    if source.suffix == ".json" and source.is_file():
        cfg = read_mib_circuit(source).cfg
    else:
        config = read_artifact(source).config
        if not (config.num_layers and config.num_heads):
            raise UsageError(f"{source}: the artifact does not record num_layers / num_heads; re-save it with a "
                             "current version, or export from a MIB .json file.")
        cfg = MibConfig(int(config.num_layers), int(config.num_heads), int(config.hidden_size or 0),
                        parallel_attn_mlp(config.model_type, None))
        model_type = config.model_type
        if not model:
            model = config.base_model_name_or_path
        gguf_file = gguf_file or recorded_gguf_file(source, model)
    if args.model:
        hf_config = _model_config(args.model, gguf_file)
        _check_shape_fits(args, cfg, hf_config, model_type)
    elif model and model_type:
        try:   # the artifact's base model, for its residual layout; the model type's default when unreadable
            hf_config = transformers.AutoConfig.from_pretrained(model, **({"gguf_file": gguf_file} if gguf_file
                                                                          else {}))
        except (OSError, ValueError):
            hf_config = None
    else:
        return cfg   # a MIB file on its own: its cfg as written
    model_type = getattr(hf_config, "model_type", None) or model_type
    hidden = cfg.d_model or int(getattr(hf_config, "hidden_size", 0) or 0)
    return MibConfig(cfg.n_layers, cfg.n_heads, hidden, parallel_attn_mlp(model_type, hf_config))


def _check_shape_fits(args: CircuitArguments, cfg: Any, hf_config: Any, model_type: str | None = None) -> None:
    """Refuse scores of another shape than --model's units (or, from an artifact, made on another model type), naming
    both: they were made for another model."""
    facts = model_facts(hf_config)
    layers, heads, hidden = facts["num_layers"], facts["num_heads"], facts["hidden_size"]
    if model_type and facts["model_type"] and model_type != facts["model_type"]:
        raise UsageError(f"--scores {args.scores} were made on a {model_type!r} model, but --model {args.model} is "
                         f"{facts['model_type']!r}: pass the model the scores were made for as --model, or leave "
                         "--model out to use the artifact's base model.")
    differ = (layers is not None and layers != cfg.n_layers) or (heads is not None and heads != cfg.n_heads) or \
        (bool(hidden) and bool(cfg.d_model) and hidden != cfg.d_model)
    if differ:
        width = f", d_model {cfg.d_model}" if cfg.d_model else ""
        raise UsageError(f"--scores {args.scores} rank units of {cfg.n_layers} layers x {cfg.n_heads} heads{width}, "
                         f"but --model {args.model} has {layers} layers x {heads} heads, d_model {hidden}: the scores "
                         "were made for another model. Pass the model they were made for as --model, or leave "
                         "--model out to take the shape from the scores.")


def run_attribute(args: CircuitArguments) -> dict[str, Any]:
    _require(args, "model", "dataset", "output_dir")
    name = _submission_name(args)
    level = _level(args)
    with _claim(args, args.output_dir) as claim:
        config = _model_config(args.model, args.gguf_file)
        causal = resolve_circuit_task(args, config)
        prunable, tokenizer = _load_model(args, config, causal, level)
        data, collator = _data(args, prunable, tokenizer, causal)
        result = attribution_scores(prunable, data, method=args.method, steps=args.ig_steps, ablation=args.ablation,
                                    batch_size=args.batch_size, collate_fn=collator)
        written = _export(args, mib_config(prunable), result.scores, name, MIB_SUBMISSION_SIZES,
                          getattr(prunable.granularity, "graph", None))
        info = {**result.describe(), "model": args.model, "gguf_file": args.gguf_file,
                "task": "causal_lm" if causal else "sequence_classification", "dataset": args.dataset,
                "num_examples": args.num_examples, "level": level}
        atomic_write_text(Path(args.output_dir) / "attribution.json", json.dumps(info, indent=2) + "\n")
        claim.finish()
    lines = [f"{args.method} scores of {written['n_scored']} units ({result.examples} examples, "
             f"{result.forward_backward_passes} forward+backward passes, {result.seconds:.1f} s)",
             *export_lines(written, args.name is None)]
    return {**written, **info, "lines": lines}


def run_faithfulness(args: CircuitArguments) -> dict[str, Any]:
    _require(args, "model", "dataset")
    if not (args.scores or args.runs_dir):
        raise UsageError("circuit faithfulness needs --scores (rankings) or --runs_dir (every run of a prune_many "
                         "folder).")
    if not (args.output_dir or args.runs_dir):
        raise UsageError("circuit faithfulness needs --output_dir (or --runs_dir, whose circuits/ folder is used).")
    try:
        seeds = [int(s) for s in args.random_seeds.split(",") if s.strip()]
    except ValueError:
        raise UsageError(f"--random_seeds {args.random_seeds!r}: give integers, e.g. 0,1,2 ('' for none).") from None
    out = Path(args.output_dir) if args.output_dir else Path(args.runs_dir) / "circuits"
    level = _level(args)
    with _claim(args, out) as claim:
        config = _model_config(args.model, args.gguf_file)
        causal = resolve_circuit_task(args, config)
        graph = _edge_graph(config) if level == "edge" else None
        shapes = {EDGE_KIND: (graph.num_edges,)} if graph is not None else config_shapes(config)
        rankings, groups = _rankings(args, shapes, graph)   # checked before the model loads
        prunable, tokenizer = _load_model(args, config, causal, level)
        data, collator = _data(args, prunable, tokenizer, causal)
        document = curves_document(prunable, data, rankings, groups, ablation=args.ablation, random_seeds=seeds,
                                   batch_size=args.batch_size, collate_fn=collator,
                                   description={"model": args.model, "gguf_file": args.gguf_file,
                                                "task": "causal_lm" if causal else "sequence_classification",
                                                "dataset": args.dataset, "num_examples": args.num_examples,
                                                "seed": args.seed, "level": level})
        figure = write_curves(out, document)
        claim.finish()
    lines = [f"faithfulness curves: {out / CURVES_NAME} (figure {figure})",
             f"m(full) = {document['m_full']:.4g}, m(empty) = {document['m_empty']:.4g} ({args.ablation} ablation, "
             f"{document['examples']} examples)"]
    lines.append("  CPR: area under f, signed ranking; CMD: area under |1 - f|, |score| ranking (as MIB reports them)")
    for name, curve in document["curves"].items():
        lines.append(f"  {name:<32} CPR {curve['cpr']:.3f}  CMD {curve['cmd']:.3f}  (CMD of the signed ranking "
                     f"{curve['cmd_signed_ranking']:.3f})")
    return {**document, "lines": lines}


def _rankings(args: CircuitArguments, shapes: dict[str, tuple[int, ...]] | None, graph: Any = None
              ) -> tuple[dict[str, Any], dict[str, str]]:
    rankings: dict[str, Any] = {}
    groups: dict[str, str] = {}
    for source in _sources(args.scores):
        name = Path(source).name if Path(source).is_dir() else Path(source).stem
        name = name if name not in rankings else source
        rankings[name] = load_scores(args, source, shapes, graph)
        groups[name] = name
    if args.runs_dir:
        results = collect_results(Path(args.runs_dir)).results
        if not results:
            raise UsageError(f"--runs_dir {args.runs_dir} holds no finished runs (sp*-seed*/result.json).")
        for row in results:
            rankings[row["run"]] = load_scores(args, Path(args.runs_dir) / row["run"], shapes, graph)
            groups[row["run"]] = f"learned masks, {row['sparsity']:.0%} sparsity"
    return rankings, groups
