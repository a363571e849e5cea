"""SmolLM2's matrix products for one decoding step (30 blocks of q+kv, o, gate, up, down with
distinct random weights, then the output layer in tiles of 1,024 entries, as lab.modeling.model's
OutputLayer takes them) at 166 rows (live evaluation's stream now) and 490 (every remaining
caption at once), alternating which runs first: GFLOP/s of each and the median of the per-round
ratios. The weights (about 540 MB) stream from memory as in a real step.

Run: .venv/bin/python experiments/generation_cpu/wide_stream/products_by_width.py [rounds]"""
import statistics
import sys
import time

import torch
import torch.nn.functional as F

D, H, L, V = 576, 1536, 30, 49152           # SmolLM2-135M: width, MLP width, blocks, vocabulary
FLOP_PER_ROW = 2 * (L * (D * 960 + D * D + 3 * D * H) + D * V)


def step(x, layers, head):
    for q_kv, o, gate, up, down in layers:
        F.linear(x, q_kv)
        F.linear(x, o)
        g = F.linear(x, gate)
        F.linear(x, up)
        F.linear(g, down)
    for i in range(0, V, 1024):
        F.linear(x, head[i:i + 1024])


def rate(rows, layers, head, n=2):
    x = torch.randn(rows, D)
    step(x, layers, head)
    t0 = time.perf_counter()
    for _ in range(n):
        step(x, layers, head)
    return FLOP_PER_ROW * rows * n / (time.perf_counter() - t0) / 1e9


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    torch.manual_seed(0)
    layers = [[torch.randn(960, D), torch.randn(D, D), torch.randn(H, D), torch.randn(H, D),
               torch.randn(D, H)] for _ in range(L)]
    head = torch.randn(V, D)
    ratios = []
    for r in range(rounds):
        got = {rows: rate(rows, layers, head) for rows in ((166, 490) if r % 2 == 0 else (490, 166))}
        ratios.append(got[490] / got[166])
        print(f"round {r}: GFLOP/s at 166 rows {got[166]:.1f}, at 490 rows {got[490]:.1f}, "
              f"ratio {ratios[-1]:.3f}", flush=True)
    print(f"median ratio 490/166: {statistics.median(ratios):.3f}")


if __name__ == "__main__":
    main()
