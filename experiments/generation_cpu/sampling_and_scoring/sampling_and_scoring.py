"""Two changes to sampling and scoring measured in one process, alternating old and new (the
machine drifts 10-20% between runs, so only side-by-side figures are compared):

1. A decoding step of the live evaluation's stream (166 rows, random sampling at t=1): the old
   sampler (softmax of the logits divided by the temperature, in fresh memory) against
   lab.modeling.sampling.weights (softmax's numerators, written over the last step's). 30 steps, 6 rounds,
   for the Tfmr-scratch-sized model (random weights) and SmolLM2.
2. Scoring's cross-entropy over one batch of packed rows: F.cross_entropy (log-softmax of the
   whole batch) against lab.inputs.data.token_nll (32 rows at a time), 1,848 rows of SmolLM2's and
   GPT-2's vocabularies, 5 rounds.

Run: .venv/bin/python experiments/generation_cpu/sampling_and_scoring/sampling_and_scoring.py"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

import plugins.decoders.random as random_decoder  # noqa: E402
from lab.storage import checkpoints, smollm2  # noqa: E402
from lab.inputs import tokenizers
from lab.config import DecodeConfig  # noqa: E402
from lab.inputs.data import token_nll  # noqa: E402
from lab.modeling.generate import CaptionStream  # noqa: E402
from lab.modeling.model import build, recycled_logits  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.modeling.sampling import draw  # noqa: E402

NEW = random_decoder.sample
ROUNDS = 6


def old_sample(logits, temperature, generator):
    """The sampler lab.modeling.sampling.weights replaced: a softmax of freshly divided logits."""
    return draw(torch.softmax(logits.float() / temperature, dim=-1), generator)


def step_ms(ck, sample, steps=30, width=166):
    random_decoder.sample = sample
    stream = CaptionStream(ck.model, ck.tokenizer, 5000, DecodeConfig())
    with torch.no_grad(), recycled_logits():
        for _ in range(3):
            stream._admit(width); stream._step()
        t0 = time.perf_counter()
        for _ in range(steps):
            stream._admit(width); stream._step()
    return (time.perf_counter() - t0) * 1000 / steps


def main():
    ck_of = {}
    with tempfile.TemporaryDirectory() as tmp:
        torch.manual_seed(0)
        checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch-random", store=tmp)
        smollm2.import_smollm2("smollm2", store=tmp)
        ck_of = {n: checkpoints.load(n, tmp) for n in ("scratch-random", "smollm2")}
        for name, ck in ck_of.items():
            ck.model.eval()
            got = {"softmax (before)": [], "weights (now)": []}
            for _ in range(ROUNDS):
                got["softmax (before)"].append(step_ms(ck, old_sample))
                got["weights (now)"].append(step_ms(ck, NEW))
            print(f"1. {name}, a stream step of 166 rows, ms:",
                  {k: [round(v, 1) for v in vs] + [f"median {statistics.median(vs):.1f}"]
                   for k, vs in got.items()}, flush=True)
    random_decoder.sample = NEW
    for V in (49152, 50257):
        x = torch.randn(1848, V)
        t = torch.randint(0, V, (1848,))
        got = {"cross_entropy": [], "token_nll": []}
        with torch.no_grad():
            diff = (torch.nn.functional.cross_entropy(x, t, reduction="none") - token_nll(x, t)).abs().max()
            for _ in range(5):
                for k, f in (("cross_entropy", lambda: torch.nn.functional.cross_entropy(x, t, reduction="none")),
                             ("token_nll", lambda: token_nll(x, t))):
                    t0 = time.perf_counter(); f(); got[k].append((time.perf_counter() - t0) * 1000)
        print(f"2. 1,848 rows x {V}, ms:", {k: [round(v) for v in vs] + [f"median {statistics.median(vs):.0f}"]
                                            for k, vs in got.items()}, f"largest difference {diff:.2e}",
              flush=True)


if __name__ == "__main__":
    main()
