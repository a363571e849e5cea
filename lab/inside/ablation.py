"""Head ablation: zero a set of heads' outputs (before the output projection), or put their mean
over a seeded reference subset in their place, and see what changes: the captions the model
writes from the same prompts, and its perplexity on a seeded subset with a paired 95% bootstrap
interval and a verdict. `scan` ablates each head in turn, exactly: the residual stream below the
ablated layer is computed once and reused, and a layer's heads run as one batch."""
from __future__ import annotations

import math
import time

import torch

from lab.config import ConfigError, DecodeConfig
from lab.evaluation.evaluate import bleu_tokens_of, choose_bleu_tokens
from lab.evaluation.metrics import (Aborted, References, bootstrap_indices, percentile_interval,
                                    sentence_nlls)
from lab.inputs import data, tasks
from lab.inputs.data import collate, sentence_nll
from lab.inside.hooks import check_model, hooked
from lab.modeling.generate import generate, sample_captions
from lab.modeling.model import recycled_logits
from lab.presets import DECODE_TO_CONTINUE, DECODE_TO_SCORE

MODES = ("zero", "mean")
N_BOOT = 1000
# what one request may ask, through the page, the API and the command line alike
MAX_TEXTS = 2000          # texts one ablation of a set of heads scores
MAX_SCAN_TEXTS = 500      # texts each head's scan scores
# a scan's work in head-texts (each head ablated alone on each text): SmolLM2's 270 heads on 20
# texts took 3.5 minutes on the 2-core machine sharing it (docs/inside.md); at most about twice
MAX_SCAN_WORK = 10_000
TOKENS_PER_CALL = 1024     # a scan's forward passes: rows x positions of logits at once


def parse_heads(text: str, n_layer: int, n_head: int) -> list[tuple[int, int]]:
    """'1.3,2.1' (block.head, both from 1, as the attention grid numbers them) -> [(0, 2), (1, 0)]."""
    heads = []
    for item in str(text).replace(" ", "").split(","):
        if not item:
            continue
        layer, dot, head = item.partition(".")
        if not (dot and layer.isdigit() and head.isdigit()):
            raise ConfigError(f"heads are BLOCK.HEAD pairs from 1, e.g. 1.3,2.1; got {item!r}"[:300])
        layer, head = int(layer), int(head)
        if not (1 <= layer <= n_layer and 1 <= head <= n_head):
            raise ConfigError(f"head {item} out of range: this model has blocks 1 to {n_layer} and "
                              f"heads 1 to {n_head}")
        if (layer - 1, head - 1) in heads:
            raise ConfigError(f"head {item} is named twice")
        heads.append((layer - 1, head - 1))
    if not heads:
        raise ConfigError("name the heads to ablate, e.g. 1.3,2.1 (block.head, from 1)")
    return heads


def _device(model):
    return next(model.parameters()).device


@torch.no_grad()
def head_means(model, seqs: list[list[int]], pad_id: int, batch_size: int = 64) -> dict[int, torch.Tensor]:
    """Each layer's heads' mean output over the real tokens of `seqs`: {layer: (n_head, head_dim)}."""
    n_layer = len(model.transformer.h)
    names = [f"blocks.{i}.attn.z" for i in range(n_layer)]
    sums, count = {}, 0.0
    was = model.training
    model.eval()
    try:
        for batch in data.batches(seqs, batch_size, pad_id):
            real = (batch.input_ids != pad_id).float()
            real[:, 0] = 1.0                                      # a leading BOS is real
            real = real.to(_device(model))
            with hooked(model, read=names) as seen:
                model(batch.input_ids.to(_device(model)))
            for i, n in enumerate(names):                         # z: (B, nh, T, hs)
                s = (seen[n].float() * real[:, None, :, None]).sum((0, 2))
                sums[i] = sums.get(i, 0) + s
            count += float(real.sum())
    finally:
        model.train(was)
    return {i: s / max(count, 1.0) for i, s in sums.items()}


def ablations(heads: list[tuple[int, int]], mode: str, means: dict | None) -> dict:
    """The replacements that ablate `heads`: {point name: fn(z) -> z}."""
    by_layer: dict[int, list[int]] = {}
    for layer, head in heads:
        by_layer.setdefault(layer, []).append(head)

    def fn_for(layer, hs):
        def fn(z):
            z = z.clone()
            z[:, hs] = 0.0 if mode == "zero" else means[layer][hs][None, :, None, :].to(z.dtype)
            return z
        return fn
    return {f"blocks.{layer}.attn.z": fn_for(layer, hs) for layer, hs in by_layer.items()}


