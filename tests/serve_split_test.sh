#!/usr/bin/env bash
# `tandem serve --split-roles` (a prefill gpu worker handing each prompt's KV
# cache to a decode gpu worker) with 2 expert workers on the default model:
# `tandem ps` shows both gpu workers; the official openai npm client
# (tests/npm/openai_client.mjs) runs its requests, then SIGKILLs the prefill
# worker, the decode worker and an expert worker in turn under 8 concurrent
# greedy streams, which must finish with the undisturbed tokens, then the
# coordinator; prompts were handed over (/metrics); `tandem scale` moves both
# gpu workers to new rings; `--hold gpu:1` is accepted only in this mode, and
# `tandem stop` leaves nothing behind; no transfer file outlives its step.
#   serve_split_test.sh BUILD_DIR NODE_MODULES
set -euo pipefail
build=$1
modules=$2
work=$(mktemp -d)
base=$work/runs
mkdir -m 700 "$base"
cleanup() { [[ -n "${pid:-}" ]] && kill -9 "$pid" 2>/dev/null; rm -rf "$work"; }
trap cleanup EXIT
tandem() { TANDEM_RUN_BASE=$base "$build/bin/tandem" "$@"; }

# gpu:1 exists only with --split-roles.
if tandem serve --port 0 --expert-workers 2 --hold gpu:1 >"$work/hold.log" 2>&1; then
  echo "--hold gpu:1 without --split-roles was accepted"; exit 1
fi
grep -q "no such process" "$work/hold.log" || { cat "$work/hold.log"; echo "--hold gpu:1: no reason given"; exit 1; }

tandem serve --split-roles --port 0 --expert-workers 2 >"$work/serve.log" 2>&1 &
pid=$!
for _ in $(seq 1 300); do
  port=$(grep -o 'listening on http://127.0.0.1:[0-9]*' "$work/serve.log" | grep -o '[0-9]*$' || true)
  [[ -n "$port" ]] && break
  kill -0 "$pid" 2>/dev/null || { cat "$work/serve.log"; echo "serve exited early"; exit 1; }
  sleep 0.1
done
[[ -n "$port" ]] || { cat "$work/serve.log"; echo "serve did not start listening"; exit 1; }
ps_json() { tandem ps --json | python3 -c "$1" "${@:2}"; }
ps_json '
import json, sys
procs = json.load(sys.stdin)["runs"][0]["processes"]
gpus = sorted((p["index"], p["state"], p["note"]) for p in procs if p["role"] == "gpu")
assert [g[:2] for g in gpus] == [(0, "ready"), (1, "ready")], gpus
assert "decode" in gpus[0][2] and "prefill" in gpus[1][2], gpus
print("ps: gpu 0 decodes, gpu 1 prefills")'
tandem ps
pids_of() { ps_json '
import json, sys
procs = json.load(sys.stdin)["runs"][0]["processes"]
print(",".join(str(p["pid"]) for want in sys.argv[1].split(",") for p in procs
               if "%s:%d" % (p["role"], p["index"]) == want))' "$1"; }
victims=$(pids_of gpu:1,gpu:0,expert:0)
coordinator=$(pids_of coordinator:0)
[[ "$victims" =~ ^[0-9]+,[0-9]+,[0-9]+$ && -n "$coordinator" ]] ||
  { echo "pids from tandem ps: victims '$victims', coordinator '$coordinator'"; exit 1; }
cp "$(dirname "$0")/npm/openai_client.mjs" "$modules/../openai_client.mjs"
node "$modules/../openai_client.mjs" "http://127.0.0.1:$port/v1" "" "$victims" "$coordinator" ||
  { tail -20 "$work/serve.log"; for f in "$base"/run-*/*.log; do echo "== $f"; tail -15 "$f"; done; exit 1; }
# Every handoff file (sequence-*.kv) was read or removed, the coordinator's
# kill included, and the gpu workers' KV files (kv-g*.kv) went with their
# ended sequences (the releases reach the workers within the idle tick).
for _ in $(seq 1 30); do
  kv=$(find "$base" -name '*.kv' | head -3)
  [[ -z "$kv" ]] && break
  sleep 0.1
done
[[ -z "$kv" ]] || { echo "files left: $kv"; exit 1; }
handoffs=$(curl -s "http://127.0.0.1:$port/metrics" | grep '^tandem_sequence_handoffs_total' | grep -o '[0-9]*$')
[[ "${handoffs:-0}" -ge 1 ]] || { echo "no prompt was handed over (handoffs '$handoffs')"; exit 1; }
echo "handoffs since the coordinator restart: $handoffs"
grep -h "split roles" "$base"/run-*/coordinator-0.log | head -1

# scale 2 -> 3 expert workers while 4 requests run: both gpu workers move to
# the new rings, every request finishes, the old rings are gone.
clients=()
for i in 1 2 3 4; do
  curl -s -m 120 -H 'Content-Type: application/json' -d "{\"prompt\": \"Scale $i\", \"max_tokens\": 64, \"temperature\": 0}" \
    "http://127.0.0.1:$port/v1/completions" >"$work/scale-$i.json" &
  clients+=($!)
done
sleep 0.2
tandem scale expert-workers=3 || { echo "tandem scale failed"; exit 1; }
wait "${clients[@]}" || true
for i in 1 2 3 4; do
  python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); assert j["choices"][0]["finish_reason"] == "length", j' \
    "$work/scale-$i.json" || { echo "request $i during scale: $(cat "$work/scale-$i.json")"; exit 1; }
done
rings=$(cd "$base"/run-* && ls experts* | tr '\n' ' ')
[[ "$rings" == "experts.1-0.req experts.1-0.res experts.1-1.req experts.1-1.res experts.1-2.req experts.1-2.res experts.1.g1-0.req experts.1.g1-0.res experts.1.g1-1.req experts.1.g1-1.res experts.1.g1-2.req experts.1.g1-2.res " ]] ||
  { echo "rings after scale: $rings"; exit 1; }
echo "scaled to 3 expert workers during 4 requests"

tandem stop --timeout 20 || { echo "tandem stop failed"; exit 1; }
wait "$pid" || { echo "serve exited with $?"; tail -20 "$work/serve.log"; exit 1; }
pid=
left=$(find "$base" -mindepth 1 -not -path "$base/logs*" | head -5)
[[ -z "$left" ]] || { echo "left behind: $left"; exit 1; }
for f in gpu-0 gpu-1; do
  ls "$base"/logs/run-*/"$f.log" >/dev/null 2>&1 || { echo "$f.log was not kept"; exit 1; }
done
echo "serve_split_test: ok"
