"""A GGUF model prunes: read as a float32 model the Trainer accepts, its task taken from the GGUF architecture.

(The README's SmolLM2 `prune` command itself runs ~15 minutes on a loaded 2-core machine; the guide records that
run. This test checks the two things that made it fail before: the Trainer's refusal of a "quantized" model and
`--task auto` choosing a random classification head.)"""

from __future__ import annotations

import pytest
import torch

pytestmark = pytest.mark.slow


def test_a_gguf_model_loads_as_a_trainable_float_model_and_is_a_causal_lm(smollm2_file):
    import transformers
    from transformers.trainer_utils import validate_quantization_for_training

    from hf_heuristic_core import PrunableModel, PruningConfig
    from hf_heuristic_core.cli.prune import PruneScriptArguments, load_model_config, resolve_task
    folder, name = smollm2_file
    script = PruneScriptArguments(model=str(folder), dataset="d", gguf_file=name)
    config = load_model_config(script)
    assert not config.architectures and resolve_task(script, config) == "causal_lm"
    prunable = PrunableModel.from_pretrained(str(folder), PruningConfig(ablation="zero"),
                                             model_class=transformers.AutoModelForCausalLM, config=config,
                                             gguf_file=name)
    model = prunable.model
    assert getattr(model, "hf_quantizer", None) is None and not getattr(model, "is_quantized", False)
    assert next(model.parameters()).dtype == torch.float32
    validate_quantization_for_training(prunable)   # raised "cannot perform fine-tuning on purely quantized models"
