"""Checks of what the user points the CLI at (model folders, data files, text columns), with errors that name the
problem and the fix before transformers or datasets answer with something about repo ids or `StopIteration`."""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..config import CONFIG_NAME
from ..errors import UsageError
# Moved to the library (circuits/ loads tables too); these names keep working here.
from ..table_checks import check_rows, load_dataset_checked  # noqa: F401
from ..tokenizer_loading import TOKENIZER_FILES, check_tokenizer, missing_tokenizer  # noqa: F401

MODEL_FILES = ("config.json", "adapter_config.json")

def looks_local(source: str) -> bool:
    """A path rather than a Hub id: starts with . / ~, has a backslash, or more than one '/' (ids have at most one)."""
    return source.startswith((".", "/", "~")) or "\\" in source or source.count("/") > 1 or \
        (os.sep != "/" and os.sep in source)

def check_model_source(source: str, gguf_file: str | None = None, flag: str = "--model",
                       reads_gguf: bool = True) -> None:
    """A local model folder must exist and hold a saved model; a Hub id is left to transformers. `reads_gguf`: whether
    the command has a `--gguf_file` flag, so that a GGUF file is never answered with a flag the command lacks."""
    path = Path(source).expanduser()
    if path.exists():
        if path.is_file():
            hint = (_gguf_hint(flag, path.parent, path.name, reads_gguf) if path.suffix == ".gguf" else
                    "pass the folder that save_pretrained wrote")
            raise UsageError(f"{flag} {source} is a file, not a model folder; {hint}.")
        if gguf_file:
            if not (path / gguf_file).is_file():
                raise UsageError(f"--gguf_file {gguf_file} is not in {source}; the folder holds "
                                 f"{sorted(p.name for p in path.glob('*.gguf')) or 'no .gguf files'}.")
            return
        if not any((path / name).is_file() for name in MODEL_FILES):
            ggufs = sorted(p.name for p in path.glob("*.gguf"))
            if ggufs:
                hint = f"name the file to read: --gguf_file {ggufs[0]}" if reads_gguf else \
                    _gguf_hint(flag, path, ggufs[0], reads_gguf)
                raise UsageError(f"{flag} {source} holds GGUF file(s) {ggufs} and no config.json; {hint}.")
            raise UsageError(f"{flag} {source} has no config.json, so it is not a saved model; "
                             f"{_not_a_model_hint(path, flag)}.")
        return
    if looks_local(source):
        raise UsageError(f"{flag} {source}: no such folder; check the path, or pass a Hub id like 'namespace/name'.")


def _gguf_hint(flag: str, folder: Path, name: str, reads_gguf: bool) -> str:
    """How to name a GGUF file: `--gguf_file` where the command has it; else the way to a model folder (`finetune`
    reads GGUF files and writes a plain one)."""
    if reads_gguf:
        return f"pass the folder and the file name: {flag} {folder} --gguf_file {name}"
    return (f"this command reads no GGUF file (it has no --gguf_file): pass a folder with config.json, e.g. the "
            f"OUTPUT_DIR/final that `hf-heuristic-core finetune --model {folder} --gguf_file {name} ...` writes")


def _not_a_model_hint(path: Path, flag: str) -> str:
    """What to pass instead of a folder that holds no model: a `finetune` run's final model, a mask artifact's base
    model, or else any folder that save_pretrained wrote."""
    from ..run_folder import read_record  # every --help loads this module (cli/__init__): keep filelock out of it
    final = path / "final"
    if (read_record(path) or {}).get("kind") == "finetune" and (final / "config.json").is_file():
        return (f"it is a finetune run's folder: pass its final model, {flag} {final} (or one of its checkpoint-* "
                "folders)")
    try:
        base = json.loads((path / CONFIG_NAME).read_text()).get("base_model_name_or_path")
    except (OSError, ValueError, AttributeError):
        base = None
    if base:
        return f"it is a mask artifact (masks only): pass the model its masks were learned on, {flag} {base}"
    return "pass the folder that save_pretrained wrote (or a Hub id like 'namespace/name')"


def resolve_text_columns(columns: list[str], requested: str | None) -> list[str]:
    """`data.tokenize.text_columns`, its error turned into a `UsageError` naming the flag."""
    from ..data.tokenize import text_columns  # every --help loads this module: keep datasets (seconds) out of it
    try:
        return text_columns(columns, requested)
    except ValueError as err:
        raise UsageError(str(err).replace("text columns [", "--text_columns [", 1)) from None

def has_splits(source: str) -> bool:
    """Whether a `--dataset` names splits that `--train_split` / `--eval_split` can choose between: a Hub dataset, a
    `DatasetDict.save_to_disk` folder or a folder of per-split files do; data files, one `Dataset.save_to_disk`
    folder or a folder of files that name no split do not (`load_table` reads them whole, whatever the split)."""
    parts = [Path(p.strip()).expanduser() for p in str(source).split(",") if p.strip()]
    if not parts or not all(p.exists() for p in parts):
        return True   # a Hub id: datasets knows its splits
    if len(parts) > 1 or parts[0].is_file():
        return False
    folder = parts[0]
    if (folder / "dataset_dict.json").exists():
        return True
    if (folder / "state.json").exists() and (folder / "dataset_info.json").exists():
        return False
    from ..data.tables import files_name_splits  # every --help loads this module: keep datasets out of it
    return files_name_splits(folder)
