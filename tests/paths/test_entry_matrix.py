"""Masks on every path a forward takes, for every head class of every model type in the architecture map.

The rows come from transformers' auto-class mappings (`tests/auto_classes.py`): a model type added to the map adds
its rows here. Every check uses hooks registered *after* wrapping, on the sites the map names, walked by the test
itself: with every unit zero-ablated, every attention output projection's input (heads) and every MLP output
projection's output (blocks) must be exactly 0 on every entry (the wrapper, the Transformers model called directly,
its body, each stack called on its own) and, for generative classes, in every step of `generate()` (the wrapper's and
the model's own); with all-ones masks the outputs and generated tokens are bit-identical to the unwrapped model's.
The same for neurons (the MLP output projection's input) and weights (the parametrized projection's output is its
bias). A stock `Trainer` step (mask logits get gradients, with gradient checkpointing where the model supports it),
a LoRA-wrapped forward, `compute_means` and resample ablation run through every head class too.

The default run covers every row for unit masks on every entry and in `generate()`, and all-ones identity (the fast
core); the other checks are marked slow (CI runs them). Models are built once per session (`auto_classes.build`).
"""

from __future__ import annotations

import copy
import functools

import pytest
import torch
import transformers

from auto_classes import (SiteProbe, accepts, build, first_float, hf_model, inputs_for, is_two_stack, rows,
                          set_all_masks, shared_model_builds, sites, stack_modules, tensors)  # noqa: F401  (fixture)
from hf_heuristic_core import PrunableModel, PruningConfig
from tiny_models import one_torch_thread  # noqa: F401  (fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread", "shared_model_builds")

ROWS = rows()
ROW_IDS = [row.id for row in ROWS]
GENERATION = {"max_new_tokens": 3, "do_sample": False}


# ---------------------------------------------------------------------------------------------------- helpers
def _zero(prunable: PrunableModel) -> None:
    set_all_masks(prunable, 0)


def _ones(prunable: PrunableModel) -> None:
    set_all_masks(prunable, 1)


def _generation_inputs(model, row) -> dict:
    inputs = inputs_for(model, row, padded=False)
    return {k: v for k, v in inputs.items() if k in ("input_ids", "attention_mask")}


@functools.lru_cache(maxsize=None)
def _unwrapped(row) -> tuple[list[torch.Tensor], torch.Tensor | None]:
    """The unwrapped model's outputs on `inputs_for(row)` and, for generative classes, its greedy tokens: the
    reference of every all-ones check, computed once per row on a copy of its own."""
    model = build(row)
    with torch.no_grad():
        outputs = tensors(model(**inputs_for(model, row)))
    tokens = model.generate(**_generation_inputs(model, row), **GENERATION,
                            pad_token_id=model.config.pad_token_id) if row.generative else None
    return outputs, tokens


def _bit_identical(got, row) -> bool:
    expected = _unwrapped(row)[0]
    got = tensors(got)
    return len(got) == len(expected) and all(torch.equal(a, b) for a, b in zip(got, expected))


def _stack_inputs(model, stack: str, module, inputs: dict) -> dict:
    """Arguments for calling one stack on its own: token ids where it takes them, else hidden states; a decoder
    stack of an encoder-decoder model also gets encoder states."""
    hidden = model.config.get_text_config().hidden_size if hasattr(model.config, "get_text_config") \
        else model.config.hidden_size
    ids = inputs["input_ids"].reshape(-1, inputs["input_ids"].shape[-1])
    mask = inputs["attention_mask"].reshape(-1, ids.shape[-1])
    if stack == "decoder" and is_two_stack(model):
        decoder_ids = inputs.get("decoder_input_ids", ids)
        states = torch.randn(ids.shape[0], ids.shape[1], hidden, generator=torch.Generator().manual_seed(5))
        return {"input_ids": decoder_ids, "encoder_hidden_states": states, "encoder_attention_mask": mask}
    if accepts(module, "input_ids", strict=True):
        return {"input_ids": ids, "attention_mask": mask}
    states = torch.randn(ids.shape[0], ids.shape[1], hidden, generator=torch.Generator().manual_seed(5))
    return {"hidden_states": states}


