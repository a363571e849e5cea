"""Shared set-up for the side-by-side benchmarks."""
import json
import platform
import time

import torch


def header(title: str) -> None:
    print(f"# {title}")
    print(f"# torch {torch.__version__}, {torch.get_num_threads()} threads, {platform.processor() or platform.machine()}")


def timed(fn, repeat: int = 1):
    """Best wall time of `repeat` runs, and the last result."""
    best, result = float("inf"), None
    for _ in range(repeat):
        t0 = time.perf_counter()
        result = fn()
        best = min(best, time.perf_counter() - t0)
    return best, result


def cpu_seconds(processes) -> float:
    """The CPU (user + system) these psutil processes have used, those that ended counting 0."""
    import psutil
    total = 0.0
    for p in processes:
        try:
            t = p.cpu_times()
            total += t.user + t.system
        except psutil.Error:
            pass
    return total


def report(**figures) -> None:
    print(json.dumps(figures, indent=2))


def lab_and_hf_models(checkpoint: str | None, tmpdir, n_layer: int | None = None):
    """The lab's model and transformers' GPT2LMHeadModel with identical weights: a stored
    checkpoint exported through the lab's exporter, or a fresh Tfmr-scratch-sized model (with
    n_layer blocks in place of its 3, if given)."""
    from transformers import GPT2LMHeadModel

    from lab.storage import checkpoints, interop
    from lab.inputs import tokenizers
    from lab.modeling.model import build
    from lab.presets import get
    name = checkpoint
    if name is None:
        torch.manual_seed(0)
        model_cfg, _ = get("tfmr-scratch")
        model_cfg = model_cfg.replace(n_layer=n_layer) if n_layer else model_cfg
        checkpoints.save(build(model_cfg), tokenizers.gpt2(), "bench-random", store=tmpdir)
        name = "bench-random"
        store = tmpdir
    else:
        store = None
    out = interop.export_hf_gpt2(name, f"{tmpdir}/hf", store)
    ours = checkpoints.load(name, store).model.eval()
    hf = GPT2LMHeadModel.from_pretrained(out).eval()
    return ours, hf, name
