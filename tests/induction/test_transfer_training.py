"""Frozen entries survive a real `transformers.Trainer` (AdamW with weight decay), and saving gives a plain model."""

from __future__ import annotations

import json

import pytest
import torch
from tiny_models import make_batch, one_torch_thread, tiny_model  # noqa: F401  (fixture)
from transformers import AutoModelForCausalLM, Trainer, TrainingArguments

from hf_heuristic_core import load_transplanted, transfer_subnetwork
from hf_heuristic_core.induction.provenance import effective_state_dict

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Tokens(torch.utils.data.Dataset):
    def __init__(self, rows=16, length=6):
        generator = torch.Generator().manual_seed(0)
        self.ids = torch.randint(3, 99, (rows, length), generator=generator)

    def __len__(self):
        return len(self.ids)

    def __getitem__(self, i):
        return {"input_ids": self.ids[i], "labels": self.ids[i]}


def _masks(source):
    generator = torch.Generator().manual_seed(3)
    params = dict(source.named_parameters())
    masks = {n: (torch.rand(params[n].shape, generator=generator) < 0.4).float()
             for n in ("transformer.wte.weight", "transformer.h.0.attn.c_attn.weight",
                       "transformer.h.0.attn.c_attn.bias", "transformer.h.1.ln_1.weight")}
    masks["transformer.h.1.mlp.c_fc.weight"] = torch.ones(params["transformer.h.1.mlp.c_fc.weight"].shape)
    return masks


def _train(model, tmp_path, steps=4):
    args = TrainingArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=4, max_steps=steps,
                             learning_rate=0.3, weight_decay=0.1, lr_scheduler_type="constant", report_to=[], save_strategy="no",
                             logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
    trainer = Trainer(model=model, args=args, train_dataset=_Tokens())
    trainer.train()
    return trainer


def test_trainer_with_weight_decay_leaves_frozen_entries_bitwise_and_moves_free_ones(tmp_path):
    source = tiny_model("gpt2", task="causal_lm")
    masks = _masks(source)
    model = transfer_subnetwork(source, masks, seed=1)
    before = {k: v.clone() for k, v in effective_state_dict(model).items()}
    raw_before = model.transformer.wte.parametrizations.weight.original.detach().clone()
    trainer = _train(model, tmp_path)
    optimized = {id(p) for group in trainer.optimizer.param_groups for p in group["params"]}
    assert id(model.transformer.h[1].mlp.c_fc.weight) not in optimized   # fully frozen: not even in AdamW
    after = effective_state_dict(model)
    src = source.state_dict()
    for name, mask in masks.items():
        gate = mask.bool()
        assert torch.equal(after[name][gate], src[name][gate]), name          # frozen, bit for bit
        changed = (after[name][~gate] != before[name][~gate]).float().mean()
        if name != "transformer.h.1.mlp.c_fc.weight":
            assert changed > 0.5, (name, changed)                              # free entries trained
    # AdamW's decay did move the hidden trainable copy at the frozen entries: the reparametrization is what protects them
    raw_after = model.transformer.wte.parametrizations.weight.original.detach()
    gate = masks["transformer.wte.weight"].bool()
    assert (raw_after[gate] != raw_before[gate]).float().mean() > 0.5
    assert torch.equal(model.lm_head.weight, model.transformer.wte.weight)     # tied use frozen too
    for name, value in before.items():                                          # unmasked tensors train
        if name not in masks and name.endswith("c_proj.weight"):
            assert not torch.equal(after[name], value), name

    # Trainer's own save goes through save_pretrained: a plain checkpoint with identical outputs
    trainer.save_model(str(tmp_path / "saved"))
    reloaded = AutoModelForCausalLM.from_pretrained(tmp_path / "saved", attn_implementation="eager").eval()
    model.eval()
    batch = make_batch("gpt2")
    with torch.no_grad():
        assert torch.equal(reloaded(**batch).logits, model(**batch).logits)
    assert list(reloaded.state_dict()) == list(source.state_dict())


