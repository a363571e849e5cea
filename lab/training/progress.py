"""What a run's events say to a person: one human line per trainer event (the CLI prints it, a
job's log keeps it), and the pieces the Train tab shows (a duration, what the run is doing)."""
from __future__ import annotations

import json

from lab.modeling import flops


def format_duration(seconds: float) -> str:
    """1h02m, or 3m07s."""
    seconds = int(seconds)
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def phase_text(ev: dict) -> str:
    """What a progress event says the run is doing."""
    if ev["phase"] == "evaluating":
        return f"evaluating {ev['dev_items']:,} dev {ev.get('unit', 'examples')}"
    return "saving the checkpoint" if ev["phase"] == "saving" else "training"


def rate_text(ev: dict) -> str:
    """'12,345 tok/s packed, MFU 3.1%' (MFU unknown on a device without a known peak; "packed"
    when the batches are packed into rows)."""
    return (f"{ev['tokens_per_s']:,.0f} tok/s{' packed' if ev.get('packed') else ''}, "
            f"{flops.format_mfu(ev.get('mfu'))}")


def format_event(ev: dict, name: str = "") -> str:
    """One human line per trainer event: progress with ETA, dev scores, the end."""
    e = ev["event"]
    if e == "data":
        return (f"{ev['train_items']:,} train / {ev['dev_items']:,} dev {ev['unit']}, "
                f"{ev['params'] / 1e6:.1f}M parameters; run dir {ev['run_dir']}")
    if e == "start":
        return _start_text(ev)
    if e == "step":
        pct = 100 * ev["step"] / ev["total_steps"]
        return (f"epoch {ev['epoch']} step {ev['step']}/{ev['total_steps']} ({pct:.1f}%) "
                f"loss {ev['train_loss']:.4f} {rate_text(ev)} "
                f"elapsed {format_duration(ev['elapsed_s'])} ETA {format_duration(ev['eta_s'])}")
    if e == "progress":
        rate = f", {rate_text(ev)}" if "tokens_per_s" in ev else ""
        return (f"epoch {ev['epoch']} step {ev['step']}/{ev['total_steps']}: {phase_text(ev)}{rate}, "
                f"ETA {format_duration(ev['eta_s'])}")
    if e == "eval":
        return _eval_text(ev)
    if e == "early_stop":
        return f"early stop after epoch {ev['epoch']}: {ev['reason']}"
    if e == "stopped":
        return (f"{ev.get('reason') or 'stopped'}" + ("; saved where it stands (resume goes on from there)"
                                                       if ev.get("saved") else ""))
    if e == "eval_aborted":
        return f"epoch {ev['epoch']}: evaluation cut short by a stop request"
    if e == "final_dev_aborted":
        return "the evaluation on all dev captions was cut short by a stop request"
    if e == "final_dev":
        return (f"the kept checkpoint on all {ev['final_dev_captions']:,} dev captions: perplexity "
                f"{ev['final_dev_perplexity']:.3f} (token-weighted {ev['final_dev_token_perplexity']:.3f}, "
                f"per word {ev['final_dev_word_perplexity']:.3f})")
    if e == "scoring":
        return f"scoring: {ev['what']} ({format_duration(ev['elapsed_s'])} in)"
    if e == "scored":
        return f"scored for sweep {ev['sweep']} in {format_duration(ev['elapsed_s'])}: {ev['summary']}"
    if e == "done":
        return _done_text(ev, name)
    return json.dumps(ev)


def _start_text(ev: dict) -> str:
    """Where and how the run trains: device, precision, compiled, packed, processes."""
    procs = f" x {ev['processes']} processes (torchrun)" if ev.get("processes", 1) > 1 else ""
    packing = f", {ev.get('unit', 'examples')} packed into rows" if ev.get("packed") else \
        f", not packed: {ev['unpacked_why']}" if ev.get("unpacked_why") else ""
    how = f" ({ev['device_name']}, {ev['precision']}{', compiled' if ev.get('compiled') else ''}" \
          f"{packing})" if "precision" in ev else ""
    return (f"training on {ev['device']}{how}{procs}: {ev['epochs']} epochs x "
            f"{ev['steps_per_epoch']} steps")


def _eval_text(ev: dict) -> str:
    """An evaluation's dev scores (those the task has), and which checkpoint it saved."""
    return (f"{'step ' + str(ev['step']) if ev.get('mid_epoch') else 'epoch ' + str(ev['epoch'])}: "
            f"dev perplexity {ev['dev_perplexity']:.3f} "
            f"(token-weighted {ev['dev_token_perplexity']:.3f}"
            + (f", per word {ev['dev_word_perplexity']:.3f}" if "dev_word_perplexity" in ev else "") + ")"
            + (f" dev harmonic BLEU {ev['dev_harmonic_bleu']:.4f}" if "dev_harmonic_bleu" in ev else "")
            + (f" dev accuracy {100 * ev['dev_accuracy']:.1f}% ({ev['dev_correct']} right)"
               if "dev_accuracy" in ev else "")
            + (" best, saved" if ev.get("best") else "")
            + (" best dev BLEU, saved as the -bleu checkpoint" if ev.get("best_bleu") else "")
            + (f" best dev {ev['also_best']}, saved as the -{ev['also_best']} checkpoint"
               if ev.get("also_best") else ""))


def _done_text(ev: dict, name: str) -> str:
    ppl, budget = ev["best_dev_perplexity"], ev.get("budget")
    said = f"done ({budget} reached at step {ev['step']})" if budget else "done"
    return (f"{said}: best epoch {ev['best_epoch']}, dev perplexity "
            f"{ppl:.3f}; checkpoint {name!r}" if ppl is not None else said)
