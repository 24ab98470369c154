# Two commands set everything up on a fresh machine (see README.md):
#   make run    the dashboard on the embedded PostgreSQL (pass options with ARGS="...")
#   make test   the whole test suite against a real PostgreSQL started by the tests
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

.PHONY: run test lint clean

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

test: $(STAMP) $(PEERS_STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
