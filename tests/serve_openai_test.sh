#!/usr/bin/env bash
# `tandem serve` with 2 expert workers on the default model, driven by the
# official openai npm client (tests/npm/openai_client.mjs); then SIGTERM must
# stop it cleanly and leave no run directory behind.
#   serve_openai_test.sh BUILD_DIR NODE_MODULES
set -euo pipefail
build=$1
modules=$2
work=$(mktemp -d)
base=$work/runs
mkdir -m 700 "$base"
cleanup() { [[ -n "${pid:-}" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
TANDEM_RUN_BASE=$base "$build/bin/tandem" serve --port 0 --expert-workers 2 --api-key secret-key \
  >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/serve.log" | grep -o '[0-9]*$' || true)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log"; echo "serve exited early"; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { cat "$work/serve.log"; echo "serve did not start listening"; exit 1; }
# Without the key: 401.
code=$(curl -s -o /dev/null -w '%{http_code}' "http://127.0.0.1:$port/v1/models" || true)
[[ "$code" == 401 ]] || { echo "expected 401 without the API key, got $code"; exit 1; }
# The client lives beside its node_modules so that `import "openai"` resolves.
cp "$(dirname "$0")/npm/openai_client.mjs" "$modules/../openai_client.mjs"
node "$modules/../openai_client.mjs" "http://127.0.0.1:$port/v1" secret-key || { tail -20 "$work/serve.log"; exit 1; }
# The 8 concurrent streams shared forward passes (continuous batching).
batch=$(curl -s -H 'Authorization: Bearer secret-key' "http://127.0.0.1:$port/metrics" |
  awk '$1 == "tandem_step_sequences_max" { print $2 }')
[[ -n "$batch" && "$batch" -ge 2 ]] || { echo "no batched steps (tandem_step_sequences_max='$batch')"; exit 1; }
echo "largest batch: $batch sequences"
kill -TERM "$pid"
for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
if kill -0 "$pid" 2>/dev/null; then echo "serve did not stop on SIGTERM"; exit 1; fi
wait "$pid" || { echo "serve exited with $?"; tail -20 "$work/serve.log"; exit 1; }
pid=
left=$(find "$base" -mindepth 1 | head -5)
[[ -z "$left" ]] || { echo "left behind: $left"; exit 1; }
grep -q "expert worker(s) serving" "$work/serve.log" || { echo "no expert workers in the log"; exit 1; }
echo "serve_openai_test: ok"
