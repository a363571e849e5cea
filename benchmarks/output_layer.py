"""The output layer on the CPU: lab.modeling.model.OutputLayer (tiles of 512 rows by 1,024 vocabulary
entries, written in place) against one F.linear over the whole matrix (what nn.Linear and
transformers' lm_head run), for GPT-2's 50,257 x 768 and SmolLM2's 49,152 x 576 at the batch
sizes decoding (10-500 rows) and scoring (1,700 rows: 128 captions packed) use. Random weights;
each the best of 5 runs, the two sides alternating.

Run: .venv/bin/python benchmarks/output_layer.py"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from benchmarks.common import header, report, timed  # noqa: E402
from lab.modeling.model import OutputLayer  # noqa: E402

SHAPES = {"gpt2 (768 -> 50,257)": (768, 50257), "smollm2 (576 -> 49,152)": (576, 49152)}
ROWS = (10, 40, 80, 166, 256, 500, 1700)


def main():
    header("output layer: tiles of rows by vocabulary entries vs one product")
    torch.manual_seed(0)
    rows_out = {}
    with torch.no_grad():
        for name, (k, v) in SHAPES.items():
            layer = OutputLayer(k, v, bias=False)
            for m in ROWS:
                h = torch.randn(m, k)
                flop = 2 * m * k * v
                one, blocks = float("inf"), float("inf")
                for _ in range(5):
                    one = min(one, timed(lambda: F.linear(h, layer.weight))[0])
                    blocks = min(blocks, timed(lambda: layer(h))[0])
                diff = (layer(h) - F.linear(h, layer.weight)).abs().max().item()
                rows_out[f"{name}, {m} rows"] = (
                    f"tiles {flop / blocks / 1e9:.0f} GFLOP/s, one product {flop / one / 1e9:.0f} "
                    f"GFLOP/s: {one / blocks:.2f}x; max |difference| {diff:.1e}")
    report(**rows_out)


if __name__ == "__main__":
    main()