def check_scan(name: str, heads: int, n: int) -> None:
    """Refuses a scan of `heads` heads on `n` texts that would exceed MAX_SCAN_WORK, saying how many
    texts it may ask for."""
    if n * heads > MAX_SCAN_WORK:
        raise ConfigError(f"each of {name}'s {heads} heads alone on {n} texts is {n * heads:,} "
                          f"head-texts; one scan may ask at most {MAX_SCAN_WORK:,}: ask for at most "
                          f"{MAX_SCAN_WORK // heads} texts")


def subsets(ck, split: str, n: int, seed: int, n_ref: int, data_dir=None):
    """(texts scored, their ids, the reference ids the means come from, where they came from):
    two disjoint seeded subsets of the checkpoint's task's split (its task's texts(): a task that
    gives none is refused by name)."""
    texts, source = tasks.texts([ck], split, data_dir)
    order = data.subset_indices(len(texts), min(len(texts), n + n_ref), seed)
    scored, ref = [texts[i] for i in order[:n]], [texts[i] for i in order[n:]] or [texts[order[0]]]
    n_pos = ck.config.n_positions
    return scored, data.encode_captions(scored, ck.tokenizer, n_pos), \
        data.encode_captions(ref, ck.tokenizer, n_pos), source


def _prepared(ck, mode: str, split: str, n: int, seed: int, n_ref: int, data_dir):
    """What every ablation starts from: (the texts scored, their ids, where they came from, with
    mode=mean each head's mean over the reference subset (else None), and the reference texts
    counted (0 without mode=mean)); the model in eval mode."""
    if mode not in MODES:
        raise ConfigError(f"mode must be zero or mean, got {mode!r}")
    check_model(ck.model)
    ck.model.eval()
    texts, seqs, ref, source = subsets(ck, split, n, seed, n_ref, data_dir)
    if mode != "mean":
        return texts, seqs, source, None, 0
    return texts, seqs, source, head_means(ck.model, ref, ck.tokenizer.eos_id), len(ref)


def _losses(model, seqs, pad_id, replace=None) -> torch.Tensor:
    """Per-text mean token loss, with the replacements in place."""
    with hooked(model, replace=replace):
        nll, cnt = sentence_nlls(model, seqs, pad_id, device=_device(model))
    return nll / cnt


def paired(intact: torch.Tensor, changed: torch.Tensor, idx: torch.Tensor) -> dict:
    """Perplexity (exp of the mean per-text loss, the lab's) of both, the change and its paired
    95% percentile-bootstrap interval over the texts, and a verdict."""
    ppl = lambda x: torch.exp(x.double().mean(-1))               # noqa: E731
    diff = (ppl(changed[idx]) - ppl(intact[idx]))
    lo, hi = percentile_interval(diff)
    d = float(ppl(changed) - ppl(intact))
    verdict = ("perplexity rises (the interval excludes 0)" if lo > 0 else
               "perplexity falls (the interval excludes 0)" if hi < 0 else
               "no clear change (the interval includes 0)")
    return {"perplexity": float(ppl(intact)), "ablated_perplexity": float(ppl(changed)),
            "change": d, "change_ci": [lo, hi], "verdict": verdict}


def ablate(ck, heads: list[tuple[int, int]], mode: str = "zero", split: str = "test", n: int = 200,
           seed: int = 0, n_ref: int = 200, n_captions: int = 5, data_dir=None) -> dict:
    """The intact and the ablated model side by side: perplexity on a seeded subset with the
    paired interval and verdict; n texts each writes by sampling (the same seed), scored by
    BLEU-4 forward, backward and harmonic with paired intervals; and greedy continuations of the
    first two tokens of the first texts of the subset. BLEU and continuations are for a task
    whose checkpoints write text (its `tabs` name "generate"); for another, perplexity alone."""
    model, tok = ck.model, ck.tokenizer
    t0 = time.time()
    texts, seqs, source, means, n_refs = _prepared(ck, mode, split, n, seed, n_ref, data_dir)
    replace = ablations(heads, mode, means)
    intact, changed = _losses(model, seqs, tok.eos_id), _losses(model, seqs, tok.eos_id, replace)
    out = paired(intact, changed, bootstrap_indices(len(seqs), N_BOOT, seed))
    writes = "generate" in tasks.meta(tasks.of_checkpoint(ck)).get("tabs", ())
    out["bleu"] = _bleu_change(ck, texts, len(seqs), seed, replace, data_dir, split) if writes else None
    return {"checkpoint": ck.name, "heads": [f"{l + 1}.{h + 1}" for l, h in heads], "mode": mode,
            "split": split, "n": len(seqs), "seed": seed, "source": source,
            "reference_n": n_refs, **out,
            "continuations": _continuations(ck, seqs[:n_captions], replace) if writes else [],
            "elapsed_s": time.time() - t0}


