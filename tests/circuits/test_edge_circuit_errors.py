"""Edge circuits (#37) refused where they cannot work, each message naming the problem and the fix: an edge export
without its graph or with scores / a cfg of another model; an edge file ranked or applied on a unit-masked model and
a node file on an edge-masked one; an edge file made for another model (a larger model's file holds every edge name
of a smaller one, so names alone accepted it). Where a path can work it is checked against a reference built here:
warm starting edge masks from an edge file (refused with a wrong message before), an edge-level binary circuit as
edge masks (the top of the ranking, sorted here), a node circuit as edge masks (the unit-masked model's logits)."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.export import export_mib_circuits
from hf_heuristic_core.circuits.mib import MibConfig, MibFormatError, mib_config, read_mib_circuit, write_mib_circuit
from hf_heuristic_core.circuits.sources import load_unit_scores
from hf_heuristic_core.circuits.warm_start import warm_start_from_file
from hf_heuristic_core.cli import main
from hf_heuristic_core.errors import MaskShapeError, PruningError
from hf_heuristic_core.granularity.edge.graph import EdgeGraph
from tiny_gguf import write_lm_prompts, write_tiny_gguf
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401  (one_torch_thread: fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
NAME = "ioi_tiny"


def _importances(folder):
    return folder / "importances" / NAME / "importances.json"


@pytest.fixture(scope="module")
def setup(tmp_path_factory):
    """A tiny GPT-2 (2 layers x 4 heads: 110 edges) wrapped with edge and with unit masks, and what each exports:
    an edge ranking (importance file, nine binary circuits, an artifact) and a node ranking (the same, of units)."""
    root = tmp_path_factory.mktemp("edge-errors")
    model = tiny_model("gpt2", task="causal_lm")
    edge = PrunableModel(copy.deepcopy(model), PruningConfig(granularity="edge", ablation="zero")).eval()
    unit = PrunableModel(copy.deepcopy(model), PruningConfig(ablation="zero")).eval()
    graph = edge.granularity.graph
    scores = torch.rand(graph.num_edges, generator=torch.Generator().manual_seed(0), dtype=torch.float64)
    export_mib_circuits(root / "edge", mib_config(edge), {"edges": scores}, NAME, graph=graph)
    node_scores = {"heads": torch.tensor([[0.9, 0.1, 0.8, 0.2], [0.3, 0.7, 0.05, 0.6]]),
                   "mlps": torch.tensor([0.95, 0.4])}
    export_mib_circuits(root / "node", mib_config(unit), node_scores, NAME)
    edge.save_pretrained(root / "edge-artifact")
    unit.save_pretrained(root / "unit-artifact")
    batch = make_batch("gpt2", batch_size=3)
    return {"root": root, "model": model, "edge": edge, "unit": unit, "graph": graph, "scores": scores,
            "inputs": {k: batch[k] for k in ("input_ids", "attention_mask")}}


def _logits(prunable, inputs, masks=None):
    with torch.no_grad():
        if masks is None:
            return prunable(**inputs).logits
        with prunable.masks_applied(masks):
            return prunable(**inputs).logits


# ------------------------------------------------------------------ a. exporting edge scores
def test_exporting_edge_scores_without_their_graph_is_refused_and_writes_nothing(setup, tmp_path):
    with pytest.raises(MibFormatError) as info:
        export_mib_circuits(tmp_path / "out", mib_config(setup["edge"]), {"edges": setup["scores"]}, NAME)
    message = str(info.value)
    assert "need that graph" in message and "graph=prunable.granularity.graph" in message
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("case, expected", [
    ("cfg of another model", ["describe different models", "3 x 4", "of the same wrapped model"]),
    ("scores of another model", ["shape (7,)", "110 edges", "made for another model"]),
    ("unscored edges", ["2 of 110 edge scores are NaN", "give each a finite score"]),
])
def test_exporting_edge_scores_that_do_not_fit_the_graph_is_refused(setup, tmp_path, case, expected):
    cfg, scores = mib_config(setup["edge"]), setup["scores"].clone()
    if case == "cfg of another model":
        cfg = MibConfig(3, 4, 32)
    elif case == "scores of another model":
        scores = torch.rand(7, dtype=torch.float64)
    else:
        scores[[3, 50]] = float("nan")
    with pytest.raises(MibFormatError) as info:
        export_mib_circuits(tmp_path / "out", cfg, {"edges": scores}, NAME, graph=setup["graph"])
    for part in expected:
        assert part in str(info.value)
    assert not (tmp_path / "out").exists()


# ------------------------------------------------------------------ b. a file of one level on a model of the other
@pytest.mark.parametrize("source", ["importance file", "export folder", "artifact"])
def test_an_edge_ranking_on_a_unit_masked_model_is_refused_with_the_level_to_wrap_at(setup, source):
    path = {"importance file": _importances(setup["root"] / "edge"), "export folder": setup["root"] / "edge",
            "artifact": setup["root"] / "edge-artifact"}[source]
    with pytest.raises(PruningError) as info:
        load_unit_scores(path, setup["unit"].mask_shapes())
    message = str(info.value)
    assert "edge" in message and "granularity='edge'" in message and "--level edge" in message
    unit = PrunableModel(copy.deepcopy(setup["model"]), PruningConfig(ablation="zero"))
    with pytest.raises(PruningError, match="granularity='edge'"):
        warm_start_from_file(unit, path)


@pytest.mark.parametrize("source", ["importance file", "artifact"])
def test_a_node_ranking_on_an_edge_masked_model_is_refused_with_the_level_to_wrap_at(setup, source):
    path = _importances(setup["root"] / "node") if source == "importance file" else setup["root"] / "unit-artifact"
    for graph in (setup["graph"], None):
        with pytest.raises(PruningError) as info:
            load_unit_scores(path, setup["edge"].mask_shapes(), graph)
        message = str(info.value)
        assert "node-level ranking" in message and "granularity='unit'" in message and "--level node" in message
    edge = PrunableModel(copy.deepcopy(setup["model"]), PruningConfig(granularity="edge"))
    with pytest.raises(PruningError, match="granularity='unit'"):
        warm_start_from_file(edge, path)


def test_warm_starting_edge_masks_from_an_edge_importance_file(setup):
    """Was refused ("rank it on a model wrapped with granularity='edge'") on exactly such a model: the warm start did
    not pass the model's graph on. The logits must rank the edges as the scores written to the file."""
    edge = PrunableModel(copy.deepcopy(setup["model"]), PruningConfig(granularity="edge"))
    summary = warm_start_from_file(edge, _importances(setup["root"] / "edge"))
    assert summary["units_ranked"] == 110
    logits = edge.mask_logits.edges.detach().double()
    assert torch.equal(torch.argsort(logits), torch.argsort(setup["scores"]))      # no ties: random scores


