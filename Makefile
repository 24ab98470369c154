# Two commands set everything up on a fresh machine (see README.md):
#   make run    the dashboard on the embedded PostgreSQL (pass options with ARGS="...")
#   make test   the whole test suite against a real PostgreSQL started by the tests
# and `make lint` runs ruff and mypy (CI runs it before the tests).
VENV ?= .venv
PYTHON ?= python3
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# -qq: pip's and setuptools' notices (the editable-install banner among them) are not for
# newcomers; errors still show.
PIP_INSTALL := $(PY) -m pip install -qq

.PHONY: run test lint clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PIP_INSTALL) --upgrade pip
	$(PIP_INSTALL) -e '.[test,lint]'
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/queuetop $(ARGS)

test: $(STAMP)
	$(PY) -m pytest $(PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