def _continuations(ck, seqs: list, replace: dict) -> list[dict]:
    """Greedy continuations of each text's first two tokens, intact and ablated (`replace`)."""
    model, tok = ck.model, ck.tokenizer
    prompts = [s[:2] for s in seqs]
    cfg = DecodeConfig.from_dict(DECODE_TO_CONTINUE)
    # shown without the end-of-text each scored text starts with (data.encode_captions)
    said = lambda made: [tok.decode(p[1:] + new) for p, (new, _, _) in zip(prompts, made)]   # noqa: E731
    plain = said(generate(model, prompts, cfg, tok.eos_id))
    with hooked(model, replace=replace):
        ablated = said(generate(model, prompts, cfg, tok.eos_id))
    return [{"intact": a, "ablated": b} for a, b in zip(plain, ablated)]


def _bleu_change(ck, texts: list[str], n: int, seed: int, replace: dict, data_dir, split: str) -> dict:
    """n texts sampled (temperature 1, the same seed) by the intact and the ablated model, each
    scored by BLEU-4 as Evaluate scores them: forward (each written text against every reference
    of the split), backward (each of the subset's references against the written texts) and
    their harmonic mean; each change with its paired 95% bootstrap interval (written text i of
    both models comes from the same seed and position; reference i is the same)."""
    tok = ck.tokenizer
    tokens = choose_bleu_tokens([tok.kind])
    everything, _ = tasks.texts([ck], split, data_dir)
    refs_all = References(bleu_tokens_of(everything, tok, tokens))
    refs = bleu_tokens_of(texts, tok, tokens)
    cfg = DecodeConfig.from_dict({**DECODE_TO_SCORE, "seed": seed})

    def scored(replacing):
        with hooked(ck.model, replace=replacing):
            gen = sample_captions(ck.model, tok, n, cfg)
        hyps = [g.tokens for g in gen] if tokens == "gpt2" else [g.text.split() for g in gen]
        return (torch.tensor(refs_all.sentence_bleus(hyps), dtype=torch.float64),
                torch.tensor(References(hyps).sentence_bleus(refs), dtype=torch.float64))
    (f0, b0), (f1, b1) = scored(None), scored(replace)
    idx = bootstrap_indices(n, N_BOOT, seed)
    harmonic = lambda f, b: 2 * f * b / (f + b).clamp(min=1e-12)      # noqa: E731
    out = {"bleu_tokens": tokens, "decoder": "random, temperature 1"}
    for name, a, b in (("forward", f0, f1), ("backward", b0, b1)):
        lo, hi = percentile_interval(b[idx].mean(1) - a[idx].mean(1))
        out[name] = {"intact": float(a.mean()), "ablated": float(b.mean()),
                     "change": float(b.mean() - a.mean()), "change_ci": [lo, hi]}
    h0, h1 = harmonic(f0[idx].mean(1), b0[idx].mean(1)), harmonic(f1[idx].mean(1), b1[idx].mean(1))
    lo, hi = percentile_interval(h1 - h0)
    whole0, whole1 = float(harmonic(f0.mean(), b0.mean())), float(harmonic(f1.mean(), b1.mean()))
    out["harmonic"] = {"intact": whole0, "ablated": whole1, "change": whole1 - whole0,
                       "change_ci": [lo, hi],
                       "verdict": ("BLEU falls (the interval excludes 0)" if hi < 0 else
                                   "BLEU rises (the interval excludes 0)" if lo > 0 else
                                   "no clear change in BLEU (the interval includes 0)")}
    return out


@torch.no_grad()
def _from_layer(model, layer: int, x: torch.Tensor) -> torch.Tensor:
    """The logits from block `layer`'s input x (B, T, C) on: the blocks above, the final norm, the
    output layer (plain rows from position 0, no cache)."""
    h = model.transformer
    pos = torch.arange(x.size(1), device=x.device)
    for block in h.h[layer:]:
        x, _, _ = block(x, pos, h.wpe)
    return model.lm_head(h.hook_final_norm(h.ln_f(x)))


