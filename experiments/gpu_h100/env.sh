# sourced at the start of every device command: the corpus and GPT-2 BPE files travel in .devdata
export PYTHONUNBUFFERED=1 PYTHONPATH=$PWD/.devdata/py LAB_DATA_DIR=$PWD/.devdata/coco LAB_STORE=$PWD/checkpoints
mkdir -p ../shared/data && { [ -d ../shared/data/coco-captions-hw3 ] || cp -r .devdata/coco ../shared/data/coco-captions-hw3; }
mkdir -p /tmp/marks
