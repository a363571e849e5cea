"""Metric definitions on the real corpus, against nltk itself."""
import json
import math
import random
import subprocess
import sys

import pytest
import torch
from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu

from lab.evaluation import metrics
from lab.inputs import tokenizers
from lab.inputs.data import encode_captions, load_split
from lab.modeling.model import build
from tests.conftest import tiny_config


def _nltk(refs, hyp):
    return sentence_bleu(refs, hyp, weights=(0.25,) * 4, smoothing_function=SmoothingFunction().method1)


def test_bleu_equals_nltk_on_real_captions(corpus_dir):
    rng = random.Random(0)
    refs_text = load_split("test", corpus_dir)[:200]
    hyps_text = rng.sample(load_split("dev", corpus_dir), 60)
    for tokenize in (str.split, tokenizers.gpt2().encode):
        refs = [tokenize(r) for r in refs_text]
        hyps = [tokenize(h) for h in hyps_text] + [[], tokenize("a"), tokenize("A"), tokenize("man man man")]
        # partial copies of references score high and exercise the clipping
        hyps += [r[: len(r) // 2] for r in refs[:10]] + refs[10:13]
        ours = metrics.sentence_bleus(hyps, refs)
        for h, o in zip(hyps, ours):
            assert abs(o - _nltk(refs, h)) < 1e-9


def test_forward_backward_harmonic(corpus_dir):
    gen = [c.split() for c in load_split("dev", corpus_dir)[:40]]
    refs = [c.split() for c in load_split("test", corpus_dir)[:30]]
    b = metrics.bleu(gen, refs)
    fwd = sum(_nltk(refs, g) for g in gen) / len(gen)
    bwd = sum(_nltk(gen, r) for r in refs) / len(refs)
    assert abs(b["forward"] - fwd) < 1e-9 and abs(b["backward"] - bwd) < 1e-9
    assert abs(b["harmonic"] - 2 * fwd * bwd / (fwd + bwd)) < 1e-9


def test_perplexity_definitions(corpus_dir):
    tok = tokenizers.gpt2()
    caps = load_split("test", corpus_dir)[:50]
    seqs = encode_captions(caps, tok, 64)
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=50257, n_positions=64)).eval()
    out = metrics.perplexity(model, seqs, tok.eos_id, batch_size=16, n_words=[len(c.split()) for c in caps])
    per_sentence, total_nll, total_tokens = [], 0.0, 0
    with torch.no_grad():
        for s in seqs:   # one caption at a time, no padding at all
            logp = torch.log_softmax(model(torch.tensor([s])).logits[0, :-1], -1)
            nll = -logp.gather(1, torch.tensor(s[1:])[:, None]).sum().item()
            per_sentence.append(nll / (len(s) - 1))
            total_nll += nll
            total_tokens += len(s) - 1
    assert math.isclose(out["perplexity"], math.exp(sum(per_sentence) / len(seqs)), rel_tol=1e-5)
    assert math.isclose(out["token_perplexity"], math.exp(total_nll / total_tokens), rel_tol=1e-5)
    words = sum(len(c.split()) + 1 for c in caps)
    assert math.isclose(out["word_perplexity"], math.exp(total_nll / words), rel_tol=1e-5)


def test_bleu_cli(tmp_path, corpus_dir):
    hyp, ref = tmp_path / "h.txt", tmp_path / "r.txt"
    hyp.write_text("\r\n".join(load_split("dev", corpus_dir)[:30]))
    ref.write_text("\n".join(load_split("test", corpus_dir)[:30]))
    out = subprocess.run([sys.executable, "-m", "lab", "bleu", "--hypotheses", str(hyp),
                          "--references", str(ref), "--tokens", "words", "--json"],
                         capture_output=True, text=True, check=True)
    got = json.loads(out.stdout)
    expect = metrics.bleu([c.split() for c in load_split("dev", corpus_dir)[:30]],
                          [c.split() for c in load_split("test", corpus_dir)[:30]])
    assert set(got) == {"forward", "backward", "harmonic", "hypotheses", "empty_hypotheses", "references"}
    assert (got["hypotheses"], got["empty_hypotheses"], got["references"]) == (30, 0, 30)
    assert abs(got["harmonic"] - expect["harmonic"]) < 1e-12


def test_bootstrap_interval_contains_the_mean():
    values = [float(i % 7) for i in range(200)]
    lo, hi = metrics.bootstrap_ci(values, n_boot=500)
    assert lo < sum(values) / len(values) < hi


