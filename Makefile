# Two entry points for a fresh clone: `make demo` (set up, seed a fresh demo store and
# serve the debugger) and `make test` (set up, run every test suite).
.PHONY: setup demo walkthrough test test-unit test-3.11 test-slow test-e2e typecheck bench bench-agents clean

setup:
	@bash scripts/setup.sh

demo: setup
	.venv/bin/python -m server.cli demo $(if $(PORT),--port $(PORT))

walkthrough: setup
	@bash scripts/demo.sh

# The fast suite runs on every core (pytest-xdist; WORKERS=0 for one process). The crash
# and browser suites stay in one process: they time real subprocesses and a browser.
WORKERS ?= auto

test-unit: setup
	.venv/bin/python -m pytest -m "not slow" -n $(WORKERS)

test-slow: setup
	.venv/bin/python -m pytest -m slow

typecheck: setup
	.venv/bin/python -m mypy --strict runtime server

test-e2e: setup
	.venv/bin/python -m pytest e2e

# the browser tests run on their own: Playwright keeps an event loop for its session
test: setup typecheck
	.venv/bin/python -m pytest -m "not slow" -n $(WORKERS)
	.venv/bin/python -m pytest -m slow
	.venv/bin/python -m pytest e2e
	@$(MAKE) --no-print-directory test-3.11

# The fast suite once more on Python 3.11 when .venv/ runs a newer one: 3.11 starts node
# attempts as tasks that wait for the event loop's next turn, 3.12 eagerly (``executor.EAGER``).
test-3.11: setup
	@if .venv/bin/python -c 'import sys; sys.exit(sys.version_info[:2] == (3, 11))'; then \
	  if python3.11 -c '' 2>/dev/null; then \
	    PYTHON=python3.11 VENV=.venv-3.11 HARNESS_BROWSER=0 bash scripts/setup.sh && \
	    .venv-3.11/bin/python -m pytest -m "not slow" -n $(WORKERS); \
	  else echo "test-3.11: no python3.11 here; skipped"; fi; \
	fi

bench:
	@bash scripts/setup.sh requirements/bench.txt
	.venv/bin/python bench/run.py

bench-agents:
	@bash scripts/setup.sh requirements/bench.txt
	.venv/bin/python bench/agents.py --scaling

clean:
	rm -rf .venv .venv-3.11 demo.db demo.db-wal demo.db-shm .pytest_cache .hypothesis e2e/artifacts
