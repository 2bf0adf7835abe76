"""Flags of `hf-heuristic-core circuit` and its actions (torch-free: `--help` is drawn from them; the run is
`cli/circuit.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..help import render_help

__all__ = ["ACTIONS", "DESCRIPTION", "GENERATED", "PROG", "TASKS", "CircuitArguments", "circuit_help"]

ACTIONS = {
    "export": "write a ranking (--scores) as MIB submissions: an importance file and nine binary circuits",
    "attribute": "score every head and MLP block by attribution patching or integrated gradients (MIB folders)",
    "faithfulness": "MIB's faithfulness curve, CPR and CMD of rankings (--scores, or every run of --runs_dir)",
}
DESCRIPTION = ("Circuits in MIB's circuit-localization format: export, attribution baseline, faithfulness curves.\n"
               + "\n".join(f"  {name:<13} {text}" for name, text in ACTIONS.items()))
PROG = "hf-heuristic-core circuit {export,attribute,faithfulness}"
TASKS = ("auto", "causal_lm", "sequence_classification")
GENERATED = ("ioi", "nli")


@dataclass
class CircuitArguments:
    """Flags of `hf-heuristic-core circuit` (the action may also be given as the first positional argument)."""

    action: str | None = field(default=None, metadata={"help": "export, attribute or faithfulness."})
    output_dir: str | None = field(default=None, metadata={"help": "Where the files go."})
    scores: str | None = field(default=None, metadata={
        "help": "Rankings, comma-separated: mask artifact folders (ranked by softplus of their logits), MIB "
                "importance .json files, or folders written by export / attribute. export takes one."})
    model: str | None = field(default=None, metadata={
        "help": "Hub id or folder of the model (attribute, faithfulness). export reads its config only, and refuses "
                "scores of another shape (layers x heads); without it, export takes the shape from --scores."})
    gguf_file: str | None = field(default=None, metadata={
        "help": "GGUF file inside --model, if any (export: default the one a --scores artifact records)."})
    task: str = field(default="auto", metadata={
        "help": "attribute, faithfulness: causal_lm or sequence_classification. auto: the head config.architectures "
                "names; a GGUF decoder (Llama, Qwen2, ...) is a causal LM; else the model class a --scores artifact "
                "records, when --model holds that head (a config naming a headless class such as BertModel would get "
                "a random one: refused); else refused."})
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
        "help": "export: binary circuit sizes, 'submission' (0.1, 0.2, ..., 50%%: MIB's nine leaderboard files), "
                "'curve' (0.1 .. 100%%: MIB's evaluation points; not a leaderboard folder) or fractions '0.01,0.1'."})
    name: str | None = field(default=None, metadata={
        "help": "export, attribute: the leaderboard folder name <task>_<model> (e.g. ioi_gpt2); default: from "
                "--dataset (attribute) and the model's folder name."})
    write: str = field(default="both", metadata={
        "help": "export, attribute: both (OUTPUT_DIR/importances/NAME and OUTPUT_DIR/circuits/NAME), importances "
                "or circuits."})
    edges: str = field(default="all", metadata={
        "help": "all: write every edge of MIB's graph (in_graph from the nodes); none: 'edges': {} in the "
                "importance file (smaller; MIB rebuilds them). Binary circuits always need edges: none is refused "
                "unless --write importances."})
    absolute: bool = field(default=False, metadata={
        "help": "export, attribute: pick the binary circuits by |score| (MIB's --absolute). faithfulness always "
                "draws both rankings (CPR signed, CMD |score|, as MIB reports them)."})
    level: str = field(default="auto", metadata={
        "help": "node (heads and MLP blocks) or edge (edges of the residual graph, pre-LN decoders: Edge Pruning's "
                "masks, MIB's edge level). auto: attribute scores nodes; export and faithfulness take the level of "
                "--scores (an edge mask artifact or an edge-level MIB file is edge)."})
    runs_dir: str | None = field(default=None, metadata={
        "help": "faithfulness: rank by every run of a prune_many folder and write RUNS_DIR/circuits/curves.json, "
                "which analyze reports."})
    random_seeds: str = field(default="0,1,2", metadata={
        "help": "faithfulness: seeds of random rankings drawn as the chance baseline ('' for none)."})
    batch_size: int = field(default=16, metadata={"help": "Batch size."})
    device: str | None = field(default=None, metadata={"help": "Device, e.g. cuda (default: cpu)."})
    overwrite_output_dir: bool = field(default=False, metadata={
        "help": "Write into an --output_dir that holds another run's or other files (nothing is deleted; files of "
                "the same name are replaced). An --output_dir that is or holds an input is refused even so."})


def circuit_help() -> str:
    return render_help(PROG, DESCRIPTION, [("circuit", CircuitArguments, None)],
                       epilog="Dashes and underscores both work; booleans take true/false.")
