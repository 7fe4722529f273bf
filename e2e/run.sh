#!/usr/bin/env bash
# End-to-end test of `ctxmgr serve` with real clients installed from npm at pinned versions
# (Claude Code, Codex CLI, Gemini CLI, Qwen Code, OpenCode, AI SDK, LangChain JS, the openai,
# @anthropic-ai/sdk and @google/genai packages).
#
# Builds ctxmgr and the fake upstream, installs the clients with `npm ci` (package-lock.json),
# and runs e2e.mjs, which gives each client its own fake upstream, `ctxmgr serve` (small window,
# SQLite store) and network trap in a temporary directory, drives a tool-using conversation far
# beyond the window through it, and checks what the upstream received. One line per client
# case; the last line is "e2e: N passed, M failed". Exits non-zero on any failure. Bounded in
# time; every process it started is stopped on exit.
#
#   bash e2e/run.sh            # TURNS=60 by default; KEEP=1 keeps the work dir;
#                              # CASES=claude,langchain runs only the matching cases;
#                              # CODEX_SANDBOX=danger-full-access without user namespaces;
#                              # CTXMGR=path tests that ctxmgr binary instead of this tree's
set -euo pipefail
cd "$(dirname "$0")"
E2E_DIR=$(pwd)
ROOT=$(cd .. && pwd)
TURNS=${TURNS:-60}

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
  echo "e2e: node and npm are required" >&2
  exit 1
fi

WORK=$(mktemp -d "${TMPDIR:-/tmp}/ctxmgr-e2e.XXXXXX")
NODE_PID=""
cleanup() {
  status=$?
  if [ -n "$NODE_PID" ] && kill -0 "$NODE_PID" 2>/dev/null; then
    kill -TERM "$NODE_PID" 2>/dev/null || true # e2e.mjs stops its children on SIGTERM
    for _ in $(seq 1 50); do kill -0 "$NODE_PID" 2>/dev/null || break; sleep 0.1; done
    kill -KILL "$NODE_PID" 2>/dev/null || true
  fi
  # Whatever a case left behind (the runner stops its children itself; this is the backstop for a
  # runner that died): every process (or client process group, as -PID) e2e.mjs started.
  if [ -f "$WORK/pids" ]; then
    while read -r pid; do
      if kill -0 -- "$pid" 2>/dev/null; then kill -KILL -- "$pid" 2>/dev/null || true; fi
    done <"$WORK/pids"
  fi
  if [ "${KEEP:-0}" = 1 ] || [ "$status" -ne 0 ]; then
    echo "e2e: work directory kept: $WORK" >&2
    summary=$(cat "$WORK/summary" 2>/dev/null || echo "0 1")
  else
    summary=$(cat "$WORK/summary" 2>/dev/null || echo "0 1")
    rm -rf "$WORK"
  fi
  set -- $summary
  echo "e2e: $1 passed, $2 failed"
  exit "$status"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

echo "e2e: building ctxmgr and the fake upstream"
(cd "$ROOT" && go build -o "$WORK/ctxmgr" ./cmd/ctxmgr && go build -o "$WORK/fakeupstream" ./e2e/fakeupstream)
# CTXMGR=/path/to/ctxmgr runs the cases against another build (e.g. an older release).
if [ -n "${CTXMGR:-}" ]; then cp "$CTXMGR" "$WORK/ctxmgr"; echo "e2e: ctxmgr under test: $CTXMGR"; fi

if [ ! -f "$E2E_DIR/node_modules/.package-lock.json" ] ||
  [ "$E2E_DIR/package-lock.json" -nt "$E2E_DIR/node_modules/.package-lock.json" ]; then
  echo "e2e: npm ci"
  # npm ci refuses a lockfile without the optional binaries of other platforms (opencode's,
  # a clipboard module's), which a registry mirror may not serve; npm install then installs
  # the same locked versions and leaves the lockfile as it is.
  if ! (cd "$E2E_DIR" && npm ci --no-audit --no-fund --loglevel=error 2>"$WORK/npm-ci.log"); then
    echo "e2e: npm ci refused the lockfile ($(grep -m1 -o 'Missing: [^ ]*' "$WORK/npm-ci.log" || echo see npm-ci.log)); installing the locked versions with npm install --no-save"
    (cd "$E2E_DIR" && npm install --no-save --no-audit --no-fund --loglevel=error)
  fi
fi

echo "e2e: clients: $(cd "$E2E_DIR" && node -e 'const p=require("./package.json");console.log(Object.entries(p.dependencies).map(([k,v])=>k+"@"+v).join(" "))')"
# No LangSmith tracing, whatever the caller's environment says.
LANGCHAIN_TRACING_V2=false LANGSMITH_TRACING=false \
CTXMGR_BIN="$WORK/ctxmgr" FAKE_BIN="$WORK/fakeupstream" WORK="$WORK" TURNS="$TURNS" \
  node "$E2E_DIR/e2e.mjs" &
NODE_PID=$!
wait "$NODE_PID"
