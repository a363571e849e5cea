"""The text import's memory step by step: import a corpus with each step of
plugins/tasks/text/corpora.py wrapped, printing the process's RssAnon (MB) as the step starts,
its peak during the step (sampled every 0.05 s by a thread) and after it, and the step's time.
Write a corpus first (one caption a line, e.g. with big_corpus.py's write_corpus).

Run: .venv/bin/python experiments/text_corpus/import_steps.py CORPUS.txt STORE_DIR"""
import shutil
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import datasets  # noqa: E402

import plugins.tasks.text.corpora as C  # noqa: E402

PEAK = [0]


def anon() -> int:
    for line in open("/proc/self/status"):
        if line.startswith("RssAnon"):
            return int(line.split()[1]) // 1024
    return 0


def sampler():
    while True:
        PEAK[0] = max(PEAK[0], anon())
        time.sleep(0.05)


def wrapped(owner, name: str, label: str):
    f = getattr(owner, name)

    def step(*a, **k):
        PEAK[0] = before = anon()
        t = time.time()
        out = f(*a, **k)
        time.sleep(0.1)
        print(f"{label}: before {before} MB, peak {PEAK[0]} MB, after {anon()} MB, "
              f"{time.time() - t:.1f}s", flush=True)
        return out
    setattr(owner, name, step)


def main():
    corpus, store = Path(sys.argv[1]), Path(sys.argv[2])
    threading.Thread(target=sampler, daemon=True).start()
    for name in ("_check_file", "_load_file", "_read", "_cut", "_describe"):
        wrapped(C, name, name)
    wrapped(datasets.DatasetDict, "save_to_disk", "save_to_disk")
    shutil.rmtree(store, ignore_errors=True)
    store.mkdir(parents=True)
    t = time.time()
    C.import_source(corpus, "big", dev_fraction=0.001, store=store)
    print(f"total {time.time() - t:.1f}s")


if __name__ == "__main__":
    main()
