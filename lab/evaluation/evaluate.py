"""Evaluate a checkpoint on a split: perplexity (three ways) and forward/backward/harmonic BLEU-4,
every figure with its provenance."""
from __future__ import annotations

import time

from lab.storage import checkpoints
from lab.inputs import data, tasks
from lab.config import ConfigError, DecodeConfig
from lab.modeling.generate import CaptionStream, sample_captions
from lab.modeling.device import pick_device
from lab.evaluation.metrics import (References, bleu, bootstrap_indices, distinct_n, percentile_interval,
                                    perplexity, sentence_nlls)


def bleu_tokens_of(texts_or_ids, tokenizer, kind: str):
    if kind == "words":
        return [t.split() for t in texts_or_ids]
    if kind == "gpt2":
        if tokenizer.kind != "gpt2":
            raise ConfigError(f"BLEU on GPT-2 tokens needs a GPT-2-tokenized model; this one uses "
                              f"{tokenizer.kind!r}: use words")
        return tokenizer.encode_batch(texts_or_ids)
    raise ConfigError(f"bleu_tokens must be 'gpt2' or 'words', got {kind!r}")


def check_captions_model(ck) -> None:
    """Perplexity and BLEU of generated text are for models whose task generates text (its
    `tabs` offer "generate"); a birth-place model, say, is scored by its answers instead."""
    tasks.check_view(ck, "generate", "perplexity and BLEU of generated text")


def evaluate(checkpoint: str, split: str = "test", n: int = 5000, decode: DecodeConfig | None = None,
             bleu_tokens: str = "gpt2", data_dir=None, store=None, skip_bleu: bool = False,
             ck=None, skip_perplexity: bool = False, device: str = "cpu") -> dict:
    """device: where the model runs ('cpu', 'cuda' or 'auto'); always float32. Sampling on CUDA
    draws from CUDA's generator, so its captions differ from the CPU's for the same seed."""
    decode = decode or DecodeConfig()
    if not 1 <= n <= 100_000:
        raise ConfigError(f"n must be between 1 and 100000, got {n}")
    ck = ck or checkpoints.load(checkpoint, store, device=str(pick_device(device)))
    if (own := tasks.own_score(ck)) is not None:
        return _task_scores(ck, own, split, n, decode.seed)
    check_captions_model(ck)
    model, tok = ck.model, ck.tokenizer
    if not skip_bleu:
        bleu_tokens = choose_bleu_tokens([tok.kind], bleu_tokens)
    caps, source = tasks.texts([ck], split, data_dir)
    skipped = "" if skip_bleu else tasks.bleu_skipped([ck], caps)
    result = {"checkpoint": ck.name, "split": source["split"]}
    provenance = {"checkpoint": ck.name, "split": source["split"], "tokenizer": tok.kind,
                  "data_dir": source["source"], "unit": source["unit"], **_named(source),
                  "device": str(next(model.parameters()).device),
                  **({"note": source["note"]} if "note" in source else {}),
                  **({"bleu_skipped": skipped} if skipped else {})}
    if not skip_perplexity:
        result.update(_perplexity_figures(ck, caps))
        provenance["perplexity_sentences"] = len(caps)
    if not (skip_bleu or skipped):
        figures, drawn = _bleu_figures(ck, caps, n, decode, bleu_tokens)
        result.update(figures)
        provenance.update(drawn)
    result["provenance"] = provenance
    return result


def _task_scores(ck, score, split: str, n: int, seed: int) -> dict:
    """What a task that scores its own checkpoints reports (lab/task.py: its metrics by name,
    each with its interval), with where it came from."""
    t0 = time.time()
    got = score(ck, split, n, seed)
    return {"checkpoint": ck.name, "split": split, "task": tasks.of_checkpoint(ck), **got,
            "score_s": round(time.time() - t0, 2),
            "provenance": {"checkpoint": ck.name, "split": split, "tokenizer": ck.tokenizer.kind,
                           "seed": seed, "device": str(next(ck.model.parameters()).device)}}


def _perplexity_figures(ck, caps: list[str]) -> dict:
    """The split's perplexity (three ways) and how long it took."""
    model, tok, t0 = ck.model, ck.tokenizer, time.time()
    seqs = data.encode_captions(caps, tok, ck.config.n_positions)
    ppl = perplexity(model, seqs, tok.eos_id, n_words=[len(c.split()) for c in caps],
                     device=next(model.parameters()).device,
                     n_bytes=[len(c.encode("utf-8")) for c in caps])
    return {"perplexity": ppl, "perplexity_s": round(time.time() - t0, 2)}


