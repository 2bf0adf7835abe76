"""Means over real tokens when the model changes the sequence length: PEFT prompt tuning, prefix tuning, LoRA, a
custom wrapper, and the decoder of an encoder-decoder model, each against a hand computation from our own hooks."""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_batch, real_token_means, skip_unless_peft_prefix_tuning_runs, tiny_model
from torch import nn

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.ablation.alignment import TokenAlignmentError

peft = pytest.importorskip("peft")

V = 5   # virtual tokens


def _batches() -> list[dict[str, torch.Tensor]]:
    return [make_batch("bert", batch_size=3, seq_len=7, seed=0),
            make_batch("bert", batch_size=4, seq_len=6, seed=1, lengths=[6, 2, 5, 3])]


def _peft_model(kind: str) -> nn.Module:
    torch.manual_seed(0)
    config = {"prompt": peft.PromptTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=V),
              "prefix": peft.PrefixTuningConfig(task_type="SEQ_CLS", num_virtual_tokens=V),
              "lora": peft.LoraConfig(task_type="SEQ_CLS", r=4, lora_alpha=8, target_modules=["query", "value"],
                                      init_lora_weights=False)}[kind]
    model = peft.get_peft_model(tiny_model("bert"), config).eval()
    if kind == "prefix":   # prefix embeddings start at zero-ish; make the prefix matter
        with torch.no_grad():
            for parameter in model.prompt_encoder.parameters():
                parameter.normal_(0, 1.0)
        skip_unless_peft_prefix_tuning_runs(model, _batches()[0])
    return model


def _hand_means(model: nn.Module, batches, weights_of) -> tuple[torch.Tensor, torch.Tensor]:
    """Capture the attention output projections' inputs and the MLP output projections' outputs with our own hooks,
    and average them over the positions `weights_of(batch, x)` selects."""
    layers = model.get_base_model().bert.encoder.layer
    return real_token_means(model, [layer.attention.output.dense for layer in layers],
                            [layer.output.dense for layer in layers], batches, positions=weights_of)


def _computed(model: nn.Module, batches, **kwargs) -> tuple[torch.Tensor, torch.Tensor, dict]:
    wrapped = PrunableModel(model, PruningConfig())
    try:
        info = wrapped.compute_means(batches, show_progress=False, **kwargs)
    finally:
        wrapped.unwrap()
    means = wrapped.get_means()
    return means["heads"].flatten(-2).double(), means["mlps"].double(), info


def _real(batch, x):
    return batch["attention_mask"]


def _with_prompt(counted: bool):
    def weights(batch, x):
        mask = batch["attention_mask"]
        assert x.shape[1] == mask.shape[1] + V   # the activations really hold the virtual tokens
        return torch.cat([torch.full((mask.shape[0], V), int(counted)), mask], dim=1)
    return weights


@pytest.mark.parametrize("mode", ["exclude", "include"])
def test_prompt_tuning_means_match_a_hand_computation(mode):
    model, batches = _peft_model("prompt"), _batches()
    heads, mlps, info = _computed(model, batches, virtual_tokens=mode)
    hand_heads, hand_mlps = _hand_means(model, batches, _with_prompt(mode == "include"))
    torch.testing.assert_close(heads, hand_heads, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mlps, hand_mlps, atol=1e-5, rtol=1e-5)
    assert info["virtual_tokens"] == {"method": "PROMPT_TUNING", "count": V, "counted": mode == "include"}
    assert info["token_count"] == sum(int(b["attention_mask"].sum()) for b in batches)   # real tokens only


def test_prompt_tuning_modes_differ():
    """The two modes are different numbers (so each test above could fail on the other's answer)."""
    model, batches = _peft_model("prompt"), _batches()
    excluded, _, _ = _computed(model, batches, virtual_tokens="exclude")
    included, _, _ = _computed(model, batches, virtual_tokens="include")
    assert float((excluded - included).abs().max()) > 1e-2


@pytest.mark.parametrize("mode", ["exclude", "include"])
def test_prefix_tuning_means_match_a_hand_computation(mode):
    model, batches = _peft_model("prefix"), _batches()
    heads, mlps, _ = _computed(model, batches, virtual_tokens=mode)
    hand_heads, hand_mlps = _hand_means(model, batches, _real)
    torch.testing.assert_close(heads, hand_heads, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mlps, hand_mlps, atol=1e-5, rtol=1e-5)
    # The prefix really changes the activations: the base model's means differ.
    base_heads, _, _ = _computed(model.get_base_model(), batches)
    assert float((base_heads - heads).abs().max()) > 1e-3