def test_save_pretrained_card_record_and_frozen_reload(tmp_path):
    source = tiny_model("gpt2", task="causal_lm")
    source.config.name_or_path = "someone/tiny-gpt2-t1"
    masks = _masks(source)
    model = transfer_subnetwork(source, masks, seed=2, relaxation="continuous_sparsification")
    model.save_pretrained(tmp_path / "m")
    record = json.loads((tmp_path / "m" / "subtask_induction.json").read_text())
    kept = {n: int(m.sum()) for n, m in masks.items()}
    assert record["arm"] == "subnetwork" and record["seed"] == 2
    assert record["source"] == "someone/tiny-gpt2-t1" and record["relaxation"] == "continuous_sparsification"
    assert {n: t["kept"] for n, t in record["tensors"].items()} == kept
    assert record["layers"]["1"]["kept"] == kept["transformer.h.1.ln_1.weight"] + kept["transformer.h.1.mlp.c_fc.weight"]
    assert record["kept_entries"] == sum(kept.values())
    card = (tmp_path / "m" / "README.md").read_text()
    assert "base_model: someone/tiny-gpt2-t1" in card and f"{sum(kept.values())} of the" in card

    frozen = load_transplanted(tmp_path / "m", attn_implementation="eager")
    assert type(frozen) is type(source)
    gate = masks["transformer.wte.weight"].bool()
    assert torch.equal(frozen.transformer.wte.parametrizations.weight[0].gate, gate)
    assert not frozen.transformer.h[1].mlp.c_fc.weight.requires_grad
    model.eval()
    frozen.eval()
    batch = make_batch("gpt2")
    with torch.no_grad():
        assert torch.equal(frozen(**batch).logits, model(**batch).logits)
    before = effective_state_dict(frozen)["transformer.wte.weight"].clone()
    frozen.train()
    _train(frozen, tmp_path, steps=2)
    after = effective_state_dict(frozen)["transformer.wte.weight"]
    assert torch.equal(after[gate], before[gate]) and not torch.equal(after[~gate], before[~gate])


def test_load_state_dict_of_a_plain_checkpoint_and_trainer_resume_match_an_uninterrupted_run(tmp_path):
    source = tiny_model("gpt2", task="causal_lm")
    masks = _masks(source)
    straight = transfer_subnetwork(source, masks, seed=1)
    _train(straight, tmp_path / "a", steps=4)

    model = transfer_subnetwork(source, masks, seed=1)
    args = TrainingArguments(output_dir=str(tmp_path / "b"), per_device_train_batch_size=4, max_steps=2,
                             learning_rate=0.3, weight_decay=0.1, lr_scheduler_type="constant", report_to=[], save_strategy="steps", save_steps=2,
                             logging_strategy="no", use_cpu=True, disable_tqdm=True, seed=0)
    Trainer(model=model, args=args, train_dataset=_Tokens()).train()
    checkpoint = tmp_path / "b" / "checkpoint-2"
    assert (checkpoint / "subtask_induction.json").is_file()

    resumed = transfer_subnetwork(source, masks, seed=1)
    args.max_steps = 4
    Trainer(model=resumed, args=args, train_dataset=_Tokens()).train(resume_from_checkpoint=str(checkpoint))
    expected, got = effective_state_dict(straight), effective_state_dict(resumed)
    for name in expected:
        assert torch.equal(got[name], expected[name]), name

    # a plain state dict (keys as save_pretrained writes them, tied lm_head left out) loads strictly
    fresh = transfer_subnetwork(source, masks, seed=9)
    plain = {k: v.clone() for k, v in expected.items() if k != "lm_head.weight"}
    fresh.load_state_dict(plain)
    assert all(torch.equal(effective_state_dict(fresh)[k], v) for k, v in expected.items())
    assert torch.equal(fresh.transformer.wte.parametrizations.weight[0].gate, masks["transformer.wte.weight"].bool())
