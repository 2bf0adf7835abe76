"""`search_effective_size`: grid and climb strategies on a tiny random BERT (2 layers x 4 heads + 2 MLPs = 10 units),
the climb schedule itself on a scripted model, cost accounting, JSON round trip, saved artifacts, bad input."""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest
import torch
import transformers

from hf_heuristic_core import EffectiveSizeError, PrunableModel, effective_size_per_seed, read_artifact
from hf_heuristic_core.search import (ClimbSchedule, EffectiveSizeSearch, LevelClimb, check_groups, check_sparsities,
                                      search_effective_size)
from tiny_models import one_torch_thread, second_token_labels as token_data, tiny_bert_classifier as tiny_bert  # noqa: F401

UNITS = 10
FAST = {"per_device_train_batch_size": 8}


pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def data():
    return {"train": token_data(48, 0), "a": token_data(24, 1), "b": token_data(24, 2)}


def pruned_units(masks: dict) -> int:
    return int(round(sum(float((1 - torch.tensor(m)).sum()) for m in masks.values())))


def test_climb_snapshots_prune_exactly_each_level_and_cost_is_the_run_length(data):
    schedule = ClimbSchedule(ramp_steps=2, settle_steps=1, max_wait_steps=3)
    levels = [0.1, 0.3, 0.5]
    result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"], "b": data["b"]},
                                   {"A": ["a"], "both": ["a", "b"]}, strategy="climb", sparsities=[0.5, 0.1, 0.3],
                                   climb=schedule, pruning_overrides=FAST)
    assert result.sparsities == levels and result.strategy == "climb"
    for level in levels:
        assert pruned_units(result.masks[0][level]) == round(level * UNITS)
    (run,) = result.runs
    assert result.cost_steps == run["steps"] <= schedule.max_steps(len(levels))
    snapshot_steps = [event["step"] for event in run["levels"]]
    assert [event["sparsity"] for event in run["levels"]] == levels
    assert snapshot_steps == sorted(snapshot_steps) and snapshot_steps[-1] == run["steps"]  # stops at the last level
    for event in run["levels"]:   # unreached levels take the final ranking, not an early snapshot
        assert event["masks_from"] == ("snapshot" if event["reached"] else "final")
    assert set(result.pruned_accuracy[0]) == set(levels)
    assert set(result.evaluations[0][0.3]) == {"a", "b"}
    assert {"accuracy", "agreement", "kl"} <= set(result.evaluations[0][0.3]["a"])


def test_grid_runs_every_sparsity_and_seed_and_sums_their_steps(data):
    result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"], "b": data["b"]},
                                   {"A": ["a"], "both": ["a", "b"]}, strategy="grid", sparsities=[0.2, 0.4],
                                   seeds=[0, 1], steps_per_run=3, pruning_overrides=FAST, early_stopping=False)
    assert [(r["seed"], r["sparsity"], r["steps"]) for r in result.runs] == [
        (0, 0.2, 3), (0, 0.4, 3), (1, 0.2, 3), (1, 0.4, 3)]
    assert result.cost_steps == 12
    for seed in (0, 1):
        for level in (0.2, 0.4):
            assert pruned_units(result.masks[seed][level]) == round(level * UNITS)
    # The effective size is the definition applied to the measured table, per seed then averaged.
    for group, cases in result.groups.items():
        expected = effective_size_per_seed(result.full_accuracy, result.pruned_accuracy, cases, margin=0.03)
        assert result.effective_size[group] == pytest.approx(expected["mean"])
        assert result.effective_size_per_seed[group] == expected["per_seed"]
    assert result.group_full_accuracy()["both"] == pytest.approx(
        (result.full_accuracy["a"] + result.full_accuracy["b"]) / 2)


def test_nested_is_one_run_whose_final_ranking_gives_every_level(data):
    result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, strategy="nested",
                                   sparsities=[0.2, 0.5, 0.7], seeds=[0, 1], steps_per_run=4, pruning_overrides=FAST)
    assert [(r["strategy"], r["seed"], r["steps"]) for r in result.runs] == [("nested", 0, 4), ("nested", 1, 4)]
    assert result.cost_steps == 8
    for seed in (0, 1):
        kept = {level: torch.cat([torch.tensor(m).flatten() for m in result.masks[seed][level].values()])
                for level in (0.2, 0.5, 0.7)}
        for level, mask in kept.items():
            assert int((1 - mask).sum()) == round(level * UNITS)
        assert bool((kept[0.7] <= kept[0.5]).all() and (kept[0.5] <= kept[0.2]).all())   # nested subnetworks


def test_levels_that_prune_no_unit_cost_nothing(data):
    result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, strategy="grid",
                                   sparsities=[0.0, 0.04], steps_per_run=3, pruning_overrides=FAST,
                                   early_stopping=False)
    assert result.cost_steps == 0 and result.runs == []
    assert result.converged == {0: {0.0: None, 0.04: None}}   # no run, no verdict
    for level in (0.0, 0.04):
        assert pruned_units(result.masks[0][level]) == 0
        assert result.pruned_accuracy[0][level]["a"] == result.full_accuracy["a"]
    assert result.effective_size["all"] == pytest.approx(1 - 0.04)
    # Early stopping: the sparsest level (all kept at 10 units) is faithful, so 0.0 is never evaluated.
    early = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, strategy="grid",
                                  sparsities=[0.0, 0.04], steps_per_run=3, pruning_overrides=FAST)
    assert early.evaluated == {0: {0.04: ["a"]}} and set(early.masks[0]) == {0.0, 0.04}
    assert early.pruned_accuracy == {0: {0.04: {"a": result.full_accuracy["a"]}}}
    assert early.effective_size == result.effective_size


def test_the_callers_model_is_left_as_it_was(data):
    model = tiny_bert(dropout=0.1).train()
    model.bert.encoder.layer[0].eval()                # a mix of modes must come back as it was
    modes = [m.training for m in model.modules()]
    batch = {"input_ids": torch.tensor([data["a"][0]["input_ids"]])}
    model.eval()
    with torch.no_grad():
        before = model(**batch).logits
    for module, mode in zip(model.modules(), modes):
        module.training = mode
    search_effective_size(model, data["train"], {"a": data["a"]}, sparsities=[0.3],
                          climb=ClimbSchedule(ramp_steps=1, settle_steps=0, max_wait_steps=1), pruning_overrides=FAST)
    assert [m.training for m in model.modules()] == modes
    assert all(p.requires_grad for p in model.parameters())
    assert not model.bert.encoder.layer[0].attention.output.dense._forward_pre_hooks
    model.eval()
    with torch.no_grad():
        assert torch.equal(model(**batch).logits, before)


def test_output_dir_holds_one_artifact_per_level_with_means_of_this_checkpoint(data, tmp_path):
    model = tiny_bert()
    result = search_effective_size(model, data["train"], {"a": data["a"]}, sparsities=[0.2, 0.6],
                                   climb=ClimbSchedule(ramp_steps=1, settle_steps=0, max_wait_steps=2),
                                   pruning_overrides=FAST, output_dir=tmp_path, means_examples=16)
    reference = PrunableModel(model)
    reference.compute_means(data["train"].select(range(16)), show_progress=False)
    for level in (0.2, 0.6):
        artifact = read_artifact(tmp_path / "seed-0" / f"sparsity-{level:g}")
        assert torch.equal(artifact.heads, torch.tensor(result.masks[0][level]["heads"]))
        torch.testing.assert_close(artifact.tensors["means.heads"], reference.get_means()["heads"])
    reference.unwrap()


@pytest.mark.parametrize("keep_dropout", [False, True])
def test_means_are_taken_the_way_the_masks_train(data, monkeypatch, keep_dropout):
    """With keep_dropout the masks train with dropout on, so the MLP means must be taken with it too (as `prune` and
    prune_many do); the search used to take them without it whatever the overrides said."""
    seen = []
    original = PrunableModel.compute_means

    def recording(self, *args, **kwargs):
        seen.append(kwargs.get("keep_dropout", False))
        return original(self, *args, **kwargs)

    monkeypatch.setattr(PrunableModel, "compute_means", recording)
    search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, sparsities=[0.2], strategy="nested",
                          steps_per_run=2, pruning_overrides={**FAST, "keep_dropout": keep_dropout},
                          means_examples=16)
    assert seen == [keep_dropout]