def test_lora_means_are_plain_real_token_means():
    model, batches = _peft_model("lora"), _batches()
    heads, mlps, info = _computed(model, batches)
    hand_heads, hand_mlps = _hand_means(model, batches, _real)
    torch.testing.assert_close(heads, hand_heads, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(mlps, hand_mlps, atol=1e-5, rtol=1e-5)
    assert "virtual_tokens" not in info


def test_unknown_virtual_tokens_raise_unless_included():
    """A non-PEFT wrapper that prepends a token: which position is virtual is unknown, so `exclude` raises;
    `include` weights positions by the attention_mask the model itself received."""

    class PrependOne(nn.Module):
        def __init__(self, inner: nn.Module) -> None:
            super().__init__()
            self.inner = inner
            self.extra = nn.Parameter(torch.randn(1, 1, inner.config.hidden_size))

        def get_base_model(self) -> nn.Module:
            return self.inner

        def forward(self, input_ids, attention_mask, **kwargs):
            embeds = self.inner.get_input_embeddings()(input_ids)
            embeds = torch.cat([self.extra.expand(len(embeds), -1, -1), embeds], dim=1)
            mask = torch.cat([torch.ones_like(attention_mask[:, :1]), attention_mask], dim=1)
            return self.inner(inputs_embeds=embeds, attention_mask=mask, **kwargs)

    torch.manual_seed(0)
    model, batches = PrependOne(tiny_model("bert")).eval(), _batches()
    with pytest.raises(TokenAlignmentError, match=r"8 positions per example, but the batch has 7 tokens.*"
                                                  r"virtual_tokens='include'"):
        _computed(model, batches)
    heads, _, _ = _computed(model, batches, virtual_tokens="include")

    def received(batch, x):
        return torch.cat([torch.ones_like(batch["attention_mask"][:, :1]), batch["attention_mask"]], dim=1)

    layers = model.inner.bert.encoder.layer
    captured = []
    handles = [layer.attention.output.dense.register_forward_pre_hook(lambda m, a: captured.append(a[0]))
               for layer in layers]
    sums, count = 0.0, 0.0
    with torch.no_grad():
        for batch in batches:
            captured.clear()
            model(**batch)
            keep = received(batch, None).bool()
            sums = sums + torch.stack([x[keep].double().sum(0) for x in captured])
            count += float(keep.sum())
    for handle in handles:
        handle.remove()
    torch.testing.assert_close(heads, sums / count, atol=1e-5, rtol=1e-5)


def test_bad_virtual_tokens_mode_is_refused():
    wrapped = PrunableModel(tiny_model("bert"), PruningConfig())
    with pytest.raises(ValueError, match="virtual_tokens must be one of"):
        wrapped.compute_means(_batches(), virtual_tokens="all")


def _resample_by_hand(model: nn.Module, batch, layer: int, head: int, head_dim: int) -> torch.Tensor:
    """Logits with one head's slice replaced by the previous example's (our own hook, no library code)."""
    module = model.get_base_model().bert.encoder.layer[layer].attention.output.dense

    def hook(m, args):
        x = args[0].clone()
        span = slice(head * head_dim, (head + 1) * head_dim)
        x[..., span] = args[0].roll(1, dims=0)[..., span]
        return (x,)

    handle = module.register_forward_pre_hook(hook)
    try:
        with torch.no_grad():
            return model(**batch).logits
    finally:
        handle.remove()


@pytest.mark.parametrize("kind", ["prompt", "prefix"])
def test_resample_ablation_under_prompt_learning_matches_a_hand_computation(kind):
    """Masks are applied under PEFT prompt learning (prefix tuning of an encoder calls the transformer body
    directly), and resample ablation swaps whole examples, virtual positions included."""
    model, batch = _peft_model(kind), _batches()[1]
    with torch.no_grad():
        full = model(**batch).logits
    expected = _resample_by_hand(model, batch, layer=1, head=2, head_dim=8)
    wrapped = PrunableModel(model, PruningConfig(ablation="resample")).eval()
    heads = torch.ones(2, 4)
    heads[1, 2] = 0
    wrapped.set_masks(heads=heads)
    with torch.no_grad():
        got = wrapped(**batch).logits
    wrapped.unwrap()
    assert float((expected - full).abs().max()) > 1e-3   # the ablation is visible
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-5)


def test_masks_apply_under_prefix_tuning():
    """Zero-ablating every unit changes the prefix-tuned model's output (today's bug: the masks never fired)."""
    model, batch = _peft_model("prefix"), _batches()[0]
    with torch.no_grad():
        full = model(**batch).logits
    wrapped = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    wrapped.set_masks(heads=torch.zeros(2, 4), mlps=torch.zeros(2))
    with torch.no_grad():
        masked = wrapped(**batch).logits
    wrapped.unwrap()
    assert float((masked - full).abs().max()) > 1e-2


def _bart() -> nn.Module:
    from transformers import AutoConfig, AutoModel
    torch.manual_seed(0)
    config = AutoConfig.for_model("bart", vocab_size=99, d_model=32, encoder_layers=2, decoder_layers=2,
                                  encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=48,
                                  decoder_ffn_dim=40, max_position_embeddings=64, dropout=0.0, attention_dropout=0.0,
                                  pad_token_id=1)
    return AutoModel.from_config(config, attn_implementation="eager").eval()


