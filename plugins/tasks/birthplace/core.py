"""The birth-place task (the minGPT assignment): a character-level model pretrained on wiki.txt with
span corruption, then fine-tuned on `Where was NAME born?<TAB>PLACE` and asked the question for
people it was never fine-tuned on.

The assignment's definitions are the contract:
- vocabulary: the characters of wiki.txt plus a pad character (U+25A1, id 0) and a mask character
  (U+2047, id 1); block size 128;
- span corruption of a document: truncate it to a random length from 4 to 7/8 of the block; take a
  random span of it (on average a quarter of the truncated length) as the masked content; write
  prefix + MASK + suffix + MASK + masked content, padded to block + 1; input all but the last
  character, target all but the first; pad targets do not count;
- a fine-tuning example: question + MASK + answer + MASK, padded to the block; only the answer part
  counts (the question's positions are targets of padding);
- evaluation: greedy generation from question + MASK up to the next MASK, exact match with the
  place; accuracy over birth_dev.tsv;
- the London baseline: "London" for everyone.

Randomness comes from a torch.Generator the trainer seeds per epoch, so a resumed run corrupts the
documents exactly as an uninterrupted one.
"""
from __future__ import annotations

import math

from pathlib import Path

import torch

from lab.storage import checkpoints
from lab.config import ConfigError, DecodeConfig
from lab.inputs.data import PROJECT_ROOT, Batch, DataError, read_text
from lab.modeling.generate import generate
from lab.evaluation.metrics import bootstrap_indices, paired_difference, wilson
from lab.inputs.tokenizers import CharTokenizer

DEFAULT_DIR = PROJECT_ROOT.parent / "shared" / "data" / "cs224n-birthplaces"
PAD, MASK = "\u25a1", "\u2047"
BLOCK = 128
SPLITS = {"train": "birth_places_train.tsv", "dev": "birth_dev.tsv", "test": "birth_test_inputs.tsv"}


def data_dir(path=None) -> Path:
    import os
    chosen = path or os.environ.get("LAB_BIRTHPLACE_DIR")
    root = Path(chosen).expanduser() if chosen else DEFAULT_DIR
    if not (root / "wiki.txt").is_file():
        raise DataError(f"birth-place data not found: {root} has no wiki.txt (pass --data-dir or "
                        f"set LAB_BIRTHPLACE_DIR to the cs224n-birthplaces folder)")
    return root


def wiki(root=None) -> list[str]:
    """The pretraining documents: one biography per line."""
    return [line for line in read_text(data_dir(root) / "wiki.txt").split("\n") if line.strip()]


def questions(split: str, root=None) -> list[tuple[str, str | None]]:
    """(question, place) pairs of a split; test has no places (None)."""
    if split not in SPLITS:
        raise DataError(f"split must be one of {', '.join(SPLITS)}, got {split!r}")
    out = []
    for i, line in enumerate(read_text(data_dir(root) / SPLITS[split]).splitlines()):
        if not line.strip():
            continue
        q, tab, place = line.partition("\t")
        if split != "test" and not tab:
            raise DataError(f"{SPLITS[split]} line {i + 1} has no TAB between question and place")
        out.append((q, place.strip() if tab else None))
    return out


def tokenizer(root=None) -> CharTokenizer:
    """The characters of wiki.txt with the pad (id 0) and the mask (id 1)."""
    text = read_text(data_dir(root) / "wiki.txt")
    if PAD in text or MASK in text:
        raise DataError("wiki.txt holds the pad or mask character; they must be free for the task")
    return CharTokenizer(MASK + "".join(sorted(set(text))), pad=PAD)    # newline included, as minGPT


def is_task_tokenizer(tok) -> bool:
    """A character tokenizer with the task's mask: a model of the birth-place task."""
    return getattr(tok, "kind", "") == "char" and MASK in getattr(tok, "stoi", {})


def _randint(lo: int, hi: int, g: torch.Generator) -> int:
    """A whole number from lo to hi, both included."""
    return lo + int(torch.randint(hi - lo + 1, (1,), generator=g))