def _bleu_figures(ck, caps: list[str], n: int, decode: DecodeConfig, bleu_tokens: str) -> tuple[dict, dict]:
    """BLEU of captions sampled for a seeded subset of n references, their diversity and a few
    samples; and how they were drawn (for the provenance)."""
    model, tok, t0 = ck.model, ck.tokenizer, time.time()
    idx = data.subset_indices(len(caps), n, decode.seed)
    refs_text = [caps[i] for i in idx]
    gen = sample_captions(model, tok, len(refs_text), decode)
    gen_s = time.time() - t0
    hyps = [g.tokens for g in gen] if bleu_tokens == "gpt2" else [g.text.split() for g in gen]
    refs = bleu_tokens_of(refs_text, tok, bleu_tokens)
    t1 = time.time()
    figures = {"bleu": bleu(hyps, refs)}
    figures["timing"] = {"generate_s": round(gen_s, 2), "bleu_s": round(time.time() - t1, 2)}
    words = [g.text.split() for g in gen]
    figures["diversity"] = {"distinct_1": distinct_n(words, 1), "distinct_2": distinct_n(words, 2),
                            "mean_words": sum(map(len, words)) / len(words),
                            "unfinished": sum(not g.finished for g in gen)}
    figures["samples"] = [g.text for g in gen[:10]]
    return figures, {"decode": decode.to_dict(), "seed": decode.seed, "n": len(refs_text),
                     "subset_hash": data.subset_hash(refs_text), "bleu_tokens": bleu_tokens}


# ---------------------------------------------------------------- live evaluation on a subset

def choose_bleu_tokens(tokenizer_kinds: list[str], requested: str = "auto") -> str:
    """GPT-2 tokens when every model uses GPT-2 BPE (the assignment's numbers), words otherwise."""
    if requested == "auto":
        return "gpt2" if set(tokenizer_kinds) == {"gpt2"} else "words"
    if requested == "gpt2" and set(tokenizer_kinds) != {"gpt2"}:
        raise ConfigError("BLEU on GPT-2 tokens needs every model to use GPT-2 BPE; "
                          "these models differ, use words")
    return requested


def bleu_skipped(models: dict, split: str = "test", data_dir=None) -> str:
    """Why BLEU is not scored for these models ({name: Checkpoint}) on their texts, or ""."""
    cks = list(models.values())
    return tasks.bleu_skipped(cks, tasks.texts(cks, split, data_dir)[0])


def evaluate_live(models: dict, n: int, decode: DecodeConfig, split: str = "test",
                  bleu_tokens: str = "auto", data_dir=None, chunk: int = 100, n_boot: int = 500,
                  first: int | None = None, own: dict | None = None, abort=None):
    """Score every model on the same seeded subset, yielding a snapshot after each chunk: `chunk`
    captions at a time or, with `first`, first that many (early figures in seconds), then each
    chunk twice the one before, up to `chunk` (later chunks generate in larger batches, which
    read the weights once for more rows: the output layer is memory-bound in small ones). A
    model's captions decode as one stream (generate.CaptionStream), the first chunk alone, then
    `chunk` rows wide, a caption that ends giving its place to the next.

    models: {name: Checkpoint}; own: {name: DecodeConfig}, a model's own decoder in place of
    `decode` (whose seed draws the subset and every model's captions); abort: asked before each
    decoding step, True raises Aborted (a caller that left). Forward BLEU scores each generated
    caption against the *full* reference set (an unbiased estimate of the full figure); backward
    BLEU uses the n references of the subset against the n captions generated so far, and
    carries that n. Where a task says BLEU means nothing on its texts (tasks.bleu_skipped),
    nothing is generated and the provenance says why."""
    _check_request(models, n, chunk, first)
    caps, source = tasks.texts(list(models.values()), split, data_dir)
    subset = [caps[i] for i in data.subset_indices(len(caps), n, decode.seed)]
    kinds = [ck.tokenizer.kind for ck in models.values()]
    per_word = len(set(kinds)) > 1          # per-sentence perplexities of different tokenizers differ in kind
    skipped = tasks.bleu_skipped(list(models.values()), caps)      # then nothing is generated
    tokens = "" if skipped else choose_bleu_tokens(kinds, bleu_tokens)
    references = {} if skipped else _full_references(models, caps, tokens)
    # per caption: nll = mean token NLL, cap_nll = summed, cap_words / cap_bytes = words / bytes + 1
    state = {name: {k: [] for k in ("nll", "cap_nll", "cap_words", "cap_bytes", "fwd", "gen", "refs")}
             for name in models}
    decoders = {name: (own or {}).get(name, decode) for name in models}     # one stream each
    streams = {} if skipped else {name: CaptionStream(ck.model, ck.tokenizer, len(subset), decoders[name])
                                  for name, ck in models.items()}
    provenance = _live_provenance(source, subset, decode, tokens, per_word, streams, decoders, skipped)
    for start, end in chunk_bounds(len(subset), chunk, first):
        part = subset[start:end]
        width = stream_width(start, end, chunk)
        for name, ck in models.items():
            gen = streams[name].take(len(part), width, abort) if streams else None
            _score_chunk(state[name], ck, part, gen, references, tokens)
        yield _snapshot(state, provenance, per_word, n_boot, done=end)


