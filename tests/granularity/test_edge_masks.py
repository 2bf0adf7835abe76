"""Edge masks (#37): the residual stream rebuilt per reader through hooks, checked against references built without
the package's edge code: the plain model (all edges kept), a hand-built path patch of one removed edge (each of q, k,
v, the MLP, the logits, `input`), and unit masks (every outgoing edge of a writer removed = the writer ablated as a
unit) under zero, mean and resample ablation. GPT-2 (fused q|k|v Conv1D), Llama (separate projections, grouped-query
attention), Qwen2 (q/k/v biases) and GPT-NeoX (per-head fused q|k|v, parallel residual)."""

from __future__ import annotations

import copy

import pytest
import torch

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.circuits.mib import MibConfig, edge_names
from hf_heuristic_core.errors import PruningError
from tiny_models import HEAD_DIM, make_batch, one_torch_thread, tiny_model  # noqa: F401  (one_torch_thread: fixture)

pytestmark = pytest.mark.usefixtures("one_torch_thread")
FAMILIES = ["gpt2", "llama", "mistral", "qwen2", "qwen3", "gpt_neox"]


def _inputs(model_type: str, batch_size: int = 3) -> dict[str, torch.Tensor]:
    batch = make_batch(model_type, batch_size=batch_size)
    return {k: batch[k] for k in ("input_ids", "attention_mask")}


def _edges(model, ablation: str = "zero") -> PrunableModel:
    return PrunableModel(copy.deepcopy(model), PruningConfig(granularity="edge", ablation=ablation)).eval()


def _logits(model, inputs, masks=None) -> torch.Tensor:
    with torch.no_grad():
        if masks is None:
            return model(**inputs).logits
        with model.masks_applied(masks):
            return model(**inputs).logits


def _without(pm: PrunableModel, prefix: str) -> dict[str, torch.Tensor]:
    """Edge masks with every edge whose name starts with `prefix` removed (e.g. 'a1.h2->': all its outgoing)."""
    z = torch.ones(pm.mask_shapes()["edges"])
    for index, name in enumerate(pm.granularity.graph.edge_names()):
        if name.startswith(prefix):
            z[index] = 0
    assert int((z == 0).sum()) > 0
    return {"edges": z}


@pytest.mark.parametrize("model_type", FAMILIES)
def test_all_edges_kept_is_the_plain_model_exactly(model_type):
    model = tiny_model(model_type, task="causal_lm")
    inputs = _inputs(model_type)
    pm = _edges(model)
    ones = {"edges": torch.ones(pm.mask_shapes()["edges"])}
    assert torch.equal(_logits(pm, inputs, ones), _logits(model, inputs))
    prompt = inputs["input_ids"][:1, :4]
    with torch.no_grad(), pm.masks_applied(ones):
        tokens = pm.generate(input_ids=prompt, max_new_tokens=4, do_sample=False, pad_token_id=0)
    assert torch.equal(tokens, model.generate(input_ids=prompt, max_new_tokens=4, do_sample=False, pad_token_id=0))


@pytest.mark.parametrize("model_type, parallel", [("gpt2", False), ("llama", False), ("gpt_neox", True)])
def test_the_graph_is_mibs(model_type, parallel):
    model = tiny_model(model_type, task="causal_lm")
    graph = _edges(model).granularity.graph
    assert graph.parallel is parallel
    mib = edge_names(MibConfig(2, 4, 32, parallel))
    assert set(graph.mib_edge_scores(torch.zeros(graph.num_edges))) == set(mib)
    if graph.num_kv_heads == graph.num_heads:
        assert graph.num_edges == len(mib) and sorted(graph.edge_names()) == sorted(mib)
    else:   # Llama's tiny config groups 4 query heads in 2 key/value heads: one k and one v edge per group
        assert graph.num_edges == len(mib) - 2 * (graph.num_heads - graph.num_kv_heads) * (1 + 6)
    if parallel:
        assert not [name for name in graph.edge_names() if name.startswith("a0.h0->m0")]


