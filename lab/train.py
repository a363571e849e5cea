"""The trainer: knows no Gradio and no particular model (minGPT's trainer in spirit).

`Trainer.run()` is a generator of metric dicts (`{"event": "step" | "eval" | "best" | "done", ...}`);
the CLI prints them, the job worker writes them to the ledger. Every dict also goes to
`metrics.jsonl` and TensorBoard event files in the run directory. Callbacks get the dicts too;
`on_best(record, train_state)` receives control when dev improves (the caller saves the checkpoint;
train_state holds the optimizer state and where training stands, and `resume=` takes it back).
`should_stop()` is polled every step: "now" stops at once, "after_checkpoint" (or any other true
value) after the current epoch's evaluation and checkpoint.
"""
from __future__ import annotations

import json
import math
import time
from pathlib import Path
from typing import Callable, Iterator

import torch

from lab import distributed
from lab.config import ConfigError, TrainConfig
from lab.data import Batch, assignment_loss, batches
from lab.metrics import perplexity


def pick_device(name: str) -> torch.device:
    if name == "cuda" and not torch.cuda.is_available():
        raise ConfigError("device 'cuda' was asked for but no CUDA GPU is available; use 'auto' or 'cpu'")
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


GO, STOP_NOW, STOP_AFTER = 0, 1, 2       # what rank 0 tells every rank between steps


def shard_loss(model, batch: Batch, rank: int = 0, world: int = 1) -> torch.Tensor:
    """This process's part of the batch loss. With several processes each takes rows rank::world,
    weighted by its share of the rows, so the mean over processes that DDP takes of the gradients
    is the gradient of the whole batch's assignment loss."""
    if world == 1:
        return assignment_loss(model(batch.input_ids).logits, batch)
    part = Batch(batch.input_ids[rank::world], batch.loss_mask[rank::world])
    rows = part.input_ids.size(0)
    if rows == 0:       # fewer captions than processes (a last batch): take part with weight 0
        return model(batch.input_ids[:1]).logits.sum() * 0.0
    return assignment_loss(model(part.input_ids).logits, part) * (rows * world / batch.input_ids.size(0))


def trainable_parameters(model, train_layers: str) -> list[torch.nn.Parameter]:
    """'all', or comma-separated 1-based block numbers: only those blocks train."""
    if train_layers.strip() == "all":
        return [p for p in model.parameters()]
    n = len(model.transformer.h)
    try:
        layers = [int(x) for x in train_layers.split(",") if x.strip()]
    except ValueError:
        raise ConfigError(f"train_layers must be 'all' or block numbers like '1,3', "
                          f"got {train_layers!r}") from None
    bad = [i for i in layers if not 1 <= i <= n]
    if bad or not layers:
        raise ConfigError(f"train_layers {train_layers!r}: blocks are numbered 1 to {n}")
    keep = {id(p) for i in layers for p in model.transformer.h[i - 1].parameters()}
    for p in model.parameters():
        p.requires_grad_(id(p) in keep)
    return [p for p in model.parameters() if p.requires_grad]


