"""The trainer: knows no Gradio and no particular model (minGPT's trainer in spirit).

`Trainer.run()` is a generator of metric dicts (`{"event": "step" | "eval" | "best" | "done", ...}`);
the CLI prints them, the job worker writes them to the ledger. Every dict also goes to
`metrics.jsonl` and TensorBoard event files in the run directory. Callbacks get the dicts too;
`on_best(record, train_state)` receives control when dev improves (the caller saves the checkpoint;
train_state holds the optimizer state, where training stands and the random states, and `resume=`
takes it back). `should_stop()` is polled every step and between evaluation batches: "now" stops
within a step or an evaluation batch and hands `on_stop` the state to keep, "after_checkpoint" (or
any other true value) after the current epoch's evaluation and checkpoint. Every
`save_every_minutes` of training `on_stop` also gets that state, and the run goes on (a periodic
save, lab.training.saves).
"""
from __future__ import annotations

import functools
import gc
import json
import math
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from lab.training import distributed, eta, heartbeat, progress
from lab.modeling import flops
from lab.storage import store
from lab.inputs import tasks
from lab.config import ConfigError, TrainConfig
from lab.inputs.data import Batch, assignment_loss, pack, packable
from lab.errors import Aborted
from lab.modeling.device import autocast, pick_device, resolve_precision
from lab.training.saves import SaveClock, rng_state, set_rng_state
from lab.training.parameters import make_optimizer, parse_train_layers, trainable_parameters
from lab.training.schedules import scheduled_inputs, scheduled_lr


GO, STOP_NOW, STOP_AFTER = 0, 1, 2       # what rank 0 tells every rank between steps
PROGRESS_EVERY_S = heartbeat.BEAT_S     # a progress line this often between steps (the beat covers a long step)


def shard_loss(model, batch: Batch, rank: int = 0, world: int = 1, loss_fn=assignment_loss,
               packed: bool = False) -> torch.Tensor:
    """This process's part of the batch loss. With several processes each takes rows rank::world,
    weighted by its share of the rows, so the mean over processes that DDP takes of the gradients
    is the gradient of the whole batch's assignment loss. packed: read the texts packed into rows
    (data.pack; each process packs its own)."""
    if world == 1:
        return _loss(model, batch, loss_fn, packed)
    part = batch.rows(slice(rank, None, world))
    rows = part.input_ids.size(0)
    if rows == 0:       # fewer captions than processes (a last batch): take part with weight 0
        return model(batch.input_ids[:1]).logits.sum() * 0.0
    return _loss(model, part, loss_fn, packed) * (rows * world / batch.input_ids.size(0))


def _loss(model, batch: Batch, loss_fn=assignment_loss, packed: bool = False) -> torch.Tensor:
    """The task's loss (the captions assignment's by default), plus the model's own training cost
    when it has one (the Universal Transformer's ponder cost)."""
    if packed and packable(batch):
        batch = pack(batch)
    out = model(batch.input_ids, **batch.model_inputs())
    loss = loss_fn(out.logits, batch)
    return loss if out.aux_loss is None else loss + out.aux_loss


