#!/usr/bin/env bash
# Create .venv/ and install Shadow Harness with its pinned dependencies.
# Safe to run again: it does nothing when the pins have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
REQS="${1:-requirements/dev.txt}"

if ! command -v python3 >/dev/null; then
  echo "setup: python3 (3.11 or newer) is required" >&2; exit 1
fi
python3 - <<'PY' || { echo "setup: Python 3.11 or newer is required" >&2; exit 1; }
import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)
PY

# System tools: graphviz draws the debugger's graphs; Chromium runs the browser tests.
need=()
command -v dot >/dev/null || need+=(graphviz)
if [ "${HARNESS_BROWSER:-1}" = 1 ] && ! command -v chromium >/dev/null && [ -z "${CHROMIUM_PATH:-}" ]; then
  need+=(chromium)
fi
if [ ${#need[@]} -gt 0 ]; then
  if [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
    echo "setup: installing ${need[*]} (apt)" >&2
    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${need[@]}" >/dev/null
  else
    echo "setup: please install ${need[*]} (Debian: sudo apt-get install ${need[*]})" >&2; exit 1
  fi
fi

[ -x .venv/bin/python ] || python3 -m venv .venv
[ -x .venv/bin/uv ] || .venv/bin/pip install --quiet --disable-pip-version-check uv==0.9.*  2>/dev/null \
  || .venv/bin/pip install --quiet --disable-pip-version-check uv

stamp=".venv/.stamp-$(basename "$REQS")"
want="$(cat "$REQS" pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/uv pip install --quiet --python .venv/bin/python -r "$REQS"
  .venv/bin/uv pip install --quiet --python .venv/bin/python --no-deps -e .
  echo "$want" > "$stamp"
fi