class Trainer:
    def __init__(self, model, train_seqs: list[list[int]], dev_seqs: list[list[int]], pad_id: int,
                 cfg: TrainConfig, run_dir: Path, on_best: Callable[[dict, dict], None] | None = None,
                 dev_bleu: Callable[[torch.nn.Module], float] | None = None,
                 should_stop: Callable[[], bool] | None = None, dev_words: list[int] | None = None,
                 resume: dict | None = None):
        self.model, self.train_seqs, self.dev_seqs, self.pad_id = model, train_seqs, dev_seqs, pad_id
        self.dev_words = dev_words      # words per dev caption: adds a per-word dev perplexity
        self.resume = resume            # a checkpoint's train state: go on where it stood
        self.cfg, self.run_dir = cfg, Path(run_dir)
        self.on_best, self.dev_bleu = on_best, dev_bleu
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

    def _stop_code(self) -> int:
        """Rank 0 asks should_stop(); every rank gets the answer."""
        asked = self.should_stop() if self.main else None
        return distributed.broadcast(STOP_NOW if asked == "now" else STOP_AFTER if asked else GO,
                                     self.device)

    def run(self) -> Iterator[dict]:
        """The events (rank 0's, under torchrun; the other ranks train silently beside it)."""
        for ev in self._run():
            if self.main:
                yield ev

    def _run(self) -> Iterator[dict]:
        from torch.utils.tensorboard import SummaryWriter
        cfg = self.cfg
        rank, world, self.device = distributed.setup(self.device)
        self.main = rank == 0
        model = self.model.to(self.device)
        params = trainable_parameters(model, cfg.train_layers)
        stepper = model
        if world > 1:
            from torch.nn.parallel import DistributedDataParallel
            stepper = DistributedDataParallel(
                model, device_ids=[self.device.index] if self.device.type == "cuda" else None)
        opt = torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay) \
            if cfg.weight_decay else torch.optim.Adam(params, lr=cfg.lr)
        writer = SummaryWriter(str(self.run_dir / "tb")) if self.main else None
        steps_per_epoch = math.ceil(len(self.train_seqs) / cfg.batch_size)
        total_steps = steps_per_epoch * cfg.epochs
        first_epoch, step, best, bad_epochs = 1, 0, None, 0
        if self.resume:
            try:
                opt.load_state_dict(self.resume["optimizer"])
            except (ValueError, KeyError) as e:
                raise ConfigError(f"the saved optimizer state does not fit this run ({e}); resume "
                                  f"with the training settings it was saved with") from None
            first_epoch, step = self.resume["epoch"] + 1, self.resume["step"]
            best, bad_epochs = self.resume["best"], self.resume.get("bad_epochs", 0)
        first_step, t_start = step, time.time()
        yield self._log({"event": "start", "epochs": cfg.epochs, "steps_per_epoch": steps_per_epoch,
                         "first_epoch": first_epoch, "trainable_params": sum(p.numel() for p in params),
                         "device": str(self.device), "processes": world}, writer)
        try:
            for epoch in range(first_epoch, cfg.epochs + 1):
                model.train()
                g = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
                run_loss, run_n, tokens, t_log = 0.0, 0, 0, time.time()
                for batch in batches(self.train_seqs, cfg.batch_size, self.pad_id, cfg.shuffle, g):
                    if self._stop_code() == STOP_NOW:
                        yield self._log({"event": "stopped", "epoch": epoch, "step": step}, writer)
                        return
                    batch = batch.to(self.device)
                    loss = shard_loss(stepper, batch, rank, world)
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    if cfg.grad_clip:
                        torch.nn.utils.clip_grad_norm_(params, cfg.grad_clip)
                    opt.step()
                    step += 1
                    run_loss += distributed.mean(loss.item(), self.device); run_n += 1
                    tokens += int(batch.loss_mask.sum())
                    if step % cfg.log_every == 0 or step % steps_per_epoch == 0:
                        elapsed = time.time() - t_start
                        yield self._log({
                            "event": "step", "epoch": epoch, "step": step, "total_steps": total_steps,
                            "train_loss": run_loss / run_n,
                            "tokens_per_s": tokens / max(time.time() - t_log, 1e-9),
                            "elapsed_s": elapsed,
                            "eta_s": elapsed / (step - first_step) * (total_steps - step)}, writer)
                        run_loss, run_n, tokens, t_log = 0.0, 0, 0, time.time()
                    if cfg.eval_every and step % cfg.eval_every == 0 and step % steps_per_epoch \
                            and self.main:
                        yield self._log(self._evaluate(epoch, step) | {"total_steps": total_steps,
                                                                       "mid_epoch": True}, writer)
                record, best, bad_epochs = self._end_of_epoch(epoch, step, total_steps, best,
                                                              bad_epochs, opt)
                early = int(self.main and cfg.early_stop != "none" and bad_epochs >= cfg.patience)
                yield self._log(record, writer)
                if self._stop_code() != GO:
                    yield self._log({"event": "stopped", "epoch": epoch, "step": step,
                                     "reason": "stopped after the epoch's checkpoint"}, writer)
                    return
                if distributed.broadcast(early, self.device):
                    yield self._log({"event": "early_stop", "epoch": epoch, "step": step,
                                     "reason": f"dev {cfg.early_stop} did not improve for "
                                               f"{bad_epochs} epoch(s)"}, writer)
                    break
            yield self._log({"event": "done", "step": step, "best_epoch": best and best["epoch"],
                             "best_dev_perplexity": best and best["dev_perplexity"],
                             "elapsed_s": time.time() - t_start}, writer)
        finally:
            if writer is not None:
                writer.close()

    def _end_of_epoch(self, epoch, step, total_steps, best, bad_epochs, opt):
        """Rank 0 scores dev and saves the checkpoint when it improved: (record, best, bad epochs).
        Other ranks return a bare record; rank 0's decisions reach them by broadcast."""
        if not self.main:
            return {"event": "eval", "epoch": epoch, "step": step}, best, bad_epochs
        record = self._evaluate(epoch, step) | {"total_steps": total_steps}
        if best is not None and not self._better(record, best):
            return record, best, bad_epochs + 1
        if self.on_best:
            self.on_best(record, {"optimizer": opt.state_dict(), "epoch": epoch, "step": step,
                                  "best": record, "bad_epochs": 0})
        return record | {"best": True}, record, 0

    def _evaluate(self, epoch: int, step: int) -> dict:
        t0 = time.time()
        ppl = perplexity(self.model, self.dev_seqs, self.pad_id, self.cfg.eval_batch_size, self.device,
                         n_words=self.dev_words)
        record = {"event": "eval", "epoch": epoch, "step": step, "dev_loss": ppl["loss"],
                  "dev_perplexity": ppl["perplexity"], "dev_token_perplexity": ppl["token_perplexity"]}
        if "word_perplexity" in ppl:
            record["dev_word_perplexity"] = ppl["word_perplexity"]
        if self.cfg.early_stop == "bleu" and self.dev_bleu is not None:
            record["dev_harmonic_bleu"] = self.dev_bleu(self.model)
        record["eval_s"] = time.time() - t0
        return record

    def _better(self, record: dict, best: dict) -> bool:
        if self.cfg.early_stop == "bleu" and "dev_harmonic_bleu" in record:
            return record["dev_harmonic_bleu"] > best["dev_harmonic_bleu"]
        return record["dev_perplexity"] < best["dev_perplexity"]


