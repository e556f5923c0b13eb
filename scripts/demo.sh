#!/usr/bin/env bash
# The command-line tour: run the refund example through the CLI,
# answer its interrupt, show every checkpoint, then travel in time: diff two steps,
# fork with a patched amount (effects mocked: nothing is paid twice), replay the run,
# export its thread and import it elsewhere; then a two-turn conversation and its event
# stream. Each time in a new folder of its own (SQLite, no server), unless HARNESS_DB names a
# store: a second tour of the same store would show the first one's runs and turns too.
set -euo pipefail
cd "$(dirname "$0")/.."
WORK=$(mktemp -d "${TMPDIR:-/tmp}/harness-walkthrough.XXXXXX")
export HARNESS_DB="${HARNESS_DB:-sqlite:///$WORK/demo.db}"
echo "(the store: $HARNESS_DB)"
H=.venv/bin/harness

echo "== harness run examples.refund:graph --input '{\"order_id\": 8}'"
$H run examples.refund:graph --input '{"order_id": 8}' || true
RUN=$($H runs --limit 1 --json | .venv/bin/python -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')

echo; echo "== an invalid answer is rejected and the run stays paused"
$H resume "$RUN" --response '{"approve": "perhaps"}' || true

echo; echo "== harness resume $RUN --response '{\"approve\": true, \"note\": \"looks right\"}'"
$H resume "$RUN" --response '{"approve": true, "note": "looks right"}'

PY=.venv/bin/python
cp_after() {  # the checkpoint of run $1 into which node $2 was folded
  $H history "$1" --json --no-state | $PY -c "import json,sys; print(next(c['id'] for c in json.load(sys.stdin) if '$2' in c['nodes']))"
}
LOOKUP=$(cp_after "$RUN" lookup); PAY=$(cp_after "$RUN" pay)

echo; echo "== harness history $RUN"
$H history "$RUN"

echo; echo "== harness diff (after lookup -> after pay)"
$H diff "$LOOKUP" "$PAY"

echo; echo "== harness fork (after lookup) --patch '{\"amount\": 120.0}': the refund request changed, so it asks"
$H fork "$LOOKUP" --patch '{"amount": 120.0}' || true
FORK=$($H runs --limit 1 --json | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')

echo; echo "== answer the unrecorded effect with a mock result; then the reviewer"
$H resume "$FORK" --response '{"action": "mock", "result": "rcpt-what-if"}' || true
$H resume "$FORK" --response '{"approve": false, "note": "what-if branch"}'

echo; echo "== harness replay $RUN: same code, every effect mocked, recorded answers re-used"
$H replay "$RUN"

echo; echo "== harness export $RUN, then import into another database"
$H export "$RUN" --out "$WORK/thread.json"
$H import "$WORK/thread.json" --db "sqlite:///$WORK/imported.db"

echo; echo "== a plan (JSON) naming registered functions"
$H run examples/pipeline.json

echo; echo "== a conversation: two turns on thread 'ada' (each starts from the thread's state)"
$H run examples.chat:graph --input '{"messages": ["customer: where is order 7?"]}' --thread ada > /dev/null
$H run examples.chat:graph --input '{"messages": ["customer: thanks!"]}' --thread ada > /dev/null
$H thread ada
TURN=$($H runs --thread ada --limit 1 --json | $PY -c 'import json,sys; print(json.load(sys.stdin)[0]["id"])')

echo; echo "== harness watch $TURN: the turn's recorded events, as a follower in another process sees them"
$H watch "$TURN"

echo; echo "== an agent: a tool loop (model, tool, model#1, …), a map over what it found (read[0], …), a review subgraph"
$H run examples.agent:graph --input '{"question": "tides"}'

echo; echo "== harness runs"
$H runs
