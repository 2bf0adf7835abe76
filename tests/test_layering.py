"""Imports point down one layer order, with no circle between modules or folders, and private names stay in their
folder (issue 39). Read from the source with `ast` (`import_graph.py`), imports inside functions included: a lazy
import still ties the layers together, and `if TYPE_CHECKING:` imports are left out (they never run).

The layer order, bottom to top (a module may import its own layer or the ones below; circles within a layer are
caught by the circle tests):

0. foundation: errors, io and run-folder helpers, batching, the lazy-export and registry helpers, the convergence
   verdict's wording (`verdicts`), the distillation KL (`losses`), mask passes, plotting, data-free leaves;
1. parts: architectures, ablation, relaxations, granularity, data, `config`, `mask_state`;
2. core: `artifacts`, `export/`, `model_setup`, `model` (the wrapper);
3. on the model: `circuits/` (attribution, warm starts, MIB), `evaluation/` (accuracy, agreement, KL of a subnetwork);
4. `training/` (`PruningTrainer`, which warm-starts from `circuits/`);
5. workflows that run training: `search/`, `analysis/`, `induction/`, `finetuning`, `study/`;
6. `cli/`; then the package root, the lazy facade that names everything.
"""

from __future__ import annotations

from collections.abc import Set
from pathlib import Path

import pytest
from import_graph import Import, imports, module_names, private_uses, strongly_connected, unit

import hf_heuristic_core

PACKAGE = Path(hf_heuristic_core.__file__).parent

LAYERS: list[set[str]] = [
    {"_compat.py", "_keywords.py", "_lazy.py", "_registry.py", "artifact_packing.py", "batching.py",
     "checkpointing.py", "errors.py", "finetune_checkpoints.py", "io_utils.py", "losses.py", "mask_passes.py",
     "method_settings.py", "metrics/", "offline_models.py", "plotting/", "run_folder.py", "tokenizer_loading.py",
     "verdicts.py"},
    {"ablation/", "architectures/", "config.py", "data/", "granularity/", "mask_state.py", "relaxations/",
     "table_checks.py"},
    {"artifacts.py", "export/", "model.py", "model_setup.py"},
    {"circuits/", "evaluation/"},
    {"training/"},
    {"analysis/", "finetuning.py", "induction/", "search/", "study/"},
    {"cli/"},
    {"/"},
]
# Private names allowed to cross a folder, as (file, name): none.
KNOWN_PRIVATE: set[tuple[str, str]] = set()


def _layer_of(name: str) -> int:
    found = [i for i, layer in enumerate(LAYERS) if name in layer]
    assert found, f"{name} is in no layer of tests/test_layering.py: place it in LAYERS (what it imports decides)"
    return found[0]


def _runtime(package: Path) -> list[Import]:
    return [edge for edge in imports(package) if edge.runtime]


def module_circles(package: Path) -> list[str]:
    """Each circle of modules (runtime imports), with the file:line of every import that closes it."""
    edges = _runtime(package)
    return [f"{' <-> '.join(c)}: " + "; ".join(f"{e.where} imports {e.target}" for e in edges
                                               if e.source in c and e.target in c)
            for c in strongly_connected((e.source, e.target) for e in edges)]


def folder_circles(package: Path) -> list[str]:
    """Each circle of units (top-level folders and modules), with the file:line of every import in it."""
    modules = module_names(package)
    cross = [(unit(e.source, modules), unit(e.target, modules), e) for e in _runtime(package)]
    cross = [(a, b, e) for a, b, e in cross if a != b]
    return [f"{' <-> '.join(c)}: " + "; ".join(f"{e.where} imports {e.target}" for a, b, e in cross
                                               if a in c and b in c)
            for c in strongly_connected((a, b) for a, b, _ in cross)]


def arrows_up(package: Path) -> list[str]:
    """Each runtime import from a lower layer of `LAYERS` into a higher one, with its file:line."""
    modules = module_names(package)
    found = []
    for edge in _runtime(package):
        source, target = unit(edge.source, modules), unit(edge.target, modules)
        if _layer_of(source) < _layer_of(target):
            found.append(f"{edge.where} imports {edge.target} ({source} sits below {target})")
    return found


def private_crossings(package: Path, known: Set[tuple[str, str]] = frozenset()) -> list[str]:
    """Each private name used outside its folder, as `file:line imports _x of folder/`, bar the `known` ones."""
    return [f"{use.where} {'imports' if use.how == 'import' else 'uses the attribute'} {use.name} of "
            f"{use.owner + '/' if use.owner else 'the top-level modules'}" for use in private_uses(package)
            if (use.file, use.name) not in known]


def test_no_module_level_import_circle():
    assert module_circles(PACKAGE) == []


def test_no_folder_level_import_circle():
    assert folder_circles(PACKAGE) == []


