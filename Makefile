# The README's two commands: `make demo` and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEMO_STAMP := $(VENV)/.demo-installed
#: make test fails below this line coverage of smoothclient (per cent)
COVERAGE_FLOOR := 93

.PHONY: demo test test-fast lint typecheck pytest bench fuzz clean

# The venv gets no pip of its own (ensurepip takes seconds) when the system's pip can install
# into it (pip >= 22.3: --python); otherwise it gets its own.
$(BIN)/python:
	$(PYTHON) -m venv --without-pip $(VENV)
	$(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1 || $(BIN)/python -m ensurepip -q

# expanded when a recipe runs, so after the venv exists
PIP = $(shell $(PYTHON) -m pip --python $(BIN)/python --version >/dev/null 2>&1 \
	&& echo '$(PYTHON) -m pip --python $(BIN)/python' || echo '$(BIN)/python -m pip') \
	--disable-pip-version-check

# the demo needs only httpx: a fresh clone runs it without the dev toolchain
$(DEMO_STAMP): $(BIN)/python pyproject.toml
	$(PIP) install -q -e '.[httpx]'
	touch $(DEMO_STAMP)

$(STAMP): $(BIN)/python pyproject.toml
	$(PIP) install -q -e '.[dev,all]'
	touch $(STAMP) $(DEMO_STAMP)

demo: $(DEMO_STAMP)
	$(BIN)/smoothclient demo

# the type check runs beside the tests: they wait on local servers and clocks for a part of
# their time, and the whole of make test stays within three minutes on two cores
test: $(STAMP) lint
	$(MAKE) --no-print-directory -j2 --output-sync=line typecheck pytest

# the inner loop: no end-to-end tests, no herds in virtual time, stop at the first failure
test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -x -n 2 -m "not e2e and not herd"

lint: $(STAMP)
	$(BIN)/ruff check smoothclient tests examples benchmarks
	$(BIN)/ruff format --check smoothclient tests examples benchmarks

typecheck: $(STAMP)
	$(BIN)/mypy --strict smoothclient tests

# two workers (the machine's two cores): most tests wait on local servers or clocks.  The
# tests marked herd (thousands of requests through the pacer in virtual time) run untraced
# (tests/conftest.py): the floor counts the lines the other tests cover
pytest: $(STAMP)
	$(BIN)/python -m pytest -n 2 --dist worksteal --cov=smoothclient --cov-report=term:skip-covered \
		--cov-fail-under=$(COVERAGE_FLOOR)

# the transport's bounds under random server answers, and the Redis store's under random
# contents of its keys (a tenth as many: each takes round trips), far longer than make test
fuzz: $(STAMP)
	SMOOTHCLIENT_FUZZ_EXAMPLES=20000 $(BIN)/python -m pytest -q tests/edges/test_fuzz.py \
		tests/e2e/test_store_fuzz.py

bench: $(STAMP)
	$(PIP) install -q -e '.[dev,all,bench]'
	$(BIN)/python benchmarks/run_all.py

clean:
	rm -rf $(VENV) build dist .mypy_cache .ruff_cache .pytest_cache .hypothesis .coverage
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
