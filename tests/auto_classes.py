"""Every head class Transformers registers for every model type in the architecture map, as tiny random models.

The rows come from transformers' own auto-class mappings (`MODEL_MAPPING_NAMES`, `MODEL_FOR_CAUSAL_LM_MAPPING_NAMES`,
...) intersected with `hf_heuristic_core.ARCHITECTURES`: adding a model type to the map adds its rows, with no
edit here. A config is shrunk by the size names in `SIZES` (those the model type's config has); the few model types
whose config needs more than that are in `CONFIG_FIXES`. A model type that these cannot make tiny fails
`tiny_config` with a message saying so, rather than building a full-size model.

Where a mask applies is taken from the architecture map's paths by this file's own walk (`sites`), never from the
package's resolver: the tests built on it check that masks reach those sites on every path a forward takes.
"""

from __future__ import annotations

import copy
import functools
import inspect
from collections.abc import Mapping
from dataclasses import dataclass

import pytest
import torch
import transformers
from torch import nn
from transformers import AutoConfig
from transformers.models.auto import modeling_auto
from transformers.monkey_patching import patch_output_recorders

from hf_heuristic_core import ARCHITECTURES
from shared_builds import module_once, shared_model_builds, switch_attention

# Task name -> the auto-class mapping that registers it.
TASKS = {
    "base": "MODEL_MAPPING_NAMES",
    "causal_lm": "MODEL_FOR_CAUSAL_LM_MAPPING_NAMES",
    "masked_lm": "MODEL_FOR_MASKED_LM_MAPPING_NAMES",
    "seq2seq_lm": "MODEL_FOR_SEQ_TO_SEQ_CAUSAL_LM_MAPPING_NAMES",
    "seq_cls": "MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES",
    "token_cls": "MODEL_FOR_TOKEN_CLASSIFICATION_MAPPING_NAMES",
    "qa": "MODEL_FOR_QUESTION_ANSWERING_MAPPING_NAMES",
    "multiple_choice": "MODEL_FOR_MULTIPLE_CHOICE_MAPPING_NAMES",
    "pretraining": "MODEL_FOR_PRETRAINING_MAPPING_NAMES",
    "next_sentence": "MODEL_FOR_NEXT_SENTENCE_PREDICTION_MAPPING_NAMES",
    "text_encoding": "MODEL_FOR_TEXT_ENCODING_MAPPING_NAMES",
}
GENERATIVE = {"causal_lm", "seq2seq_lm"}