def test_nothing_below_training_imports_it():
    below = set().union(*LAYERS[:_layer_of("training/")])
    modules = module_names(PACKAGE)
    offenders = [f"{e.where} imports {e.target}" for e in _runtime(PACKAGE)
                 if unit(e.target, modules) == "training/" and unit(e.source, modules) in below]
    assert offenders == []


def test_every_import_points_down_the_layer_order():
    assert arrows_up(PACKAGE) == []


def test_no_private_name_crosses_a_folder():
    assert private_crossings(PACKAGE, KNOWN_PRIVATE) == []


def test_the_wrapper_module_stays_small():
    """`model.py` is the wrapper's behaviour; building it lives in `model_setup.py` (issue 39: at most 500 lines)."""
    lines = len((PACKAGE / "model.py").read_text().splitlines())
    assert lines <= 500, f"hf_heuristic_core/model.py has {lines} lines: move a cohesive piece into its own module"


@pytest.fixture(scope="module")
def tangled(tmp_path_factory) -> Path:
    """A package with one of each fault, written the ways the real package writes imports."""
    package = tmp_path_factory.mktemp("tangled") / "hf_heuristic_core"
    files = {
        "__init__.py": "",
        "model.py": "from .artifacts import save\n_hidden = 1\nclass M:\n    def __init__(self):\n"
                    "        self._state = None\n",
        "artifacts.py": "def save():\n    from .training.convergence import verdict_line\n",
        "training/__init__.py": "",
        "training/convergence.py": "from ..model import M, _hidden\nverdict_line = 1\n",
        "circuits/__init__.py": "",
        "circuits/attribution.py": "import hf_heuristic_core.model\ndef f(m):\n    m._state = 2\n",
        "relaxations/__init__.py": "",
        "relaxations/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from .b import B\n",
        "relaxations/b.py": "from . import a\nclass B:\n    pass\n",
    }
    for name, text in files.items():
        (package / name).parent.mkdir(parents=True, exist_ok=True)
        (package / name).write_text(text)
    return package


def test_the_scans_see_each_fault(tangled):
    """Every check above finds its fault, with file:line, at module top and inside a function: a scan that finds
    nothing anywhere would pass above for nothing. A TYPE_CHECKING-only circle is no runtime circle."""
    assert module_circles(tangled) == [
        "artifacts <-> model <-> training.convergence: artifacts.py:2 imports training.convergence; "
        "model.py:1 imports artifacts; training/convergence.py:1 imports model"]
    assert folder_circles(tangled) == [
        "artifacts.py <-> model.py <-> training/: artifacts.py:2 imports training.convergence; "
        "model.py:1 imports artifacts; training/convergence.py:1 imports model"]
    assert private_crossings(tangled) == [
        "circuits/attribution.py:3 uses the attribute _state of the top-level modules",
        "training/convergence.py:1 imports _hidden of the top-level modules"]
    kinds = {(e.source, e.target): e.kind for e in imports(tangled)}
    assert kinds[("relaxations.a", "relaxations.b")] == "type_checking"
    assert kinds[("artifacts", "training.convergence")] == "function"
    assert kinds[("circuits.attribution", "model")] == "top"


def test_an_arrow_up_into_training_is_found(tangled):
    """The fault issue 39 found, in miniature: `artifacts.py` reaching up into `training/` (for a card row)."""
    assert arrows_up(tangled) == ["artifacts.py:2 imports training.convergence (artifacts.py sits below training/)"]


def test_the_moved_pieces_keep_their_old_paths():
    from hf_heuristic_core import finetune_checkpoints, kl_to_teacher, losses, verdicts
    from hf_heuristic_core.relaxations.continuous_sparsification import beta_after_epochs
    from hf_heuristic_core.relaxations.continuous_sparsification.relaxation import beta_after_epochs as old_beta
    from hf_heuristic_core.study import checkpoints as old_checkpoints
    from hf_heuristic_core.training import convergence
    from hf_heuristic_core.training import losses as old_losses

    assert convergence.verdict_line is verdicts.verdict_line and convergence.verdict_status is verdicts.verdict_status
    assert convergence.INCONCLUSIVE == verdicts.INCONCLUSIVE == "inconclusive"
    assert old_losses.kl_to_teacher is losses.kl_to_teacher is kl_to_teacher
    assert old_losses.ChunkedKL is losses.ChunkedKL and old_losses.kl_items is losses.kl_items
    assert old_beta is beta_after_epochs
    assert old_checkpoints.KeepResumeStateInNewestCheckpoint is finetune_checkpoints.KeepResumeStateInNewestCheckpoint
    assert old_checkpoints.check_disk_for_checkpoints is finetune_checkpoints.check_disk_for_checkpoints