# ------------------------------------------------------------------ one edge against a hand-built path patch
def _writer_output(model, model_type, inputs, writer: str) -> torch.Tensor:
    """Writer `writer` ('input', 'a{l}.h{h}', 'm{l}') of the plain model, computed here from its modules."""
    layers = _layers(model, model_type)
    captured = {}
    if writer == "input":
        module, hook_kind = _norm(layers[0], model_type, "input"), "pre"
    elif writer.startswith("a"):
        layer, head = (int(part[1:]) for part in writer.split("."))
        module, hook_kind = _attention_output(layers[layer], model_type), "pre"
    else:
        module, hook_kind = _mlp_output(layers[int(writer[1:])], model_type), "out"
    if hook_kind == "pre":
        handle = module.register_forward_pre_hook(lambda m, args: captured.setdefault("x", args[0]))
    else:
        handle = module.register_forward_hook(lambda m, args, out: captured.setdefault("x", out))
    with torch.no_grad():
        model(**inputs)
    handle.remove()
    x = captured["x"]
    if not writer.startswith("a"):
        return x
    head_dim = x.shape[-1] // 4
    context = x[..., head * head_dim:(head + 1) * head_dim]
    weight = module.weight
    if type(module).__name__ == "Conv1D":       # [in, out]
        return context @ weight[head * head_dim:(head + 1) * head_dim, :]
    return context @ weight[:, head * head_dim:(head + 1) * head_dim].T


def _layers(model, model_type):
    return {"gpt2": lambda: model.transformer.h, "gpt_neox": lambda: model.gpt_neox.layers}.get(
        model_type, lambda: model.model.layers)()


def _norm(layer, model_type, which):
    if model_type == "gpt2":
        return layer.ln_1 if which == "input" else layer.ln_2
    return layer.input_layernorm if which == "input" else layer.post_attention_layernorm


def _attention_output(layer, model_type):
    return {"gpt2": lambda: layer.attn.c_proj, "gpt_neox": lambda: layer.attention.dense}.get(
        model_type, lambda: layer.self_attn.o_proj)()


def _mlp_output(layer, model_type):
    return {"gpt2": lambda: layer.mlp.c_proj, "gpt_neox": lambda: layer.mlp.dense_4h_to_h}.get(
        model_type, lambda: layer.mlp.down_proj)()


def _patched(model, model_type, inputs, reader: str, x_j: torch.Tensor) -> torch.Tensor:
    """The plain model with one reader fed `resid - x_j` (zero ablation of the edge), built from its modules:
    a head's q / k / v columns of its projection recomputed from the layer norm of that input; the MLP's or the final
    norm's input replaced."""
    model = copy.deepcopy(model)
    layers = _layers(model, model_type)
    handles = []
    if reader == "logits":
        final = {"gpt2": lambda: model.transformer.ln_f, "gpt_neox": lambda: model.gpt_neox.final_layer_norm}.get(
            model_type, lambda: model.model.norm)()
        handles.append(final.register_forward_pre_hook(lambda m, args: (args[0] - x_j,)))
    elif reader.startswith("m"):
        norm = _norm(layers[int(reader[1:])], model_type, "mlp")
        handles.append(norm.register_forward_pre_hook(lambda m, args: (args[0] - x_j,)))
    else:
        name, letter = reader[:-3], reader[-2]
        layer, head = (int(part[1:]) for part in name.split("."))
        norm = _norm(layers[layer], model_type, "input")
        stream = {}
        handles.append(norm.register_forward_pre_hook(lambda m, args: stream.__setitem__("r", args[0])))
        head_dim = HEAD_DIM[model_type]
        if model_type == "gpt2":
            projection = layers[layer].attn.c_attn
            start = "qkv".index(letter) * 32 + head * head_dim
        elif model_type == "gpt_neox":
            projection = layers[layer].attention.query_key_value
            start = head * 3 * head_dim + "qkv".index(letter) * head_dim
        else:
            projection = getattr(layers[layer].self_attn, f"{letter}_proj")
            start = head * head_dim      # for k / v: `head` is the key/value head

        def replace(module, args, output):
            fresh = module.forward(norm.forward(stream["r"] - x_j))
            output = output.clone()
            output[..., start:start + head_dim] = fresh[..., start:start + head_dim]
            return output
        handles.append(projection.register_forward_hook(replace))
    return _logits(model, inputs)