def test_decoder_means_use_the_decoder_attention_mask():
    model = _bart()
    batch = make_batch("bert", batch_size=3, seq_len=7, seed=0)
    decoder = make_batch("bert", batch_size=3, seq_len=5, seed=4, lengths=[5, 2, 4])
    batch |= {"decoder_input_ids": decoder["input_ids"], "decoder_attention_mask": decoder["attention_mask"]}
    wrapped = PrunableModel(model, PruningConfig())
    wrapped.compute_means([batch], show_progress=False)
    means = wrapped.get_means()
    wrapped.unwrap()
    captured: dict[str, list] = {"encoder": [], "decoder": [], "cross": []}
    handles = [layer.self_attn.out_proj.register_forward_pre_hook(lambda m, a: captured["encoder"].append(a[0]))
               for layer in model.encoder.layers]
    handles += [layer.self_attn.out_proj.register_forward_pre_hook(lambda m, a: captured["decoder"].append(a[0]))
                for layer in model.decoder.layers]
    handles += [layer.encoder_attn.out_proj.register_forward_pre_hook(lambda m, a: captured["cross"].append(a[0]))
                for layer in model.decoder.layers]
    with torch.no_grad():
        model(**batch)
    for handle in handles:
        handle.remove()
    encoder_keep, decoder_keep = batch["attention_mask"].bool(), batch["decoder_attention_mask"].bool()
    for kind, site, keep in (("encoder_heads", "encoder", encoder_keep), ("decoder_heads", "decoder", decoder_keep),
                             ("cross_heads", "cross", decoder_keep)):
        expected = torch.stack([x[keep].mean(0) for x in captured[site]])
        torch.testing.assert_close(means[kind].flatten(-2), expected, atol=1e-5, rtol=1e-5)


def test_decoder_means_refuse_a_padded_batch_without_decoder_attention_mask():
    model = _bart()
    batch = make_batch("bert", batch_size=3, seq_len=7, seed=0)   # padded
    batch["decoder_input_ids"] = make_batch("bert", batch_size=3, seq_len=5, seed=4)["input_ids"]
    wrapped = PrunableModel(model, PruningConfig())
    with pytest.raises(TokenAlignmentError, match="need decoder_attention_mask"):
        wrapped.compute_means([batch], show_progress=False)
    unpadded = {k: v[:1, :5] for k, v in batch.items()}   # the first example is full length: no padding anywhere
    assert bool(unpadded["attention_mask"].all())
    wrapped.compute_means([unpadded], show_progress=False)
    assert wrapped.means_info["token_count"] == 5


def _prefix_tuned_llama() -> nn.Module:
    torch.manual_seed(0)
    config = peft.PrefixTuningConfig(task_type="CAUSAL_LM", num_virtual_tokens=V)
    model = peft.get_peft_model(tiny_model("llama", task="causal_lm"), config).eval()
    with torch.no_grad():
        for parameter in model.prompt_encoder.parameters():
            parameter.normal_(0, 1.0)
    return model


def test_decoder_prefix_tuning_is_masked_and_means_are_real_token_means():
    """Prefix tuning of a decoder (it runs on every transformers 5.x, unlike encoder prefix tuning on 5.24): the
    virtual tokens enter as cached keys and values only, so the means are plain real-token means, taken with the
    prefix in place, and zero-ablating every unit changes the output."""
    model, batches = _prefix_tuned_llama(), [make_batch("llama", batch_size=3, seq_len=6, seed=s) for s in (0, 1)]
    layers = model.get_base_model().model.layers
    heads, mlps = real_token_means(model, [layer.self_attn.o_proj for layer in layers],
                                   [layer.mlp.down_proj for layer in layers], batches)
    wrapped = PrunableModel(model, PruningConfig(ablation="zero"))
    wrapped.compute_means(batches, show_progress=False)
    means = wrapped.get_means()
    torch.testing.assert_close(means["heads"].flatten(-2).double(), heads, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(means["mlps"].double(), mlps, atol=1e-5, rtol=1e-5)
    base = wrapped.model.get_base_model()
    with torch.no_grad():
        full = wrapped(**batches[0]).logits
        wrapped.set_masks(heads=torch.zeros(wrapped.num_layers, wrapped.num_heads),
                          mlps=torch.zeros(wrapped.num_layers))
        masked = wrapped(**batches[0]).logits
    wrapped.unwrap()
    with torch.no_grad():
        no_prefix = base(**batches[0]).logits
    assert float((full - no_prefix).abs().max()) > 1e-3    # the prefix matters
    assert float((masked - full).abs().max()) > 1e-2        # and the masks fire under it
