#!/usr/bin/env bash
# `--hold expert:1` (logits), `--hold gpu:0` and `--split-roles --hold gpu:1` (serve): that process waits before its main loop and the launcher
# prints the gdb command that attaches and releases it. The test runs that
# exact command (in batch mode, passing the launcher's SIGTERM through) and
# the request must then complete. Bad --hold targets are refused by name.
#   hold_debugger_test.sh BUILD_DIR
set -euo pipefail
build=$1
if ! command -v gdb >/dev/null; then
  echo "SKIP: gdb is not installed (deploy/setup.sh installs it)"; exit 0
fi
work=$(mktemp -d)
base=$work/runs
mkdir -m 700 "$base"
cleanup() { [[ -n "${pid:-}" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
tandem=$build/bin/tandem
model=$build/models/default.gguf
# Sets cmd to the gdb command that LOG shows once the process in $pid holds.
await_hold() {
  local log=$1
  cmd=
  for _ in $(seq 1 600); do
    cmd=$(grep -o "gdb -p [0-9]* .*" "$log" | head -1 || true)
    [[ -n "$cmd" ]] && break
    kill -0 "$pid" 2>/dev/null || { cat "$log"; echo "tandem exited before holding"; exit 1; }
    sleep 0.1
  done
  [[ -n "$cmd" ]] || { cat "$log"; echo "no debugger command printed"; exit 1; }
  echo "printed: $cmd"
}

TANDEM_RUN_BASE=$base "$tandem" logits --model "$model" --tokens "1 2 3 4" --greedy 3 \
  --expert-workers 2 --hold expert:1 >"$work/out.json" 2>"$work/err.log" &
pid=$!
await_hold "$work/err.log"
held=$(echo "$cmd" | grep -o -- '-p [0-9]*' | grep -o '[0-9]*')
# Held means nothing was computed: no output yet, and the worker still waits.
sleep 0.5
[[ ! -s "$work/out.json" ]] || { echo "tandem answered while expert:1 was held"; exit 1; }
kill -0 "$held" || { echo "the held worker $held is gone"; exit 1; }
eval "timeout 120 gdb -batch -nx -ex 'handle SIGTERM nostop noprint pass' ${cmd#gdb }" >"$work/gdb.log" 2>&1 || true
grep -q "exited normally\|exited with code" "$work/gdb.log" || { cat "$work/gdb.log"; echo "gdb did not run the worker to its end"; exit 1; }
wait "$pid" || { cat "$work/err.log"; echo "tandem failed after the release"; exit 1; }
pid=
grep -q '"greedy":\[[0-9]' "$work/out.json" || { head -c 300 "$work/out.json"; echo "no logits"; exit 1; }

# The same with `serve --hold gpu:0`, and with `serve --split-roles --hold
# gpu:1` (the prefill worker): /health says "starting" while it is held;
# once released through the printed command, a completion succeeds.
for hold in "gpu:0" "gpu:1 --split-roles"; do
  target=${hold%% *}
  # shellcheck disable=SC2086
  TANDEM_RUN_BASE=$base "$tandem" serve --model "$model" --port 0 --expert-workers 2 --hold $hold \
    >"$work/serve.log" 2>&1 &
  pid=$!
  await_hold "$work/serve.log"
  sleep 0.5
  sock=$(ls "$base"/run-*/control.sock)
  port=
  for _ in $(seq 1 50); do
    port=$(grep -o "listening on http://127.0.0.1:[0-9]*" "$base"/run-*/coordinator-0.log 2>/dev/null | grep -o '[0-9]*$' || true)
    [[ -n "$port" ]] && break
    sleep 0.1
  done
  [[ -n "$port" && -S "$sock" ]] || { cat "$work/serve.log"; echo "no coordinator while $target is held"; exit 1; }
  code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/health" || true)
  [[ "$code" == 503 ]] || { echo "/health while $target is held: $code (want 503)"; exit 1; }
  eval "timeout 120 gdb -batch -nx -ex 'handle SIGTERM nostop noprint pass' ${cmd#gdb }" >"$work/gdb-serve.log" 2>&1 &
  gdbpid=$!
  answer=$(curl -s -m 60 -H 'Content-Type: application/json' \
    -d '{"prompt": "Hello", "max_tokens": 8, "temperature": 0}' "http://127.0.0.1:$port/v1/completions")
  [[ "$answer" == *'"finish_reason":"length"'* ]] || { echo "after releasing $target: $answer"; exit 1; }
  TANDEM_RUN_BASE=$base "$tandem" stop --timeout 20 >/dev/null
  wait "$pid" || { tail -20 "$work/serve.log"; echo "serve failed after the release"; exit 1; }
  pid=
  wait "$gdbpid" || true
  grep -q "exited normally\|exited with code" "$work/gdb-serve.log" || { cat "$work/gdb-serve.log"; echo "gdb did not run $target to its end"; exit 1; }
done

# Targets that do not exist are refused with the reason.
for bad in coordinator:0 expert:2 loader:1 nonsense; do
  if TANDEM_RUN_BASE=$base "$tandem" logits --model "$model" --tokens "1" --expert-workers 2 --hold "$bad" \
       >/dev/null 2>"$work/bad.log"; then
    echo "--hold $bad was accepted"; exit 1
  fi
  grep -q -- "--hold" "$work/bad.log" || { cat "$work/bad.log"; echo "--hold $bad: no reason given"; exit 1; }
done
left=$(find "$base" -mindepth 1 | head -5)
[[ -z "$left" ]] || { echo "left behind: $left"; exit 1; }
echo "hold_debugger_test: ok"
