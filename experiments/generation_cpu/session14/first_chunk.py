"""The first chunk of live evaluation (10 captions per model, for the early figures) decoded at
widths 10, 20 and 40 (the extra rows would be captions the later chunks need): its time against
its floating-point floor (FLOP-counted, at the 2048 x 2048 product's rate measured once).

Run: .venv/bin/python experiments/generation_cpu/session14/first_chunk.py"""
import sys
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
from torch.utils.flop_counter import FlopCounterMode
from lab import checkpoints, smollm2, tokenizers
from lab.config import DecodeConfig
from lab.generate import CaptionStream
from lab.model import build
from lab.presets import get
from benchmarks.live_eval import sgemm_rate
tmp = tempfile.mkdtemp(); torch.manual_seed(0)
checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch", store=tmp)
smollm2.import_smollm2("smollm2", store=tmp)
r = sgemm_rate()
for name in ("scratch", "smollm2"):
    ck = checkpoints.load(name, tmp)
    for width in (10, 20, 40):
        s = CaptionStream(ck.model, ck.tokenizer, 500, DecodeConfig())
        t0 = time.perf_counter(); s.take(10, width); t = time.perf_counter() - t0
        s2 = CaptionStream(ck.model, ck.tokenizer, 500, DecodeConfig())
        with FlopCounterMode(display=False) as c:
            s2.take(10, width)
        print(f"{name} first 10 at width {width}: {t:.2f} s, floor {c.get_total_flops()/r:.2f} s (sgemm {r/1e9:.0f})")