VOCAB, HIDDEN, HEADS, LAYERS, INTERMEDIATE, HEAD_DIM = 99, 32, 4, 2, 48, 8
# Config names of sizes, per meaning; each model type's config takes the ones it has.
SIZES = {
    **dict.fromkeys(("hidden_size", "d_model", "n_embd", "dim", "embedding_size", "word_embed_proj_dim"), HIDDEN),
    **dict.fromkeys(("num_attention_heads", "n_head", "num_heads", "n_heads", "encoder_attention_heads",
                     "decoder_attention_heads"), HEADS),
    **dict.fromkeys(("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers",
                     "num_decoder_layers"), LAYERS),
    **dict.fromkeys(("intermediate_size", "ffn_dim", "encoder_ffn_dim", "decoder_ffn_dim", "d_ff", "n_inner",
                     "hidden_dim"), INTERMEDIATE),
    "num_key_value_heads": 2, "head_dim": HEAD_DIM, "d_kv": HEAD_DIM,
    "vocab_size": VOCAB, "max_position_embeddings": 64, "n_positions": 64, "type_vocab_size": 2,
    "initializer_range": 0.15, "init_std": 0.15,
}
# Special tokens outside the tiny vocabulary are moved into it; random input tokens are drawn above FIRST_TOKEN.
SPECIAL_IDS = {"pad_token_id": 0, "bos_token_id": 1, "eos_token_id": 2, "decoder_start_token_id": 0}
FIRST_TOKEN = 5
# Model types whose config validates more than sizes (one line each, only where `SIZES` is not enough).
CONFIG_FIXES = {"gpt_neo": {"attention_types": [[["global", "local"], LAYERS // 2]]}}
MAX_PARAMETERS = 300_000


@dataclass(frozen=True)
class Row:
    """One head class of one model type, and the tasks it is registered for."""

    model_type: str
    class_name: str
    tasks: frozenset

    @property
    def id(self) -> str:
        return f"{self.model_type}-{self.class_name}"

    @property
    def generative(self) -> bool:
        return bool(self.tasks & GENERATIVE)


def rows() -> list[Row]:
    """Every (model type in the map, class registered for it), in a fixed order."""
    found: dict[tuple[str, str], set] = {}
    for model_type in sorted(ARCHITECTURES):
        for task, mapping_name in TASKS.items():
            names = getattr(modeling_auto, mapping_name, {}).get(model_type)
            for name in ([names] if isinstance(names, str) else list(names or ())):
                if hasattr(transformers, name):
                    found.setdefault((model_type, name), set()).add(task)
    return [Row(t, name, frozenset(tasks)) for (t, name), tasks in found.items()]


def model_types() -> list[str]:
    return sorted({row.model_type for row in rows()})


@functools.lru_cache(maxsize=None)
def tiny_config(model_type: str):
    defaults = AutoConfig.for_model(model_type)
    names = set(defaults.to_dict()) | set(getattr(defaults, "attribute_map", {}))
    kwargs = {name: value for name, value in SIZES.items() if name in names}
    for name, value in defaults.to_dict().items():
        if name.endswith("token_id") and isinstance(value, int) and not 0 <= value < FIRST_TOKEN:
            kwargs[name] = SPECIAL_IDS.get(name, SPECIAL_IDS["eos_token_id"])
        if ("dropout" in name or "pdrop" in name) and isinstance(value, float):
            kwargs[name] = 0.0
    if getattr(defaults, "pad_token_id", None) is None:
        kwargs["pad_token_id"] = SPECIAL_IDS["pad_token_id"]
    if getattr(defaults, "is_encoder_decoder", False) and getattr(defaults, "decoder_start_token_id", None) is None:
        kwargs["decoder_start_token_id"] = kwargs.get("pad_token_id", defaults.pad_token_id)
    kwargs.update(CONFIG_FIXES.get(model_type, {}))
    config = AutoConfig.for_model(model_type, **kwargs)
    with torch.device("meta"):
        size = sum(p.numel() for p in getattr(transformers, modeling_auto.MODEL_MAPPING_NAMES[model_type])(
            copy.deepcopy(config)).parameters())
    if size > MAX_PARAMETERS:
        raise AssertionError(f"{model_type}: the tiny config still builds {size} parameters; add its size names to "
                             "SIZES (or a line to CONFIG_FIXES) in tests/auto_classes.py.")
    return config


def build(row: Row, attn_implementation: str | None = None) -> nn.Module:
    """A fresh tiny model of the row's class in eval mode (built once per session, deep-copied per call);
    `attn_implementation="eager"` where attention weights are needed."""
    return copy.deepcopy(_pristine(row, attn_implementation))


@functools.lru_cache(maxsize=None)
def _pristine(row: Row, attn_implementation: str | None = None) -> nn.Module:
    """The row's model, built once per session (`shared_builds.module_once`); another attention implementation is
    set on a copy of that build where transformers can switch it (`shared_builds.switch_attention`), and built where
    it cannot."""
    if attn_implementation is not None:
        model = copy.deepcopy(_pristine(row))
        if switch_attention(model, attn_implementation):
            return model
        model = module_once(f"auto-class-{row.id}-{attn_implementation}", lambda: _construct(row, attn_implementation))
    else:
        model = module_once(f"auto-class-{row.id}", lambda: _construct(row))
    # what from_pretrained / from_config do to every model (they retarget the output recorders); a
    # directly constructed or loaded model gets the same, so no row depends on what the process built before it
    patch_output_recorders(model)
    return model


def _construct(row: Row, attn_implementation: str | None = None) -> nn.Module:
    config = copy.deepcopy(tiny_config(row.model_type))
    if "multiple_choice" in row.tasks or "seq_cls" in row.tasks or "token_cls" in row.tasks:
        config.num_labels = 3
    if row.tasks & {"causal_lm"} and not getattr(config, "is_encoder_decoder", False):
        config.is_decoder = True
    if attn_implementation is not None:
        config._attn_implementation = attn_implementation
    torch.manual_seed(0)
    model = getattr(transformers, row.class_name)(config)
    generator = torch.Generator().manual_seed(1)
    with torch.no_grad():   # biases and norms away from 0 / 1, so that nothing hides behind a zero
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower() or "ln_" in name:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator))
    return model.eval()


# ---------------------------------------------------------------------------------------------------- inputs
def is_two_stack(model: nn.Module) -> bool:
    """An encoder-decoder model holding both stacks (not `T5EncoderModel`, not `BartForCausalLM`)."""
    return bool(getattr(model.config, "is_encoder_decoder", False)) and len(sites(model)) > 1 \
        and all(stack in sites(model) for stack in ("encoder", "decoder"))


def accepts(model: nn.Module, name: str, strict: bool = False) -> bool:
    """Whether `model.forward` takes `name` (with `strict`, only as a named parameter, not through **kwargs)."""
    parameters = inspect.signature(model.forward).parameters
    return name in parameters or (not strict and any(p.kind == inspect.Parameter.VAR_KEYWORD
                                                     for p in parameters.values()))


def inputs_for(model: nn.Module, row: Row, batch: int = 3, length: int = 7, seed: int = 0,
               padded: bool = True) -> dict[str, torch.Tensor]:
    """A batch the row's class takes. Single-stack models: right-padded rows of different lengths; encoder-decoder
    models: unpadded rows ending in </s> (BART-style classifiers need the same number of </s> in every row) and
    decoder inputs; multiple choice: `[batch, 2, length]`."""
    generator = torch.Generator().manual_seed(seed)
    config = model.config
    two_stack = is_two_stack(model)
    ids = torch.randint(FIRST_TOKEN, VOCAB, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    if padded and not two_stack:
        for i in range(batch):
            mask[i, length - 2 * (i % 3):] = 0
        ids = ids.masked_fill(mask == 0, config.pad_token_id)
    if two_stack:
        ids[:, -1] = config.eos_token_id
    inputs = {"input_ids": ids, "attention_mask": mask}
    if "multiple_choice" in row.tasks:
        inputs = {k: torch.stack([v, v.roll(1, dims=1)], dim=1) for k, v in inputs.items()}
    if two_stack and accepts(model, "decoder_input_ids") and "seq_cls" not in row.tasks:
        # (BART-style classifiers read the decoder's state at the input's </s>: they build their own decoder inputs)
        decoder = torch.randint(FIRST_TOKEN, VOCAB, (batch, 5), generator=generator)
        decoder[:, 0] = config.decoder_start_token_id
        inputs["decoder_input_ids"] = decoder
    return inputs


# ---------------------------------------------------------------------------------------------------- outputs
# Every optional output a head class can return.
OUTPUT_FLAGS = {"output_hidden_states": True, "output_attentions": True}


def output_fields(output) -> dict[str, tuple[str, int | None]]:
    """Each field of a model output that is set: its type, and for tuples their length."""
    return {key: (type(value).__name__, len(value) if isinstance(value, tuple) else None)
            for key, value in output.items() if value is not None}


def first_of_each_fast(selected: list[Row]) -> list:
    """`selected` as pytest params: one head class per model type (its first) in the default run, the rest slow."""
    first = {row.model_type: row for row in reversed(selected)}
    return [pytest.param(row, id=row.id, marks=() if first[row.model_type] == row else pytest.mark.slow)
            for row in selected]


# ---------------------------------------------------------------------------------------------------- sites
def hf_model(model: nn.Module) -> nn.Module:
    return model.get_base_model() if hasattr(model, "get_base_model") else model


def _modules(layers: list[nn.Module], path: str | None) -> list[nn.Module]:
    return [layer.get_submodule(path) for layer in layers] if path else []


def _stacks(model: nn.Module) -> tuple[nn.Module, nn.Module, list[tuple[str, object]]]:
    """The Transformers model (under a PEFT wrapper), its body, and the map's paths per stack it may hold."""
    inner = hf_model(model)
    paths = ARCHITECTURES[inner.config.model_type]
    stacks = [("", paths)] if paths.decoder is None else [("encoder", paths), ("decoder", paths.decoder)]
    return inner, inner.base_model, stacks


def sites(model: nn.Module) -> dict[str, dict[str, list[nn.Module]]]:
    """Per stack present ("" for single-stack models, "encoder" / "decoder"), the modules whose input carries
    the heads ("attention", "cross") and the MLP output projections ("mlp"), from the map's paths."""
    inner, base, stacks = _stacks(model)
    found = {}
    for name, stack in stacks:
        try:
            layers = list(base.get_submodule(stack.layers))
        except AttributeError:
            continue
        cross = _modules(layers, stack.cross_attention_output) \
            if (name == "decoder" and ("encoder" in found or getattr(inner.config, "add_cross_attention", False))) \
            else []
        found[name] = {"attention": _modules(layers, stack.attention_output), "cross": cross,
                       "mlp": _modules(layers, stack.mlp_output)}
    return found


def stack_modules(model: nn.Module) -> dict[str, nn.Module]:
    """Per stack, the module that holds its layer list (the encoder or decoder stack, or the body itself)."""
    _, base, stacks = _stacks(model)
    found = {}
    for name, stack in stacks:
        holder = stack.layers.rsplit(".", 1)[0] if "." in stack.layers else ""
        try:
            base.get_submodule(stack.layers)
        except AttributeError:
            continue
        found[name] = base.get_submodule(holder) if holder else base
    return found


class SiteProbe:
    """Independent hooks on the map's sites (register them after wrapping): the largest absolute value each site's
    masked value had, per call. Heads and cross-attention heads: the output projection's input; MLP blocks: the
    output projection's output (`mlp_where="input"`: its input, where neurons are masked)."""

    def __init__(self, model: nn.Module, roles: tuple[str, ...] = ("attention", "cross", "mlp"),
                 mlp_where: str = "output") -> None:
        self.seen: dict[tuple, list[float]] = {}
        self.handles = []
        for stack, found in sites(model).items():
            for role in roles:
                for layer, module in enumerate(found[role]):
                    key = (stack, role, layer)
                    if role == "mlp" and mlp_where == "output":
                        self.handles.append(module.register_forward_hook(
                            lambda m, a, out, key=key: self._record(key, out)))
                    else:
                        self.handles.append(module.register_forward_pre_hook(
                            lambda m, a, key=key: self._record(key, a[0])))

    def _record(self, key: tuple, value: torch.Tensor) -> None:
        self.seen.setdefault(key, []).append(float(value.detach().abs().max()))

    @staticmethod
    def expected(model: nn.Module, stacks: set[str] | None = None,
                 roles: tuple[str, ...] = ("attention", "cross", "mlp")) -> set[tuple]:
        """The (stack, role, layer) keys a call reaching `stacks` (all when None) must record."""
        return {(stack, role, layer) for stack, found in sites(model).items() if stacks is None or stack in stacks
                for role in roles for layer in range(len(found[role]))}

    def nonzero(self) -> dict[tuple, float]:
        return {key: max(values) for key, values in self.seen.items() if max(values) != 0}

    def clear(self) -> None:
        self.seen.clear()

    def remove(self) -> None:
        for handle in self.handles:
            handle.remove()


def set_all_masks(prunable, value: float) -> None:
    """Fixed masks of `value` (0: every unit ablated, 1: every unit kept) for every mask kind of the wrapper."""
    prunable.set_masks({kind: torch.full(shape, float(value)) for kind, shape in prunable.mask_shapes().items()})


def tensors(output) -> list[torch.Tensor]:
    """Every tensor a model output holds (nested tuples included; cache objects skipped), in order."""
    if isinstance(output, torch.Tensor):
        return [output]
    if isinstance(output, Mapping):
        values = list(output.values())
    elif isinstance(output, (list, tuple)):
        values = list(output)
    else:
        return []
    return [tensor for value in values for tensor in tensors(value)]


def first_float(output) -> torch.Tensor:
    return next(t for t in tensors(output) if t.is_floating_point())


__all__ = ["GENERATIVE", "OUTPUT_FLAGS", "Row", "SiteProbe", "TASKS", "accepts", "build", "first_float", "first_of_each_fast",
           "output_fields", "hf_model", "inputs_for",
           "is_two_stack", "model_types", "rows", "set_all_masks", "shared_model_builds", "sites", "stack_modules",
           "tensors", "tiny_config"]
