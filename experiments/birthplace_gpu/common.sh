# What the birth-place device scripts share (sourced by run.sh and recipe.sh): the environment,
# the summary file and `say`, the exact-on-a-GPU settings, the device's name, and `finetune`.
set -o pipefail
export PYTHONUNBUFFERED=1 LAB_STORE=${LAB_STORE:-/tmp/store} LAB_BIRTHPLACE_DIR=${BIRTH:-$PWD/.devdata/birth}
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-4}
PY=${PY:-python3}
R=/tmp/birth-results; rm -rf $R; mkdir -p $R $OUT
S=$OUT/summary.txt
say() { echo "[$SECONDS s] $*" | tee -a $S; }
# exact on a GPU (pack joins examples only to save compute on padding); float32 as the assignment
G=(--set pack=false --set precision=fp32)
FT=()                   # the fine-tunes' own settings (a toy size under SMOKE)
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>&1 | tee -a $S
$PY -c "import torch; print('torch', torch.__version__, torch.cuda.is_available() and torch.cuda.get_device_name())" | tee -a $S

finetune() {   # $1: the pretrained checkpoint, $2: the fine-tune's name, then its own settings;
               # answers dev and test before $B_END seconds into the script
  local parent=$1 name=$2; shift 2
  timeout $((B_END - SECONDS)) $PY -m lab birthplace finetune --name $name --parent $parent "${G[@]}" "${FT[@]}" "$@" > $R/$name.log 2>&1 &&
  timeout $((B_END - SECONDS)) $PY -m lab birthplace evaluate --checkpoint $name --split dev --predictions $R/$name-dev-predictions.txt --json > $R/$name.dev.json 2>&1 &&
  timeout $((B_END - SECONDS)) $PY -m lab birthplace evaluate --checkpoint $name --split test --predictions $R/$name-test-predictions.txt > $R/$name.test.log 2>&1
}

pretrain_both() {   # vanilla and Perceiver side by side (pre650$TAG, perc650$TAG) until $A_END
                    # seconds into the script, with $SETS, the exact settings and $PRE
  say "pretraining with ${SETS[*]}: vanilla and Perceiver, side by side"
  for m in vanilla:pre650$TAG perceiver:perc650$TAG; do
    timeout $((A_END - SECONDS)) $PY -m lab birthplace pretrain --model ${m%%:*} --name ${m##*:} \
      "${SETS[@]}" "${G[@]}" "${PRE[@]}" > $R/${m##*:}.log 2>&1 &
  done
  wait
  say "pretraining stopped"
  for n in pre650$TAG perc650$TAG; do grep '^epoch [0-9]*:' $R/$n.log | tail -n 1 | sed "s/^/$n /" | tee -a $S; done
}

finetune_both_ways() {   # each pretrained run ($@, else pre650$TAG and perc650$TAG) fine-tuned at
                         # minGPT's constant rate and with the preset's cosine, side by side; then
                         # what each answered, and the metrics
  local names=("$@"); [ ${#names[@]} -gt 0 ] || names=(pre650$TAG perc650$TAG)
  say "fine-tuning each (10 epochs, batch 256, lr 6e-4): constant as minGPT, and the preset's cosine"
  for n in "${names[@]}"; do
    finetune $n ft-$n-const --set lr_schedule=constant &
    finetune $n ft-$n-cos &
  done
  wait
  say "fine-tuning ended"
  for f in $R/*.dev.json; do echo "$(basename $f .dev.json) $(cat $f)"; done | tee -a $S
  for f in $R/ft-*[st].log; do echo "$(basename $f): $(grep 'dev accuracy' $f | sed 's/.*dev accuracy \([0-9.]*%\).*/\1/' | tr '\n' ' ')| $(tail -n 1 $f)"; done | tee -a $S
  mkdir -p $R/runs; for d in $LAB_STORE/_runs/*/; do cp $d/metrics.jsonl $R/runs/$(basename $d).metrics.jsonl 2>/dev/null; done
}
