# The two commands of the README: `make run` (server with demo models) and `make test`.
# The interpreter .venv is built from: scripts/pick_python.sh (the distribution's optimised CPython
# 3.11 where it has venv, else python3). A venv built from another interpreter is rebuilt.
PYTHON ?= $(shell scripts/pick_python.sh)
VENV ?= .venv
PY := $(VENV)/bin/python
HOST ?= 127.0.0.1
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
PG_URL ?= postgres://postgres@127.0.0.1:5432/test

.PHONY: FORCE venv test-tools run demo docs test test-docs test-sqlite test-postgres test-worker-mode bench profile triton-qa proto lint clean

venv: $(VENV)/.installed node_modules/.installed

# The web UI's browser libraries (package.json: Chart.js), served as static files from node_modules/.
node_modules/.installed: package.json package-lock.json
	npm ci --no-audit --no-fund --ignore-scripts
	touch $@

# Which interpreter the venv was built from; rewritten (and the venv removed) only when it changes.
$(VENV)/.interpreter: FORCE
	@want=$$(realpath "$$(command -v $(PYTHON))"); \
	if [ "$$(cat $@ 2>/dev/null)" != "$$want" ]; then \
	  [ ! -e $(VENV) ] || echo "$(VENV) was built from another interpreter: rebuilding it from $$want"; \
	  rm -rf $(VENV); mkdir -p $(VENV); echo "$$want" > $@; \
	fi

$(VENV)/.installed: requirements.txt requirements-dev.txt $(VENV)/.interpreter
	$(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install --quiet --upgrade pip
	$(VENV)/bin/pip install --quiet -r requirements-dev.txt
	touch $@

demo: venv
	$(PY) manage.py build_demo_repository var/demo_repository

run: demo
	$(PY) manage.py serve --model-repository var/demo_repository --host $(HOST) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT)

# Everything on SQLite (in-process ONNX Runtime; tests/workers start their own
# Celery workers on the Redis at 127.0.0.1:6379; the management API's contract
# test runs schemathesis against a live server), the registry tests again on
# PostgreSQL, and every live-server test again through a pinned Celery worker.
test: test-docs test-sqlite test-postgres test-worker-mode

# The documentation site (mkdocs.yml, docs/): `make docs` serves it on http://$(DOCS_ADDR) and
# rebuilds on edits; `make test` builds it with --strict into var/site (ignored), so a broken
# link or anchor fails.
DOCS_ADDR ?= 127.0.0.1:8008
MKDOCS := NO_MKDOCS_2_WARNING=1 $(VENV)/bin/mkdocs
docs: venv
	$(MKDOCS) serve --dev-addr $(DOCS_ADDR)

test-docs: venv
	$(MKDOCS) build --strict --site-dir var/site

# What the tests drive besides Python packages: Debian packages and Triton's perf_analyzer.
test-tools: venv
	scripts/install_system_deps.sh libb64-0d chromium
	scripts/install_perf_analyzer.sh $(VENV)

# Two pytest workers (a file's tests stay together; each worker has a Redis of its own), then the
# browser tests on their own (Playwright's sync API keeps an event loop that Django's ORM refuses).
test-sqlite: test-tools
	$(PY) -m pytest -n 2 --dist loadfile --ignore=tests/browser
	$(PY) -m pytest tests/browser

test-postgres: venv
	DATABASE_URL=$(PG_URL) $(PY) -m pytest -m db

test-worker-mode: test-tools
	MODELHOST_TEST_EXECUTOR=workers $(PY) -m pytest -m interop

bench: venv
	scripts/install_system_deps.sh wrk nghttp2-client
	$(PY) bench/run.py

# Where the time of a small request goes: in-process timings, pyinstrument
# samples and serve against fixed-answer servers (writes bench/PROFILE.md).
profile: venv
	scripts/install_system_deps.sh wrk nghttp2-client
	$(PY) bench/profile_hot_path.py

# Triton's own QA tests, unchanged, against serve (not in `make test`: needs Triton's
# server sources, a checkout or a git clone: TRITON_SERVER=/path/to/server).
triton-qa: venv
	$(PY) bench/triton_qa.py --triton-server $(TRITON_SERVER)

PROTO_OUT ?= .
proto: venv
	mkdir -p $(PROTO_OUT)
	$(PY) -m grpc_tools.protoc -I. --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) inference/grpc/proto/model_config.proto
	$(PY) -m grpc_tools.protoc -I. --python_out=$(PROTO_OUT) --pyi_out=$(PROTO_OUT) --grpc_python_out=$(PROTO_OUT) \
		inference/grpc/proto/oip.proto

lint: venv
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .
	$(VENV)/bin/lint-imports

clean:
	rm -rf var/demo_repository
