# Two entry points for a fresh clone: `make demo` (set up, seed a fresh demo store and
# serve the debugger) and `make test` (set up, run every test suite).
.PHONY: setup demo walkthrough test test-unit test-slow test-e2e typecheck bench bench-agents clean

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

bench:
	@bash scripts/setup.sh requirements/bench.txt
	.venv/bin/python bench/run.py

bench-agents:
	@bash scripts/setup.sh requirements/bench.txt
	.venv/bin/python bench/agents.py --scaling

clean:
	rm -rf .venv demo.db demo.db-wal demo.db-shm .pytest_cache .hypothesis e2e/artifacts
