# Two entry points for a fresh clone: `make demo` (set up, run the example) and
# `make test` (set up, run every test suite).
.PHONY: setup demo test test-unit test-slow typecheck bench bench-agents clean

setup:
	@bash scripts/setup.sh

demo: setup
	@bash scripts/demo.sh

test-unit: setup
	.venv/bin/python -m pytest -m "not slow"

test-slow: setup
	.venv/bin/python -m pytest -m slow

typecheck: setup
	.venv/bin/python -m mypy --strict runtime server

test: setup typecheck
	.venv/bin/python -m pytest

bench:
	@bash scripts/setup.sh requirements/bench.txt
	.venv/bin/python bench/run.py

bench-agents:
	@bash scripts/setup.sh requirements/bench.txt
	.venv/bin/python bench/agents.py --scaling

clean:
	rm -rf .venv demo.db demo.db-wal demo.db-shm .pytest_cache .hypothesis
