# evals.sh DEADLINE_S: the six test-split rows not yet done, each while time is left
for spec in "random 1.0" "random 0.7" "top_p 1.0" "top_p 0.7" "top_k 1.0" "top_k 0.7"; do
  set -- $spec
  [ -e /tmp/marks/eval_$1_$2 ] && continue
  left=$(( $DEADLINE - SECONDS )); [ $left -lt 45 ] && { echo "no time left for eval $spec"; break; }
  echo "=== evaluate $spec (at ${SECONDS}s)" | tee -a $OUT/evals.txt
  timeout $left python3 -m lab evaluate --checkpoint tfmr-scratch-gpu --split test --n 5000 --decoder $1 --temperature $2 --seed 0 --bleu-tokens gpt2 --device cuda --json >> $OUT/evals.txt 2>&1 && touch /tmp/marks/eval_$1_$2
  echo "=== rc=$? at ${SECONDS}s" | tee -a $OUT/evals.txt
done
