"""The Train tab's job view: the job list, a job's progress line with its ETA, loss curves, log
tail and the checkpoint it keeps, refreshed every two seconds from what the job writes; and Stop
and Resume. Jobs live in the durable ledger, so a reload re-attaches."""
from __future__ import annotations

import html
import json
import time
from pathlib import Path

import gradio as gr

from lab.errors import LabError
from lab.config import ConfigError
from lab.storage import checkpoints
from lab.storage import store as lab_store
from lab.training.progress import beat_text, eta_text, format_duration, phase_text, save_text
from lab.training.runs import run_dir_for
from lab.ui.common import Context, clicked, only_changed, whole
from lab.ui.fields import Dropdown
from lab.ui.work import bar
from lab.worker import jobs


def job_choices(store=None) -> list[tuple[str, str]]:
    return [(f"{j['id']}: {j['name']} ({j['status']})", str(j["id"])) for j in jobs.list_jobs(store)]


def _training_text(p: dict) -> str:
    """A training job's line: what it does, where it is (the step said once: by the phase when
    it names the step under way, else as done/all), elapsed and ETA (estimating until a step is
    measured), and its saves."""
    doing = phase_text(p) if p.get("event") == "progress" else f"training, loss {p['train_loss']:.3f}"
    where = "" if doing.startswith("training step") else f", step {p['step']}/{p['total_steps']}"
    return (f"{doing} — epoch {p['epoch']}{where}, elapsed {format_duration(p['elapsed_s'])}, "
            f"ETA {eta_text(p)}" + save_text(p))


def progress_html(job: dict) -> str:
    """The bar, and a line saying what the job does now (training, evaluating N dev captions,
    saving), with its ETA (evaluations counted) and how long ago it last reported."""
    p = job["progress"] or {}
    status = job["status"]
    frac = p["step"] / p["total_steps"] if p.get("total_steps") else 0.0
    text = {"queued": "queued: waiting for the worker"}.get(status, status)
    event = p.get("event")
    if event == "progress" and "total_steps" not in p and status == "running":   # a heartbeat
        text = f"running: {html.escape(beat_text(p))}"
    elif event in ("step", "progress") and status == "running":
        text = _training_text(p)
    elif event == "saved":
        text = f"{status}: saved where it stands at epoch {p['epoch']}, step {p['step']}"
    elif event == "scoring":
        text = f"{status}: training ended; scoring {html.escape(p['what'])}"
    elif event == "scored":
        text = f"{status}: {html.escape(p['summary'])}"
    elif event == "final" and "final_summary" in p:
        text = f"{status}: {html.escape(p['final_summary'])}"
    elif event == "eval":
        where = f"step {p['step']}" if p.get("mid_epoch") else f"epoch {p['epoch']}"
        text = f"{status}: {where} dev perplexity {p['dev_perplexity']:.2f}"
    elif event in ("data", None) and status == "running":      # nothing reported yet: loading
        text = "running: loading the data and the model"
    elif event == "start" and status == "running":
        text = f"running: training on {p['device']}, the first step under way"
    elif status in ("stopped", "interrupted"):
        text = stopped_text(status, p)
    if status == "running" and p.get("time"):
        text += f" (updated {format_duration(max(0, time.time() - p['time']))} ago)"
    if status == "done":
        frac = 1.0
    if job["error"]:
        text += f" — {html.escape(job['error'])}"
    return (f"<div class='lab-progress' data-status='{status}'>{bar(frac)}</div>"
            f"<div class='lab-progress-text'>{text}</div>")


def stopped_text(status: str, p: dict) -> str:
    """Where a stopped (or interrupted) run stands and how to go on, said in the status line."""
    if p.get("event") == "stopped":
        reason = p.get("reason") or "stopped"
        where = f"at epoch {p['epoch']}, step {p['step']}" + (   # a reason may say where already
            "" if f"step {p['step']}" in reason else f" ({reason})")
        after = ("its state is saved: Resume goes on from there" if p.get("saved")
                 else "nothing was saved: Resume starts it again")
        return f"{status} {where}; {after}"
    if not p or p.get("event") in ("data", None):
        return f"{status} before its first step"
    return f"{status} at step {p.get('step', '?')}: Resume goes on from its last save"


