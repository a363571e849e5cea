"""What a look inside a model costs in memory, per kind of request, at the longest text the page
allows: attention (64 tokens), the logit lens (256), activation patching (64, clean and
corrupted), on SmolLM2 cut to its blocks 1, 15 and 30 (its vocabulary and width, three blocks:
the full model's lens holds 31 layers' states instead of 4, about 0.06 MB more a token). Each kind
runs in a fresh process that loads the checkpoint, resets its peak resident memory
(/proc/self/clear_refs) and reads it again after the request (VmHWM); the lens's estimate
(lab/inside/memory.py's lens_bytes; the check asks for HEADROOM, 1.25 times it) is printed beside it.

    python benchmarks/request_memory.py"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

CHILD = r"""
import json, sys, time
from pathlib import Path
from lab.storage import checkpoints
from lab.inside import lens, memory, patching
from lab.evaluation import attention_maps

def hwm():
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024

kind, store = sys.argv[1], sys.argv[2]
ck = checkpoints.load("smol", store)
Path("/proc/self/clear_refs").write_text("5")       # the peak from here on
before, t0 = hwm(), time.time()
if kind == "attention":
    attention_maps.capture(ck.model, ck.tokenizer, "1" * 63)
elif kind == "lens":
    lens.logit_lens(ck.model, ck.tokenizer, "1" * 255, top=5)
elif kind == "patch":
    patching.patch(ck.model, ck.tokenizer, "1" * 63, "2" * 63)
print(json.dumps({"kind": kind, "peak_gain": hwm() - before, "loaded": before,
                  "seconds": time.time() - t0,
                  "estimate": memory.lens_bytes(ck.model.config, 256) if kind == "lens" else None}))
"""


def main() -> None:
    from lab.storage import smollm2
    store = tempfile.mkdtemp()
    smollm2.import_smollm2("smol", [1, 15, 30], store=store)
    print("SmolLM2 cut to blocks 1, 15, 30; the longest text the page allows for each kind")
    print("| request | tokens | the process before it (loaded) | peak gained by the request | seconds |")
    print("| --- | --- | --- | --- | --- |")
    for kind, tokens in (("attention", 64), ("lens", 256), ("patch", 64)):
        out = subprocess.run([sys.executable, "-c", CHILD, kind, store], capture_output=True,
                             text=True, cwd=ROOT, check=True)
        r = json.loads(out.stdout.strip().splitlines()[-1])
        est = f" (the lab's estimate before it: {r['estimate'] / 1e6:.0f} MB)" if r["estimate"] else ""
        print(f"| {kind} | {tokens} | {r['loaded'] / 1e6:.0f} MB | {r['peak_gain'] / 1e6:.0f} MB{est} "
              f"| {r['seconds']:.1f} |", flush=True)


if __name__ == "__main__":
    main()