def test_an_edge_level_binary_circuit_is_not_applied_as_node_masks_but_as_edge_masks(setup):
    circuit = read_mib_circuit(setup["root"] / "edge" / "circuits" / NAME / "circuit_20.json")
    with pytest.raises(MibFormatError) as info:
        circuit.masks()
    message = str(info.value)
    assert "edge-level circuit" in message and "granularity='edge'" in message and "edge_masks(" in message
    # The edges the circuit keeps: the top int(0.2 * 110) of the scores, sorted here.
    expected = torch.zeros(110)
    expected[torch.argsort(setup["scores"], descending=True)[:22]] = 1
    masks = circuit.edge_masks(setup["graph"])
    assert torch.equal(masks["edges"], expected)
    # The importance file scores edges: no node circuit either.
    with pytest.raises(MibFormatError, match="edge-level circuit: it scores edges, not nodes"):
        read_mib_circuit(_importances(setup["root"] / "edge")).masks()


def test_a_node_circuit_applies_to_an_edge_masked_model_through_its_edges(setup, tmp_path):
    """A node circuit's edges are those with both ends kept: as edge masks they ablate each left-out unit for every
    reader, which is what unit masks do (reference: the unit-masked model)."""
    circuit = read_mib_circuit(setup["root"] / "node" / "circuits" / NAME / "circuit_50.json")
    assert circuit.edges_cut_between_kept_nodes() == []
    unit_masks = circuit.masks()
    assert 0 < int(unit_masks["heads"].sum() + unit_masks["mlps"].sum()) < 10       # some units left out
    with pytest.raises(MaskShapeError, match=r"Unknown mask kind\(s\) \['heads', 'mlps'\]") as refused:
        setup["edge"].set_masks(**unit_masks)
    # The error names the fix: the granularity these masks need, and how an artifact loads with its own.
    message = str(refused.value)
    assert "wrapped with granularity='edge'" in message
    assert "PrunableModel(model, PruningConfig(granularity='unit')) for 'heads' and 'mlps'" in message
    assert "PrunableModel.from_pretrained(artifact_folder)" in message
    with pytest.raises(MaskShapeError, match=r"Unknown mask kind 'heads'; this model's kinds are \['edges'\] \(it is "
                                             r"wrapped with granularity='edge'\)\. Masks of another granularity"):
        setup["edge"].force_units(heads=unit_masks["heads"] == 0, keep=False)
    expected = _logits(setup["unit"], setup["inputs"], unit_masks)
    assert (expected - _logits(setup["unit"], setup["inputs"])).abs().max() > 1e-3      # the circuit matters
    got = _logits(setup["edge"], setup["inputs"], circuit.edge_masks(setup["graph"]))
    assert (got - expected).abs().max() <= 2e-5
    # The edges follow from the nodes: a node circuit written without its edges gives the same edge masks.
    bare = read_mib_circuit(write_mib_circuit(tmp_path / "bare.json", circuit.cfg, masks=unit_masks, edges="none"))
    assert not bare.is_edge_level()
    assert torch.equal(bare.edge_masks(setup["graph"])["edges"], circuit.edge_masks(setup["graph"])["edges"])
    # A circuit of another model is refused, not read as a prefix of its edges.
    other = read_mib_circuit(write_mib_circuit(tmp_path / "other.json", MibConfig(1, 4, 32),
                                               masks={"heads": torch.ones(1, 4), "mlps": torch.ones(1)}))
    with pytest.raises(MibFormatError, match=r"1 layers x 4 heads .* is 2 x 4 .*made for another model"):
        other.edge_masks(setup["graph"])


