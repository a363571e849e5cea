"""Evaluate a checkpoint on a split: perplexity (three ways) and forward/backward/harmonic BLEU-4,
every figure with its provenance."""
from __future__ import annotations

import time

from lab import checkpoints, data
from lab.config import ConfigError, DecodeConfig
from lab.generate import sample_captions
from lab.metrics import bleu, distinct_n, perplexity


def bleu_tokens_of(texts_or_ids, tokenizer, kind: str):
    if kind == "words":
        return [t.split() for t in texts_or_ids]
    if kind == "gpt2":
        if tokenizer.kind != "gpt2":
            raise ConfigError(f"BLEU on GPT-2 tokens needs a GPT-2-tokenized model; this one uses "
                              f"{tokenizer.kind!r}: use words")
        return tokenizer.encode_batch(texts_or_ids)
    raise ConfigError(f"bleu_tokens must be 'gpt2' or 'words', got {kind!r}")


def evaluate(checkpoint: str, split: str = "test", n: int = 5000, decode: DecodeConfig | None = None,
             bleu_tokens: str = "gpt2", data_dir=None, store=None, skip_bleu: bool = False,
             ck=None) -> dict:
    decode = decode or DecodeConfig()
    if n < 1:
        raise ConfigError(f"n must be at least 1, got {n}")
    ck = ck or checkpoints.load(checkpoint, store)
    model, tok = ck.model, ck.tokenizer
    caps = data.load_split(split, data_dir)
    t0 = time.time()
    seqs = data.encode_captions(caps, tok, ck.config.n_positions)
    ppl = perplexity(model, seqs, tok.eos_id, n_words=[len(c.split()) for c in caps],
                     device=next(model.parameters()).device)
    result = {"checkpoint": ck.name, "split": split, "perplexity": ppl,
              "perplexity_s": round(time.time() - t0, 2)}
    provenance = {"checkpoint": ck.name, "split": split, "tokenizer": tok.kind,
                  "perplexity_sentences": len(caps), "data_dir": str(data.resolve_data_dir(data_dir))}
    if not skip_bleu:
        t0 = time.time()
        idx = data.subset_indices(len(caps), n, decode.seed)
        refs_text = [caps[i] for i in idx]
        gen = sample_captions(model, tok, len(refs_text), decode)
        gen_s = time.time() - t0
        hyps = [g.tokens for g in gen] if bleu_tokens == "gpt2" else [g.text.split() for g in gen]
        refs = bleu_tokens_of(refs_text, tok, bleu_tokens)
        t1 = time.time()
        result["bleu"] = bleu(hyps, refs)
        result["timing"] = {"generate_s": round(gen_s, 2), "bleu_s": round(time.time() - t1, 2)}
        words = [g.text.split() for g in gen]
        result["diversity"] = {"distinct_1": distinct_n(words, 1), "distinct_2": distinct_n(words, 2),
                               "mean_words": sum(map(len, words)) / len(words),
                               "unfinished": sum(not g.finished for g in gen)}
        result["samples"] = [g.text for g in gen[:10]]
        provenance.update({"decode": decode.to_dict(), "seed": decode.seed, "n": len(refs_text),
                           "subset_hash": data.subset_hash(refs_text), "bleu_tokens": bleu_tokens})
    result["provenance"] = provenance
    return result