@torch.no_grad()
def scan(ck, mode: str = "zero", split: str = "test", n: int = 200, seed: int = 0, n_ref: int = 200,
         data_dir=None, batch_size: int = 32, abort=None, progress=None, estimated: bool = True) -> dict:
    """Every head ablated alone: the change in perplexity with its paired interval, as a
    blocks x heads grid, and the heads that matter most (the largest changes either way).
    Exact: each batch's residual stream entering each block is kept from one intact pass, and
    the block's heads run together (one copy of the batch per head, each copy with its own head
    ablated). estimated: attribution patching's estimate of the same grid beside it, with
    Spearman's rank agreement. Stopped (abort) after a batch of texts or more: the grid of the
    texts scored by then (the shortest first: batches go by length), `stopped`, no estimate."""
    model, tok = ck.model, ck.tokenizer
    t0 = time.time()
    texts, seqs, source, means, n_refs = _prepared(ck, mode, split, n, seed, n_ref, data_dir)
    intact, losses, scored = _scan_losses(model, seqs, tok.eos_id, mode, means, batch_size, abort,
                                          progress)
    stopped = len(scored) < len(seqs)
    if stopped:                        # what the batches before the stop scored, and no estimate
        intact, losses, seqs = intact[scored], losses[:, :, scored], [seqs[i] for i in scored]
        estimated = False
    scan_s = time.time() - t0
    L, H = losses.shape[:2]
    idx = bootstrap_indices(len(seqs), N_BOOT, seed)
    grid = [[paired(intact, losses[l, h], idx) for h in range(H)] for l in range(L)]
    exact = [[c["change"] for c in row] for row in grid]
    estimate = None
    if estimated:                      # the same texts and means, not drawn again
        e0 = time.time()
        estimate = {"change": _estimate(model, seqs, tok.eos_id, mode, means, batch_size)}
        estimate["elapsed_s"] = time.time() - e0
    ranked = sorted(((l, h) for l in range(L) for h in range(H)),
                    key=lambda lh: -abs(grid[lh[0]][lh[1]]["change"]))
    return {"checkpoint": ck.name, "mode": mode, "split": split, "n": len(seqs), "seed": seed,
            "source": source, "perplexity": grid[0][0]["perplexity"],
            "change": exact, "change_ci": [[c["change_ci"] for c in row] for row in grid],
            "scan_s": scan_s,
            "estimate": estimate and {"change": estimate["change"], "elapsed_s": estimate["elapsed_s"],
                                      "rank_agreement": rank_agreement(exact, estimate["change"])},
            "most": [{"head": f"{l + 1}.{h + 1}",
                      **{k: grid[l][h][k] for k in ("change", "change_ci", "verdict")}}
                     for l, h in ranked[:5]],
            "elapsed_s": time.time() - t0, "stopped": stopped}


