"""Export, induction, search, analysis and artifacts ask the granularity which mask kinds exist (its `mask_kinds`,
`kind_shapes`, `everything_kept`, `owned_units`, the unit granularity's `head_kind` / `block_kind` and labels); none of
them writes a kind's name itself. A kind name written there again is knowledge in two places: a new granularity, or a
renamed kind, would be missed there silently."""

from __future__ import annotations

import ast
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForSequenceClassification

import hf_heuristic_core
from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.granularity import GRANULARITIES
from hf_heuristic_core.granularity.unit.granularity import UnitGranularity

PACKAGE = Path(hf_heuristic_core.__file__).parent
# The modules that must ask the granularity (issue 27's list).
SCANNED = ["export", "induction", "search", "analysis", "artifacts.py"]
# (module, literal) pairs that are not mask kinds although they are spelled like one; each says why.
NOT_A_KIND = {
    # `LayerLayout.neurons`: the slim layout's own record field (kept neuron indices), read back from config.json.
    ("export/plan.py", "neurons"), ("export/io.py", "neurons"), ("export/shrink.py", "neurons"),
    # The induction toy model's size field ("layers", "hidden", "heads", "inner"), a model dimension.
    ("induction/arguments.py", "heads"),
}


def _seq2seq_kinds() -> set[str]:
    """The per-stack kinds (`encoder_heads`, `cross_heads`, ...) as the unit granularity names them on a tiny BART."""
    torch.manual_seed(0)
    config = AutoConfig.for_model("bart", vocab_size=99, d_model=16, encoder_layers=1, decoder_layers=1,
                                  encoder_attention_heads=2, decoder_attention_heads=2, encoder_ffn_dim=8,
                                  decoder_ffn_dim=8, max_position_embeddings=16, num_labels=2, pad_token_id=1)
    model = AutoModelForSequenceClassification.from_config(config, attn_implementation="eager")
    return set(PrunableModel(model, PruningConfig()).mask_shapes())


def kind_names() -> set[str]:
    names = {kind for name in GRANULARITIES.names() for kind in GRANULARITIES.lookup(name).mask_kinds}
    return names | _seq2seq_kinds() | {UnitGranularity.block_marker}


def kind_literals(source: str, kinds: set[str]) -> list[tuple[int, str]]:
    """(line, literal) of every string constant that is a kind name; docstrings are prose and are skipped."""
    tree = ast.parse(source)
    docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                  if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                  and node.body and isinstance(node.body[0], ast.Expr)
                  and isinstance(node.body[0].value, ast.Constant)}
    return [(node.lineno, node.value) for node in ast.walk(tree)
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in kinds
            and id(node) not in docstrings]


def _scanned_files() -> list[Path]:
    files = []
    for entry in SCANNED:
        path = PACKAGE / entry
        files += sorted(path.rglob("*.py")) if path.is_dir() else [path]
    return files


def test_the_kind_names_come_from_the_granularities():
    kinds = kind_names()
    assert {"heads", "mlps", "neurons", "encoder_heads", "decoder_mlps", "cross_heads", "mlp"} <= kinds


def test_no_scanned_module_names_a_mask_kind():
    kinds = kind_names()
    found = {}
    for path in _scanned_files():
        rel = path.relative_to(PACKAGE).as_posix()
        hits = [(line, name) for line, name in kind_literals(path.read_text(), kinds) if (rel, name) not in NOT_A_KIND]
        if hits:
            found[rel] = hits
    assert found == {}, "ask the granularity (mask_kinds, head_kind/block_kind, owned_units) instead"


def test_the_scan_sees_a_kind_literal_but_not_a_docstring():
    kinds = kind_names()
    source = 'def f(masks):\n    """Reads masks["heads"]."""\n    return masks["mlps"], {"encoder_heads": 1}\n'
    assert kind_literals(source, kinds) == [(3, "mlps"), (3, "encoder_heads")]
    # the unit helpers the analyses moved onto the granularity give the same units and labels as before
    assert UnitGranularity.parse_unit("L3.MLP") == ("mlp", 3) and UnitGranularity.unit_label((4, 0)) == "L4.H0"
    assert UnitGranularity.kind_and_index(UnitGranularity.parse_unit("l2h1")) == ("heads", (2, 1))
