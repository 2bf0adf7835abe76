"""MIB's circuit format: the writer against a small example written by hand from MIB's documented structure
(`fixtures/mib_node_2x2.json`: EAP-IG `Graph.from_model` / `to_json`, 2 layers x 2 heads, 46 edges counted by hand),
the reader, the round trip, and the error paths."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.mib import (
    MibConfig,
    MibFormatError,
    edge_names,
    mib_config,
    mib_document,
    node_names,
    read_mib_circuit,
    write_mib_circuit,
)
from tiny_models import tiny_model

FIXTURE = Path(__file__).parent / "fixtures" / "mib_node_2x2.json"
CFG = MibConfig(n_layers=2, n_heads=2, d_model=8)


def test_writer_matches_the_hand_written_example_node_for_node_and_edge_for_edge():
    example = json.loads(FIXTURE.read_text())
    scores = {"heads": [[0.25, -0.125], [0.0625, 2.0]], "mlps": [1.5, -1.0]}
    masks = {"heads": [[1, 0], [0, 1]], "mlps": [1, 0]}
    ours = mib_document(CFG, scores=scores, masks=masks)
    assert ours["cfg"] == example["cfg"]
    assert list(ours["nodes"]) == list(example["nodes"])          # same names, same order
    assert list(ours["edges"]) == list(example["edges"])          # same 46 edges, same order
    for name, entry in example["nodes"].items():
        if name == "input":   # MIB's own attribution scores the input node; this package leaves it unscored
            assert ours["nodes"][name] == {"in_graph": True}
            continue
        assert ours["nodes"][name] == entry, name
    for name, entry in ours["edges"].items():
        assert set(entry) == {"score", "in_graph"}
    # An edge is in the circuit when both its ends are (logits always are).
    assert ours["edges"]["a0.h0->m0"]["in_graph"] is True
    assert ours["edges"]["a0.h1->m0"]["in_graph"] is False
    assert ours["edges"]["m0->a1.h0<q>"]["in_graph"] is False
    assert ours["edges"]["m0->a1.h1<v>"]["in_graph"] is True
    assert ours["edges"]["m1->logits"]["in_graph"] is False
    assert ours["edges"]["a1.h1->logits"]["in_graph"] is True
    # By hand: input->a0.h0 (3), input/a0.h0->m0 (2), input/a0.h0/m0->a1.h1 (9), input/a0.h0/m0/a1.h1->logits (4).
    assert sum(e["in_graph"] for e in ours["edges"].values()) == 18


def test_reader_reads_the_hand_written_example():
    circuit = read_mib_circuit(FIXTURE)
    assert circuit.cfg == CFG
    assert circuit.scores["heads"].tolist() == [[0.25, -0.125], [0.0625, 2.0]]
    assert circuit.scores["mlps"].tolist() == [1.5, -1.0]
    assert circuit.in_graph["heads"].tolist() == [[True, False], [False, True]]
    assert circuit.in_graph["mlps"].tolist() == [True, False]
    assert circuit.masks()["heads"].dtype == torch.float32
    assert circuit.edge_count == 46
    assert circuit.extra == {"input_score": 0.5}


def test_node_and_edge_counts_of_the_graph():
    assert node_names(CFG) == ["input", "a0.h0", "a0.h1", "m0", "a1.h0", "a1.h1", "m1", "logits"]
    assert len(edge_names(CFG)) == 46
    # Parallel attention and MLP: no edge from a layer's heads to its own MLP (2 + 2 fewer edges, by hand: 42).
    parallel = MibConfig(2, 2, 8, parallel_attn_mlp=True)
    names = edge_names(parallel)
    assert len(names) == 42 and "a0.h0->m0" not in names and "a0.h0->m1" in names
    # GPT-2 small's shape: MIB's example circuit (circuits/ioi-eap-ig.json) has 32491 edges and 158 nodes.
    gpt2 = MibConfig(12, 12, 768)
    assert len(node_names(gpt2)) == 158
    assert len(edge_names(gpt2)) == 32491


def test_round_trip_scores_masks_and_unscored_units(tmp_path):
    scores = {"heads": torch.tensor([[0.3, float("nan")], [-1.25, 7.0]]), "mlps": torch.tensor([0.0, 2.5])}
    masks = {"heads": torch.tensor([[0.0, 1.0], [1.0, 1.0]]), "mlps": torch.tensor([1.0, 0.0])}
    for edges in ("all", "none"):
        path = write_mib_circuit(tmp_path / f"c-{edges}.json", CFG, scores=scores, masks=masks, edges=edges)
        back = read_mib_circuit(path)
        assert back.cfg == CFG
        assert torch.equal(back.masks()["heads"], masks["heads"]) and torch.equal(back.masks()["mlps"], masks["mlps"])
        assert math.isnan(back.scores["heads"][0, 1])
        finite = torch.isfinite(scores["heads"])
        assert torch.equal(back.scores["heads"][finite].float(), scores["heads"][finite])
        assert torch.equal(back.scores["mlps"].float(), scores["mlps"])
        assert back.edge_count == (46 if edges == "all" else 0)
    # The file is plain JSON (no NaN literal): an unscored unit has no "score" key.
    text = (tmp_path / "c-all.json").read_text()
    assert "NaN" not in text and "score" not in json.loads(text)["nodes"]["a0.h1"]


def test_binary_circuit_without_scores(tmp_path):
    path = write_mib_circuit(tmp_path / "binary.json", CFG, masks={"heads": [[1, 1], [0, 0]], "mlps": [0, 1]})
    back = read_mib_circuit(path)
    assert back.scores is None
    assert back.in_graph["heads"].tolist() == [[True, True], [False, False]]


def test_grouped_query_model_counts_query_heads():
    model = tiny_model("llama", task="causal_lm")           # 4 query heads, 2 key/value heads
    cfg = mib_config(PrunableModel(model, PruningConfig(ablation="zero")))
    assert (cfg.n_layers, cfg.n_heads, cfg.d_model, cfg.parallel_attn_mlp) == (2, 4, 32, False)
    assert mib_config(PrunableModel(tiny_model("gpt_neox", task="causal_lm"),
                                    PruningConfig(ablation="zero"))).parallel_attn_mlp is True


@pytest.mark.parametrize("content, message", [
    ("{not json", "not valid JSON"),
    ('{"cfg": {"n_layers": 2, "n_heads": 2}, "nodes": {}}', "missing key(s) ['edges']"),
    ('{"cfg": {"n_layers": 2}, "nodes": {}, "edges": {}}', "n_layers and n_heads"),
    ('{"cfg": {"n_layers": 2, "n_heads": 2}, "nodes": {"a5.h0": {"in_graph": true}}, "edges": {}}',
     "do not exist in a graph"),
    ('{"cfg": {"n_layers": 1, "n_heads": 1}, "nodes": {"a0.h0": {"in_graph": true}}, "edges": {}}',
     "unit node(s) are missing"),
    ('{"cfg": {"n_layers": 1, "n_heads": 1}, "nodes": {"a0.h0": {"score": 1}, "m0": {"in_graph": true}}, '
     '"edges": {}}', "has no 'in_graph'"),
])
def test_reader_errors_name_the_problem(tmp_path, content, message):
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(MibFormatError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(")
                       .replace(")", r"\)")):
        read_mib_circuit(path)
    with pytest.raises(MibFormatError, match="no such file"):
        read_mib_circuit(tmp_path / "missing.json")


def test_writer_errors():
    with pytest.raises(MibFormatError, match="binary"):
        mib_document(CFG, masks={"heads": [[0.5, 1], [1, 1]], "mlps": [1, 1]})
    with pytest.raises(MibFormatError, match=r"heads \[2, 2\]"):
        mib_document(CFG, scores={"heads": [[1, 2, 3]], "mlps": [1, 2]})
    with pytest.raises(ValueError, match="edges="):
        mib_document(CFG, edges="some")
    weight_masks = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(granularity="neuron",
                                                                                     ablation="zero"))
    with pytest.raises(MibFormatError, match="unit masks"):
        mib_config(weight_masks)


def test_a_failed_write_keeps_the_previous_file(tmp_path):
    path = write_mib_circuit(tmp_path / "c.json", CFG, masks={"heads": [[1, 1], [1, 1]], "mlps": [1, 1]})
    before = path.read_text()
    with pytest.raises(MibFormatError):
        write_mib_circuit(path, CFG, masks={"heads": [[2, 1], [1, 1]], "mlps": [1, 1]})
    assert path.read_text() == before