class _Curve:
    """A run's metrics.jsonl read incrementally: each 2-second poll parses only the new lines."""

    def __init__(self):
        self.inode, self.offset, self.steps, self.train, self.dev_steps, self.dev = None, 0, [], [], [], []

    def update(self, path: Path) -> "_Curve":
        st = path.stat() if path.exists() else None
        size, inode = (st.st_size, st.st_ino) if st else (0, None)
        if inode != self.inode or size < self.offset:      # a new file: start afresh
            self.__init__()
            self.inode = inode
        if size > self.offset:
            with open(path, "rb") as f:
                f.seek(self.offset)
                chunk = f.read(size - self.offset)
            complete = chunk[:chunk.rfind(b"\n") + 1]      # a line being written waits
            self.offset += len(complete)
            for line in complete.decode(errors="replace").splitlines():
                try:
                    ev = json.loads(line)
                except json.JSONDecodeError:
                    continue
                if ev.get("event") == "step":
                    self.steps.append(ev["step"]); self.train.append(ev["train_loss"])
                elif ev.get("event") == "eval":
                    self.dev_steps.append(ev["step"]); self.dev.append(ev["dev_loss"])
        return self


_CURVES: dict[Path, _Curve] = {}


def curves(job: dict, store=None):
    import plotly.graph_objects as go
    path = run_dir_for(job["name"], store) / "metrics.jsonl"
    c = _CURVES.setdefault(path, _Curve()).update(path)
    steps, train, dev_steps, dev = c.steps, c.train, c.dev_steps, c.dev
    fig = go.Figure()
    fig.add_scatter(x=steps, y=train, name="train loss", mode="lines+markers",   # a first point shows
                    marker=dict(size=4))
    fig.add_scatter(x=dev_steps, y=dev, name="dev loss", mode="lines+markers")
    if not steps:
        every = job["spec"]["train"].get("log_every", 20)
        fig.add_annotation(text=f"the first training loss is plotted at step {every}", showarrow=False,
                           x=0.5, y=0.5, xref="paper", yref="paper")
    fig.update_layout(height=300, margin=dict(l=40, r=10, t=30, b=30), xaxis_title="step",
                      yaxis_title="loss", title=f"job {job['id']}: {job['name']}",
                      # transparent, mid-grey text and grid: readable in the light and dark themes
                      paper_bgcolor="rgba(0,0,0,0)", plot_bgcolor="rgba(0,0,0,0)",
                      font=dict(color="#8a8f98"))
    fig.update_xaxes(gridcolor="rgba(128,128,128,0.25)")
    fig.update_yaxes(gridcolor="rgba(128,128,128,0.25)")
    return fig


def log_tail(job: dict, store=None, lines: int = 15, max_bytes: int = 65536) -> str:
    path = lab_store.log_path(job["id"], store)
    if not path.exists():
        return "(no log yet: the job waits for the worker)" if job["status"] == "queued" else ""
    with open(path, "rb") as f:           # the end of the file only: logs of long runs grow
        f.seek(max(0, path.stat().st_size - max_bytes))
        return "\n".join(f.read().decode(errors="replace").splitlines()[-lines:])


def written(job: dict, store=None) -> str:
    if job["name"] not in checkpoints.names(store):
        ended = job["status"] not in ("queued", "running")
        if ended and (run_dir_for(job["name"], store) / "last").is_dir():
            return ("No checkpoint yet: the run ended before its first dev evaluation and saved "
                    "where it stood. Resume goes on from there.")
        return ("No checkpoint yet (one is written after each epoch whose dev score improves, and "
                "where the run stands, to resume from, every save_every_minutes).")
    try:
        m = checkpoints.info(job["name"], store)["metrics"]
    except checkpoints.CheckpointError as e:
        return f"{str(e)[:1].upper()}{str(e)[1:]}"          # "Checkpoint 'x' is damaged: ..."
    ppl = f", dev perplexity {m['dev_perplexity']:.2f}" if "dev_perplexity" in m else ""
    if "final_summary" in m:             # the task's last step (Prepared.final), in its words
        ppl += f" ({m['final_summary']})"
    return f"Checkpoint **{job['name']}**: best epoch {m.get('epoch', '?')}{ppl}. It is a choice in the other tabs."


