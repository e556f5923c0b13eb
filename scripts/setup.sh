#!/usr/bin/env bash
# Create .venv/ and install Shadow Harness with its pinned dependencies.
# Safe to run again: it does nothing when the pins have not changed.
set -euo pipefail
cd "$(dirname "$0")/.."
REQS="${1:-requirements/dev.txt}"

VENV="${VENV:-.venv}"

# The interpreter: $PYTHON if given; otherwise Python 3.12 where one is installed (on PATH or
# under pyenv: it starts node attempts eagerly, a turn of the event loop less per node), else python3.
runs_311_or_newer() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else 1)' 2>/dev/null; }
PY=""
if [ -n "${PYTHON:-}" ]; then
  PY="$PYTHON"
else
  pyenv_root="$(pyenv root 2>/dev/null || true)"
  for candidate in python3.12 ${pyenv_root:+"$pyenv_root"/versions/3.12*/bin/python3.12} python3; do
    if runs_311_or_newer "$candidate"; then PY="$candidate"; break; fi
  done
fi
if [ -z "$PY" ] || ! runs_311_or_newer "$PY"; then
  echo "setup: Python 3.11 or newer is required (python3${PYTHON:+, or $PYTHON, is older or missing})" >&2; exit 1
fi

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

[ -x "$VENV/bin/python" ] || "$PY" -m venv "$VENV"
if [ -z "${PYTHON:-}" ] && [ "$("$VENV/bin/python" -c 'import sys; print(sys.version_info[:2] < (3, 12))')" = True ] \
   && "$PY" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; then
  echo "setup: $VENV/ runs Python 3.11 though $PY is installed; 'rm -rf $VENV' and set up again to use it" >&2
fi
[ -x "$VENV/bin/uv" ] || "$VENV/bin/pip" install --quiet --disable-pip-version-check uv==0.9.*  2>/dev/null \
  || "$VENV/bin/pip" install --quiet --disable-pip-version-check uv

stamp="$VENV/.stamp-$(basename "$REQS")"
want="$(cat "$REQS" pyproject.toml | sha256sum | cut -c1-16)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" -r "$REQS"
  "$VENV/bin/uv" pip install --quiet --python "$VENV/bin/python" --no-deps -e .
  echo "$want" > "$stamp"
fi