def _check_request(models: dict, n: int, chunk: int, first: int | None) -> None:
    """The sizes asked for, then that every model's task generates text."""
    if n < 1:
        raise ConfigError(f"subset size must be at least 1, got {n}")
    if chunk < 1 or first is not None and first < 1:
        raise ConfigError(f"chunks must hold at least 1 caption, got chunk={chunk}, first={first}")
    for ck in models.values():
        check_captions_model(ck)


def _named(source: dict) -> dict:
    """How prose names the texts' origin, where the task gives a name ("dataset harbour")."""
    return {"named": source["named"]} if source.get("named") else {}


def _live_provenance(source: dict, subset: list[str], decode: DecodeConfig, tokens: str, per_word: bool,
                     streams: dict, decoders: dict, bleu_skipped: str = "") -> dict:
    """What a live evaluation scored, and how: the texts and the subset, the decoding (shared,
    and each model's), the figures shown."""
    return {"split": source["split"], "texts": source["source"], "unit": source["unit"], **_named(source),
            **({"note": source["note"]} if "note" in source else {}), "n": len(subset), "seed": decode.seed,
            "subset_hash": data.subset_hash(subset), "bleu_tokens": tokens,
            "decode": decode.to_dict(), "checkpoints": list(decoders),
            "decoders": {name: cfg.to_dict() for name, cfg in decoders.items()},
            "perplexity_shown": "per word" if per_word else "per sentence (assignment)",
            # how the captions were drawn (a stream draws other captions for a seed than one batch
            # per chunk would: the same distribution, another draw)
            "generated": {name: "one stream, places reused" if s.streams else "one batch per chunk"
                          for name, s in streams.items()},
            **({"bleu_skipped": bleu_skipped} if bleu_skipped else {})}


def _full_references(models: dict, caps: list[str], tokens: str) -> dict:
    """The whole split as forward BLEU's references, once per kind of BLEU token the models need."""
    references = {}
    for ck in models.values():
        key = ck.tokenizer.kind if tokens == "gpt2" else "words"
        if key not in references:
            references[key] = References(bleu_tokens_of(caps, ck.tokenizer, tokens))
    return references


def _score_chunk(s: dict, ck, part: list[str], gen: list | None, references: dict, tokens: str) -> None:
    """Add a model's per-caption figures on a chunk of references to its state `s`: the NLLs of
    the references, forward BLEU of the captions it generated (gen None: BLEU is not scored),
    both kept for backward BLEU."""
    tok = ck.tokenizer
    seqs = data.encode_captions(part, tok, ck.config.n_positions)
    nll, cnt = sentence_nlls(ck.model, seqs, tok.eos_id, device=next(ck.model.parameters()).device)
    s["nll"] += (nll / cnt).tolist()
    s["cap_nll"] += nll.tolist()
    s["cap_words"] += [len(c.split()) + 1 for c in part]
    s["cap_bytes"] += [len(c.encode("utf-8")) + 1 for c in part]
    if gen is None:
        return
    hyps = [g.tokens for g in gen] if tokens == "gpt2" else [g.text.split() for g in gen]
    key = tok.kind if tokens == "gpt2" else "words"
    s["fwd"] += references[key].sentence_bleus(hyps)
    s["gen"] += hyps
    s["refs"] += bleu_tokens_of(part, tok, tokens)


def stream_width(start: int, end: int, chunk: int) -> int:
    """How many rows live evaluation's stream decodes at once for the chunk [start, end): the
    first chunk alone, for early figures; later ones `chunk` rows wide (or the chunk's size), in
    fewer, wider steps, since each step has a fixed cost besides its cost per row
    (experiments/generation_cpu/step_overheads/). Captions started beyond a chunk carry on into
    the next."""
    return end - start if start == 0 else max(chunk, end - start)


