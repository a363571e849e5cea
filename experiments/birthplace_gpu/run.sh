#!/bin/bash
# The birth-place budget curve on one GPU, in one device command (about 9 minutes): vanilla
# pretraining for the assignment's 650 epochs keeping the weights at 50, 100, 200, 400 and 650
# epochs, the Perceiver beside it, then each fine-tuned the assignment's way and scored on dev
# (predictions for dev and test written). Run from the repository root with the birth-place
# folder in $BIRTH (the device command carries it in .devdata/birth). Everything lands in $OUT:
# summary.txt as it goes, results.tgz (logs, predictions, the runs' metrics) at the end.
# SMOKE=1 runs the same steps at a toy size (on the CPU, to check the script).
source "$(dirname "$0")/common.sh"
KEEP=50,100,200,400,650; PRE=(--set max_minutes=5.5); FT=(); A_END=400; B_END=530
if [ -n "$SMOKE" ]; then
  KEEP=1,2; PRE=(--set epochs=2 --set max_train=128 --set max_dev=32 --set n_layer=2)
  FT=(--set epochs=1 --set max_train=64 --set max_dev=20); A_END=120; B_END=240
fi

say "pretraining: vanilla (keep_epochs=$KEEP) and Perceiver, side by side"
timeout $((A_END - SECONDS)) $PY -m lab birthplace pretrain --model vanilla --name pre650 \
  --set keep_epochs=$KEEP "${G[@]}" "${PRE[@]}" > $R/pre650.log 2>&1 &
timeout $((A_END - SECONDS)) $PY -m lab birthplace pretrain --model perceiver --name perc650 \
  --set keep_epochs=${KEEP##*,} "${G[@]}" "${PRE[@]}" > $R/perc650.log 2>&1 &
wait
say "pretraining ended"; tail -n 2 $R/pre650.log $R/perc650.log | tee -a $S
ls $LAB_STORE | tee -a $S

say "fine-tuning each kept checkpoint (10 epochs, batch 256, lr 6e-4), then dev and test answers"
KEPT=$(ls $LAB_STORE | grep -E '^(pre650|perc650)-e[0-9]+$')
for run in pre650 perc650; do    # a run cut short by its budget: fine-tune the checkpoint it kept
  echo "$KEPT" | grep -q "^$run-e${KEEP##*,}$" || KEPT="$KEPT $run"
done
for ck in $KEPT; do
  finetune $ck ft-$ck &
done
wait
say "fine-tuning ended"
for f in $R/*.dev.json; do echo "$(basename $f .dev.json) $(cat $f)"; done | tee -a $S
for f in $R/ft-*[0-9].log; do echo "$(basename $f): $(grep -c 'dev accuracy' $f) evaluations; $(tail -n 1 $f)"; done | tee -a $S
mkdir -p $R/runs; for d in $LAB_STORE/_runs/*/; do cp $d/metrics.jsonl $R/runs/$(basename $d).metrics.jsonl 2>/dev/null; done
(cd $R && tar czf $OUT/results.tgz .) && say "results.tgz written: $(du -h $OUT/results.tgz | cut -f1)"
