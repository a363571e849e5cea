#!/usr/bin/env bash
# The worked example's fine-tune (docs/own-data.md) carried out of the lab as GGUF and run by
# llama.cpp: wiki.txt imported, SmolLM2-135M fine-tuned on it as in worked_example.sh, then
# exported (f16, q8_0) and continued greedily by llama.cpp (llama-cpp-python in its own venv,
# reading only the .gguf) beside the lab, on the prompt the worked example gives transformers.
# Run from the repository root:
#   bash experiments/text_corpus/gguf.sh /tmp/llvenv/bin/python > experiments/text_corpus/gguf.log 2>&1
set -euo pipefail
export LAB_STORE=${LAB_STORE:-$(mktemp -d)}
PY=${PY:-.venv/bin/python}
echo "# store $LAB_STORE"
set -x
$PY -m lab data import ../shared/data/cs224n-birthplaces/wiki.txt --name wiki --dev-fraction 0.1
$PY -m lab import smollm2 --name smollm2
$PY -m lab train --preset smollm2-quick --parent smollm2 --name wiki-smol --set task=text \
    --set task.dataset=wiki --set max_dev=
$PY -m lab export gguf wiki-smol "$LAB_STORE/../wiki-smol.gguf" --type q8_0
$PY experiments/gguf_llamacpp/run.py "$1" wiki-smol "Ada Lovelace was born in"
