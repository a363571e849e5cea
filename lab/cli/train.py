"""`train`, `jobs`, `worker` (and the hidden `run-job` and `job-starter` a worker starts): training a model now or
as a background job, and serving the queued jobs."""
from __future__ import annotations

import argparse
import time

from lab.cli.output import print_events, print_json, run_command
from lab.config import ConfigError, ModelConfig, TrainConfig, split_overrides
from lab.errors import read_json
from lab.inputs import tokenizers
from lab.presets import configs, description, names as preset_names
from lab.storage import checkpoints
from lab.storage.checkpoints import store_dir
from lab.training import runs
from lab.worker import jobs, starter
from lab.worker.jobs import Worker, run_job


def _read_config_file(path: str) -> dict:
    if "\0" in path:
        raise ConfigError("--config: the path holds a NUL character")
    try:
        doc = read_json(path, ConfigError, missing=f"{path}: no such file")
    except ConfigError as e:
        raise ConfigError(f"--config {e}") from None
    if not isinstance(doc, dict) or not set(doc) <= {"model", "train"} \
            or not all(isinstance(v, dict) for v in doc.values()):
        raise ConfigError(f"--config {path}: expected a JSON object with 'model' and/or 'train' "
                          f"objects (the keys of `python -m lab plugins`' configs)")
    return doc


def cmd_train(args):
    if args.resume:
        return _resume_training(args)
    doc = _read_config_file(args.config) if args.config else None
    model_cfg, train_cfg, changed = configs(args.preset, args.set, doc)
    if args.parent and changed:
        raise ConfigError(f"--parent fine-tunes a stored model, whose architecture is fixed; "
                          f"cannot --set {', '.join(changed)}")
    name = args.name or f"{args.preset or 'model'}-{time.strftime('%Y%m%d-%H%M%S')}"
    print_events(runs.train(name, None if args.parent else model_cfg, train_cfg, parent=args.parent,
                            preset=args.preset, data_dir=args.data_dir, store=args.store), name, args.json)


def _resume_training(args):
    """Go on with a checkpoint's run: its saved training settings, then any --set."""
    clash = [flag for flag, v in (("--preset", args.preset), ("--config", args.config),
                                  ("--parent", args.parent), ("--name", args.name)) if v]
    if clash:
        raise ConfigError(f"--resume goes on with the checkpoint's own run; drop {', '.join(clash)} "
                          f"(change training settings with --set, e.g. --set epochs=30)")
    m_over, t_over = split_overrides(args.set or [], ModelConfig, TrainConfig)
    if m_over:
        raise ConfigError(f"--resume cannot change the model's architecture ({', '.join(sorted(m_over))})")
    checkpoints.check_name(args.resume)
    _, folder = runs.newest_save(args.resume, args.store)
    meta = checkpoints.read_config(folder)[1]
    train_cfg = TrainConfig.from_dict(meta.get("train") or {}).replace(**t_over)
    print_events(runs.train(args.resume, None, train_cfg, preset=meta.get("preset"), resume=True,
                            data_dir=args.data_dir, store=args.store), args.resume, args.json)


def cmd_worker(args):
    worker = Worker(args.store, slots=args.slots, data_dir=args.data_dir, nproc=args.nproc,
                    exit_with_parent=args.exit_with_parent, executor=args.executor,
                    entry=run_job_here, warm=warm_for_jobs)
    print(f"worker: serving jobs from {store_dir(args.store)} ({args.slots} at a time"
          + (f", each under torchrun with {args.nproc} processes" if args.nproc > 1 else "")
          + (", each a Ray task" if worker.executor == "ray" else "") + ")", flush=True)
    worker.serve()


def cmd_run_job(args):
    status = run_job(args.job_id, args.store)
    print(f"job {args.job_id}: {status}")


def cmd_job_starter(args):
    starter.serve(args.fd, run_job_here, warm_for_jobs)


def run_job_here(job_id: int) -> int:
    """`run-job ID` in a process the worker forked (lab/worker/forked.py): the same command and
    the same words on error as `python -m lab run-job ID`; the store is the one its environment
    names, as for that command."""
    return run_command(cmd_run_job, argparse.Namespace(job_id=job_id, store=None))


def warm_for_jobs() -> None:
    """What a training job loads on its way to its first step, loaded once by `lab worker`
    before it forks its first job: torch's compiler stack (torch's optimizers import it at their
    first step, in eager runs too) and GPT-2's tokenizer (what it saves:
    benchmarks/worker_jobs.py). Neither starts a thread: the worker stays forkable."""
    import torch._dynamo  # noqa: F401
    tokenizers.gpt2()


