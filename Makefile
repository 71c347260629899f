# Two commands a newcomer runs: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin

.PHONY: demo test lint format bench clean

# Installing takes a while and pip -q prints nothing: say what is happening first.
$(BIN)/swarmdeck: pyproject.toml
	@echo "swarmdeck: creating $(VENV) and installing swarmdeck with its dev extras (about a minute the first time)..."
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[dev]'
	@echo "swarmdeck: installed in $(VENV)"
	touch $(BIN)/swarmdeck

# bubblewrap sandboxes shell tools; without it (and without Landlock) read-only modes get
# no shell and code mode refuses it (see README, Security).
demo: $(BIN)/swarmdeck
	@echo "swarmdeck: checking the sandbox (bubblewrap)..."
	bash scripts/test-deps --sandbox
	@echo "swarmdeck: starting the demo..."
	$(BIN)/swarmdeck demo

# The suite runs on TEST_WORKERS processes (pytest-xdist; each starts its own PostgreSQL
# cluster). Most tests wait on child processes and sockets, so a 2-core machine keeps three
# busy; `make test TEST_WORKERS=0` runs them one after another.
TEST_WORKERS ?= 3

# Tests need bubblewrap for the sandbox tests and PostgreSQL binaries for the
# throwaway cluster; scripts/test-deps installs them where it can (root + apt).
test: $(BIN)/swarmdeck
	bash scripts/test-deps
	$(BIN)/ruff check src tests bench
	$(BIN)/ruff format --check src tests bench
	$(BIN)/lint-imports
	$(BIN)/pytest -q -n $(TEST_WORKERS) --dist worksteal --durations=15

lint: $(BIN)/swarmdeck
	$(BIN)/ruff check --fix src tests bench
	$(BIN)/ruff format src tests bench

bench: $(BIN)/swarmdeck
	$(BIN)/python bench/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache
