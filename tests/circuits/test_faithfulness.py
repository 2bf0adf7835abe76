"""Faithfulness curves: CPR / CMD on hand-made curves (MIB's trapezoid rule, `evaluate_area_under_curve` in
`MIB_circuit_track/evaluation.py`: linear x in fractions, area under f and under |1 - f|), and m(C) of every size
against an independent reference: the plain model with the ablated units' weights zeroed."""

from __future__ import annotations

import copy

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.faithfulness import area_under_curves, faithfulness_curve, faithfulness_curves
from hf_heuristic_core.circuits.metrics import logit_difference
from hf_heuristic_core.circuits.ranking import MIB_CURVE_SIZES, circuit_size, top_units
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401  (one_torch_thread: fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def test_areas_of_a_hand_made_curve():
    f = [0.0, 0.0, 0.1, 0.2, 0.2, 0.4, 0.5, 0.8, 0.9, 1.0]
    cpr, cmd = area_under_curves(MIB_CURVE_SIZES, f)
    # By hand: .003*.1/2 + .005*.3/2 + .01*.4/2 + .03*.6/2 + .05*.9/2 + .1*1.3/2 + .3*1.7/2 + .5*1.9/2
    assert cpr == pytest.approx(0.00015 + 0.00075 + 0.002 + 0.009 + 0.0225 + 0.065 + 0.255 + 0.475, abs=1e-12)
    assert cpr == pytest.approx(0.8294, abs=1e-12)
    assert cmd == pytest.approx(0.999 - 0.8294, abs=1e-12)    # f <= 1 everywhere: CMD = width - CPR
    perfect = area_under_curves(MIB_CURVE_SIZES, [1.0] * 10)
    assert perfect == pytest.approx((0.999, 0.0))


def test_cmd_takes_the_distance_from_one_on_both_sides():
    assert area_under_curves([0.5, 1.0], [1.5, 1.0]) == pytest.approx((0.625, 0.125))   # .5*2.5/2, .5*.5/2
    assert area_under_curves([0.2, 0.5], [-0.2, 0.6]) == pytest.approx((0.06, 0.24))    # .3*.4/2, .3*1.6/2
    cpr_log, _ = area_under_curves([0.1, 1.0], [0.0, 1.0], log_scale=True)
    assert cpr_log == pytest.approx(torch.log(torch.tensor(10.0)).item() / 2)
    with pytest.raises(ValueError, match="increase"):
        area_under_curves([0.5, 0.2], [0, 1])
    with pytest.raises(ValueError, match="two points"):
        area_under_curves([0.5], [1.0])


def _ioi_like_batch(batch_size: int = 6):
    batch = make_batch("gpt2", batch_size=batch_size, seq_len=7)
    batch["answer_id"] = torch.arange(batch_size) + 3
    batch["foil_id"] = torch.arange(batch_size) + 20
    return batch


def _zeroed_reference(model, masks):
    """The plain GPT-2 with every ablated head's rows of attn.c_proj (Conv1D: [in, out]) and every ablated MLP's
    c_proj weight and bias set to zero: zero ablation written without the package."""
    reference = copy.deepcopy(model)
    head_dim = reference.config.n_embd // reference.config.n_head
    with torch.no_grad():
        for layer, block in enumerate(reference.transformer.h):
            for head in range(reference.config.n_head):
                if masks["heads"][layer, head] == 0:
                    block.attn.c_proj.weight[head * head_dim:(head + 1) * head_dim, :] = 0
            if masks["mlps"][layer] == 0:
                block.mlp.c_proj.weight.zero_()
                block.mlp.c_proj.bias.zero_()
    return reference


def test_curve_matches_the_zeroed_weights_reference_at_every_size():
    model = tiny_model("gpt2", task="causal_lm")
    prunable = PrunableModel(copy.deepcopy(model), PruningConfig(ablation="zero")).eval()
    batch = _ioi_like_batch()
    fields = {k: batch[k] for k in ("answer_id", "foil_id", "attention_mask")}
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    scores = {"heads": torch.tensor([[0.3, -0.2, 0.9, 0.1], [0.5, 0.05, -0.7, 0.4]]), "mlps": torch.tensor([1.2, 0.2])}
    curve = faithfulness_curve(prunable, [batch], scores, name="hand")

    def reference_metric(masks):
        with torch.no_grad():
            return float(logit_difference(_zeroed_reference(model, masks)(**inputs).logits, fields).mean())

    ones = {"heads": torch.ones(2, 4), "mlps": torch.ones(2)}
    zeros = {"heads": torch.zeros(2, 4), "mlps": torch.zeros(2)}
    assert curve.m_full == pytest.approx(reference_metric(ones), abs=1e-5)
    assert curve.m_empty == pytest.approx(reference_metric(zeros), abs=1e-5)
    assert curve.units == [circuit_size(p, 10) for p in MIB_CURVE_SIZES] == [0, 0, 0, 0, 0, 0, 1, 2, 5, 10]
    for fraction, count, value in zip(curve.sizes, curve.units, curve.metric_values):
        assert value == pytest.approx(reference_metric(top_units(scores, count)), abs=1e-5), fraction
    expected = [(v - curve.m_empty) / (curve.m_full - curve.m_empty) for v in curve.metric_values]
    assert curve.faithfulness == pytest.approx(expected)
    assert curve.faithfulness[-1] == pytest.approx(1.0, abs=1e-9)       # the whole model is the full model
    assert curve.faithfulness[0] == pytest.approx(0.0, abs=1e-9)        # 0 units: the empty circuit
    assert (curve.cpr, curve.cmd_signed_ranking) == pytest.approx(area_under_curves(MIB_CURVE_SIZES,
                                                                                    curve.faithfulness))
    assert curve.n_scored == 10 and curve.examples == 6 and curve.ablation == "zero"


def test_unscored_units_stay_in_every_circuit_and_are_not_counted():
    model = tiny_model("gpt2", task="causal_lm")
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    batch = _ioi_like_batch()
    scores = {"heads": torch.arange(8.0).view(2, 4), "mlps": torch.tensor([float("nan"), float("nan")])}
    curve = faithfulness_curve(prunable, [batch], scores)
    assert curve.n_scored == 8 and curve.units == [0, 0, 0, 0, 0, 0, 0, 1, 4, 8]
    with prunable.masks_applied({"heads": torch.zeros(2, 4), "mlps": torch.ones(2)}):
        only_mlps = float(logit_difference(prunable(**{k: batch[k] for k in ("input_ids", "attention_mask")}).logits,
                                           batch).mean())
    assert curve.metric_values[0] == pytest.approx(only_mlps, abs=1e-6)   # 0 heads, both MLPs kept


@pytest.mark.parametrize("ablation", ["mean", "resample"])
def test_curves_under_mean_and_resample_ablation(ablation):
    model = tiny_model("gpt2", task="causal_lm")
    prunable = PrunableModel(model, PruningConfig(ablation=ablation)).eval()
    batch = _ioi_like_batch()
    if ablation == "mean":
        prunable.compute_means({k: batch[k] for k in ("input_ids", "attention_mask")}, show_progress=False)
    rankings = {"a": {"heads": torch.randn(2, 4), "mlps": torch.randn(2)},
                "b": {"heads": torch.randn(2, 4), "mlps": torch.randn(2)}}
    curves = faithfulness_curves(prunable, [batch], rankings)
    assert curves["a"].m_full == curves["b"].m_full and curves["a"].m_empty == curves["b"].m_empty
    for curve in curves.values():
        assert curve.ablation == ablation
        assert curve.faithfulness[-1] == pytest.approx(1.0, abs=1e-9)
        assert curve.faithfulness[0] == pytest.approx(0.0, abs=1e-9)


def test_a_metric_that_ablation_cannot_move_is_flagged(caplog):
    prunable = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="zero")).eval()
    batch = _ioi_like_batch()
    batch["foil_id"] = batch["answer_id"].clone()          # m = 0 whatever the circuit
    curve = faithfulness_curve(prunable, [batch], {"heads": torch.rand(2, 4), "mlps": torch.rand(2)})
    assert curve.warnings and "means nothing" in curve.warnings[0]
    assert all(f != f for f in curve.faithfulness)          # NaN, not a number that looks meaningful
    assert "means nothing" in caplog.text


