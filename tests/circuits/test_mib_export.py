"""MIB submissions as the leaderboard reads them (#37): two folders, each valid alone; binary circuits with their
edges and within their edge budget; mask scores whose |score| ranking is their ranking."""

from __future__ import annotations

import json

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.export import (
    CIRCUITS_FOLDER,
    EXPORT_RECORD,
    IMPORTANCES_FOLDER,
    check_submission_name,
    edge_counts,
    export_mib_circuits,
)
from hf_heuristic_core.circuits.mib import MibConfig, MibFormatError, mib_document, read_mib_circuit
from hf_heuristic_core.circuits.ranking import MIB_SUBMISSION_SIZES, top_units
from hf_heuristic_core.circuits.sources import PINNED_SCORE, importance_from_logits, load_unit_scores
from tiny_models import tiny_model

CFG = MibConfig(2, 4, 32)
SCORES = {"heads": torch.tensor([[0.1, 0.9, 0.2, 0.3], [0.8, 0.4, 0.5, 0.05]]), "mlps": torch.tensor([0.7, 0.6])}


@pytest.mark.parametrize("parallel", [False, True])
def test_edge_counts_equal_the_written_documents(parallel):
    cfg = MibConfig(3, 2, 8, parallel)
    generator = torch.Generator().manual_seed(0)
    for _ in range(30):
        masks = {"heads": (torch.rand(3, 2, generator=generator) > 0.5).float(),
                 "mlps": (torch.rand(3, generator=generator) > 0.5).float()}
        edges = mib_document(cfg, masks=masks)["edges"]
        assert edge_counts(cfg, masks) == (sum(e["in_graph"] for e in edges.values()), len(edges))


def _leaderboard_dispatch(folder):
    """The leaderboard's reading of a folder, as the issue describes it: two or more files are binary circuits, the
    first nine in listing order, mapped to 0.1% .. 50% by their edge counts."""
    files = sorted(folder.iterdir())
    assert len(files) >= 2
    shares = {}
    for path in files[:9]:
        edges = json.loads(path.read_text())["edges"]
        shares[path.name] = sum(e["in_graph"] for e in edges.values()) / len(edges)
    ranked = sorted(shares, key=lambda name: shares[name])
    return {name: (size, shares[name]) for name, size in zip(ranked, MIB_SUBMISSION_SIZES)}


def test_two_leaderboard_folders_each_valid_alone(tmp_path):
    cfg = MibConfig(12, 12, 768)          # GPT-2 small's graph: 32,491 edges
    scores = {"heads": torch.rand(12, 12, generator=torch.Generator().manual_seed(1)), "mlps": torch.rand(12)}
    record = export_mib_circuits(tmp_path, cfg, scores, "ioi_gpt2")
    assert sorted(p.name for p in tmp_path.iterdir()) == [CIRCUITS_FOLDER, EXPORT_RECORD, IMPORTANCES_FOLDER]
    assert [p.name for p in (tmp_path / IMPORTANCES_FOLDER / "ioi_gpt2").iterdir()] == ["importances.json"]
    circuits = tmp_path / CIRCUITS_FOLDER / "ioi_gpt2"
    names = sorted(p.name for p in circuits.iterdir())
    assert len(names) == 9 and "circuit_0.json" not in names
    mapping = _leaderboard_dispatch(circuits)
    for name, (size, share) in mapping.items():
        assert name == f"circuit_{size * 100:g}.json"       # each file lands on its own size
        assert share <= size                                 # "no more than k% of edges"
    assert record["circuits"]["circuit_50.json"]["edges_total"] == 32491
    assert record["circuits"]["circuit_50.json"]["units"] == 78 == record["circuits"]["circuit_50.json"]["units_by_rank"]
    assert record["leaderboard_sizes"] and record["all_fit"]
    assert json.loads((tmp_path / EXPORT_RECORD).read_text())["name"] == "ioi_gpt2"


