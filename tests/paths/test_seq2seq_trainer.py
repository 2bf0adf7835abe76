"""`Seq2SeqTrainer(predict_with_generate=True)` on a wrapped encoder-decoder model: its generate() runs the encoder
on its own, and every head (encoder, decoder, cross) and MLP block is masked in it, checked by hooks registered
after wrapping on the sites the architecture map names."""

from __future__ import annotations

import copy

import pytest
import transformers

from auto_classes import Row, SiteProbe, build, inputs_for, set_all_masks, shared_model_builds  # noqa: F401
from hf_heuristic_core import PrunableModel, PruningConfig
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

ROWS = {"bart": Row("bart", "BartForConditionalGeneration", frozenset({"seq2seq_lm"})),
        "t5": Row("t5", "T5ForConditionalGeneration", frozenset({"seq2seq_lm"}))}


def _predict(model, row, tmp_path):
    inputs = inputs_for(build(row), row, batch=4, padded=False)
    data = [{"input_ids": inputs["input_ids"][i], "attention_mask": inputs["attention_mask"][i],
             "labels": inputs["decoder_input_ids"][i]} for i in range(4)]
    args = transformers.Seq2SeqTrainingArguments(
        output_dir=str(tmp_path), per_device_eval_batch_size=2, predict_with_generate=True,
        generation_max_length=4, generation_num_beams=1, report_to="none", use_cpu=True, disable_tqdm=True,
        remove_unused_columns=False)   # (PrunableModel.forward takes **kwargs: the Trainer cannot read its columns)
    trainer = transformers.Seq2SeqTrainer(model=model, args=args)
    return trainer.predict(data)


@pytest.mark.parametrize("model_type", sorted(ROWS))
def test_predict_with_generate_masks_every_stack(model_type, tmp_path):
    row = ROWS[model_type]
    model = build(row)
    reference = copy.deepcopy(model)
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    set_all_masks(prunable, 0)
    probe = SiteProbe(model)
    masked = _predict(prunable, row, tmp_path)
    assert probe.expected(model) <= set(probe.seen)
    assert not probe.nonzero(), probe.nonzero()
    set_all_masks(prunable, 1)
    kept = _predict(prunable, row, tmp_path)
    full = _predict(reference, row, tmp_path)
    assert (kept.predictions == full.predictions).all()
    assert masked.predictions.shape[0] == full.predictions.shape[0] == 4