def test_distinct_n():
    assert metrics.distinct_n([["a", "b"], ["a", "b"]], 1) == 0.5


def test_live_evaluation_labels_perplexity_by_tokenizers_not_bleu_tokens(corpus_dir):
    """Word BLEU for one GPT-2 model still shows the assignment's perplexity; intervals hold it."""
    from lab.storage import checkpoints
    from lab.config import DecodeConfig
    from lab.evaluation.evaluate import evaluate_live
    torch.manual_seed(0)
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)), tokenizers.gpt2(), "m")
    snaps = list(evaluate_live({"m": checkpoints.load("m")}, 40, DecodeConfig(max_new_tokens=8),
                               bleu_tokens="words", chunk=20, n_boot=100))
    assert [s["done"] for s in snaps] == [20, 40]
    # a small first chunk: early figures, then chunks doubling up to 20, the same captions scored
    early = list(evaluate_live({"m": checkpoints.load("m")}, 40, DecodeConfig(max_new_tokens=8),
                               bleu_tokens="words", chunk=20, n_boot=100, first=5))
    assert [s["done"] for s in early] == [5, 15, 35, 40]
    from lab.ui.evaluate import chunks
    assert chunks(500) == (10, 166) and chunks(20) == (10, 50) and chunks(5000) == (10, 500)
    assert early[-1]["provenance"]["subset_hash"] == snaps[-1]["provenance"]["subset_hash"]
    # a birth-place model is refused with where to score it instead
    from plugins.tasks.birthplace import core as birthplace
    from lab.config import ConfigError
    bp = birthplace.tokenizer()
    checkpoints.save(build(tiny_config(vocab_size=bp.vocab_size, n_positions=128)), bp, "bp")
    with pytest.raises(ConfigError, match=r"perplexity and BLEU of generated text: not for bp, a birthplace model \(its task's "
                                         r"checkpoints go to the answers view\)"):
        next(evaluate_live({"m": checkpoints.load("m"), "bp": checkpoints.load("bp")}, 40,
                           DecodeConfig(max_new_tokens=8)))
    last = snaps[-1]
    assert last["provenance"]["perplexity_shown"] == "per sentence (assignment)"
    assert last["provenance"]["bleu_tokens"] == "words"
    assert last["provenance"]["generated"] == {"m": "one stream, places reused"}
    r = last["models"]["m"]
    assert r["perplexity_ci"][0] < r["perplexity"] < r["perplexity_ci"][1]


def test_evaluate_can_skip_either_half(corpus_dir):
    """Perplexity alone needs no BLEU token choice; BLEU alone skips the split's forward pass."""
    from lab.storage import checkpoints
    from lab.config import DecodeConfig
    from lab.evaluation.evaluate import evaluate
    from lab.inputs.data import load_split
    torch.manual_seed(0)        # characters: every dev caption scored at a fraction of GPT-2's cost
    chars = tokenizers.CharTokenizer.from_text("".join(load_split("dev") + load_split("test")))
    checkpoints.save(build(tiny_config(vocab_size=chars.vocab_size, n_positions=512)), chars, "m")
    ppl_only = evaluate("m", split="dev", skip_bleu=True, bleu_tokens="no such kind")
    assert "bleu" not in ppl_only and ppl_only["perplexity"]["sentences"] == 5000
    bleu_only = evaluate("m", split="dev", n=20, decode=DecodeConfig(max_new_tokens=8),
                         skip_perplexity=True, bleu_tokens="words")
    assert "perplexity" not in bleu_only and bleu_only["provenance"]["n"] == 20
    assert 0.0 <= bleu_only["bleu"]["harmonic"] <= 1.0