def test_result_round_trips_through_json(data):
    result = search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, sparsities=[0.3],
                                   climb=ClimbSchedule(ramp_steps=1, settle_steps=0, max_wait_steps=1),
                                   pruning_overrides=FAST)
    text = json.dumps(result.to_dict())
    again = EffectiveSizeSearch.from_dict(json.loads(text))
    assert again == result
    rows = result.records(step=40)
    assert rows == [{"step": 40, "seed": 0, "group": "all", "effective_size": result.effective_size["all"],
                     "full_accuracy": result.full_accuracy["a"]}]


# ------------------------------------------------------------------ the climb schedule, on a scripted model
class ScriptedModel:
    """Stands in for a PrunableModel: its expected sparsity follows a script, one value per step."""

    def __init__(self, script):
        self.script, self.step = script, 0

    def expected_sparsity(self):
        return torch.tensor(self.script[min(self.step, len(self.script) - 1)])

    def get_masks(self, binary=True, sparsity=None):
        return {"sparsity": sparsity}


def drive(climb: LevelClimb, model: ScriptedModel, max_steps: int) -> list[float]:
    targets = []
    control = SimpleNamespace(should_training_stop=False)
    for step in range(max_steps):
        targets.append(climb.target(step))
        model.step = step + 1
        climb.on_step_end(None, SimpleNamespace(global_step=step + 1), control, model=model)
        if control.should_training_stop:
            break
    return targets


def test_climb_ramps_then_holds_and_snapshots_after_settling():
    climb = LevelClimb([0.1, 0.2], num_units=10, schedule=ClimbSchedule(ramp_steps=2, settle_steps=2,
                                                                         max_wait_steps=10))
    # expected sparsity: reaches 0.1 (1 unit, within 0.5) at step 3, 0.2 at step 8.
    script = [0.0, 0.0, 0.02, 0.06, 0.09, 0.1, 0.1, 0.12, 0.16, 0.2, 0.2, 0.2, 0.2, 0.2]
    targets = drive(climb, ScriptedModel(script), 40)
    assert climb.done
    first, second = climb.events
    assert (first["reached_at"], first["step"]) == (3, 5)   # held from step 2, reached at 3, settled 2 steps later
    assert second["reached_at"] == 8 and second["step"] == 10 and second["reached"]
    assert targets[:3] == [0.0, 0.05, 0.1]                   # ramp from 0 over 2 steps, then hold
    assert targets[5:8] == [0.1, pytest.approx(0.15), 0.2]  # next ramp starts at the snapshot step
    assert len(targets) == 10                               # training stops after the last snapshot


def test_climb_gives_up_waiting_and_flags_the_level(caplog):
    caplog.set_level("INFO", logger="hf_heuristic_core.search")
    climb = LevelClimb([0.5], num_units=10, schedule=ClimbSchedule(ramp_steps=1, settle_steps=1, max_wait_steps=3))
    drive(climb, ScriptedModel([0.0] * 20), 20)
    (event,) = climb.events
    assert event["step"] == 4 and event["reached"] is False
    assert "had not reached level 0.500" in caplog.text


# ------------------------------------------------------------------ bad input
@pytest.mark.parametrize("levels, message", [
    ([0.1, 1.0], r"outside \[0, 1\)"), ([50], "pass fractions"), ([-0.1], "outside"), ([], "empty"),
    ([0.2, 0.2], "twice"), ("0.1,0.2", "list of fractions"), ([float("nan")], "outside")])
def test_bad_sparsities_are_rejected(levels, message):
    with pytest.raises(EffectiveSizeError, match=message):
        check_sparsities(levels)


@pytest.mark.parametrize("groups, message", [
    ({}, "non-empty mapping"), ({"ID": []}, "empty"), ({"ID": ["c"]}, r"names \['c'\], which are not"),
    ({"ID": "a"}, "wrap a single name"), ({"ID": ["a", "a"]}, "twice")])
def test_bad_groups_are_rejected(groups, message):
    with pytest.raises(EffectiveSizeError, match=message):
        check_groups(groups, ["a", "b"])


