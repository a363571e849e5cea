"""An import's memory beside the size of the weights it imports: a 355M-parameter GPT-2 made by
`transformers` (random weights, float32), uploaded as a .zip the way the Checkpoints tab takes it
(`interop.import_hf_upload`), in a fresh process whose resident memory is sampled every 20 ms:
anonymous memory (what the import holds itself) and file-backed (the weights file memory-mapped
while its tensors are copied in; the kernel takes those pages back as it needs).

    .venv/bin/python benchmarks/import_memory.py
"""
import subprocess
import sys
import tempfile
import time
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHILD = """
import sys
sys.path.insert(0, sys.argv[3])
from pathlib import Path
from lab.storage import interop
interop.import_hf_upload([Path(sys.argv[1])], "m355", store=sys.argv[2])
"""


def _rss(pid: int) -> tuple[int, int]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
    return (int(fields["RssAnon"].split()[0]) * 1024, int(fields["RssFile"].split()[0]) * 1024)


def main() -> None:
    from transformers import GPT2Config, GPT2LMHeadModel
    work = Path(tempfile.mkdtemp(prefix="import-memory-"))
    GPT2LMHeadModel(GPT2Config(n_embd=1024, n_layer=24, n_head=16)).save_pretrained(work / "gpt2-355m")
    weights = (work / "gpt2-355m" / "model.safetensors").stat().st_size
    archive = work / "gpt2-355m.zip"
    with zipfile.ZipFile(archive, "w", zipfile.ZIP_STORED) as z:
        for f in (work / "gpt2-355m").iterdir():
            z.write(f, f"gpt2-355m/{f.name}")
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(archive), str(work / "store"), str(ROOT)])
    anon = file = 0
    t0 = time.time()
    while child.poll() is None:
        try:
            a, f = _rss(child.pid)
        except (OSError, KeyError):
            break
        anon, file = max(anon, a), max(file, f)
        time.sleep(0.02)
    assert child.wait() == 0, "the import failed"
    print(f"weights {weights / 1e9:.2f} GB; the import's peak: anonymous {anon / 1e9:.2f} GB "
          f"({anon / weights:.2f}x the weights, Python and torch included), file-backed "
          f"{file / 1e9:.2f} GB; {time.time() - t0:.1f} s")


if __name__ == "__main__":
    main()
