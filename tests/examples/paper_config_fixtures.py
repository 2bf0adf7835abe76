"""Local stand-ins for what the paper-scale example configs fetch from the Hub: MNLI and HANS in their Hub schemas
(served to `datasets.load_dataset`, so the configs' `mnli` / `hans` ids run through the same loaders), and tiny
random models of the configs' families (BERT, Llama) with tokenizers built from the data's words."""

from __future__ import annotations

import itertools
import json
import random
from pathlib import Path
from typing import Any

import datasets
import torch

NAMES = ["the doctor", "the lawyer", "the artist", "the author", "the judge", "the student", "the senator",
         "the manager", "the banker", "the actor"]
VERBS = ["saw", "helped", "called", "paid", "thanked", "met", "advised", "recognized"]
MNLI_LABELS = ["entailment", "neutral", "contradiction"]
HANS_SUBCASES = {  # (heuristic, subcase): entailed?
    ("lexical_overlap", "ln_subject/object_swap"): False, ("lexical_overlap", "ln_preposition"): False,
    ("constituent", "cn_embedded_under_if"): False, ("constituent", "cn_embedded_under_verb"): False,
    ("lexical_overlap", "le_relative_clause"): True, ("constituent", "ce_adverb"): True,
}


def sentences(seed: int, count: int) -> list[tuple[str, str, int]]:
    rng = random.Random(seed)
    pairs = list(itertools.product(NAMES, VERBS, NAMES))
    rows = []
    for _ in range(count):
        a, verb, b = rng.choice(pairs)
        label = rng.randrange(3)
        hypothesis = {0: f"{a} {verb} {b} .", 1: f"{a} {verb} someone .", 2: f"{b} {verb} {a} ."}[label]
        rows.append((f"{a.capitalize()} {verb} {b} .", hypothesis.capitalize(), label))
    return rows


def mnli_split(split: str, count: int) -> datasets.Dataset:
    """GLUE's MNLI schema: premise, hypothesis, label (ClassLabel), idx."""
    seed = {"train": 0, "validation_matched": 1, "validation_mismatched": 2}[split]
    rows = sentences(seed, count)
    features = datasets.Features({"premise": datasets.Value("string"), "hypothesis": datasets.Value("string"),
                                  "label": datasets.ClassLabel(names=MNLI_LABELS), "idx": datasets.Value("int32")})
    return datasets.Dataset.from_dict({"premise": [r[0] for r in rows], "hypothesis": [r[1] for r in rows],
                                       "label": [r[2] for r in rows], "idx": list(range(len(rows)))},
                                      features=features)


def hans_split(per_subcase: int) -> datasets.Dataset:
    """jhu-cogsci/hans's schema: premise, hypothesis, label (entailment / non-entailment), parse fields, heuristic,
    subcase (HANS's own spelling, with '/'), template."""
    rows: dict[str, list[Any]] = {key: [] for key in ("premise", "hypothesis", "label", "parse_premise",
                                                      "parse_hypothesis", "binary_parse_premise",
                                                      "binary_parse_hypothesis", "heuristic", "subcase", "template")}
    for number, ((heuristic, subcase), entailed) in enumerate(HANS_SUBCASES.items()):
        for premise, hypothesis, _ in sentences(100 + number, per_subcase):
            rows["premise"].append(premise)
            rows["hypothesis"].append(hypothesis)
            rows["label"].append(0 if entailed else 1)
            for key in ("parse_premise", "parse_hypothesis", "binary_parse_premise", "binary_parse_hypothesis"):
                rows[key].append("( )")
            rows["heuristic"].append(heuristic)
            rows["subcase"].append(subcase)
            rows["template"].append(f"temp{number}")
    features = datasets.Features({key: datasets.Value("string") for key in rows if key != "label"})
    features["label"] = datasets.ClassLabel(names=["entailment", "non-entailment"])
    return datasets.Dataset.from_dict(rows, features=features)


def fake_load_dataset(sizes: dict[str, int]):
    """`datasets.load_dataset` for the configs' Hub ids (MNLI from GLUE, HANS); anything else is refused."""
    def load_dataset(path: str, name: str | None = None, split: str | None = None, **kwargs: Any):
        if path == "nyu-mll/glue" and name == "mnli" and split in ("train", "validation_matched",
                                                                  "validation_mismatched"):
            return mnli_split(split, sizes["train" if split == "train" else "validation"])
        if path == "jhu-cogsci/hans" and split == "validation":
            return hans_split(sizes["hans_per_subcase"])
        raise AssertionError(f"unexpected Hub dataset request {path!r} {name!r} split={split!r}")
    return load_dataset


def words() -> list[str]:
    vocab = set()
    for premise, hypothesis, _ in sentences(0, 50):
        vocab.update(premise.split() + hypothesis.split())
    for name in NAMES + VERBS + ["someone"]:
        for word in name.split():
            vocab.update([word, word.capitalize()])
    return sorted(vocab)


def tiny_bert(folder: Path) -> Path:
    """A BERT (bert-base-cased's family: BertForMaskedLM, cased WordPiece) with 2 layers x 4 heads."""
    from transformers import BertConfig, BertForMaskedLM, BertTokenizerFast
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "vocab.txt").write_text("\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words()]) + "\n")
    tokenizer = BertTokenizerFast(vocab_file=str(folder / "vocab.txt"), do_lower_case=False)
    torch.manual_seed(0)
    config = BertConfig(vocab_size=len(tokenizer), hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                        intermediate_size=37, max_position_embeddings=512, architectures=["BertForMaskedLM"])
    BertForMaskedLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def tiny_llama(folder: Path) -> Path:
    """A Llama (SmolLM2's family: LlamaForCausalLM, grouped-query attention, bf16 weights, a tokenizer with no
    padding token) with 2 layers x 4 query heads / 2 key-value heads."""
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast
    folder.mkdir(parents=True, exist_ok=True)
    vocab = {token: i for i, token in enumerate(["<|endoftext|>", "<unk>", *words()])}
    backend = Tokenizer(models.WordLevel(vocab, unk_token="<unk>"))
    backend.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, bos_token="<|endoftext|>",
                                        eos_token="<|endoftext|>", unk_token="<unk>")
    assert tokenizer.pad_token is None
    torch.manual_seed(0)
    config = LlamaConfig(vocab_size=len(vocab), hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256, bos_token_id=0,
                         eos_token_id=0, tie_word_embeddings=True, architectures=["LlamaForCausalLM"],
                         dtype="bfloat16")
    LlamaForCausalLM(config).to(torch.bfloat16).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def read_config(path: Path) -> dict[str, Any]:
    import yaml
    return yaml.safe_load(path.read_text())


def dump(value: Any) -> str:
    return json.dumps(value)
