"""Perplexity, forward/backward/harmonic BLEU-4, diversity, bootstrap intervals.

Definitions (DESIGN.md, part of the contract):
- perplexity: per sentence, mean cross-entropy over its tokens plus the first end-of-text after
  it; mean over sentences; exp (the assignment's). Also token-weighted, and per-word
  (total NLL / words, the end of each caption counted as one word) for cross-tokenizer comparison.
- BLEU: nltk's `sentence_bleu` with weights (0.25,)*4 and `SmoothingFunction().method1`, equal to
  it within 1e-9, but computed fast: the maximum reference count of each n-gram is the same for
  every hypothesis, so it is computed once per reference set, and all hypotheses are scored at
  once with array sorts and searches (numpy) instead of Python loops over n-grams.
"""
from __future__ import annotations

import itertools
import math

import numpy as np
import torch

from lab.errors import Aborted  # noqa: F401  (long computations raise it; callers catch metrics.Aborted)
from lab.inputs.data import batches, pack, sentence_nll
from lab.modeling.model import recycled_logits


@torch.no_grad()
def sentence_nlls(model, seqs: list[list[int]], pad_id: int, batch_size: int = 128,
                  device="cpu", abort=None) -> tuple[torch.Tensor, torch.Tensor]:
    """Summed NLL and target count of every sequence, in order: ((N,), (N,)). Sequences are
    batched by length (shortest first), and packed into rows when the model takes packed rows
    (data.pack: no padding, no last token, which predicts nothing), so no position is computed
    for nothing: the output layer's logits over the whole vocabulary are most of the work.
    `abort()` is asked before each batch; when it answers true, Aborted is raised."""
    was_training = model.training
    model.eval()
    packed = getattr(model, "packable", False)
    order = sorted(range(len(seqs)), key=lambda i: len(seqs[i]))
    nlls, counts = [], []
    try:
        with recycled_logits():         # a batch's logits are done with before the next batch's
            for batch in batches([seqs[i] for i in order], batch_size, pad_id):
                if abort is not None and abort():
                    raise Aborted()
                batch = (pack(batch) if packed else batch).to(device)
                nll, n = sentence_nll(model(batch.input_ids, **batch.model_inputs()).logits, batch)
                nlls.append(nll.cpu()); counts.append(n.cpu())
    finally:
        model.train(was_training)
    back = torch.empty(len(order), dtype=torch.long)
    back[torch.tensor(order, dtype=torch.long)] = torch.arange(len(order))
    return torch.cat(nlls).double()[back], torch.cat(counts).double()[back]


def perplexity(model, seqs, pad_id, batch_size=128, device="cpu", n_words: list[int] | None = None,
               nll_counts=None, abort=None, n_bytes: list[int] | None = None) -> dict:
    """The assignment's perplexity (mean over sentences of the per-token loss, then exp), the
    token-weighted one, and given each sentence's words and UTF-8 bytes, per word and bits per
    byte (lm-evaluation-harness's bits_per_byte: the summed NLL in bits over the text's bytes, so
    models with different tokenizers compare). Each sentence's end-of-text counts as one more word
    and one more byte: it predicts the newline that ends the sentence's line in the corpus."""
    nll, n = nll_counts if nll_counts is not None else sentence_nlls(model, seqs, pad_id, batch_size,
                                                                     device, abort)
    per_sentence = nll / n
    out = {"loss": per_sentence.mean().item(),
           "perplexity": math.exp(per_sentence.mean().item()),
           "token_perplexity": math.exp((nll.sum() / n.sum()).item()),
           "sentences": len(seqs)}
    if n_words is not None:
        out["word_perplexity"] = math.exp(nll.sum().item() / (sum(n_words) + len(n_words)))
    if n_bytes is not None:
        out["bits_per_byte"] = nll.sum().item() / math.log(2) / (sum(n_bytes) + len(n_bytes))
    return out


# ---------------------------------------------------------------- BLEU

MAX_N = 4
EPSILON = 0.1   # nltk SmoothingFunction(epsilon=0.1).method1


def _ngrams(tokens, n):
    return zip(*(tokens[i:] for i in range(n)))


