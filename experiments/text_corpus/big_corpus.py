"""A corpus larger than the memory a run should need: write one of --gigabytes (MSCOCO's training
captions, shuffled and repeated, one a line), import it with `python -m lab data import`, then train
the tiny preset on it for --steps steps with `python -m lab train` (the first run tokenizes it with
the batched map into the store's cache). Each command runs in its own process, sampled every half
second from /proc: its peak anonymous memory (RssAnon: what the process itself holds) and its peak
file-backed memory (RssFile: pages of memory-mapped files it has touched, which the kernel drops
under pressure), and its wall time. The corpus, the store and the cache go under --dir.

Run: .venv/bin/python experiments/text_corpus/big_corpus.py --dir /somewhere/with/8GB [--gigabytes 2]
[--steps 0: the import alone]"""
import argparse
import json
import random
import shutil
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from lab.inputs import data  # noqa: E402


def write_corpus(path: Path, gigabytes: float) -> tuple[int, int]:
    caps = data.load_split("train")
    rng, size, lines = random.Random(0), 0, 0
    with path.open("w", encoding="utf-8") as f:
        while size < gigabytes * 1e9:
            batch = caps[:]
            rng.shuffle(batch)
            chunk = "\n".join(batch) + "\n"
            f.write(chunk)
            size += len(chunk.encode())
            lines += len(batch)
    return size, lines


def _kb(status: str, key: str) -> int:
    for line in status.splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1])
    return 0


def measured(cmd: list[str]) -> dict:
    """Run cmd; its wall time and peak RssAnon / RssFile (MB) from /proc, sampled every 0.5 s."""
    t0 = time.time()
    proc = subprocess.Popen(cmd, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    anon = file = 0
    while proc.poll() is None:
        try:
            status = Path(f"/proc/{proc.pid}/status").read_text()
            anon, file = max(anon, _kb(status, "RssAnon")), max(file, _kb(status, "RssFile"))
        except OSError:
            pass
        time.sleep(0.5)
    out = proc.stdout.read()
    return {"command": " ".join(cmd[1:]), "exit": proc.returncode, "wall_s": round(time.time() - t0, 1),
            "peak_rss_anon_mb": round(anon / 1024), "peak_rss_file_mb": round(file / 1024),
            "last_lines": out.strip().splitlines()[-3:]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--gigabytes", type=float, default=2.0)
    ap.add_argument("--steps", type=int, default=100)
    args = ap.parse_args()
    work = Path(args.dir)
    work.mkdir(parents=True, exist_ok=True)
    corpus, store = work / "big.txt", work / "store"
    shutil.rmtree(store, ignore_errors=True)
    t0 = time.time()
    size, lines = write_corpus(corpus, args.gigabytes)
    print(json.dumps({"corpus_bytes": size, "lines": lines, "write_s": round(time.time() - t0, 1)}))
    py = sys.executable
    print(json.dumps(measured([py, "-m", "lab", "--store", str(store), "data", "import", str(corpus),
                               "--name", "big", "--dev-fraction", "0.001"])))
    for name in ("big-model", "big-model-2") if args.steps else ():      # --steps 0: the import alone
        print(json.dumps(measured([py, "-m", "lab", "--store", str(store), "train", "--preset", "tiny",
                                   "--name", name, "--set", "task=text", "--set", "task.dataset=big",
                                   "--set", f"max_steps={args.steps}", "--set", "max_dev=500",
                                   "--set", "max_train=", "--set", "save_every_minutes=0"])))
    disk = sum(f.stat().st_size for f in store.rglob("*") if f.is_file())
    print(json.dumps({"store_bytes_on_disk": disk}))


if __name__ == "__main__":
    main()
