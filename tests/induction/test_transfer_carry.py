"""The two transplant variants (`carry`) against independent references built here by hand.

`carry="source"` is the authors' transplant (Zhang et al.'s code: the model starts as the source, only the masked
weights' entries outside the subnetwork are re-initialised): every tensor the masks do not cover must equal the
source bit for bit and train; masked tensors must be the source on the (random) subnetwork and the seeded fresh
initialization `torch.manual_seed(seed); GPT2LMHeadModel(config)` elsewhere. `carry="subnetwork"` (the default) must
stay what it was: everything but the subnetwork fresh. The reference values come from the source's and a hand-built
fresh model's `named_parameters()`, never from the code under test.
"""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import one_torch_thread  # noqa: F401  (fixture)
from transformers import GPT2Config, GPT2LMHeadModel

from hf_heuristic_core.errors import UsageError
from hf_heuristic_core.induction import (
    build_arm,
    frozen_gates,
    load_transplanted,
    transfer_subnetwork,
)
from hf_heuristic_core.induction.arguments import InductionArguments
from hf_heuristic_core.induction.arithmetic import arithmetic_model
from hf_heuristic_core.induction.runner import _read_record, run_induction

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SEED = 3
MASKED = ("transformer.h.0.attn.c_attn.weight", "transformer.h.0.attn.c_proj.weight", "transformer.h.0.mlp.c_fc.weight",
          "transformer.h.0.mlp.c_proj.weight", "transformer.h.1.attn.c_attn.weight", "transformer.h.1.mlp.c_fc.weight")
EMPTY = "transformer.h.1.attn.c_proj.weight"   # covered by a mask that keeps nothing: must stay fresh


@pytest.fixture(scope="module")
def source():
    """A tiny GPT-2 (tied head, dropout 0.1 as the authors') whose every parameter, LayerNorms and biases included,
    is moved off its initial value, so "from the source" and "fresh" differ in every entry."""
    config = GPT2Config(vocab_size=13, n_positions=4, n_embd=16, n_layer=2, n_head=2, n_inner=32,
                        bos_token_id=None, eos_token_id=None)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.5 + 0.25)
    return model.eval()


@pytest.fixture(scope="module")
def masks(source):
    generator = torch.Generator().manual_seed(7)
    params = dict(source.named_parameters())
    out = {name: (torch.rand(params[name].shape, generator=generator) < 0.3).float() for name in MASKED}
    out[EMPTY] = torch.zeros(params[EMPTY].shape)
    return out


def _fresh(source, seed=SEED):
    torch.manual_seed(seed)
    return dict(GPT2LMHeadModel(source.config).named_parameters())


def _effective(model, name):
    module_name, _, attribute = name.rpartition(".")
    return getattr(model.get_submodule(module_name), attribute).detach()


def _expect(source, gates, carry):
    """Per plain parameter name: the expected effective value under `gates` (True = from the source)."""
    src, fresh = dict(source.named_parameters()), _fresh(source)
    expected = {}
    for name, value in src.items():
        if name in gates:
            expected[name] = torch.where(gates[name].bool(), value.detach(), fresh[name].detach())
        else:
            expected[name] = value.detach() if carry == "source" else fresh[name].detach()
    return expected


def _check(model, source, gates, carry):
    for name, value in _expect(source, gates, carry).items():
        assert torch.equal(_effective(model, name), value), name
    if carry == "source":   # the head is tied, so it is the source's too
        assert torch.equal(model.lm_head.weight, source.transformer.wte.weight)


def _plain_trainable(model, name):
    module_name, _, attribute = name.rpartition(".")
    module = model.get_submodule(module_name)
    parameter = module._parameters.get(attribute)
    return parameter is not None and parameter.requires_grad


