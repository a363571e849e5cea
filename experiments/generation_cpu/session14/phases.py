"""Live evaluation (benchmarks/live_eval.py's work: 500 test captions, a Tfmr-scratch-sized model
with random weights and SmolLM2) timed by phase, stream steps and scoring per model, with each
phase's floating-point floor from a second, FLOP-counted pass at the faster of two measurements
of the 2048 x 2048 product (before the timed pass and after it), and how many rows the steps had.

Run: .venv/bin/python experiments/generation_cpu/session14/phases.py [n]"""
import collections
import sys
import tempfile
import time
from pathlib import Path
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
import torch
from torch.utils.flop_counter import FlopCounterMode
from lab import checkpoints, smollm2, tokenizers, evaluate, generate
from lab.config import DecodeConfig
from lab.model import build
from lab.presets import get
from lab.ui.evaluate import chunks
from benchmarks.live_eval import sgemm_rate

n = int(sys.argv[1]) if len(sys.argv) > 1 else 500
tmp = tempfile.mkdtemp()
torch.manual_seed(0)
checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch-random", store=tmp)
smollm2.import_smollm2("smollm2", store=tmp)
models = {k: checkpoints.load(k, tmp) for k in ("scratch-random", "smollm2")}
first, chunk = chunks(n)
T = collections.defaultdict(float)
F = collections.defaultdict(float)
steps = collections.defaultdict(list)
name_of = {id(ck.model): k for k, ck in models.items()}

orig_step, orig_nll = generate.CaptionStream._step, evaluate.sentence_nlls
def step(self):
    t0 = time.perf_counter(); rows = len(self.rows)
    orig_step(self)
    k = name_of[id(self.model)]
    T[k, "step"] += time.perf_counter() - t0
    steps[k].append(rows)
def nlls(model, *a, **kw):
    t0 = time.perf_counter()
    r = orig_nll(model, *a, **kw)
    T[name_of[id(model)], "score"] += time.perf_counter() - t0
    return r
generate.CaptionStream._step = step
evaluate.sentence_nlls = nlls
r0 = sgemm_rate()
t0 = time.perf_counter()
for _ in evaluate.evaluate_live(models, n, DecodeConfig(), chunk=chunk, first=first):
    pass
total = time.perf_counter() - t0
r1 = sgemm_rate()
rate = max(r0, r1)
# counted pass, per phase
T2 = dict(T); T.clear()
def cstep(self):
    with FlopCounterMode(display=False) as c:
        orig_step(self)
    F[name_of[id(self.model)], "step"] += c.get_total_flops()
def cnlls(model, *a, **kw):
    with FlopCounterMode(display=False) as c:
        r = orig_nll(model, *a, **kw)
    F[name_of[id(model)], "score"] += c.get_total_flops()
    return r
generate.CaptionStream._step = cstep
evaluate.sentence_nlls = cnlls
for _ in evaluate.evaluate_live(models, n, DecodeConfig(), chunk=chunk, first=first):
    pass
print(f"sgemm {r0/1e9:.1f} / {r1/1e9:.1f} GFLOP/s; total {total:.1f} s; floor {sum(F.values())/rate:.1f} s; ratio {total/(sum(F.values())/rate):.2f}")
acc = 0
for key in sorted(T2):
    fl = F[key] / rate
    acc += T2[key]
    print(f"{key}: {T2[key]:.1f} s, floor {fl:.1f} s, {T2[key]/fl:.2f}x")
print(f"outside steps and scoring: {total - acc:.1f} s")
for k, r in steps.items():
    c = collections.Counter(min(x // 20 * 20, 200) for x in r)
    print(k, len(r), "steps; rows histogram (bins of 20):", sorted(c.items()))
