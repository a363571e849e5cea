"""Sweep figures of a checkpoint that writes text (a caption model, a model of a person's own
corpus): `score_texts` scores the checkpoints of a task whose sweep_score is
tasks.SCORED_AS_TEXT."""
from __future__ import annotations

import time

from lab.config import DecodeConfig
from lab.evaluation import exposure
from lab.evaluation.evaluate import bleu_tokens_of, choose_bleu_tokens
from lab.evaluation.metrics import References, sentence_nlls
from lab.inputs import data, tasks
from lab.modeling.generate import sample_captions
from lab.modeling.generate import kv_bytes_per_token
from lab.sweeps.spec import decoder_label


def score_texts(ck, sc, *, data_dir=None, abort=None, t0: float = 0.0):
    """A sweep's figures for a checkpoint that writes text: perplexity of a seeded subset of a
    split of the texts it is scored on (its task's: the captions, or its dataset's), and the texts
    each decoder writes for it, scored forward and backward (a generator of progress events that
    returns the figures)."""
    model, tok = ck.model, ck.tokenizer
    tokens = choose_bleu_tokens([tok.kind], sc.bleu_tokens)
    entry = {"checkpoint": ck.name, "bleu_tokens": tokens, "tokenizer": tok.kind,
             "params": sum(p.numel() for p in model.parameters()),
             "kv_bytes_per_token": kv_bytes_per_token(model), "epoch": ck.metrics.get("epoch"),
             "dev_perplexity": ck.metrics.get("final_dev_perplexity", ck.metrics.get("dev_perplexity")),
             "dev_harmonic_bleu": ck.metrics.get("dev_harmonic_bleu"), "splits": {}}
    for split in [sc.split] + (["test"] if sc.pick_on_test else []):
        caps, source = tasks.texts([ck], split, data_dir)
        unit = source["unit"]
        subset = [caps[i] for i in data.subset_indices(len(caps), sc.n, sc.seed)]
        yield _scoring(f"{ck.name}: perplexity of {len(subset):,} {split} {unit}", t0)
        nll, cnt = sentence_nlls(model, data.encode_captions(subset, tok, ck.config.n_positions),
                                 tok.eos_id, abort=abort)
        part = {"n": len(subset), "subset_hash": data.subset_hash(subset), "nll": nll.tolist(),
                "count": cnt.tolist(), "words": [len(c.split()) + 1 for c in subset], "decoders": []}
        if sc.exposure:
            yield _scoring(f"{ck.name}: exposure bias on {len(subset):,} {split} {unit}", t0)
            part["exposure"] = exposure.measure(model, tok, subset, seed=sc.seed)
        refs_all = References(bleu_tokens_of(caps, tok, tokens))
        refs = bleu_tokens_of(subset, tok, tokens)
        decoders = [best_decoder(entry["splits"][sc.split])] if split == "test" and sc.pick_on_test \
            else sc.decoders
        for d in decoders:
            yield _scoring(f"{ck.name}: {len(subset):,} {split} {unit} with {decoder_label(d)}", t0)
            part["decoders"].append(_decoder_figures(ck, d, sc.seed, len(subset), tokens, refs_all, refs,
                                                     abort))
        entry["splits"][split] = part
    return entry


def _scoring(what: str, t0: float) -> dict:
    """A sweep's progress event: what it scores now, and how long it has scored."""
    return {"event": "scoring", "what": what, "elapsed_s": time.time() - t0, "time": time.time()}


def _decoder_figures(ck, d: dict, seed: int, n: int, tokens: str, refs_all, refs: list, abort) -> dict:
    """The n captions decoder `d` writes, scored forward (against every reference of the split)
    and backward (the subset's references against them), with its speed and a few samples."""
    g0 = time.time()
    gen = sample_captions(ck.model, ck.tokenizer, n, DecodeConfig.from_dict({**d, "seed": seed}), abort=abort)
    gen_s = time.time() - g0
    hyps = [g.tokens for g in gen] if tokens == "gpt2" else [g.text.split() for g in gen]
    back = References(hyps)
    return {"decode": d, "label": decoder_label(d),
            "forward": refs_all.sentence_bleus(hyps),
            "backward": back.sentence_bleus(refs),
            "generate_s": gen_s,
            "tokens_per_s": sum(len(g.tokens) - g.n_prompt + g.finished for g in gen) / max(gen_s, 1e-9),
            "samples": [g.text for g in gen[:5]]}


def best_decoder(split_results: dict) -> dict:
    """The decoder with the highest harmonic BLEU on a split's results."""
    return max(split_results["decoders"], key=lambda d: harmonic(d["forward"], d["backward"]))["decode"]


def harmonic(fwd: list, bwd: list) -> float:
    """The harmonic mean of mean forward and mean backward BLEU."""
    f, b = sum(fwd) / len(fwd), sum(bwd) / len(bwd)
    return 2 * f * b / (f + b) if f + b else 0.0