def test_source_carry_is_the_authors_transplant(source, masks):
    model = transfer_subnetwork(source, masks, SEED, carry="source")
    _check(model, source, masks, "source")
    src, fresh = dict(source.named_parameters()), _fresh(source)
    for name in MASKED:   # outside the subnetwork: fresh, i.e. unlike the source in every entry
        outside = ~masks[name].bool()
        assert not torch.isclose(_effective(model, name)[outside], src[name].detach()[outside]).any(), name
    assert torch.equal(_effective(model, EMPTY), fresh[EMPTY].detach())
    carried = [n for n in src if n not in masks]
    assert {"transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.weight", "transformer.h.0.ln_1.bias",
            "transformer.h.0.attn.c_attn.bias", "transformer.h.1.mlp.c_proj.bias"} <= set(carried)
    for name in carried:   # plain, trainable parameters, not parametrized, not frozen
        assert _plain_trainable(model, name), name
    record = model.subtask_induction
    assert record["carry"] == "source"
    assert record["carried_entries"] == sum(src[n].numel() for n in carried)
    assert record["kept_entries"] == int(sum(m.sum() for m in masks.values()))


def test_carried_parameters_train_and_frozen_entries_do_not(source, masks):
    model = transfer_subnetwork(source, masks, SEED, carry="source").train()
    before = {n: _effective(model, n).clone() for n, _ in source.named_parameters()}
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-2, weight_decay=0.1)
    ids = torch.tensor([[1, 2, 12, 3], [4, 5, 12, 6]])
    model(input_ids=ids, labels=ids).loss.backward()
    optimizer.step()
    for name in ("transformer.wte.weight", "transformer.wpe.weight", "transformer.ln_f.bias",
                 "transformer.h.0.attn.c_attn.bias"):
        assert not torch.equal(_effective(model, name), before[name]), f"{name} did not train"
    for name in MASKED:
        kept = masks[name].bool()
        now = _effective(model, name)
        assert torch.equal(now[kept], dict(source.named_parameters())[name].detach()[kept]), name
        assert not torch.equal(now[~kept], before[name][~kept]), f"{name}: the fresh entries did not train"


def test_random_arm_carries_the_same_with_its_own_mask(source, masks):
    model = build_arm(source, masks, "random", SEED, carry="source")
    gates = frozen_gates(model)
    assert set(gates) == {n for n in MASKED}   # the empty mask's random draw keeps nothing too
    for name in MASKED:
        assert int(gates[name].sum()) == int(masks[name].sum()), name         # same size per tensor
        assert not torch.equal(gates[name], masks[name].bool()), name         # another draw
    _check(model, source, {**gates, EMPTY: torch.zeros_like(masks[EMPTY], dtype=torch.bool)}, "source")
    assert model.subtask_induction["carry"] == "source"


def test_subnetwork_carry_is_unchanged_and_the_default(source, masks):
    default = transfer_subnetwork(source, masks, SEED)
    named = transfer_subnetwork(source, masks, SEED, carry="subnetwork")
    for model in (default, named):
        _check(model, source, masks, "subnetwork")
        assert model.subtask_induction["carry"] == "subnetwork" and model.subtask_induction["carried_entries"] == 0
    random_arm = build_arm(source, masks, "random", SEED)
    _check(random_arm, source, {**frozen_gates(random_arm), EMPTY: torch.zeros(masks[EMPTY].shape, dtype=torch.bool)},
           "subnetwork")


def test_full_and_scratch_record_no_carry(source):
    for arm in ("full", "scratch"):
        assert build_arm(source, None, arm, SEED, carry="source").subtask_induction["carry"] is None