def _entries(prunable: PrunableModel, inputs: dict):
    """(name, call, stacks it reaches) for every path into the model: the wrapper, the Transformers model, its
    body, and each stack on its own."""
    inner = hf_model(prunable.model)
    paths = [("wrapper", lambda: prunable(**inputs), None), ("model", lambda: prunable.model(**inputs), None)]
    body = inner.base_model
    if body is not inner and accepts(body, "input_ids", strict=True) and not _body_needs_decoder_inputs(inner, inputs):
        body_inputs = {k: v.reshape(-1, v.shape[-1]) if k in ("input_ids", "attention_mask") else v
                       for k, v in inputs.items() if accepts(body, k)}   # multiple choice: heads flatten choices
        paths.append(("body", lambda: body(**body_inputs), None))
    for stack, module in stack_modules(prunable.model).items():
        if module is body or module is inner:
            continue
        arguments = _stack_inputs(inner, stack, module, inputs)
        paths.append((f"stack:{stack or 'main'}", lambda m=module, a=arguments: m(**a), {stack}))
    return paths


def _body_needs_decoder_inputs(inner, inputs) -> bool:
    return is_two_stack(inner) and "decoder_input_ids" not in inputs


# ---------------------------------------------------------------------------------------------------- fast core
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_unit_masks_on_every_entry_and_in_generate(row):
    """Zero unit masks: no site sees an unmasked value on any entry, nor in any step of the wrapper's and the
    model's own generate() (the encoder of an encoder-decoder model included); all-ones masks: every output tensor
    and the generated tokens are the unwrapped model's, bit for bit."""
    model = build(row)
    inputs = inputs_for(model, row)
    prunable = PrunableModel(model, PruningConfig(ablation="zero")).eval()
    _zero(prunable)
    probe = SiteProbe(model)
    assert probe.handles, f"{row.id}: the map names no site"
    for name, call, stacks in _entries(prunable, inputs):
        probe.clear()
        with torch.no_grad():
            call()
        expected = probe.expected(model, stacks)
        assert expected <= set(probe.seen), f"{row.id} via {name}: sites never ran {sorted(expected - set(probe.seen))}"
        assert not probe.nonzero(), f"{row.id} via {name}: unmasked values at {probe.nonzero()}"
    generation = _generation_inputs(model, row) if row.generative else {}
    settings = {**GENERATION, "pad_token_id": model.config.pad_token_id}
    for name, generate in ((("wrapper", prunable.generate), ("model", prunable.model.generate))
                           if row.generative else ()):
        probe.clear()
        generate(**generation, **settings)
        assert probe.expected(model) <= set(probe.seen), f"{row.id} {name}.generate: sites never ran"
        assert not probe.nonzero(), f"{row.id} {name}.generate: unmasked values at {probe.nonzero()}"
    probe.remove()
    _ones(prunable)
    with torch.no_grad():
        for name, call in (("wrapper", prunable), ("model", prunable.model)):
            assert _bit_identical(call(**inputs), row), f"{row.id} via {name}"
    if row.generative:
        assert torch.equal(prunable.generate(**generation, **settings), _unwrapped(row)[1]), row.id


# ---------------------------------------------------------------------------------------------------- slow: the rest
@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_neuron_masks_on_every_entry(row):
    model = build(row)
    inputs = inputs_for(model, row)
    prunable = PrunableModel(model, PruningConfig(granularity="neuron", ablation="zero")).eval()
    _zero(prunable)
    probe = SiteProbe(model, roles=("mlp",), mlp_where="input")
    for name, call, stacks in _entries(prunable, inputs):
        probe.clear()
        with torch.no_grad():
            call()
        expected = probe.expected(model, stacks, roles=("mlp",))
        assert expected <= set(probe.seen), f"{row.id} via {name}"
        assert not probe.nonzero(), f"{row.id} via {name}: unmasked neurons at {probe.nonzero()}"
    probe.remove()
    _ones(prunable)
    with torch.no_grad():
        assert _bit_identical(prunable(**inputs), row)