@torch.no_grad()
def _scan_losses(model, seqs, pad: int, mode: str, means, batch_size: int, abort, progress):
    """(each text's loss intact (N,), with each head ablated alone (L, H, N), the texts scored):
    batches of texts by length, each block's heads in calls of about TOKENS_PER_CALL tokens of
    logits. Stopped (abort) after a batch or more, it returns what those batches scored; before
    one, it raises Aborted."""
    L, H = len(model.transformer.h), model.config.n_head
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    losses = torch.zeros(L, H, len(seqs), dtype=torch.float64)
    intact = torch.zeros(len(seqs), dtype=torch.float64)
    names = [f"blocks.{i}.resid_pre" for i in range(L)]
    with recycled_logits():            # each call's logits over the last's: no fresh pages
        for k in range(0, len(order), batch_size):
            rows = order[k:k + batch_size]
            batch = collate([seqs[i] for i in rows], pad).to(_device(model))
            with hooked(model, read=names) as seen:
                nll, cnt = sentence_nll(model(batch.input_ids).logits, batch)
            intact[rows] = (nll / cnt).double().cpu()
            per_call = max(1, min(H, TOKENS_PER_CALL // batch.input_ids.numel()))
            for layer in range(L):
                for j0 in range(0, H, per_call):
                    if abort is not None and abort():
                        if not k:
                            raise Aborted()
                        return intact, losses, order[:k]
                    heads = list(range(j0, min(H, j0 + per_call)))
                    ablate = {f"blocks.{layer}.attn.z": _one_head_each(heads, mode, means, layer)}
                    with hooked(model, replace=ablate):
                        logits = _from_layer(model, layer, seen[names[layer]].repeat(len(heads), 1, 1))
                    nll, cnt = sentence_nll(logits, _repeat(batch, len(heads)))
                    losses[layer, j0:j0 + len(heads), rows] = (nll / cnt).double().cpu().view(len(heads), -1)
                if progress:       # head-texts done of all: earlier batches whole, this one to its block
                    progress({"done": k * L + len(rows) * (layer + 1), "of": len(seqs) * L,
                              "texts": (k + 1, k + len(rows)), "block": layer + 1, "blocks": L})
    return intact, losses, order


def _one_head_each(heads: list[int], mode: str, means, layer: int):
    """The replacement of a block's z for len(heads) stacked copies of a batch: copy c with head
    heads[c] ablated."""
    def fn(z):                                   # z: (copies * B, nh, T, hs)
        z = z.clone().view(len(heads), -1, *z.shape[1:])
        for c, j in enumerate(heads):
            z[c, :, j] = 0.0 if mode == "zero" else means[layer][j][None, :].to(z.dtype)
        return z.view(-1, *z.shape[2:])
    return fn


def _repeat(batch, k: int):
    """The batch k times over (copies stacked along the rows)."""
    return type(batch)(batch.input_ids.repeat(k, 1), batch.loss_mask.repeat(k, 1))


def attribution(ck, mode: str = "zero", split: str = "test", n: int = 200, seed: int = 0,
                n_ref: int = 200, data_dir=None, batch_size: int = 32) -> dict:
    """Attribution patching (Nanda 2023): every head's ablation estimated at once, to first
    order, from one forward and one backward pass: the change in the mean per-text loss is about
    (ablated z - z) . d(loss)/dz, summed over the head's positions; the perplexity's change about
    the perplexity times that. {"change": [block][head] estimated change in perplexity, "elapsed_s"}."""
    model, tok = ck.model, ck.tokenizer
    t0 = time.time()
    texts, seqs, source, means, n_refs = _prepared(ck, mode, split, n, seed, n_ref, data_dir)
    return {"checkpoint": ck.name, "mode": mode, "split": split, "n": len(seqs), "seed": seed,
            "change": _estimate(model, seqs, tok.eos_id, mode, means, batch_size),
            "elapsed_s": time.time() - t0}


def _estimate(model, seqs, pad: int, mode: str, means, batch_size: int) -> list[list[float]]:
    """Attribution patching's [block][head] estimated change in perplexity over `seqs`."""
    est = torch.zeros(len(model.transformer.h), model.config.n_head, dtype=torch.float64)
    total = 0.0
    for k in range(0, len(seqs), batch_size):
        batch = collate(seqs[k:k + batch_size], pad).to(_device(model))
        total += _attribute(model, batch, pad, len(seqs), mode, means, est)
    return (math.exp(total) * est).tolist()


def _attribute(model, batch, pad: int, n: int, mode: str, means, est: torch.Tensor) -> float:
    """One batch's forward and backward pass: adds each head's first-order change of the mean
    loss over n texts to est (L, H); returns the batch's share of that mean loss."""
    found = check_model(model)
    kept = {}
    handles = [found[f"blocks.{i}.attn.z"].register_forward_hook(
        lambda m, i_, out, i=i: (out.retain_grad(), kept.__setitem__(i, out))[1])
        for i in range(len(model.transformer.h))]
    try:
        with torch.enable_grad():
            nll, cnt = sentence_nll(model(batch.input_ids).logits, batch)
            loss = (nll / cnt).sum() / n                      # this batch's share of the mean
            loss.backward()
    finally:
        for h in handles:
            h.remove()
        model.zero_grad(set_to_none=True)
    real = (batch.input_ids != pad).float()
    real[:, 0] = 1.0
    for i, z in kept.items():                                 # z: (B, nh, T, hs)
        target = torch.zeros_like(z) if mode == "zero" else means[i][None, :, None, :].to(z.dtype)
        step = (target - z.detach()) * z.grad * real[:, None, :, None]
        est[i] += step.sum((0, 2, 3)).double().cpu()
    return float(loss.detach())


def rank_agreement(a: list[list[float]], b: list[list[float]]) -> float:
    """Spearman's rank correlation between two blocks x heads grids (ties by their mean rank)."""
    x = torch.tensor(a, dtype=torch.float64).flatten()
    y = torch.tensor(b, dtype=torch.float64).flatten()

    def ranks(v):
        order = v.argsort()
        r = torch.empty_like(v)
        r[order] = torch.arange(len(v), dtype=torch.float64)
        for value in v.unique():                 # ties share their mean rank
            same = v == value
            r[same] = r[same].mean()
        return r
    rx, ry = ranks(x), ranks(y)
    rx, ry = rx - rx.mean(), ry - ry.mean()
    return float((rx * ry).sum() / ((rx.norm() * ry.norm()) or 1.0))