def corrupt(doc: str, g: torch.Generator, block: int = BLOCK) -> str:
    """One span-corruption example of a document, block + 1 characters long."""
    doc = doc[:_randint(4, block * 7 // 8, g)]
    masked_len = min(_randint(1, max(1, len(doc) // 2 - 1), g), len(doc))   # a quarter on average
    start = _randint(0, len(doc) - masked_len, g)
    prefix, masked, suffix = doc[:start], doc[start:start + masked_len], doc[start + masked_len:]
    text = (prefix + MASK + suffix + MASK + masked)[:block + 1]
    return text + PAD * (block + 1 - len(text))


def qa_example(question: str, place: str, block: int = BLOCK) -> tuple[str, int]:
    """question + MASK + place + MASK padded to the block, and where the counted targets start
    (the target of the question's last character: the mask)."""
    text = (question + MASK + place + MASK)[:block]
    return text + PAD * (block - len(text)), len(question) - 1


def span_batch(docs: list[str], tok: CharTokenizer, g: torch.Generator) -> Batch:
    """Input: the first block characters of each corrupted document; targets: the last block;
    pad targets do not count."""
    full = torch.tensor([tok.encode(corrupt(d, g)) for d in docs], dtype=torch.long)
    return Batch(full[:, :-1], (full[:, 1:] != 0).float(), full[:, 1:])


def qa_batch(pairs: list[tuple[str, str]], tok: CharTokenizer) -> Batch:
    """Input: all but the last character of each example; targets: all but the first, counted
    from the mask after the question to the mask after the place."""
    rows, masks = [], []
    for q, place in pairs:
        text, first = qa_example(q, place)
        ids = tok.encode(text)
        rows.append(ids)
        masks.append([1.0 if t >= first and ids[t + 1] != 0 else 0.0 for t in range(len(ids) - 1)])
    full = torch.tensor(rows, dtype=torch.long)
    return Batch(full[:, :-1], torch.tensor(masks), full[:, 1:])


def token_loss(logits: torch.Tensor, batch: Batch) -> torch.Tensor:
    """minGPT's loss: cross-entropy averaged over every counted target of the batch."""
    V = logits.size(-1)
    targets = batch.targets.masked_fill(batch.loss_mask == 0, -100)
    return torch.nn.functional.cross_entropy(logits.reshape(-1, V).float(), targets.reshape(-1),
                                             ignore_index=-100)


def counted_bytes(tok: CharTokenizer, batch: Batch) -> int:
    """The UTF-8 bytes of a batch's counted targets (the characters its loss scores)."""
    ids = batch.targets[batch.loss_mask != 0].tolist()
    return sum(len(c.encode("utf-8")) for c in tok.token_strings(ids))


@torch.no_grad()
def answers_bits_per_byte(model, tok: CharTokenizer, pairs: list[tuple[str, str]], chunk: int = 100) -> float:
    """Bits per byte of the right answers given their questions (the mask after each question,
    the place and its closing mask, as the fine-tune's loss counts them): lm-evaluation-harness's
    measure, the summed NLL in bits over the UTF-8 bytes scored."""
    was = model.training
    model.eval()
    device = next(model.parameters()).device
    nll, nbytes = 0.0, 0
    try:
        for k in range(0, len(pairs), chunk):
            b = qa_batch(pairs[k:k + chunk], tok)
            logits = model(b.input_ids.to(device)).logits
            nll += float(token_loss(logits, b.to(device))) * float(b.loss_mask.sum())
            nbytes += counted_bytes(tok, b)
    finally:
        model.train(was)
    return nll / math.log(2) / max(nbytes, 1)


def answer(model, tok: CharTokenizer, qs: list[str], max_chars: int = 32,
           batch_size: int = 256) -> list[str]:
    """Greedy answers: from question + MASK, one character at a time up to the next MASK (or 32
    characters, as minGPT's evaluation, or the block's end): generation's greedy decoder with the
    mask as the end of the text, so questions of one length decode together from the KV cache
    and an answered question leaves the batch. A question that fills the block gets no answer."""
    n_ctx = model.config.n_positions
    prompts = [tok.encode(q + MASK)[:n_ctx] for q in qs]
    room = [i for i, p in enumerate(prompts) if len(p) < n_ctx]
    out = [""] * len(qs)
    if room:
        made = generate(model, [prompts[i] for i in room],
                        DecodeConfig(decoder="greedy", max_new_tokens=max_chars), tok.stoi[MASK],
                        batch_size=batch_size)
        for i, (new, _, _) in zip(room, made):
            out[i] = tok.decode(new)
    return out


def score(predictions: list[str], places: list[str]) -> dict:
    correct = sum(p == t for p, t in zip(predictions, places))
    return {"correct": correct, "total": len(places), "accuracy": correct / len(places)}


def baseline(split: str = "dev", root=None) -> dict:
    """'London' for everyone."""
    pairs = questions(split, root)
    if pairs and pairs[0][1] is None:
        raise DataError(f"the {split} split has no places to score against; the baseline is scored on dev")
    return score(["London"] * len(pairs), [p for _, p in pairs])


def evaluate(checkpoint: str, split: str = "dev", store=None, root=None, device: str = "cpu") -> dict:
    """A checkpoint's greedy answers to a split's questions; on dev, its accuracy with the 95%
    Wilson interval. {"checkpoint", "split", "predictions": [...], and on dev "correct", "total",
    "accuracy", "accuracy_ci"}."""
    pairs = questions(split, root)
    ck = checkpoints.load(checkpoint, store, device=device)
    if not is_task_tokenizer(ck.tokenizer):
        raise ConfigError(f"checkpoint {checkpoint!r} is not a birth-place model (its tokenizer is "
                          f"{ck.tokenizer.kind!r}, without the task's mask character); train one "
                          f"with `python -m lab birthplace pretrain` / `finetune`")
    unknown = sorted({c for q, _ in pairs for c in q} - set(ck.tokenizer.stoi))
    if unknown:
        raise ConfigError(f"the {split} questions use characters this checkpoint does not know: "
                          f"{''.join(unknown)!r}"[:300])
    got = answer(ck.model, ck.tokenizer, [q for q, _ in pairs])
    out = {"checkpoint": ck.name, "split": split, "predictions": got}
    if pairs and pairs[0][1] is not None:
        right = score(got, [p for _, p in pairs])
        out |= right | {"accuracy_ci": wilson(right["correct"], right["total"]),
                        "bits_per_byte": answers_bits_per_byte(ck.model, ck.tokenizer, pairs)}
    return out


def said(result: dict) -> str:
    """The assignment's line: 'Correct: 107 out of 500: 21.4%'."""
    return f"Correct: {result['correct']} out of {result['total']}: {100 * result['accuracy']:.1f}%"


def compare(names: list[str], split: str = "dev", store=None, root=None, n_boot: int = 1000,
            seed: int = 0) -> dict:
    """Several checkpoints answer the same questions, beside the London baseline: each one's
    accuracy with its Wilson interval, its paired difference against the first checkpoint (a
    bootstrap over questions, 95%), and every question with the gold place and each answer."""
    if not names:
        raise DataError("choose at least one birth-place checkpoint")
    pairs = questions(split, root)
    gold = [p for _, p in pairs]
    answers = {name: evaluate(name, split, store, root)["predictions"] for name in names}
    answers["London (baseline)"] = ["London"] * len(pairs)
    rows = []
    if gold and gold[0] is not None:
        right = {k: torch.tensor([a == g for a, g in zip(v, gold)], dtype=torch.float64)
                 for k, v in answers.items()}
        idx = bootstrap_indices(len(gold), n_boot, seed)
        base = names[0]
        for k, r in right.items():
            row = {"checkpoint": k, **score(answers[k], gold),
                   "accuracy_ci": wilson(int(r.sum()), len(gold))}
            if k != base:
                row["diff"], row["diff_ci"] = paired_difference(r, right[base], idx)
            rows.append(row)
    headers = ["question", "place"] + list(answers)      # a checkpoint may be named "place"
    table = [[q, g or ""] + [v[i] for v in answers.values()] for i, (q, g) in enumerate(pairs)]
    return {"split": split, "baseline": names[0], "rows": rows,
            "answers": {"headers": headers, "rows": table}}