def job_id_of(value) -> int:
    """A job as the dropdown or an API call gives it: its id, as a number or text."""
    if value is None or (isinstance(value, str) and not value.strip()):
        raise ConfigError("select a job first")
    return whole(value, "job id", 1, 2 ** 63 - 1)


def view(job_id, store=None):
    if not job_id:
        return "<div class='lab-progress-text'>No job selected.</div>", None, "", ""
    job = jobs.get(job_id_of(job_id), store)
    return progress_html(job), curves(job, store), log_tail(job, store), written(job, store)


def poll(job_id, shown_choices, sent=None, store=None):
    """The pulse's view: the job's progress (each part only when it changed since the last tick
    sent it: `sent`, their digests), and the job list's labels when a status changed. With no
    job chosen, a job started elsewhere (the getting-started panel, a script) is chosen once it
    runs or waits, so the page never says 'no job' while one is under way."""
    choices = [list(c) for c in job_choices(store)]
    labels = gr.update(choices=choices) if choices != shown_choices else gr.skip()
    if not job_id:
        active = [j for j in jobs.list_jobs(store) if j["status"] in ("running", "queued")]
        if active:
            job_id = str(active[-1]["id"])           # the oldest under way: the one running first
            labels = gr.update(choices=choices, value=job_id)
    try:
        shown, sent = only_changed(view(job_id, store), sent)
    except LabError:      # a job that is not there: said once, where its progress goes (job_status)
        shown = (gr.skip(),) * 4
    return (*shown, labels, choices, sent)


def stop(job_id, mode, store=None):
    job = jobs.request_stop(job_id_of(job_id), mode, store)
    return f"Job {job['id']}: stop requested ({mode.replace('_', ' ')})." if job["status"] == "running" \
        else f"Job {job['id']} is {job['status']}."


def resume(job_id, store=None):
    new = jobs.resume(job_id_of(job_id), store)
    return (gr.update(choices=job_choices(store), value=str(new)),
            f"Queued job {new}, resuming job {job_id}{jobs.resumes_from(new, store)}.")


def jobs_section(ctx: Context, message) -> Dropdown:
    """The job list with Stop and Resume, and the chosen job's live view; returns the list."""
    gr.Markdown("### Jobs")
    with gr.Row():
        job = Dropdown([], label="job", elem_id="train-job", scale=3,
                       allow_custom_value=True)    # a script names any job, made before or after
        stop_now = gr.Button("Stop now", elem_id="train-stop-now")
        stop_after = gr.Button("Stop after the next checkpoint")
        resume_btn = gr.Button("Resume", elem_id="train-resume")
    progress = gr.HTML(elem_id="train-progress", label="progress (HTML)")
    plot = gr.Plot(label="loss curves")
    written_md = gr.Markdown(elem_id="train-written", label="the checkpoint written", show_label=False)
    # no line numbers: a tail's line 1 is not the log's, and Gradio's gutter drifted from the text
    tail = gr.Code(label="log tail", language=None, interactive=False, show_line_numbers=False)
    outputs = [progress, plot, tail, written_md]
    def job_status(job: str):
        """A job's progress (HTML), loss curves, log tail and the checkpoint it wrote."""
        return view(job, ctx.store)
    clicked(job, job_status, [job], outputs, "job_status", note=0, event="change")
    shown = gr.State([])
    sent = gr.State([])
    ctx.every(lambda j, c, s: poll(j, c, s, ctx.store), [job, shown, sent], outputs + [job, shown, sent])

    def stop_job(job: str):
        """Stop a job now: a running one saves where it stands; a queued one never starts."""
        return stop(job, "now", ctx.store)

    def stop_job_after_checkpoint(job: str):
        """Stop a running job once it has written its next checkpoint."""
        return stop(job, "after_checkpoint", ctx.store)

    def resume_job(job: str):
        """Queue a job that goes on where an interrupted, stopped or failed one stood: the new
        job's id and the message."""
        return resume(job, ctx.store)
    clicked(stop_now, stop_job, [job], [message], "stop_job", note=0)
    clicked(stop_after, stop_job_after_checkpoint, [job], [message], "stop_job_after_checkpoint", note=0)
    clicked(resume_btn, resume_job, [job], [job, message], "resume_job", note=1)
    return job