class Trainer:
    """on_best(record, train_state): dev improved, save the model. on_stop(train_state): the run
    stops before its end (stop now, stop after the checkpoint, shutdown), or a periodic save is
    due; keep where it stands (never over the best checkpoint).
    train_state: the optimizer state, `epoch` (epochs completed), `batches_done` (batches of the
    next epoch already trained), `step`, the best record and the random states: `resume=` takes
    it back and the run goes on exactly as if it had never stopped."""

    def __init__(self, model, task, cfg: TrainConfig, run_dir: Path,
                 on_best: Callable[[dict, dict], None] | None = None,
                 should_stop: Callable[[], bool] | None = None, resume: dict | None = None,
                 on_stop: Callable[[dict], None] | None = None,
                 best_by=None, also_by=None, on_also_best: Callable[[dict, dict], None] | None = None,
                 on_epoch: Callable[[dict], None] | None = None):
        self.model = model
        self.task = task    # the task's batches, loss and dev scores (lab.inputs.tasks.Prepared)
        self.resume = resume            # a checkpoint's train state: go on where it stood
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.on_best, self.on_stop = on_best, on_stop
        # the dev scores best is judged by (lab.inputs.tasks.Metric: score key, direction), as the task
        # declares them; also_by (with on_also_best) keeps a second best by another one
        self.best_by = best_by or tasks.kept_by(cfg)
        self.also_by, self.on_also_best = also_by, on_also_best
        self.on_epoch, self.keep_epochs = on_epoch, set(cfg.kept_epochs())
        self.should_stop = should_stop or (lambda: None)
        self.device = pick_device(cfg.device)
        self.run_dir.mkdir(parents=True, exist_ok=True)

    def _log(self, record: dict, writer) -> dict:
        record = {"time": round(time.time(), 3), **record}
        if writer is None:              # not rank 0 under torchrun: rank 0 writes
            return record
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(json.dumps(record) + "\n")
        step = record.get("step", 0)
        for key, value in record.items():
            if key not in ("time", "step", "epoch", "event") and isinstance(value, (int, float)):
                writer.add_scalar(f"{record['event']}/{key}", value, step)
        return record

    def _stop_code(self, force: bool = False) -> int:
        """Rank 0 asks should_stop() (force: rank 0 must stop now); every rank gets the answer."""
        asked = "now" if force else self.should_stop() if self.main else None
        return distributed.broadcast(STOP_NOW if asked == "now" else STOP_AFTER if asked else GO,
                                     self.device)

    def abort_eval(self) -> bool:
        """Asked between evaluation batches: a stop-now request cuts an evaluation short."""
        store.fault("eval.batch")
        self.eval_batches += 1
        return self.should_stop() == "now"

    def run(self) -> Iterator[dict]:
        """The events (rank 0's, under torchrun; the other ranks train silently beside it)."""
        for ev in self._run():
            if self.main:
                yield ev

    def _setup(self):
        """Device, processes, the optimizer, and where training starts (fresh or resumed)."""
        cfg = self.cfg
        rank, world, self.device = distributed.setup(self.device)
        self.main, self.rank, self.world = rank == 0, rank, world
        model = self.model.to(self.device)
        layers = parse_train_layers(cfg.train_layers, len(model.transformer.h))
        self.params = trainable_parameters(model, layers)
        self.stepper = model
        if distributed.launched():
            from torch.nn.parallel import DistributedDataParallel
            self.stepper = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        if cfg.compile:
            self.stepper = torch.compile(self.stepper)
        biases = frozenset(id(p) for n, p in model.named_parameters() if n.endswith("bias"))
        self.opt = make_optimizer(self.params, cfg, self.device, biases)
        self.packed, self.unpacked_why = self._packing(model)
        self.precision = resolve_precision(cfg.precision, self.device)
        self.device_name = flops.device_name(self.device)
        self.peak = flops.peak_flops(self.device_name, self.precision)
        c = model.config        # training FLOPs per real token, given the batch's length
        self.flops_per_token = functools.partial(flops.per_token, flops.matmul_params(model),
                                                 c.n_layer, c.n_embd)
        self._count_steps()
        self.epoch_done, self.step, self.skip, self.best, self.bad_epochs = 0, 0, 0, None, 0
        self.also_best, self.trained_before, self.budget_spent = None, 0.0, None
        self.elapsed_before = 0.0       # the job's time before this segment (a resume goes on counting)
        if self.resume:
            self._resume_from(self.resume)

    def _count_steps(self) -> None:
        """Steps per epoch, steps in all (a step budget may end the run inside an epoch), epochs."""
        cfg = self.cfg
        self.steps_per_epoch = math.ceil(len(self.task.train_items) / cfg.batch_size)
        self.total_steps = self.steps_per_epoch * cfg.epochs
        if cfg.max_steps is not None:            # a step budget ends the run inside an epoch
            self.total_steps = min(self.total_steps, cfg.max_steps)
        self.epochs = math.ceil(self.total_steps / self.steps_per_epoch)

    def _resume_from(self, r: dict) -> None:
        """Where a saved train state stood: the optimizer, epoch and step, the best so far, the
        time already trained and the random states."""
        try:
            self.opt.load_state_dict(r["optimizer"])
            for group in self.opt.param_groups:    # a state saved unfused keeps the kernel chosen now
                group["fused"] = self.opt.defaults.get("fused")
        except (ValueError, KeyError) as e:
            raise ConfigError(f"the saved optimizer state does not fit this run ({e}); resume "
                              f"with the training settings it was saved with") from None
        self.epoch_done, self.step, self.skip = r["epoch"], r["step"], r.get("batches_done", 0)
        self.best, self.bad_epochs = r["best"], r.get("bad_epochs", 0)
        self.also_best = r.get("also_best", r.get("best_bleu"))   # best_bleu: older states
        self.trained_before = r.get("trained_s", 0.0)     # the time budget counts every segment
        self.elapsed_before = r.get("elapsed_s", self.trained_before)   # older states: time trained
        set_rng_state(r.get("rng") or {}, self.device)

    def _packing(self, model) -> tuple[bool, str | None]:
        """Whether the batches are packed into rows, and why not when packing was asked for."""
        if not self.cfg.pack:
            return False, None
        if not self.task.packs:
            return False, self.task.unpacked_because or f"the {self.task.unit}' padding is model input"
        if self.task.teacher_forcing is not None:
            return False, "scheduled sampling feeds padded rows"
        if not getattr(model, "packable", False):
            return False, f"the {model.config.model} model's parts read one text per row"
        return True, None

    def _train_state(self, epochs_completed: int, batches_done: int, saved_by: str = "stop") -> dict:
        """saved_by: what kept it (stop, periodic, best), said when a run goes on from it."""
        return {"optimizer": self.opt.state_dict(), "epoch": epochs_completed, "step": self.step,
                "batches_done": batches_done, "best": self.best, "bad_epochs": self.bad_epochs,
                "also_best": self.also_best, "trained_s": self.trained_before + self.train_s,
                "elapsed_s": self._elapsed(),
                "rng": rng_state(self.device), "saved_by": saved_by}

    def _save_periodic(self, epoch: int, batches_done: int, writer) -> dict:
        """The state a stop keeps, kept without stopping (its save time measured and said)."""
        t0 = time.monotonic()
        self.on_stop(self._train_state(epoch - 1, batches_done, "periodic"))
        self.clock.saved()
        return self._log({"event": "saved", "epoch": epoch, "step": self.step,
                          "save_s": time.monotonic() - t0}, writer)

    def _stop(self, writer, epochs_completed: int, batches_done: int, reason: str) -> dict:
        """Keep where the run stands (rank 0 saves) and say so."""
        if self.main and self.on_stop:
            self.on_stop(self._train_state(epochs_completed, batches_done))
        return self._log({"event": "stopped", "epoch": epochs_completed + 1 if batches_done
                          else epochs_completed, "step": self.step, "saved": bool(self.on_stop),
                          "reason": reason}, writer)

    def _run(self) -> Iterator[dict]:
        from torch.utils.tensorboard import SummaryWriter
        cfg = self.cfg
        self._setup()
        writer = SummaryWriter(str(self.run_dir / "tb")) if self.main else None
        self.t_start, self.train_s, self.eval_s = time.time(), 0.0, None
        self.steps, self.t_mark = eta.StepTimes(), time.time()   # the recent step time, from t_mark
        self.clock = SaveClock(cfg.save_every_minutes if self.on_stop else 0, saved=bool(self.resume))
        resumed = {"resumed_from": self.resume.get("saved_by", "save"), "first_batch": self.skip} \
            if self.resume else {}
        yield self._log({"event": "start", "epochs": self.epochs, "steps_per_epoch": self.steps_per_epoch,
                         "first_epoch": self.epoch_done + 1, "first_step": self.step, **resumed,
                         "elapsed_before": self.elapsed_before,
                         "trainable_params": sum(p.numel() for p in self.params),
                         "device": str(self.device), "device_name": self.device_name,
                         "precision": self.precision, "compiled": cfg.compile,
                         "packed": self.packed, "unpacked_why": self.unpacked_why,
                         "unit": self.task.unit, "peak_flops": self.peak, "processes": self.world}, writer)
        failed, self.epoch_now = False, self.epoch_done + 1
        try:
            for epoch in range(self.epoch_done + 1, self.epochs + 1):
                with heartbeat.phase(self._doing, lambda: self.progress(self.epoch_now, "training")):
                    if (yield from self._epoch(epoch, writer)):
                        return                                  # stopped now, and saved
                    ended = yield from self._epoch_end(epoch, writer)
                if ended == "stopped":
                    return
                if ended == "early" or self.budget_spent:
                    break
            yield self._log(self._done(), writer)
        except BaseException:          # an error, or the consumer closing the run (GeneratorExit)
            failed = True
            raise
        finally:
            if writer is not None:
                writer.close()
            self._leave_group(failed)

    def _leave_group(self, failed: bool) -> None:
        """Leave torchrun's process group, the DDP wrapper dropped first: it holds the group, and
        a group still alive at interpreter exit tears down gloo's threads mid-flight (one rank in a
        few then died of "terminate called without an active exception")."""
        if distributed.launched():
            self.stepper = self.model
            gc.collect()
        distributed.teardown(together=not failed)

    def _elapsed(self) -> float:
        """Seconds the job has run, the segments before a resume included."""
        return self.elapsed_before + time.time() - self.t_start

    def _eta(self) -> float:
        """Seconds left, from the recent step time and the evaluations still to come (lab.training.eta)."""
        cfg, left = self.cfg, self.total_steps - self.step
        per_step = self.steps.per_step
        if cfg.max_minutes is not None and self.steps.count:     # the steps the time budget allows
            left = min(left, math.ceil(max(self._time_left(), 0) / max(per_step, 1e-9)))
        evals = eta.evals_left(self.step, left, self.steps_per_epoch, cfg.eval_every)
        return eta.eta_s(per_step, left, evals, self.eval_s, len(self.task.dev_items) / cfg.batch_size)

    def _doing(self) -> str:
        """What a heartbeat says while training: the step under way and how long steps take."""
        return progress.step_text(self.step + 1, self.total_steps, self.steps.per_step)

    def _forcing(self) -> dict:
        """Scheduled sampling's teacher-forcing probability at this step, when it is on."""
        if self.task.teacher_forcing is None:
            return {}
        return {"teacher_forcing": self.task.teacher_forcing(self.step, self.total_steps)}

    def _time_left(self) -> float:
        return self.cfg.max_minutes * 60 - self.trained_before - self.train_s

    def _spent(self) -> str | None:
        """Which budget the steps so far have used up (max_steps, max_minutes), if any. Rank 0's
        clock decides the time budget for every process."""
        cfg = self.cfg
        if cfg.max_steps is not None and self.step >= cfg.max_steps:
            return f"max_steps={cfg.max_steps}"
        if cfg.max_minutes is not None and distributed.broadcast(
                int(self.main and self._time_left() <= 0), self.device):
            return f"max_minutes={cfg.max_minutes:g}"
        return None

    def _rates(self, tokens: int, flop: float, seconds: float) -> dict:
        """Real tokens per second and MFU over a stretch of training (all processes together);
        nothing before its first step."""
        if not tokens:
            return {}
        seconds = max(seconds, 1e-9)
        return {"tokens_per_s": tokens / seconds, "packed": self.packed,
                "mfu": flops.mfu(flop, seconds, self.peak, self.world)}

    def progress(self, epoch: int, phase: str, **more) -> dict:
        return {"event": "progress", "phase": phase, "epoch": epoch, "step": self.step,
                "total_steps": self.total_steps, "elapsed_s": self._elapsed(),
                "eta_s": self._eta(), **self.clock.said(), **more}

    def _epoch(self, epoch: int, writer):
        """Train one epoch (the batches after `skip` of it, when resuming mid-epoch); returns True
        when a stop-now request ended the run. Besides the loss every log_every steps, a progress
        line at least every few seconds, whatever the step rate."""
        cfg, spe = self.cfg, self.steps_per_epoch
        self.model.train()
        g = torch.Generator().manual_seed((cfg.seed * 1000 + epoch) % 2 ** 64)    # torch's range
        skip, self.skip, self.epoch_now = self.skip, 0, epoch
        run_loss, run_n, tokens, flop = 0.0, 0, 0, 0.0
        t_log = t_said = self.t_mark = time.time()    # step times leave out evaluations and saves
        for i, batch in enumerate(self.task.batches(g)):
            if i < skip:
                continue
            if self._stop_code() == STOP_NOW:
                yield self._stop(writer, epoch - 1, i, f"stopped at step {self.step}, within epoch {epoch}")
                return True
            loss, n_tokens = self._train_step(batch)
            run_loss += loss; run_n += 1; tokens += n_tokens
            flop += n_tokens * self.flops_per_token(batch.input_ids.size(1))
            if self.step % cfg.log_every == 0 or self.step % spe == 0:
                rates = self._rates(tokens, flop, time.time() - t_log)
                yield self._log(self._step_record(epoch, run_loss / run_n, rates, self._forcing()), writer)
                run_loss, run_n, tokens, flop, t_log, t_said = 0.0, 0, 0, 0.0, time.time(), time.time()
            elif time.time() - t_said >= PROGRESS_EVERY_S:
                yield self._log(self.progress(epoch, "training",
                                               **self._rates(tokens, flop, time.time() - t_log)), writer)
                t_said = time.time()
            self.budget_spent = self._spent()
            if self.budget_spent:
                if run_n:       # the loss since the last logged step, then the epoch's evaluation
                    rates = self._rates(tokens, flop, time.time() - t_log)
                    yield self._log(self._step_record(epoch, run_loss / run_n, rates, eta_s=0.0), writer)
                break
            if cfg.eval_every and self.step % cfg.eval_every == 0 and self.step % spe and self.main:
                yield from self._mid_epoch_eval(epoch, writer)
                t_said = self.t_mark = time.time()
            if self.main and self.clock.due():
                yield self._save_periodic(epoch, i + 1, writer)
                self.t_mark = time.time()
        return False

    def _step_record(self, epoch: int, train_loss: float, rates: dict, forcing: dict | None = None,
                     eta_s: float | None = None) -> dict:
        """A step event: the mean loss since the last one, the rates over that stretch, where the
        run stands (eta_s: the estimate, unless given)."""
        return {"event": "step", "epoch": epoch, "step": self.step, "total_steps": self.total_steps,
                "train_loss": train_loss, **rates, **(forcing or {}), **self.clock.said(),
                "elapsed_s": self._elapsed(), "eta_s": self._eta() if eta_s is None else eta_s}

    def _train_step(self, batch) -> tuple[float, int]:
        """One optimizer step on a batch: (its loss, averaged over processes; its real tokens)."""
        t0 = time.time()
        if self.packed and self.world == 1:     # packed here, before the copy to the device (its
            batch = pack(batch)                 # slicing is many small copies); under DDP each
        batch = batch.to(self.device)           # process packs its rows after the split
        lr = scheduled_lr(self.cfg, self.step, self.total_steps, self.steps_per_epoch)
        for group in self.opt.param_groups:
            group["lr"] = lr
        if self.task.teacher_forcing is not None:
            with autocast(self.device, self.precision):
                batch = scheduled_inputs(self.model, batch,
                                         self.task.teacher_forcing(self.step, self.total_steps))
        with autocast(self.device, self.precision):
            loss = shard_loss(self.stepper, batch, self.rank, self.world, self.task.loss, self.packed)
        self.opt.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.grad_clip:
            torch.nn.utils.clip_grad_norm_(self.params, self.cfg.grad_clip)
        self.opt.step()
        self.step += 1
        store.fault("train.step")
        value = distributed.mean(loss.item(), self.device)
        self.train_s += time.time() - t0
        self.steps.add(time.time() - self.t_mark)     # wall time since the last step: batching too
        self.t_mark = time.time()
        return value, int(batch.loss_mask.sum())

    def _mid_epoch_eval(self, epoch: int, writer):
        """An extra dev evaluation inside the epoch (eval_every): it draws the curve, saves nothing."""
        yield self._log(self.progress(epoch, "evaluating", dev_items=len(self.task.dev_items),
                                      unit=self.task.unit), writer)
        record = self._evaluate(epoch, self.step)
        if record is not None:
            yield self._log(record | {"total_steps": self.total_steps, "mid_epoch": True}, writer)

    def _epoch_end(self, epoch: int, writer):
        """Rank 0 scores dev and saves the checkpoint when it improved; then a stop request or
        early stopping may end the run. Returns "stopped", "early" or None (go on). An evaluation
        cut short by a stop-now request is not counted (resume redoes it)."""
        cfg, evaluated, record = self.cfg, True, {"event": "eval", "epoch": epoch, "step": self.step}
        if self.main:
            yield self._log(self.progress(epoch, "evaluating", dev_items=len(self.task.dev_items),
                                      unit=self.task.unit), writer)
            scored = self._evaluate(epoch, self.step)
            if scored is None:
                evaluated, record = False, {"event": "eval_aborted", "epoch": epoch, "step": self.step}
            else:
                record = scored | {"total_steps": self.total_steps}
                yield from self._keep_best(epoch, record, writer)
                if epoch in self.keep_epochs and self.on_epoch:
                    record["kept"] = True
                    self.on_epoch(record)
        early = int(self.main and evaluated and cfg.early_stop != "none" and self.bad_epochs >= cfg.patience)
        if self.main:
            yield self._log(record, writer)
        if self._stop_code(force=not evaluated) != GO:       # a cut evaluation means a stop
            yield self._stop_after_epoch(epoch, record, evaluated, writer)
            return "stopped"
        if distributed.broadcast(early, self.device):
            yield self._log({"event": "early_stop", "epoch": epoch, "step": self.step,
                             "reason": f"dev {cfg.early_stop} did not improve for "
                                       f"{self.bad_epochs} epoch(s)"}, writer)
            return "early"
        return None

    def _keep_best(self, epoch: int, record: dict, writer):
        """Save the checkpoint when dev improved (marking the record best), count the epochs
        without improvement, and keep the best by the second metric when there is one."""
        if self.best is None or self._better(record, self.best):
            self.best, self.bad_epochs, record["best"] = record, 0, True
            yield self._log(self.progress(epoch, "saving"), writer)
            if self.on_best:
                self.on_best(record, self._train_state(epoch, 0, "best"))
                self.clock.saved()
        else:
            self.bad_epochs += 1
        also = self.also_by
        if also is not None and also.score in record and (
                self.also_best is None or also.better(record, self.also_best)):
            self.also_best, record["also_best"] = dict(record), also.name
            if self.on_also_best:
                self.on_also_best(record, self._train_state(epoch, 0, "best"))

    def _stop_after_epoch(self, epoch: int, record: dict, evaluated: bool, writer) -> dict:
        """A stop asked for at the epoch's end: the checkpoint just saved is where the run stands,
        or keep where it stands now (before the epoch's evaluation, when that was cut short)."""
        if record.get("best"):
            return self._log({"event": "stopped", "epoch": epoch, "step": self.step, "saved": True,
                              "reason": "stopped after the epoch's checkpoint"}, writer)
        done_epochs, pending = (epoch, 0) if evaluated else (epoch - 1, self.steps_per_epoch)
        return self._stop(writer, done_epochs, pending, "stopped after the epoch"
                          if evaluated else "stopped during the epoch's evaluation")

    def _evaluate(self, epoch: int, step: int) -> dict | None:
        """Dev scores, or None when a stop-now request cut the evaluation short."""
        t0, self.eval_batches, dev = time.time(), 0, len(self.task.dev_items)
        try:
            with autocast(self.device, self.precision), heartbeat.phase(
                    lambda: f"evaluating {dev:,} dev {self.task.unit}: {self.eval_batches} batches done"):
                scores = self.task.evaluate(self.model, self.abort_eval)
        except Aborted:
            return None
        finally:
            self.model.train()
        record = {"event": "eval", "epoch": epoch, "step": step, **scores}
        record["eval_s"] = self.eval_s = time.time() - t0
        record["shown"] = [m.shown() for m in tasks.metrics(self.cfg.task).values()
                           if m.score != "dev_perplexity"]      # the task's own scores, by name
        return record

    def _done(self) -> dict:
        """The run's last event: the evaluation kept, by what, and the budget that ended it."""
        budget = {"budget": self.budget_spent} if self.budget_spent else {}
        return {"event": "done", "step": self.step, "best_epoch": self.best and self.best["epoch"],
                "best_dev_perplexity": self.best and self.best["dev_perplexity"],
                "elapsed_s": self._elapsed(), **budget, **self._kept_by()}

    def _kept_by(self) -> dict:
        """The done event's word on the dev score the kept checkpoint was chosen by (where that is
        not perplexity): how it is shown and the kept evaluation's value of it."""
        m, best = self.best_by, self.best
        if not best or self.cfg.early_stop == "none" or m.score == "dev_perplexity" or m.score not in best:
            return {}
        return {"kept_by": m.shown(), **{k: best[k] for k in (m.score, m.count) if k in best}}

    def _better(self, record: dict, best: dict) -> bool:
        """Whether `record` is the one to keep over `best`: by the kept metric, or (early_stop
        none) always, the last evaluation being the one kept."""
        if self.cfg.early_stop == "none":
            return True
        if self.best_by.score in record and self.best_by.score in best:
            return self.best_by.better(record, best)
        return record["dev_perplexity"] < best["dev_perplexity"]    # every task's dev scores have it