def _weight_targets(model) -> list[str]:
    names = {id(module): name for name, module in hf_model(model).named_modules()}
    return [names[id(module)] for found in sites(model).values() for role in ("attention", "mlp")
            for module in found[role]]


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_weight_masks_on_every_entry(row):
    """Zero weight masks on every attention and MLP output projection: each projection outputs its bias (or 0)
    on every entry; all-ones masks give the unwrapped model's outputs bit for bit."""
    model = build(row)
    inputs = inputs_for(model, row)
    targets = _weight_targets(model)
    prunable = PrunableModel(model, PruningConfig(granularity="weight", target_modules=targets, mask_bias=False)
                             ).eval()
    _zero(prunable)
    modules = [module for found in sites(model).values() for role in ("attention", "mlp") for module in found[role]]
    wrong: list[str] = []
    ran: set[int] = set()

    def check(module, args, output, index):
        ran.add(index)
        bias = module.parametrizations["bias"].original if hasattr(module, "parametrizations") \
            and "bias" in module.parametrizations else module.bias
        expected = torch.zeros_like(output) if bias is None else bias.expand_as(output)
        if not torch.equal(output, expected):
            wrong.append(f"projection {index}")
    handles = [m.register_forward_hook(lambda m, a, o, i=i: check(m, a, o, i)) for i, m in enumerate(modules)]
    for name, call, stacks in _entries(prunable, inputs):
        ran.clear()
        with torch.no_grad():
            call()
        assert ran, f"{row.id} via {name}: no masked projection ran"
        assert not wrong, f"{row.id} via {name}: {wrong[:3]} not masked"
    for handle in handles:
        handle.remove()
    _ones(prunable)
    with torch.no_grad():
        assert _bit_identical(prunable(**inputs), row)


class _OutputLossTrainer(transformers.Trainer):
    """A stock Trainer whose loss is the mean square of the model's first float output (any head class)."""

    def compute_loss(self, model, inputs, return_outputs=False, num_items_in_batch=None):
        outputs = model(**inputs)
        loss = first_float(outputs).float().square().mean()
        return (loss, outputs) if return_outputs else loss


class _GradientRecorder(transformers.TrainerCallback):
    def __init__(self, prunable):
        self.prunable, self.grads = prunable, {}

    def on_pre_optimizer_step(self, args, state, control, **kwargs):
        self.grads = {kind: None if p.grad is None else float(p.grad.abs().sum())
                      for kind, p in self.prunable.mask_logits.items()}


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_trainer_step_gives_every_mask_kind_gradients(row, tmp_path, monkeypatch):
    """One stock `Trainer` step on the wrapped model (gradient checkpointing on where the model supports it): every
    kind's mask logits get a non-zero gradient and move."""
    # Accelerate frees memory around training with gc.collect(), ~0.8 s in a process holding every row's model.
    monkeypatch.setattr("gc.collect", lambda *args, **kwargs: 0)
    model = build(row)
    inputs = inputs_for(model, row)
    prunable = PrunableModel(model, PruningConfig(ablation="zero", init_mean=0.5, init_std=0.5))
    before = {kind: p.detach().clone() for kind, p in prunable.mask_logits.items()}
    batch = inputs["input_ids"].shape[0]
    data = [{k: v[i] for k, v in inputs.items()} for i in range(batch)]
    checkpointing = bool(getattr(hf_model(model), "supports_gradient_checkpointing", False))
    args = transformers.TrainingArguments(
        output_dir=str(tmp_path), per_device_train_batch_size=batch, max_steps=1, learning_rate=0.1,
        report_to="none", use_cpu=True, save_strategy="no", disable_tqdm=True, remove_unused_columns=False,
        gradient_checkpointing=checkpointing, logging_strategy="no")
    recorder = _GradientRecorder(prunable)
    _OutputLossTrainer(model=prunable, args=args, train_dataset=data, callbacks=[recorder]).train()
    assert set(recorder.grads) == set(before)
    assert all(value is not None and value > 0 for value in recorder.grads.values()), (row.id, recorder.grads)
    assert all(not torch.equal(before[kind], p.detach()) for kind, p in prunable.mask_logits.items())


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_lora_wrapped_forward_is_masked(row):
    peft = pytest.importorskip("peft")
    model = build(row)
    inputs = inputs_for(model, row)
    targets = _weight_targets(model)
    torch.manual_seed(3)
    lora = peft.get_peft_model(model, peft.LoraConfig(r=2, lora_alpha=4, target_modules=targets,
                                                      init_lora_weights=False))
    reference = copy.deepcopy(lora)
    prunable = PrunableModel(lora, PruningConfig(ablation="zero")).eval()
    _zero(prunable)
    probe = SiteProbe(lora)
    for name, call in (("wrapper", lambda: prunable(**inputs)), ("peft model", lambda: lora(**inputs))):
        probe.clear()
        with torch.no_grad():
            call()
        assert probe.expected(lora) <= set(probe.seen), f"{row.id} via {name}"
        assert not probe.nonzero(), f"{row.id} via {name}: unmasked values at {probe.nonzero()}"
    probe.remove()
    _ones(prunable)
    with torch.no_grad():
        assert all(torch.equal(a, b) for a, b in zip(tensors(prunable(**inputs)), tensors(reference(**inputs))))


