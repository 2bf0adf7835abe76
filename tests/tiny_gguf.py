"""A tiny random Llama written as a GGUF file (float32 tensors, a character-level BPE tokenizer), so that GGUF paths
run in a second instead of reading the 135M-parameter SmolLM2 file.

`write_tiny_gguf(folder)` returns `(folder, file name)`: load it with
`AutoModelForCausalLM.from_pretrained(folder, gguf_file=name)`. Transformers reads it as a `LlamaForCausalLM` whose
config names no architecture class (as for every GGUF file), 2 layers x 4 query heads (2 key/value heads), hidden 32.
The tokenizer knows the letters, the letters with a leading space (`" e"` is one token) and `<s>` / `</s>`.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

LAYERS, HEADS, KV_HEADS, HIDDEN, INNER = 2, 4, 2, 32, 48
LETTERS = "abcdefghijklmnopqrstuvwxyz"
TOKENS = [*LETTERS, "Ġ", *("Ġ" + c for c in LETTERS), "<s>", "</s>"]
NAME = "tiny-llama.F32.gguf"


def write_tiny_gguf(folder: str | Path, name: str = NAME, seed: int = 0) -> tuple[Path, str]:
    """Write the tiny Llama GGUF into `folder` (created); only a GGUF file, no config.json."""
    import gguf

    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    writer = gguf.GGUFWriter(str(folder / name), "llama")
    writer.add_name("tiny-llama")
    writer.add_context_length(64)
    writer.add_block_count(LAYERS)
    writer.add_feed_forward_length(INNER)
    writer.add_embedding_length(HIDDEN)
    writer.add_rope_dimension_count(HIDDEN // HEADS)
    writer.add_head_count(HEADS)
    writer.add_head_count_kv(KV_HEADS)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_freq_base(10000.0)
    writer.add_vocab_size(len(TOKENS))
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("default")
    writer.add_token_list(TOKENS)
    writer.add_token_types([1] * len(TOKENS))
    writer.add_token_merges([f"Ġ {c}" for c in LETTERS])
    writer.add_bos_token_id(TOKENS.index("<s>"))
    writer.add_eos_token_id(TOKENS.index("</s>"))
    generator = np.random.default_rng(seed)

    def random(tensor: str, shape: tuple[int, ...]) -> None:
        writer.add_tensor(tensor, (generator.standard_normal(shape) * 0.2).astype(np.float32))

    kv = KV_HEADS * HIDDEN // HEADS
    random("token_embd.weight", (len(TOKENS), HIDDEN))
    for layer in range(LAYERS):
        writer.add_tensor(f"blk.{layer}.attn_norm.weight", np.ones(HIDDEN, np.float32))
        random(f"blk.{layer}.attn_q.weight", (HIDDEN, HIDDEN))
        random(f"blk.{layer}.attn_k.weight", (kv, HIDDEN))
        random(f"blk.{layer}.attn_v.weight", (kv, HIDDEN))
        random(f"blk.{layer}.attn_output.weight", (HIDDEN, HIDDEN))
        writer.add_tensor(f"blk.{layer}.ffn_norm.weight", np.ones(HIDDEN, np.float32))
        random(f"blk.{layer}.ffn_gate.weight", (INNER, HIDDEN))
        random(f"blk.{layer}.ffn_up.weight", (INNER, HIDDEN))
        random(f"blk.{layer}.ffn_down.weight", (HIDDEN, INNER))
    writer.add_tensor("output_norm.weight", np.ones(HIDDEN, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return folder, name


def write_lm_prompts(path: str | Path, rows: int = 8) -> Path:
    """A jsonl table of prompts with a one-token correct and counterfactual answer (`circuit --dataset FILE` on a
    causal LM): text, answer, foil."""
    import json

    path = Path(path)
    lines = [json.dumps({"text": f"{LETTERS[i % 20]}{LETTERS[(i + 3) % 20]} {LETTERS[(i + 7) % 20]}",
                         "answer": f" {LETTERS[(i + 1) % 26]}", "foil": f" {LETTERS[(i + 2) % 26]}"})
             for i in range(rows)]
    path.write_text("\n".join(lines) + "\n")
    return path
