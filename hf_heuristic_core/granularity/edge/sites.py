"""Where the edge granularity hooks, per architecture family: the embedding, the norms each reader applies to its own
input, the query / key / value projections and how their outputs hold the heads.

Only pre-LayerNorm families are listed. A post-LN model (BERT, RoBERTa, OPT-350m) renormalises the stream after
every add, so it is not a sum of writers and cannot be disentangled into edges; a sandwich-norm model (Gemma 2/3,
OLMo 2) normalises the *sum* of its heads; a model that scales its residual adds (Granite) adds more than its
writers. They are refused with the reason, as is any family not checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ..._registry import Registry
from ...errors import PruningError

__all__ = ["EdgeSites", "edge_sites", "EDGE_FAMILIES"]


@dataclass(frozen=True)
class EdgeSites:
    """Module paths (the embedding and final norm relative to `model.base_model`, the rest relative to one layer).

    `qkv_layout`: `separate` (three projections, `query` / `key` / `value`), `blocks` (one fused projection whose
    output is q | k | v, each head-major: GPT-2's `c_attn`) or `per_head` (one fused projection whose output is, per
    head, q_h | k_h | v_h: GPT-NeoX's `query_key_value`). `parallel_flag` names the config flag of a parallel
    attention / MLP residual (None: always sequential)."""

    embedding: str
    final_norm: str
    input_norm: str
    mlp_norm: str
    qkv_layout: str
    query: str | None = None
    key: str | None = None
    value: str | None = None
    qkv: str | None = None
    parallel_flag: str | None = None


_GPT2 = EdgeSites("wte", "ln_f", "ln_1", "ln_2", "blocks", qkv="attn.c_attn")
_LLAMA = EdgeSites("embed_tokens", "norm", "input_layernorm", "post_attention_layernorm", "separate",
                   query="self_attn.q_proj", key="self_attn.k_proj", value="self_attn.v_proj")
_NEOX = EdgeSites("embed_in", "final_layer_norm", "input_layernorm", "post_attention_layernorm", "per_head",
                  qkv="attention.query_key_value", parallel_flag="use_parallel_residual")

def _check_sites(model_type: str, sites: Any) -> None:
    if not isinstance(sites, EdgeSites):
        raise TypeError(f"EDGE_FAMILIES[{model_type!r}] must be an EdgeSites, got {type(sites).__name__}.")


# The pre-LN model types whose edges can be masked, by their sites (a Registry: `register` adds a family).
EDGE_FAMILIES = Registry("edge-site family", builtins={
    "gpt2": _GPT2, **dict.fromkeys(("llama", "mistral", "qwen2", "qwen3"), _LLAMA), "gpt_neox": _NEOX},
    check=_check_sites)
_POST_LN = ("bert", "roberta", "xlm-roberta", "electra", "camembert", "data2vec-text", "ernie", "mpnet",
            "distilbert", "opt", "bart", "mbart", "marian", "pegasus", "t5", "mt5")
_SANDWICH = ("gemma2", "gemma3", "gemma3_text", "olmo2")
_SCALED_RESIDUAL = ("granite", "granitemoe", "granitemoeshared", "granitemoehybrid")


def edge_sites(model_type: str | None, config: Any = None) -> EdgeSites:
    """The sites of `model_type`, or a `PruningError` saying why edges cannot be masked there."""
    if model_type in EDGE_FAMILIES:
        return EDGE_FAMILIES[model_type]
    if model_type in _POST_LN:
        raise PruningError(f"Edge masks need a pre-LayerNorm model, whose residual stream is a plain sum of what each "
                           f"head and MLP writes; {model_type!r} is post-LN (or encoder-decoder): it renormalises the "
                           "stream after every add, so no edge can be cut alone. Use granularity='unit' (heads and "
                           "MLP blocks) there.")
    if model_type in _SANDWICH:
        raise PruningError(f"{model_type!r} normalises the sum of its heads after attention (sandwich norms), so one "
                           "head's contribution to the stream is not its own output: edge masks are not supported; "
                           "use granularity='unit'.")
    if model_type in _SCALED_RESIDUAL:
        raise PruningError(f"{model_type!r} scales what its attention and MLP add to the residual stream "
                           "(residual_multiplier), so the stream is not the sum of the writers' outputs that edge "
                           "masks rebuild: edge masks are not supported; use granularity='unit'.")
    raise PruningError(f"Edge masks are not mapped for model type {model_type!r} (supported: "
                       f"{', '.join(sorted(EDGE_FAMILIES))}); each family's norms and q/k/v layout are checked by "
                       "exactness tests before it is listed. Use granularity='unit'.")