def test_a_node_circuit_as_edge_masks_under_grouped_query_attention(tmp_path):
    """Llama's tiny config reads one key / value input per group of 2 query heads: a circuit that keeps a1.h2 but not
    a1.h3 (one group) keeps the group's key / value edges (they feed a1.h2), against the unit-masked model."""
    model = tiny_model("llama", task="causal_lm")
    edge = PrunableModel(copy.deepcopy(model), PruningConfig(granularity="edge", ablation="zero")).eval()
    unit = PrunableModel(copy.deepcopy(model), PruningConfig(ablation="zero")).eval()
    assert edge.granularity.graph.num_kv_heads == 2
    masks = {"heads": torch.tensor([[1.0, 0.0, 1.0, 1.0], [1.0, 1.0, 1.0, 0.0]]), "mlps": torch.tensor([1.0, 0.0])}
    circuit = read_mib_circuit(write_mib_circuit(tmp_path / "c.json", mib_config(unit), masks=masks))
    batch = make_batch("llama", batch_size=3)
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    expected = _logits(unit, inputs, circuit.masks())
    assert (expected - _logits(unit, inputs)).abs().max() > 1e-3
    assert (_logits(edge, inputs, circuit.edge_masks(edge.granularity.graph)) - expected).abs().max() <= 2e-5


