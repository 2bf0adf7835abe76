"""Wrap the real all-MiniLM-L6-v2 (BERT, 6 layers x 12 heads), compute mean activations, and print a table of what
mean-ablating each attention head (and each MLP block) does to the model's sentence embeddings.

The effect is measured as 1 - cosine(embedding of the ablated model, embedding of the full model), averaged over
sentence pairs, and as the change in premise/hypothesis similarity. Runs offline on a CPU in about 25 s (measured on
a 2-core machine shared with other jobs, load average ~4: 23-27 s, of which ~11 s import torch and load MiniLM and
~8 s are the 85 forward passes):

    HF_HUB_OFFLINE=1 python examples/mask_ablation_table.py [--ablation mean|zero|resample] [--save-masks DIR]

The batch is 16 short sentences, too small for several intra-op threads to pay off: with torch's default of one
thread per core the threads wait on each other, and it took 54 s there (86 s in issue #36's trial), so `--threads`
defaults to 1.
"""

from __future__ import annotations

import argparse

import torch
from transformers import AutoModel, AutoTokenizer

from hf_heuristic_core import PrunableModel, PruningConfig
from hf_heuristic_core.offline_models import minilm_path

PAIRS = [
    ("The doctor near the actor danced.", "The actor danced."),
    ("The lawyer saw the judge.", "The judge saw the lawyer."),
    ("If the artist slept, the author ran.", "The artist slept."),
    ("The banker knew that the secretary resigned.", "The secretary resigned."),
    ("The students who the professor helped laughed.", "The professor laughed."),
    ("Since the athlete waited, the senator called the tourist.", "The senator called the tourist."),
    ("The manager was recommended by the president.", "The president recommended the manager."),
    ("The tourists believed that the scientist avoided the doctors.", "The scientist avoided the doctors."),
]


def embed(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    """Mean-pooled, L2-normalized sentence embeddings (how all-MiniLM-L6-v2 is used)."""
    hidden = model(**batch).last_hidden_state
    mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
    pooled = (hidden * mask).sum(1) / mask.sum(1)
    return torch.nn.functional.normalize(pooled, dim=-1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--ablation", default="mean", choices=["mean", "zero", "resample"])
    parser.add_argument("--save-masks", default=None, help="Save the mask artifact of the most harmful head here.")
    parser.add_argument("--threads", type=int, default=1,
                        help="torch intra-op threads (default 1: faster for this tiny batch, see above).")
    args = parser.parse_args()

    torch.set_num_threads(max(1, args.threads))
    torch.manual_seed(0)
    path = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(path)
    model = PrunableModel(AutoModel.from_pretrained(path), PruningConfig(ablation=args.ablation)).eval()
    premises, hypotheses = zip(*PAIRS)
    batch = tokenizer(list(premises) + list(hypotheses), padding=True, return_tensors="pt")
    info = model.compute_means(batch)
    print(f"means: {info['token_count']} real tokens, fingerprint {info['data_fingerprint'][:12]}, "
          f"{model.num_layers} layers x {model.num_heads} heads (head_dim {model.head_dim})")

    with torch.no_grad(), model.masks_disabled():
        full = embed(model, batch)
    n = len(PAIRS)
    full_similarity = (full[:n] * full[n:]).sum(-1).mean().item()

    def effect(heads: torch.Tensor, mlps: torch.Tensor) -> tuple[float, float]:
        model.set_masks(heads=heads, mlps=mlps)
        with torch.no_grad():
            ablated = embed(model, batch)
        drift = (1 - (ablated * full).sum(-1)).mean().item()
        similarity = (ablated[:n] * ablated[n:]).sum(-1).mean().item()
        return drift, similarity - full_similarity

    ones_heads, ones_mlps = torch.ones(model.num_layers, model.num_heads), torch.ones(model.num_layers)
    drift = torch.zeros(model.num_layers, model.num_heads)
    for layer in range(model.num_layers):
        for head in range(model.num_heads):
            heads = ones_heads.clone()
            heads[layer, head] = 0
            drift[layer, head], _ = effect(heads, ones_mlps)

    print(f"\n{args.ablation}-ablating one head: embedding drift 1 - cos (x1000), rows = layers, columns = heads")
    print("layer " + "".join(f"{h:>7}" for h in range(model.num_heads)))
    for layer in range(model.num_layers):
        print(f"{layer:>5} " + "".join(f"{1000 * drift[layer, h]:7.2f}" for h in range(model.num_heads)))

    print(f"\n{'ablated unit':<14}{'drift x1000':>12}{'delta pair similarity':>24}")
    top = torch.topk(drift.flatten(), 5).indices.tolist()
    for index in top:
        layer, head = divmod(index, model.num_heads)
        heads = ones_heads.clone()
        heads[layer, head] = 0
        d, s = effect(heads, ones_mlps)
        print(f"{f'L{layer}.H{head}':<14}{1000 * d:12.2f}{s:+24.4f}")
    for layer in range(model.num_layers):
        mlps = ones_mlps.clone()
        mlps[layer] = 0
        d, s = effect(ones_heads, mlps)
        print(f"{f'MLP {layer}':<14}{1000 * d:12.2f}{s:+24.4f}")
    joint = ones_heads.clone()
    for index in top:
        joint[divmod(index, model.num_heads)] = 0
    d, s = effect(joint, ones_mlps)
    print(f"{'top-5 jointly':<14}{1000 * d:12.2f}{s:+24.4f}")

    if args.save_masks:
        heads = ones_heads.clone()
        heads[divmod(top[0], model.num_heads)] = 0
        model.set_masks(heads=heads, mlps=ones_mlps)
        model.save_pretrained(args.save_masks)
        print(f"\nsaved the mask artifact (head L{top[0] // model.num_heads}.H{top[0] % model.num_heads} ablated) "
              f"to {args.save_masks}")


if __name__ == "__main__":
    main()
