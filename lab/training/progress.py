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
    """What a progress event says the run is doing (a heartbeat's says it in words)."""
    if "doing" in ev:
        return ev["doing"]
    if ev["phase"] == "evaluating":
        return f"evaluating {ev['dev_items']:,} dev {ev.get('unit', 'examples')}"
    return "saving the checkpoint" if ev["phase"] == "saving" else "training"


def step_text(step: int, total_steps: int, per_step: float) -> str:
    """'training step 12 of 40 (steps take about 11 s)': the step under way, and the recent step
    time once there is one."""
    took = "" if not per_step else f" (steps take about {per_step:.0f} s)" if per_step >= 1.5 \
        else f" ({1 / per_step:.1f} steps a second)"
    return f"training step {step:,} of {total_steps:,}{took}"


def beat_text(ev: dict) -> str:
    """A heartbeat outside training: 'preparing the data: reading and tokenizing (0m12s in)'."""
    return f"{ev['doing']} ({format_duration(ev['phase_s'])} in)"


def rate_text(ev: dict) -> str:
    """'12,345 tok/s packed, MFU 3.1%' (MFU unknown on a device without a known peak; "packed"
    when the batches are packed into rows)."""
    return (f"{ev['tokens_per_s']:,.0f} tok/s{' packed' if ev.get('packed') else ''}, "
            f"{flops.format_mfu(ev.get('mfu'))}")


SAVED_BY = {"periodic": "its periodic save", "stop": "where its stop left it",
            "best": "its best checkpoint"}


def position_text(state: dict) -> str:
    """Where a saved train state has a run go on: 'step 40, 10 batches into epoch 2 (its
    periodic save)'."""
    epoch, done = state["epoch"] + 1, state.get("batches_done", 0)
    where = f"{done} batches into epoch {epoch}" if done else f"the start of epoch {epoch}"
    by = SAVED_BY.get(state.get("saved_by"))
    return f"step {state['step']}, {where}" + (f" ({by})" if by else "")


def eta_text(ev: dict) -> str:
    """The time left: "estimating" until a step has been timed (the estimate is 0 then with steps
    still to go), "0m00s" at the last step."""
    if not ev.get("eta_s") and ev.get("step", 0) < ev.get("total_steps", 0):
        return "estimating"
    return format_duration(ev.get("eta_s") or 0)


def save_text(ev: dict) -> str:
    """', saved 4m12s ago' or ', next save in 5m48s' (nothing when periodic saves are off)."""
    if "saved_s_ago" in ev:
        return f", saved {format_duration(ev['saved_s_ago'])} ago"
    if "next_save_s" in ev:
        return f", next save in {format_duration(ev['next_save_s'])}"
    return ""


def format_event(ev: dict, name: str = "") -> str:
    """One human line per trainer event: progress with ETA, dev scores, the end."""
    e = ev["event"]
    if e == "data":
        return (f"{ev['train_items']:,} train / {ev['dev_items']:,} dev {ev['unit']}, "
                f"{ev['params'] / 1e6:.1f}M parameters; run dir {ev['run_dir']}")
    if e == "start":
        return _start_text(ev)
    if e == "progress" and "total_steps" not in ev:
        return beat_text(ev)
    if e in ("step", "progress"):
        return _training_text(ev)
    if e == "saved":
        return (f"epoch {ev['epoch']} step {ev['step']}: saved where the run stands in "
                f"{ev['save_s']:.2f} s (a resume goes on from here)")
    if e == "eval":
        return _eval_text(ev)
    if e == "early_stop":
        return f"early stop after epoch {ev['epoch']}: {ev['reason']}"
    if e == "stopped":
        return (f"{ev.get('reason') or 'stopped'}" + ("; saved where it stands (resume goes on from there)"
                                                       if ev.get("saved") else ""))
    if e == "eval_aborted":
        return f"epoch {ev['epoch']}: evaluation cut short by a stop request"
    if e in ("final", "final_aborted"):     # the task's last step (Prepared.final), in its words
        return ev["text"]
    if e == "scoring":
        return f"scoring: {ev['what']} ({format_duration(ev['elapsed_s'])} in)"
    if e == "scored":
        return f"scored for sweep {ev['sweep']} in {format_duration(ev['elapsed_s'])}: {ev['summary']}"
    if e == "done":
        return _done_text(ev, name)
    return json.dumps(ev)


