#!/bin/bash
# The second device command, on the machine `pretrain.sh` left warm (57 s on an H100): both runs
# resumed to their last epoch (`train --resume`: the same corruption, shuffling and dropout as a
# run never stopped), then each fine-tuned the assignment's way twice, at minGPT's constant 6e-4
# (its fine-tune reaches 3% of its decay) and with the preset's cosine, and answered on dev and
# test. In $OUT: summary.txt and results.tgz (logs, predictions, the runs' metrics).
# SMOKE=1 runs it at a toy size on the CPU, after `pretrain.sh` with SMOKE=1.
source "$(dirname "$0")/common.sh"
TAG=${TAG:-p}
B_END=${B_END:-280}
if [ -n "$SMOKE" ]; then
  FT=(--set epochs=1 --set max_train=64 --set max_dev=20); B_END=300
fi

say "resuming both to their last epoch"
for n in pre650$TAG perc650$TAG; do
  timeout $((B_END - 60 - SECONDS)) $PY -m lab train --resume $n --set max_minutes=60 > $R/$n-resume.log 2>&1 &
done
wait
for n in pre650$TAG perc650$TAG; do grep '^epoch [0-9]*:' $R/$n-resume.log | tail -n 1 | sed "s/^/$n /" | tee -a $S; tail -n 1 $R/$n-resume.log | tee -a $S; done

finetune_both_ways
(cd $R && tar czf $OUT/results.tgz .) && say "results.tgz written: $(du -h $OUT/results.tgz | cut -f1)"
