"""Edge circuits (#37) in MIB's edge format: MIB's edge names read and written (GQA groups ungrouped and regrouped),
an edge mask artifact exported as two leaderboard folders, read back and scored by the same faithfulness curves, and
edge attribution patching (EAP) through the edge masks, against a finite difference."""

from __future__ import annotations

import copy
import json

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.attribution import attribution_scores
from hf_heuristic_core.circuits.batches import metric_batches, metric_mean
from hf_heuristic_core.circuits.export import export_mib_circuits
from hf_heuristic_core.circuits.faithfulness import faithfulness_curve
from hf_heuristic_core.circuits.metrics import logit_difference
from hf_heuristic_core.circuits.mib import MibConfig, edge_names, mib_config, read_mib_circuit
from hf_heuristic_core.circuits.ranking import MIB_SUBMISSION_SIZES
from hf_heuristic_core.circuits.sources import importance_from_logits
from hf_heuristic_core.cli import main
from hf_heuristic_core.cli.circuit import circuit_command
from hf_heuristic_core.errors import UsageError
from hf_heuristic_core.granularity.edge.graph import EdgeGraph
from tiny_gguf import write_lm_prompts, write_tiny_gguf
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401  (one_torch_thread: fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_mib_names_round_trip_and_grouped_files_must_agree_within_a_group():
    graph = EdgeGraph(2, 4, 2)                       # two query heads per key/value head
    values = torch.arange(graph.num_edges, dtype=torch.float64)
    mib = graph.mib_edge_scores(values)
    assert set(mib) == set(edge_names(MibConfig(2, 4, 32)))
    assert mib["input->a1.h2<k>"] == mib["input->a1.h3<k>"]          # one group, one key input
    assert torch.equal(graph.from_mib_edges(mib), values)
    mib["input->a1.h3<k>"] += 1.0
    with pytest.raises(ValueError, match="share one key/value head"):
        graph.from_mib_edges(mib)
    assert EdgeGraph.matching(2, 4, graph.num_edges) == graph
    assert EdgeGraph(12, 12, 12).num_edges == 32491                 # GPT-2 small, as MIB counts it
    assert EdgeGraph.matching(2, 4, EdgeGraph(2, 4, 4, True).num_edges).parallel is True


@pytest.fixture(scope="module")
def edge_artifact(tmp_path_factory):
    """A tiny GGUF Llama (2 layers x 4 query heads, 2 key/value heads) with its tokenizer, LM prompts, and an edge
    mask artifact of it with random logits."""
    root = tmp_path_factory.mktemp("edge-circuits")
    folder, name = write_tiny_gguf(root / "gguf")
    prompts = write_lm_prompts(root / "prompts.jsonl")
    prunable = PrunableModel.from_pretrained(str(folder), PruningConfig(granularity="edge", ablation="zero"),
                                             gguf_file=name)
    with torch.no_grad():
        prunable.mask_logits.edges.copy_(torch.randn(prunable.mask_shapes()["edges"],
                                                     generator=torch.Generator().manual_seed(0)) * 3)
    prunable.save_pretrained(root / "artifact")
    return {"folder": folder, "gguf_file": name, "prompts": prompts, "artifact": root / "artifact",
            "logits": prunable.mask_logits.edges.detach().clone(), "graph": prunable.granularity.graph}


def test_an_edge_artifact_exports_as_two_leaderboard_folders(edge_artifact, tmp_path, capsys):
    out = tmp_path / "mib"
    assert main(["circuit", "export", "--scores", str(edge_artifact["artifact"]), "--name", "ioi_tiny",
                 "--output_dir", str(out)]) == 0
    assert "scored edges" in capsys.readouterr().out
    graph = edge_artifact["graph"]
    mib_names = edge_names(MibConfig(2, 4, 32))
    importances = read_mib_circuit(out / "importances" / "ioi_tiny" / "importances.json")
    assert importances.scores is None and set(importances.edge_scores) == set(mib_names)
    expected = importance_from_logits(edge_artifact["logits"])
    assert torch.allclose(graph.from_mib_edges(importances.edge_scores), expected)
    files = sorted((out / "circuits" / "ioi_tiny").iterdir())
    assert len(files) == 9
    record = json.loads((out / "export.json").read_text())
    assert record["level"] == "edge" and record["grouped_query"] is True
    previous = set()
    for fraction in MIB_SUBMISSION_SIZES:
        circuit = read_mib_circuit(out / "circuits" / "ioi_tiny" / f"circuit_{fraction * 100:g}.json")
        kept = {name for name, member in circuit.edge_in_graph.items() if member}
        assert len(kept) <= fraction * len(mib_names)                  # within MIB's edge budget
        assert previous <= kept                                        # sizes nest: a prefix of one ranking
        previous = kept
        # A node is in the graph exactly when a kept edge touches it.
        touched = {part.split("<")[0] for name in kept for part in name.split("->")} | {"input", "logits"}
        nodes = json.loads((out / "circuits" / "ioi_tiny" / f"circuit_{fraction * 100:g}.json").read_text())["nodes"]
        assert {n for n, entry in nodes.items() if entry["in_graph"]} == touched
    # The 50% circuit is the top of the ranking: every kept edge scores at least every left-out one.
    half = graph.from_mib_edges({n: float(m) for n, m in circuit.edge_in_graph.items()})
    assert float(expected[half == 1].min()) >= float(expected[half == 0].max())


def test_edge_rankings_get_faithfulness_curves_from_the_command_line(edge_artifact, tmp_path):
    mib = tmp_path / "mib"
    assert main(["circuit", "export", "--scores", str(edge_artifact["artifact"]), "--name", "ioi_tiny",
                 "--output_dir", str(mib), "--write", "importances"]) == 0
    curves = tmp_path / "curves"
    common = ["--model", str(edge_artifact["folder"]), "--gguf_file", edge_artifact["gguf_file"], "--dataset",
              str(edge_artifact["prompts"]), "--num_examples", "8", "--batch_size", "8", "--ablation", "zero"]
    assert main(["circuit", "faithfulness", *common, "--scores", f"{edge_artifact['artifact']},{mib}",
                 "--random_seeds", "0", "--output_dir", str(curves)]) == 0
    document = json.loads((curves / "curves.json").read_text())
    assert document["description"]["level"] == "edge" and document["n_units"] == edge_artifact["graph"].num_edges
    artifact, exported = document["curves"]["artifact"], document["curves"]["mib"]
    assert artifact["faithfulness"] == pytest.approx(exported["faithfulness"])      # the file ranks as the masks
    assert artifact["faithfulness"][-1] == pytest.approx(1.0) and artifact["units"][-1] == 82
    # A node ranking beside an edge ranking is refused, naming both.
    node_file = tmp_path / "nodes"
    export_mib_circuits(node_file, MibConfig(2, 4, 32), {"heads": torch.rand(2, 4), "mlps": torch.rand(2)},
                        "ioi_tiny", circuits=False)
    with pytest.raises(UsageError, match="mix edge rankings"):
        circuit_command(["faithfulness", *common, "--scores", f"{mib},{node_file}", "--output_dir",
                         str(tmp_path / "mixed")])


def test_edge_attribution_patching_is_the_first_order_change_of_the_metric():
    """At z = 1 the gradient of m in an edge's mask is EAP's edge score: m(z_e = 1 - eps) ~ m(1) - eps * score."""
    model = tiny_model("gpt2", task="causal_lm")
    prunable = PrunableModel(copy.deepcopy(model), PruningConfig(granularity="edge", ablation="zero")).eval()
    batch = make_batch("gpt2", batch_size=4)
    batch["answer_id"] = torch.arange(4) + 3
    batch["foil_id"] = torch.arange(4) + 20
    result = attribution_scores(prunable, [batch], method="patching")
    scores = result.scores["edges"]
    assert scores.shape == (110,) and int((scores != 0).sum()) > 100
    curve = faithfulness_curve(prunable, [batch], {"edges": scores.abs()})
    full = curve.m_full
    names = prunable.granularity.graph.edge_names()
    batches = metric_batches(prunable, [batch], 4, None)
    for edge in ("a0.h1->a1.h2<v>", "m0->logits", "input->m1"):
        z = torch.ones(110, dtype=torch.float64)
        eps = 1e-3
        z[names.index(edge)] = 1 - eps
        with prunable.masks_applied({"edges": z.float()}):
            moved = metric_mean(prunable, batches, logit_difference)
        estimate = (full - moved) / eps          # the score is dm/dz: m(1) - m(1 - eps) ~ eps * score
        assert estimate == pytest.approx(float(scores[names.index(edge)]), rel=0.05, abs=1e-4)
    assert mib_config(prunable) == MibConfig(2, 4, 32, False)


def test_prune_learns_edge_masks_from_the_command_line_and_slim_export_refuses_them(edge_artifact, tmp_path, capsys):
    output = tmp_path / "run"
    code = main(["prune", "--model", str(edge_artifact["folder"]), "--gguf_file", edge_artifact["gguf_file"],
                 "--dataset", str(edge_artifact["prompts"]), "--granularity", "edge", "--ablation", "zero",
                 "--target_sparsity", "0.5", "--output_dir", str(output), "--max_steps", "2",
                 "--per_device_train_batch_size", "4", "--report_to", "none", "--use_cpu", "--disable_tqdm", "true",
                 "--save_strategy", "no", "--convergence_check", "false"])
    assert code == 0, capsys.readouterr().err
    config = json.loads((output / "pruning_config.json").read_text())
    assert config["granularity"] == "edge" and config["mask_shapes"] == {"edges": [82]}
    capsys.readouterr()
    code = main(["export", "--model", str(edge_artifact["folder"]), "--gguf_file", edge_artifact["gguf_file"],
                 "--masks", str(output), "--output_dir", str(tmp_path / "slim")])
    assert code == 2
    assert "holds 'edge' masks (edges between heads and MLP blocks" in capsys.readouterr().err
    assert not (tmp_path / "slim").exists()
