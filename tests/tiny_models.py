"""Tiny random Transformers models (2 layers, 4 heads, hidden 32) for every architecture the package maps.

`tiny_model(model_type, task=..., attn_implementation=..., seed=...)` builds a model from a config only (no download),
in eval mode, deterministic for a given seed. Also holds small helpers shared by the test modules (kept here rather than
in a conftest so the tests stay independent of other test files).
"""

from __future__ import annotations

import copy
import functools
import hashlib
import math

import pytest
import torch
import transformers
from transformers import AutoConfig, AutoModelForCausalLM, AutoModelForSequenceClassification
from transformers.monkey_patching import patch_output_recorders

from hf_heuristic_core import PrunableModel, PruningConfig
from shared_builds import module_once, shared_model_builds, switch_attention  # noqa: F401  (fixture)


@pytest.fixture(scope="module", autouse=False)
def one_torch_thread():
    """Tiny matmuls are dominated by thread hand-off costs (about 100x slower with 2 intra-op threads on a 2-core
    box, worse under pytest-xdist): run a module's tests single-threaded, then restore the previous setting."""
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(previous)

# The hard-concrete recipe's constants: stretch limits, temperature, epsilon (hand references of the mask tests).
L_LEFT, R_RIGHT, BETA, EPS = -0.1, 1.1, 2.0 / 3.0, 1e-6


def sigmoid(x: float) -> float:
    """A float's logistic sigmoid, for hand computations (no torch involved)."""
    return 1.0 / (1.0 + math.exp(-x))


def wrap(model, **config) -> PrunableModel:
    """`PrunableModel(model, PruningConfig(**config))`: the mask tests' one-line wrapper."""
    return PrunableModel(model, PruningConfig(**config))


def set_logits(pm: PrunableModel, heads=None, mlps=None) -> None:
    """Overwrite the head and/or MLP mask logits in place (no gradient), from nested lists or tensors."""
    with torch.no_grad():
        if heads is not None:
            pm.mask_logits.heads.copy_(torch.as_tensor(heads, dtype=torch.float32))
        if mlps is not None:
            pm.mask_logits.mlps.copy_(torch.as_tensor(mlps, dtype=torch.float32))


HIDDEN = 32
HEADS = 4
LAYERS = 2
INTERMEDIATE = 48
VOCAB = 99
PAD_ID = 0

MODEL_TYPES = ("bert", "roberta", "xlm-roberta", "electra", "distilbert", "mpnet", "gpt2", "gpt_neo", "gpt_neox", "opt",
               "llama", "mistral", "qwen2", "qwen3", "gemma", "phi3")

# Models without a sequence-classification head in Transformers are built as causal LMs.
CAUSAL_ONLY: set[str] = set()

_COMMON = dict(vocab_size=VOCAB, pad_token_id=PAD_ID, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)

# Models that can not be built with attn_implementation="sdpa" in this Transformers version.
EAGER_ONLY = {"mpnet", "gpt_neo"}

