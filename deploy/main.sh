#!/usr/bin/env bash
# Installs dependencies, builds, and runs Tandem's main job on the embedded
# default model (made by the project's own generator at build time, so no
# ../shared is needed): `tandem serve` starts the loader and the expert
# workers, then a chat completion is asked through the OpenAI-compatible HTTP
# API and its answer printed; the server is stopped afterwards.
# With arguments, they are passed to `tandem serve` instead and it keeps
# serving (e.g. bash deploy/main.sh --model M.gguf --port 8080).
set -euo pipefail
cd "$(dirname "$0")/.."
bash deploy/setup.sh
bash deploy/build.sh
if (($#)); then exec build/bin/tandem serve "$@"; fi
log=$(mktemp)
build/bin/tandem serve --port 0 >"$log" 2>&1 &
pid=$!
trap 'kill "$pid" 2>/dev/null || true; rm -f "$log"' EXIT
port=
for _ in $(seq 1 600); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$log" | grep -o '[0-9]*$' || true)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$log"; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { cat "$log"; echo "tandem serve did not start"; exit 1; }
cat "$log"
echo "--- POST /v1/chat/completions (the default model has random weights: expect gibberish)"
curl -sS "http://127.0.0.1:$port/v1/chat/completions" -H 'Content-Type: application/json' \
  -d '{"messages":[{"role":"user","content":"Hello!"}],"max_tokens":16,"temperature":0}'
echo
kill -TERM "$pid"
wait "$pid"
