"""What periodic saves cost: the same run trained side by side with a resumable save after every
step (save_every_minutes tiny: the worst case) and with none (save_every_minutes=0), alternating,
in one process and one store on the disk a store would use. Each save is the trainer's own: the
weights, Adam's moments, the random states and the place in the epoch, written to a temporary
folder, flushed to disk and renamed into place, timed inside the trainer (the `saved` events).

Prints, per round, the wall time of the training steps with and without saves, the overhead as a
share of training time, and the seconds one save takes (timed, and the runs' difference per save);
then what one save per `save_every_minutes` of training (the default, 10) costs: seconds per save
/ (minutes x 60 s), from the mean timed save and from the worst figure of either kind.

Run: .venv/bin/python benchmarks/save_cost.py [--preset tfmr-scratch] [--steps 12] [--rounds 2]"""
import argparse
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.common import header, report  # noqa: E402
from lab.config import TrainConfig  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.training import runs  # noqa: E402

EVERY_STEP = 1e-9           # minutes: a save is due after every step


def one_run(preset: str, steps: int, every: float, name: str, store: str) -> tuple[float, list[float]]:
    """(wall seconds from the start of training to its last step, each save's seconds). The last
    step's line comes before its own save would, so `steps` steps carry steps - 1 saves."""
    model_cfg, train_cfg = get(preset)
    cfg = train_cfg.replace(max_steps=steps, max_train=steps * train_cfg.batch_size,
                            max_dev=32, log_every=10 ** 6, save_every_minutes=every)
    events = list(runs.train(name, model_cfg, cfg, store=store))
    last = [e for e in events if e["event"] == "step"][-1]
    assert last["step"] == steps, last
    return last["elapsed_s"], [e["save_s"] for e in events if e["event"] == "saved"]


def megabytes(folder: Path) -> float:
    return sum(f.stat().st_size for f in folder.rglob("*") if f.is_file()) / 1e6


def rounds(args, store: str) -> tuple[list[float], list[float]]:
    """Each round's pair of runs, printed; (every save's own seconds, each round's extra seconds
    per save: the runs' difference over the saves, which also counts what a save leaves behind,
    such as the disk still writing and caches emptied, while the next steps run)."""
    timed, by_difference = [], []
    for r in range(args.rounds):
        without, _ = one_run(args.preset, args.steps, 0, f"never-{r}", store)
        with_saves, saves = one_run(args.preset, args.steps, EVERY_STEP, f"every-{r}", store)
        timed += saves
        by_difference.append((with_saves - without) / len(saves))
        report(round=r + 1, train_s_without_saves=round(without, 2),
               train_s_with_a_save_every_step=round(with_saves, 2), saves=len(saves),
               seconds_per_save_timed=round(statistics.mean(saves), 3),
               seconds_per_save_by_difference=round(by_difference[-1], 3),
               seconds_per_step_without_saves=round(without / args.steps, 3),
               overhead_percent=round(100 * (with_saves - without) / without, 1))
    return timed, by_difference


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tfmr-scratch", help="the model and training settings")
    ap.add_argument("--steps", type=int, default=12, help="training steps in each run")
    ap.add_argument("--rounds", type=int, default=2, help="pairs of runs, alternating")
    ap.add_argument("--dir", default=None, help="where the runs' store goes (default: a temporary "
                                                "folder; put it on the disk your store is on)")
    args = ap.parse_args()
    interval_s = TrainConfig().save_every_minutes * 60
    header(f"periodic saves: {args.preset}, {args.steps} steps, a save after every step against none")
    with tempfile.TemporaryDirectory(dir=args.dir) as store:
        print(f"# store: {store}")
        timed, by_difference = rounds(args, store)
        size = megabytes(Path(store) / "every-0")
    worst = max(max(timed), max(by_difference))
    report(preset=args.preset, save_megabytes=round(size, 1), saves_timed=len(timed),
           seconds_per_save_timed_mean=round(statistics.mean(timed), 3),
           seconds_per_save_timed_max=round(max(timed), 3),
           seconds_per_save_by_difference=[round(d, 3) for d in by_difference],
           default_save_every_minutes=interval_s / 60,
           overhead_at_the_default_percent=round(100 * statistics.mean(timed) / interval_s, 3),
           overhead_at_the_default_worst_percent=round(100 * worst / interval_s, 3))


if __name__ == "__main__":
    main()
