#!/usr/bin/env bash
# The docs' worked example (docs/own-data.md): a corpus the lab has never trained a language model
# on (wiki.txt of the birth-place assignment: 2,937 biographies, one a line), from the file on disk
# to a scratch model and a fine-tuned SmolLM2, scored by bits per byte (fair across their two
# tokenizers), and the fine-tune exported to a folder transformers loads.
# Run from the repository root: bash experiments/text_corpus/worked_example.sh > experiments/text_corpus/worked_example.log 2>&1
set -euo pipefail
export LAB_STORE=${LAB_STORE:-$(mktemp -d)}
PY=${PY:-.venv/bin/python}
OUT=$(mktemp -d)
echo "# store $LAB_STORE"
set -x
$PY -m lab data import ../shared/data/cs224n-birthplaces/wiki.txt --name wiki --dev-fraction 0.1
$PY -m lab train --preset quick --name wiki-scratch --set task=text --set task.dataset=wiki \
    --set n_positions=128 --set epochs=3 --set max_train= --set max_dev=
$PY -m lab import smollm2 --name smollm2
$PY -m lab train --preset smollm2-quick --parent smollm2 --name wiki-smol --set task=text \
    --set task.dataset=wiki --set max_dev=
$PY -m lab evaluate --checkpoint wiki-scratch --split dev --no-bleu
$PY -m lab evaluate --checkpoint wiki-smol --split dev --no-bleu
$PY -m lab data show wiki
$PY -m lab export hf wiki-smol "$OUT/wiki-smol-hf"
$PY - "$OUT/wiki-smol-hf" <<'PYEOF'
import sys
from transformers import AutoModelForCausalLM, AutoTokenizer, pipeline
folder = sys.argv[1]
model = AutoModelForCausalLM.from_pretrained(folder)
tok = AutoTokenizer.from_pretrained(folder)
print(type(model).__name__, sum(p.numel() for p in model.parameters()), "parameters")
out = pipeline("text-generation", model=model, tokenizer=tok)("Ada Lovelace was born in", max_new_tokens=20, do_sample=False)
print(out[0]["generated_text"])
PYEOF
