"""Activation patching on a birth-place model, over every usable pair of dev questions: two
questions the model answers right, of the same length in characters, whose places start with
different letters ("Where was Ralf Wadephul born?⁇" -> B, "... Jeremy Holmes born?⁇" -> L). Each
pair is patched once (clean: the earlier dev question): the residual stream entering each block
at each position, and each head's output. Printed: per block, the median share restored at the
last position (the ⁇ after which the model answers) and summed over the positions where the two
names differ; per head, the median share, how often it restores the most, and the quartiles of
the head that does so most often.

Run (the predictions from `python -m lab birthplace evaluate --split dev --predictions FILE`):
    .venv/bin/python experiments/inside_cpu/birthplace_patching.py --store STORE \\
        --checkpoint bp-ft --predictions dev-predictions.txt [--out pairs.json]"""
import argparse
import itertools
import json
import statistics as st
import sys
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab.inside import patching  # noqa: E402
from lab.storage import checkpoints  # noqa: E402
from plugins.tasks.birthplace.core import MASK, questions  # noqa: E402


def pairs(answered: list[tuple[str, str]]):
    for (q1, a1), (q2, a2) in itertools.combinations(answered, 2):
        if len(q1) == len(q2) and a1[0] != a2[0]:
            yield (q1, a1), (q2, a2)


def summary(results: list[dict]) -> dict:
    layers, heads = len(results[0]["heads"]), len(results[0]["heads"][0])

    def differing(r):
        return [t for t, (a, b) in enumerate(zip(r["tokens"], r["corrupted_tokens"])) if a != b]
    top = Counter(max(((l, h) for l in range(layers) for h in range(heads)),
                      key=lambda lh: r["heads"][lh[0]][lh[1]]) for r in results)
    return {
        "pairs": len(results),
        "gap_median": st.median(r["clean"] - r["corrupted"] for r in results),
        "last_position_by_block": [st.median(r["resid"][l][-1] for r in results) for l in range(layers)],
        "name_span_sum_by_block": [st.median(sum(r["resid"][l][t] for t in range(min(differing(r)),
                                                                               max(differing(r)) + 1))
                                             for r in results) for l in range(layers)],
        "head_median": [[st.median(r["heads"][l][h] for r in results) for h in range(heads)]
                        for l in range(layers)],
        "most_often_top": [[f"{l + 1}.{h + 1}", n] for (l, h), n in top.most_common(5)],
        "top_head_quartiles": st.quantiles([r["heads"][top.most_common(1)[0][0][0]]
                                            [top.most_common(1)[0][0][1]] for r in results], n=4),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--checkpoint", required=True)
    ap.add_argument("--predictions", required=True)
    ap.add_argument("--out")
    args = ap.parse_args()
    ck = checkpoints.load(args.checkpoint, args.store)
    said = Path(args.predictions).read_text(encoding="utf-8").split("\n")
    answered = [(q, a) for (q, a), p in zip(questions("dev"), said) if p == a]
    results = [{"clean_prompt": q1, "clean_place": a1, "corrupted_prompt": q2, "corrupted_place": a2,
                **patching.patch(ck.model, ck.tokenizer, q1 + MASK, q2 + MASK, a1[0], a2[0])}
               for (q1, a1), (q2, a2) in pairs(answered)]
    print(json.dumps({"checkpoint": args.checkpoint, "answered_right": len(answered), **summary(results)},
                     indent=1))
    if args.out:
        Path(args.out).write_text(json.dumps(results, ensure_ascii=False), encoding="utf-8")


if __name__ == "__main__":
    main()