def _training_text(ev: dict) -> str:
    """A step line (the loss since the last one) or a progress line (what the run does now),
    with the ETA and how long ago the run last saved."""
    if ev["event"] == "step":
        pct = 100 * ev["step"] / ev["total_steps"]
        return (f"epoch {ev['epoch']} step {ev['step']}/{ev['total_steps']} ({pct:.1f}%) "
                f"loss {ev['train_loss']:.4f} {rate_text(ev)} "
                f"elapsed {format_duration(ev['elapsed_s'])} ETA {eta_text(ev)}"
                + save_text(ev))
    rate = f", {rate_text(ev)}" if "tokens_per_s" in ev else ""
    return (f"epoch {ev['epoch']} step {ev['step']}/{ev['total_steps']}: {phase_text(ev)}{rate}, "
            f"ETA {eta_text(ev)}{save_text(ev)}")


def _start_text(ev: dict) -> str:
    """Where and how the run trains: device, precision, compiled, packed, processes."""
    procs = f" x {ev['processes']} processes (torchrun)" if ev.get("processes", 1) > 1 else ""
    packing = f", {ev.get('unit', 'examples')} packed into rows" if ev.get("packed") else \
        f", not packed: {ev['unpacked_why']}" if ev.get("unpacked_why") else ""
    how = f" ({ev['device_name']}, {ev['precision']}{', compiled' if ev.get('compiled') else ''}" \
          f"{packing})" if "precision" in ev else ""
    going_on = "" if "resumed_from" not in ev else "; going on from " + position_text(
        {"epoch": ev["first_epoch"] - 1, "batches_done": ev["first_batch"], "step": ev["first_step"],
         "saved_by": ev["resumed_from"]})
    epochs, steps = ev["epochs"], ev["steps_per_epoch"]
    return (f"training on {ev['device']}{how}{procs}: {epochs} epoch{'s' * (epochs != 1)} x "
            f"{steps} step{'s' * (steps != 1)}{going_on}")


def _perplexity_text(ev: dict) -> str:
    """Dev perplexity, and the other ways of it the task scores."""
    ways = [f"{name} {ev[key]:.3f}" for name, key in (("token-weighted", "dev_token_perplexity"),
                                                       ("per word", "dev_word_perplexity"))
            if key in ev]
    if "dev_bits_per_byte" in ev:
        ways.append(f"{ev['dev_bits_per_byte']:.3f} bits per byte")
    return f"dev perplexity {ev['dev_perplexity']:.3f}" + (f" ({', '.join(ways)})" if ways else "")


_PERPLEXITY_KEYS = ("dev_loss", "dev_perplexity", "dev_token_perplexity", "dev_word_perplexity",
                    "dev_bits_per_byte")


def _shown(ev: dict) -> list[dict]:
    """The task's own scores an evaluation carries; an event logged before they were carried
    shows every other dev score by its key."""
    if "shown" in ev:
        return ev["shown"]
    return [{"key": k, "label": k.replace("_", " ")} for k in ev
            if k.startswith("dev_") and k not in _PERPLEXITY_KEYS]


def _score_text(ev: dict, shown: dict) -> str:
    """One of the task's dev scores: its name and value (a percentage for a proportion, with how
    many were right where the task counts them)."""
    if shown["key"] not in ev:
        return ""
    value = ev[shown["key"]]
    said = f"{100 * value:.1f}%" if shown.get("percent") else str(value) if isinstance(value, int) \
        else f"{value:.4f}"
    count = f" ({ev[shown['count']]} right)" if shown.get("count") in ev else ""
    return f" {shown['label']} {said}{count}"


def _eval_text(ev: dict) -> str:
    """An evaluation's dev scores (those the task has, its own by their names), and which
    checkpoint it saved."""
    return (f"{'step ' + str(ev['step']) if ev.get('mid_epoch') else 'epoch ' + str(ev['epoch'])}: "
            + _perplexity_text(ev) + "".join(_score_text(ev, s) for s in _shown(ev))
            + (" best, saved" if ev.get("best") else "")
            + (" best dev BLEU, saved as the -bleu checkpoint" if ev.get("best_bleu") else "")
            + (f" best dev {ev['also_best']}, saved as the -{ev['also_best']} checkpoint"
               if ev.get("also_best") else "")
            + (f" kept as the -e{ev['epoch']} checkpoint" if ev.get("kept") else ""))


def _done_text(ev: dict, name: str) -> str:
    """The run's end: the epoch kept, by the score it was kept by (the task's own where it is not
    perplexity, then its perplexity), and the checkpoint's name."""
    ppl, budget = ev["best_dev_perplexity"], ev.get("budget")
    said = f"done ({budget} reached at step {ev['step']})" if budget else "done"
    if ppl is None:
        return said
    by = _score_text(ev, ev["kept_by"]) if "kept_by" in ev else ""
    kept = f" by{by}, dev perplexity {ppl:.3f}" if by else f", dev perplexity {ppl:.3f}"
    return f"{said}: best epoch {ev['best_epoch']}{kept}; checkpoint {name!r}"