# ------------------------------------------------------------------ d. an edge file of another model
@pytest.mark.parametrize("layers, heads, parallel", [(3, 4, False), (2, 8, False), (1, 4, False), (2, 4, True)])
def test_an_edge_file_made_for_another_model_is_refused(setup, tmp_path, layers, heads, parallel):
    """3 layers or 8 heads: the file holds every edge name of this 2 x 4 graph (it was read silently before)."""
    other = EdgeGraph(layers, heads, heads, parallel)
    export_mib_circuits(tmp_path, MibConfig(layers, heads, 32, parallel),
                        {"edges": torch.rand(other.num_edges, dtype=torch.float64)}, NAME, graph=other,
                        circuits=False)
    with pytest.raises(MaskShapeError) as info:
        load_unit_scores(tmp_path, setup["edge"].mask_shapes(), setup["graph"])
    message = str(info.value)
    assert f"{layers} layers x {heads} heads" in message and "2 x 4" in message and "another model" in message
    # The names alone, without the cfg check: also refused, naming both kinds of mismatch.
    names = read_mib_circuit(_importances(tmp_path)).edge_scores
    with pytest.raises(ValueError) as info:
        setup["graph"].from_mib_edges(names, "the file")
    assert "do not match this model's graph" in str(info.value) and "made for another model" in str(info.value)


def test_an_edge_file_whose_names_do_not_match_the_graph_is_refused_naming_them(setup, tmp_path):
    document = json.loads(_importances(setup["root"] / "edge").read_text())
    document["edges"]["input->logit"] = document["edges"].pop("input->logits")
    path = tmp_path / "renamed.json"
    path.write_text(json.dumps(document))
    with pytest.raises(MibFormatError) as info:
        load_unit_scores(path, setup["edge"].mask_shapes(), setup["graph"])
    message = str(info.value)
    assert "1 of its edges missing (e.g. ['input->logits'])" in message
    assert "1 not in it (e.g. ['input->logit'])" in message and "Pass the file made for this model" in message


# ------------------------------------------------------------------ the command line
@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    """The tiny GGUF Llama of the CLI tests (2 layers x 4 query heads, 2 key/value heads), its prompts and an edge
    importance file of its graph; every command below is refused before the model's weights load."""
    root = tmp_path_factory.mktemp("edge-errors-cli")
    folder, name = write_tiny_gguf(root / "gguf")
    graph = EdgeGraph(2, 4, 2)
    export_mib_circuits(root / "edge", MibConfig(2, 4, 32), {"edges": torch.rand(graph.num_edges,
                                                                                 dtype=torch.float64)},
                        NAME, graph=graph, circuits=False)
    return {"root": root, "common": ["--model", str(folder), "--gguf_file", name, "--dataset",
                                     str(write_lm_prompts(root / "prompts.jsonl")), "--num_examples", "8"]}


def test_the_command_line_refuses_an_edge_file_at_node_level_and_one_of_another_model(gguf, tmp_path, capsys):
    code = main(["circuit", "faithfulness", *gguf["common"], "--level", "node", "--scores",
                 str(gguf["root"] / "edge"), "--output_dir", str(tmp_path / "node")])
    assert code == 2
    err = capsys.readouterr().err
    assert "scores edges" in err and "--level edge or auto" in err
    other = EdgeGraph(3, 4, 2)
    export_mib_circuits(tmp_path / "other", MibConfig(3, 4, 32),
                        {"edges": torch.rand(other.num_edges, dtype=torch.float64)}, NAME, graph=other,
                        circuits=False)
    code = main(["circuit", "faithfulness", *gguf["common"], "--scores", str(tmp_path / "other"), "--output_dir",
                 str(tmp_path / "curves")])
    assert code == 2
    err = capsys.readouterr().err
    assert "3 layers x 4 heads" in err and "Pass the scores made for this model, or the model they were made" in err
    assert not (tmp_path / "curves").exists() and not (tmp_path / "node").exists()