def test_a_second_export_replaces_each_folder_whole(tmp_path):
    export_mib_circuits(tmp_path, CFG, SCORES, "ioi_tiny", sizes=(0.1, 0.2, 0.5, 1.0))
    export_mib_circuits(tmp_path, CFG, SCORES, "ioi_tiny", sizes=(0.5,))
    assert [p.name for p in (tmp_path / CIRCUITS_FOLDER / "ioi_tiny").iterdir()] == ["circuit_50.json"]
    assert not [p for p in (tmp_path / CIRCUITS_FOLDER).iterdir() if p.name.startswith(".")]   # no staging left
    record = json.loads((tmp_path / EXPORT_RECORD).read_text())
    assert list(record["circuits"]) == ["circuit_50.json"] and record["leaderboard_sizes"] is False


def test_binary_circuits_without_edges_are_refused_an_importance_file_may_omit_them(tmp_path):
    with pytest.raises(MibFormatError, match="faithfulness 0 at every size"):
        export_mib_circuits(tmp_path, CFG, SCORES, "ioi_tiny", edges="none")
    assert not tmp_path.joinpath(IMPORTANCES_FOLDER).exists()      # refused before writing anything
    record = export_mib_circuits(tmp_path, CFG, SCORES, "ioi_tiny", edges="none", circuits=False)
    assert json.loads(open(record["importances"]).read())["edges"] == {}
    assert not (tmp_path / CIRCUITS_FOLDER).exists()


def test_circuits_stay_within_their_edge_share(tmp_path):
    """One layer, one head: the head alone holds 5 of the 8 edges (q, k, v, ->logits, input->logits), over 50%."""
    cfg = MibConfig(1, 1, 8)
    scores = {"heads": torch.tensor([[1.0]]), "mlps": torch.tensor([0.0])}
    record = export_mib_circuits(tmp_path, cfg, scores, "ioi_tiny", sizes=(0.001, 0.5))
    half = record["circuits"]["circuit_50.json"]
    assert (half["units_by_rank"], half["units"], half["edges"], half["edges_total"]) == (1, 0, 1, 8)
    assert half["fits"]
    tiny = record["circuits"]["circuit_0.1.json"]     # input->logits alone is 1/8 > 0.1%: cannot fit, said so
    assert tiny["units"] == 0 and tiny["fits"] is False and record["all_fit"] is False


@pytest.mark.parametrize("name", ["ioi", "ioi_gpt2_small", "a/b_c", "_gpt2", "ioi_"])
def test_submission_names_are_task_underscore_model(name):
    with pytest.raises(MibFormatError, match="<task>_<model>"):
        check_submission_name(name)
    assert check_submission_name("arc-easy_llama3") == "arc-easy_llama3"


def test_mask_scores_rank_alike_signed_and_absolute(tmp_path):
    """Logits' sign means "pruned": by |logit| the most strongly pruned units came first. The exported score is
    softplus(logit): positive, in the logits' order."""
    prunable = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="zero"))
    logits = torch.tensor([[-6.0, 2.5, -0.5, 4.0], [0.25, -3.0, 1.5, -1.0]])
    with torch.no_grad():
        prunable.mask_logits.heads.copy_(logits)
        prunable.mask_logits.mlps.copy_(torch.tensor([-40.0, 45.0]))
    prunable.save_pretrained(tmp_path / "artifact")
    scores = load_unit_scores(tmp_path / "artifact")
    assert bool((scores["heads"] > 0).all()) and bool((scores["mlps"] > 0).all())
    assert torch.allclose(scores["heads"], -torch.log1p(-torch.sigmoid(logits.double())))
    raw = {"heads": logits, "mlps": torch.tensor([-40.0, 45.0])}
    for count in range(11):
        by_logit = top_units(raw, count)
        assert all(torch.equal(top_units(scores, count, absolute)[k], by_logit[k]) for k in raw for absolute in
                   (False, True))
    assert not torch.equal(top_units(raw, 3, absolute=True)["heads"], top_units(raw, 3)["heads"])   # the old trap
    record = export_mib_circuits(tmp_path / "mib", CFG, scores, "ioi_tiny", circuits=False)
    read = read_mib_circuit(record["importances"])
    assert torch.equal(read.scores["heads"], scores["heads"])      # float64 through the file, no ties made
    assert importance_from_logits(torch.tensor([PINNED_SCORE])).item() == PINNED_SCORE
    # The export folder stands for its importance file wherever a ranking is read.
    assert torch.equal(load_unit_scores(tmp_path / "mib")["heads"], scores["heads"])