def test_search_rejects_bad_input_before_any_work(data):
    model = tiny_bert()
    evals = {"a": data["a"]}
    with pytest.raises(EffectiveSizeError, match="eval_sets is empty"):
        search_effective_size(model, data["train"], {})
    with pytest.raises(EffectiveSizeError, match="strategy"):
        search_effective_size(model, data["train"], evals, strategy="random")
    with pytest.raises(EffectiveSizeError, match="outside"):
        search_effective_size(model, data["train"], evals, sparsities=[0.5, 1.5])
    with pytest.raises(EffectiveSizeError, match="train_dataset is empty"):
        search_effective_size(model, data["train"].select([]), evals)
    with pytest.raises(TypeError, match="plain Transformers model"):
        search_effective_size(PrunableModel(tiny_bert()), data["train"], evals)
    with pytest.raises(EffectiveSizeError, match="no 'labels'"):
        search_effective_size(model, data["train"], {"a": data["a"].remove_columns("labels")}, sparsities=[0.3])
    assert not model.bert.encoder.layer[0].attention.output.dense._forward_pre_hooks   # unwrapped after the error


def test_known_masks_are_rescored_without_pruning_and_reproduce_the_search(data):
    model = tiny_bert()
    found = search_effective_size(model, data["train"], {"a": data["a"]}, strategy="grid", sparsities=[0.2, 0.5],
                                  seeds=[0, 1], steps_per_run=3, pruning_overrides=FAST, early_stopping=False)
    stored = json.loads(json.dumps(found.to_dict()))["masks"]      # string keys, as in a results file
    again = search_effective_size(model, data["train"], {"a": data["a"], "b": data["b"]},
                                  {"A": ["a"], "B": ["b"]}, strategy="grid", masks=stored, early_stopping=False)
    assert again.cost_steps == 0 and again.runs == []
    assert again.seeds == [0, 1] and again.sparsities == [0.2, 0.5]
    for seed in (0, 1):
        for level in (0.2, 0.5):
            assert again.masks[seed][level] == found.masks[seed][level]
            assert again.pruned_accuracy[seed][level]["a"] == found.pruned_accuracy[seed][level]["a"]
    assert again.effective_size["A"] == found.effective_size["all"]
    # The new set "b": the same subnetworks evaluated by hand on a wrapped copy with the same means.
    reference = PrunableModel(tiny_bert())
    reference.compute_means(data["train"], show_progress=False)
    for level in (0.2, 0.5):
        reference.set_masks(heads=torch.tensor(stored["1"][format(level, "g")]["heads"]),
                            mlps=torch.tensor(stored["1"][format(level, "g")]["mlps"]))
        with torch.no_grad():   # one example at a time: no padding involved
            correct = [int(reference(input_ids=torch.tensor([row["input_ids"]])).logits.argmax(-1)) == row["labels"]
                       for row in data["b"]]
        accuracy = sum(correct) / len(correct)
        assert again.pruned_accuracy[1][level]["b"] == pytest.approx(accuracy)
    reference.unwrap()


@pytest.mark.parametrize("masks, message", [
    ({}, "masks must map seed"),
    ({"x": {0.3: {}}}, "not an integer"),
    ({0: {"high": {}}}, "not a number"),
    ({0: {0.3: {}}}, "must map each mask kind to its mask"),
    ({0: {0.3: {"heads": [[1.0]]}}}, r"masks\[0\]\[0.3\] cannot be used on this model: heads mask has shape"),
    ({0: {0.3: {"heads": [[1.0] * 4] * 2}}}, r"No mask for the pruned kind\(s\) \['mlps'\]"),
    ({0: {0.3: {"heads": [[1.0] * 4] * 2, "mlps": [1.0] * 2}},
      1: {0.5: {"heads": [[1.0] * 4] * 2, "mlps": [1.0] * 2}}}, "every seed needs the same levels"),
    ({0: {0.3: {"heads": [[1.0] * 3] * 2, "mlps": [1.0] * 2}}}, r"shape \(2, 3\).*another architecture"),
    ({0: {0.3: {"heads": [[2.0] * 4] * 2, "mlps": [1.0] * 2}}}, r"masks\[0\]\[0.3\].*values must lie in \[0, 1\]"),
])
def test_bad_known_masks_are_rejected(data, masks, message):
    with pytest.raises(EffectiveSizeError, match=message):
        search_effective_size(tiny_bert(), data["train"], {"a": data["a"]}, masks=masks)


