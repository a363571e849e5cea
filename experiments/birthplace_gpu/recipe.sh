#!/bin/bash
# The birth-place models pretrained and fine-tuned with a recipe of settings, in one device
# command (about 9.5 minutes): vanilla and Perceiver pretrained side by side for the assignment's
# 650 epochs with $RECIPE's settings (names pre650$TAG, perc650$TAG), then each fine-tuned twice,
# at minGPT's constant 6e-4 (its fine-tune reaches 3% of its decay) and with the preset's cosine,
# and scored on dev (predictions for dev and test). Runs cut short by the time limit are finished
# on the same machine with `train --resume` (README.md). The recipes:
#   TAG=m (the default): minGPT's learning-rate schedule, a cosine over 200 epochs' tokens,
#     floored at 10% and not clamped (lr_schedule=mingpt, decay_epochs=200, no warm-up);
#   TAG=o RECIPE="--set adam_beta2=0.95 --set decay_biases=false": minGPT's AdamW (betas
#     (0.9, 0.95), no decay on biases) with the preset's schedule.
# Run from the repository root with the birth-place folder in $BIRTH (the device command carries
# it in .devdata/birth). In $OUT: summary.txt as it goes, results.tgz (logs, predictions, the
# runs' metrics), and each pretrained checkpoint's weights (NAME.tgz) for later fine-tunes.
# SMOKE=1 runs the same steps at a toy size (on the CPU, to check the script).
source "$(dirname "$0")/common.sh"
TAG=${TAG:-m}
read -r -a SETS <<< "${RECIPE:---set lr_schedule=mingpt --set decay_epochs=200 --set warmup_steps=0}"
PRE=(); FT=(); A_END=490; B_END=570
if [ -n "$SMOKE" ]; then
  PRE=(--set epochs=2 --set max_train=128 --set max_dev=32 --set n_layer=2)
  FT=(--set epochs=1 --set max_train=64 --set max_dev=20); A_END=120; B_END=300
fi

pretrain_both
finetune_both_ways
for n in pre650$TAG perc650$TAG; do   # the pretrained weights, for fine-tunes on a later machine
  (cd $LAB_STORE && tar czf $OUT/$n.tgz --exclude=train_state.safetensors $n) && say "$n.tgz: $(du -h $OUT/$n.tgz | cut -f1)"
done
(cd $R && tar czf $OUT/results.tgz .) && say "results.tgz written: $(du -h $OUT/results.tgz | cut -f1)"
