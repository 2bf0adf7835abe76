"""Where to hook, per architecture: a declarative map from `model_type` to module paths.

Paths are relative to `model.base_model` (`layers`) and to one layer (the rest). The attention output projection's
*input* is the concatenation of the per-head context vectors, so masking that input masks heads for every attention
implementation (eager, SDPA, flash) and for grouped-query attention alike. The MLP output projection's *output* is the
MLP block's contribution before any residual add or LayerNorm (BERT is post-LN: `output.dense`, not `output`, which
adds the residual and normalizes).

Encoder-decoder models have two stacks: the map of the encoder, with `decoder=` the map of the decoder, whose layers
also hold a cross-attention output projection (`cross_attention_output`). Their masks are five kinds (encoder, decoder
and cross-attention heads; encoder and decoder MLP blocks), so nothing of the model is left unpruned by accident.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .._registry import Registry

__all__ = [
    "ARCHITECTURES",
    "ATTENTION_OUTPUT_SUFFIXES",
    "MLP_OUTPUT_SUFFIXES",
    "ArchitectureMap",
    "SlimMap",
    "slim_model_types",
    "supported_model_types",
]


@dataclass(frozen=True)
class SlimMap:
    """What slim export needs beyond the hook sites: the projections it slices and the config names it rewrites.

    Paths are relative to one layer. `query`/`key`/`value` give one output row block per head (`nn.Linear`); a fused
    `qkv` (GPT-2 `c_attn`, a `Conv1D`) holds q|k|v side by side along its output. `mlp_inputs` are the projections
    whose outputs are the MLP's intermediate neurons (gate and up for Llama; Phi-3's fused `gate_up_proj` with
    `mlp_input_blocks=2`). `attention_module` holds the head-count
    attributes the forward pass reads; `attention_attrs` maps each such attribute to what export sets it to
    (`query_heads`, `query_width`, `kv_heads`, `group_size`); a `config.` attribute (Phi-3 reads
    `self.config.num_attention_heads` to split its fused qkv) is set on a copy of the config that layer's
    attention alone holds. The `*_config` names are the config fields that a stock
    checkpoint would need rewritten; `bias_flags` maps a config flag to the roles it gives biases to.
    """

    attention_module: str
    mlp_inputs: tuple[str, ...]
    query: str | None = None
    key: str | None = None
    value: str | None = None
    qkv: str | None = None
    kv_heads_config: str | None = None
    heads_config: str = "num_attention_heads"
    head_dim_config: str | None = None
    intermediate_config: str = "intermediate_size"
    attention_attrs: tuple[tuple[str, str], ...] = ()
    bias_flags: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # Stacked copies of the intermediate along each MLP input projection's output (Phi-3's fused `gate_up_proj`
    # holds gate | up: 2); a neuron owns one row in each (`architectures.ownership`).
    mlp_input_blocks: int = 1
    # Neurons a removed MLP block keeps as zero placeholders (GPT-2's Conv1D cannot multiply a zero-width input).
    min_intermediate: int = 0
    # Whether the model runs exactly with zero heads in a layer (zero-width q/k/v/o), so a layer that keeps no head
    # needs no placeholder head. Measured with torch 2.13 / transformers 5.24 (tests/export/test_export_zero_heads.py,
    # benchmarks/quality/bench_zero_heads.py): BERT-like attention does (it reshapes to (..., -1, head_dim), well
    # defined for zero heads), and so does Llama-like attention, forward and cached generate, with one exception that
    # `cache_length_layer` names. GPT-2 does not: it splits its fused c_attn by `split_size`, which cannot be 0.
    # No stock config can state 0 heads (hidden % 0, n // 0), so a layout with no head anywhere keeps placeholders.
    zero_width_attention: bool = False
    # Whether transformers' KV cache reads the sequence length from one layer by counting its cached elements
    # (`DynamicCache.get_seq_length()` reads layer 0, the masks read the first full-attention layer, and
    # `DynamicLayer.get_seq_length` returns 0 when `keys.numel() == 0`). A zero-head layer there reads as empty and
    # cached generate goes wrong (measured: other tokens), so that layer alone keeps its placeholder head
    # (`export.slim.cache_length_layers`); sliding-window layers count tokens instead and need none.
    cache_length_layer: bool = False


@dataclass(frozen=True)
class ArchitectureMap:
    """Module paths of one stack of layers. `attention` and `mlp` only feed the parameter-weighted sparsity.

    `heads_config` names the config attributes that hold this stack's head count (the first present wins; default:
    the usual names). `decoder` is the decoder stack of an encoder-decoder model, whose layers also hold
    `cross_attention_output` (inside the `cross_attention` block). `mlp_output_dropout` is the `nn.Dropout` applied
    to the MLP output projection's output and to nothing else (None: no such module, e.g. functional dropout or a
    dropout shared with attention); with `keep_dropout` the MLP means are taken after it, as in the paper's code.
    """

    layers: str
    attention_output: str
    mlp_output: str
    attention: str | None = None
    mlp: tuple[str, ...] = ()
    heads_config: tuple[str, ...] = ()
    layers_config: tuple[str, ...] = ()
    decoder: ArchitectureMap | None = None
    cross_attention_output: str | None = None
    cross_attention: str | None = None
    mlp_output_dropout: str | None = None
    slim: SlimMap | None = None


_BERT_SLIM = SlimMap("attention.self", ("intermediate.dense",), query="attention.self.query",
                     key="attention.self.key", value="attention.self.value",
                     attention_attrs=(("num_attention_heads", "query_heads"), ("all_head_size", "query_width")),
                     zero_width_attention=True)
_BERT_LIKE = ArchitectureMap("encoder.layer", "attention.output.dense", "output.dense",
                             attention="attention", mlp=("intermediate", "output.dense"),
                             mlp_output_dropout="output.dropout")
_BERT_SLIM_TYPES = ("bert", "roberta", "xlm-roberta", "electra", "camembert")
_LLAMA_SLIM = SlimMap("self_attn", ("mlp.gate_proj", "mlp.up_proj"), query="self_attn.q_proj",
                      key="self_attn.k_proj", value="self_attn.v_proj", kv_heads_config="num_key_value_heads",
                      head_dim_config="head_dim", attention_attrs=(("num_key_value_groups", "group_size"),),
                      bias_flags=(("attention_bias", ("query", "key", "value", "attention_output")),
                                  ("mlp_bias", ("mlp_inputs", "mlp_output"))),
                      zero_width_attention=True, cache_length_layer=True)
_LLAMA_LIKE = ArchitectureMap("layers", "self_attn.o_proj", "mlp.down_proj", attention="self_attn", mlp=("mlp",))
# Checked by slim export's tests; the other Llama-like models keep hooks only until someone checks them.
_LLAMA_SLIM_TYPES = ("llama", "mistral", "qwen2", "qwen3")
# Phi-3: fused q|k|v (`qkv_proj`, grouped-query offsets) and gate|up (`gate_up_proj`); no bias flags (its
# projections have none), so a folded mean reloads with `load_slim`.
_PHI3_SLIM = SlimMap("self_attn", ("mlp.gate_up_proj",), qkv="self_attn.qkv_proj",
                     kv_heads_config="num_key_value_heads", head_dim_config="head_dim", mlp_input_blocks=2,
                     attention_attrs=(("config.num_attention_heads", "query_heads"),
                                      ("num_key_value_heads", "kv_heads"), ("num_key_value_groups", "group_size")))
_BART_LIKE = ArchitectureMap(
    "encoder.layers", "self_attn.out_proj", "fc2", attention="self_attn", mlp=("fc1", "fc2"),
    heads_config=("encoder_attention_heads",), layers_config=("encoder_layers",),
    decoder=ArchitectureMap("decoder.layers", "self_attn.out_proj", "fc2", attention="self_attn", mlp=("fc1", "fc2"),
                            heads_config=("decoder_attention_heads",), layers_config=("decoder_layers",),
                            cross_attention_output="encoder_attn.out_proj", cross_attention="encoder_attn"))
_T5_LIKE = ArchitectureMap(
    "encoder.block", "layer.0.SelfAttention.o", "layer.1.DenseReluDense.wo", attention="layer.0.SelfAttention",
    mlp=("layer.1.DenseReluDense",), heads_config=("num_heads",), layers_config=("num_layers",),
    mlp_output_dropout="layer.1.dropout",
    decoder=ArchitectureMap("decoder.block", "layer.0.SelfAttention.o", "layer.2.DenseReluDense.wo",
                            attention="layer.0.SelfAttention", mlp=("layer.2.DenseReluDense",),
                            heads_config=("num_heads",), layers_config=("num_decoder_layers",),
                            cross_attention_output="layer.1.EncDecAttention.o",
                            cross_attention="layer.1.EncDecAttention", mlp_output_dropout="layer.2.dropout"))

def _check_architecture(model_type: str, paths: Any) -> None:
    """An entry must be an `ArchitectureMap` (a wrong path inside it fails, naming the candidates, when a model of
    that type is wrapped)."""
    if not isinstance(paths, ArchitectureMap):
        raise TypeError(f"ARCHITECTURES[{model_type!r}] must be an ArchitectureMap, got {type(paths).__name__}.")


ARCHITECTURES = Registry("architecture", builtins={
    **{t: _BERT_LIKE for t in ("bert", "roberta", "xlm-roberta", "electra", "camembert", "data2vec-text",
                               "ernie", "roberta-prelayernorm", "xlm-roberta-xl")},
    "distilbert": ArchitectureMap(
        "transformer.layer", "attention.out_lin", "ffn.lin2", attention="attention", mlp=("ffn",),
        mlp_output_dropout="ffn.dropout",
        slim=SlimMap("attention", ("ffn.lin1",), query="attention.q_lin", key="attention.k_lin",
                     value="attention.v_lin", heads_config="n_heads", intermediate_config="hidden_dim",
                     attention_attrs=(("n_heads", "query_heads"),))),
    "mpnet": ArchitectureMap("encoder.layer", "attention.attn.o", "output.dense", attention="attention",
                             mlp=("intermediate", "output.dense"), mlp_output_dropout="output.dropout"),
    "gpt2": ArchitectureMap(
        "h", "attn.c_proj", "mlp.c_proj", attention="attn", mlp=("mlp",), mlp_output_dropout="mlp.dropout",
        slim=SlimMap("attn", ("mlp.c_fc",), qkv="attn.c_attn", heads_config="n_head", intermediate_config="n_inner",
                     attention_attrs=(("num_heads", "query_heads"), ("split_size", "query_width")),
                     min_intermediate=1)),
    "gpt_neo": ArchitectureMap("h", "attn.attention.out_proj", "mlp.c_proj", attention="attn", mlp=("mlp",),
                               mlp_output_dropout="mlp.dropout"),
    "gpt_neox": ArchitectureMap("layers", "attention.dense", "mlp.dense_4h_to_h", attention="attention",
                                mlp=("mlp",), mlp_output_dropout="post_mlp_dropout"),
    "opt": ArchitectureMap("decoder.layers", "self_attn.out_proj", "fc2", attention="self_attn", mlp=("fc1", "fc2")),
    "phi": ArchitectureMap("layers", "self_attn.dense", "mlp.fc2", attention="self_attn", mlp=("mlp",)),
    **{t: _LLAMA_LIKE for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2",
                                "granite", "cohere", "smollm3", "helium", "glm")},
    **{t: replace(_LLAMA_LIKE, slim=_LLAMA_SLIM) for t in _LLAMA_SLIM_TYPES},
    "phi3": replace(_LLAMA_LIKE, slim=_PHI3_SLIM),
    **{t: replace(_BERT_LIKE, slim=_BERT_SLIM) for t in _BERT_SLIM_TYPES},
    **{t: _BART_LIKE for t in ("bart", "mbart", "marian", "pegasus", "blenderbot", "blenderbot-small")},
    **{t: _T5_LIKE for t in ("t5", "mt5")},
}, check=_check_architecture)

# Suffixes tried, in order, for models not in the map. A suffix must match exactly one module of a layer.
ATTENTION_OUTPUT_SUFFIXES = ("o_proj", "out_proj", "attention.output.dense", "attn.c_proj", "attention.dense",
                             "self_attention.dense", "self_attn.dense", "out_lin", "attn.o", "attention.wo")
MLP_OUTPUT_SUFFIXES = ("down_proj", "mlp.c_proj", "fc2", "dense_4h_to_h", "output.dense", "lin2", "mlp.fc_out",
                       "w2", "mlp.wo", "c_proj")


def supported_model_types() -> list[str]:
    return sorted(ARCHITECTURES)


def slim_model_types() -> list[str]:
    """Model types that slim export supports (their map has a `SlimMap`)."""
    return sorted(t for t, paths in ARCHITECTURES.items() if paths.slim is not None)
