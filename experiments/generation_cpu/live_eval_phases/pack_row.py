"""Scoring (metrics.sentence_nlls, as live evaluation calls it) of 160 test captions with packed
rows of 128 tokens (data.PACK_ROW) against 64 and 48: the products see the same tokens; the
masked attention of a packed row costs its length squared. 5 rounds alternating, one process,
a Tfmr-scratch-sized model (random weights) and SmolLM2.

Run: .venv/bin/python experiments/generation_cpu/live_eval_phases/pack_row.py"""
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

import lab.evaluation.metrics as metrics  # noqa: E402
from lab.storage import checkpoints, smollm2  # noqa: E402
from lab.inputs import data, tokenizers
from lab.modeling.model import build  # noqa: E402
from lab.presets import get  # noqa: E402

tmp = tempfile.mkdtemp()
torch.manual_seed(0)
checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch", store=tmp)
smollm2.import_smollm2("smollm2", store=tmp)
caps = data.load_split("test")[:160]
pack = data.pack
for name in ("scratch", "smollm2"):
    ck = checkpoints.load(name, tmp)
    seqs = data.encode_captions(caps, ck.tokenizer, ck.config.n_positions)
    times, nll = {128: [], 64: [], 48: []}, {}
    for _ in range(5):
        for row in times:
            metrics.pack = lambda b, row=row: pack(b, row)
            t0 = time.perf_counter()
            nll[row] = metrics.sentence_nlls(ck.model, seqs, ck.tokenizer.eos_id)[0]
            times[row].append((time.perf_counter() - t0) * 1e3)
    metrics.pack = pack
    print(name, {row: [round(t) for t in ts] for row, ts in times.items()},
          "medians", {row: round(statistics.median(ts)) for row, ts in times.items()},
          "largest NLL difference from 128", {row: f"{(nll[row] - nll[128]).abs().max():.1e}" for row in nll})