# Written from the Transformers modeling files, independently of hf_heuristic_core.ARCHITECTURES:
# (layer list under model.base_model, attention output projection, MLP output projection) per layer.
_BERT_SITES = ("encoder.layer", "attention.output.dense", "output.dense")
_LLAMA_SITES = ("layers", "self_attn.o_proj", "mlp.down_proj")
HOOK_SITES = {
    "bert": _BERT_SITES, "roberta": _BERT_SITES, "xlm-roberta": _BERT_SITES, "electra": _BERT_SITES,
    "distilbert": ("transformer.layer", "attention.out_lin", "ffn.lin2"),
    "mpnet": ("encoder.layer", "attention.attn.o", "output.dense"),
    "gpt2": ("h", "attn.c_proj", "mlp.c_proj"),
    "gpt_neo": ("h", "attn.attention.out_proj", "mlp.c_proj"),
    "gpt_neox": ("layers", "attention.dense", "mlp.dense_4h_to_h"),
    "opt": ("decoder.layers", "self_attn.out_proj", "fc2"),
    **{t: _LLAMA_SITES for t in ("llama", "mistral", "qwen2", "qwen3", "gemma", "phi3")},
}
# The width of one head's slice of the attention output projection's input.
HEAD_DIM = {t: HIDDEN // HEADS for t in HOOK_SITES} | {"qwen3": 16, "gemma": 12}


def config_kwargs(model_type: str, num_layers: int = LAYERS) -> dict:
    """Keyword arguments of `AutoConfig.for_model(model_type, **kwargs)` for the tiny version of `model_type`."""
    if model_type in ("bert", "roberta", "xlm-roberta", "electra", "mpnet"):
        kwargs = dict(_COMMON, hidden_size=HIDDEN, num_attention_heads=HEADS, num_hidden_layers=num_layers,
                      intermediate_size=INTERMEDIATE, max_position_embeddings=64, type_vocab_size=2)
        if model_type == "electra":
            kwargs["embedding_size"] = HIDDEN
        if model_type in ("roberta", "xlm-roberta", "mpnet"):
            kwargs["pad_token_id"] = 1  # position ids start after the padding index
        return kwargs
    if model_type == "distilbert":
        return dict(vocab_size=VOCAB, pad_token_id=PAD_ID, dim=HIDDEN, n_heads=HEADS, n_layers=num_layers,
                    hidden_dim=INTERMEDIATE, dropout=0.0, attention_dropout=0.0, seq_classif_dropout=0.0,
                    max_position_embeddings=64)
    if model_type == "gpt2":
        return dict(vocab_size=VOCAB, pad_token_id=PAD_ID, bos_token_id=1, eos_token_id=2, n_embd=HIDDEN, n_head=HEADS,
                    n_layer=num_layers,
                    n_inner=INTERMEDIATE, n_positions=64, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    if model_type == "gpt_neo":
        return dict(vocab_size=VOCAB, pad_token_id=PAD_ID, hidden_size=HIDDEN, num_heads=HEADS, num_layers=num_layers,
                    intermediate_size=INTERMEDIATE, attention_types=[[["global", "local"], max(1, num_layers // 2)]]
                    if num_layers % 2 == 0 else [[["global"], num_layers]], window_size=4,
                    max_position_embeddings=64, resid_dropout=0.0, embed_dropout=0.0, attention_dropout=0.0)
    if model_type == "gpt_neox":
        return dict(vocab_size=VOCAB, pad_token_id=PAD_ID, hidden_size=HIDDEN, num_attention_heads=HEADS,
                    num_hidden_layers=num_layers, intermediate_size=INTERMEDIATE, max_position_embeddings=64,
                    hidden_dropout=0.0, attention_dropout=0.0)
    if model_type == "opt":
        return dict(vocab_size=VOCAB, pad_token_id=PAD_ID, hidden_size=HIDDEN, num_attention_heads=HEADS,
                    num_hidden_layers=num_layers, ffn_dim=INTERMEDIATE, word_embed_proj_dim=HIDDEN,
                    max_position_embeddings=64, dropout=0.0, attention_dropout=0.0, activation_dropout=0.0)
    if model_type in ("llama", "mistral", "qwen2", "qwen3", "gemma", "phi3"):
        kwargs = dict(vocab_size=VOCAB, pad_token_id=PAD_ID, hidden_size=HIDDEN, num_attention_heads=HEADS,
                      num_hidden_layers=num_layers, intermediate_size=INTERMEDIATE, num_key_value_heads=2,
                      max_position_embeddings=64, attention_dropout=0.0)
        if model_type == "gemma":
            kwargs.update(num_key_value_heads=1, head_dim=12)
        if model_type == "qwen3":
            kwargs.update(head_dim=16)
        if model_type in ("mistral", "qwen2", "qwen3"):
            kwargs.update(sliding_window=None)
        if model_type == "phi3":
            kwargs.update(resid_pdrop=0.0, embd_pdrop=0.0, original_max_position_embeddings=64, bos_token_id=1,
                          eos_token_id=2)
        return kwargs
    raise KeyError(f"no tiny config for model_type {model_type!r}")


# Larger than the usual 0.02, so that ablating one head visibly moves the logits of a 2-layer model.
INIT_STD = 0.15


def tiny_config(model_type: str, num_layers: int = LAYERS, **overrides):
    init = {"init_std" if model_type == "opt" else "initializer_range": INIT_STD}
    return AutoConfig.for_model(model_type, **{**init, **config_kwargs(model_type, num_layers), **overrides})


def tiny_model(model_type: str, task: str = "seq_cls", attn_implementation: str = "eager", seed: int = 0,
               num_layers: int = LAYERS, dtype: torch.dtype | None = None, **overrides):
    """A tiny random model of `model_type` in eval mode. `task`: "seq_cls" (3 labels) or "causal_lm".

    Models are built once per argument set (once per session where a module requests `shared_model_builds`) and
    deep-copied, so every call returns a fresh, unshared model."""
    key = (model_type, task, attn_implementation, seed, num_layers, dtype, tuple(sorted(overrides.items())))
    return copy.deepcopy(_pristine(key))


@functools.lru_cache(maxsize=None)
def _pristine(key):
    """Built once per session (`shared_builds.module_once`); a non-eager attention implementation is set on a copy
    of the eager build where transformers can switch it (`shared_builds.switch_attention`), else built."""
    model_type, task, attn_implementation, seed, num_layers, dtype, overrides = key
    if attn_implementation != "eager":
        model = copy.deepcopy(_pristine((model_type, task, "eager", *key[3:])))
        if switch_attention(model, attn_implementation):
            return model
    name = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
    model = module_once(f"tiny-{model_type}-{name}",
                        lambda: _build(model_type, task, attn_implementation, seed, num_layers, dtype,
                                       **dict(overrides)))
    patch_output_recorders(model)   # what from_config did to it, also where it was loaded
    return model


def _build(model_type, task, attn_implementation, seed, num_layers, dtype, **overrides):
    config = tiny_config(model_type, num_layers, **overrides)
    if task == "seq_cls" and model_type not in CAUSAL_ONLY:
        config.num_labels = 3
        auto = AutoModelForSequenceClassification
    elif task in ("causal_lm", "seq_cls"):
        auto = AutoModelForCausalLM
    else:
        raise ValueError(f"unknown task {task!r}")
    torch.manual_seed(seed)
    kwargs = {"attn_implementation": attn_implementation}
    if dtype is not None:
        kwargs["dtype"] = dtype
    model = auto.from_config(config, **kwargs)
    _randomize_norms(model, seed)
    model.eval()
    return model


def _randomize_norms(model: torch.nn.Module, seed: int) -> None:
    """Give biases and norm weights non-trivial values (fresh models initialize many of them to 0/1), so a bug
    that drops a bias or a mean term can not hide behind a zero."""
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or "norm" in name.lower() or "ln_" in name:
                parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator, dtype=torch.float32)
                               .to(parameter.dtype))


def supports_sdpa(model_type: str) -> bool:
    """Whether the model class can be built with attn_implementation='sdpa'."""
    try:
        tiny_model(model_type, attn_implementation="sdpa")
    except (ValueError, ImportError):
        return False
    return True


def layers_of(model, model_type: str):
    base = model.get_base_model() if hasattr(model, "get_base_model") else model
    return list(base.base_model.get_submodule(HOOK_SITES[model_type][0]))


def attention_output(model, model_type: str, layer: int) -> torch.nn.Module:
    return layers_of(model, model_type)[layer].get_submodule(HOOK_SITES[model_type][1])


def mlp_output(model, model_type: str, layer: int) -> torch.nn.Module:
    return layers_of(model, model_type)[layer].get_submodule(HOOK_SITES[model_type][2])


def hooked_modules(model, model_type: str) -> list[torch.nn.Module]:
    n = len(layers_of(model, model_type))
    return [attention_output(model, model_type, i) for i in range(n)] + [mlp_output(model, model_type, i)
                                                                         for i in range(n)]


def make_batch(model_type: str, batch_size: int = 3, seq_len: int = 7, padding: str = "right", seed: int = 0,
               lengths: list[int] | None = None) -> dict[str, torch.Tensor]:
    """Random token ids with an attention mask; examples have different lengths (padded `padding`-side)."""
    generator = torch.Generator().manual_seed(seed)
    pad_id = config_kwargs(model_type).get("pad_token_id", PAD_ID)
    low = 3  # avoid special/padding ids
    input_ids = torch.randint(low, VOCAB, (batch_size, seq_len), generator=generator)
    if lengths is None:
        lengths = [seq_len - (i % 3) * 2 for i in range(batch_size)]
    attention_mask = torch.zeros(batch_size, seq_len, dtype=torch.long)
    for i, length in enumerate(lengths):
        if padding == "right":
            attention_mask[i, :length] = 1
        elif padding == "left":
            attention_mask[i, seq_len - length:] = 1
        else:
            raise ValueError(padding)
    input_ids = input_ids.masked_fill(attention_mask == 0, pad_id)
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def logits_of(model, batch) -> torch.Tensor:
    with torch.no_grad():
        return model(**batch).logits


def is_conv1d(module: torch.nn.Module) -> bool:
    return type(module).__name__ == "Conv1D"


def linear_weight_in_out(module: torch.nn.Module) -> torch.Tensor:
    """The projection's weight as [out, in] (a view for Linear; a transposed view for GPT-2's Conv1D)."""
    return module.weight.t() if is_conv1d(module) else module.weight


# ---------------------------------------------------------------- independent references (weight edits, own hooks)
def _weight(module: torch.nn.Module) -> torch.Tensor:
    return module.weight


@torch.no_grad()
def zero_head_inputs(module: torch.nn.Module, heads, head_dim: int) -> None:
    """Zero the input columns of `heads` of a projection (rows for GPT-2's Conv1D, whose weight is [in, out])."""
    for head in heads:
        cols = slice(head * head_dim, (head + 1) * head_dim)
        if is_conv1d(module):
            module.weight[cols, :] = 0
        else:
            module.weight[:, cols] = 0


def _ensure_bias(module: torch.nn.Module) -> torch.Tensor:
    if getattr(module, "bias", None) is None:
        out = module.weight.shape[1] if is_conv1d(module) else module.weight.shape[0]
        module.bias = torch.nn.Parameter(torch.zeros(out, dtype=module.weight.dtype, device=module.weight.device),
                                         requires_grad=False)
    return module.bias


@torch.no_grad()
def mean_ablate_head_by_weights(module: torch.nn.Module, head: int, head_dim: int, mu: torch.Tensor) -> None:
    """Make `module` behave as if head `head`'s input slice were the constant `mu`: zero the slice's columns and
    add their contribution W[:, cols] @ mu to the bias (a bias is created when the projection has none)."""
    cols = slice(head * head_dim, (head + 1) * head_dim)
    bias = _ensure_bias(module)
    w = module.weight.double()
    contribution = (mu.double() @ w[cols, :]) if is_conv1d(module) else (w[:, cols] @ mu.double())
    bias.add_(contribution.to(bias.dtype))
    zero_head_inputs(module, [head], head_dim)


@torch.no_grad()
def constant_output(module: torch.nn.Module, value: torch.Tensor) -> None:
    """Make a projection output the constant `value` whatever its input (weight 0, bias = value)."""
    module.weight.zero_()
    bias = _ensure_bias(module)
    bias.copy_(value.to(bias.dtype))


def real_token_means(model, head_inputs, mlp_outputs, batches, positions=None) -> tuple[torch.Tensor, torch.Tensor]:
    """fp64 means over the positions whose attention_mask is 1 (or that `positions(batch, first head input)`
    selects), by own hooks (never the package's): the inputs of `head_inputs` and the outputs of `mlp_outputs` (one
    module per layer each), as [layers, width]. The model runs in whatever mode it is in, without gradients."""
    seen: dict[str, list] = {"heads": [], "mlps": []}
    handles = [module.register_forward_pre_hook(lambda m, a: seen["heads"].append(a[0])) for module in head_inputs]
    handles += [module.register_forward_hook(lambda m, a, out: seen["mlps"].append(out)) for module in mlp_outputs]
    sums, count = {"heads": 0.0, "mlps": 0.0}, 0.0
    try:
        with torch.no_grad():
            for batch in batches:
                seen["heads"].clear()
                seen["mlps"].clear()
                model(**batch)
                keep = (batch["attention_mask"] if positions is None else positions(batch, seen["heads"][0])).bool()
                for kind, total in sums.items():
                    sums[kind] = total + torch.stack([x[keep].double().sum(0) for x in seen[kind]])
                count += float(keep.sum())
    finally:
        for handle in handles:
            handle.remove()
    return sums["heads"] / count, sums["mlps"] / count


class ManualMeans:
    """Own hooks on a model's projections: fp64 sums of the attention output projections' inputs and the MLP output
    projections' outputs over the positions whose attention_mask is 1."""

    def __init__(self, model, model_type: str) -> None:
        self.model, self.model_type = model, model_type
        self.n = len(layers_of(model, model_type))
        self.head_sums = [0.0] * self.n
        self.mlp_sums = [0.0] * self.n
        self.count = 0
        self.mask = None

    def _weights(self, x):
        if self.mask is None:
            return torch.ones(x.shape[:-1], dtype=torch.float64)
        return self.mask.reshape(x.shape[:-1]).double()

    @torch.no_grad()
    def run(self, batches):
        handles = []
        for i in range(self.n):
            def pre(module, args, i=i):
                x = args[0].double()
                self.head_sums[i] = self.head_sums[i] + (x * self._weights(x).unsqueeze(-1)).reshape(-1, x.shape[-1]).sum(0)

            def post(module, args, output, i=i):
                y = output.double()  # OPT's fc2 sees [batch * seq, hidden]
                self.mlp_sums[i] = self.mlp_sums[i] + (y * self._weights(y).unsqueeze(-1)).reshape(-1, y.shape[-1]).sum(0)
            handles.append(attention_output(self.model, self.model_type, i).register_forward_pre_hook(pre))
            handles.append(mlp_output(self.model, self.model_type, i).register_forward_hook(post))
        try:
            for batch in batches:
                self.mask = batch.get("attention_mask")
                self.count += int(self.mask.sum()) if self.mask is not None else batch["input_ids"].numel()
                self.model(**batch)
        finally:
            for handle in handles:
                handle.remove()
        return self

    def heads(self) -> torch.Tensor:
        """[num_layers, num_heads, head_dim] in fp64."""
        return torch.stack([s / self.count for s in self.head_sums]).view(self.n, HEADS, -1)

    def mlps(self) -> torch.Tensor:
        return torch.stack([s / self.count for s in self.mlp_sums])


__all__ = ["BETA", "EPS", "L_LEFT", "R_RIGHT", "set_logits", "sigmoid", "wrap", "one_torch_thread", "real_token_means", "zero_head_inputs", "mean_ablate_head_by_weights", "constant_output", "ManualMeans","MODEL_TYPES", "EAGER_ONLY", "HOOK_SITES", "HEAD_DIM", "layers_of", "attention_output", "mlp_output",
           "hooked_modules", "tiny_model", "tiny_config", "config_kwargs", "make_batch", "logits_of", "supports_sdpa",
           "is_conv1d", "linear_weight_in_out", "transformers"]


def tiny_bert_classifier(seed: int = 0, *, num_labels: int = 3, dropout: float = 0.0, layers: int = LAYERS,
                         vocab: int = VOCAB) -> transformers.BertForSequenceClassification:
    """The effective-size tests' BERT classifier (intermediate 37, so MLP and head sizes differ), in eval mode."""
    config = transformers.BertConfig(vocab_size=vocab, hidden_size=HIDDEN, num_attention_heads=HEADS,
                                     num_hidden_layers=layers, intermediate_size=37, max_position_embeddings=64,
                                     num_labels=num_labels, hidden_dropout_prob=dropout,
                                     attention_probs_dropout_prob=dropout, initializer_range=0.2)
    torch.manual_seed(seed)
    return transformers.BertForSequenceClassification(config).eval()


def second_token_labels(size: int, seed: int, num_labels: int = 3):
    """Random token sequences (unpadded, ids >= 1) labeled by their second token, so accuracy is learnable."""
    import datasets
    generator = torch.Generator().manual_seed(seed)
    rows: dict[str, list] = {"input_ids": [], "labels": []}
    for _ in range(size):
        length = int(torch.randint(4, 12, (1,), generator=generator))
        ids = torch.randint(1, VOCAB, (length,), generator=generator).tolist()
        rows["input_ids"].append(ids)
        rows["labels"].append(ids[1] % num_labels)
    return datasets.Dataset.from_dict(rows)


def skip_unless_peft_prefix_tuning_runs(model: torch.nn.Module, batch: dict) -> None:
    """Skip when PEFT itself cannot run prefix tuning on `model` (no library code involved).

    Transformers 5.24 renamed the models' `past_key_values` argument to `cache`; PEFT (0.21.x) still looks for
    `past_key_values` in the encoder body's signature and refuses prefix tuning of encoder classifiers with
    "Model does not support past key values". Nothing can be masked on a path that cannot run at all.
    """
    import pytest

    try:
        with torch.no_grad():
            model(**batch)
    except ValueError as error:
        if "past key values" not in str(error):
            raise
        pytest.skip(f"PEFT cannot run prefix tuning on this model with this transformers version: {error}")


# A model with a known answer: these heads and MLP blocks carry almost nothing.
WEAK_HEADS = [(0, 0), (0, 2), (1, 1), (1, 3), (2, 0), (2, 1), (3, 2), (3, 3)]
WEAK_MLPS = [1, 2]


def planted_bert() -> transformers.BertForSequenceClassification:
    """A 4x4 BERT classifier whose WEAK_HEADS and WEAK_MLPS barely matter (output weights x0.01): a subnetwork with
    a known answer for mask learning."""
    config = transformers.BertConfig(vocab_size=99, hidden_size=32, num_attention_heads=4, num_hidden_layers=4,
                                     intermediate_size=48, max_position_embeddings=64, num_labels=3,
                                     hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0, initializer_range=0.2)
    torch.manual_seed(0)
    model = transformers.BertForSequenceClassification(config).eval()
    with torch.no_grad():
        for layer, head in WEAK_HEADS:
            model.bert.encoder.layer[layer].attention.output.dense.weight[:, head * 8:(head + 1) * 8] *= 0.01
        for layer in WEAK_MLPS:
            model.bert.encoder.layer[layer].output.dense.weight *= 0.01
            model.bert.encoder.layer[layer].output.dense.bias *= 0.01
    return model
