"""Which positions of a hooked activation are real tokens, when the model changes the sequence length.

A batch's `attention_mask` describes the tokens the user passed. Most models keep that length at every layer, but
PEFT prompt learning does not: prompt tuning (and p-tuning) *prepends* `num_virtual_tokens` learned embeddings to the
input, so every hooked activation is `num_virtual_tokens` positions longer; prefix tuning adds them as past keys and
values only, so activations keep the input's length while the attention_mask the backbone receives is longer.
`TokenAligner` gives, for one hooked activation, the 0/1 weight of each of its positions:

* activations as long as the input: the user's `attention_mask` (prefix tuning included: its virtual tokens have no
  activations of their own, so `virtual_tokens="include"` and `"exclude"` agree there);
* activations `num_virtual_tokens` longer under PEFT prompt tuning: the virtual positions get weight 0
  (`virtual_tokens="exclude"`, the default: means over the data's own tokens) or 1 (`"include"`);
* any other length: with `"include"`, the attention_mask the backbone itself received when it matches the
  activations; otherwise `TokenAlignmentError`, because guessing would silently average the wrong positions.

Decoder-side activations of an encoder-decoder model are weighted by `decoder_attention_mask`; without it they all
count only when nothing in the batch is padded.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import PruningError

__all__ = ["VIRTUAL_TOKEN_MODES", "TokenAligner", "TokenAlignmentError", "VirtualTokens", "backbone_of",
           "check_virtual_tokens_mode", "flatten_choices", "virtual_tokens_of"]

VIRTUAL_TOKEN_MODES = ("exclude", "include")

# PEFT prompt-learning methods that prepend their virtual tokens to the input embeddings.
_PREPENDED = {"PROMPT_TUNING", "P_TUNING", "MULTITASK_PROMPT_TUNING"}
# ... and those that add them as past keys / values only (activations keep the input's length).
_KEYS_ONLY = {"PREFIX_TUNING"}


class TokenAlignmentError(PruningError, ValueError):
    """A hooked activation's positions cannot be matched to the batch's tokens, so no mean over real tokens exists."""


@dataclass(frozen=True)
class VirtualTokens:
    """The learned tokens a PEFT prompt-learning model adds: how many, and whether activations hold them."""

    count: int
    in_activations: bool
    method: str


def check_virtual_tokens_mode(mode: str) -> str:
    if mode not in VIRTUAL_TOKEN_MODES:
        raise ValueError(f"virtual_tokens must be one of {VIRTUAL_TOKEN_MODES} (whether the learned virtual tokens of "
                         f"PEFT prompt tuning count as positions), got {mode!r}.")
    return mode


def virtual_tokens_of(model: nn.Module) -> VirtualTokens | None:
    """The virtual tokens of a PEFT prompt-learning model (None for any other model, LoRA included)."""
    config = getattr(model, "active_peft_config", None)
    if config is None or not getattr(config, "is_prompt_learning", False):
        return None
    method = str(getattr(config.peft_type, "value", config.peft_type))
    count = int(getattr(config, "num_virtual_tokens", 0) or 0)
    if method in _PREPENDED:
        return VirtualTokens(count, True, method)
    if method in _KEYS_ONLY:
        return VirtualTokens(count, False, method)
    raise TokenAlignmentError(
        f"PEFT {method} changes the model's token positions in a way hf_heuristic_core does not know how to align "
        f"(known: {sorted(_PREPENDED | _KEYS_ONLY)}); compute the means on the model without the {method} adapter "
        "(e.g. on the merged or base model), or use PruningConfig(ablation='zero').")


def backbone_of(hf_model: nn.Module) -> nn.Module:
    """The transformer body (`base_model`). Not every forward goes through it (OPT's causal LM calls its decoder
    directly); `PrunableModel.entry_modules()` lists every module a forward can enter through."""
    backbone = getattr(hf_model, "base_model", None)
    return backbone if isinstance(backbone, nn.Module) else hf_model


def _sequence_length(inputs: Mapping[str, Any], names: tuple[str, ...]) -> int | None:
    for name in names:
        value = inputs.get(name)
        if isinstance(value, torch.Tensor) and value.dim() >= 2:
            return int(value.shape[1])
    return None


def flatten_choices(inputs: Mapping[str, Any]) -> Mapping[str, Any]:
    """Multiple-choice batches (`input_ids` `[batch, choices, length]`) as the model runs them: one row per
    (example, choice), `[batch * choices, length]` (embeddings: `[batch * choices, length, hidden]`)."""
    ids = inputs.get("input_ids")
    embeds = inputs.get("inputs_embeds")
    if not ((isinstance(ids, torch.Tensor) and ids.dim() == 3)
            or (isinstance(embeds, torch.Tensor) and embeds.dim() == 4)):
        return inputs
    flat = dict(inputs)
    for name in ("input_ids", "attention_mask", "token_type_ids", "position_ids"):
        value = inputs.get(name)
        if isinstance(value, torch.Tensor) and value.dim() == 3:
            flat[name] = value.reshape(-1, value.shape[-1])
    if isinstance(embeds, torch.Tensor) and embeds.dim() == 4:
        flat["inputs_embeds"] = embeds.reshape(-1, *embeds.shape[-2:])
    return flat


class TokenAligner:
    """Per batch, the 0/1 weight of every position of each hooked activation (see the module docstring).

    Call `start_batch(inputs)` before each forward; `capture` is a with-kwargs forward pre-hook for the modules a
    forward can enter through (`PrunableModel.entry_modules`), recording the attention_mask the first of them really
    receives; `weights(x, stack)` answers for a hook. Weights
    are built once per batch and activation length, never per position in Python.
    """

    def __init__(self, virtual: VirtualTokens | None = None, mode: str = "exclude",
                 pad_token_id: int | None = None) -> None:
        self.virtual = virtual
        self.mode = check_virtual_tokens_mode(mode)
        self.pad_token_id = pad_token_id
        self.inputs: Mapping[str, Any] = {}
        self.received: dict[str, torch.Tensor | None] = {}
        self._captured = False
        self._cache: dict[tuple[str, int], torch.Tensor | None] = {}

    # ------------------------------------------------------------------ per batch / per forward
    def start_batch(self, inputs: Mapping[str, Any]) -> None:
        self.inputs = flatten_choices(inputs)
        self.received = {}
        self._captured = False
        self._cache = {}

    def capture(self, module: nn.Module, args: tuple, kwargs: dict[str, Any]) -> None:
        """Record the masks the model received; registered on several modules (outermost first), the first call
        of a batch wins: inner modules of an encoder-decoder model receive the decoder's mask as `attention_mask`."""
        if self._captured:
            return
        self._captured = True
        received = flatten_choices(kwargs)
        for name in ("attention_mask", "decoder_attention_mask"):
            value = received.get(name)
            self.received[name] = value if isinstance(value, torch.Tensor) and value.dim() == 2 else None
        self._cache = {}

    @property
    def batch_size(self) -> int:
        for name in ("input_ids", "inputs_embeds", "attention_mask", "decoder_input_ids"):
            value = self.inputs.get(name)
            if isinstance(value, torch.Tensor) and value.dim() >= 2:
                return int(value.shape[0])
        raise TokenAlignmentError("The batch has no input_ids, inputs_embeds or attention_mask to align "
                                  "activations with; pass tokenized batches.")

    def real_token_count(self) -> int:
        """Real tokens of the batch as the user passed it (virtual tokens never count here)."""
        mask = self.inputs.get("attention_mask")
        if isinstance(mask, torch.Tensor):
            return int(mask.sum())
        length = _sequence_length(self.inputs, ("input_ids", "inputs_embeds"))
        return self.batch_size * (length or 0)

    # ------------------------------------------------------------------ per hooked activation
    def weights(self, x: torch.Tensor, stack: str = "") -> torch.Tensor | None:
        """0/1 weights shaped like `x`'s leading dims (None: every position counts)."""
        batch = self.batch_size
        leading = x.shape[:-1]
        if x.dim() >= 3 and int(x.shape[0]) == batch:
            length = int(x.shape[1])
        elif leading.numel() % batch == 0:   # flattened [batch * seq, hidden] (OPT's MLP)
            length = leading.numel() // batch
        else:
            raise TokenAlignmentError(f"A hooked activation of shape {tuple(x.shape)} does not split into the "
                                      f"batch's {batch} examples; its positions cannot be matched to tokens.")
        key = (stack, length)
        if key not in self._cache:
            self._cache[key] = (self._decoder_weights(length) if stack == "decoder"
                                else self._encoder_weights(length))
        weights = self._cache[key]
        if weights is None:
            return None
        return weights.to(x.device).reshape(leading)

    def _encoder_weights(self, length: int) -> torch.Tensor | None:
        mask = self.inputs.get("attention_mask")
        mask = mask if isinstance(mask, torch.Tensor) and mask.dim() == 2 else None
        given = _sequence_length(self.inputs, ("input_ids", "inputs_embeds")) or \
            (int(mask.shape[1]) if mask is not None else None)
        if given is None or length == given:
            return mask
        real = mask if mask is not None else torch.ones(self.batch_size, given, dtype=torch.long)
        virtual = self.virtual
        if virtual is not None and virtual.in_activations and length == given + virtual.count:
            self._check_prepended(real, virtual)
            prompt = torch.full((real.shape[0], virtual.count), int(self.mode == "include"), dtype=real.dtype,
                                device=real.device)
            return torch.cat([prompt, real], dim=1)
        received = self.received.get("attention_mask")
        if self.mode == "include" and received is not None and int(received.shape[1]) == length:
            return received
        described = (f"PEFT {virtual.method} with {virtual.count} virtual tokens" if virtual is not None
                     else "a model that is not PEFT prompt learning")
        fix = ("pass virtual_tokens='include' to weight every position by the attention_mask the model itself "
               "received" if self.mode == "exclude" and received is not None and int(received.shape[1]) == length
               else "compute the means on a model that keeps the input's positions (e.g. the base model)")
        raise TokenAlignmentError(
            f"A hooked activation has {length} positions per example, but the batch has {given} tokens "
            f"({described}); which positions are real tokens is unknown, so their mean would be wrong. To fix: "
            f"{fix}, or use PruningConfig(ablation='zero').")

    def _check_prepended(self, real: torch.Tensor, virtual: VirtualTokens) -> None:
        """The backbone's own mask must be the user's with `count` ones in front, as PEFT builds it."""
        received = self.received.get("attention_mask")
        if received is None:
            return
        expected_length = real.shape[1] + virtual.count
        if int(received.shape[1]) != expected_length or not bool(
                (received[:, :virtual.count] != 0).all()) or not torch.equal(
                received[:, virtual.count:].to(real.device, real.dtype), real):
            raise TokenAlignmentError(
                f"PEFT {virtual.method}: the attention_mask the model received ({tuple(received.shape)}) is not the "
                f"batch's ({tuple(real.shape)}) with {virtual.count} virtual tokens in front, so the virtual "
                "positions cannot be located; this PEFT version places them differently. Compute the means on the "
                "base model, or use PruningConfig(ablation='zero').")

    def _decoder_weights(self, length: int) -> torch.Tensor | None:
        mask = self.inputs.get("decoder_attention_mask")
        if not isinstance(mask, torch.Tensor):
            mask = self.received.get("decoder_attention_mask")
        if isinstance(mask, torch.Tensor):
            if int(mask.shape[1]) != length:
                raise TokenAlignmentError(
                    f"Decoder activations have {length} positions but decoder_attention_mask has {mask.shape[1]}; "
                    "pass a decoder_attention_mask that matches decoder_input_ids.")
            return mask
        if self._has_padding():
            raise TokenAlignmentError(
                "Decoder-side activations of an encoder-decoder model need decoder_attention_mask to tell real "
                "decoder tokens from padding, and this batch is padded. Pass decoder_attention_mask (1 = real "
                "token) with the batch, or batches without padding.")
        return None

    def _has_padding(self) -> bool:
        mask = self.inputs.get("attention_mask")
        if isinstance(mask, torch.Tensor) and bool((mask == 0).any()):
            return True
        labels = self.inputs.get("labels")
        if isinstance(labels, torch.Tensor) and bool((labels == -100).any()):
            return True
        decoder_ids = self.inputs.get("decoder_input_ids")
        return (isinstance(decoder_ids, torch.Tensor) and self.pad_token_id is not None
                and bool((decoder_ids[:, 1:] == self.pad_token_id).any()))
