"""Loading a tokenizer without the empty one transformers 5 builds silently.

`AutoTokenizer.from_pretrained(folder)` on a model folder that holds no tokenizer file (a stock `Trainer` checkpoint
saved without `processing_class`, a slim folder from before slim folders carried one) returns a tokenizer of the
model's class with only its special tokens: every word becomes unknown and every score computed on it is meaningless,
with no warning. Every place that loads a tokenizer from a path the user gave goes through `load_tokenizer`.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import UsageError

__all__ = ["TOKENIZER_FILES", "check_tokenizer", "load_tokenizer", "missing_tokenizer"]

# Files a saved tokenizer writes (one is enough).
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.txt", "vocab.json", "tokenizer.model",
                   "spiece.model", "sentencepiece.bpe.model")


def missing_tokenizer(source: str | Path, gguf_file: str | None = None) -> bool:
    """Whether `source` is a local model folder holding no tokenizer file (a Hub id or a GGUF file is left to
    transformers: the Hub repo or the GGUF file carries the tokenizer)."""
    path = Path(source).expanduser()
    return not gguf_file and path.is_dir() and not any((path / name).is_file() for name in TOKENIZER_FILES)


def check_tokenizer(source: str | Path, gguf_file: str | None = None, flag: str = "--model") -> None:
    """Refuse a local model folder without a tokenizer, naming the fix."""
    if missing_tokenizer(source, gguf_file):
        raise UsageError(f"{flag} {source} holds no tokenizer ({', '.join(TOKENIZER_FILES[:3])}, ...), and "
                         "transformers would build an empty one that reads every word as unknown. Save the model's "
                         f"tokenizer into it: AutoTokenizer.from_pretrained(BASE).save_pretrained('{source}').")


def load_tokenizer(source: str | Path, flag: str = "--model", **kwargs: Any) -> Any:
    """`AutoTokenizer.from_pretrained(source, **kwargs)`, refusing a local folder without a tokenizer (`UsageError`
    naming `flag`, the argument the user can change)."""
    from transformers import AutoTokenizer  # lazy: importing the package does not load transformers' tokenizers
    check_tokenizer(source, kwargs.get("gguf_file"), flag)
    return AutoTokenizer.from_pretrained(str(source), **kwargs)