@pytest.mark.parametrize("model_type, edge", [
    ("gpt2", "a0.h1->a1.h2<q>"), ("gpt2", "a0.h1->a1.h2<k>"), ("gpt2", "a0.h1->a1.h2<v>"),
    ("gpt2", "input->a0.h3<v>"), ("gpt2", "a1.h0->m1"), ("gpt2", "m0->logits"), ("gpt2", "input->logits"),
    ("llama", "a0.h2->a1.h3<q>"), ("llama", "m0->a1.h2<k>@g1"), ("llama", "a0.h0->a1.h0<v>@g0"),
    ("qwen2", "a0.h1->a1.h1<q>"), ("qwen2", "m0->m1"),
    ("qwen3", "a0.h2->a1.h1<q>"), ("qwen3", "input->a1.h2<k>@g1"),          # q/k norms after the projections
    ("gpt_neox", "a0.h1->a1.h2<k>"), ("gpt_neox", "m0->a1.h0<q>"), ("gpt_neox", "a0.h3->m1"),
])
def test_one_removed_edge_is_a_path_patch_of_that_reader(model_type, edge):
    model = tiny_model(model_type, task="causal_lm")
    inputs = _inputs(model_type)
    pm = _edges(model)
    names = pm.granularity.graph.edge_names()
    z = torch.ones(len(names))
    z[names.index(edge)] = 0
    parent, reader = edge.split("->")
    if "@g" in reader:      # a grouped key / value edge: the group's key / value head's columns
        name, group = reader.split("@g")
        reader = f"{name.split('.')[0]}.h{group}{name[-3:]}"
    expected = _patched(model, model_type, inputs, reader, _writer_output(model, model_type, inputs, parent))
    got = _logits(pm, inputs, {"edges": z})
    assert (got - expected).abs().max() <= 1e-5
    assert (got - _logits(model, inputs)).abs().max() > 1e-4          # the edge matters


def test_q_k_and_v_are_separate_edges():
    model = tiny_model("gpt2", task="causal_lm")
    inputs = _inputs("gpt2")
    pm = _edges(model)
    names = pm.granularity.graph.edge_names()
    outs = []
    for letter in "qkv":
        z = torch.ones(len(names))
        z[names.index(f"a0.h1->a1.h2<{letter}>")] = 0
        outs.append(_logits(pm, inputs, {"edges": z}))
    assert min((outs[i] - outs[j]).abs().max() for i, j in ((0, 1), (0, 2), (1, 2))) > 1e-5


# ------------------------------------------------------------------ node masks as edge masks
@pytest.mark.parametrize("model_type", ["gpt2", "llama", "gpt_neox"])
@pytest.mark.parametrize("ablation", ["zero", "mean", "resample"])
def test_removing_every_outgoing_edge_ablates_the_writer_as_a_unit(model_type, ablation):
    model = tiny_model(model_type, task="causal_lm")
    inputs = _inputs(model_type, batch_size=4)
    edges = _edges(model, ablation)
    units = PrunableModel(copy.deepcopy(model), PruningConfig(ablation=ablation)).eval()
    if ablation == "mean":
        data = [_inputs(model_type, batch_size=4), make_batch(model_type, batch_size=4, seed=1)]
        edges.compute_means(data, show_progress=False)
        units.compute_means(data, show_progress=False)
    heads = torch.ones(2, 4)
    heads[1, 2] = 0
    for edge_masks, unit_masks in ((_without(edges, "a1.h2->"), {"heads": heads, "mlps": torch.ones(2)}),
                                   (_without(edges, "m0->"), {"heads": torch.ones(2, 4),
                                                              "mlps": torch.tensor([0.0, 1.0])})):
        expected = _logits(units, inputs, unit_masks)
        assert (expected - _logits(model, inputs)).abs().max() > 1e-3       # the unit matters
        assert (_logits(edges, inputs, edge_masks) - expected).abs().max() <= 2e-5


def test_edge_means_are_the_writers_means():
    """The mean of a head's writer output is its slice of the output projection applied to the mean context."""
    model = tiny_model("gpt2", task="causal_lm")
    data = [_inputs("gpt2", batch_size=4)]
    edges, units = _edges(model, "mean"), PrunableModel(copy.deepcopy(model), PruningConfig(ablation="mean"))
    edges.compute_means(data, show_progress=False)
    units.compute_means(data, show_progress=False)
    writer = edges.granularity.graph.head_writer(1, 3)
    context = units.get_means()["heads"][1, 3]
    weight = model.transformer.h[1].attn.c_proj.weight[3 * 8:4 * 8]
    assert torch.allclose(edges.get_means()["edges"][writer], context @ weight, atol=1e-5)
    assert edges.get_means()["edges"].shape == (edges.granularity.graph.num_writers, 32)


# ------------------------------------------------------------------ refused models
@pytest.mark.parametrize("model_type, reason", [("bert", "post-LN"), ("opt", "post-LN")])
def test_post_layernorm_models_are_refused_with_the_reason(model_type, reason):
    task = "seq_cls" if model_type == "bert" else "causal_lm"
    with pytest.raises(PruningError, match=reason):
        PrunableModel(tiny_model(model_type, task=task), PruningConfig(granularity="edge"))


def test_gradients_reach_every_edge_and_the_trainer_learns_edge_masks(tmp_path):
    """Edge masks go through the same `PruningTrainer` (KL to the full model, hard concrete, the Lagrangian
    sparsity control) as unit masks; the artifact saves and loads them."""
    from datasets import Dataset

    from hf_heuristic_core import PruningArguments, PruningTrainer
    model = tiny_model("gpt2", task="causal_lm")
    from hf_heuristic_core.circuits.attribution import differentiable_masks
    pm = _edges(model)
    for value in (0.5, 1.0):        # at 1 (attribution patching's point) too: no reader skips the rebuild then
        with differentiable_masks(pm, {"edges": torch.full((110,), value)}) as leaves:
            pm(**_inputs("gpt2")).logits.pow(2).mean().backward()
        assert int((leaves["edges"].grad != 0).sum()) == 110       # every edge reaches the output
    generator = torch.Generator().manual_seed(0)
    rows = {"input_ids": torch.randint(3, 99, (32, 8), generator=generator).tolist(),
            "attention_mask": torch.ones(32, 8, dtype=torch.long).tolist()}
    pm = PrunableModel(copy.deepcopy(model), PruningConfig(granularity="edge", ablation="zero", init_mean=1.0,
                                                           init_std=0.5))
    before = pm.mask_logits.edges.detach().clone()
    args = PruningArguments(output_dir=str(tmp_path / "run"), per_device_train_batch_size=8, max_steps=6,
                            use_cpu=True, seed=0, report_to="none", disable_tqdm=True, warmup_steps=1,
                            logging_steps=1, save_strategy="no", sparsity_warmup_steps=4, target_sparsity=0.5,
                            convergence_check=False)
    trainer = PruningTrainer(model=pm, args=args, train_dataset=Dataset.from_dict(rows))
    trainer.train()
    kl = [entry["kl"] for entry in trainer.state.log_history if "kl" in entry]
    assert len(kl) == 6 and all(0 <= value < 10 for value in kl)
    assert not torch.equal(pm.mask_logits.edges.detach(), before)
    pm.save_pretrained(tmp_path / "masks")
    loaded = PrunableModel(copy.deepcopy(model), PruningConfig.from_pretrained(tmp_path / "masks"))
    loaded.load_masks(tmp_path / "masks")
    assert loaded.pruning_config.granularity == "edge"
    assert torch.equal(loaded.get_masks(binary=True)["edges"], pm.get_masks(binary=True)["edges"])
    inputs = _inputs("gpt2")
    assert torch.equal(_logits(loaded.eval(), inputs), _logits(pm.eval(), inputs))


def test_sdpa_attention_and_cached_generation_see_the_same_edges():
    """The hooks act on the projections, so the attention implementation does not matter; cached generation (each
    step's keys and values computed from that step's rebuilt inputs) gives the tokens of uncached generation."""
    eager, sdpa = tiny_model("llama", task="causal_lm"), tiny_model("llama", task="causal_lm",
                                                                     attn_implementation="sdpa")
    inputs = _inputs("llama")
    masks = _without(_edges(eager), "a0.h1->")
    masks["edges"][::7] = 0
    assert (_logits(_edges(eager), inputs, masks) - _logits(_edges(sdpa), inputs, masks)).abs().max() <= 1e-5
    pm = _edges(eager)
    prompt = inputs["input_ids"][:1, :4]
    with torch.no_grad(), pm.masks_applied(masks):
        cached = pm.generate(input_ids=prompt, max_new_tokens=5, do_sample=False, pad_token_id=0)
        uncached = pm.generate(input_ids=prompt, max_new_tokens=5, do_sample=False, pad_token_id=0, use_cache=False)
    assert torch.equal(cached, uncached)
    assert not torch.equal(cached, eager.generate(input_ids=prompt, max_new_tokens=5, do_sample=False,
                                                  pad_token_id=0))


def test_a_lora_wrapped_projection_is_refused():
    peft = pytest.importorskip("peft")
    model = tiny_model("llama", task="causal_lm")
    lora = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=2, target_modules=["q_proj"]))
    with pytest.raises(PruningError, match="merge_and_unload"):
        PrunableModel(lora, PruningConfig(granularity="edge"))
    pm = _edges(model)           # wrapped first, adapted after: refused at the forward
    adapted = peft.get_peft_model(pm.model, peft.LoraConfig(r=2, target_modules=["q_proj"]))
    assert adapted is not None
    with pytest.raises(PruningError, match="not the plain projection"):
        _logits(pm, _inputs("llama"), {"edges": torch.zeros(pm.mask_shapes()["edges"])})
    on_output = peft.get_peft_model(copy.deepcopy(model), peft.LoraConfig(r=2, target_modules=["o_proj"]))
    with pytest.raises(PruningError, match="o_proj is"):
        PrunableModel(on_output, PruningConfig(granularity="edge"))


def test_the_memory_saving_product_has_the_right_gradients():
    """`_RemovedEdges` computes from the pass's buffer and sends the gradient to each delta: against gradcheck."""
    from hf_heuristic_core.granularity.edge.granularity import _RemovedEdges
    generator = torch.Generator().manual_seed(0)
    weights = torch.rand(3, 2, dtype=torch.float64, generator=generator, requires_grad=True)
    deltas = [torch.randn(2, 3, 4, dtype=torch.float64, generator=generator, requires_grad=True) for _ in range(3)]
    def product(w, *d):     # the buffer holds the deltas' values, as the pass's buffer does
        return _RemovedEdges.apply(w, torch.stack(d).detach(), *d)
    assert torch.autograd.gradcheck(product, (weights, *deltas))
    values = torch.stack(deltas).detach()
    expected = torch.einsum("jr,jbsd->rbsd", weights, torch.stack(deltas))
    assert torch.allclose(_RemovedEdges.apply(weights, values, *deltas), expected)


def test_active_dropout_and_gradient_checkpointing_are_refused():
    model = tiny_model("gpt2", task="causal_lm", resid_pdrop=0.1)
    pm = PrunableModel(copy.deepcopy(model), PruningConfig(granularity="edge", ablation="zero"))
    zeros = {"edges": torch.zeros(pm.mask_shapes()["edges"])}
    pm.train_dropout = True
    pm.train()
    with pytest.raises(PruningError, match="dropout off"):
        _logits(pm, _inputs("gpt2"), zeros)
    pm.train_dropout = False
    pm.train()                                  # PruningTrainer's default: the base model without dropout
    assert _logits(pm, _inputs("gpt2"), zeros).shape[-1] > 0
    (getattr(pm.model, "activation_checkpointing_enable", None) or pm.model.gradient_checkpointing_enable)()
    pm.train()
    with pytest.raises(PruningError, match="gradient checkpointing"):
        _logits(pm, _inputs("gpt2"), zeros)
