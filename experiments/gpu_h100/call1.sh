#!/bin/bash
# first device call: the 20-epoch Tfmr-scratch run, then as many test-split evaluations as fit
set -o pipefail
source .devdata/env.sh
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm,power.draw --format=csv
python3 -c "import torch,transformers;print(torch.__version__, transformers.__version__, torch.cuda.get_device_name())"
rm -rf checkpoints/tfmr-scratch-gpu checkpoints/_runs/tfmr-scratch-gpu
timeout $((520 - SECONDS)) python3 -m lab train --preset tfmr-scratch --name tfmr-scratch-gpu 2>&1 | tee $OUT/train.log
echo "train rc=$? at ${SECONDS}s"
cp checkpoints/_runs/tfmr-scratch-gpu/metrics.jsonl $OUT/metrics.jsonl 2>/dev/null
if grep -q "^done" $OUT/train.log; then touch /tmp/marks/trained; DEADLINE=575; source .devdata/evals.sh; fi
grep -h '"forward"\|"harmonic"\|"backward"\|"perplexity":\|"token_perplexity"\|"word_perplexity"\|"distinct_2"\|"decoder"\|"temperature"\|_s"' $OUT/evals.txt 2>/dev/null | tr -s ' ' | paste -sd' ' | fold -w 3000
du -sh checkpoints; ls checkpoints