_KIND = {"": ("heads", "mlps"), "encoder": ("encoder_heads", "encoder_mlps"),
         "decoder": ("decoder_heads", "decoder_mlps")}


def _reference_means(model, row, inputs) -> dict[str, torch.Tensor]:
    """Means over real tokens by this file's own hooks: encoder-side (and single-stack) positions weighted by the
    batch's attention_mask, decoder-side ones all counted (the batches are unpadded there)."""
    mask = inputs["attention_mask"].reshape(-1, inputs["attention_mask"].shape[-1]).double()
    sums: dict[tuple, list] = {}
    handles = []
    two_stack = is_two_stack(model)
    for stack, found in sites(model).items():
        weighted = stack != "decoder" or not two_stack
        for role in ("attention", "cross", "mlp"):
            for layer, module in enumerate(found[role]):
                def record(x, key=(stack, role, layer), weighted=weighted):
                    x = x.detach().double()
                    weights = mask.reshape(x.shape[:-1]) if weighted else torch.ones(x.shape[:-1], dtype=x.dtype)
                    total, count = sums.get(key, (0.0, 0.0))
                    sums[key] = (total + (x * weights.unsqueeze(-1)).reshape(-1, x.shape[-1]).sum(0),
                                 count + float(weights.sum()))
                if role == "mlp":
                    handles.append(module.register_forward_hook(lambda m, a, out, f=record: f(out)))
                else:
                    handles.append(module.register_forward_pre_hook(lambda m, a, f=record: f(a[0])))
    with torch.no_grad():
        model(**inputs)
    for handle in handles:
        handle.remove()
    means = {}
    for stack, found in sites(model).items():
        heads_kind, mlps_kind = _KIND[stack]
        for role, kind in (("attention", heads_kind), ("cross", "cross_heads"), ("mlp", mlps_kind)):
            if found[role]:
                means[kind] = torch.stack([sums[(stack, role, layer)][0] / sums[(stack, role, layer)][1]
                                           for layer in range(len(found[role]))])
    return means


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_compute_means_align_with_real_tokens_in_every_head_class(row):
    model = build(row)
    inputs = inputs_for(model, row)
    expected = _reference_means(copy.deepcopy(model), row, inputs)
    prunable = PrunableModel(model, PruningConfig(ablation="mean"))
    prunable.compute_means([inputs], show_progress=False)
    got = prunable.get_means()
    assert set(got) == set(expected)
    for kind, value in expected.items():
        torch.testing.assert_close(got[kind].double().reshape(value.shape), value, atol=1e-5, rtol=1e-4,
                                   msg=f"{row.id}: {kind}")


@pytest.mark.slow
@pytest.mark.parametrize("row", ROWS, ids=ROW_IDS)
def test_resample_ablation_takes_the_previous_example_in_every_head_class(row):
    """Layer 0 of each stack: a resampled head's input (and, in the first stack, a resampled MLP block's output)
    is the unmasked one of the previous example, however the model lays out its activations (OPT's MLP runs on
    `[batch * length, hidden]`, multiple choice on `[batch * choices, length, hidden]`)."""
    model = build(row)
    inputs = inputs_for(model, row)
    batch = inputs["input_ids"].shape[0]
    prunable = PrunableModel(model, PruningConfig(ablation="resample")).eval()
    found = sites(model)
    first = next(iter(found))
    targets = {("attention", stack): found[stack]["attention"][0] for stack in found}
    targets[("mlp", first)] = found[first]["mlp"][0]

    def capture():
        values = {}
        handles = [module.register_forward_hook(lambda m, a, out, key=key: values.setdefault(key, out.detach()))
                   if key[0] == "mlp" else
                   module.register_forward_pre_hook(lambda m, a, key=key: values.setdefault(key, a[0].detach()))
                   for key, module in targets.items()]
        with torch.no_grad():
            prunable(**inputs)
        for handle in handles:
            handle.remove()
        return values

    with prunable.masks_disabled():
        full = capture()
    for role in ("attention", "mlp"):
        masks = {kind: torch.ones(shape) for kind, shape in prunable.mask_shapes().items()}
        for kind in masks:
            if kind.endswith("heads" if role == "attention" else "mlps") and kind != "cross_heads":
                masks[kind][0] = 0
        prunable.set_masks(masks)
        got = capture()
        for key, value in full.items():
            if key[0] != role:
                continue
            rolled = value.reshape(batch, -1, value.shape[-1]).roll(1, 0).reshape(value.shape)
            torch.testing.assert_close(got[key], rolled, msg=f"{row.id}: {key}")
