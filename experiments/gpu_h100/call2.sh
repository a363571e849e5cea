#!/bin/bash
# second device call: finish the 20-epoch run if call 1 could not, the evaluations left, then the
# job worker on CUDA, the GPU benchmark, DDP under torchrun/NCCL and the GPU tests
set -o pipefail
source .devdata/env.sh
step() { echo; echo "##### $1 (at ${SECONDS}s)"; }
left() { echo $(( $1 - SECONDS )); }
if [ ! -e /tmp/marks/trained ]; then
  if [ -d checkpoints/tfmr-scratch-gpu ]; then
    step "resume the 20-epoch run"
    timeout $(left 300) python3 -m lab train --resume tfmr-scratch-gpu 2>&1 | tee $OUT/train2.log
    grep -q "^done" $OUT/train2.log && touch /tmp/marks/trained
    cp checkpoints/_runs/tfmr-scratch-gpu/metrics.jsonl $OUT/metrics.jsonl
  else
    echo "fresh machine: no tfmr-scratch-gpu checkpoint here"
  fi
fi
if [ -e /tmp/marks/trained ]; then step evaluations; DEADLINE=330; source .devdata/evals.sh; fi
step "job worker on CUDA"
python3 -m lab jobs submit --preset tiny --name gpu-job --set device=cuda
python3 -m lab worker > $OUT/worker.log 2>&1 & WPID=$!
for i in $(seq 90); do sleep 1; python3 -m lab jobs list | grep -q "gpu-job.*\(done\|failed\|stopped\|interrupted\)" && break; done
python3 -m lab jobs list; kill $WPID; wait $WPID
tail -n 12 checkpoints/.lab/logs/job-*.log; cat $OUT/worker.log
step "GPU benchmark"
timeout $(left 480) python3 benchmarks/train_vs_hf.py --device cuda --gpu-steps 300 2>&1 | grep -v Warning
step "DDP: torchrun, one process on the one GPU (NCCL)"
timeout $(left 520) torchrun --standalone --nproc_per_node 1 -m lab train --preset tiny --name ddp-gpu --set device=cuda --set epochs=1 2>&1 | tail -n 8
step "GPU tests"
timeout $(left 565) python3 -m pytest -q -p no:cacheprovider tests/test_gpu.py tests/test_flops.py 2>&1 | tail -n 15
if [ -e /tmp/marks/trained ] && [ $(left 590) -gt 25 ]; then
  step "dev perplexity of the best checkpoint in float32 (the run scored dev in bf16)"
  timeout $(left 590) python3 -m lab evaluate --checkpoint tfmr-scratch-gpu --split dev --no-bleu --device cuda
fi
cat $OUT/evals.txt 2>/dev/null | grep -h '"forward"\|"harmonic"\|"backward"\|"perplexity":\|"decoder"\|"temperature"\|generate_s' | tr -s ' ' | paste -sd' ' | fold -w 2000
