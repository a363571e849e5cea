"""BLEU-4 (forward/backward/harmonic) on real captions: the lab against nltk's sentence_bleu.

nltk would take about half an hour for 5,000 x 5,000, so it scores a sample of hypotheses against
the full reference set and its per-hypothesis time is scaled up; the sample's scores must equal
the lab's to 1e-9.   Run: .venv/bin/python benchmarks/bleu_vs_nltk.py
"""
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from nltk.translate.bleu_score import SmoothingFunction, sentence_bleu  # noqa: E402

from benchmarks.common import header, report, timed  # noqa: E402
from lab.evaluation import metrics  # noqa: E402
from lab.inputs import tokenizers
from lab.inputs.data import load_split  # noqa: E402

NLTK_SAMPLE = 40


def main():
    header("BLEU-4, 5,000 generated x 5,000 references (dev captions stand in for generated ones)")
    tok = tokenizers.gpt2()
    gen_text, ref_text = load_split("dev"), load_split("test")
    gen, refs = tok.encode_batch(gen_text), tok.encode_batch(ref_text)
    lab_s, result = timed(lambda: metrics.bleu(gen, refs), repeat=3)
    sample = random.Random(0).sample(range(len(gen)), NLTK_SAMPLE)
    sm = SmoothingFunction().method1
    nltk_s, nltk_scores = timed(lambda: [sentence_bleu(refs, gen[i], weights=(0.25,) * 4,
                                                        smoothing_function=sm) for i in sample])
    prepared = metrics.References(refs)
    diff = max(abs(prepared.sentence_bleu(gen[i]) - s) for i, s in zip(sample, nltk_scores))
    nltk_full = nltk_s / NLTK_SAMPLE * (len(gen) + len(refs))   # forward + backward sentences
    report(lab_seconds=round(lab_s, 3), nltk_seconds_estimated=round(nltk_full, 1),
           speedup=round(nltk_full / lab_s, 1), max_abs_difference_on_sample=diff,
           forward=result["forward"], backward=result["backward"], harmonic=result["harmonic"],
           tokens="gpt2")


if __name__ == "__main__":
    main()