def _fmt_time(seconds: float) -> str:
    seconds = int(seconds)
    h, m, s = seconds // 3600, seconds // 60 % 60, seconds % 60
    return f"{h}h{m:02d}m" if h else f"{m}m{s:02d}s"


def format_event(ev: dict, name: str = "") -> str:
    """One human line per trainer event: progress with ETA, dev scores, the end."""
    e = ev["event"]
    if e == "data":
        return (f"{ev['train_captions']} train / {ev['dev_captions']} dev captions, "
                f"{ev['params'] / 1e6:.1f}M parameters; run dir {ev['run_dir']}")
    if e == "start":
        procs = f" x {ev['processes']} processes (torchrun)" if ev.get("processes", 1) > 1 else ""
        return f"training on {ev['device']}{procs}: {ev['epochs']} epochs x {ev['steps_per_epoch']} steps"
    if e == "step":
        pct = 100 * ev["step"] / ev["total_steps"]
        return (f"epoch {ev['epoch']} step {ev['step']}/{ev['total_steps']} ({pct:.1f}%) "
                f"loss {ev['train_loss']:.4f} {ev['tokens_per_s']:.0f} tok/s "
                f"elapsed {_fmt_time(ev['elapsed_s'])} ETA {_fmt_time(ev['eta_s'])}")
    if e == "eval":
        return (f"{'step ' + str(ev['step']) if ev.get('mid_epoch') else 'epoch ' + str(ev['epoch'])}: "
                f"dev perplexity {ev['dev_perplexity']:.3f} "
                f"(token-weighted {ev['dev_token_perplexity']:.3f}"
                + (f", per word {ev['dev_word_perplexity']:.3f}" if "dev_word_perplexity" in ev else "") + ")"
                + (f" dev harmonic BLEU {ev['dev_harmonic_bleu']:.4f}" if "dev_harmonic_bleu" in ev else "")
                + (" best, saved" if ev.get("best") else ""))
    if e == "early_stop":
        return f"early stop after epoch {ev['epoch']}: {ev['reason']}"
    if e == "stopped":
        return f"stopped at epoch {ev['epoch']}, step {ev['step']}" + (f": {ev['reason']}" if "reason" in ev else "")
    if e == "done":
        ppl = ev["best_dev_perplexity"]
        return (f"done: best epoch {ev['best_epoch']}, dev perplexity "
                f"{ppl:.3f}; checkpoint {name!r}" if ppl is not None else "done")
    return json.dumps(ev)
