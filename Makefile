# River: `make run` tries it out in one process; `make test` runs the whole suite.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(VENV)/bin/pip
HOST ?= 127.0.0.1
PORT ?= 8000

.PHONY: run test test-fast install install-dev bytecode lint bench faults fuzz migrate clean

UV_VERSION := 0.13.9
# Installs with uv (pinned, itself installed by pip from the same package index) when it
# could be installed into the virtualenv, else with pip. Either way from the index pip is
# configured to use: uv is given pip's index, extra indexes and find-links.
# Like pip, uv writes the packages' bytecode at install (--compile-bytecode), so no command
# compiles them on its first run (nor on every run where PYTHONDONTWRITEBYTECODE is set).
PIP_SETTING = $(shell $(PIP) config get global.$(1) 2>/dev/null)
UV_FROM_PIP = $(if $(call PIP_SETTING,index-url),--index-url $(call PIP_SETTING,index-url)) \
	$(foreach url,$(call PIP_SETTING,extra-index-url),--extra-index-url $(url)) \
	$(foreach dir,$(sort $(PIP_FIND_LINKS) $(call PIP_SETTING,find-links)),--find-links $(dir))
INSTALL = if [ -x $(VENV)/bin/uv ]; then \
		VIRTUAL_ENV=$(VENV) $(VENV)/bin/uv pip install --quiet --compile-bytecode --python $(PY) --index-strategy unsafe-best-match \
			$(UV_FROM_PIP) -r $(1) || $(PIP) install --quiet -r $(1); \
	else $(PIP) install --quiet -r $(1); fi

# River's own modules compiled ahead of the command (compileall skips the up-to-date ones:
# 0.3 s), so that no process compiles them as it starts: where PYTHONDONTWRITEBYTECODE is
# set, every process would, about 0.5 CPU-s each (docs/benchmarks.md, "Cold starts").
PACKAGES := $(patsubst %/__init__.py,%,$(wildcard */__init__.py))
BYTECODE = $(PY) -m compileall -q $(PACKAGES) manage.py

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(PIP) install --quiet uv==$(UV_VERSION) || echo "uv could not be installed; installing with pip"

$(VENV)/.installed: requirements.txt | $(VENV)/bin/python
	$(call INSTALL,requirements.txt)
	touch $@

$(VENV)/.installed-dev: requirements.txt requirements-dev.txt $(VENV)/.installed
	$(call INSTALL,requirements-dev.txt)
	touch $@

install: $(VENV)/.installed

install-dev: $(VENV)/.installed-dev

bytecode: | $(VENV)/bin/python
	$(BYTECODE)

run: install
	$(BYTECODE)
	DEBUG=$${DEBUG:-true} $(PY) manage.py migrate --no-input -v0
	DEBUG=$${DEBUG:-true} $(PY) manage.py seed_demo
	DEBUG=$${DEBUG:-true} $(PY) manage.py runriver --host $(HOST) --port $(PORT)

# The suite in TEST_WORKERS pytest-xdist processes (each with its own test database, Redis
# db and var directory; the browser tests all in one of them); TEST_WORKERS=0 runs it in
# one process. See docs/testing.md.
TEST_WORKERS ?= 2
test: install-dev
	$(BYTECODE)
	$(PY) scripts/test.py -n $(TEST_WORKERS) --dist loadfile $(ARGS)

# The fast lane: everything but the tests marked slow (browser, server and worker
# processes, transaction=True); see docs/testing.md.
test-fast: install-dev
	$(BYTECODE)
	$(PY) scripts/test.py -m "not slow" $(ARGS)

# Schemathesis against the OpenAPI document with many random examples per operation
# (CI runs the same test with a few derandomized ones as part of `make test`).
fuzz: install-dev
	$(BYTECODE)
	RIVER_FUZZ_MAX_EXAMPLES=$${RIVER_FUZZ_MAX_EXAMPLES:-200} RIVER_FUZZ_RANDOM=1 \
		$(PY) scripts/test.py -p no:cacheprovider -s tests/riverapp/test_schema_fuzz.py $(ARGS)

lint: install-dev
	$(VENV)/bin/ruff check .
	$(VENV)/bin/lint-imports
	$(VENV)/bin/mypy
	DEBUG=true $(PY) manage.py makemigrations --check --dry-run

# The benchmark harness (benchmarks/, outside the product); ARGS="--smoke" runs every
# section at a tiny size, ARGS="--help" lists the options. See docs/benchmarks.md.
bench: install-dev
	$(BYTECODE)
	DEBUG=$${DEBUG:-true} DATABASE_URL=$${BENCH_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/river_bench} \
		REDIS_URL=$${BENCH_REDIS_URL:-redis://127.0.0.1:6379/11} $(PY) -m benchmarks $(ARGS)

# Fault campaign: a private Redis on FAULTS_REDIS_PORT (started and restarted by the
# script) and a database of its own; see docs/faults.md. CI runs `make faults ARGS=--short`.
faults: install-dev
	$(BYTECODE)
	DEBUG=$${DEBUG:-true} DATABASE_URL=$${FAULTS_DATABASE_URL:-postgres://postgres@127.0.0.1:5432/river_faults_campaign} REDIS_URL=redis://127.0.0.1:$${FAULTS_REDIS_PORT:-6390}/0 $(PY) scripts/faults.py $(ARGS)

clean:
	rm -rf $(VENV) var
