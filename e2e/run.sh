#!/usr/bin/env bash
# End-to-end test of `ctxmgr serve` with the official npm SDKs (openai, @anthropic-ai/sdk).
#
# Builds ctxmgr and the fake upstream, starts the fake upstream on a free 127.0.0.1 port, and
# runs e2e.mjs, which starts (and restarts) the proxy with a small window and a SQLite store in
# a temporary directory, drives a 60-turn tool-using conversation through each SDK, and checks
# every request the upstream received. Exits non-zero on any failure. Bounded in time; every
# process it started is stopped on exit.
#
#   bash e2e/run.sh            # WINDOW=8192 TURNS=60 by default; KEEP=1 keeps the work dir
set -euo pipefail
cd "$(dirname "$0")"
E2E_DIR=$(pwd)
ROOT=$(cd .. && pwd)
WINDOW=${WINDOW:-8192}
TURNS=${TURNS:-60}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "e2e: node and npm are required" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ctxmgr-e2e.XXXXXX")
FAKE_PID=""
cleanup() {
  status=$?
  if [ -f "$WORK/proxy.pid" ]; then
    pid=$(cat "$WORK/proxy.pid")
    if kill -0 "$pid" 2>/dev/null; then kill -KILL "$pid" 2>/dev/null || true; fi
  fi
  if [ -n "$FAKE_PID" ] && kill -0 "$FAKE_PID" 2>/dev/null; then
    kill -TERM "$FAKE_PID" 2>/dev/null || true
    wait "$FAKE_PID" 2>/dev/null || true
  fi
  if [ "$status" -ne 0 ]; then
    echo "e2e: failed; last lines of the proxy log:" >&2
    tail -n 30 "$WORK/proxy.log" 2>/dev/null >&2 || true
  fi
  if [ "${KEEP:-0}" = 1 ] || [ "$status" -ne 0 ]; then
    echo "e2e: work directory kept: $WORK" >&2
  else
    rm -rf "$WORK"
  fi
  if [ "$status" -eq 0 ]; then echo "e2e: 1 passed, 0 failed"; else echo "e2e: 0 passed, 1 failed"; fi
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "e2e: building ctxmgr and the fake upstream"
(cd "$ROOT" && go build -o "$WORK/ctxmgr" ./cmd/ctxmgr && go build -o "$WORK/fakeupstream" ./e2e/fakeupstream)

if [ ! -d "$E2E_DIR/node_modules/openai" ] || [ ! -d "$E2E_DIR/node_modules/@anthropic-ai/sdk" ] ||
  [ "$E2E_DIR/package-lock.json" -nt "$E2E_DIR/node_modules/.package-lock.json" ]; then
  echo "e2e: npm ci"
  (cd "$E2E_DIR" && npm ci --no-audit --no-fund --loglevel=error)
fi

"$WORK/fakeupstream" -addr-file "$WORK/upstream.addr" -log "$WORK/records.jsonl" -window "$WINDOW" 2>"$WORK/upstream.log" &
FAKE_PID=$!
for _ in $(seq 1 100); do
  [ -s "$WORK/upstream.addr" ] && break
  sleep 0.1
done
if [ ! -s "$WORK/upstream.addr" ]; then
  echo "e2e: the fake upstream did not start" >&2
  cat "$WORK/upstream.log" >&2
  exit 1
fi
UPSTREAM_URL="http://$(cat "$WORK/upstream.addr")"
echo "e2e: fake upstream at $UPSTREAM_URL; window $WINDOW; $TURNS turns per SDK"

CTXMGR_BIN="$WORK/ctxmgr" UPSTREAM_URL="$UPSTREAM_URL" WORK="$WORK" RECORDS="$WORK/records.jsonl" \
  WINDOW="$WINDOW" TURNS="$TURNS" timeout 600 node "$E2E_DIR/e2e.mjs"

# API keys are never logged.
if grep -q -e 'sk-e2e-openai' -e 'sk-ant-e2e' "$WORK/proxy.log"; then
  echo "e2e: FAIL: an API key appears in the proxy log" >&2
  exit 1
fi
grep -q '"session":"e2e-openai"' "$WORK/proxy.log" || { echo "e2e: FAIL: the proxy log lacks session ids" >&2; exit 1; }
echo "e2e: the proxy log carries session ids and no API key"
