"""`torch.compile` of the hooked forward (`training.compile.compile_blocks`): unit masks (hooks) and weight masks
(parametrizations) compile without graph breaks, a pruning step compiles nothing after the first one, no block
silently falls back to eager (Dynamo's recompile limit), and compiled steps compute what eager steps compute.

Counting uses Dynamo's own counters (`torch._dynamo.utils.counters`). The `eager` backend checks tracing, guards and
recompiles in seconds; `aot_eager` also traces the backward (AOTAutograd) through the hooks. The compiled vs eager
step time is in BENCHMARKS.md (benchmarks/speed/bench_compile.py; on a GPU, benchmarks/speed/bench_gpu.py).
"""

from __future__ import annotations

import pytest
import torch
from tiny_models import make_batch, tiny_model
from torch._dynamo.utils import counters

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.training.compile import (
    GRAPHS_PER_BLOCK,
    compile_blocks,
    transformer_blocks,
)
from hf_heuristic_core.training.losses import kl_to_teacher

CONFIGS = {"unit": dict(ablation="mean", init_mean=1.0),
           "weight": dict(granularity="weight", init_mean=1.0, target_modules=["output.dense"])}


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    previous = (torch.get_num_threads(), torch._dynamo.config.recompile_limit)
    torch.set_num_threads(1)
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()
    torch.set_num_threads(previous[0])
    torch._dynamo.config.recompile_limit = previous[1]


def prunable(granularity: str, layers: int) -> PrunableModel:
    model = PrunableModel(tiny_model("bert", num_layers=layers), PruningConfig(**CONFIGS[granularity]))
    if granularity == "unit":
        model.compute_means(make_batch("bert", batch_size=4), show_progress=False)
    model.reset_masks(3)
    model.train_dropout = False
    model.generator = torch.Generator().manual_seed(0)
    return model.train()


def step(model: PrunableModel, batch: dict, optimizer: torch.optim.Optimizer) -> torch.Tensor:
    """One pruning step as PruningTrainer takes it: the same-model teacher, the student, the KL, the update."""
    optimizer.zero_grad(set_to_none=True)
    with torch.no_grad(), model.masks_disabled():
        teacher = model(**batch).logits
    student = model(**batch).logits
    kl_to_teacher(student, teacher).backward()
    optimizer.step()
    return student.detach()


def compiled_graphs() -> tuple[int, int, int]:
    return (counters["stats"]["unique_graphs"], counters["frames"]["total"], counters["frames"]["ok"])


@pytest.mark.slow   # ~7 s of tracing per case on 2 idle cores
@pytest.mark.parametrize("granularity", ["unit", "weight"])
def test_compiled_blocks_have_no_graph_breaks_and_no_per_step_recompiles(granularity):
    """More blocks than Dynamo's recompile limit allows graphs for (the blocks share one code object, so each block
    is a recompile of it): every block must still be compiled (no frame falls back to eager), and steps 2-4 compile
    nothing new, in training and in eval. A 12-layer BERT exceeds the default limit (8); here the limit starts at 2
    and 3 blocks exceed it, the same situation at a third of the tracing time."""
    torch._dynamo.config.recompile_limit = 2       # restored by _fresh_dynamo
    model = prunable(granularity, layers=3)
    names = compile_blocks(model, backend="eager")
    assert len(names) == 3 + 1   # the 3 BertLayers and BertEmbeddings
    assert torch._dynamo.config.recompile_limit >= GRAPHS_PER_BLOCK * len(names)   # raised from 2
    batch = make_batch("bert")
    optimizer = torch.optim.AdamW(model.mask_logits.parameters(), lr=0.1, weight_decay=0.0)
    step(model, batch, optimizer)
    after_first = compiled_graphs()
    for _ in range(3):
        step(model, batch, optimizer)
    assert compiled_graphs() == after_first
    model.eval()
    with torch.no_grad():
        model(**batch)
    eval_graphs = compiled_graphs()
    with torch.no_grad():
        model(**batch)
    assert compiled_graphs() == eval_graphs
    unique, total, ok = eval_graphs
    assert dict(counters["graph_break"]) == {}
    assert total == ok, f"{total - ok} frames fell back to eager (recompile limit?)"
    assert unique >= 2 * 3   # student and eval graphs of every layer (they read the layer's own mask)


def test_without_the_raised_limit_the_blocks_past_it_run_eagerly():
    """The control for the test above: the same 3 blocks compiled without raising the limit from 2 leave frames
    to eager, so the counters above can see a fallback."""
    torch._dynamo.config.recompile_limit = 2
    model = prunable("unit", layers=3)
    for _, module in transformer_blocks(model):
        module.compile(backend="eager")
    model.eval()
    with torch.no_grad():
        model(**make_batch("bert"))
    _, total, ok = compiled_graphs()
    assert total > ok


@pytest.mark.parametrize("granularity", ["unit", "weight"])
def test_compiled_steps_compute_what_eager_steps_compute(granularity):
    """aot_eager (forward and backward traced): the student's logits and the mask logits after 3 steps match an
    eager model built alike, bit for bit up to fp32 reordering."""
    batch = make_batch("bert")
    results = []
    for compiled in (False, True):
        model = prunable(granularity, layers=2)
        if compiled:
            compile_blocks(model, backend="aot_eager")
        optimizer = torch.optim.AdamW(model.mask_logits.parameters(), lr=0.1, weight_decay=0.0)
        students = [step(model, batch, optimizer) for _ in range(3)]
        results.append((students, {kind: p.detach().clone() for kind, p in model.mask_logits.items()}))
    (eager_students, eager_logits), (compiled_students, compiled_logits) = results
    for eager, compiled in zip(eager_students, compiled_students):
        torch.testing.assert_close(compiled, eager, rtol=1e-5, atol=1e-6)
    for kind, logits in eager_logits.items():
        assert not torch.equal(logits, prunable(granularity, 2).mask_logits[kind].detach())   # the masks learned
        torch.testing.assert_close(compiled_logits[kind], logits, rtol=1e-5, atol=1e-6)
    assert dict(counters["graph_break"]) == {}


def test_transformer_blocks_refuses_a_model_without_repeated_blocks():
    from hf_heuristic_core import PruningError
    model = prunable("unit", layers=2)
    model.model._no_split_modules = []
    with pytest.raises(PruningError, match="lists no repeated blocks"):
        transformer_blocks(model)
