"""The first chunk of live evaluation (10 captions per model, for the early figures) decoded at
widths 10, 20 and 40 (the extra rows would be captions the later chunks need): its time against
its floating-point floor (FLOP-counted, at the 2048 x 2048 product's rate measured once).

Run: .venv/bin/python experiments/generation_cpu/live_eval_phases/first_chunk.py"""
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402
from torch.utils.flop_counter import FlopCounterMode  # noqa: E402

from benchmarks.live_eval import sgemm_rate  # noqa: E402
from lab.storage import checkpoints, smollm2  # noqa: E402
from lab.inputs import tokenizers
from lab.config import DecodeConfig  # noqa: E402
from lab.modeling.generate import CaptionStream  # noqa: E402
from lab.modeling.model import build  # noqa: E402
from lab.presets import get  # noqa: E402


def main():
    tmp = tempfile.mkdtemp()
    torch.manual_seed(0)
    checkpoints.save(build(get("tfmr-scratch")[0]), tokenizers.gpt2(), "scratch", store=tmp)
    smollm2.import_smollm2("smollm2", store=tmp)
    rate = sgemm_rate()
    for name in ("scratch", "smollm2"):
        ck = checkpoints.load(name, tmp)
        for width in (10, 20, 40):
            stream = CaptionStream(ck.model, ck.tokenizer, 500, DecodeConfig())
            t0 = time.perf_counter()
            stream.take(10, width)
            seconds = time.perf_counter() - t0
            with FlopCounterMode(display=False) as c:
                CaptionStream(ck.model, ck.tokenizer, 500, DecodeConfig()).take(10, width)
            print(f"{name} first 10 at width {width}: {seconds:.2f} s, "
                  f"floor {c.get_total_flops() / rate:.2f} s (sgemm {rate / 1e9:.0f})")


if __name__ == "__main__":
    main()
