# Two commands do all the set-up on a fresh machine:
#   make run   -> local venv, install, run the embedded default (DMFT vs GD simulation)
#   make test  -> local venv, install, run the test suite (what CI runs)
PY ?= python3
VENV ?= .venv
BIN = $(VENV)/bin

$(BIN)/deltann: pyproject.toml
	$(PY) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e ".[test]"
	touch $(BIN)/deltann

install: $(BIN)/deltann

run: install
	$(BIN)/deltann demo

test: install
	$(BIN)/python -m pytest -n 2 tests

# the benchmarks add optional comparisons (matfree in bench_lanczos): the "bench" extra
bench-deps: install
	$(BIN)/pip install -q -e ".[test,bench]"

bench-quick: bench-deps
	$(BIN)/python -m benchmarks run --quick

bench: bench-deps
	$(BIN)/python -m benchmarks run

.PHONY: install run test bench-deps bench-quick bench
