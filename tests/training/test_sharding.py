"""FSDP2 pieces that run in one process on the CPU (a world-size-1 gloo group): accelerate's own wrapping of a
`PrunableModel` with the mask state kept whole, forwards and gradients against the unsharded model, artifact and
state-dict round trips, the all-frozen / all-trainable constraint of flat-parameter FSDP, and the settings
`PruningTrainer` refuses. The two-process runs against a one-process run are in test_trainer_distributed.py.
"""

from __future__ import annotations

import logging
import os
import sys
import types
from pathlib import Path

import pytest
import torch
import torch.distributed as dist

from hf_heuristic_core import PrunableModel, PruningConfig, PruningError
from hf_heuristic_core.training import sharding

sys.path.insert(0, str(Path(__file__).parent))
from ddp_prune_script import build_model  # noqa: E402  (the tiny BERT the distributed tests use)

WEIGHT_TARGETS = ["attention.output.dense", "output.dense"]


@pytest.fixture(scope="module")
def process_group(tmp_path_factory):
    """A one-process gloo group for this module only (FSDP needs a process group even for one rank)."""
    if dist.is_initialized():
        pytest.skip("a process group is already initialized in this worker")
    store = dist.FileStore(str(tmp_path_factory.mktemp("store") / "store"), 1)
    previous = torch.get_num_threads()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    yield
    dist.destroy_process_group()
    torch.set_num_threads(previous)


def prunable(granularity: str = "unit") -> PrunableModel:
    torch.manual_seed(1000)
    config = (PruningConfig(ablation="zero", init_mean=1.0, init_std=0.5) if granularity == "unit" else
              PruningConfig(granularity="weight", init_mean=1.0, init_std=0.5, target_modules=WEIGHT_TARGETS))
    model = PrunableModel(build_model("seq"), config)
    model.reset_masks(7)
    return model


def shard_like_accelerate(model: PrunableModel) -> PrunableModel:
    """accelerate's own FSDP2 preparation (what `Trainer` runs), with the plugin `PruningTrainer` configures."""
    from accelerate.utils import FullyShardedDataParallelPlugin
    from accelerate.utils.fsdp_utils import fsdp2_prepare_model
    plugin = FullyShardedDataParallelPlugin(fsdp_version=2, auto_wrap_policy="transformer_based_wrap",
                                            transformer_cls_names_to_wrap=["BertLayer"])
    sharding.check_fsdp_plugin(plugin)
    sharding.keep_mask_state_whole(plugin, model)
    accelerator = types.SimpleNamespace(state=types.SimpleNamespace(fsdp_plugin=plugin), torch_device_mesh=None,
                                        mixed_precision="no", is_main_process=True, device=torch.device("cpu"))
    return fsdp2_prepare_model(accelerator, model)


def batch() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    ids = torch.randint(3, 99, (4, 10), generator=generator)
    mask = torch.ones_like(ids)
    mask[0, 7:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def student_step(model: PrunableModel, inputs: dict) -> tuple[torch.Tensor, torch.Tensor, dict[str, torch.Tensor]]:
    """Teacher logits (masks off), student logits with sampled masks, and the gradient of their KL per mask kind."""
    from hf_heuristic_core.training.losses import kl_to_teacher
    model.train_dropout = False
    model.train()
    model.generator = torch.Generator().manual_seed(11)
    with torch.no_grad(), model.masks_disabled():
        teacher = model(**inputs).logits
    student = model(**inputs).logits
    model.zero_grad(set_to_none=True)
    kl_to_teacher(student, teacher).backward()
    return teacher, student.detach(), {kind: p.grad.clone() for kind, p in model.mask_logits.items()}


@pytest.mark.parametrize("granularity", ["unit", "weight"])
def test_sharded_model_computes_what_the_unsharded_one_does(process_group, granularity):
    """Sharded base weights (DTensors gathered per layer), whole mask logits: teacher, student and the gradient of
    the KL into every mask logit equal the unsharded model's. Weight masks go through `parametrize` on sharded
    parameters."""
    from torch.distributed.tensor import DTensor
    reference = prunable(granularity)
    sharded = shard_like_accelerate(prunable(granularity))   # built alike (a deepcopy's hooks would read the original)
    assert isinstance(sharded.model.bert.encoder.layer[0].attention.output.dense.bias, DTensor)
    inputs = batch()
    expected, got = student_step(reference, inputs), student_step(sharded, inputs)
    torch.testing.assert_close(got[0], expected[0], rtol=0, atol=1e-6)
    torch.testing.assert_close(got[1], expected[1], rtol=0, atol=1e-6)
    assert not torch.equal(got[1], got[0])   # the masks did act
    assert set(got[2]) == set(expected[2]) and len(got[2]) == (2 if granularity == "unit" else 4)
    for kind in expected[2]:
        assert float(expected[2][kind].abs().sum()) > 0
        torch.testing.assert_close(got[2][kind], expected[2][kind], rtol=1e-5, atol=1e-7)


def test_wrapping_policy_every_fsdp_unit_is_all_frozen(process_group):
    """One FSDP unit per transformer layer, the embeddings and the root; no unit holds a trainable tensor (so the
    flat-parameter constraint of FSDP1, "uniform requires_grad", holds too), and the mask logits stay whole."""
    from torch.distributed.fsdp import FSDPModule
    from torch.distributed.tensor import DTensor
    model = shard_like_accelerate(prunable())
    units = [name for name, module in model.named_modules() if isinstance(module, FSDPModule)]
    assert units == ["", "model.bert.embeddings.word_embeddings", "model.bert.encoder.layer.0",
                     "model.bert.encoder.layer.1"]
    sharded = {name: p for name, p in model.named_parameters() if isinstance(p, DTensor)}
    whole = {name: p for name, p in model.named_parameters() if not isinstance(p, DTensor)}
    assert sorted(whole) == ["mask_state.logits.heads", "mask_state.logits.mlps"]
    assert all(p.requires_grad for p in whole.values())
    assert sharded and not any(p.requires_grad for p in sharded.values())


def test_flat_parameter_fsdp_refuses_a_unit_mixing_logits_and_frozen_weights(process_group):
    """The trap the design avoids, reproduced: FSDP1 with flat parameters (use_orig_params=False) over a
    PrunableModel whose root unit holds the trainable logits next to frozen weights raises torch's own error
    (torch/distributed/fsdp/_flat_param.py, FlatParamHandle._validate_tensors_to_flatten). With the mask state
    ignored (what PruningTrainer configures) the same wrapping goes through."""
    import warnings
    from torch.distributed.fsdp import FullyShardedDataParallel
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")   # FSDP1 is deprecated
        with pytest.raises(ValueError, match="uniform `requires_grad`"):
            FullyShardedDataParallel(prunable(), use_orig_params=False, device_id=torch.device("cpu"))
        model = prunable()
        wrapped = FullyShardedDataParallel(model, use_orig_params=False, device_id=torch.device("cpu"),
                                           ignored_modules=[model.mask_state])
    assert wrapped is not None


def test_artifacts_and_state_dicts_round_trip_through_a_sharded_model(process_group, tmp_path):
    """Masks saved from a sharded model load into an unsharded one (and back) unchanged; the sharded model's
    state dict keeps the mask state as plain tensors under the usual keys."""
    from torch.distributed.tensor import DTensor
    model = shard_like_accelerate(prunable())
    with torch.no_grad():
        model.mask_logits["heads"][0, 1] = -4.0
    model.save_pretrained(tmp_path / "from-sharded", include_logits=True)
    plain = prunable()
    plain.load_masks(tmp_path / "from-sharded")
    for kind, logit in model.mask_logits.items():
        assert torch.equal(plain.mask_logits[kind], logit.detach())
    assert torch.equal(plain.get_masks()["heads"], model.get_masks()["heads"])

    plain.reset_masks(123)
    plain.save_pretrained(tmp_path / "from-plain", include_logits=True)
    model.load_masks(tmp_path / "from-plain")
    for kind, logit in plain.mask_logits.items():
        assert torch.equal(model.mask_logits[kind].detach(), logit)

    state = model.state_dict()
    assert isinstance(state["model.bert.encoder.layer.0.attention.self.query.weight"], DTensor)
    assert not isinstance(state["mask_state.logits.heads"], DTensor)
    assert set(model.mask_state_dict()) == set(plain.mask_state_dict())


def fake_trainer(fsdp_plugin=None, fsdp=True, world_size=2, distributed_type="MULTI_GPU"):
    args = types.SimpleNamespace(fsdp=fsdp, fsdp_plugin_args={} if fsdp else None, world_size=world_size)
    state = types.SimpleNamespace(fsdp_plugin=fsdp_plugin)
    accelerator = types.SimpleNamespace(state=state, distributed_type=distributed_type)
    model = types.SimpleNamespace(mask_state=torch.nn.Module(), mask_logits=torch.nn.ParameterDict())
    return types.SimpleNamespace(args=args, accelerator=accelerator, is_fsdp_enabled=fsdp_plugin is not None,
                                 prunable=model)


def plugin(**settings):
    return types.SimpleNamespace(**{"fsdp_version": 2, "activation_checkpointing": False, "ignored_modules": None,
                                    **settings})


def test_configure_sharding_adds_the_mask_state_to_the_ignored_modules_once():
    other = torch.nn.Linear(1, 1)
    trainer = fake_trainer(plugin(ignored_modules=[other]))
    sharding.configure_sharding(trainer)
    sharding.configure_sharding(trainer)
    assert trainer.accelerator.state.fsdp_plugin.ignored_modules == [other, trainer.prunable.mask_state]


@pytest.mark.parametrize("settings, message", [
    ({"fsdp_version": 1}, "supports FSDP2 only, got fsdp_config version 1"),
    ({"activation_checkpointing": True}, "pass activation_checkpointing=True instead"),
    ({"ignored_modules": "model.*"}, "ignored_modules='model.*' (a regex) cannot be combined"),
])
def test_configure_sharding_refuses_what_mask_learning_cannot_run_under(settings, message):
    with pytest.raises(PruningError, match=message.replace("(", r"\(").replace(")", r"\)")):
        sharding.configure_sharding(fake_trainer(plugin(**settings)))


def test_fsdp_on_a_multi_process_cpu_run_says_it_falls_back_to_ddp(caplog):
    """accelerate drops the FSDP plugin on CPU; the run is still right (DDP), but the user is told why."""
    with caplog.at_level(logging.WARNING, logger="hf_heuristic_core.training.sharding"):
        sharding.configure_sharding(fake_trainer(None, distributed_type="MULTI_CPU"))
    assert "replicated on every process, not sharded" in caplog.text
    assert "accelerate/state.py" in caplog.text and "MULTI_CPU is not in that list" in caplog.text
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="hf_heuristic_core.training.sharding"):
        sharding.configure_sharding(fake_trainer(None, world_size=1, distributed_type="NO"))
        sharding.configure_sharding(fake_trainer(None, fsdp=False))
    assert caplog.text == ""


def test_average_replicated_gradients_is_a_no_op_on_one_process(process_group):
    parameter = torch.nn.Parameter(torch.ones(3))
    parameter.grad = torch.tensor([1.0, 2.0, 3.0])
    sharding.average_replicated_gradients([parameter], world_size=1)
    sharding.average_replicated_gradients([parameter], world_size=dist.get_world_size())
    assert torch.equal(parameter.grad, torch.tensor([1.0, 2.0, 3.0]))
    assert os.environ.get("WORLD_SIZE") in (None, "1")
