"""The shared model builds (`shared_builds.module_once`) give the other xdist worker the same model as a build: a
model unpickled in a process that never built its class records no hidden states or attentions unless it is
registered as transformers' `__init__` would (it was not, and 33 transplant rows compared outputs missing them)."""

from __future__ import annotations

from pathlib import Path

import torch
from fresh_process import python_output
from transformers import BartConfig, BartModel

TESTS = Path(__file__).resolve().parent


def test_a_loaded_build_records_hidden_states_and_attentions_in_a_fresh_process(tmp_path):
    config = BartConfig(vocab_size=50, d_model=16, encoder_layers=1, decoder_layers=1, encoder_attention_heads=2,
                        decoder_attention_heads=2, encoder_ffn_dim=8, decoder_ffn_dim=8, max_position_embeddings=16)
    torch.manual_seed(0)
    model = BartModel(config).eval()
    torch.save(model, tmp_path / "module.pt")
    inputs = {"input_ids": torch.tensor([[3, 4, 5, 2]]), "decoder_input_ids": torch.tensor([[2, 3, 4]])}
    torch.save(inputs, tmp_path / "inputs.pt")
    code = f"""
import sys, torch
sys.path.insert(0, {str(TESTS)!r})
from shared_builds import _registered
inputs = torch.load({str(tmp_path / 'inputs.pt')!r})
for register in (False, True):
    model = torch.load({str(tmp_path / 'module.pt')!r}, weights_only=False)
    model = _registered(model) if register else model
    out = model(**inputs, output_attentions=True, output_hidden_states=True)
    print(register, out.encoder_attentions is not None, out.decoder_hidden_states is not None)
    if register:
        torch.save(out.cross_attentions, {str(tmp_path / 'cross.pt')!r})
"""
    assert python_output(code) == ["False False False", "True True True"]   # the trap, then the fix
    with torch.no_grad():
        expected = model(**inputs, output_attentions=True).cross_attentions
    assert all(torch.equal(a, b) for a, b in zip(torch.load(tmp_path / "cross.pt"), expected, strict=True))
