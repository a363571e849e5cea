#!/usr/bin/env bash
# The seeds' architecture variants on the captions, each beside the plain gpt2 of the same size and
# budget: the quick preset (2 layers, width 128, 4 heads) on the first 4,000 training captions, one
# epoch, dev perplexity on the first 500 dev captions. The Universal Transformer has one block
# applied up to 4 times. Prints a Markdown table; the log is experiments/variants_captions.log.
set -euo pipefail
cd "$(dirname "$0")/.."
export LAB_STORE="${LAB_STORE:-$(mktemp -d)}"
mkdir -p "$LAB_STORE"
budget=(--preset quick --set max_train=4000 --set max_dev=500)
runs=(
  "plain-gpt2|"
  "sliding-w8|--set attention=sliding --set attention.window=8"
  "alibi|--set positional=alibi"
  "perceiver-b16|--set model=perceiver --set model.bottleneck_dim=16"
  "universal-s4|--set model=universal --set n_layer=1 --set model.max_steps=4"
  "xl-s8-m8|--set model=xl --set model.segment_len=8 --set model.mem_len=8"
)
only="${ONLY:-}"      # ONLY=name runs that one run (the table then lists the runs in the store)
for run in "${runs[@]}"; do
  name="${run%%|*}"; sets="${run#*|}"
  if [ -n "$only" ] && [ "$name" != "$only" ]; then continue; fi
  start=$(date +%s)
  # shellcheck disable=SC2086
  python -m lab train --name "$name" "${budget[@]}" $sets > "$LAB_STORE/$name.log" 2>&1
  echo "$name $(( $(date +%s) - start ))" >> "$LAB_STORE/times.txt"
done
python - <<'PY'
import os
from lab.storage import checkpoints
from lab.modeling.model import build
times = dict(line.split() for line in open(os.path.join(os.environ["LAB_STORE"], "times.txt")))
print("| run | settings | parameters | dev perplexity (500 captions) | train time |")
print("| --- | --- | --- | --- | --- |")
for name, t in times.items():
    info = checkpoints.info(name)
    ck = checkpoints.load(name)
    s = {k: v for k, v in ck.config.settings.items() if v}
    print(f"| {name} | {ck.config.model}, {ck.config.attention}, {ck.config.positional} {s or ''} | "
          f"{sum(p.numel() for p in ck.model.parameters()):,} | "
          f"{info['metrics']['dev_perplexity']:.2f} | {int(t) // 60}m{int(t) % 60:02d}s |")
PY
