# Two commands do all set-up on a fresh machine (Python 3.10+ and Java 17):
#   make run    create .venv, generate the sample store, build its index, run example key queries
#   make test   create .venv and run the test suite
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
SAMPLE ?= sample

.PHONY: setup run test test-fast bench faults refcheck clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

setup: $(STAMP)

run: $(STAMP)
	$(BIN)/rocketidx demo --dir $(SAMPLE)

test: $(STAMP)
	$(BIN)/python -m pytest -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not spark and not slow"

bench: $(STAMP)
	$(BIN)/python bench/bench.py

faults: $(STAMP)
	$(BIN)/python bench/faults.py

refcheck: $(STAMP)
	$(BIN)/python ../shared/tools/refcheck.py

clean:
	rm -rf $(VENV) $(SAMPLE) bench-data .pytest_cache .hypothesis *.egg-info