def test_unit_masks_cover_every_tensor_their_kinds_own(source):
    """Heads: layer 0 keeps head 1, layer 1 keeps none. Layer 1's attention tensors are covered (fresh), the
    output-projection bias belongs to no head (carried), the MLPs are not covered by a heads mask (carried)."""
    heads = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    model = transfer_subnetwork(source, {"heads": heads}, SEED, carry="source")
    src, fresh = dict(source.named_parameters()), _fresh(source)
    for name in ("transformer.h.1.attn.c_attn.weight", "transformer.h.1.attn.c_attn.bias",
                 "transformer.h.1.attn.c_proj.weight"):
        assert torch.equal(_effective(model, name), fresh[name].detach()), name
    for name in ("transformer.h.1.attn.c_proj.bias", "transformer.h.0.attn.c_proj.bias", "transformer.h.1.mlp.c_fc.weight",
                 "transformer.h.0.ln_2.weight", "transformer.wte.weight"):
        assert torch.equal(_effective(model, name), src[name].detach()), name
    # Layer 0, head 1 (dims 8..15): its query/key/value columns of the fused c_attn ([in, 3 * 16]) from the source.
    c_attn = _effective(model, "transformer.h.0.attn.c_attn.weight")
    for block in range(3):
        kept = slice(16 * block + 8, 16 * block + 16)
        dropped = slice(16 * block, 16 * block + 8)
        assert torch.equal(c_attn[:, kept], src["transformer.h.0.attn.c_attn.weight"].detach()[:, kept])
        assert torch.equal(c_attn[:, dropped], fresh["transformer.h.0.attn.c_attn.weight"].detach()[:, dropped])


def test_saved_model_keeps_the_variant(source, masks, tmp_path):
    model = transfer_subnetwork(source, masks, SEED, carry="source")
    model.save_pretrained(tmp_path / "m")
    record = json.loads((tmp_path / "m" / "subtask_induction.json").read_text())
    assert record["carry"] == "source"
    assert "carry='source'" in (tmp_path / "m" / "README.md").read_text()
    reloaded = load_transplanted(tmp_path / "m")
    for name, _ in source.named_parameters():
        assert torch.equal(_effective(reloaded, name), _effective(model, name)), name
    assert set(frozen_gates(reloaded)) == set(MASKED)


@pytest.mark.parametrize("call", ["transfer", "arm"])
def test_unknown_carry_is_refused(source, masks, call):
    with pytest.raises(UsageError, match=r"carry='everything'.*'subnetwork'.*'source'"):
        if call == "transfer":
            transfer_subnetwork(source, masks, SEED, carry="everything")
        else:
            build_arm(source, masks, "random", SEED, carry="everything")


def test_runner_refuses_an_unknown_carry_before_training(tmp_path):
    args = InductionArguments(output_dir=str(tmp_path), source=str(tmp_path / "none"), masks="m.safetensors",
                              carry="everything")
    with pytest.raises(UsageError, match=r"--carry 'everything': choose one of subnetwork, source"):
        run_induction(args)
    assert not any(tmp_path.iterdir())


def test_resume_with_another_carry_is_refused(tmp_path):
    """A record made with one transplant is not reused for the other; a record from before `carry` existed was made
    with the only transplant there was ('subnetwork')."""
    subnetwork = InductionArguments(output_dir=str(tmp_path), arithmetic=True)
    source = InductionArguments(output_dir=str(tmp_path), arithmetic=True, carry="source")
    path = tmp_path / "record.json"
    path.write_text(json.dumps({"test_accuracy": 0.5, "settings": subnetwork.run_settings()}))
    assert _read_record(path, subnetwork.run_settings())["test_accuracy"] == 0.5
    with pytest.raises(UsageError, match=r"'carry': \('subnetwork', 'source'\)"):
        _read_record(path, source.run_settings())
    legacy = {k: v for k, v in subnetwork.run_settings().items() if k != "carry"}
    path.write_text(json.dumps({"test_accuracy": 0.4, "settings": legacy}))
    assert _read_record(path, subnetwork.run_settings())["test_accuracy"] == 0.4
    with pytest.raises(UsageError, match=r"'carry': \('subnetwork', 'source'\)"):
        _read_record(path, source.run_settings())


def test_arithmetic_model_dropout():
    model = arithmetic_model(num_tokens=5, layers=1, hidden=8, heads=2, inner=16, dropout=0.1)
    assert (model.config.resid_pdrop, model.config.embd_pdrop, model.config.attn_pdrop) == (0.1, 0.1, 0.1)
    assert arithmetic_model(num_tokens=5, layers=1, hidden=8, heads=2, inner=16).config.resid_pdrop == 0.0
    with pytest.raises(ValueError, match=r"dropout must be in \[0, 1\), got 1.5"):
        arithmetic_model(num_tokens=5, dropout=1.5)