def test_classifier_metric_and_errors():
    logits = torch.tensor([[2.0, 0.5, -1.0], [0.0, 3.0, 1.0]])
    assert logit_difference(logits, {"labels": torch.tensor([0, 2])}).tolist() == [1.5, -2.0]
    with pytest.raises(Exception, match="needs 'labels'"):
        logit_difference(logits, {})
    with pytest.raises(Exception, match="needs 'foil_id'"):
        logit_difference(torch.zeros(1, 2, 5), {"answer_id": torch.tensor([1])})
    # Last real token with left and right padding.
    lm = torch.zeros(2, 3, 4)
    lm[0, 1, 2] = 5.0   # row 0: right-padded, last real token at 1
    lm[1, 2, 2] = 7.0   # row 1: left-padded, last real token at 2
    fields = {"answer_id": torch.tensor([2, 2]), "foil_id": torch.tensor([0, 0]),
              "attention_mask": torch.tensor([[1, 1, 0], [0, 1, 1]])}
    assert logit_difference(lm, fields).tolist() == [5.0, 7.0]
    prunable = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="zero")).eval()
    with pytest.raises(Exception, match=r"shape \(3,\), this model needs \[2, 4\]"):
        faithfulness_curve(prunable, [_ioi_like_batch()], {"heads": torch.rand(3), "mlps": torch.rand(2)})


