"""Flags of `hf-heuristic-core effective-size` (torch-free: `--help` is drawn from them; the run is
`cli/effective_size.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...search.defaults import DEFAULT_STRATEGY

__all__ = ["DESCRIPTION", "GENERATED", "EffectiveSizeArguments"]

GENERATED = "generated"
DESCRIPTION = "Effective size (The Heuristic Core, Fig. 6) of every checkpoint-* folder of a fine-tuning run."


@dataclass
class EffectiveSizeArguments:
    """Flags of `hf-heuristic-core effective-size` (dashes and underscores both work)."""

    output_dir: str = field(metadata={"help": "The fine-tuning run's output_dir, holding checkpoint-* folders "
                                              "(may also be given as the first positional argument)."})
    id_eval: list[str] = field(default_factory=list, metadata={
        "help": "In-distribution evaluation sets: 'generated', files, save_to_disk folders or Hub ids; "
                "NAME=SOURCE names a case."})
    ood_eval: list[str] = field(default_factory=list, metadata={
        "help": "Out-of-distribution sets, as --id_eval; sets with HANS-style subcase columns become one case "
                "per subcase."})
    train_data: str = field(default=GENERATED, metadata={
        "help": "Training data for the means and the pruning objective: 'generated', files, a folder or a Hub id."})
    train_split: str = field(default="train", metadata={"help": "Split of --train_data on the Hub."})
    eval_split: str = field(default="validation", metadata={"help": "Split of Hub evaluation sets."})
    dataset_config: str | None = field(default=None, metadata={"help": "Hub dataset configuration name."})
    text_columns: str | None = field(default=None, metadata={
        "help": "Comma-separated text columns (default: premise,hypothesis / sentence1,sentence2 / ...)."})
    tokenizer: str | None = field(default=None, metadata={
        "help": "Tokenizer (default: the one saved in the first checkpoint, else in OUTPUT_DIR)."})
    max_length: int = field(default=128, metadata={"help": "Tokenizer truncation length."})
    max_train_examples: int | None = field(default=2048, metadata={"help": "Training examples used (at most)."})
    max_eval_examples: int | None = field(default=None, metadata={"help": "Examples per evaluation case (at most)."})
    generated_train_size: int = field(default=2048, metadata={"help": "Size of generated training data."})
    generated_id_size: int = field(default=500, metadata={"help": "Size of the generated ID evaluation set."})
    generated_ood_size: int = field(default=100, metadata={"help": "Generated OOD examples per subcase."})
    data_seed: int = field(default=0, metadata={"help": "Seed of the generated data."})
    strategy: str = field(default=DEFAULT_STRATEGY, metadata={
        "help": "nested (one run per seed to the highest level, every level from its final ranking; cheapest), climb "
                "(one run per seed whose target climbs through the levels) or grid (the paper: one run per level and "
                "seed)."})
    sparsities: str = field(default="0.1,0.2,0.3,0.4,0.5,0.6,0.7", metadata={
        "help": "Comma-separated sparsity levels, fractions in [0, 1)."})
    seeds: str = field(default="0", metadata={"help": "Comma-separated pruning seeds."})
    steps_per_run: int | None = field(default=None, metadata={
        "help": "Pruning steps per grid run (default 200) or of the nested run (default 100)."})
    ramp_steps: int = field(default=8, metadata={"help": "climb: steps to ramp the target to the next level."})
    settle_steps: int = field(default=4, metadata={"help": "climb: steps held at a level after reaching it."})
    max_wait_steps: int = field(default=12, metadata={"help": "climb: most steps to wait for a level."})
    batch_size: int = field(default=16, metadata={"help": "Pruning batch size."})
    eval_batch_size: int = field(default=32, metadata={"help": "Evaluation batch size."})
    margin: float = field(default=0.03, metadata={"help": "Allowed accuracy drop (absolute; 0.03 = 3 points)."})
    means_examples: int = field(default=512, metadata={"help": "Training examples for the mean activations."})
    entailment_id: int = field(default=0, metadata={
        "help": "Class id of entailment, for scoring 3-way NLI models on 2-way (HANS-style) sets."})
    max_checkpoints: int | None = field(default=None, metadata={"help": "Compute at most this many this time."})
    results_file: str | None = field(default=None, metadata={"help": "Default: OUTPUT_DIR/effective_size.json."})
    figure: bool = field(default=True, metadata={"help": "Draw effective_size.png/.pdf (--no_figure to skip)."})
    early_stopping: bool = field(default=True, metadata={
        "help": "Evaluate each group's levels sparsest first and stop at its first faithful one (identical effective "
                "sizes, fewer evaluations); --no_early_stopping evaluates every level on every set."})
    use_cpu: bool = field(default=False, metadata={"help": "Prune on the CPU even when a GPU is present."})