def chunk_bounds(n: int, chunk: int, first: int | None = None) -> list[tuple[int, int]]:
    """(start, end) of each chunk of n captions: `chunk` at a time or, with `first`, first that
    many, then each chunk twice the one before, up to `chunk`."""
    starts, size = [0], first or chunk
    while starts[-1] + size < n:
        starts.append(starts[-1] + size)
        size = min(2 * size, chunk) if first else chunk
    return list(zip(starts, starts[1:] + [n]))


def _word_perplexity(s: dict, rows=None):
    """Per-word perplexity of a model's captions (summed NLL / words), or one per bootstrap row
    of `rows` (the same rows for every model: paired)."""
    import math
    if rows is None:
        return math.exp(s["cap_nll"].sum().item() / s["cap_words"].sum().item())
    return (s["cap_nll"][rows].sum(1) / s["cap_words"][rows].sum(1)).exp()


def _bits_per_byte(s: dict, rows=None):
    """Bits per byte (lm-evaluation-harness's: summed NLL in bits over UTF-8 bytes), or one per
    bootstrap row of `rows` (the same rows for every model: paired)."""
    import math
    if rows is None:
        return s["cap_nll"].sum().item() / math.log(2) / s["cap_bytes"].sum().item()
    return s["cap_nll"][rows].sum(1) / s["cap_bytes"][rows].sum(1) / math.log(2)


def paired_intervals(per_caption: dict, n_boot: int, seed: int, per_word: bool = False) -> tuple[dict, list]:
    """Every figure with its 95% percentile-bootstrap interval, and each model's paired difference
    against the first, from per-caption figures computed once. per_caption: {name: {"nll": mean
    token NLL per caption, "cap_nll": summed NLL, "cap_words": words + 1, optionally "cap_bytes":
    UTF-8 bytes + 1 (then bits per byte too), optionally (then BLEU too) "fwd": forward BLEU per
    generated caption, "bwd": backward BLEU per reference}}, all on the same captions in the same
    order (the generated set held fixed for backward BLEU). Returns ({name: row}, [difference])."""
    import torch
    s = {name: {k: torch.as_tensor(v, dtype=torch.float64) for k, v in figs.items()}
         for name, figs in per_caption.items()}
    m = len(next(iter(s.values()))["nll"])
    idx = bootstrap_indices(m, n_boot, seed)
    rows, boots = {}, {}
    for name, x in s.items():
        rows[name], boots[name] = _interval_row(x, idx)
    names = list(s)
    # paired by caption: same references, same seeds and positions
    diffs = [_paired_difference(names[0], other, s, rows, boots, idx, per_word) for other in names[1:]]
    return rows, diffs


def _interval_row(x: dict, idx) -> tuple[dict, dict]:
    """One model's figures with their intervals, and its bootstrap rows of harmonic BLEU and mean
    token NLL (for the paired differences)."""
    import math
    boot = {"ppl": x["nll"][idx].mean(1)}
    row = {
        "n": len(x["nll"]),
        "perplexity": math.exp(x["nll"].mean().item()),
        "perplexity_ci": [math.exp(v) for v in percentile_interval(boot["ppl"])],
        "word_perplexity": _word_perplexity(x),
        "word_perplexity_ci": percentile_interval(_word_perplexity(x, idx)),
    }
    if "fwd" in x:
        forward, backward = x["fwd"].mean().item(), x["bwd"].mean().item()
        fb, bb = x["fwd"][idx].mean(1), x["bwd"][idx].mean(1)
        boot["harmonic"] = 2 * fb * bb / (fb + bb).clamp_min(1e-300)
        row.update({
            "forward_bleu": forward, "forward_bleu_ci": percentile_interval(fb),
            "backward_bleu": backward, "backward_n": len(x["bwd"]),
            "backward_bleu_ci": percentile_interval(bb),
            "harmonic_bleu": 2 * forward * backward / (forward + backward) if forward + backward else 0.0,
            "harmonic_bleu_ci": percentile_interval(boot["harmonic"])})
    if "cap_bytes" in x:
        row["bits_per_byte"] = _bits_per_byte(x)
        row["bits_per_byte_ci"] = percentile_interval(_bits_per_byte(x, idx))
    return row, boot


