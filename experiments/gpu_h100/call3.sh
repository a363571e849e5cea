#!/bin/bash
# third device call: all 20 epochs without early stopping (the whole dev curve); one epoch in fp32
# and one compiled, through the trainer; the GPU benchmark twice (its spread); DDP again
set -o pipefail
source .devdata/env.sh
step() { echo; echo "##### $1 (at ${SECONDS}s)"; }
left() { echo $(( $1 - SECONDS )); }
step "20 epochs, early_stop=none"
timeout $(left 260) python3 -m lab train --preset tfmr-scratch --name scratch-20 --set early_stop=none 2>&1 > $OUT/train20.log | grep -v Warn
grep "dev perplexity\|^done\|training on" $OUT/train20.log
cp checkpoints/_runs/scratch-20/metrics.jsonl $OUT/metrics20.jsonl
step "one epoch, precision=fp32"
timeout $(left 300) python3 -m lab train --preset tfmr-scratch --name one-fp32 --set epochs=1 --set precision=fp32 2>&1 > $OUT/fp32.log; grep "training on\|step 4[0-9]0/\|dev perp" $OUT/fp32.log
step "one epoch, compile=true"
timeout $(left 400) python3 -m lab train --preset tfmr-scratch --name one-compiled --set epochs=1 --set compile=true > $OUT/compiled.log 2>&1; grep "training on\|step [0-9]*0/\|dev perp\|rror" $OUT/compiled.log | head -30
step "GPU benchmark, twice"
for i in 1 2; do timeout $(left 500) python3 benchmarks/train_vs_hf.py --device cuda --gpu-steps 300 2>&1 | grep -v "Warn\|Writing\|Loading" | tr -d '\n '; echo; done
step "DDP: torchrun, one process, NCCL"
timeout $(left 540) torchrun --standalone --nproc_per_node 1 -m lab train --preset tiny --name ddp-2 --set device=cuda --set epochs=1 2>&1 | grep -v "^epoch 1 step [0-9]*/63 ("