def _mib_run(metric_of, scores, n_units, absolute):
    """MIB's `evaluate_area_under_curve` restated (one ranking, `absolute` as run_evaluation.py's --absolute): the
    top int(p * n) units by score or |score|, f, and both areas of that one curve."""
    flat = torch.cat([torch.cat([scores["heads"], scores["mlps"].unsqueeze(1)], dim=1).flatten()])
    key = flat.abs() if absolute else flat
    m_full = metric_of(torch.ones(n_units))
    m_empty = metric_of(torch.zeros(n_units))
    f = []
    for pct in (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1):
        keep = torch.zeros(n_units)
        keep[torch.argsort(key, descending=True)[:int(pct * n_units)]] = 1
        f.append((metric_of(keep) - m_empty) / (m_full - m_empty))
    xs = (.001, .002, .005, .01, .02, .05, .1, .2, .5, 1)
    under = sum((xs[i + 1] - xs[i]) * (f[i] + f[i + 1]) / 2 for i in range(9))
    from_1 = sum((xs[i + 1] - xs[i]) * (abs(1 - f[i]) + abs(1 - f[i + 1])) / 2 for i in range(9))
    return {"area_under": under, "area_from_1": from_1, "faithfulnesses": f}


def test_cpr_and_cmd_are_mibs_signed_and_absolute_rankings():
    """MIB's print_results.py reports CPR from the `abs-False` run and CMD from the `abs-True` run. One curve's area
    from 1 (what this package reported as CMD before) differs wherever the signs disagree with the magnitudes."""
    model = tiny_model("gpt2", task="causal_lm")
    prunable = PrunableModel(copy.deepcopy(model), PruningConfig(ablation="zero")).eval()
    batch = _ioi_like_batch()
    fields = {k: batch[k] for k in ("answer_id", "foil_id", "attention_mask")}
    inputs = {k: batch[k] for k in ("input_ids", "attention_mask")}
    # Distinct magnitudes (no ties), large negative scores: the two rankings disagree at every size.
    scores = {"heads": torch.tensor([[0.3, -2.0, 0.9, 0.1], [0.5, 0.05, -1.7, 0.4]]), "mlps": torch.tensor([1.2, -0.8])}

    def metric_of(keep):
        grid = keep.view(2, 5)
        masks = {"heads": grid[:, :4], "mlps": grid[:, 4]}
        with torch.no_grad():
            return float(logit_difference(_zeroed_reference(model, masks)(**inputs).logits, fields).mean())

    signed = _mib_run(metric_of, scores, 10, absolute=False)
    absolute = _mib_run(metric_of, scores, 10, absolute=True)
    curve = faithfulness_curve(prunable, [batch], scores, name="mixed signs")
    assert curve.faithfulness == pytest.approx(signed["faithfulnesses"], abs=1e-5)
    assert curve.faithfulness_absolute == pytest.approx(absolute["faithfulnesses"], abs=1e-5)
    assert curve.cpr == pytest.approx(signed["area_under"], abs=1e-6)          # print_results: abs-False
    assert curve.cmd == pytest.approx(absolute["area_from_1"], abs=1e-6)       # print_results: abs-True
    assert curve.cmd_signed_ranking == pytest.approx(signed["area_from_1"], abs=1e-6)
    assert curve.cpr_absolute_ranking == pytest.approx(absolute["area_under"], abs=1e-6)
    assert abs(curve.cmd - curve.cmd_signed_ranking) > 1e-3                    # the old single-curve CMD differs
    assert curve.mib_cmd and curve.to_dict()["mib_cmd"] is True
    # Scores of one sign rank alike both ways: one curve, evaluated once.
    positive = {kind: value.abs() for kind, value in scores.items()}
    same = faithfulness_curve(prunable, [batch], positive)
    assert same.faithfulness == same.faithfulness_absolute and same.cmd == same.cmd_signed_ranking


def test_absolute_is_refused_with_the_reason():
    from hf_heuristic_core.circuits.faithfulness import CurveSettings
    from hf_heuristic_core.errors import PruningError
    with pytest.raises(PruningError, match="draw both rankings"):
        CurveSettings(absolute=True)
    prunable = PrunableModel(tiny_model("gpt2", task="causal_lm"), PruningConfig(ablation="zero")).eval()
    with pytest.raises(PruningError, match="Drop `absolute`"):
        faithfulness_curves(prunable, [_ioi_like_batch()], {"a": {"heads": torch.rand(2, 4), "mlps": torch.rand(2)}},
                            absolute=False)