def cmd_jobs(args):
    if args.action == "list":
        rows = jobs.list_jobs(args.store)
        if args.json:
            print_json(rows)
        for j in rows if not args.json else []:
            p = j["progress"]
            where = f"epoch {p.get('epoch', '-')} step {p.get('step', '-')}" if p else ""
            print(f"{j['id']:>4} {j['name']:<24} {j['status']:<12} {where} {j['error'] or ''}")
    elif args.action == "submit":
        model_cfg, train_cfg, _ = configs(args.preset, args.set)
        job_id = jobs.submit(args.name, None if args.parent else model_cfg, train_cfg,
                             parent=args.parent, preset=args.preset, store=args.store)
        print(f"queued job {job_id}")
    elif args.action == "stop":
        job = jobs.request_stop(args.job_id, args.mode, args.store)
        print(f"job {job['id']}: {job['status']}, stop={job['stop']}")
    elif args.action == "resume":
        new = jobs.resume(args.job_id, args.store)
        print(f"queued job {new}{jobs.resumes_from(new, args.store)}")


def _presets_epilog() -> str:
    return "presets:\n" + "\n".join(f"  {k:<22} {description(k)}" for k in preset_names()) + \
        "\n\nevery setting: python -m lab settings (or docs/configuration.md)"


def _parser_train(sub) -> None:
    p = sub.add_parser("train", help="train from scratch or fine-tune a checkpoint",
                       epilog=_presets_epilog(), formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--preset", help="a preset's name (listed below)")
    p.add_argument("--config", help="JSON file with 'model' and/or 'train' objects")
    p.add_argument("--set", action="append", metavar="KEY=VALUE",
                   help="override one field, or a plugin's setting as KIND.SETTING=VALUE")
    p.add_argument("--name", help="checkpoint name (default: preset and time)")
    p.add_argument("--parent", help="fine-tune this stored checkpoint instead of a new model")
    p.add_argument("--resume", metavar="NAME", help="go on with this checkpoint's run where it "
                   "stopped (optimizer state, epoch, best score); --set epochs=N to train longer")
    p.add_argument("--data-dir", help="caption corpus (default $LAB_DATA_DIR or ../shared/data/...)")
    p.add_argument("--json", action="store_true", help="print one JSON event per line")
    p.set_defaults(fn=cmd_train)


def _parser_worker(sub) -> None:
    p = sub.add_parser("worker", help="run queued training jobs (on CUDA when present)")
    p.add_argument("--slots", type=int, default=1, help="jobs run at the same time")
    p.add_argument("--nproc", type=int, default=1, help="processes per job under torchrun (DDP): "
                   "the GPUs one job shares; 1 runs it in one plain process")
    p.add_argument("--data-dir")
    p.add_argument("--executor", choices=["local", "ray"],
                   help="local: child processes here (default); ray: each job a Ray task on the "
                        "cluster RAY_ADDRESS names, or a local Ray instance (default $LAB_EXECUTOR)")
    p.add_argument("--exit-with-parent", dest="exit_with_parent", action="store_true",
                   help=argparse.SUPPRESS)     # app.py's worker: ends (cleanly) when the app is gone
    p.set_defaults(fn=cmd_worker)


def _parser_run_job(sub) -> None:
    p = sub.add_parser("run-job")       # no help: the worker starts it; --help leaves it out
    p.add_argument("job_id", type=int)
    p.set_defaults(fn=cmd_run_job)


def _parser_job_starter(sub) -> None:
    p = sub.add_parser("job-starter")     # no help: a worker inside another program starts it
    p.add_argument("fd", type=int)
    p.set_defaults(fn=cmd_job_starter)


def _parser_jobs(sub) -> None:
    p = sub.add_parser("jobs", help="list, submit, stop or resume background jobs")
    p.add_argument("action", choices=["list", "submit", "stop", "resume"])
    p.add_argument("job_id", type=int, nargs="?")
    p.add_argument("--name", help="submit: checkpoint name")
    p.add_argument("--preset")
    p.add_argument("--parent")
    p.add_argument("--set", action="append", metavar="KEY=VALUE")
    p.add_argument("--mode", default="now", choices=["now", "after_checkpoint"])
    p.add_argument("--json", action="store_true")
    p.set_defaults(fn=cmd_jobs)


PARSERS = {"train": _parser_train, "worker": _parser_worker, "run-job": _parser_run_job,
           "job-starter": _parser_job_starter, "jobs": _parser_jobs}