class References:
    """A reference set, prepared once: the max count of each n-gram over all references, and
    the reference lengths (for the closest-length brevity penalty). Hypotheses are scored all at
    once, in arrays: each n-gram is an integer key (its (n-1)-gram's place among the references'
    (n-1)-grams, times the vocabulary, plus its last token), so counting and clipping are sorts
    and searches, not Python loops over n-grams."""

    def __init__(self, refs: list[list], raw: np.ndarray | None = None):
        """raw: the references' token ids flattened, when the caller has them already."""
        self.ints = _int_tokens(refs)
        if self.ints:       # token ids: a lookup table from id to vocabulary place
            raw = _int_array(refs, sum(map(len, refs))) if raw is None else raw
            present = np.zeros(int(raw.max()) + 1 if len(raw) else 0, dtype=bool)
            present[raw] = True
            vocab = np.flatnonzero(present)
            self.lut = np.full(int(vocab[-1]) + 1 if len(vocab) else 0, -1, dtype=np.int64)
            self.lut[vocab] = np.arange(len(vocab))
        else:
            vocab = {t: i for i, t in enumerate(dict.fromkeys(itertools.chain.from_iterable(refs)))}
        self.vocab = vocab
        ids, seq, pos, lengths = self._flat(refs, raw)
        self.V = len(self.vocab)
        self.keys, self.max_counts = [None], [None]        # per n: sorted keys, max counts
        prefix = ids                                       # place of each position's (n-1)-gram
        for n in range(1, MAX_N + 1):
            key, at = self._grams(prefix, ids, seq, pos, n, lengths)
            # one sort of (n-gram, reference) pairs: their counts, then each n-gram's largest
            R = max(len(refs), 1)
            pairs, inverse, counts = np.unique(key * R + seq[at], return_inverse=True,
                                               return_counts=True)
            gram = pairs // R
            starts = np.flatnonzero(np.r_[True, gram[1:] != gram[:-1]]) if len(gram) else gram
            keys, max_counts = gram[starts], np.maximum.reduceat(counts, starts) if len(gram) else counts
            group = np.cumsum(np.r_[True, gram[1:] != gram[:-1]]) - 1 if len(gram) else gram
            self.keys.append(keys); self.max_counts.append(max_counts)
            prefix = np.full(len(ids), -1, dtype=np.int64)
            prefix[at] = group[inverse]
        self.lengths = np.unique(lengths)

    def _flat(self, seqs: list[list], raw: np.ndarray | None = None):
        """Every token's vocabulary id (-1: not in the references), sequence and position, and
        each sequence's length."""
        lengths = np.fromiter(map(len, seqs), dtype=np.int64, count=len(seqs))
        seq = np.repeat(np.arange(len(seqs)), lengths)
        pos = np.arange(len(seq)) - np.repeat(np.cumsum(lengths) - lengths, lengths)
        if self.ints and _int_tokens(seqs):
            raw = _int_array(seqs, int(lengths.sum())) if raw is None else raw
            known = (raw >= 0) & (raw < len(self.lut))
            ids = np.full(len(raw), -1, dtype=np.int64)
            ids[known] = self.lut[raw[known]]
        else:
            vocab = self.vocab if not self.ints else \
                {int(t): i for t, i in enumerate(self.lut.tolist()) if i >= 0}
            ids = np.fromiter((vocab.get(t, -1) for t in itertools.chain.from_iterable(seqs)),
                              dtype=np.int64, count=len(seq))
        return ids, seq, pos, lengths

    def _grams(self, prefix, ids, seq, pos, n: int, lengths):
        """The n-grams starting at each position that has n tokens left in its sequence: their
        keys (-1 when some part is unknown to the references) and where they start."""
        at = np.nonzero(pos + n <= lengths[seq])[0]
        if n == 1:
            return ids[at], at
        head, last = prefix[at], ids[at + n - 1]
        return np.where((head >= 0) & (last >= 0), head * self.V + last, -1), at

    def closest_length(self, hyp_len):
        """nltk: min(ref_lens, key=lambda r: (abs(r - hyp_len), r)), for an array of lengths."""
        lens = self.lengths
        i = np.clip(np.searchsorted(lens, hyp_len), 1, len(lens) - 1) if len(lens) > 1 else \
            np.zeros_like(hyp_len)
        below, above = lens[np.maximum(i - 1, 0)], lens[i]
        return np.where(np.abs(hyp_len - below) <= np.abs(above - hyp_len), below, above)

    def sentence_bleus(self, hyps: list[list], raw: np.ndarray | None = None) -> list[float]:
        """nltk.translate.bleu_score.sentence_bleu(refs, hyp, (0.25,)*4, method1) of each
        hypothesis, to 1e-9. raw: the hypotheses' token ids flattened, if at hand."""
        if not hyps:
            return []
        ids, seq, pos, hyp_len = self._flat(hyps, raw)
        logs = np.zeros(len(hyps))
        first_matches = None
        prefix = ids
        for n in range(1, MAX_N + 1):
            key, at = self._grams(prefix, ids, seq, pos, n, hyp_len)
            keys = self.keys[n]
            if n == 1:                                     # a unigram's key is its place
                place, found = key, key >= 0
            else:           # only n-grams whose (n-1)-gram the references hold can be there
                place, found = np.zeros(len(key), dtype=np.int64), key >= 0
                if len(keys):
                    hit = np.minimum(np.searchsorted(keys, key[found]), len(keys) - 1)
                    place[found] = hit
                    found[found] = keys[hit] == key[found]
                else:
                    found[:] = False
            combo, counts = np.unique(seq[at][found] * max(len(keys), 1) + place[found],
                                      return_counts=True)
            clipped = np.minimum(counts, self.max_counts[n][combo % max(len(keys), 1)])
            num = np.bincount(combo // max(len(keys), 1), clipped, minlength=len(hyps))
            den = np.maximum(1, hyp_len - n + 1)
            if n == 1:
                first_matches = num
            # float(Fraction(num, den)), smoothed by epsilon where nothing matched (method1)
            logs += 0.25 * np.log(np.where(num == 0, (num + EPSILON) / den, num / den))
            prefix = np.full(len(ids), -1, dtype=np.int64)
            prefix[at] = np.where(found, place, -1)
        r = self.closest_length(hyp_len)
        with np.errstate(divide="ignore"):
            bp = np.where(hyp_len > r, 1.0, np.where(hyp_len == 0, 0.0,
                                                      np.exp(1 - r / np.maximum(hyp_len, 1))))
        return np.where(first_matches == 0, 0.0, bp * np.exp(logs)).tolist()

    def sentence_bleu(self, hyp: list) -> float:
        return self.sentence_bleus([hyp])[0]


def _int_tokens(seqs: list[list]) -> bool:
    """Token ids (GPT-2's), or other tokens (words)? The first token says for all."""
    first = next((x[0] for x in seqs if len(x)), 0)
    return isinstance(first, (int, np.integer)) and not isinstance(first, bool)


def _int_array(seqs: list[list], total: int) -> np.ndarray:
    return np.fromiter(itertools.chain.from_iterable(seqs), dtype=np.int64, count=total)


def sentence_bleus(hyps: list[list], refs: list[list] | References) -> list[float]:
    """Each hypothesis scored against the whole reference set."""
    prepared = refs if isinstance(refs, References) else References(refs)
    return prepared.sentence_bleus(hyps)


def bleu(generated: list[list], references: list[list]) -> dict:
    """Forward (generated vs references), backward (references vs generated), harmonic."""
    gen_raw, ref_raw = (_int_array(x, sum(map(len, x))) if _int_tokens(x) else None
                        for x in (generated, references))
    forward = sum(References(references, ref_raw).sentence_bleus(generated, gen_raw)) / len(generated)
    backward = sum(References(generated, gen_raw).sentence_bleus(references, ref_raw)) / len(references)
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


def wilson(correct: int, total: int, z: float = 1.959964) -> list[float]:
    """The 95% Wilson score interval of a proportion."""
    if total == 0:
        return [0.0, 1.0]
    p = correct / total
    centre = (p + z * z / (2 * total)) / (1 + z * z / total)
    half = z * math.sqrt(p * (1 - p) / total + z * z / (4 * total * total)) / (1 + z * z / total)
    return [0.0 if correct == 0 else max(0.0, centre - half),
            1.0 if correct == total else min(1.0, centre + half)]


def paired_difference(correct, base, idx: torch.Tensor) -> tuple[float, list[float]]:
    """Accuracy minus the baseline's, paired by question (0/1 per question each), with its 95%
    percentile-bootstrap interval over the questions (idx: bootstrap_indices, shared by every
    comparison against the same baseline)."""
    d = torch.as_tensor(correct, dtype=torch.float64) - torch.as_tensor(base, dtype=torch.float64)
    return d.mean().item(), list(percentile_interval(d[idx].mean(1)))
