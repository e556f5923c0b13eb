#!/usr/bin/env bash
# The main job, until the web debugger lands: run the refund example through the CLI,
# answer its interrupt, and show every checkpoint. Uses ./demo.db (SQLite, no server).
set -euo pipefail
cd "$(dirname "$0")/.."
export HARNESS_DB="${HARNESS_DB:-sqlite:///demo.db}"
H=.venv/bin/harness

echo "== harness run examples.refund:graph --input '{\"order_id\": 8}'"
$H run examples.refund:graph --input '{"order_id": 8}' || true
RUN=$($H runs --limit 1 --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')

echo; echo "== an invalid answer is rejected and the run stays paused"
$H resume "$RUN" --response '{"approve": "perhaps"}' || true

echo; echo "== harness resume $RUN --response '{\"approve\": true, \"note\": \"looks right\"}'"
$H resume "$RUN" --response '{"approve": true, "note": "looks right"}'

echo; echo "== a plan (JSON) naming registered functions"
$H run examples/pipeline.json

echo; echo "== harness runs"
$H runs
