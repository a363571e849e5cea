"""Training steps on the real corpus: the lab as its trainer runs (each batch's captions packed
into rows, no compute on padding) and padded to the batch's longest caption, against
transformers' GPT2LMHeadModel trained the assignment's way (fixed padding to 36), identical initial
weights, Adam lr 1e-4, batch 32, the assignment's masked loss. Reports real (unpadded) tokens per
second and checks that the first step's losses agree.

With a CUDA GPU it also prints GPU rows: both models on the GPU with bf16 autocast (float32
weights) and fused Adam, the lab as its trainer runs (lab.training.train's autocast and optimizer), with
each one's MFU from lab.modeling.flops (real tokens only, the device's peak from its table).

Run: .venv/bin/python benchmarks/train_vs_hf.py [--steps 30] [--gpu-steps 300] [--device all|cpu|cuda]"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, lab_and_hf_models, report  # noqa: E402
from lab.modeling import flops  # noqa: E402
from lab.inputs import tokenizers
from lab.config import TrainConfig  # noqa: E402
from lab.inputs.data import assignment_loss, batches, collate, encode_captions, load_split  # noqa: E402
from lab.training.parameters import make_optimizer  # noqa: E402
from lab.training.train import autocast, shard_loss  # noqa: E402

EOS = 50256


def run(model, seqs, steps, pad_to, device=torch.device("cpu"), precision="fp32", flops_per_token=None,
        packed=False, plain_adam=False):
    """(real tokens, seconds, first loss, training FLOPs) of the timed steps after the warm-up.
    packed: the lab's model, its batches packed into rows the way its trainer does. plain_adam:
    the assignment's optimizer (torch.optim.Adam as it comes), not the lab's (fused)."""
    model.to(device).train()
    torch.manual_seed(0)
    opt = torch.optim.Adam(model.parameters(), lr=1e-4) if plain_adam else \
        make_optimizer(list(model.parameters()), TrainConfig(lr=1e-4), device)
    g = torch.Generator().manual_seed(0)
    tokens, flop, losses = 0, 0.0, []
    it = batches(seqs, 32, EOS, shuffle=True, generator=g)
    warm = 1 if device.type == "cpu" else 20     # first steps: allocator, cuBLAS and kernel choice
    t0 = None
    for i in range(warm + steps):
        batch = next(it)
        if pad_to:
            batch = collate([row[: int(m.sum()) + 1].tolist() for row, m in
                             zip(batch.input_ids, batch.loss_mask)], EOS, pad_to=pad_to)
        batch = batch.to(device)
        with autocast(device, precision):
            if packed:
                loss = shard_loss(model, batch, packed=True)
            else:
                loss = assignment_loss(model(batch.input_ids).logits, batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        losses.append(loss.item())            # waits for the step, as the trainer does
        if i == warm - 1:
            t0 = time.perf_counter()
        elif i >= warm:
            n = int(batch.loss_mask.sum())
            tokens += n
            if flops_per_token:
                flop += n * flops_per_token(batch.input_ids.size(1))
    return tokens, time.perf_counter() - t0, losses[0], flop


@torch.no_grad()
def eval_loss(model, seqs, pad_to, packed=False):
    """The assignment's loss on the first 32 captions, dropout off: equal weights, equal loss
    (packed or padded; in training the dropout masks differ, so the first steps' losses do)."""
    model.eval()
    batch = collate(seqs[:32], EOS, pad_to=pad_to)
    if packed:
        return shard_loss(model, batch, packed=True).item()
    return assignment_loss(model(batch.input_ids).logits, batch).item()


def cpu_rows(seqs, steps, tmp):
    ours, hf, _ = lab_and_hf_models(None, tmp)
    header(f"training steps, Tfmr-scratch size, batch 32, {steps} timed steps each")
    lab_loss, hf_loss = eval_loss(ours, seqs, None), eval_loss(hf, seqs, 36)
    packed_loss = eval_loss(ours, seqs, None, packed=True)
    lab_start = {k: v.clone() for k, v in ours.state_dict().items()}
    hf_start = {k: v.clone() for k, v in hf.state_dict().items()}
    rates = {}
    # the lab as its trainer runs (packed, fused Adam), then padded; transformers the
    # assignment's way (padded to 36, torch's Adam as it comes), then with the lab's fused Adam
    for label, model, start, pad_to, kw in (
            ("lab_packed", ours, lab_start, None, dict(packed=True)),
            ("lab_padded", ours, lab_start, None, {}),
            ("hf_fixed36", hf, hf_start, 36, dict(plain_adam=True)),
            ("hf_fixed36_fused_adam", hf, hf_start, 36, {})):
        model.load_state_dict(start)
        tokens, seconds, _, _ = run(model, seqs, steps, pad_to, **kw)
        rates[label] = tokens / seconds
    report(**{f"{k}_tokens_per_s": round(v, 1) for k, v in rates.items()},
           speedup=round(rates["lab_packed"] / rates["hf_fixed36"], 2),
           speedup_same_optimizer=round(rates["lab_packed"] / rates["hf_fixed36_fused_adam"], 2),
           speedup_padded=round(rates["lab_padded"] / rates["hf_fixed36_fused_adam"], 2),
           initial_loss_lab_packed=round(packed_loss, 6), initial_loss_lab_padded=round(lab_loss, 6),
           initial_loss_hf_fixed36=round(hf_loss, 6))


def gpu_rows(seqs, steps, tmp):
    """Fresh identical weights on the GPU; both in bf16 autocast with fused Adam."""
    ours, hf, _ = lab_and_hf_models(None, f"{tmp}/gpu")
    device = torch.device("cuda")
    name = flops.device_name(device)
    peak = flops.peak_flops(name, "bf16")
    c = ours.config
    n_params = flops.matmul_params(ours)

    def per_token(t):
        return flops.per_token(n_params, c.n_layer, c.n_embd, t)

    header(f"GPU training steps: {name}, bf16 autocast, fused Adam, batch 32, {steps} timed steps "
           f"each after 20 warm-up; bf16 peak " + (f"{peak / 1e12:.0f} TFLOP/s" if peak else "unknown"))
    figures = {}
    # the lab in float32 last, for what bf16 gives (its MFU against the float32 peak)
    for label, model, pad_to, precision in (("lab", ours, None, "bf16"), ("hf_fixed36", hf, 36, "bf16"),
                                            ("lab_fp32", ours, None, "fp32")):
        tokens, seconds, first_loss, flop = run(model, seqs, steps, pad_to, device, precision, per_token)
        mfu = flops.mfu(flop, seconds, flops.peak_flops(name, precision))
        figures |= {f"{label}_tokens_per_s": round(tokens / seconds, 1),
                    f"{label}_mfu_percent": None if mfu is None else round(100 * mfu, 2),
                    f"{label}_first_loss": round(first_loss, 4)}
    figures["speedup"] = round(figures["lab_tokens_per_s"] / figures["hf_fixed36_tokens_per_s"], 2)
    report(device=name, **figures)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=30, help="timed CPU steps")
    ap.add_argument("--gpu-steps", dest="gpu_steps", type=int, default=300, help="timed GPU steps")
    ap.add_argument("--device", default="all", choices=["all", "cpu", "cuda"],
                    help="all: the CPU rows, and the GPU rows when CUDA is present")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        seqs = encode_captions(load_split("train"), tokenizers.gpt2(), 64)
        if args.device in ("all", "cpu"):
            cpu_rows(seqs, args.steps, tmp)
        if args.device == "cuda" or (args.device == "all" and torch.cuda.is_available()):
            gpu_rows(seqs, args.gpu_steps, tmp)


if __name__ == "__main__":
    main()
