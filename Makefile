# Two commands do all set-up on a fresh machine (Python 3.10+ and Java 17):
#   make run    create .venv, generate the sample store, build its index, run example key queries
#   make test   create .venv and run the test suite
# and one opens the notebooks:
#   make notebook   add JupyterLab to .venv (the `notebook` extra), serve notebooks/ on 127.0.0.1:8888
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SAMPLE ?= sample
NOTEBOOK_STAMP := $(VENV)/.notebook-stamp
NOTEBOOK_PORT ?= 8888

# pipefail: a failing pip fails the recipe even when its stderr goes through the filter below.
SHELL := /bin/bash
.SHELLFLAGS := -o pipefail -c
# A pip.conf that names local package directories this machine lacks makes pip warn once per package
# ("Location 'file:///...' is ignored: it is neither a file nor a directory"): the machine's set-up, not
# news to someone running `make run`. Only those lines are dropped; every other pip message shows.
PIP_NOISE := 2>&1 | { grep -v "is ignored: it is neither a file nor a directory" >&2 || true; }

.PHONY: setup run test test-fast notebook bench faults interrupts brokers refcheck dist clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip $(PIP_NOISE)
	$(BIN)/python -m pip install --quiet -e '.[test]' $(PIP_NOISE)
	@# A regular install (pip install .) compiles the package's bytecode; an editable one writes it at first
	@# import, unless PYTHONDONTWRITEBYTECODE is set, and then every command compiles the whole package first.
	$(BIN)/python -m compileall -q rocketidx jobs
	touch $(STAMP)

setup: $(STAMP)

# Its own stamp, so `make test` never installs a Jupyter server; redone when pyproject.toml changes.
$(NOTEBOOK_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install --quiet -e '.[notebook]' $(PIP_NOISE)
	touch $(NOTEBOOK_STAMP)

# Jupyter refuses to run as root unless told; root is the usual user in a container, and the server
# listens on 127.0.0.1 only, behind its token.
notebook: $(NOTEBOOK_STAMP)
	@echo "JupyterLab serves notebooks/ on http://127.0.0.1:$(NOTEBOOK_PORT)/lab: open the URL with its token, printed below (Ctrl-C stops it)"
	$(BIN)/jupyter lab --no-browser --ServerApp.ip=127.0.0.1 --ServerApp.port=$(NOTEBOOK_PORT) \
	    --ServerApp.port_retries=0 --ServerApp.root_dir=notebooks $(if $(filter 0,$(shell id -u)),--allow-root)

run: $(STAMP)
	$(BIN)/rocketidx demo --dir $(SAMPLE)

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not spark and not slow"

bench: $(STAMP)
	$(BIN)/python bench/speed/bench.py

faults: $(STAMP)
	$(BIN)/python bench/campaigns/faults.py

# Ctrl-C and SIGTERM at random moments of in-process and Spark builds (issue 20), kill -9 of incremental builds (35)
interrupts: $(STAMP)
	$(BIN)/python bench/campaigns/interrupts.py
	$(BIN)/python bench/campaigns/incremental_kills.py

# Real RocketMQ brokers (tests/brokers/README.md): every pinned version's files, answers and crash campaign
# (make test runs the one marked ci in tests/brokers/versions.txt, smaller), and the tests marked campaign
# (the live light-queue, batch-queue and RocksDB runs; every golden case on the standalone Spark cluster)
brokers: $(STAMP)
	ROCKETIDX_CAMPAIGN=1 $(BIN)/python -m pytest -q -m campaign
	mkdir -p bench-data && cd tests && ../$(BIN)/python -m brokers.matrix --json ../bench-data/brokers-matrix.json
	cd tests && ../$(BIN)/python -m brokers.matrix --versions 5.3.3 5.5.0 --set enabledAppendPropCRC=true \
		--json ../bench-data/brokers-matrix-propcrc.json
	cd tests && ../$(BIN)/python -m brokers.matrix --versions 4.9.8 5.5.0 --build-args "--in-process --workers 2" \
		--json ../bench-data/brokers-matrix-workers.json
	cd tests && ../$(BIN)/python -m brokers.matrix --versions 4.9.8 5.1.4 5.5.0 --set enableLmq=true \
		--set enableMultiDispatch=true --json ../bench-data/brokers-matrix-lmq.json
	cd tests && ../$(BIN)/python -m brokers.light --json ../bench-data/brokers-light.json
	cd tests && ../$(BIN)/python -m brokers.matrix --versions 5.1.4 5.3.3 5.5.0 --batchcq \
		--json ../bench-data/brokers-matrix-batchcq.json
	cd tests && ../$(BIN)/python -m brokers.rocksdb --versions 5.3.3 5.5.0 --json ../bench-data/brokers-rocksdb.json
	cd tests && ../$(BIN)/python -m brokers.rocksdb --versions 5.3.3 5.5.0 --set enableLmq=true \
		--set enableMultiDispatch=true --json ../bench-data/brokers-rocksdb-lmq.json
	cd tests && ../$(BIN)/python -m brokers.redispatch --version 5.5.0 --gb 1.0 --small-index --no-tls \
		--set storeType=defaultRocksDB --verify both --json ../bench-data/brokers-redispatch-rocksdb.json
	cd tests && ../$(BIN)/python -m brokers.campaign --json ../bench-data/brokers-campaign.json

# What a cluster's executors need (docs/spark.md): dist/rocketidx-env.tar.gz (venv-pack: numpy, pyarrow, pandas
# and rocketidx from its wheel, with the compiled kernel), the wheel, and rocketidx.zip (the --py-files fallback)
dist: $(STAMP)
	$(BIN)/python -m rocketidx.packaging.ship --out dist

refcheck: $(STAMP)
	$(BIN)/python ../shared/tools/refcheck.py

clean:
	rm -rf $(VENV) $(SAMPLE) bench-data .pytest_cache .hypothesis *.egg-info
