"""The text task's data path, side by side with its peers on the same work, in one run:

1. tokenizing a corpus of about 100 MB (the MSCOCO training captions, repeated and shuffled, one a
   line: real text) with the lab's batched `datasets` map (written to the store's cache) against a
   plain per-line loop calling
   the same fast GPT-2 tokenizer (`tok.encode(line)` for every line), same token ids checked;
2. the second run's load of the tokenized corpus from the store's cache, in a fresh process;
3. training tokens per second of the text task (the same captions imported as a dataset) against
   the captions task, the same preset and steps, alternating.

Run: .venv/bin/python benchmarks/text_corpus.py [--megabytes 100] [--steps 80] [--rounds 2]"""
import argparse
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.common import header, report  # noqa: E402
from lab.inputs import data, tokenizers  # noqa: E402
from lab.presets import get  # noqa: E402
from lab.training import runs  # noqa: E402
from plugins.tasks.text import corpora  # noqa: E402

LOAD = """
import sys, time
sys.path.insert(0, {root!r})
from lab.inputs import tokenizers
from plugins.tasks.text import corpora
tok = tokenizers.gpt2()
t0 = time.perf_counter()
corpora._datasets()
t1 = time.perf_counter()
ds = corpora.tokenized("corpus", "train", tok, {store!r})
t2 = time.perf_counter()
print(t2 - t0, t2 - t1, len(ds))
"""


def write_corpus(path: Path, megabytes: float) -> int:
    """MSCOCO's training captions, shuffled and repeated to `megabytes`, one a line."""
    caps = data.load_split("train")
    rng, lines, size = random.Random(0), [], 0
    while size < megabytes * 1e6:
        batch = caps[:]
        rng.shuffle(batch)
        for c in batch:
            lines.append(c)
            size += len(c.encode()) + 1
            if size >= megabytes * 1e6:
                break
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return len(lines)


def tokenizing(store: str, corpus: Path) -> dict:
    t0 = time.perf_counter()
    corpora.import_source(corpus, "corpus", dev_fraction=0.001, store=store)
    import_s = time.perf_counter() - t0
    tok = tokenizers.gpt2()
    texts = list(corpora.split("corpus", "train", store)[corpora.TEXT])   # in memory, untimed
    t0 = time.perf_counter()
    by_map = corpora.tokenized("corpus", "train", tok, store)
    map_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    by_loop = [tok.encode(t) for t in texts]
    loop_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    tok.encode_batch(texts)
    one_call_s = time.perf_counter() - t0
    sample = random.Random(1).sample(range(len(texts)), 2000)
    assert all(by_map[i]["ids"] == by_loop[i] for i in sample), "the map's ids differ from the loop's"
    out = subprocess.run([sys.executable, "-c", LOAD.format(root=str(ROOT), store=store)],
                         capture_output=True, text=True, check=True).stdout.split()
    return {"corpus_megabytes": round(corpus.stat().st_size / 1e6, 1), "texts": len(texts),
            "tokens": sum(map(len, by_loop)), "import_s": round(import_s, 1),
            "map_s": round(map_s, 1), "loop_s": round(loop_s, 1),
            "one_batch_call_s": round(one_call_s, 1), "map_speedup": round(loop_s / map_s, 2),
            "cache_load_s_fresh_process": round(float(out[0]), 3),
            "cache_load_s_datasets_imported": round(float(out[1]), 3)}


def tokens_per_s(store: str, name: str, task: list[str], steps: int) -> float:
    model_cfg, train_cfg = get("tiny")
    cfg = train_cfg.replace(max_steps=steps, max_dev=64, log_every=10,
                            save_every_minutes=0, **dict(s.split("=", 1) for s in task))
    events = [e for e in runs.train(name, model_cfg, cfg, store=store) if e["event"] == "step"]
    return events[-1]["tokens_per_s"]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--megabytes", type=float, default=100)
    ap.add_argument("--steps", type=int, default=80)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    header(f"the text task's data path: {args.megabytes:g} MB tokenized by map and by a loop, "
           f"the cache, training tok/s against captions")
    with tempfile.TemporaryDirectory() as tmp:
        store = str(Path(tmp) / "store")
        corpus = Path(tmp) / "captions.txt"
        write_corpus(corpus, args.megabytes)
        report(**tokenizing(store, corpus))
        caps = Path(tmp) / "train-captions.txt"
        caps.write_text("\n".join(data.load_split("train")) + "\n", encoding="utf-8")
        corpora.import_source(caps, "captions", store=store)
        for r in range(args.rounds):
            c = tokens_per_s(store, f"captions-{r}", [], args.steps)
            t = tokens_per_s(store, f"text-{r}", ["task=text", "task.dataset=captions"], args.steps)
            report(round=r + 1, captions_tokens_per_s=round(c), text_tokens_per_s=round(t),
                   text_over_captions=round(t / c, 3))


if __name__ == "__main__":
    main()
