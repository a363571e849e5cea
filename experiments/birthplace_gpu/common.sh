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