def test_live_evaluation_pairs_per_word_perplexity_across_tokenizers(corpus_dir):
    """A GPT-2 model beside a character model: perplexity is shown per word, with an interval for
    each model and a paired interval for the difference (same captions, so pairing is fair)."""
    from lab.storage import checkpoints
    from lab.inputs import data
    from lab.config import DecodeConfig
    from lab.evaluation.evaluate import evaluate_live
    torch.manual_seed(0)
    caps = data.load_split("test", corpus_dir)
    chars = tokenizers.CharTokenizer.from_text("".join(caps))
    checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=64)), tokenizers.gpt2(), "bpe")
    checkpoints.save(build(tiny_config(vocab_size=chars.vocab_size, n_positions=160)), chars, "chars")
    snap = list(evaluate_live({"bpe": checkpoints.load("bpe"), "chars": checkpoints.load("chars")}, 60,
                              DecodeConfig(max_new_tokens=6), chunk=30, n_boot=200))[-1]
    assert snap["provenance"]["perplexity_shown"] == "per word"
    for r in snap["models"].values():
        assert r["word_perplexity_ci"][0] < r["word_perplexity"] < r["word_perplexity_ci"][1]
    d = snap["differences"][0]
    assert not d["perplexity_comparable"]
    gap = snap["models"]["chars"]["word_perplexity"] - snap["models"]["bpe"]["word_perplexity"]
    assert d["word_perplexity_diff"] == pytest.approx(gap)
    assert d["word_perplexity_diff_ci"][0] < gap < d["word_perplexity_diff_ci"][1]


def test_verdicts_say_which_model_is_better_by_how_much_and_whether_it_is_significant():
    from lab.evaluation.evaluate import verdict
    base = {"model": "smol-ft", "baseline": "scratch"}
    assert verdict(base | {"word_perplexity_diff": -12.3, "word_perplexity_diff_ci": [-14.9, -9.8]},
                   "word_perplexity") == ("smol-ft is better than scratch on per-word perplexity (lower "
                                          "is better) by 12.30 [9.80, 14.90]")
    assert verdict(base | {"word_perplexity_diff": 3.0, "word_perplexity_diff_ci": [1.0, 5.0]},
                   "word_perplexity").startswith("scratch is better than smol-ft on per-word perplexity")
    assert verdict(base | {"forward_bleu_diff": 0.02, "forward_bleu_diff_ci": [0.01, 0.03]},
                   "forward_bleu").startswith("smol-ft is better than scratch on forward BLEU (higher is "
                                              "better) by 0.0200 [0.0100, 0.0300]")
    assert verdict(base | {"harmonic_bleu_diff": 0.01, "harmonic_bleu_diff_ci": [-0.02, 0.03]},
                   "harmonic_bleu").startswith("no significant difference between smol-ft and scratch "
                                               "in harmonic BLEU")


def test_live_evaluation_gives_bleu_intervals_and_verdicts(store, corpus_dir):
    from lab.storage import checkpoints
    from lab.config import DecodeConfig
    from lab.evaluation.evaluate import evaluate_live, verdicts
    tok = tokenizers.gpt2()
    for seed, name in ((0, "a"), (1, "b")):
        torch.manual_seed(seed)
        checkpoints.save(build(tiny_config(vocab_size=50257, n_positions=48)), tok, name)
    snap = list(evaluate_live({n: checkpoints.load(n) for n in ("a", "b")}, 60,
                              DecodeConfig(max_new_tokens=8), chunk=60))[-1]
    for r in snap["models"].values():
        for key in ("backward_bleu", "harmonic_bleu"):
            lo, hi = r[f"{key}_ci"]
            assert lo <= r[key] <= hi and lo < hi
    d = snap["differences"][0]
    lo, hi = d["harmonic_bleu_diff_ci"]
    assert lo <= d["harmonic_bleu_diff"] <= hi
    said = verdicts(snap)
    assert len(said) == 5 and any("per-word perplexity" in v for v in said)
    assert any("bits per byte" in v for v in said)


def test_bits_per_byte_is_the_log2_token_perplexity_when_a_token_is_a_byte(corpus_dir):
    """With one token per character on ASCII captions, the targets are the bytes and one
    end-of-text each (the line's newline), so bits per byte is log2 of the token-weighted
    perplexity."""
    from lab.inputs.data import encode_captions, load_split
    from lab.evaluation.metrics import perplexity
    from lab.modeling.model import build
    from tests.conftest import tiny_config
    caps = [c for c in load_split("dev", corpus_dir)[:200] if c.isascii()]
    tok = tokenizers.CharTokenizer("".join(sorted(set("".join(caps)))))
    torch.manual_seed(0)
    model = build(tiny_config(vocab_size=tok.vocab_size, n_positions=256)).eval()
    seqs = encode_captions(caps, tok, 256)
    p = perplexity(model, seqs, tok.eos_id, n_words=[len(c.split()) for c in caps],
                   n_bytes=[len(c.encode()) for c in caps])
    assert p["bits_per_byte"] == pytest.approx(math.log2(p["token_perplexity"]), rel=1e-9)
    assert 0 < p["bits_per_byte"] < math.log2(tok.vocab_size) + 1
