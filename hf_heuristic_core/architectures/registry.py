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

from dataclasses import dataclass

__all__ = ["ARCHITECTURES", "ATTENTION_OUTPUT_SUFFIXES", "ArchitectureMap", "MLP_OUTPUT_SUFFIXES",
           "supported_model_types"]


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
    decoder: "ArchitectureMap | None" = None
    cross_attention_output: str | None = None
    cross_attention: str | None = None
    mlp_output_dropout: str | None = None


_BERT_LIKE = ArchitectureMap("encoder.layer", "attention.output.dense", "output.dense",
                             attention="attention", mlp=("intermediate", "output.dense"),
                             mlp_output_dropout="output.dropout")
_LLAMA_LIKE = ArchitectureMap("layers", "self_attn.o_proj", "mlp.down_proj", attention="self_attn", mlp=("mlp",))
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

ARCHITECTURES: dict[str, ArchitectureMap] = {
    **{t: _BERT_LIKE for t in ("bert", "roberta", "xlm-roberta", "electra", "camembert", "data2vec-text",
                               "ernie", "roberta-prelayernorm", "xlm-roberta-xl")},
    "distilbert": ArchitectureMap("transformer.layer", "attention.out_lin", "ffn.lin2", attention="attention",
                                  mlp=("ffn",), mlp_output_dropout="ffn.dropout"),
    "mpnet": ArchitectureMap("encoder.layer", "attention.attn.o", "output.dense", attention="attention",
                             mlp=("intermediate", "output.dense"), mlp_output_dropout="output.dropout"),
    "gpt2": ArchitectureMap("h", "attn.c_proj", "mlp.c_proj", attention="attn", mlp=("mlp",),
                            mlp_output_dropout="mlp.dropout"),
    "gpt_neo": ArchitectureMap("h", "attn.attention.out_proj", "mlp.c_proj", attention="attn", mlp=("mlp",),
                               mlp_output_dropout="mlp.dropout"),
    "gpt_neox": ArchitectureMap("layers", "attention.dense", "mlp.dense_4h_to_h", attention="attention",
                                mlp=("mlp",), mlp_output_dropout="post_mlp_dropout"),
    "opt": ArchitectureMap("decoder.layers", "self_attn.out_proj", "fc2", attention="self_attn", mlp=("fc1", "fc2")),
    "phi": ArchitectureMap("layers", "self_attn.dense", "mlp.fc2", attention="self_attn", mlp=("mlp",)),
    **{t: _LLAMA_LIKE for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "gemma2", "phi3", "olmo", "olmo2",
                                "granite", "cohere", "smollm3", "helium", "glm")},
    **{t: _BART_LIKE for t in ("bart", "mbart", "marian", "pegasus", "blenderbot", "blenderbot-small")},
    **{t: _T5_LIKE for t in ("t5", "mt5")},
}

# Suffixes tried, in order, for models not in the map. A suffix must match exactly one module of a layer.
ATTENTION_OUTPUT_SUFFIXES = ("o_proj", "out_proj", "attention.output.dense", "attn.c_proj", "attention.dense",
                             "self_attention.dense", "self_attn.dense", "out_lin", "attn.o", "attention.wo")
MLP_OUTPUT_SUFFIXES = ("down_proj", "mlp.c_proj", "fc2", "dense_4h_to_h", "output.dense", "lin2", "mlp.fc_out",
                       "w2", "mlp.wo", "c_proj")


def supported_model_types() -> list[str]:
    return sorted(ARCHITECTURES)
