#!/bin/bash
# The first of two device commands for a recipe of settings (529 s on an H100): vanilla and the
# Perceiver pretrained side by side with $RECIPE's settings (names pre650$TAG, perc650$TAG) for
# the assignment's 650 epochs, or as far as the command's time allows; each saves where it stands
# at every epoch's end (early_stop=none), so `finish.sh`, the second command on the same warm
# machine, resumes them exactly. The default recipe, TAG=p: minGPT's AdamW (betas (0.9, 0.95),
# biases not decayed) and its plain initialisation (N(0, 0.02) everywhere, positions at zero),
# with the preset's learning-rate schedule. In $OUT: summary.txt, the logs (pretrain.tgz) and
# each run's weights as it stands (NAME.tgz), for a fine-tune on any machine if the second
# command cannot run. Run from the repository root with the birth-place folder in $BIRTH (the
# device command carries it in .devdata/birth). SMOKE=1 runs it at a toy size on the CPU.
source "$(dirname "$0")/common.sh"
TAG=${TAG:-p}
read -r -a SETS <<< "${RECIPE:---set adam_beta2=0.95 --set decay_biases=false --set init=plain}"
PRE=(); A_END=${A_END:-560}
if [ -n "$SMOKE" ]; then
  PRE=(--set epochs=3 --set max_train=128 --set max_dev=32 --set n_layer=2); A_END=100
fi

pretrain_both
for n in pre650$TAG perc650$TAG; do
  (cd $LAB_STORE && tar czf $OUT/$n.tgz --exclude=train_state.safetensors $n) && say "$n.tgz: $(du -h $OUT/$n.tgz | cut -f1)"
done
(cd $R && tar czf $OUT/pretrain.tgz .) && say "pretrain.tgz written: $(du -h $OUT/pretrain.tgz | cut -f1)"
