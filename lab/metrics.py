"""Perplexity, forward/backward/harmonic BLEU-4, diversity, bootstrap intervals.

Definitions (DESIGN.md, part of the contract):
- perplexity: per sentence, mean cross-entropy over its tokens plus the first end-of-text after
  it; mean over sentences; exp (the assignment's). Also token-weighted, and per-word
  (total NLL / words, the end of each caption counted as one word) for cross-tokenizer comparison.
- BLEU: nltk's `sentence_bleu` with weights (0.25,)*4 and `SmoothingFunction().method1`, equal to
  it within 1e-9, but computed fast: the maximum reference count of each n-gram is the same for
  every hypothesis, so it is computed once per reference set.
"""
from __future__ import annotations

import math
from collections import Counter

import torch

from lab.data import batches, sentence_nll


class Aborted(Exception):
    """A long computation gave up because its caller asked it to (a training job told to stop)."""


@torch.no_grad()
def sentence_nlls(model, seqs: list[list[int]], pad_id: int, batch_size: int = 128,
                  device="cpu", abort=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL and target count of every sequence, in order: ((N,), (N,)). Sequences are
    batched by length (shortest first), so a batch pads to little: the output layer's logits over
    the whole vocabulary are most of the work, and a padded position costs as much as a real one.
    `abort()` is asked before each batch; when it answers true, Aborted is raised."""
    was_training = model.training
    model.eval()
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    nlls, counts = [], []
    try:
        for batch in batches([seqs[i] for i in order], batch_size, pad_id):
            if abort is not None and abort():
                raise Aborted()
            batch = batch.to(device)
            nll, n = sentence_nll(model(batch.input_ids).logits, batch)
            nlls.append(nll.cpu()); counts.append(n.cpu())
    finally:
        model.train(was_training)
    back = torch.empty(len(order), dtype=torch.long)
    back[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return torch.cat(nlls).double()[back], torch.cat(counts).double()[back]


def perplexity(model, seqs, pad_id, batch_size=128, device="cpu", n_words: list[int] | None = None,
               nll_counts=None, abort=None) -> dict:
    nll, n = nll_counts if nll_counts is not None else sentence_nlls(model, seqs, pad_id, batch_size,
                                                                     device, abort)
    per_sentence = nll / n
    out = {"loss": per_sentence.mean().item(),
           "perplexity": math.exp(per_sentence.mean().item()),
           "token_perplexity": math.exp((nll.sum() / n.sum()).item()),
           "sentences": len(seqs)}
    if n_words is not None:
        out["word_perplexity"] = math.exp(nll.sum().item() / (sum(n_words) + len(n_words)))
    return out


# ---------------------------------------------------------------- BLEU

MAX_N = 4
EPSILON = 0.1   # nltk SmoothingFunction(epsilon=0.1).method1


def _ngrams(tokens, n):
    return zip(*(tokens[i:] for i in range(n)))


class References:
    """A reference set, prepared once: the max count of each n-gram over all references, and
    the reference lengths (for the closest-length brevity penalty)."""

    def __init__(self, refs: list[list]):
        self.max_counts = [dict() for _ in range(MAX_N + 1)]
        for ref in refs:
            for n in range(1, MAX_N + 1):
                mc = self.max_counts[n]
                for g, c in Counter(_ngrams(ref, n)).items():
                    if c > mc.get(g, 0):
                        mc[g] = c
        self.lengths = sorted(set(len(r) for r in refs))
        self._closest: dict[int, int] = {}

    def closest_length(self, hyp_len: int) -> int:
        # nltk: min(ref_lens, key=lambda r: (abs(r - hyp_len), r))
        if hyp_len not in self._closest:
            self._closest[hyp_len] = min(self.lengths, key=lambda r: (abs(r - hyp_len), r))
        return self._closest[hyp_len]

    def sentence_bleu(self, hyp: list) -> float:
        """nltk.translate.bleu_score.sentence_bleu(refs, hyp, (0.25,)*4, method1), exactly."""
        hyp_len = len(hyp)
        p_n = []
        for n in range(1, MAX_N + 1):
            counts = Counter(_ngrams(hyp, n)) if hyp_len >= n else Counter()
            mc = self.max_counts[n]
            numerator = sum(min(c, mc.get(g, 0)) for g, c in counts.items())
            denominator = max(1, sum(counts.values()))
            p_n.append((numerator, denominator))
        if p_n[0][0] == 0:
            return 0.0
        r = self.closest_length(hyp_len)
        bp = 1.0 if hyp_len > r else (0.0 if hyp_len == 0 else math.exp(1 - r / hyp_len))
        logs = []
        for num, den in p_n:
            p = (num + EPSILON) / den if num == 0 else num / den   # float(Fraction(num, den))
            logs.append(0.25 * math.log(p))
        return bp * math.exp(math.fsum(logs))


def sentence_bleus(hyps: list[list], refs: list[list] | References) -> list[float]:
    """Each hypothesis scored against the whole reference set."""
    prepared = refs if isinstance(refs, References) else References(refs)
    return [prepared.sentence_bleu(h) for h in hyps]


def bleu(generated: list[list], references: list[list]) -> dict:
    """Forward (generated vs references), backward (references vs generated), harmonic."""
    forward = sum(sentence_bleus(generated, references)) / len(generated)
    backward = sum(sentence_bleus(references, generated)) / len(references)
    harmonic = 2 * forward * backward / (forward + backward) if forward + backward else 0.0
    return {"forward": forward, "backward": backward, "harmonic": harmonic,
            "n_generated": len(generated), "n_references": len(references)}


# ---------------------------------------------------------------- diversity, intervals

def distinct_n(token_lists: list[list], n: int) -> float:
    """Distinct n-grams / all n-grams over a set of generated captions (Li et al. 2016)."""
    grams = [g for toks in token_lists for g in _ngrams(toks, n)]
    return len(set(grams)) / len(grams) if grams else 0.0


def bootstrap_indices(n: int, n_boot: int = 1000, seed: int = 0) -> torch.Tensor:
    """(n_boot, n) resampled indices; reuse them across models for paired intervals."""
    return torch.randint(n, (n_boot, n), generator=torch.Generator().manual_seed(seed))


def percentile_interval(stats: torch.Tensor, alpha: float = 0.05) -> tuple[float, float]:
    lo, hi = torch.quantile(stats.double(), torch.tensor([alpha / 2, 1 - alpha / 2], dtype=torch.float64))
    return lo.item(), hi.item()


def bootstrap_ci(values: list[float], n_boot: int = 1000, seed: int = 0,
                 alpha: float = 0.05) -> tuple[float, float]:
    """Percentile bootstrap interval of the mean."""
    x = torch.tensor(values, dtype=torch.float64)
    return percentile_interval(x[bootstrap_indices(len(x), n_boot, seed)].mean(1), alpha)