def _paired_difference(base: str, other: str, s: dict, rows: dict, boots: dict, idx,
                       per_word: bool) -> dict:
    """Model `other` against `base`, each difference with its paired interval."""
    a, b = s[base], s[other]
    return {"model": other, "baseline": base,
            "perplexity_diff": rows[other]["perplexity"] - rows[base]["perplexity"],
            "perplexity_diff_ci": percentile_interval(boots[other]["ppl"].exp() - boots[base]["ppl"].exp()),
            "perplexity_comparable": not per_word,
            # the same captions, so per word pairs across tokenizers too
            "word_perplexity_diff": rows[other]["word_perplexity"] - rows[base]["word_perplexity"],
            "word_perplexity_diff_ci": percentile_interval(_word_perplexity(b, idx)
                                                           - _word_perplexity(a, idx)),
            **(_bleu_differences(a, b, rows[base], rows[other], boots[base], boots[other], idx)
               if "fwd" in a and "fwd" in b else {}),
            # per byte, like per word, pairs across tokenizers
            **({"bits_per_byte_diff": rows[other]["bits_per_byte"] - rows[base]["bits_per_byte"],
                "bits_per_byte_diff_ci": percentile_interval(_bits_per_byte(b, idx) - _bits_per_byte(a, idx))}
               if "cap_bytes" in a and "cap_bytes" in b else {})}


def _bleu_differences(a: dict, b: dict, row_a: dict, row_b: dict, boot_a: dict, boot_b: dict,
                      idx) -> dict:
    """Forward and harmonic BLEU of b against a, each with its paired interval."""
    d_fwd = b["fwd"] - a["fwd"]
    return {"forward_bleu_diff": d_fwd.mean().item(),
            "forward_bleu_diff_ci": percentile_interval(d_fwd[idx].mean(1)),
            "harmonic_bleu_diff": row_b["harmonic_bleu"] - row_a["harmonic_bleu"],
            "harmonic_bleu_diff_ci": percentile_interval(boot_b["harmonic"] - boot_a["harmonic"])}


def _snapshot(state: dict, provenance: dict, per_word: bool, n_boot: int, done: int) -> dict:
    per_caption = {}
    for name, s in state.items():
        # per reference, its BLEU against the captions generated so far: computed once, then
        # resampled with the same rows as forward BLEU
        per_caption[name] = {"nll": s["nll"], "cap_nll": s["cap_nll"], "cap_words": s["cap_words"],
                             "cap_bytes": s["cap_bytes"]}
        if not provenance.get("bleu_skipped"):
            per_caption[name].update(fwd=s["fwd"], bwd=References(s["gen"]).sentence_bleus(s["refs"]))
    rows, diffs = paired_intervals(per_caption, n_boot, provenance["seed"], per_word)
    return {"done": done, "total": provenance["n"], "models": rows, "differences": diffs,
            "provenance": provenance}


# ---------------------------------------------------------------- which model is better

# metric: (label, lower is better, digits); the order verdicts are said in
VERDICT_METRICS = {"word_perplexity": ("per-word perplexity", True, 2),
                   "bits_per_byte": ("bits per byte", True, 4),
                   "perplexity": ("perplexity", True, 2),
                   "forward_bleu": ("forward BLEU", False, 4),
                   "harmonic_bleu": ("harmonic BLEU", False, 4)}


def verdict(diff: dict, metric: str) -> str:
    """One line: which of the pair is better on `metric`, by how much, and whether the paired 95%
    interval of the difference excludes zero."""
    label, lower_better, digits = VERDICT_METRICS[metric]
    d, (lo, hi) = diff[f"{metric}_diff"], diff[f"{metric}_diff_ci"]
    model, base = diff["model"], diff["baseline"]
    if lo <= 0 <= hi:
        return (f"no significant difference between {model} and {base} in {label} "
                f"({model} − {base} = {d:.{digits}f} [{lo:.{digits}f}, {hi:.{digits}f}] includes 0)")
    model_better = (d < 0) == lower_better
    better, worse = (model, base) if model_better else (base, model)
    a, b = sorted((abs(lo), abs(hi)))
    return (f"{better} is better than {worse} on {label} ({'lower' if lower_better else 'higher'} is "
            f"better) by {abs(d):.{digits}f} [{a:.{digits}f}, {b:.{digits}f}]")


def verdicts(snapshot: dict) -> list[str]:
    """Every pair's verdicts, metric by metric (perplexity only when tokenizers match)."""
    out = []
    for diff in snapshot["differences"]:
        for metric in VERDICT_METRICS:
            if metric == "perplexity" and not diff["perplexity_comparable"] \
                    or f"{metric}_diff" not in diff:        # (bits per byte: not in a sweep's table)
                continue
            out.append(verdict(diff, metric))
    return out
