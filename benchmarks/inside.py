"""Head ablation's cost on the CPU: every head of a Tfmr-scratch-sized model (3 blocks x 12 heads,
width 768, GPT-2 BPE; random weights) ablated in turn on the same 100 test captions, four ways:
- the plain evaluation once per head (lab.evaluation.metrics.sentence_nlls with the head zeroed:
  packed rows, what `ablate --heads` runs for one head);
- the lab's exact scan (`ablate --each`: the stream below each block kept from one intact pass,
  a block's 12 heads as one batch of 12 copies);
- attribution patching's estimate (one forward and one backward pass);
- the peer: TransformerLens 4.3's TransformerBridge over the same weights (exported with the lab's
  exporter to GPT2LMHeadModel), a head zeroed at hook_z with run_with_hooks, once per head.
Also the named points' cost in a plain forward pass (the identities each forward runs through),
and nnsight's trace against the lab's hooks for one ablated forward pass, where nnsight is
installed. Each figure the best of `--repeat` runs.

--layers N gives the model N blocks (a deeper model, where the blocks are more of the work);
--no-peer leaves TransformerLens out.

Run: .venv/bin/python benchmarks/inside.py [--n 100] [--repeat 2] [--layers 3] [--no-peer]"""
import argparse
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import torch  # noqa: E402

from benchmarks.common import header, lab_and_hf_models, report, timed  # noqa: E402
from lab.inputs.data import collate, sentence_nll  # noqa: E402
from lab.inside import ablation  # noqa: E402
from lab.inside.ablation import _losses  # noqa: E402
from lab.modeling.points import Point, points  # noqa: E402
from lab.storage import checkpoints  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--layers", type=int, default=None)
    ap.add_argument("--no-peer", action="store_true")
    args = ap.parse_args()
    header(f"every head ablated in turn, {args.n} test captions")
    with tempfile.TemporaryDirectory() as tmp:
        ours, hf, name = lab_and_hf_models(None, tmp, args.layers)
        ck = checkpoints.load(name, tmp)
        ck.model.eval()
        _, seqs, _, _ = ablation.subsets(ck, "test", args.n, 0, 200)     # the scan's own subset
        pad = ck.tokenizer.eos_id
        L, H = ck.config.n_layer, ck.config.n_head
        heads = [(layer, h) for layer in range(L) for h in range(H)]
        figures = {"blocks": L, "heads": len(heads), "texts": args.n}

        def per_head():
            return [_losses(ck.model, seqs, pad, ablation.ablations([lh], "zero", None)).mean().item()
                    for lh in heads]
        figures["plain_evaluation_per_head_s"], plain = timed(per_head, args.repeat)
        figures["exact_scan_s"], scanned = timed(
            lambda: ablation.scan(ck, n=args.n, estimated=False), args.repeat)
        figures["attribution_estimate_s"], est = timed(lambda: ablation.attribution(ck, n=args.n),
                                                       args.repeat)
        figures["scan_over_plain"] = figures["exact_scan_s"] / figures["plain_evaluation_per_head_s"]
        figures["rank_agreement_estimate_vs_scan"] = ablation.rank_agreement(scanned["change"], est["change"])
        if not args.no_peer:
            figures.update(_transformer_lens(hf, seqs, pad, heads, args.repeat))
            figures["scan_speedup_over_transformer_lens"] = (figures["transformer_lens_per_head_s"]
                                                             / figures["exact_scan_s"])
        figures.update(_point_cost(ck.model, seqs))
        figures.update(_nnsight(ck.model, seqs))
    report(**figures)


def _transformer_lens(hf, seqs, pad, heads, repeat) -> dict:
    from transformer_lens.model_bridge.sources._bridge_builder import build_bridge_from_module
    tl = build_bridge_from_module(hf, "GPT2LMHeadModel", hf_config=hf.config)
    batches = [collate(seqs[k:k + 32], pad) for k in range(0, len(seqs), 32)]

    def per_head():
        out = []
        for layer, h in heads:
            def zero(z, hook, h=h):
                z = z.clone()
                z[:, :, h] = 0.0
                return z
            losses = []
            with torch.no_grad():
                for b in batches:
                    logits = tl.run_with_hooks(b.input_ids, fwd_hooks=[(f"blocks.{layer}.attn.hook_z", zero)])
                    nll, cnt = sentence_nll(logits, b)
                    losses.append(nll / cnt)
            out.append(torch.cat(losses).mean().item())
        return out
    seconds, _ = timed(per_head, repeat)
    return {"transformer_lens_per_head_s": seconds}


def _point_cost(model, seqs) -> dict:
    """A plain forward pass's time, and what its named points (identity calls) take of it."""
    x = collate(seqs[:32], 0).input_ids
    with torch.no_grad():
        forward_s, _ = timed(lambda: model(x), 5)
        p = Point()
        t = torch.zeros(1)
        t0 = time.perf_counter()
        for _ in range(10_000):
            p(t)
        per_call = (time.perf_counter() - t0) / 10_000
    n = len(points(model))
    return {"forward_s": forward_s, "points_per_forward": n, "point_call_us": per_call * 1e6,
            "points_share_of_forward": n * per_call / forward_s}


def _nnsight(model, seqs) -> dict:
    try:
        from nnsight import NNsight
    except ImportError:
        return {"nnsight": "not installed"}
    from lab.inside.hooks import hooked
    x = collate(seqs[:32], 0).input_ids
    nm = NNsight(model)

    def with_nnsight():
        with torch.no_grad(), nm.trace(x):
            z = nm.transformer.h[1].attn.hook_z.output
            z[:, 2] = 0.0
            out = nm.output.save()
        return out

    def with_hooks():
        with torch.no_grad(), hooked(model, replace=ablation.ablations([(1, 2)], "zero", None)):
            return model(x)
    hooks_s, ours = timed(with_hooks, 5)
    nn_s, theirs = timed(with_nnsight, 5)
    same = torch.allclose(ours.logits, theirs.logits if hasattr(theirs, "logits") else theirs[0], atol=1e-5)
    return {"hooks_forward_s": hooks_s, "nnsight_forward_s": nn_s, "nnsight_same_logits": bool(same)}


if __name__ == "__main__":
    main()