def test_descending_climb_prunes_to_the_top_level_first_then_lets_units_back():
    climb = LevelClimb([0.1, 0.3], num_units=10, schedule=ClimbSchedule(ramp_steps=2, settle_steps=1,
                                                                         max_wait_steps=5, first_ramp_steps=3,
                                                                         order="descending"))
    # expected sparsity climbs to 0.3 (3 units), then falls back towards 0.1 (1 unit).
    script = [0.0, 0.1, 0.2, 0.3, 0.3, 0.3, 0.25, 0.14, 0.1, 0.1, 0.1]
    targets = drive(climb, ScriptedModel(script), 40)
    assert [e["sparsity"] for e in climb.events] == [0.3, 0.1]
    assert [(e["reached_at"], e["step"]) for e in climb.events] == [(3, 4), (7, 8)]   # 1.4 <= 1 + 0.5 at step 7
    assert targets[:4] == [0.0, pytest.approx(0.1), pytest.approx(0.2), 0.3]
    assert targets[4:7] == [0.3, pytest.approx(0.2), pytest.approx(0.1)]
    assert climb.max_steps() == (3 + 5 + 1 + 1) + (2 + 5 + 1 + 1)


def test_climb_schedule_rejects_bad_settings():
    with pytest.raises(ValueError, match="ramp_steps"):
        ClimbSchedule(ramp_steps=-1)
    with pytest.raises(ValueError, match="order"):
        ClimbSchedule(order="random")


@pytest.mark.slow
def test_nested_search_on_fine_tuned_minilm_finds_faithful_subnetworks(finetuned_minilm, nli_data):
    """Real weights: the searched subnetworks are far closer to the full model than random ones of the same size."""
    import statistics
    from conftest import MAX_LENGTH
    from hf_heuristic_core import PruningConfig, hans_subsets
    from hf_heuristic_core.evaluation import evaluate_subnetwork

    tokenizer = transformers.AutoTokenizer.from_pretrained(finetuned_minilm)
    collator = transformers.DataCollatorWithPadding(tokenizer)

    def tokenize(split):
        return split.map(lambda b: tokenizer(b["premise"], b["hypothesis"], truncation=True, max_length=MAX_LENGTH),
                         batched=True, remove_columns=[c for c in split.column_names if c != "label"])

    train = tokenize(nli_data["train"].select(range(384))).remove_columns("label")
    evals = {"id": tokenize(nli_data["id_eval"].select(range(128)))}
    evals.update({name: tokenize(cases) for name, cases in hans_subsets(nli_data["ood_eval"]).items()})
    groups = {"ID": ["id"], "OOD": [n for n in evals if n != "id"]}
    result = search_effective_size(str(finetuned_minilm), train, evals, groups, strategy="nested",
                                   sparsities=[0.1, 0.5], steps_per_run=100, collate_fn=collator,
                                   means_examples=128, eval_batch_size=64, early_stopping=False)
    assert result.cost_steps == 100
    assert result.full_accuracy["id"] > 0.9
    assert result.evaluations[0][0.1]["id"]["agreement"] > 0.95
    assert result.effective_size["ID"] <= 0.9          # at least the 10% subnetwork is faithful on ID

    model = transformers.AutoModelForSequenceClassification.from_pretrained(finetuned_minilm)
    prunable = PrunableModel(model, PruningConfig())
    prunable.compute_means(train.select(range(128)), collate_fn=collator, show_progress=False)
    units, heads = prunable.num_units(), prunable.num_layers * prunable.num_heads
    generator = torch.Generator().manual_seed(0)
    random_kl = []
    for _ in range(3):
        flat = torch.ones(units)
        flat[torch.randperm(units, generator=generator)[: round(0.5 * units)]] = 0
        masks = {"heads": flat[:heads].view(prunable.num_layers, prunable.num_heads), "mlps": flat[heads:]}
        random_kl.append(evaluate_subnetwork(prunable, {"id": evals["id"]}, masks, collate_fn=collator,
                                             batch_size=64)["id"]["kl"])
    assert result.evaluations[0][0.5]["id"]["kl"] < 0.5 * statistics.median(random_kl)
